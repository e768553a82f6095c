//! A history of client operations in the Jepsen style, and its checks. Every submit and
//! cancel try is recorded with when it was invoked and when it completed, on the wall clock
//! the workloads' start records use, and how it ended: `Ok`, `Failed` (the cluster said no:
//! it did nothing), or `Unknown` (a timeout or a lost connection after sending: it may or may
//! not have happened).
//!
//! The checks are pure functions of the history and what the cluster and the jobs showed:
//! - every acknowledged submit exists exactly once (by request id), one whose tries all
//!   failed not at all, and one with an unknown try at most once;
//! - after an acknowledged cancel no attempt of the job starts (and, in `check.rs`, the
//!   job does not end Succeeded).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Bound on the operations a history keeps; later ones are counted, not kept (a run that
/// reaches it is far longer than any the harness makes).
pub const MAX_OPS: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Submit,
    Cancel,
    /// The submit of an array: once acknowledged, each element's name is recorded as an
    /// acknowledged `Submit` of its own (the checks judge jobs).
    SubmitArray,
    /// The cancel of an array: each element's name is recorded as a `Cancel` of its own,
    /// with the same outcome.
    CancelArray,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The cluster answered that it did not do it.
    Failed(String),
    /// No answer, or one that does not say whether it happened.
    Unknown(String),
}

impl Outcome {
    /// How a call that got `status` ended: codes that a lost connection, a timeout or a
    /// failover produce leave it unknown; every other refusal is definite.
    pub fn of_status(status: &tonic::Status) -> Outcome {
        use tonic::Code;
        let text = format!("{:?}: {}", status.code(), status.message());
        match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
            | Code::Internal
            | Code::Aborted => Outcome::Unknown(text),
            _ => Outcome::Failed(text),
        }
    }
}

/// One try of one operation. `key` is the request id of a submit (the job's name in the
/// harness's load) or the name of the job a cancel is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub key: String,
    pub invoke_ms: u64,
    pub complete_ms: u64,
    pub outcome: Outcome,
}

/// A replica start the witnesses recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub job: String,
    pub attempt: u32,
    pub at_ms: u64,
}

/// The wall clock in milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The operations of a run, recorded from several tasks.
#[derive(Default)]
pub struct History {
    ops: Mutex<Vec<Op>>,
}

impl History {
    pub fn record(&self, op: Op) {
        let mut ops = self.ops.lock().expect("not poisoned");
        if ops.len() < MAX_OPS {
            ops.push(op);
        }
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("not poisoned").clone()
    }
}

/// How the tries of one key ended, together.
#[derive(Default)]
struct Tally {
    ok: bool,
    unknown: bool,
}

fn tally(ops: &[Op], kind: OpKind) -> BTreeMap<&str, Tally> {
    let mut by_key: BTreeMap<&str, Tally> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.kind == kind) {
        let t = by_key.entry(op.key.as_str()).or_default();
        match op.outcome {
            Outcome::Ok => t.ok = true,
            Outcome::Unknown(_) => t.unknown = true,
            Outcome::Failed(_) => {}
        }
    }
    by_key
}

/// Submits against `listed` (how many jobs the cluster lists per request id): an
/// acknowledged one exactly once, an unknown one at most once, a failed one never.
pub fn check_submits(ops: &[Op], listed: &BTreeMap<String, usize>) -> Vec<String> {
    let spared = spared_by_array_cancels(ops);
    let mut violations = Vec::new();
    for (key, t) in tally(ops, OpKind::Submit) {
        let n = listed.get(key).copied().unwrap_or(0);
        let bad = if t.ok && n == 0 && spared.contains(key) {
            None
        } else if t.ok {
            (n != 1).then(|| format!("acknowledged submit {key} exists {n} times, not once"))
        } else if t.unknown {
            (n > 1).then(|| format!("submit {key} of unknown outcome exists {n} times, more than once"))
        } else {
            (n > 0).then(|| format!("submit {key} that only failed exists {n} times"))
        };
        violations.extend(bad);
    }
    violations
}

/// Elements of arrays whose cancel may have taken effect (acknowledged, or of unknown
/// outcome): a cancelled array creates none of the elements it has not created yet
/// (decisions.md section 13), so such an element may never exist. An element's name is its
/// array's, a dash, and its index.
pub fn spared_by_array_cancels(ops: &[Op]) -> BTreeSet<String> {
    let may_have = |o: &&Op| o.kind == OpKind::CancelArray && matches!(o.outcome, Outcome::Ok | Outcome::Unknown(_));
    let arrays: BTreeSet<&str> = ops.iter().filter(may_have).map(|o| o.key.as_str()).collect();
    let element_of_one = |key: &str| {
        key.rsplit_once('-').is_some_and(|(array, index)| arrays.contains(array) && index.parse::<u32>().is_ok())
    };
    let submits = ops.iter().filter(|o| o.kind == OpKind::Submit);
    submits.filter(|o| element_of_one(&o.key)).map(|o| o.key.clone()).collect()
}

/// What the cancel check found: starts after an acknowledged cancel, beyond the slack, are
/// violations; those within it are counted as having raced the cancel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CancelCheck {
    pub violations: Vec<String>,
    pub raced: usize,
}

/// Starts of jobs after their cancel was acknowledged. A start up to `slack_ms` after the
/// acknowledgement is allowed: the agent may act on a directive the leader sent before the
/// cancel committed, within its lease; a later one acts on what the cluster already undid.
pub fn check_cancels(ops: &[Op], starts: &[Start], slack_ms: u64) -> CancelCheck {
    let acked = acknowledged_cancels(ops);
    let mut out = CancelCheck::default();
    for s in starts {
        let Some(&cancelled_ms) = acked.get(s.job.as_str()) else { continue };
        if s.at_ms <= cancelled_ms {
            continue;
        }
        let late_ms = s.at_ms - cancelled_ms;
        if late_ms <= slack_ms {
            out.raced += 1;
        } else {
            out.violations.push(format!(
                "{} attempt {} started {late_ms} ms after its cancel was acknowledged",
                s.job, s.attempt
            ));
        }
    }
    out
}

/// When each job's cancel was first acknowledged (the earliest `complete_ms` of an `Ok`
/// try), by job name: the cancel committed before then, so from then on the job is
/// cancelled whatever a later try or report says.
pub fn acknowledged_cancels(ops: &[Op]) -> BTreeMap<&str, u64> {
    let mut acked: BTreeMap<&str, u64> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.kind == OpKind::Cancel && o.outcome == Outcome::Ok) {
        let at = acked.entry(op.key.as_str()).or_insert(op.complete_ms);
        *at = (*at).min(op.complete_ms);
    }
    acked
}

/// Counts of a history, for the report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub submits: usize,
    pub cancels: usize,
    pub cancels_acked: usize,
    /// Tries whose outcome is unknown.
    pub unknown: usize,
    /// Starts within the slack after an acknowledged cancel.
    pub raced_cancel: usize,
}

pub fn summary(ops: &[Op], raced_cancel: usize) -> Summary {
    Summary {
        submits: tally(ops, OpKind::Submit).len(),
        cancels: tally(ops, OpKind::Cancel).len(),
        cancels_acked: tally(ops, OpKind::Cancel).values().filter(|t| t.ok).count(),
        unknown: ops.iter().filter(|o| matches!(o.outcome, Outcome::Unknown(_))).count(),
        raced_cancel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: OpKind, key: &str, invoke_ms: u64, complete_ms: u64, outcome: Outcome) -> Op {
        Op { kind, key: key.into(), invoke_ms, complete_ms, outcome }
    }

    fn listed(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    fn unknown() -> Outcome {
        Outcome::Unknown("timed out".into())
    }

    #[test]
    fn an_acknowledged_submit_must_exist_exactly_once() {
        let ops = [
            op(OpKind::Submit, "a", 0, 5, unknown()),
            op(OpKind::Submit, "a", 10, 12, Outcome::Ok),
            op(OpKind::Submit, "b", 0, 5, Outcome::Ok),
        ];
        assert!(check_submits(&ops, &listed(&[("a", 1), ("b", 1)])).is_empty());
        let duplicated = check_submits(&ops, &listed(&[("a", 2), ("b", 1)]));
        assert_eq!(duplicated, ["acknowledged submit a exists 2 times, not once"]);
        let lost = check_submits(&ops, &listed(&[("a", 1)]));
        assert_eq!(lost, ["acknowledged submit b exists 0 times, not once"]);
    }

    /// An array cancelled before it created its last element never creates it: such an
    /// element may be missing (a 240 s run flagged three as lost). One of an array whose
    /// cancel failed, or of no cancelled array, may not.
    #[test]
    fn an_element_an_array_cancel_spared_may_never_exist() {
        let ops = [
            op(OpKind::SubmitArray, "t-12", 0, 5, Outcome::Ok),
            op(OpKind::Submit, "t-12-0", 5, 5, Outcome::Ok),
            op(OpKind::Submit, "t-12-1", 5, 5, Outcome::Ok),
            op(OpKind::CancelArray, "t-12", 10, 20, Outcome::Ok),
            op(OpKind::SubmitArray, "t-13-escape", 0, 5, Outcome::Ok),
            op(OpKind::Submit, "t-13-escape-0", 5, 5, Outcome::Ok),
            op(OpKind::CancelArray, "t-13-escape", 10, 20, unknown()),
            op(OpKind::SubmitArray, "t-14", 0, 5, Outcome::Ok),
            op(OpKind::Submit, "t-14-0", 5, 5, Outcome::Ok),
            op(OpKind::CancelArray, "t-14", 10, 20, Outcome::Failed("already ended".into())),
            op(OpKind::Submit, "t-15-0", 5, 5, Outcome::Ok),
        ];
        let spared = spared_by_array_cancels(&ops);
        assert_eq!(spared, ["t-12-0", "t-12-1", "t-13-escape-0"].map(String::from).into());
        let v = check_submits(&ops, &listed(&[("t-12-0", 1)]));
        assert_eq!(
            v,
            [
                "acknowledged submit t-14-0 exists 0 times, not once",
                "acknowledged submit t-15-0 exists 0 times, not once"
            ]
        );
    }

    #[test]
    fn an_unknown_submit_may_exist_once_and_a_failed_one_never() {
        let ops = [
            op(OpKind::Submit, "u", 0, 2_000, unknown()),
            op(OpKind::Submit, "f", 0, 5, Outcome::Failed("bad spec".into())),
        ];
        assert!(check_submits(&ops, &listed(&[])).is_empty());
        assert!(check_submits(&ops, &listed(&[("u", 1)])).is_empty());
        assert_eq!(
            check_submits(&ops, &listed(&[("u", 2)])),
            ["submit u of unknown outcome exists 2 times, more than once"]
        );
        assert_eq!(check_submits(&ops, &listed(&[("f", 1)])), ["submit f that only failed exists 1 times"]);
    }

    #[test]
    fn no_attempt_starts_after_an_acknowledged_cancel() {
        let ops = [
            op(OpKind::Cancel, "c", 100, 110, unknown()),
            op(OpKind::Cancel, "c", 200, 210, Outcome::Ok),
            op(OpKind::Cancel, "d", 200, 210, Outcome::Failed("already ended".into())),
        ];
        let start = |job: &str, attempt, at_ms| Start { job: job.into(), attempt, at_ms };
        let fine = [start("c", 1, 50), start("c", 2, 205), start("d", 3, 5_000)];
        assert_eq!(check_cancels(&ops, &fine, 100), CancelCheck::default());
        let raced = check_cancels(&ops, &[start("c", 2, 300)], 100);
        assert_eq!(raced, CancelCheck { violations: vec![], raced: 1 });
        let late = check_cancels(&ops, &[start("c", 3, 1_000)], 100);
        assert_eq!(late.violations, ["c attempt 3 started 790 ms after its cancel was acknowledged"]);
    }

    #[test]
    fn statuses_that_may_hide_a_commit_are_unknown() {
        assert!(matches!(Outcome::of_status(&tonic::Status::unavailable("leader gone")), Outcome::Unknown(_)));
        assert!(matches!(Outcome::of_status(&tonic::Status::deadline_exceeded("slow")), Outcome::Unknown(_)));
        assert!(matches!(Outcome::of_status(&tonic::Status::failed_precondition("ended")), Outcome::Failed(_)));
        assert!(matches!(Outcome::of_status(&tonic::Status::invalid_argument("spec")), Outcome::Failed(_)));
    }
}
