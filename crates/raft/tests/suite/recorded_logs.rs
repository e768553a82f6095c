//! Recorded logs replayed into golden state digests (issue 32): a build must apply every log
//! an earlier build committed into the very same states, or replicas of two builds part
//! during a rolling upgrade. Each log in `tests/logs` was recorded once, by the simulator
//! running a scenario under one apply behaviour (`NAME.bV.log`: the commands, bincode), and
//! `digests.txt` holds the SHA-256 of the state after every `EVERY` commands and at the end,
//! as the build that recorded it computed them. Neither is ever rewritten: a change that
//! makes a replay differ changed what an existing command does (put it behind a new
//! behaviour, `baton_model::behaviour`) or the state's layout (keep the old one while the
//! new part is unused, `baton_model::format`).
//!
//! `BATON_RECORD_LOGS=1 cargo test -p baton-raft --test suite recorded_logs::` records the logs that
//! are missing (a new scenario, or a new behaviour in `BEHAVIOURS`) and appends their digests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use baton_model::behaviour;
use baton_model::{Command, Op, State};
use baton_raft::codec::{decode, encode};
use baton_raft::digest::hash_state;

/// A digest after every this many commands of a log.
const EVERY: usize = 10;

/// The behaviours logs are recorded under: each supported one.
const BEHAVIOURS: &[u32] = &[
    behaviour::BASELINE,
    behaviour::PER_USER_REQUEST_IDS,
    behaviour::RANK_SAVES,
    behaviour::SLICES_ARE_GPUS,
    behaviour::LENDS_FOLLOW_RANKS,
    behaviour::RETIRED_REPLICAS,
    behaviour::ENDED_RANKS_OUTLAST_SUSPENSION,
    behaviour::ENDED_RANKS_OUTLAST_LOST_SUSPENSION,
];

/// Scenarios left out: each runs thousands of cycles of one long wait (hundreds of KiB of
/// log) with commands the others have too.
const LEFT_OUT: &[&str] = &["starving-gang", "starving-gang-never"];

/// The scenarios recorded: every other one in `examples/scenarios`. Between them they use every
/// kind of command the simulator makes (plans with placements, preemptions, suspensions and
/// growths, reports of every kind, ticks, arrays, dependencies, elastic gangs, maintenance,
/// unhealthy GPUs, usage and per-user limits, lost nodes, queue updates).
fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| !LEFT_OUT.iter().any(|l| p.file_stem().is_some_and(|s| s == *l)))
        .collect();
    all.sort();
    all
}

fn logs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/logs")
}

fn hex(sha256: &[u8; 32]) -> String {
    sha256.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digests of replaying `log` from the empty state: (commands applied, SHA-256).
fn replay(log: &[Command]) -> (State, Vec<(usize, String)>) {
    let mut state = State::new();
    let mut digests = Vec::new();
    for (i, cmd) in log.iter().enumerate() {
        // A refused command is part of the log too (a replica applies it and changes nothing).
        let _ = state.apply(cmd.clone());
        let applied = i + 1;
        if applied % EVERY == 0 || applied == log.len() {
            digests.push((applied, hex(&hash_state(&state).expect("a state encodes"))));
        }
    }
    (state, digests)
}

/// `digests.txt`: `NAME.bV AFTER SHA256` per line.
fn golden() -> BTreeMap<String, Vec<(usize, String)>> {
    let text = std::fs::read_to_string(logs_dir().join("digests.txt")).unwrap_or_default();
    let mut all: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [name, after, sha] = parts[..] else { panic!("digests.txt: malformed line {line:?}") };
        all.entry(name.to_string()).or_default().push((after.parse().expect("a count"), sha.to_string()));
    }
    all
}

/// Records the logs that are missing and appends their digests.
fn record_missing() {
    let known = golden();
    let mut lines = String::new();
    for file in scenarios() {
        let scenario = file.file_stem().unwrap().to_string_lossy().into_owned();
        for &v in BEHAVIOURS {
            let name = format!("{scenario}.b{v}");
            let path = logs_dir().join(format!("{name}.log"));
            if path.exists() || known.contains_key(&name) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let prelude = if v > behaviour::BASELINE { vec![Op::SetBehaviour(v)] } else { Vec::new() };
            let log = baton_sim::record(&file.display().to_string(), &text, prelude).expect("the scenario runs");
            std::fs::write(&path, encode(&log).unwrap()).unwrap();
            for (after, sha) in replay(&log).1 {
                lines.push_str(&format!("{name} {after} {sha}\n"));
            }
        }
    }
    let mut text = std::fs::read_to_string(logs_dir().join("digests.txt")).unwrap_or_default();
    text.push_str(&lines);
    std::fs::write(logs_dir().join("digests.txt"), text).unwrap();
}

/// The behaviour a log's name says it was recorded under (`NAME.bV`).
fn behaviour_of(name: &str) -> u32 {
    let (_, v) = name.rsplit_once(".b").unwrap_or_else(|| panic!("{name}: a log is named NAME.bV"));
    v.parse().unwrap_or_else(|_| panic!("{name}: a log is named NAME.bV"))
}

#[test]
fn every_recorded_log_replays_into_its_golden_digests() {
    if std::env::var_os("BATON_RECORD_LOGS").is_some() {
        record_missing();
    }
    let golden = golden();
    let mut files: Vec<String> = std::fs::read_dir(logs_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".log").map(str::to_string))
        .collect();
    files.sort();
    let named: Vec<String> = golden.keys().cloned().collect();
    assert_eq!(files, named, "each recorded log has its digests in digests.txt, and each digest its log");
    for &v in BEHAVIOURS {
        assert!(files.iter().any(|f| behaviour_of(f) == v), "no log is recorded under behaviour {v}");
    }
    for (name, want) in &golden {
        let bytes = std::fs::read(logs_dir().join(format!("{name}.log"))).unwrap();
        let log: Vec<Command> = decode(&bytes).unwrap_or_else(|e| panic!("{name}: the log no longer decodes: {e}"));
        let (state, got) = replay(&log);
        assert_eq!(state.behaviour(), behaviour_of(name), "{name} replays under its behaviour");
        assert_eq!(got.len(), want.len(), "{name}: as many digests as recorded");
        for ((after, want), (_, got)) in want.iter().zip(&got) {
            assert_eq!(
                got,
                want,
                "{name}: the state after {after} of {} commands differs from the one the recording build made",
                log.len()
            );
        }
    }
}
