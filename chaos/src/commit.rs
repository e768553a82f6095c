//! The placement check against the commit, without clocks: every witnessed start names the
//! replicated state its directive was computed from (`BATON_STATE_INDEX`, a count of applied
//! commands), and that state, rebuilt from the raft log, must run that attempt with that
//! rank on that node. A leader that published a list the commit does not hold (a stale
//! cache, a list from an uncommitted plan), or an agent that started what no list asked,
//! fails it whatever the clocks say; the event-based check (`check::placed_before_start`)
//! judges when, this one judges what.
//!
//! After the run the replicas are stopped and the most committed one's log is read (at
//! quiescence every replica is at one index, so any would do); its snapshot, if it took one,
//! is where the replay begins, and starts asked for by a state older than that cannot be
//! judged: they are counted apart, as are starts whose record names no state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_model::command::Command;
use baton_model::job::JobState;
use baton_model::state::State;
use baton_raft::store::{LogStore, SledKv, StoredSnapshot};
use openraft::EntryPayload;
use openraft::storage::{RaftLogReader, RaftLogStorage};

use crate::check::WitnessedStart;

/// Log entries the check reads at most: a 600 s run commits some tens of thousands.
pub const MAX_ENTRIES: u64 = 2_000_000;

/// A replica's committed history: the state its snapshot held (or the empty state), and
/// every committed command after it, in order.
pub struct Commit {
    pub base: State,
    pub commands: Vec<Command>,
    /// Where it was read from, for the report.
    pub from: PathBuf,
}

impl Commit {
    /// No command committed: what a replica that never committed one holds.
    pub fn empty() -> Commit {
        Commit { base: State::new(), commands: Vec::new(), from: PathBuf::new() }
    }
    /// The state index the replay begins at (what a snapshot compacted is before it).
    pub fn first_index(&self) -> u64 {
        self.base.applied()
    }
    /// The state index it ends at.
    pub fn last_index(&self) -> u64 {
        self.base.applied() + self.commands.len() as u64
    }
}

/// Reads each stopped replica's data directory and keeps the one that committed most.
pub async fn read_most_committed(dirs: &[PathBuf]) -> Result<Commit, String> {
    let mut best: Option<Commit> = None;
    let mut errors = Vec::new();
    for dir in dirs {
        match read(dir).await {
            Ok(c) if best.as_ref().is_none_or(|b| c.last_index() > b.last_index()) => best = Some(c),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    best.ok_or_else(|| format!("no replica's log could be read: {}", errors.join("; ")))
}

/// A stopped replica's committed history (`DIR/raft.sled`).
pub async fn read(dir: &Path) -> Result<Commit, String> {
    let at = dir.join("raft.sled");
    let kv = Arc::new(SledKv::open(&at).map_err(|e| format!("{}: {e}", at.display()))?);
    let snapshot = StoredSnapshot::load(kv.as_ref()).map_err(|e| format!("{}: {e}", at.display()))?;
    let (base, after) = match snapshot {
        Some(s) => {
            let state = baton_raft::codec::decode_state(&s.data)
                .map_err(|e| format!("{}: its snapshot does not decode: {e}", at.display()))?;
            (state, s.meta.last_log_id.map_or(0, |id| id.index))
        }
        None => (State::new(), 0),
    };
    let mut log = LogStore::open(kv, 16).map_err(|e| format!("{}: {e}", at.display()))?;
    let committed = log.read_committed().await.map_err(|e| format!("{}: {e}", at.display()))?;
    let Some(committed) = committed.map(|id| id.index) else {
        return Ok(Commit { base, from: dir.to_path_buf(), ..Commit::empty() });
    };
    if committed.saturating_sub(after) > MAX_ENTRIES {
        return Err(format!("{}: {} entries past its snapshot, over {MAX_ENTRIES}", at.display(), committed - after));
    }
    let entries = log.try_get_log_entries(after + 1..=committed).await.map_err(|e| format!("{}: {e}", at.display()))?;
    if entries.first().is_some_and(|e| e.log_id.index != after + 1) {
        return Err(format!("{}: its log starts past its snapshot (at {})", at.display(), entries[0].log_id.index));
    }
    let mut commands = Vec::new();
    for e in entries {
        if let EntryPayload::Normal(batch) = e.payload {
            commands.extend(batch.commands);
        }
    }
    Ok(Commit { base, commands, from: dir.to_path_buf() })
}

/// What the check found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Judged {
    pub judged: usize,
    /// Starts it could not judge: asked for by a state a snapshot compacted, past the log
    /// read, or whose record names no state.
    pub unjudged: usize,
    pub violations: Vec<String>,
}

/// Replays `commit` and holds every start against the state it names.
pub fn judge(starts: &[WitnessedStart], commit: &Commit) -> Judged {
    let mut out = Judged::default();
    let (first, last) = (commit.first_index(), commit.last_index());
    let mut due: Vec<(u64, &WitnessedStart)> = starts
        .iter()
        .filter_map(|s| s.state_index.map(|i| (i, s)))
        .filter(|(i, _)| (first..=last).contains(i))
        .collect();
    out.unjudged = starts.len() - due.len();
    due.sort_by_key(|(i, _)| *i);
    let mut due = due.into_iter().peekable();
    let mut state = commit.base.clone();
    let mut commands = commit.commands.iter();
    loop {
        while let Some((_, s)) = due.next_if(|(i, _)| *i == state.applied()) {
            out.judged += 1;
            if let Err(why) = placed(&state, s) {
                out.violations.push(why);
            }
        }
        let Some(c) = commands.next() else { break };
        // A command the model refuses changes nothing but its count, as on the replicas.
        let _ = state.apply(c.clone());
    }
    out
}

/// Whether `state` runs `s`'s attempt with its rank on its node; else what it holds.
fn placed(state: &State, s: &WitnessedStart) -> Result<(), String> {
    let index = state.applied();
    let who = format!(
        "{} attempt {} rank {} started on {} under state index {index}",
        s.start.job, s.start.attempt, s.rank, s.node
    );
    let Some(job) = state.job_by_name(&s.start.job) else {
        return Err(format!("{who}, where the commit has no such job"));
    };
    if job.state != JobState::Running || job.attempt != s.start.attempt {
        return Err(format!("{who}, where the commit has attempt {} {}", job.attempt, job.state.as_str()));
    }
    let ranked = job.ranked();
    let node = s.rank.parse::<usize>().ok().and_then(|r| ranked.get(r)).map(|r| r.node.as_str());
    match node {
        Some(n) if n == s.node => Ok(()),
        Some(n) => Err(format!("{who}, where the commit places that rank on {n}")),
        None => Err(format!("{who}, where the commit's attempt has {} ranks", ranked.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Start;
    use baton_model::alloc::ReplicaAlloc;
    use baton_model::command::Op;
    use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
    use baton_model::name::Name;
    use baton_model::plan::{Decision, Plan};

    fn start(job: &str, attempt: u32, node: &str, state_index: Option<u64>) -> WitnessedStart {
        WitnessedStart {
            start: Start { job: job.into(), attempt, at_ms: 0 },
            rank: "0".into(),
            node: node.into(),
            first_step: 0,
            resume: false,
            launched_ms: None,
            kernel_born_ms: None,
            state_index,
        }
    }

    fn at(now_ms: u64, op: Op) -> Command {
        Command { now_ms, op }
    }

    /// Two nodes and a queue; a job submitted by the third command and placed on n1 by the
    /// fourth (a plan spelled out, not a cycle's: the check must not share the scheduler's view).
    fn placed_on_n1() -> Commit {
        let mut commands = vec![
            at(1_000, Op::RegisterNodes(vec![gpu_node("n1", 4), gpu_node("n2", 4)])),
            at(1_000, Op::PutQueue(gpu_queue("q", 8))),
            at(2_000, Op::Submit { spec: gpu_job("train", "q", 2), request_id: None }),
        ];
        let mut s = State::new();
        for c in &commands {
            s.apply(c.clone()).expect("the setup applies");
        }
        let job = s.job_by_name("train").expect("submitted").id;
        let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![0, 1] }];
        let place = Decision::Place { job, attempt: 1, replicas };
        commands.push(at(2_000, Op::ApplyPlan(Plan { based_on: 3, decisions: vec![place] })));
        Commit { base: State::new(), commands, from: PathBuf::new() }
    }

    #[test]
    fn a_start_is_judged_by_the_state_it_names() {
        let commit = placed_on_n1();
        let starts = [
            start("train", 1, "n1", Some(4)),
            start("train", 1, "n1", Some(3)),
            start("train", 1, "n2", Some(4)),
            start("train", 2, "n1", Some(4)),
            start("other", 1, "n1", Some(4)),
            start("train", 1, "n1", Some(5)),
            start("train", 1, "n1", None),
        ];
        let judged = judge(&starts, &commit);
        assert_eq!((judged.judged, judged.unjudged), (5, 2), "{:?}", judged.violations);
        assert_eq!(
            judged.violations,
            [
                "train attempt 1 rank 0 started on n1 under state index 3, where the commit has attempt 0 Pending",
                "train attempt 1 rank 0 started on n2 under state index 4, where the commit places that rank on n1",
                "train attempt 2 rank 0 started on n1 under state index 4, where the commit has attempt 1 Running",
                "other attempt 1 rank 0 started on n1 under state index 4, where the commit has no such job",
            ]
        );
    }
}
