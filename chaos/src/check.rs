//! The verdict of a chaos run, from what the jobs witnessed, how they ended, which protocol
//! states the faults landed in, and the history of client operations.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use baton_proto::v1::{Event, EventKind, Job, JobState};
use baton_proto::words::Word;

use crate::faults::{Fault, Mix, Moment};
use crate::history::{self, Op, Start, Summary};

/// A run at least this long must have a fault land in a non-idle protocol state.
pub const MIN_SECONDS_FOR_MOMENTS: u64 = 60;

/// The witness's line for a start from zero although the gang had a whole checkpoint.
const STARTED_FROM_ZERO: &str = "started from zero although every rank wrote a checkpoint";

/// A fault as injected: when (seconds into the run), what, and the protocol state it
/// landed in.
#[derive(Debug, Clone)]
pub struct Landed {
    pub at_s: f64,
    pub fault: Fault,
    pub moment: Moment,
}

/// What the run produced, to judge.
pub struct Evidence<'a> {
    pub seconds: u64,
    /// Which faults the run drew from.
    pub mix: Mix,
    /// Replica `i`'s wall clock offset (seconds; none or 0: true).
    pub clock_offsets_s: &'a [i64],
    pub faults: &'a [Landed],
    /// The final state of every job the cluster lists.
    pub jobs: &'a [Job],
    /// The directory the workloads recorded into.
    pub witness: &'a Path,
    pub ops: &'a [Op],
    /// (job, attempt) of attempts placed after a requeue because the job's node was lost or
    /// its lease ran out (from the jobs' events, `attempts_after_node_loss`).
    pub after_node_loss: &'a BTreeSet<(String, u32)>,
    /// Slack for a start after an acknowledged cancel (see `history::check_cancels`).
    pub cancel_slack_ms: u64,
}

pub struct Report {
    pub seconds: u64,
    pub mix: Mix,
    pub clock_offsets_s: Vec<i64>,
    pub faults: Vec<String>,
    pub faults_by_kind: BTreeMap<&'static str, usize>,
    pub faults_by_moment: BTreeMap<&'static str, usize>,
    /// Each kind of fault by the protocol state it landed in (a leader kill right after a
    /// preemption, a deposed leader while a stop was in flight, ...).
    pub faults_by_kind_and_moment: BTreeMap<(&'static str, &'static str), usize>,
    /// Jobs whose submit the cluster acknowledged.
    pub acknowledged: usize,
    pub succeeded: usize,
    pub cancelled: usize,
    /// Jobs that ran more than one attempt (preempted, or requeued).
    pub rerun: usize,
    /// Replica starts that resumed from a checkpoint (first step above 0).
    pub resumed: usize,
    pub starts: usize,
    /// Starts from zero after a node loss although a checkpoint had been written: work done
    /// again, a known limit (docs/protocol.md, "The timing argument"), not a broken promise.
    pub redone: Vec<String>,
    pub history: Summary,
    /// Broken promises; empty for a good run.
    pub violations: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn judge(e: &Evidence) -> Report {
        let (mut violations, redone) = witnessed(e.witness, e.after_node_loss);
        let acked = acknowledged(e.ops);
        let cancelled_ok = cancel_tried(e.ops);
        let by_name: BTreeMap<&str, &Job> =
            e.jobs.iter().filter_map(|j| j.spec.as_ref().map(|s| (s.name.as_str(), j))).collect();
        let (mut succeeded, mut cancelled) = (0, 0);
        for name in &acked {
            match by_name.get(name.as_str()) {
                None => violations.push(format!("acknowledged job {name} is lost: the cluster does not list it")),
                Some(j) if j.state() == JobState::Succeeded => succeeded += 1,
                Some(j) if j.state() == JobState::Cancelled && cancelled_ok.contains(name) => cancelled += 1,
                Some(j) => violations.push(format!(
                    "acknowledged job {name} did not succeed: {} after attempt {} ({})",
                    j.state().word(),
                    j.attempt,
                    j.reason
                )),
            }
        }
        let starts = read_starts(e.witness, &mut violations);
        let resumed = starts.iter().filter(|s| s.first_step > 0).count();
        violations.extend(started_twice(&starts));
        let listed = count_names(e.jobs);
        violations.extend(history::check_submits(e.ops, &listed));
        let plain: Vec<Start> = starts.iter().map(|s| s.start.clone()).collect();
        let cancels = history::check_cancels(e.ops, &plain, e.cancel_slack_ms);
        violations.extend(cancels.violations);
        let faults_by_moment = count(e.faults.iter().map(|l| l.moment.name()));
        violations.extend(vacuous(e, resumed));
        Report {
            seconds: e.seconds,
            mix: e.mix,
            clock_offsets_s: e.clock_offsets_s.to_vec(),
            faults: e.faults.iter().map(|l| format!("{:>6.1} s  {} [{}]", l.at_s, l.fault, l.moment.name())).collect(),
            faults_by_kind: count(e.faults.iter().map(|l| l.fault.kind())),
            faults_by_moment,
            faults_by_kind_and_moment: count(e.faults.iter().map(|l| (l.fault.kind(), l.moment.name()))),
            acknowledged: acked.len(),
            succeeded,
            cancelled,
            rerun: e.jobs.iter().filter(|j| j.attempt > 1).count(),
            resumed,
            starts: starts.len(),
            redone,
            history: history::summary(e.ops, cancels.raced),
            violations,
        }
    }
}

/// The witnesses' violations, less the starts from zero of attempts placed after a node
/// loss (see `Report::redone`).
fn witnessed(witness: &Path, after_node_loss: &BTreeSet<(String, u32)>) -> (Vec<String>, Vec<String>) {
    read_lines(&witness.join("violations")).into_iter().partition(|line| {
        let known = line.contains(STARTED_FROM_ZERO)
            && attempt_of_violation(line).is_some_and(|(j, a)| after_node_loss.contains(&(j.to_string(), a)));
        !known
    })
}

/// The job and attempt a witness line names: `... (JOB attempt N rank R)`.
pub fn attempt_of_violation(line: &str) -> Option<(&str, u32)> {
    let who = line.rsplit_once('(')?.1;
    let mut words = who.split_whitespace();
    let job = words.next()?;
    let attempt = words.nth(1)?.parse().ok()?;
    Some((job, attempt))
}

/// The attempts of a job, from its events in order, that were placed after a requeue
/// because its node was lost or its lease ran out.
pub fn attempts_after_node_loss(events: &[Event]) -> BTreeSet<u32> {
    let mut found = BTreeSet::new();
    let mut lost = false;
    for e in events {
        match e.kind() {
            EventKind::Requeued if e.message.contains("was lost") || e.message.contains("lease") => lost = true,
            EventKind::Started => {
                if lost {
                    found.insert(e.attempt);
                }
                lost = false;
            }
            _ => {}
        }
    }
    found
}

/// Request ids of the submits the cluster acknowledged, in order.
fn acknowledged(ops: &[Op]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ops.iter()
        .filter(|o| o.kind == history::OpKind::Submit && o.outcome == history::Outcome::Ok)
        .filter(|o| seen.insert(o.key.clone()))
        .map(|o| o.key.clone())
        .collect()
}

/// Jobs a cancel was tried for, whatever came of it: they may end Cancelled.
fn cancel_tried(ops: &[Op]) -> BTreeSet<String> {
    ops.iter().filter(|o| o.kind == history::OpKind::Cancel).map(|o| o.key.clone()).collect()
}

fn count_names(jobs: &[Job]) -> BTreeMap<String, usize> {
    count(jobs.iter().filter_map(|j| j.spec.as_ref()).map(|s| s.name.clone()))
}

fn count<K: Ord>(keys: impl Iterator<Item = K>) -> BTreeMap<K, usize> {
    let mut n = BTreeMap::new();
    for k in keys {
        *n.entry(k).or_default() += 1;
    }
    n
}

struct WitnessedStart {
    start: Start,
    rank: String,
    first_step: u64,
}

/// `DIR/starts`: `job attempt rank node first-step at-ms`.
fn read_starts(witness: &Path, violations: &mut Vec<String>) -> Vec<WitnessedStart> {
    let mut starts = Vec::new();
    for line in read_lines(&witness.join("starts")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = match f[..] {
            [job, attempt, rank, _node, first, at_ms] => (|| {
                let start = Start { job: job.into(), attempt: attempt.parse().ok()?, at_ms: at_ms.parse().ok()? };
                Some(WitnessedStart { start, rank: rank.into(), first_step: first.parse().ok()? })
            })(),
            _ => None,
        };
        match parsed {
            Some(s) => starts.push(s),
            None => violations.push(format!("unreadable start record {line:?}")),
        }
    }
    starts
}

fn started_twice(starts: &[WitnessedStart]) -> Vec<String> {
    let seen = count(starts.iter().map(|s| (s.start.job.as_str(), s.start.attempt, s.rank.as_str())));
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|((job, attempt, rank), n)| format!("{job} attempt {attempt} rank {rank} started {n} times"))
        .collect()
}

/// A run that injected nothing, preempted nothing, or (when long enough) only struck while
/// nothing happened proves nothing.
fn vacuous(e: &Evidence, resumed: usize) -> Vec<String> {
    let mut v = Vec::new();
    if e.faults.is_empty() {
        v.push("the run proved nothing: no fault was injected".into());
    }
    if resumed == 0 {
        v.push("the run proved nothing: no job resumed from a checkpoint".into());
    }
    if e.seconds >= MIN_SECONDS_FOR_MOMENTS && e.faults.iter().all(|l| l.moment == Moment::Idle) {
        v.push("the run proved nothing: no fault landed in a non-idle protocol state".into());
    }
    v
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chaos run of {} s: {} faults ({})", self.seconds, self.faults.len(), self.mix.describe())?;
        let offsets: Vec<String> = (self.clock_offsets_s.iter().enumerate())
            .filter(|(_, o)| **o != 0)
            .map(|(i, o)| format!("replica {} {o:+} s", i + 1))
            .collect();
        if !offsets.is_empty() {
            writeln!(f, "replica clocks offset (libfaketime): {}", offsets.join(", "))?;
        }
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        writeln!(f, "faults by kind:")?;
        for (kind, n) in &self.faults_by_kind {
            writeln!(f, "  {n:>4}  {kind}")?;
        }
        writeln!(f, "faults by protocol state:")?;
        for (moment, n) in &self.faults_by_moment {
            writeln!(f, "  {n:>4}  {moment}")?;
        }
        writeln!(f, "faults by kind and protocol state:")?;
        for ((kind, moment), n) in &self.faults_by_kind_and_moment {
            writeln!(f, "  {n:>4}  {kind} [{moment}]")?;
        }
        writeln!(
            f,
            "jobs: {} acknowledged, {} succeeded, {} cancelled, {} ran more than once; {} replica starts, {} resumed from a checkpoint",
            self.acknowledged, self.succeeded, self.cancelled, self.rerun, self.starts, self.resumed
        )?;
        let h = &self.history;
        writeln!(
            f,
            "history: {} submits, {} cancels ({} acknowledged), {} tries of unknown outcome, {} starts raced a cancel",
            h.submits, h.cancels, h.cancels_acked, h.unknown, h.raced_cancel
        )?;
        if !self.redone.is_empty() {
            writeln!(f, "{} starts from zero after a node loss (work redone, a known limit):", self.redone.len())?;
            for r in &self.redone {
                writeln!(f, "  {r}")?;
            }
        }
        if self.violations.is_empty() {
            writeln!(f, "no violation: every promise held")
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

    fn landed(moment: Moment) -> Landed {
        Landed { at_s: 1.0, fault: Fault::KillAgent { name: "n1".into() }, moment }
    }

    #[test]
    fn a_long_run_whose_faults_all_landed_while_nothing_happened_is_vacuous() {
        let dir = tempfile::tempdir().unwrap();
        let none = BTreeSet::new();
        let idle = [landed(Moment::Idle), landed(Moment::Idle)];
        let evidence = |seconds, faults| Evidence {
            seconds,
            mix: Mix::All,
            clock_offsets_s: &[],
            faults,
            jobs: &[],
            witness: dir.path(),
            ops: &[],
            after_node_loss: &none,
            cancel_slack_ms: 0,
        };
        let v = vacuous(&evidence(MIN_SECONDS_FOR_MOMENTS, &idle), 1);
        assert_eq!(v, ["the run proved nothing: no fault landed in a non-idle protocol state"]);
        assert!(vacuous(&evidence(MIN_SECONDS_FOR_MOMENTS - 1, &idle), 1).is_empty(), "a short run is not judged so");
        let one_hit = [landed(Moment::Idle), landed(Moment::StopInFlight)];
        assert!(vacuous(&evidence(MIN_SECONDS_FOR_MOMENTS, &one_hit), 1).is_empty());
        assert_eq!(vacuous(&evidence(10, &[]), 0).len(), 2, "no fault, no resume");
    }

    #[test]
    fn a_witness_line_names_its_job_and_attempt() {
        let line = "started from zero although every rank wrote a checkpoint in one attempt (train-7 attempt 2 rank 0)";
        assert_eq!(attempt_of_violation(line), Some(("train-7", 2)));
        assert_eq!(attempt_of_violation("no parenthesis"), None);
        assert_eq!(attempt_of_violation("odd (train-7 attempt x rank 0)"), None);
    }

    fn event(kind: &str, message: &str, attempt: u32) -> Event {
        let kind = EventKind::from_word(kind).expect("an event kind");
        Event { kind: kind.into(), message: message.into(), attempt, ..Default::default() }
    }

    #[test]
    fn only_an_attempt_placed_after_a_node_loss_counts_as_one() {
        let events = [
            event("Started", "", 1),
            event("Requeued", "node n2 was lost; back in the queue", 0),
            event("Started", "", 2),
            event("Preempted", "by urgent-3", 0),
            event("Requeued", "back in the queue; resumes from its checkpoint", 0),
            event("Started", "", 3),
            event(
                "Requeued",
                "rank 0 of attempt 3: its agent on node n1 was cut off from the leader for a whole lease",
                0,
            ),
            event("Started", "", 4),
        ];
        assert_eq!(attempts_after_node_loss(&events), [2, 4].into());
    }

    #[test]
    fn a_start_from_zero_is_excused_only_for_an_attempt_placed_after_a_node_loss() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            "started from zero although every rank wrote a checkpoint in one attempt (a attempt 2 rank 0)",
            "started from zero although every rank wrote a checkpoint in one attempt (a attempt 3 rank 0)",
            "started from zero although every rank wrote a checkpoint in one attempt (b attempt 2 rank 0)",
            "two attempts of a rank 0 at once (a attempt 2 rank 0)",
        ];
        std::fs::write(dir.path().join("violations"), lines.join("\n")).unwrap();
        let lost: BTreeSet<(String, u32)> = [("a".to_string(), 2)].into();
        let (violations, redone) = witnessed(dir.path(), &lost);
        assert_eq!(redone, [lines[0]]);
        assert_eq!(violations, [lines[1], lines[2], lines[3]]);
    }
}
