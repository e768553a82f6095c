//! The verdict of a chaos run, from what the jobs witnessed, how they ended, which protocol
//! states the faults landed in, and the history of client operations.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use baton_agent::workload::Misbehave;
use baton_proto::v1::{Event, EventKind, Job, JobState};
use baton_proto::words::Word;

use crate::faults::{Fault, Mix, Moment};
use crate::history::{self, Op, Start, Summary};
use crate::observe::Quiescence;

/// A run at least this long must have a fault land in a non-idle protocol state.
pub const MIN_SECONDS_FOR_MOMENTS: u64 = 60;

/// The witness's line for a start from zero although the gang had a whole checkpoint.
const STARTED_FROM_ZERO: &str = "started from zero although every rank wrote a checkpoint";

/// Slack between a placement's time (the leader's wall clock, stamped into the command
/// before it is proposed) and a start's (the workload's wall clock), beyond the replicas'
/// clock offsets: both are whole milliseconds read on the same clock, so only rounding.
pub const PLACEMENT_SLACK_MS: u64 = 2;

/// Slack between two witness records (a checkpoint's time and a start's). Every workload
/// stamps its records with the machine's wall clock: an agent starts its replicas in a clean
/// environment, without the clock offset the agent itself may run with, so the agents'
/// offsets do not apply; both are whole milliseconds of one clock, so only rounding.
pub const WITNESS_SLACK_MS: u64 = PLACEMENT_SLACK_MS;

/// Heartbeat timeouts a preemption may take past its grace (`preemption_bound_ms`).
pub const PREEMPTION_BOUND_HEARTBEATS: u64 = 4;

/// How long past its grace a preemption may take to end. A stop that cannot complete (its
/// agent stopped, killed or cut off; no leader to commit its report) ends by the node's loss,
/// a heartbeat timeout `T` after the agent's last report, once a leader commits the requeue.
/// The longest fault keeps an agent away for 2 T, an election follows a leader's loss within
/// about T, and a preemption can straddle two faults (each healed before the next, 1-2.5 s
/// apart): 4 T covers them; a stop that hangs until some other timeout does not end within it.
pub fn preemption_bound_ms(heartbeat_timeout_ms: u64) -> u64 {
    PREEMPTION_BOUND_HEARTBEATS * heartbeat_timeout_ms
}

/// A preemption's grace when its job names none (the API's default, `JobSpec.grace_ms`).
pub const DEFAULT_GRACE_MS: u64 = 30_000;

/// Panics listed one by one; a process that panics in a loop is summed up after these.
const MAX_PANICS_LISTED: usize = 20;

/// A fault as injected: when (seconds into the run), what, and the protocol state it
/// landed in.
#[derive(Debug, Clone)]
pub struct Landed {
    pub at_s: f64,
    /// When, on the machine's wall clock (the clock the events are compared with).
    pub at_ms: u64,
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
    /// The agents' wall clock offsets (seconds): a process's launch stamp is on its agent's.
    pub agent_clock_offsets_s: &'a [i64],
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
    /// Every listed job's events (`GetJob`), by name, and when the harness had read them
    /// (the machine's clock).
    pub events: &'a BTreeMap<String, Vec<Event>>,
    pub events_read_ms: u64,
    /// How long past its grace a preemption may take to end (see `preemptions_end`).
    pub preemption_bound_ms: u64,
    /// What the cluster looked like once the load drained.
    pub quiescence: &'a Quiescence,
    /// Every log the run's processes wrote, by file name, and its text.
    pub logs: &'a [(String, String)],
    /// The GPU faults injected, each with when the cluster listed it and when its clearing
    /// was asked.
    pub gpu_faults: &'a [crate::gpu_faults::Span],
    /// Whether every agent held its replicas in cgroups (its node's label said so).
    pub contained: bool,
    /// Whether the replicas' clocks could be stepped, so that the leader's could jump days
    /// ahead (`Fault::LeaderClockAhead`).
    pub leader_clocks: bool,
    /// Whether jobs could leave a process that SIGKILL cannot end (`Misbehave::Unkillable`),
    /// and the nodes the harness fixed after one.
    pub unkillable: bool,
    pub repairs: &'a [crate::unkillable::Repair],
    /// The most committed replica's history, read after the replicas were stopped, or why
    /// it could not be (`crate::commit`).
    pub commit: &'a Result<crate::commit::Commit, String>,
}

pub struct Report {
    pub seconds: u64,
    /// Whether every agent held its replicas in cgroups (`Evidence::contained`).
    pub contained: bool,
    /// Whether the leader's clock could jump days ahead (`Evidence::leader_clocks`).
    pub leader_clocks: bool,
    /// Whether jobs could leave unkillable processes; nodes fixed after one, and the frozen
    /// processes thawed there.
    pub unkillable: bool,
    pub repaired_nodes: usize,
    pub thawed: usize,
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
    /// Of those, jobs that misbehave (`load::Load::misbehave`), by way.
    pub misbehaving: BTreeMap<&'static str, usize>,
    pub succeeded: usize,
    pub cancelled: usize,
    /// Jobs that ran more than one attempt (preempted, or requeued).
    pub rerun: usize,
    /// Replica starts that resumed from a checkpoint (first step above 0).
    pub resumed: usize,
    pub starts: usize,
    /// Starts from zero after a node loss although a checkpoint had been written: work done
    /// again. Violations too (also in `violations`); counted apart to tell where they came from.
    pub redone: Vec<String>,
    pub history: Summary,
    /// Starts judged against their job's committed placement, and those that could not be
    /// (the job's bounded event history no longer holds the attempt's placement).
    pub placements_judged: usize,
    pub placements_unjudged: usize,
    /// Starts judged against the state their directive was computed from, replayed from the
    /// commit (`crate::commit`), and those that could not be (a snapshot compacted it).
    pub commit_judged: usize,
    pub commit_unjudged: usize,
    /// Preemptions that ended, and the longest of them past its grace (job, ms).
    pub preemptions_ended: usize,
    /// Jobs suspended in place (`Suspended` events), and of those resumed in place.
    pub suspensions: usize,
    pub resumed_in_place: usize,
    pub longest_past_grace: Option<(String, i64)>,
    /// Resumes checked against the newest checkpoint, and Succeeded jobs against their steps.
    pub resumes_checked: usize,
    pub successes_checked: usize,
    /// Looks at the cluster until it was quiescent (the model's running set equal to the
    /// processes', every replica at one index and state), and that index.
    pub quiescent_after_looks: usize,
    pub quiescent_index: Option<u64>,
    /// GPU faults injected, those the cluster listed, and starts judged against them.
    pub gpu_faults: usize,
    pub gpu_faults_seen: usize,
    pub gpu_starts_judged: usize,
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
        let spared = history::spared_by_array_cancels(e.ops);
        for name in &acked {
            match by_name.get(name.as_str()) {
                None if spared.contains(name) => cancelled += 1,
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
        let offsets_s = allowed_offsets_s(e);
        let tolerance = Tolerance {
            machine_ms: placement_tolerance_ms(&offsets_s),
            agent_ms: launch_tolerance_ms(&offsets_s, e.agent_clock_offsets_s),
        };
        let placed = placed_before_start(&starts, e.events, tolerance);
        violations.extend(placed.violations);
        let committed = match e.commit {
            Ok(commit) => crate::commit::judge(&starts, commit),
            Err(why) => crate::commit::Judged {
                violations: vec![format!("the commit could not be read, so no start was held against it: {why}")],
                ..Default::default()
            },
        };
        violations.extend(committed.violations);
        let faults_ms: Vec<u64> = e.faults.iter().map(|f| f.at_ms).collect();
        let stops = preemptions_end(e.jobs, e.events, e.preemption_bound_ms, &faults_ms, clock_spread_ms(&offsets_s));
        violations.extend(stops.violations);
        let suspended = suspended_in_place(e.events, &starts, tolerance);
        violations.extend(suspended.violations);
        let checkpoints = read_checkpoints(e.witness, &mut violations);
        let ends = read_ends(e.witness, &mut violations);
        let thawed_saves = read_thawed_saves(e.witness, &mut violations);
        let (resume_violations, resumes_checked) = resumed_from_newest(&starts, &checkpoints, &thawed_saves);
        violations.extend(resume_violations);
        violations.extend(checkpointed_after_newer_start(&starts, &checkpoints, WITNESS_SLACK_MS));
        let (step_violations, successes_checked) = succeeded_ran_all_steps(e.jobs, e.events, &ends);
        violations.extend(step_violations);
        violations.extend(e.quiescence.violations());
        let listed = count_names(e.jobs);
        violations.extend(history::check_submits(e.ops, &listed));
        let plain: Vec<Start> = starts.iter().map(|s| s.start.clone()).collect();
        let cancels = history::check_cancels(e.ops, &plain, e.cancel_slack_ms);
        violations.extend(cancels.violations);
        let tolerance_ms = placement_tolerance_ms(&offsets_s);
        violations.extend(succeeded_after_cancel(e.ops, e.jobs, e.events, tolerance_ms));
        violations.extend(clock_ran_ahead(e.events, e.events_read_ms, tolerance_ms));
        violations.extend(unrepaired(e.repairs));
        let faults_by_moment = count(e.faults.iter().map(|l| l.moment.name()));
        violations.extend(panics(e.logs));
        let on_bad =
            placed_on_unhealthy(e.gpu_faults, &read_gpus(e.witness, &mut violations), e.events, tolerance.agent_ms);
        violations.extend(on_bad.violations);
        violations.extend(vacuous(e, resumed));
        if !starts.is_empty() && committed.judged == 0 {
            violations.push("the run proved nothing against the commit: no start was judged there".into());
        }
        Report {
            seconds: e.seconds,
            contained: e.contained,
            leader_clocks: e.leader_clocks,
            unkillable: e.unkillable,
            repaired_nodes: e.repairs.len(),
            thawed: e.repairs.iter().map(|r| r.thawed).sum(),
            mix: e.mix,
            clock_offsets_s: e.clock_offsets_s.to_vec(),
            faults: e.faults.iter().map(|l| format!("{:>6.1} s  {} [{}]", l.at_s, l.fault, l.moment.name())).collect(),
            faults_by_kind: count(e.faults.iter().map(|l| l.fault.kind())),
            faults_by_moment,
            faults_by_kind_and_moment: count(e.faults.iter().map(|l| (l.fault.kind(), l.moment.name()))),
            acknowledged: acked.len(),
            misbehaving: misbehaving(&acked),
            succeeded,
            cancelled,
            rerun: e.jobs.iter().filter(|j| j.attempt > 1).count(),
            resumed,
            starts: starts.len(),
            redone,
            history: history::summary(e.ops, cancels.raced),
            placements_judged: placed.judged,
            placements_unjudged: placed.unjudged,
            commit_judged: committed.judged,
            commit_unjudged: committed.unjudged,
            preemptions_ended: stops.ended,
            suspensions: suspended.suspensions,
            resumed_in_place: suspended.resumed,
            longest_past_grace: stops.longest_past_grace,
            resumes_checked,
            successes_checked,
            quiescent_after_looks: e.quiescence.looks,
            quiescent_index: e.quiescence.agreed_index(),
            gpu_faults: e.gpu_faults.len(),
            gpu_faults_seen: e.gpu_faults.iter().filter(|s| s.seen_ms.is_some()).count(),
            gpu_starts_judged: on_bad.judged,
            violations,
        }
    }
}

/// The witnesses' violations, every one of them, and of those the starts from zero of
/// attempts placed after a node loss (see `Report::redone`). Those were once excused as a
/// known limit; an attempt now resumes from a complete checkpoint the leader was not told of
/// (docs/protocol.md, "No work lost after a stall"), so a start from zero is a broken promise
/// wherever it happens.
fn witnessed(witness: &Path, after_node_loss: &BTreeSet<(String, u32)>) -> (Vec<String>, Vec<String>) {
    let all = read_lines(&witness.join("violations"));
    let redone = all
        .iter()
        .filter(|line| {
            line.contains(STARTED_FROM_ZERO)
                && attempt_of_violation(line).is_some_and(|(j, a)| after_node_loss.contains(&(j.to_string(), a)))
        })
        .cloned()
        .collect();
    (all, redone)
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
/// because its node was lost or its lease ran out, and before the leader learned of a
/// checkpoint since: each of them was told to start as the leader knew the job. Not only
/// the first: one preempted before it ran leaves the next as uninformed (a partitions run
/// had attempt 1's save reported 20 ms after attempt 3 was placed, attempt 2 having been
/// preempted at once: `tests::only_an_attempt_placed_after_a_node_loss_counts_as_one`). The
/// leader knows of a checkpoint from a stop that saved one (a `Stopped` event with a
/// checkpoint, or saying a late report saved the work) or a requeue that resumes from one.
pub fn attempts_after_node_loss(events: &[Event]) -> BTreeSet<u32> {
    let mut found = BTreeSet::new();
    let mut lost = false;
    for e in events {
        match e.kind() {
            EventKind::Requeued if e.message.contains("was lost") || e.message.contains("lease") => lost = true,
            EventKind::Stopped | EventKind::Requeued if knows_a_checkpoint(&e.message) => lost = false,
            EventKind::Started if lost => {
                found.insert(e.attempt);
            }
            _ => {}
        }
    }
    found
}

/// Whether a stop's or requeue's event says the job has a checkpoint to resume from.
fn knows_a_checkpoint(message: &str) -> bool {
    ["with a checkpoint", "saved its work", "from its checkpoint"].iter().any(|m| message.contains(m))
}

/// The jobs among `names` that misbehave, by way (`load::way_of`).
fn misbehaving(names: &[String]) -> BTreeMap<&'static str, usize> {
    let mut by_way = BTreeMap::new();
    for way in names.iter().filter_map(|n| crate::load::way_of(n)) {
        *by_way.entry(way.name()).or_default() += 1;
    }
    by_way
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessedStart {
    pub start: Start,
    pub rank: String,
    pub node: String,
    pub first_step: u64,
    /// Told to resume (`BATON_RESUME`); a record without the field: when it did not start
    /// from zero.
    pub resume: bool,
    /// When the agent launched the process (`BATON_LAUNCHED_AT_MS`, its agent's clock), if
    /// the record says.
    pub launched_ms: Option<u64>,
    /// When the process began by the kernel's count (its start time, on the machine's
    /// clock), if the record says.
    pub kernel_born_ms: Option<u64>,
    /// The replicated state that asked for it, by its count of applied commands
    /// (`BATON_STATE_INDEX`), if the record says: `crate::commit` finds it placed there.
    pub state_index: Option<u64>,
}

/// How far a process's birth and a leader's stamp may be apart: `machine_ms` for a birth on
/// the machine's clock (the kernel's count, or the time of the record), `agent_ms` for one
/// on its agent's clock (the launch stamp), which may be offset further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tolerance {
    pub machine_ms: u64,
    pub agent_ms: u64,
}

impl From<u64> for Tolerance {
    fn from(ms: u64) -> Tolerance {
        Tolerance { machine_ms: ms, agent_ms: ms }
    }
}

impl WitnessedStart {
    /// When the process came to be, and how far that may be from a leader's stamp: by the
    /// kernel's count where the record says it (what neither the agent's clock nor a
    /// process stopped before its first line can skew), else its launch, else when it
    /// wrote the record.
    pub fn born(&self, t: Tolerance) -> (u64, u64) {
        match (self.kernel_born_ms, self.launched_ms) {
            (Some(ms), _) => (ms, t.machine_ms),
            (None, Some(ms)) => (ms, t.agent_ms),
            (None, None) => (self.start.at_ms, t.machine_ms),
        }
    }
}

/// `DIR/starts`: `job attempt rank node first-step at-ms how launched-ms born-ms
/// state-index` (`how`: `resume` or `fresh`; `launched-ms`: `-` when the agent did not say;
/// `born-ms`, the kernel's, `-` when /proc did not say; `state-index`, `-` when the agent did
/// not say; older records end earlier).
fn read_starts(witness: &Path, violations: &mut Vec<String>) -> Vec<WitnessedStart> {
    read_records(&witness.join("starts"), "start", violations, |f| {
        let (job, attempt, rank, node, first, at_ms) =
            (f.first()?, f.get(1)?, f.get(2)?, f.get(3)?, f.get(4)?, f.get(5)?);
        let first_step = first.parse().ok()?;
        let (resume, launched_ms, kernel_born_ms, state_index) = match f.get(6..)? {
            [] => (first_step > 0, None, None, None),
            [how] => (resume_of(how)?, None, None, None),
            [how, launched] => (resume_of(how)?, launched_of(launched)?, None, None),
            [how, launched, born] => (resume_of(how)?, launched_of(launched)?, launched_of(born)?, None),
            [how, launched, born, index] => {
                (resume_of(how)?, launched_of(launched)?, launched_of(born)?, launched_of(index)?)
            }
            _ => return None,
        };
        let start = Start { job: job.to_string(), attempt: attempt.parse().ok()?, at_ms: at_ms.parse().ok()? };
        let (rank, node) = (rank.to_string(), node.to_string());
        Some(WitnessedStart { start, rank, node, first_step, resume, launched_ms, kernel_born_ms, state_index })
    })
}

fn resume_of(how: &str) -> Option<bool> {
    match how {
        "resume" => Some(true),
        "fresh" => Some(false),
        _ => None,
    }
}

/// `Some(None)` for `-`; `None` (a malformed record) for anything but `-` or a number.
/// Read for both stamps of a start (the launch, the kernel's birth).
/// A number, or `-` for none.
fn launched_of(field: &str) -> Option<Option<u64>> {
    if field == "-" { Some(None) } else { field.parse().ok().map(Some) }
}

/// The GPUs a start was given (`DIR/gpus`: `job attempt rank node gpus`, the GPUs comma
/// separated, `-` for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenGpus {
    pub job: String,
    pub attempt: u32,
    pub node: String,
    pub gpus: Vec<u32>,
}

fn read_gpus(witness: &Path, violations: &mut Vec<String>) -> Vec<GivenGpus> {
    read_records(&witness.join("gpus"), "GPU record", violations, |f| match f {
        [job, attempt, _rank, node, gpus] => Some(GivenGpus {
            job: job.to_string(),
            attempt: attempt.parse().ok()?,
            node: node.to_string(),
            gpus: if *gpus == "-" {
                Vec::new()
            } else {
                gpus.split(',').map(|g| g.parse().ok()).collect::<Option<Vec<u32>>>()?
            },
        }),
        _ => None,
    })
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct UnhealthyCheck {
    pub violations: Vec<String>,
    /// Starts on a GPU that was injected a fault at some point, judged against it.
    pub judged: usize,
}

/// decisions.md section 14: nothing is placed on a GPU from the commit of its fault until its
/// clearing. A start whose attempt was placed (its `Started` event, on the leader's clock)
/// more than `tolerance_ms` after the harness saw the fault listed, and as much before the
/// harness asked to clear it, broke that.
pub fn placed_on_unhealthy(
    spans: &[crate::gpu_faults::Span],
    given: &[GivenGpus],
    events: &BTreeMap<String, Vec<Event>>,
    tolerance_ms: u64,
) -> UnhealthyCheck {
    let mut out = UnhealthyCheck::default();
    for g in given {
        let placed_ms = events.get(&g.job).and_then(|evs| {
            evs.iter().find(|e| e.kind() == EventKind::Started && e.attempt == g.attempt).map(|e| e.at_ms)
        });
        let Some(placed_ms) = placed_ms else { continue };
        for s in spans.iter().filter(|s| s.node == g.node && g.gpus.contains(&s.gpu)) {
            let Some(seen_ms) = s.seen_ms else { continue };
            out.judged += 1;
            if placed_ms > seen_ms + tolerance_ms && placed_ms + tolerance_ms < s.clear_asked_ms {
                out.violations.push(format!(
                    "{} attempt {} was placed on GPU {} of {} at {placed_ms}, while it was unhealthy (listed at {seen_ms}, cleared after {})",
                    g.job, g.attempt, s.gpu, s.node, s.clear_asked_ms
                ));
            }
        }
    }
    out
}

/// A checkpoint a workload wrote (`DIR/checkpoints`: `job attempt rank node step at-ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenCheckpoint {
    pub job: String,
    pub attempt: u32,
    pub rank: String,
    pub step: u64,
    pub at_ms: u64,
}

fn read_checkpoints(witness: &Path, violations: &mut Vec<String>) -> Vec<WrittenCheckpoint> {
    read_saves(witness, "checkpoints", violations)
}

/// `DIR/thawed-saves`, same fields: saves begun by a process its node's thaw ran again,
/// recorded before the file is written (the kill that follows may come before its
/// `checkpoints` record, or before the file).
fn read_thawed_saves(witness: &Path, violations: &mut Vec<String>) -> Vec<WrittenCheckpoint> {
    read_saves(witness, "thawed-saves", violations)
}

fn read_saves(witness: &Path, file: &str, violations: &mut Vec<String>) -> Vec<WrittenCheckpoint> {
    read_records(&witness.join(file), "checkpoint", violations, |f| match f {
        [job, attempt, rank, _node, step, at_ms] => Some(WrittenCheckpoint {
            job: job.to_string(),
            attempt: attempt.parse().ok()?,
            rank: rank.to_string(),
            step: step.parse().ok()?,
            at_ms: at_ms.parse().ok()?,
        }),
        _ => None,
    })
}

/// An exit 0 a workload recorded (`DIR/ends`: `job attempt rank node last-step how at-ms`,
/// `how` `finished` after its last step or `stopped` on the checkpoint signal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessedEnd {
    pub job: String,
    pub attempt: u32,
    pub rank: String,
    pub last_step: u64,
    pub finished: bool,
}

fn read_ends(witness: &Path, violations: &mut Vec<String>) -> Vec<WitnessedEnd> {
    read_records(&witness.join("ends"), "end", violations, |f| match f {
        [job, attempt, rank, _node, last, how, at_ms] => {
            at_ms.parse::<u64>().ok()?;
            let finished = match *how {
                "finished" => true,
                "stopped" => false,
                _ => return None,
            };
            let (attempt, last_step) = (attempt.parse().ok()?, last.parse().ok()?);
            Some(WitnessedEnd { job: job.to_string(), attempt, rank: rank.to_string(), last_step, finished })
        }
        _ => None,
    })
}

/// The records of a witness file, one a line; a line `parse` cannot read is a violation (a
/// workload that recorded nonsense is broken, and what it meant cannot be checked).
fn read_records<T>(
    path: &Path,
    what: &str,
    violations: &mut Vec<String>,
    parse: impl Fn(&[&str]) -> Option<T>,
) -> Vec<T> {
    let mut out = Vec::new();
    for line in read_lines(path) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match parse(&f) {
            Some(r) => out.push(r),
            None => violations.push(format!("unreadable {what} record {line:?}")),
        }
    }
    out
}

/// How far ahead of the machine's clock a leader whose clock jumped days ahead stamps: its
/// quorum's time plus the stamp ceiling's bound, the quorum's time measured at a reply's
/// midpoint (off by at most half a sampled reply's round trip, 250 ms), in whole seconds.
pub const HELD_AHEAD_S: i64 = (baton_raft::skew::MAX_CLOCK_SKEW_MS + 250).div_ceil(1_000) as i64;

/// The replica clock offsets the checks allow for: the run's own, and where the leader's
/// clock may jump days ahead (`Evidence::leader_clocks`), `HELD_AHEAD_S`, as though one
/// replica's clock ran that far ahead.
fn allowed_offsets_s(e: &Evidence) -> Vec<i64> {
    let mut offsets_s = e.clock_offsets_s.to_vec();
    if e.leader_clocks {
        offsets_s.push(HELD_AHEAD_S);
    }
    offsets_s
}

/// The tolerance of `placed_before_start`: a placement is stamped with the leader's wall
/// clock, which runs up to the largest replica offset ahead of the workloads' (the offsets
/// step to their opposites halfway, so either sign may lead).
pub fn placement_tolerance_ms(clock_offsets_s: &[i64]) -> u64 {
    let ahead_s = clock_offsets_s.iter().map(|o| o.unsigned_abs()).max().unwrap_or(0);
    ahead_s * 1_000 + PLACEMENT_SLACK_MS
}

/// How far apart a leader's stamp and a process's launch stamp (its agent's clock) may be:
/// the replicas' tolerance plus the agents' largest offset. In a run with clocks offset, a
/// leader 7 s behind and an agent 5 s ahead were 12 s apart, and a start 4 s before its
/// job's suspension was judged as made while it was suspended
/// (`tests::a_launch_stamped_on_an_agents_clock_ahead_is_judged_with_the_agents_offset`).
pub fn launch_tolerance_ms(clock_offsets_s: &[i64], agent_clock_offsets_s: &[i64]) -> u64 {
    let agent_ahead_s = agent_clock_offsets_s.iter().map(|o| o.unsigned_abs()).max().unwrap_or(0);
    placement_tolerance_ms(clock_offsets_s) + agent_ahead_s * 1_000
}

/// How far apart two replicas' wall clocks may be: a preemption's start and end may be
/// stamped by different leaders.
pub fn clock_spread_ms(clock_offsets_s: &[i64]) -> u64 {
    let (lo, hi) = (clock_offsets_s.iter().copied().chain([0]).min(), clock_offsets_s.iter().copied().chain([0]).max());
    let spread_s = hi.unwrap_or(0) - lo.unwrap_or(0);
    // Halfway every offset steps to its opposite: a clock may be judged against its own
    // earlier reading from the other side.
    let own_step_s = clock_offsets_s.iter().map(|o| 2 * o.unsigned_abs()).max().unwrap_or(0);
    spread_s.unsigned_abs().max(own_step_s) * 1_000
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct PlacementCheck {
    pub violations: Vec<String>,
    pub judged: usize,
    pub unjudged: usize,
}

/// Every start is preceded by its committed placement: the job's events hold a `Started`
/// for that attempt (an event is in the replicated state, so its command committed), naming
/// the start's node, stamped no later than the process's birth (`WitnessedStart::born`)
/// plus the tolerance. The leader stamps the time into the plan before it proposes it, so
/// the stamp is a lower bound of the commit and a process born earlier than it acted on a
/// placement not yet committed. A job's history keeps its newest `MAX_EVENTS_PER_JOB`
/// events: when it no longer starts with `Submitted`, an attempt whose placement fell out is
/// not judged.
pub fn placed_before_start(
    starts: &[WitnessedStart],
    events: &BTreeMap<String, Vec<Event>>,
    tolerance: impl Into<Tolerance>,
) -> PlacementCheck {
    let tolerance = tolerance.into();
    let mut out = PlacementCheck::default();
    for s in starts {
        let (born_ms, tolerance_ms) = s.born(tolerance);
        let who = format!("{} attempt {} rank {} on {}", s.start.job, s.start.attempt, s.rank, s.node);
        let Some(evs) = events.get(&s.start.job) else {
            out.violations.push(format!("{who} started, but the cluster lists no such job"));
            continue;
        };
        let placed = evs.iter().find(|e| e.kind() == EventKind::Started && e.attempt == s.start.attempt);
        let Some(placed) = placed else {
            if evs.first().is_some_and(|e| e.kind() == EventKind::Submitted) {
                out.violations.push(format!("{who} started at {} without a committed placement", s.start.at_ms));
                out.judged += 1;
            } else {
                out.unjudged += 1;
            }
            continue;
        };
        out.judged += 1;
        if !placed.nodes.contains(&s.node) {
            out.violations.push(format!("{who} started on a node its placement does not name ({:?})", placed.nodes));
        } else if born_ms + tolerance_ms < placed.at_ms {
            out.violations.push(format!(
                "{who} started {} ms before its placement was stamped (tolerance {tolerance_ms} ms)",
                placed.at_ms - born_ms
            ));
        }
    }
    out
}

/// The bound for one preemption that began at `begin_ms`. `bound_ms` covers two faults
/// (`preemption_bound_ms`: each keeps an agent or a leader away for up to half of it); a
/// brisk run can land more within one preemption (one saw an agent unheard, its leader cut
/// from its peers and the agent cut off, within 11 s:
/// `tests::every_preemption_ends_within_its_grace_plus_the_bound`), and each one beyond two
/// adds a fault's share. Counted in a fixed window, from a fault's length before the
/// preemption began to where the base bound ends: faults landing later do not count, or a
/// preemption that hangs in a brisk run would widen its own bound with every fault that
/// lands while it hangs.
fn bound_for(bound_ms: u64, faults_ms: &[u64], begin_ms: u64, grace_ms: u64) -> u64 {
    let per_fault_ms = bound_ms / 2;
    let (from_ms, to_ms) = (begin_ms.saturating_sub(per_fault_ms), begin_ms + grace_ms + bound_ms);
    let within = faults_ms.iter().filter(|&&f| f >= from_ms && f <= to_ms).count() as u64;
    bound_ms + per_fault_ms * within.saturating_sub(2)
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct SuspendCheck {
    pub violations: Vec<String>,
    pub suspensions: usize,
    pub resumed: usize,
}

/// A job suspended in place and resumed in place (`Suspended`, then `Resumed` with no
/// `Started` between) is one attempt with one process per rank, stopped and continued
/// (SIGSTOP, SIGCONT): no process of the job may start while it is suspended. The events are
/// stamped on the leaders' clocks, a process's birth on the machine's (the kernel's count)
/// or its agent's, up to the tolerance apart (`WitnessedStart::born`), so only a process born
/// more than that after the suspension's stamp and as much before the
/// resumption's counts (with clock offsets a short suspension is not judged). A second start
/// of the same rank is `started_twice`'s; this one also catches a process of another attempt.
pub fn suspended_in_place(
    events: &BTreeMap<String, Vec<Event>>,
    starts: &[WitnessedStart],
    tolerance: impl Into<Tolerance>,
) -> SuspendCheck {
    let tolerance = tolerance.into();
    let mut out = SuspendCheck::default();
    for (name, evs) in events {
        let mut since: Option<&Event> = None;
        for e in evs {
            match e.kind() {
                EventKind::Suspended => {
                    out.suspensions += 1;
                    since = Some(e);
                }
                EventKind::Started | EventKind::Requeued => since = None,
                EventKind::Resumed => {
                    let Some(s) = since.take() else { continue };
                    out.resumed += 1;
                    // By the process's birth: one launched just before the suspension may
                    // run its first line (the record) only once continued.
                    let within = |w: &&WitnessedStart| {
                        let (born_ms, tolerance_ms) = w.born(tolerance);
                        born_ms > s.at_ms + tolerance_ms && born_ms < e.at_ms.saturating_sub(tolerance_ms)
                    };
                    let restarted = starts.iter().filter(|w| w.start.job == *name);
                    for w in restarted.filter(within) {
                        out.violations.push(format!(
                            "{name} attempt {} rank {} started at {} while suspended in place ({} to {}): resumed by a new process, not continued",
                            w.start.attempt, w.rank, w.start.at_ms, s.at_ms, e.at_ms
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Events that end a preemption: the victim stopped (and went back to the queue, was
/// suspended or cancelled), or its job ended or went back to the queue for another reason
/// (its node was lost).
const PREEMPTION_ENDS: [EventKind; 7] = [
    EventKind::Stopped,
    EventKind::Requeued,
    EventKind::Suspended,
    EventKind::Cancelled,
    EventKind::Succeeded,
    EventKind::Failed,
    EventKind::TimedOut,
];

#[derive(Debug, Default, PartialEq, Eq)]
pub struct PreemptionCheck {
    pub violations: Vec<String>,
    pub ended: usize,
    /// The preemption that took longest past its grace: (job, ms; negative when within it).
    pub longest_past_grace: Option<(String, i64)>,
}

/// Every preemption ends within its grace plus `bound_ms` (and a share per fault beyond two
/// that may hold it up: `bound_for`): from a `Preempted` event to the next event that ends
/// it, on the leaders' wall clocks (`spread_ms` apart at most). A job still Preempting when
/// the run ends broke the promise outright.
pub fn preemptions_end(
    jobs: &[Job],
    events: &BTreeMap<String, Vec<Event>>,
    bound_ms: u64,
    faults_ms: &[u64],
    spread_ms: u64,
) -> PreemptionCheck {
    let mut out = PreemptionCheck::default();
    for job in jobs {
        let Some(spec) = &job.spec else { continue };
        let grace_ms = spec.grace_ms.unwrap_or(DEFAULT_GRACE_MS);
        let mut since: Option<&Event> = None;
        for e in events.get(&spec.name).map(Vec::as_slice).unwrap_or_default() {
            if e.kind() == EventKind::Preempted {
                since = since.or(Some(e));
            } else if PREEMPTION_ENDS.contains(&e.kind())
                && let Some(start) = since.take()
            {
                out.ended += 1;
                let took_ms = e.at_ms as i64 - start.at_ms as i64;
                let past_ms = took_ms - grace_ms as i64;
                let bound_ms = bound_for(bound_ms, faults_ms, start.at_ms, grace_ms);
                let limit_ms = grace_ms + bound_ms + spread_ms;
                if out.longest_past_grace.as_ref().is_none_or(|(_, l)| past_ms > *l) {
                    out.longest_past_grace = Some((spec.name.clone(), past_ms));
                }
                if took_ms > limit_ms as i64 {
                    let during =
                        events.get(&spec.name).map(|evs| timeline(evs, start.at_ms, e.at_ms)).unwrap_or_default();
                    out.violations.push(format!(
                        "the preemption of {} ({}) ended {took_ms} ms after it began ({}): more than its grace {grace_ms} ms plus {bound_ms} ms (and {spread_ms} ms of clock spread); began at unix ms {}; its events then: {during}",
                        spec.name, start.message, e.kind().word(), start.at_ms
                    ));
                }
            }
        }
        if let Some(start) = since
            && job.state() == JobState::Preempting
        {
            out.violations.push(format!(
                "the preemption of {} ({}) never ended: still Preempting when the run ended",
                spec.name, start.message
            ));
        }
    }
    out
}

/// Events listed at most by `timeline`.
const TIMELINE_EVENTS: usize = 24;

/// The events from `from_ms` to `to_ms`, each as `+MS Kind node: message`, counted from
/// `from_ms`: what a violation's reader needs to tell what held the job up.
fn timeline(events: &[Event], from_ms: u64, to_ms: u64) -> String {
    let within = events.iter().filter(|e| (from_ms..=to_ms).contains(&e.at_ms));
    let words: Vec<String> = within
        .take(TIMELINE_EVENTS)
        .map(|e| format!("+{} {} {}: {}", e.at_ms - from_ms, e.kind().word(), e.node, e.message))
        .collect();
    words.join("; ")
}

/// A resume starts from the newest checkpoint written: a start told to resume begins at the
/// step of the newest checkpoint that an earlier attempt of the same rank wrote before it
/// (the records are on one machine's clock; ties go to the later record). Returns the
/// violations and how many resumes were checked.
pub fn resumed_from_newest(
    starts: &[WitnessedStart],
    checkpoints: &[WrittenCheckpoint],
    thawed_saves: &[WrittenCheckpoint],
) -> (Vec<String>, usize) {
    let mut violations = Vec::new();
    let mut checked = 0;
    for s in starts.iter().filter(|s| s.resume) {
        checked += 1;
        let newest = checkpoints.iter().filter(|c| resumable(c, s)).max_by_key(|c| c.at_ms);
        let who = format!("{} attempt {} rank {}", s.start.job, s.start.attempt, s.rank);
        match newest {
            None => violations.push(format!("{who} was told to resume, but no earlier attempt wrote a checkpoint")),
            // A job that saves after each step past its stop can be killed between a
            // checkpoint's rename and its record: the file it resumes from is then one step
            // past the newest record.
            Some(c)
                if c.step + 1 == s.first_step
                    && crate::load::way_of(&s.start.job) == Some(Misbehave::WriteAfterStop) => {}
            // A save begun in its node's thaw's moment, after the newest record, whose kill
            // came between its file and its record (chaos seed 22000): the file is newer.
            Some(c) if thawed_saves.iter().any(|t| resumable(t, s) && t.at_ms >= c.at_ms && t.step == s.first_step) => {
            }
            Some(c) if c.step != s.first_step => violations.push(format!(
                "{who} resumed from step {}, not from the newest checkpoint (step {} of attempt {})",
                s.first_step, c.step, c.attempt
            )),
            Some(_) => {}
        }
    }
    (violations, checked)
}

/// Whether start `s` could resume from save `c`: its rank's, of an earlier attempt, before it.
fn resumable(c: &WrittenCheckpoint, s: &WitnessedStart) -> bool {
    c.job == s.start.job && c.rank == s.rank && c.attempt < s.start.attempt && c.at_ms <= s.start.at_ms
}

/// No attempt of a job lives on once a newer one started: attempt A's checkpoint written at
/// `t`, when an attempt B > A of the same job had written its start record more than
/// `tolerance_ms` before `t`, shows both alive at once: A, alive at `t`, was alive when B
/// started, or started after a newer attempt, as wrong. The witness's lock per rank catches
/// two attempts of one rank only; this also catches them on different ranks and nodes. B's
/// record, not its launch stamp, is on the checkpoints' clock (`WITNESS_SLACK_MS`) and is
/// written once B surely runs. Each late checkpoint is named with the first newer start.
pub fn checkpointed_after_newer_start(
    starts: &[WitnessedStart],
    checkpoints: &[WrittenCheckpoint],
    tolerance_ms: u64,
) -> Vec<String> {
    let mut by_job: BTreeMap<&str, Vec<&WitnessedStart>> = BTreeMap::new();
    for s in starts {
        by_job.entry(s.start.job.as_str()).or_default().push(s);
    }
    let mut violations = Vec::new();
    for c in checkpoints {
        let newer = by_job.get(c.job.as_str()).into_iter().flatten().filter(|s| s.start.attempt > c.attempt);
        let Some(s) =
            newer.filter(|s| s.start.at_ms.saturating_add(tolerance_ms) < c.at_ms).min_by_key(|s| s.start.at_ms)
        else {
            continue;
        };
        violations.push(format!(
            "{} attempt {} rank {} wrote a checkpoint (step {}) at {}, {} ms after attempt {} rank {} started at {}: two attempts alive at once",
            c.job,
            c.attempt,
            c.rank,
            c.step,
            c.at_ms,
            c.at_ms - s.start.at_ms,
            s.start.attempt,
            s.rank,
            s.start.at_ms
        ));
    }
    violations
}

/// The steps rank `rank` of a job runs, from its command (`baton workload --steps N
/// [--other-ranks-steps M]`); `None` for another command.
pub fn steps_of(command: &[String], rank: &str) -> Option<u64> {
    let value = |flag: &str| command.iter().position(|a| a == flag).and_then(|i| command.get(i + 1)?.parse().ok());
    let steps = value("--steps")?;
    Some(if rank == "0" { steps } else { value("--other-ranks-steps").unwrap_or(steps) })
}

/// A job counted Succeeded ran all its steps: rank 0 of the attempt whose exit ended it
/// (`succeeded_attempt`) recorded that it finished at the step its command asked for. A rank
/// stopped mid-work and reported as a success would have recorded `stopped`, or a lower
/// step. Returns the violations and how many jobs were checked.
pub fn succeeded_ran_all_steps(
    jobs: &[Job],
    events: &BTreeMap<String, Vec<Event>>,
    ends: &[WitnessedEnd],
) -> (Vec<String>, usize) {
    let mut violations = Vec::new();
    let mut checked = 0;
    for job in jobs.iter().filter(|j| j.state() == JobState::Succeeded) {
        let Some(spec) = &job.spec else { continue };
        let Some(steps) = steps_of(&spec.command, "0") else { continue };
        checked += 1;
        let attempt = succeeded_attempt(job, events.get(&spec.name).map_or(&[][..], Vec::as_slice));
        let who = format!("{} attempt {attempt} rank 0", spec.name);
        let end = ends.iter().rfind(|e| e.job == spec.name && e.attempt == attempt && e.rank == "0");
        match end {
            None => violations.push(format!("{} is Succeeded, but {who} recorded no exit 0", spec.name)),
            Some(e) if !e.finished || e.last_step != steps => violations.push(format!(
                "{} is Succeeded, but {who} {} at step {} of {steps}",
                spec.name,
                if e.finished { "finished" } else { "was stopped" },
                e.last_step
            )),
            Some(_) => {}
        }
    }
    (violations, checked)
}

/// The attempt whose rank 0's exit ended a Succeeded job: its last one, unless the model
/// ended it on an older attempt's exit reported late (`attempt N's rank 0 exited 0
/// (reported late, ...)`: that attempt ran to its end while its agent was cut off, and a
/// newer one was placed meanwhile).
pub fn succeeded_attempt(job: &Job, events: &[Event]) -> u32 {
    let last = events.iter().rfind(|e| e.kind() == EventKind::Succeeded);
    last.filter(|e| e.message.contains("reported late"))
        .and_then(|e| e.message.split("attempt ").nth(1)?.split('\'').next()?.parse().ok())
        .unwrap_or(job.attempt)
}

/// A job whose cancel was acknowledged does not end Succeeded: the server refuses to cancel
/// a job that has ended, and a cancelled job's later exit 0 must not undo the cancel. The
/// neighbour allowed is a job that succeeded first (an array's cancel is acknowledged for
/// every element, also those already done): its first `Succeeded` event stamped no later
/// than the first acknowledgement (`history::acknowledged_cancels`) plus `tolerance_ms`.
/// The cancel committed before its acknowledgement (the machine's clock); an event's stamp
/// is the model's clock, the highest of the leaders' stamps so far, each taken before its
/// command was proposed, so it runs at most the leaders' largest offset ahead of its commit
/// (`placement_tolerance_ms`). The log orders the two commits: no lease's slack applies
/// (`check_cancels` allows one for an agent acting on an older directive; this is the
/// model's own transition). A Succeeded job with no such event cannot show it came first.
pub fn succeeded_after_cancel(
    ops: &[Op],
    jobs: &[Job],
    events: &BTreeMap<String, Vec<Event>>,
    tolerance_ms: u64,
) -> Vec<String> {
    let acked = history::acknowledged_cancels(ops);
    let mut violations = Vec::new();
    for job in jobs.iter().filter(|j| j.state() == JobState::Succeeded) {
        let Some(name) = job.spec.as_ref().map(|s| s.name.as_str()) else { continue };
        let Some(&acked_ms) = acked.get(name) else { continue };
        let succeeded = events.get(name).and_then(|evs| evs.iter().find(|e| e.kind() == EventKind::Succeeded));
        match succeeded.map(|e| e.at_ms) {
            Some(at_ms) if at_ms <= acked_ms.saturating_add(tolerance_ms) => {}
            Some(at_ms) => violations.push(format!(
                "{name} ended Succeeded {} ms after its cancel was acknowledged (succeeded at {at_ms}, acknowledged at {acked_ms}; tolerance {tolerance_ms} ms)",
                at_ms - acked_ms
            )),
            None => violations.push(format!(
                "{name} ended Succeeded although its cancel was acknowledged at {acked_ms}, and its events do not say when it succeeded"
            )),
        }
    }
    violations
}

/// The replicated clock kept to true time (issue 31: one leader whose clock runs days ahead
/// moved it for good): no event stamped later than when the harness read it (`read_ms`, the
/// machine's clock) plus `tolerance_ms`, and no job ended by its time limit, which no
/// attempt of a run reaches in true time (`load::TIME_LIMIT_MS`). One violation per job.
pub fn clock_ran_ahead(events: &BTreeMap<String, Vec<Event>>, read_ms: u64, tolerance_ms: u64) -> Vec<String> {
    let limit_h = crate::load::TIME_LIMIT_MS / 3_600_000;
    let mut violations = Vec::new();
    for (name, evs) in events {
        let limited = [EventKind::TimeLimit, EventKind::TimedOut];
        if let Some(e) = evs.iter().find(|e| limited.contains(&e.kind())) {
            violations.push(format!(
                "{name} reached its {limit_h}-hour time limit in a run of minutes (event {:?} at {}): the replicated clock ran ahead of true time",
                e.kind(),
                e.at_ms
            ));
        } else if let Some(e) = evs.iter().find(|e| e.at_ms > read_ms.saturating_add(tolerance_ms)) {
            violations.push(format!(
                "{name}'s event {:?} is stamped {} ms after the harness read it (tolerance {tolerance_ms} ms): the replicated clock ran ahead of true time",
                e.kind(),
                e.at_ms - read_ms
            ));
        }
    }
    violations
}

/// A node the harness could not fix after an unkillable process: its thawed process did
/// not die (no SIGKILL was pending on it: its agent reported it unkillable without killing
/// it), or no leader took the uncordon.
pub fn unrepaired(repairs: &[crate::unkillable::Repair]) -> Vec<String> {
    let failed = repairs.iter().filter_map(|r| r.failed.as_ref().map(|why| (r, why)));
    failed.map(|(r, why)| format!("node {} could not be fixed after an unkillable process: {why}", r.node)).collect()
}

/// Panics, as the processes logged them: a panic is a broken assertion, a violation whatever
/// the run recovered from it. A replica whose scheduling cycle panicked went on as a leader
/// that schedules nothing, and its stall was seen only as jobs not done
/// (`tests::a_panic_in_any_log_is_a_violation_that_says_where_and_what`).
pub fn panics(logs: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    let mut more = 0usize;
    for (name, text) in logs {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if let Some((_, at)) = line.split_once(" panicked at ") {
                // The message follows the location, on the next line.
                let message = lines.next().unwrap_or_default();
                if found.len() < MAX_PANICS_LISTED {
                    found.push(format!("{name}: a process panicked at {at} {message}"));
                } else {
                    more += 1;
                }
            }
        }
    }
    if more > 0 {
        found.push(format!("and {more} more panics"));
    }
    found
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
        if self.contained {
            writeln!(f, "agents: each replica in a cgroup of its own")?;
        } else {
            writeln!(
                f,
                "agents: replicas held by process groups only (no usable cgroup tree): no job left a process behind, no journal was wiped, no node rebooted"
            )?;
        }
        if self.leader_clocks {
            writeln!(f, "replica clocks: steppable (libfaketime): the leader's may jump days ahead")?;
        }
        if self.unkillable {
            writeln!(
                f,
                "unkillable processes (cgroup v1 freezer): {} nodes fixed by the harness, {} frozen processes thawed",
                self.repaired_nodes, self.thawed
            )?;
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
        if !self.misbehaving.is_empty() {
            let ways: Vec<String> = self.misbehaving.iter().map(|(w, n)| format!("{n} {w}")).collect();
            writeln!(f, "misbehaving jobs: {}", ways.join(", "))?;
        }
        let h = &self.history;
        writeln!(
            f,
            "history: {} submits, {} cancels ({} acknowledged), {} tries of unknown outcome, {} starts raced a cancel",
            h.submits, h.cancels, h.cancels_acked, h.unknown, h.raced_cancel
        )?;
        writeln!(
            f,
            "checks: {} starts judged against their committed placement ({} not: history too short); {} against the state their directive was computed from, replayed from the commit ({} not: compacted or unnamed); {} preemptions ended{}; {} suspended in place, {} of them resumed in place with no new process; {} resumes against the newest checkpoint; {} successes against their steps",
            self.placements_judged,
            self.placements_unjudged,
            self.commit_judged,
            self.commit_unjudged,
            self.preemptions_ended,
            match &self.longest_past_grace {
                Some((job, ms)) => format!(" (longest past its grace: {job}, {ms} ms)"),
                None => String::new(),
            },
            self.suspensions,
            self.resumed_in_place,
            self.resumes_checked,
            self.successes_checked
        )?;
        writeln!(
            f,
            "GPU faults: {} injected, {} listed unhealthy by the cluster; {} starts on those GPUs judged against them",
            self.gpu_faults, self.gpu_faults_seen, self.gpu_starts_judged
        )?;
        match self.quiescent_index {
            Some(index) => writeln!(
                f,
                "quiescent after {} looks: the model runs what the processes run, every replica at index {index} with the same state",
                self.quiescent_after_looks
            )?,
            None => writeln!(f, "not quiescent after {} looks", self.quiescent_after_looks)?,
        }
        if !self.redone.is_empty() {
            writeln!(f, "{} starts from zero after a node loss (work redone; violations):", self.redone.len())?;
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
        Landed { at_s: 1.0, at_ms: 1_000, fault: Fault::KillAgent { name: "n1".into() }, moment }
    }

    #[test]
    fn a_long_run_whose_faults_all_landed_while_nothing_happened_is_vacuous() {
        let dir = tempfile::tempdir().unwrap();
        let none = BTreeSet::new();
        let events = BTreeMap::new();
        let quiet = Quiescence::default();
        let idle = [landed(Moment::Idle), landed(Moment::Idle)];
        let no_commit = Ok(crate::commit::Commit::empty());
        let evidence = |seconds, faults| Evidence {
            seconds,
            mix: Mix::All,
            clock_offsets_s: &[],
            agent_clock_offsets_s: &[],
            faults,
            jobs: &[],
            witness: dir.path(),
            ops: &[],
            after_node_loss: &none,
            cancel_slack_ms: 0,
            events: &events,
            events_read_ms: 0,
            preemption_bound_ms: 0,
            quiescence: &quiet,
            logs: &[],
            gpu_faults: &[],
            contained: true,
            leader_clocks: false,
            unkillable: false,
            repairs: &[],
            commit: &no_commit,
        };
        let v = vacuous(&evidence(MIN_SECONDS_FOR_MOMENTS, &idle), 1);
        assert_eq!(v, ["the run proved nothing: no fault landed in a non-idle protocol state"]);
        assert!(vacuous(&evidence(MIN_SECONDS_FOR_MOMENTS - 1, &idle), 1).is_empty(), "a short run is not judged so");
        let one_hit = [landed(Moment::Idle), landed(Moment::StopInFlight)];
        assert!(vacuous(&evidence(MIN_SECONDS_FOR_MOMENTS, &one_hit), 1).is_empty());
        assert_eq!(vacuous(&evidence(10, &[]), 0).len(), 2, "no fault, no resume");
        // The verdict says how the agents held their replicas: what the run could draw.
        assert!(Report::judge(&evidence(10, &[])).to_string().contains("each replica in a cgroup of its own"));
        let weak = Report::judge(&Evidence { contained: false, ..evidence(10, &[]) }).to_string();
        assert!(weak.contains("replicas held by process groups only"), "{weak}");
    }

    #[test]
    fn a_panic_in_any_log_is_a_violation_that_says_where_and_what() {
        let replica = "INFO leading\nthread 'tokio-runtime-worker' panicked at crates/model/src/ledger/change.rs:89:13:\njob 619 would over-allocate node n3\nINFO after";
        let logs = [("replica-1.log".to_string(), replica.to_string()), ("agent-n1.log".into(), "INFO fine\n".into())];
        assert_eq!(
            panics(&logs),
            [
                "replica-1.log: a process panicked at crates/model/src/ledger/change.rs:89:13: job 619 would over-allocate node n3"
            ]
        );
        assert!(panics(&logs[1..]).is_empty());
        let many = "x panicked at a.rs:1:1:\nboom\n".repeat(MAX_PANICS_LISTED + 5);
        let listed = panics(&[("replica-2.log".into(), many)]);
        assert_eq!(listed.len(), MAX_PANICS_LISTED + 1);
        assert!(listed.last().unwrap().contains("5 more panics"), "{listed:?}");
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

    /// Issue 31: a leader whose clock ran days ahead moved the replicated clock for good.
    /// The checks see it as an event stamped after the harness read it, or as a job that
    /// reached its time limit; an event within the tolerance, or an ordinary end, passes.
    #[test]
    fn an_event_stamped_ahead_of_true_time_or_a_time_limit_reached_is_a_violation() {
        let at = |kind: &str, at_ms: u64| Event { at_ms, ..event(kind, "", 1) };
        let (read_ms, tolerance_ms) = (1_000_000, 3_000);
        let events: BTreeMap<String, Vec<Event>> = [
            ("fine".to_string(), vec![at("Started", 990_000), at("Succeeded", read_ms + tolerance_ms)]),
            ("ahead".to_string(), vec![at("Started", 990_000), at("Preempted", read_ms + 2 * 86_400_000)]),
            ("limited".to_string(), vec![at("Started", 990_000), at("TimeLimit", 995_000), at("TimedOut", 996_000)]),
        ]
        .into();
        let v = clock_ran_ahead(&events, read_ms, tolerance_ms);
        assert_eq!(v.len(), 2, "{v:#?}");
        assert!(
            v[0].starts_with("ahead's event Preempted is stamped 172800000 ms after the harness read it"),
            "{}",
            v[0]
        );
        assert!(v[1].starts_with("limited reached its 12-hour time limit"), "{}", v[1]);
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
            event("Stopped", "stopped with a checkpoint", 0),
            event("Started", "", 5),
        ];
        assert_eq!(attempts_after_node_loss(&events), [2, 4].into());

        // As a partitions run found it (chaos/README.md, "Found so far"): attempt 2, placed
        // after the loss, was preempted before it ran; attempt 3 was placed before attempt
        // 1's save was reported, attempt 4 after.
        let events = [
            event("Started", "", 1),
            event("Requeued", "node n1 was lost; back in the queue", 0),
            event("Started", "", 2),
            event("Stopped", "stopped without a checkpoint", 0),
            event("Started", "", 3),
            event(
                "Stopped",
                "attempt 1's stop saved its work (reported late, by node n1): the attempts after it resume from it",
                0,
            ),
            event("Started", "", 4),
        ];
        assert_eq!(attempts_after_node_loss(&events), [2, 3].into());
    }

    #[test]
    fn a_start_from_zero_is_a_violation_also_after_a_node_loss() {
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
        assert_eq!(redone, [lines[0]], "counted apart");
        assert_eq!(violations, lines, "and no longer excused");
    }

    fn started(attempt: u32, nodes: &[&str], at_ms: u64) -> Event {
        Event {
            kind: EventKind::Started.into(),
            attempt,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            at_ms,
            ..Default::default()
        }
    }

    #[test]
    fn a_start_placed_on_a_gpu_between_its_fault_and_its_clearing_is_a_violation() {
        use crate::gpu_faults::Span;
        let span = Span { node: "n1".into(), gpu: 2, seen_ms: Some(10_000), clear_asked_ms: 20_000 };
        let unseen = Span { seen_ms: None, ..span.clone() };
        let given = |job: &str, gpus: Vec<u32>| GivenGpus { job: job.into(), attempt: 1, node: "n1".into(), gpus };
        let events: BTreeMap<String, Vec<Event>> = [
            ("before".to_string(), vec![started(1, &["n1"], 9_000)]),
            ("during".to_string(), vec![started(1, &["n1"], 15_000)]),
            ("after".to_string(), vec![started(1, &["n1"], 21_000)]),
            ("elsewhere".to_string(), vec![started(1, &["n1"], 15_000)]),
        ]
        .into();
        let records = [
            given("before", vec![2, 3]),
            given("during", vec![1, 2]),
            given("after", vec![2]),
            given("elsewhere", vec![0, 1]),
        ];
        let out = placed_on_unhealthy(std::slice::from_ref(&span), &records, &events, 500);
        assert_eq!(out.judged, 3);
        assert_eq!(out.violations.len(), 1, "{:?}", out.violations);
        assert!(out.violations[0].starts_with("during attempt 1 was placed on GPU 2 of n1"), "{:?}", out.violations);
        // Within the clocks' tolerance of either end, or a fault never listed: not judged a violation.
        assert!(placed_on_unhealthy(&[span], &records, &events, 6_000).violations.is_empty());
        assert_eq!(placed_on_unhealthy(&[unseen], &records, &events, 500), UnhealthyCheck::default());
    }

    fn at(kind: &str, at_ms: u64) -> Event {
        let word = kind;
        let kind = EventKind::from_word(word).expect("an event kind");
        Event { kind: kind.into(), at_ms, message: format!("{word} at {at_ms}"), ..Default::default() }
    }

    fn start(job: &str, attempt: u32, rank: &str, node: &str, at_ms: u64) -> WitnessedStart {
        WitnessedStart {
            start: Start { job: job.into(), attempt, at_ms },
            rank: rank.into(),
            node: node.into(),
            first_step: 0,
            resume: false,
            launched_ms: None,
            kernel_born_ms: None,
            state_index: None,
        }
    }

    #[test]
    fn every_start_is_preceded_by_its_committed_placement() {
        let events: BTreeMap<String, Vec<Event>> = [
            ("a".to_string(), vec![at("Submitted", 900), started(1, &["n1", "n2"], 1_000)]),
            // Its history lost its first events (bounded): an attempt not in it is not judged.
            ("b".to_string(), vec![at("Requeued", 900), started(7, &["n1"], 1_000)]),
        ]
        .into();
        let fine = [start("a", 1, "0", "n1", 1_001), start("a", 1, "1", "n2", 1_500), start("b", 7, "0", "n1", 1_200)];
        let ok = placed_before_start(&fine, &events, 2);
        assert_eq!(ok, PlacementCheck { violations: vec![], judged: 3, unjudged: 0 });
        let bad = [
            start("a", 1, "0", "n3", 1_001),
            start("a", 2, "0", "n1", 2_000),
            start("a", 1, "1", "n2", 990),
            start("b", 3, "0", "n1", 500),
            start("c", 1, "0", "n1", 500),
        ];
        let found = placed_before_start(&bad, &events, 2);
        assert_eq!(
            found.violations,
            [
                "a attempt 1 rank 0 on n3 started on a node its placement does not name ([\"n1\", \"n2\"])",
                "a attempt 2 rank 0 on n1 started at 2000 without a committed placement",
                "a attempt 1 rank 1 on n2 started 10 ms before its placement was stamped (tolerance 2 ms)",
                "c attempt 1 rank 0 on n1 started, but the cluster lists no such job",
            ]
        );
        assert_eq!((found.judged, found.unjudged), (3, 1));
        // A leader whose clock runs 7 s ahead stamps placements up to 7 s late.
        let tolerance = placement_tolerance_ms(&[0, 7, -7]);
        assert_eq!(tolerance, 7_002);
        assert!(placed_before_start(&bad[2..3], &events, tolerance).violations.is_empty());
    }

    /// A full-mix run with clocks offset (chaos/README.md, "Found so far"): `sleepy-133`
    /// suspended on a leader's clock 7 s behind (stamped 39,951), its process launched on an
    /// agent's clock 5 s ahead (stamped 47,765, 42,783 on the machine's, 4.2 s before the
    /// suspension): 7.8 s apart, judged as a start while suspended with the replicas'
    /// tolerance alone.
    #[test]
    fn a_launch_stamped_on_an_agents_clock_ahead_is_judged_with_the_agents_offset() {
        let events: BTreeMap<String, Vec<Event>> =
            [("sleepy-133".to_string(), vec![at("Suspended", 39_951), at("Resumed", 56_646)])].into();
        let launched = WitnessedStart { launched_ms: Some(47_765), ..start("sleepy-133", 1, "0", "n1", 42_783) };
        let replicas = [0, 7, -7];
        let judged = |agents: &[i64]| {
            suspended_in_place(&events, std::slice::from_ref(&launched), launch_tolerance_ms(&replicas, agents))
        };
        assert_eq!(judged(&[]).violations.len(), 1, "without the agents' offsets, as before");
        assert!(judged(&[5, -5]).violations.is_empty(), "{:?}", judged(&[5, -5]).violations);
        assert_eq!(launch_tolerance_ms(&replicas, &[5, -5]), 12_000 + PLACEMENT_SLACK_MS);
    }

    /// Issue 31: a process's birth by the kernel's count, on the machine's clock, judged
    /// with the replicas' tolerance alone. An agent 5 s behind stamps its launch 5 s early:
    /// by that stamp (with the agents' offsets in the tolerance) a process born 3 s into a
    /// suspension passed.
    #[test]
    fn a_process_is_judged_by_its_birth_on_the_kernels_count_where_the_record_says() {
        let events: BTreeMap<String, Vec<Event>> = [(
            "sleepy-1".to_string(),
            vec![started(1, &["n1"], 1_000), at("Suspended", 10_000), at("Resumed", 30_000)],
        )]
        .into();
        let tolerance = Tolerance { machine_ms: 2, agent_ms: 5_002 };
        let born = |launched_ms: u64, kernel_ms: Option<u64>| WitnessedStart {
            launched_ms: Some(launched_ms),
            kernel_born_ms: kernel_ms,
            state_index: None,
            ..start("sleepy-1", 1, "0", "n1", 13_500)
        };
        // Born 3 s into the suspension, launched on an agent clock 5 s behind: within the
        // launch's tolerance, so by the launch alone it passed.
        let inside = born(8_000, Some(13_000));
        assert!(suspended_in_place(&events, &[born(8_000, None)], tolerance).violations.is_empty());
        assert_eq!(suspended_in_place(&events, &[inside], tolerance).violations.len(), 1, "judged by the kernel");
        // Born before the suspension, continued after it: one process.
        let continued = born(9_990 + 5_000, Some(9_990));
        assert!(suspended_in_place(&events, std::slice::from_ref(&continued), tolerance).violations.is_empty());
        // The placement check too: a process born before its placement was stamped.
        assert!(placed_before_start(&[continued], &events, tolerance).violations.is_empty());
        let early = WitnessedStart { kernel_born_ms: Some(900), ..start("sleepy-1", 1, "0", "n1", 1_100) };
        let found = placed_before_start(&[early], &events, tolerance);
        assert_eq!(
            found.violations,
            ["sleepy-1 attempt 1 rank 0 on n1 started 100 ms before its placement was stamped (tolerance 2 ms)"]
        );
    }

    #[test]
    fn a_job_resumed_in_place_keeps_its_one_process() {
        let events: BTreeMap<String, Vec<Event>> = [
            (
                "sleepy-1".to_string(),
                vec![started(1, &["n1"], 1_000), at("Preempted", 2_000), at("Suspended", 2_100), at("Resumed", 5_000)],
            ),
            // Suspended, then requeued (its node lost) and placed again: a new attempt is right.
            (
                "sleepy-2".to_string(),
                vec![
                    started(1, &["n2"], 1_000),
                    at("Suspended", 2_000),
                    at("Requeued", 3_000),
                    started(2, &["n3"], 3_500),
                    at("Resumed", 9_000),
                ],
            ),
        ]
        .into();
        let one = [start("sleepy-1", 1, "0", "n1", 1_001), start("sleepy-2", 1, "0", "n2", 1_001)];
        let renewed = [start("sleepy-2", 2, "0", "n3", 3_600)];
        let fine: Vec<WitnessedStart> = one.iter().chain(&renewed).cloned().collect();
        let ok = suspended_in_place(&events, &fine, 2);
        assert_eq!(ok, SuspendCheck { violations: vec![], suspensions: 2, resumed: 1 });
        // A process of the job (this attempt or another) started while it was suspended.
        for restart in [start("sleepy-1", 1, "0", "n1", 4_000), start("sleepy-1", 2, "0", "n1", 2_103)] {
            let starts: Vec<WitnessedStart> = fine.iter().chain([&restart]).cloned().collect();
            let found = suspended_in_place(&events, &starts, 2);
            assert_eq!(found.violations.len(), 1, "{restart:?} passed");
            assert!(found.violations[0].contains("resumed by a new process"), "{:?}", found.violations);
        }
        // A leader 7 s behind stamped the suspension 7 s early: the first start, 5 s after
        // the stamp, may well come before the suspension.
        let late = [start("sleepy-1", 1, "0", "n1", 7_100)];
        assert!(suspended_in_place(&events, &late, 7_002).violations.is_empty(), "judged across clocks apart");
        assert_eq!(suspended_in_place(&events, &late, 2).violations.len(), 0, "after the resumption");
        let inside = [start("sleepy-1", 1, "0", "n1", 4_900)];
        assert_eq!(suspended_in_place(&events, &inside, 2).violations.len(), 1, "judged without offsets");
        // A partitions run (chaos/README.md, "Found so far"): launched 13 ms before the
        // suspension and stopped before it wrote its record, which it wrote only when
        // continued (for its lease stop): one process.
        let continued = WitnessedStart { launched_ms: Some(2_087), ..start("sleepy-1", 1, "0", "n1", 3_500) };
        assert!(suspended_in_place(&events, &[continued], 2).violations.is_empty(), "judged by its launch");
        let relaunched = WitnessedStart { launched_ms: Some(3_400), ..start("sleepy-1", 1, "0", "n1", 3_500) };
        assert_eq!(suspended_in_place(&events, &[relaunched], 2).violations.len(), 1, "launched while suspended");
    }

    fn job(name: &str, state: JobState, attempt: u32, grace_ms: Option<u64>, command: &[&str]) -> Job {
        let mut spec =
            baton_proto::make::gpu_job(name, "batch", "train", 1, 2, command.iter().map(|a| a.to_string()).collect());
        spec.grace_ms = grace_ms;
        let mut j = Job { spec: Some(spec), attempt, ..Default::default() };
        j.set_state(state);
        j
    }

    #[test]
    fn every_preemption_ends_within_its_grace_plus_the_bound() {
        let jobs = [
            job("a", JobState::Running, 3, Some(5_000), &[]),
            job("b", JobState::Pending, 2, None, &[]),
            job("c", JobState::Preempting, 1, Some(5_000), &[]),
        ];
        let events: BTreeMap<String, Vec<Event>> = [
            (
                "a".to_string(),
                vec![
                    at("Preempted", 1_000),
                    at("Stopped", 1_040),
                    at("Requeued", 1_040),
                    at("Preempted", 9_000),
                    at("Requeued", 26_001),
                ],
            ),
            ("b".to_string(), vec![at("Preempted", 1_000), at("Stopped", 31_000 + 12_000)]),
            ("c".to_string(), vec![at("Preempted", 1_000)]),
        ]
        .into();
        let found = preemptions_end(&jobs, &events, 12_000, &[], 0);
        assert_eq!(
            found.violations,
            [
                "the preemption of a (Preempted at 9000) ended 17001 ms after it began (Requeued): more than its grace 5000 ms plus 12000 ms (and 0 ms of clock spread); began at unix ms 9000; its events then: +0 Preempted : Preempted at 9000; +17001 Requeued : Requeued at 26001",
                "the preemption of c (Preempted at 1000) never ended: still Preempting when the run ended",
            ]
        );
        assert_eq!(found.ended, 3);
        assert_eq!(found.longest_past_grace, Some(("a".to_string(), 12_001)), "b took its default grace and 12 s");
        // Stamped by two leaders whose clocks are 14 s apart.
        assert_eq!(
            preemptions_end(&jobs[..1], &events, 12_000, &[], clock_spread_ms(&[0, 7, -7])).violations,
            Vec::<String>::new()
        );
        assert_eq!(clock_spread_ms(&[0, 7, -7]), 14_000);
        assert_eq!(clock_spread_ms(&[]), 0);
        // Three faults in a's second preemption (one landed just before it, still in effect):
        // the bound grows by one fault's share. Two, and one long before, do not.
        let three = [3_500, 12_000, 20_000];
        assert!(preemptions_end(&jobs[..1], &events, 12_000, &three, 0).violations.is_empty());
        let two = [1_000, 12_000, 20_000];
        assert_eq!(preemptions_end(&jobs[..1], &events, 12_000, &two, 0).violations.len(), 1);
        // A preemption that hangs while faults keep landing: those after its base bound ran
        // out (from 1 s + 5 s + 12 s) do not widen it.
        let hung = [job("d", JobState::Pending, 2, Some(5_000), &[])];
        let ended_late: BTreeMap<String, Vec<Event>> =
            [("d".to_string(), vec![at("Preempted", 1_000), at("Requeued", 60_000)])].into();
        let later: Vec<u64> = (0..10).map(|i| 20_000 + i * 4_000).collect();
        assert_eq!(preemptions_end(&hung, &ended_late, 12_000, &later, 0).violations.len(), 1);
    }

    fn ckpt(job: &str, attempt: u32, rank: &str, step: u64, at_ms: u64) -> WrittenCheckpoint {
        WrittenCheckpoint { job: job.into(), attempt, rank: rank.into(), step, at_ms }
    }

    #[test]
    fn a_resume_starts_from_the_newest_checkpoint_written() {
        let written = [ckpt("a", 1, "0", 10, 100), ckpt("a", 1, "1", 12, 100), ckpt("a", 2, "0", 25, 300)];
        let resumed = |attempt, rank: &str, first_step, at_ms| WitnessedStart {
            first_step,
            resume: true,
            launched_ms: None,
            kernel_born_ms: None,
            state_index: None,
            ..start("a", attempt, rank, "n1", at_ms)
        };
        let fine = [
            resumed(2, "0", 10, 200),
            resumed(2, "1", 12, 200),
            resumed(3, "0", 25, 400),
            start("a", 4, "0", "n1", 500),
        ];
        assert_eq!(resumed_from_newest(&fine, &written, &[]), (vec![], 3), "a fresh start is not a resume");
        let stale = [resumed(3, "0", 10, 400), resumed(3, "1", 0, 400), resumed(1, "0", 0, 50)];
        assert_eq!(
            resumed_from_newest(&stale, &written, &[]).0,
            [
                "a attempt 3 rank 0 resumed from step 10, not from the newest checkpoint (step 25 of attempt 2)",
                "a attempt 3 rank 1 resumed from step 0, not from the newest checkpoint (step 12 of attempt 1)",
                "a attempt 1 rank 0 was told to resume, but no earlier attempt wrote a checkpoint",
            ]
        );
    }

    /// Chaos seed 22000: attempt 2, frozen with its node, saved step 54 as the thaw ran it
    /// again and was killed between the file and its record; attempt 4 resumed from 54, the
    /// newest file. A save begun in a thaw's moment (`thawed-saves`) after the newest record
    /// is a checkpoint a resume may come from; one before it, or of another step, is not.
    #[test]
    fn a_resume_may_come_from_a_save_begun_in_a_thaws_moment() {
        let written = [ckpt("a", 1, "0", 43, 100)];
        let thawed = [ckpt("a", 2, "0", 54, 300), ckpt("a", 1, "0", 40, 50)];
        let resumed = |first_step| WitnessedStart { first_step, resume: true, ..start("a", 4, "0", "n1", 400) };
        assert_eq!(resumed_from_newest(&[resumed(54)], &written, &thawed), (vec![], 1));
        assert_eq!(resumed_from_newest(&[resumed(43)], &written, &thawed), (vec![], 1), "its file may not be there");
        assert_eq!(resumed_from_newest(&[resumed(40)], &written, &thawed).0.len(), 1, "older than the newest record");
        assert_eq!(resumed_from_newest(&[resumed(54)], &written, &[]).0.len(), 1, "no save of step 54 at all");
    }

    /// A job that goes on saving after its stop may be killed between a checkpoint's rename
    /// and its record: it resumes one step past the newest record. Only such a job, and only
    /// one step.
    #[test]
    fn a_job_that_saves_after_its_stop_may_resume_one_step_past_its_newest_record() {
        let late = "train-4-write-after-stop";
        let written = [ckpt(late, 1, "0", 10, 100), ckpt("b", 1, "0", 10, 100)];
        let resumed = |job, first_step| WitnessedStart {
            first_step,
            resume: true,
            launched_ms: None,
            kernel_born_ms: None,
            state_index: None,
            ..start(job, 2, "0", "n1", 200)
        };
        let fine = [resumed(late, 10), resumed(late, 11)];
        assert_eq!(resumed_from_newest(&fine, &written, &[]), (vec![], 2));
        let wrong = [resumed(late, 12), resumed("b", 11)];
        assert_eq!(resumed_from_newest(&wrong, &written, &[]).0.len(), 2);
    }

    fn end(job: &str, attempt: u32, rank: &str, last_step: u64, finished: bool) -> WitnessedEnd {
        WitnessedEnd { job: job.into(), attempt, rank: rank.into(), last_step, finished }
    }

    #[test]
    fn a_job_counted_succeeded_ran_all_its_steps() {
        let cmd = ["baton", "workload", "--steps", "40", "--other-ranks-steps", "15"];
        let jobs = [
            job("a", JobState::Succeeded, 2, None, &cmd),
            job("b", JobState::Succeeded, 1, None, &cmd),
            job("c", JobState::Succeeded, 3, None, &cmd),
            job("d", JobState::Succeeded, 1, None, &cmd),
            job("e", JobState::Failed, 1, None, &cmd),
            job("f", JobState::Succeeded, 1, None, &["sleep", "1"]),
            job("g", JobState::Succeeded, 3, None, &cmd),
            job("h", JobState::Succeeded, 3, None, &cmd),
        ];
        let ends = [
            end("a", 1, "0", 12, false),
            end("a", 2, "1", 15, true),
            end("a", 2, "0", 40, true),
            end("b", 1, "0", 12, false),
            end("c", 3, "0", 39, true),
            end("e", 1, "0", 3, false),
            end("g", 1, "0", 40, true),
            end("g", 3, "0", 12, false),
            end("h", 1, "0", 12, false),
            end("h", 3, "0", 40, true),
        ];
        // g and h ended on attempt 1's exit, reported after attempt 3 was placed.
        let late = vec![
            event("started", "", 3),
            event("succeeded", "attempt 1's rank 0 exited 0 (reported late, by node n1): its work is done", 0),
        ];
        let events = BTreeMap::from([("g".to_string(), late.clone()), ("h".to_string(), late)]);
        let (violations, checked) = succeeded_ran_all_steps(&jobs, &events, &ends);
        assert_eq!(
            violations,
            [
                "b is Succeeded, but b attempt 1 rank 0 was stopped at step 12 of 40",
                "c is Succeeded, but c attempt 3 rank 0 finished at step 39 of 40",
                "d is Succeeded, but d attempt 1 rank 0 recorded no exit 0",
                "h is Succeeded, but h attempt 1 rank 0 was stopped at step 12 of 40",
            ]
        );
        assert_eq!(checked, 6, "a, b, c, d, g, h: not the failed job, nor one that runs no workload");
        let args: Vec<String> = cmd.iter().map(|a| a.to_string()).collect();
        assert_eq!(
            (steps_of(&args, "0"), steps_of(&args, "1"), steps_of(&args[..4], "1")),
            (Some(40), Some(15), Some(40))
        );
    }

    #[test]
    fn the_witness_records_are_read_and_nonsense_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "starts",
            "a 2 1 n2 17 1000 resume\nb 1 0 n1 0 1000 fresh\nc 1 0 n1 5 1000\nd 1 0 n1 x 1000 fresh\n\
             e 1 0 n1 0 1000 fresh 990 985\nf 1 0 n1 0 1000 fresh - -\ng 1 0 n1 0 1000 fresh 990 soon\n",
        );
        write("checkpoints", "a 1 1 n1 17 900\nbroken\n");
        write("ends", "a 2 1 n2 40 finished 1500\na 2 0 n1 3 crashed 1500\n");
        let mut v = Vec::new();
        let starts = read_starts(dir.path(), &mut v);
        let how: Vec<(&str, bool)> = starts.iter().map(|s| (s.start.job.as_str(), s.resume)).collect();
        assert_eq!(
            how,
            [("a", true), ("b", false), ("c", true), ("e", false), ("f", false)],
            "a record without the field: resumed when past step 0"
        );
        let births: Vec<(Option<u64>, Option<u64>)> =
            starts.iter().map(|s| (s.launched_ms, s.kernel_born_ms)).collect();
        assert_eq!(births[3..], [(Some(990), Some(985)), (None, None)]);
        assert_eq!(read_checkpoints(dir.path(), &mut v), [ckpt("a", 1, "1", 17, 900)]);
        assert_eq!(read_ends(dir.path(), &mut v), [end("a", 2, "1", 40, true)]);
        assert_eq!(
            v,
            [
                "unreadable start record \"d 1 0 n1 x 1000 fresh\"",
                "unreadable start record \"g 1 0 n1 0 1000 fresh 990 soon\"",
                "unreadable checkpoint record \"broken\"",
                "unreadable end record \"a 2 0 n1 3 crashed 1500\"",
            ]
        );
    }

    /// The violations `Report::judge` finds in a run of these operations, jobs, events and
    /// witness records, with no clock offset.
    fn judged(witness: &Path, ops: &[Op], jobs: &[Job], events: &BTreeMap<String, Vec<Event>>) -> Vec<String> {
        let (none, quiet) = (BTreeSet::new(), Quiescence::default());
        let commit = Ok(crate::commit::Commit::empty());
        let evidence = Evidence {
            seconds: 1,
            mix: Mix::All,
            clock_offsets_s: &[],
            agent_clock_offsets_s: &[],
            faults: &[],
            jobs,
            witness,
            ops,
            after_node_loss: &none,
            cancel_slack_ms: 0,
            events,
            // Read long after any fixture's stamp.
            events_read_ms: u64::MAX,
            preemption_bound_ms: 0,
            quiescence: &quiet,
            logs: &[],
            gpu_faults: &[],
            contained: true,
            leader_clocks: false,
            unkillable: false,
            repairs: &[],
            commit: &commit,
        };
        Report::judge(&evidence).violations
    }

    fn cancel(job: &str, complete_ms: u64, outcome: history::Outcome) -> Op {
        let invoke_ms = complete_ms.saturating_sub(10);
        Op { kind: history::OpKind::Cancel, key: job.into(), invoke_ms, complete_ms, outcome }
    }

    #[test]
    fn a_job_that_succeeds_after_its_cancel_was_acknowledged_is_a_violation() {
        use history::Outcome::{Failed, Ok, Unknown};
        let ops = [
            cancel("late", 1_000, Ok),
            cancel("late", 1_500, Ok),
            // An array's cancel, acknowledged for an element that had already succeeded.
            cancel("done", 2_000, Ok),
            cancel("unsure", 1_000, Unknown("timed out".into())),
            cancel("refused", 1_000, Failed("already ended".into())),
            cancel("stopped", 1_000, Ok),
            cancel("unsaid", 1_000, Ok),
        ];
        let succeeded = |name: &str| job(name, JobState::Succeeded, 1, None, &[]);
        let jobs = [
            succeeded("late"),
            succeeded("done"),
            succeeded("unsure"),
            succeeded("refused"),
            job("stopped", JobState::Cancelled, 1, None, &[]),
            succeeded("unsaid"),
        ];
        let events: BTreeMap<String, Vec<Event>> = [
            ("late".to_string(), vec![at("Started", 500), at("Succeeded", 1_200)]),
            ("done".to_string(), vec![at("Started", 500), at("Succeeded", 2_000)]),
            ("unsure".to_string(), vec![at("Succeeded", 5_000)]),
            ("refused".to_string(), vec![at("Succeeded", 5_000)]),
            ("stopped".to_string(), vec![at("Cancelled", 990)]),
            ("unsaid".to_string(), vec![at("Started", 500)]),
        ]
        .into();
        let expected = [
            "late ended Succeeded 200 ms after its cancel was acknowledged (succeeded at 1200, acknowledged at 1000; tolerance 2 ms)",
            "unsaid ended Succeeded although its cancel was acknowledged at 1000, and its events do not say when it succeeded",
        ];
        assert_eq!(succeeded_after_cancel(&ops, &jobs, &events, 2), expected);
        // A leader 7 s ahead stamps a success committed before the acknowledgement up to 7 s late.
        let tolerance_ms = placement_tolerance_ms(&[0, 7, -7]);
        assert!(succeeded_after_cancel(&ops, &jobs[..2], &events, tolerance_ms).is_empty());
        // The verdict holds the same lines.
        let dir = tempfile::tempdir().unwrap();
        let violations = judged(dir.path(), &ops, &jobs, &events);
        let found: Vec<&String> = violations.iter().filter(|v| v.contains("ended Succeeded")).collect();
        assert_eq!(found, expected, "{violations:?}");
    }

    #[test]
    fn an_older_attempts_checkpoint_after_a_newer_attempt_started_is_two_attempts_at_once() {
        let starts = [
            start("a", 1, "0", "n1", 100),
            start("a", 1, "1", "n2", 100),
            start("a", 2, "1", "n3", 1_010),
            start("a", 2, "0", "n2", 1_000),
            start("a", 3, "0", "n1", 5_000),
            start("b", 2, "0", "n1", 1_000),
        ];
        let fine = [
            // Attempt 1's stop saved before attempt 2 started, or within a rounding of it.
            ckpt("a", 1, "0", 10, 990),
            ckpt("a", 1, "1", 10, 1_002),
            ckpt("a", 2, "0", 20, 4_000),
            // The newest attempt's own checkpoint, and one of a job whose only later start
            // is another job's (b's attempt 2).
            ckpt("b", 2, "0", 5, 3_000),
            ckpt("c", 1, "0", 5, 9_000),
        ];
        assert!(checkpointed_after_newer_start(&starts, &fine, WITNESS_SLACK_MS).is_empty());
        let late = [ckpt("a", 1, "1", 11, 1_500), ckpt("a", 2, "0", 21, 6_000)];
        let expected = [
            "a attempt 1 rank 1 wrote a checkpoint (step 11) at 1500, 500 ms after attempt 2 rank 0 started at 1000: two attempts alive at once",
            "a attempt 2 rank 0 wrote a checkpoint (step 21) at 6000, 1000 ms after attempt 3 rank 0 started at 5000: two attempts alive at once",
        ];
        assert_eq!(checkpointed_after_newer_start(&starts, &late, WITNESS_SLACK_MS), expected);
        // The verdict reads them from the witness records.
        let dir = tempfile::tempdir().unwrap();
        let line = |s: &WitnessedStart| {
            format!("{} {} {} {} 0 {} fresh -\n", s.start.job, s.start.attempt, s.rank, s.node, s.start.at_ms)
        };
        std::fs::write(dir.path().join("starts"), starts.iter().map(line).collect::<String>()).unwrap();
        let written =
            fine.iter().chain(&late).map(|c| format!("{} {} {} n1 {} {}\n", c.job, c.attempt, c.rank, c.step, c.at_ms));
        std::fs::write(dir.path().join("checkpoints"), written.collect::<String>()).unwrap();
        let violations = judged(dir.path(), &[], &[], &BTreeMap::new());
        let found: Vec<&String> = violations.iter().filter(|v| v.contains("wrote a checkpoint")).collect();
        assert_eq!(found, expected, "{violations:?}");
    }
}
