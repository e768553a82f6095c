//! Totals over several runs: each run's counts as a JSON file (`baton-chaos --json FILE`),
//! and their sum (`baton-chaos sum FILE...`, or `--runs N`, which runs N seeds at once and
//! sums them): faults by kind, by protocol state and by both, jobs, violations, and per seed
//! whether it held.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::Report;
use crate::faults::Moment;
use crate::faults::{LEADER_KILL, NEW_KINDS, PARTITION_KINDS};

/// One run's line in a sum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLine {
    pub seed: u64,
    pub faults: u64,
    /// Leader kills that landed right after a preemption committed.
    pub kills_after_preemption: u64,
    pub violations: u64,
    /// Seconds from the run's start to its verdict (faults, then the jobs' drain).
    pub wall_s: f64,
}

/// Counts of one run, or of several summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub runs: Vec<RunLine>,
    /// What each run drew from (`Mix::describe`), with how many runs drew from it.
    pub mixes: BTreeMap<String, u64>,
    /// Seconds of fault injection, all runs together.
    pub seconds: u64,
    pub faults: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub by_moment: BTreeMap<String, u64>,
    /// Fault kind, then the protocol state it landed in.
    pub by_kind_and_moment: BTreeMap<String, BTreeMap<String, u64>>,
    pub acknowledged: u64,
    pub succeeded: u64,
    pub cancelled: u64,
    pub rerun: u64,
    pub starts: u64,
    pub resumed: u64,
    pub redone: u64,
    /// Jobs suspended in place, and of those resumed in place (absent from the files of
    /// runs made before they were counted).
    #[serde(default)]
    pub suspensions: u64,
    #[serde(default)]
    pub resumed_in_place: u64,
    /// Jobs that misbehave, by way (absent from the files of runs made before they were).
    #[serde(default)]
    pub misbehaving: BTreeMap<String, u64>,
    /// Nodes the harness fixed after an unkillable process, and the frozen processes it
    /// thawed there (absent from the files of runs made before they were counted).
    #[serde(default)]
    pub nodes_fixed: u64,
    #[serde(default)]
    pub thawed: u64,
    /// Starts held against the commit at the state index their directive named, and those
    /// that could not be (absent from the files of runs made before the check).
    #[serde(default)]
    pub commit_judged: u64,
    #[serde(default)]
    pub commit_unjudged: u64,
    /// Each violation, after the seed of its run.
    pub violations: Vec<String>,
}

fn n(x: usize) -> u64 {
    x as u64
}

impl Tally {
    /// The counts of `report`, the run of `seed`, which took `wall_s` in all.
    pub fn of(report: &Report, seed: u64, wall_s: f64) -> Tally {
        let mut by_kind_and_moment: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((kind, moment), count) in &report.faults_by_kind_and_moment {
            *by_kind_and_moment.entry(kind.to_string()).or_default().entry(moment.to_string()).or_default() +=
                n(*count);
        }
        let mut t = Tally {
            runs: Vec::new(),
            mixes: [(report.mix.describe().to_string(), 1)].into(),
            seconds: report.seconds,
            faults: n(report.faults.len()),
            by_kind: report.faults_by_kind.iter().map(|(k, c)| (k.to_string(), n(*c))).collect(),
            by_moment: report.faults_by_moment.iter().map(|(m, c)| (m.to_string(), n(*c))).collect(),
            by_kind_and_moment,
            acknowledged: n(report.acknowledged),
            succeeded: n(report.succeeded),
            cancelled: n(report.cancelled),
            rerun: n(report.rerun),
            starts: n(report.starts),
            resumed: n(report.resumed),
            redone: n(report.redone.len()),
            suspensions: n(report.suspensions),
            resumed_in_place: n(report.resumed_in_place),
            misbehaving: report.misbehaving.iter().map(|(w, c)| (w.to_string(), n(*c))).collect(),
            nodes_fixed: n(report.repaired_nodes),
            thawed: n(report.thawed),
            commit_judged: n(report.commit_judged),
            commit_unjudged: n(report.commit_unjudged),
            violations: report.violations.iter().map(|v| format!("seed {seed}: {v}")).collect(),
        };
        t.runs.push(RunLine {
            seed,
            faults: t.faults,
            kills_after_preemption: t.kills_after_preemption(),
            violations: n(report.violations.len()),
            wall_s,
        });
        t
    }

    /// A run that gave no report (it failed to start, or died): a violation of its seed.
    pub fn no_report(seed: u64, why: &str) -> Tally {
        Tally {
            runs: vec![RunLine { seed, faults: 0, kills_after_preemption: 0, violations: 1, wall_s: 0.0 }],
            violations: vec![format!("seed {seed}: no report: {why}")],
            ..Tally::default()
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Tally) {
        self.runs.extend(other.runs.iter().cloned());
        self.runs.sort_by_key(|r| r.seed);
        for (k, c) in &other.mixes {
            *self.mixes.entry(k.clone()).or_default() += c;
        }
        self.seconds += other.seconds;
        self.faults += other.faults;
        for (k, c) in &other.by_kind {
            *self.by_kind.entry(k.clone()).or_default() += c;
        }
        for (m, c) in &other.by_moment {
            *self.by_moment.entry(m.clone()).or_default() += c;
        }
        for (k, moments) in &other.by_kind_and_moment {
            let mine = self.by_kind_and_moment.entry(k.clone()).or_default();
            for (m, c) in moments {
                *mine.entry(m.clone()).or_default() += c;
            }
        }
        self.acknowledged += other.acknowledged;
        self.succeeded += other.succeeded;
        self.cancelled += other.cancelled;
        self.rerun += other.rerun;
        self.starts += other.starts;
        self.resumed += other.resumed;
        self.suspensions += other.suspensions;
        self.resumed_in_place += other.resumed_in_place;
        self.redone += other.redone;
        for (w, c) in &other.misbehaving {
            *self.misbehaving.entry(w.clone()).or_default() += c;
        }
        self.nodes_fixed += other.nodes_fixed;
        self.thawed += other.thawed;
        self.commit_judged += other.commit_judged;
        self.commit_unjudged += other.commit_unjudged;
        self.violations.extend(other.violations.iter().cloned());
    }

    /// Leader kills (a single kill, not the double one) that landed right after a preemption
    /// committed: the count issue 9 asks 1,000 of.
    pub fn kills_after_preemption(&self) -> u64 {
        self.by_kind_and_moment
            .get(LEADER_KILL)
            .and_then(|m| m.get(Moment::AfterPreemption.name()))
            .copied()
            .unwrap_or(0)
    }

    /// The partition kinds issue 9 names, with how many faults of each (a kind may count
    /// several of `Fault::kind`'s, as a replica cut off counts the leader and a follower).
    pub fn partitions(&self) -> Vec<(&'static str, u64)> {
        PARTITION_KINDS
            .iter()
            .map(|(name, kinds)| (*name, kinds.iter().map(|k| self.by_kind.get(*k).copied().unwrap_or(0)).sum()))
            .collect()
    }

    /// Faults of the kinds issue 31 adds (journal wipes, node reboots, leader clock jumps,
    /// whole nodes frozen):
    /// the count it asks 500 of.
    pub fn new_kinds(&self) -> u64 {
        NEW_KINDS.iter().map(|k| self.by_kind.get(*k).copied().unwrap_or(0)).sum()
    }

    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a tally is plain data")
    }

    pub fn read(path: &Path) -> Result<Tally, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{} is no run's counts: {e}", path.display()))
    }

    pub fn write(&self, path: &Path) -> Result<(), String> {
        std::fs::write(path, self.to_json()).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} runs, {} s of faults in all, {} faults", self.runs.len(), self.seconds, self.faults)?;
        for (mix, runs) in &self.mixes {
            let n = if *runs == 1 { "1 run".to_string() } else { format!("{runs} runs") };
            writeln!(f, "  {n} with {mix}")?;
        }
        writeln!(f, "leader kills right after a preemption: {}", self.kills_after_preemption())?;
        let parts = self.partitions();
        if parts.iter().any(|(_, c)| *c > 0) {
            writeln!(f, "partitions of issue 9's kinds:")?;
            for (name, c) in &parts {
                writeln!(f, "  {c:>5}  {name}")?;
            }
        }
        writeln!(
            f,
            "faults of issue 31's kinds (journal wipes, node reboots, leader clock jumps, whole nodes frozen): {}",
            self.new_kinds()
        )?;
        writeln!(f, "faults by kind:")?;
        for (kind, c) in &self.by_kind {
            writeln!(f, "  {c:>5}  {kind}")?;
        }
        writeln!(f, "faults by protocol state:")?;
        for (moment, c) in &self.by_moment {
            writeln!(f, "  {c:>5}  {moment}")?;
        }
        writeln!(f, "faults by kind and protocol state:")?;
        for (kind, moments) in &self.by_kind_and_moment {
            for (moment, c) in moments {
                writeln!(f, "  {c:>5}  {kind} [{moment}]")?;
            }
        }
        writeln!(
            f,
            "jobs: {} acknowledged, {} succeeded, {} cancelled, {} ran more than once; {} replica starts, {} resumed from a checkpoint; {} starts from zero after a node loss (work redone); {} suspended in place, {} resumed in place",
            self.acknowledged,
            self.succeeded,
            self.cancelled,
            self.rerun,
            self.starts,
            self.resumed,
            self.redone,
            self.suspensions,
            self.resumed_in_place
        )?;
        writeln!(
            f,
            "starts held against the commit at their directive's state: {} ({} could not be: compacted or unnamed)",
            self.commit_judged, self.commit_unjudged
        )?;
        if !self.misbehaving.is_empty() {
            let ways: Vec<String> = self.misbehaving.iter().map(|(w, c)| format!("{c} {w}")).collect();
            writeln!(f, "misbehaving jobs: {}", ways.join(", "))?;
        }
        if self.nodes_fixed > 0 {
            let (nodes, thawed) = (self.nodes_fixed, self.thawed);
            writeln!(f, "unkillable processes: {nodes} nodes fixed by the harness, {thawed} frozen processes thawed")?;
        }
        writeln!(f, "per seed (faults, leader kills right after a preemption, violations, wall time):")?;
        for r in &self.runs {
            writeln!(
                f,
                "  seed {:<6} {:>4} faults {:>4} kills {:>3} violations {:>6.0} s",
                r.seed, r.faults, r.kills_after_preemption, r.violations, r.wall_s
            )?;
        }
        if self.violations.is_empty() {
            writeln!(f, "no violation in any run")
        } else {
            writeln!(f, "{} violations:", self.violations.len())?;
            for v in &self.violations {
                writeln!(f, "  {v}")?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Mix;

    fn tally(seed: u64, kills: u64, cuts: u64, violations: &[&str]) -> Tally {
        let mut t = Tally {
            mixes: [(Mix::PreemptionKills.describe().to_string(), 1)].into(),
            seconds: 120,
            faults: kills + cuts,
            by_kind: [
                (LEADER_KILL.to_string(), kills),
                ("cut off a follower".to_string(), cuts),
                (NEW_KINDS[1].to_string(), 1),
                (NEW_KINDS[2].to_string(), 2),
            ]
            .into(),
            by_moment: [(Moment::AfterPreemption.name().to_string(), kills + cuts)].into(),
            by_kind_and_moment: [(
                LEADER_KILL.to_string(),
                [(Moment::AfterPreemption.name().to_string(), kills)].into(),
            )]
            .into(),
            acknowledged: 10,
            succeeded: 9,
            cancelled: 1,
            suspensions: 3,
            resumed_in_place: 2,
            misbehaving: [("escape".to_string(), 1), ("ignore-stop".to_string(), 2)].into(),
            nodes_fixed: 2,
            thawed: 3,
            violations: violations.iter().map(|v| format!("seed {seed}: {v}")).collect(),
            ..Tally::default()
        };
        t.runs.push(RunLine {
            seed,
            faults: t.faults,
            kills_after_preemption: kills,
            violations: violations.len() as u64,
            wall_s: 150.0,
        });
        t
    }

    #[test]
    fn sums_add_every_count_and_keep_each_seeds_line() {
        let mut sum = Tally::default();
        sum.add(&tally(101, 7, 2, &[]));
        sum.add(&tally(100, 5, 1, &["train-3 ran twice"]));
        assert_eq!(sum.kills_after_preemption(), 12);
        assert_eq!(sum.faults, 15);
        assert_eq!(sum.seconds, 240);
        assert_eq!(sum.acknowledged, 20);
        assert_eq!(sum.mixes[Mix::PreemptionKills.describe()], 2);
        assert_eq!(sum.runs.iter().map(|r| r.seed).collect::<Vec<_>>(), [100, 101], "by seed");
        assert_eq!(sum.partitions().iter().find(|(k, _)| k.starts_with("a replica")).map(|(_, c)| *c), Some(3));
        assert!(!sum.ok());
        let text = sum.to_string();
        assert!(text.contains("leader kills right after a preemption: 12"), "{text}");
        assert_eq!(sum.new_kinds(), 6, "a reboot and two clock jumps in each run");
        assert!(text.contains("whole nodes frozen): 6"), "{text}");
        assert!(text.contains("seed 100: train-3 ran twice"), "{text}");
        assert!(text.contains("6 suspended in place, 4 resumed in place"), "{text}");
        assert!(text.contains("misbehaving jobs: 2 escape, 4 ignore-stop"), "{text}");
        assert!(
            text.contains("unkillable processes: 4 nodes fixed by the harness, 6 frozen processes thawed"),
            "{text}"
        );
    }

    #[test]
    fn a_tally_reads_back_as_written_and_a_missing_report_is_a_violation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seed-1.json");
        let t = tally(1, 3, 0, &[]);
        t.write(&path).unwrap();
        assert_eq!(Tally::read(&path).unwrap(), t);
        std::fs::write(&path, "{").unwrap();
        assert!(Tally::read(&path).unwrap_err().contains("no run's counts"));
        // A run's counts from before suspensions were counted still read.
        let mut old: serde_json::Value = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        old.as_object_mut().unwrap().remove("suspensions");
        std::fs::write(&path, old.to_string()).unwrap();
        assert_eq!(Tally::read(&path).unwrap().suspensions, 0);
        let lost = Tally::no_report(4, "exit status 101");
        assert!(!lost.ok() && lost.runs[0].seed == 4);
    }
}
