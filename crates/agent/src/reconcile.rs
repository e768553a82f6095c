//! The supervisor's decisions, without IO: what a directive means for the replicas of this
//! node (`plan`), in which order a stop talks to the journal and to the process (`stop_steps`),
//! what a restarted agent owes a stop it journaled (`adopt_steps`), and how a replica that
//! ended is recorded and reported (`ending`). The supervisor
//! (`supervisor.rs`) gathers the inputs (journal, lease, its replica table), calls these, and
//! carries out what they return: signals, journal writes, spawns, observations.
//!
//! Everything here is a function of its arguments, so the rules (fencing, the attempt fence,
//! the lease, deferral behind a GPU still held, the crash windows of a stop) are tested with
//! tables and properties instead of processes.

use std::collections::{BTreeMap, BTreeSet};

use baton_proto::v1::{Action, Assignment, Directive};

use crate::checkpoint::written_after;
use crate::fence::{Fence, Refused};
use crate::journal::{Outcome, Phase, ReplicaKey, ReplicaRecord, StopInfo};
use crate::launch::Unjournaled;
use crate::limits::{
    LEASE_STOP_GRACE_MS, MAX_ASSIGNMENTS_PER_DIRECTIVE, MAX_GRACE_MS, MTIME_SLACK_MS, WATCHDOG_SLACK_MS,
};
use crate::suspensions::Answer;

/// What the supervisor knows of one replica it tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub phase: Phase,
    pub outcome: Option<Outcome>,
    pub gpus: Vec<u32>,
    /// Thousandths of its one GPU when it shares it (decisions.md section 11); 0: whole.
    pub gpu_milli: u32,
}

/// Everything a directive is reconciled against, read by the caller beforehand.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The highest term seen and its leader (journal).
    pub fence: Fence,
    /// The lease was granted once and has run out.
    pub lease_expired: bool,
    /// No lease was ever granted to this run of the agent (it just started, or its first
    /// report got no answer): nothing starts or resumes before one is. Replicas a previous
    /// run left are stopped by their watchdogs when that run's lease runs out.
    pub lease_never_granted: bool,
    /// Replicas the supervisor tracks, finished ones included.
    pub replicas: BTreeMap<ReplicaKey, Known>,
    /// The highest attempt journaled per job of the directive.
    pub max_attempts: BTreeMap<u64, u32>,
    /// Keys of the directive that finished here and whose records were pruned.
    pub pruned: BTreeSet<ReplicaKey>,
    /// Replicas an earlier directive wanted started that wait for their GPUs.
    pub deferred: BTreeSet<ReplicaKey>,
    /// Why the journal cannot be written now, if it cannot.
    pub journal_failing: Option<String>,
    /// Live replicas the journal did not know (it was lost with them running), killed and
    /// not gone yet: what they hold is unknown, so nothing starts or resumes meanwhile.
    pub unknown_live: usize,
    /// Replicas that ended whose processes live on (killed, not gone yet), with their GPUs:
    /// the GPUs stay held, and a directive's word on them waits until they are gone.
    pub lingering: BTreeMap<ReplicaKey, (Vec<u32>, u32)>,
    /// Of the replicas held suspended: where the report of their suspension stands (none:
    /// not reported since this agent started).
    pub suspensions: BTreeMap<ReplicaKey, Answer>,
}

/// One thing to do for one replica, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Not wanted any more: SIGTERM, SIGKILL after the kill grace; nothing is reported.
    Kill(ReplicaKey),
    /// Start it (its GPUs are free).
    Start(ReplicaKey),
    /// SIGCONT a suspended replica.
    Resume(ReplicaKey),
    /// Checkpoint-then-stop with the assignment's signal and grace.
    Stop(ReplicaKey),
    /// A STOP of a replica that never ran here: remember it stopped, report it.
    StopNeverRan(ReplicaKey),
    /// A STOP of a replica that already stopped: report the same again.
    ReportStopped { key: ReplicaKey, checkpointed: bool },
    /// A STOP of a replica killed as unwanted: it counts as stopped without a checkpoint.
    KilledCountsAsStopped(ReplicaKey),
    /// A RUN (or a SUSPEND) of a replica that ended here without its own exit (killed as no
    /// longer wanted, stopped, or pruned): report it ended, cause `KilledHere`, so that a
    /// leader that still counts it running (or being suspended) requeues the job instead of
    /// waiting for it for good.
    ReportKilledHere { key: ReplicaKey, checkpointed: bool },
    /// A RUN of a replica whose own exit ended its job (rank 0, or a non-zero code): report
    /// that exit again; the leader that holds it running may have missed it. Also any exit
    /// found after the journal was lost (`end_of_unrecorded`), which was never told.
    ReportExited { key: ReplicaKey, code: i32 },
    /// SIGSTOP a running replica and report it stopped.
    Suspend(ReplicaKey),
    /// A SUSPEND the leader still awaits of a replica held suspended here: report it
    /// suspended again (a resume in place between two suspensions was missed here).
    ReportSuspended(ReplicaKey),
    /// A SUSPEND of a replica that never ran here: as `StopNeverRan`, remember it stopped (a
    /// later RUN of it starts nothing), and report it ended here (`KilledHere`): there is
    /// nothing to resume in place.
    SuspendNeverRan(ReplicaKey),
    /// A RUN of a replica that never ran here, while the journal takes no writes: it does
    /// not start (its start must be journaled first), and the leader is told (`why`: the
    /// journal's error), once, so that it requeues the job and takes the node out instead of
    /// holding the job Running with no process.
    Unrecorded { key: ReplicaKey, why: String },
    /// Nothing is done for this assignment; `why` is logged.
    Ignore { key: ReplicaKey, why: Ignored },
}

/// Why an assignment is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    OlderAttempt {
        newest: u32,
    },
    FinishedHere,
    UnknownAction(i32),
    /// A RUN while the lease has run out: nothing starts or resumes.
    LeaseExpired,
    /// A RUN before any lease was granted: nothing starts or resumes.
    NoLease,
    /// A RUN of a replica that is being stopped: it does not restart here.
    BeingStopped,
    /// A RUN while the journal cannot be written: a start or a resume must be journaled
    /// before it happens. Done once the journal takes writes again.
    JournalFailing(String),
    /// A RUN while replicas the journal did not know are being killed: what they hold is
    /// unknown. Done once they are gone.
    UnknownLive(usize),
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ignored::OlderAttempt { newest } => write!(f, "an older attempt than {newest}, the newest seen here"),
            Ignored::FinishedHere => write!(f, "a RUN of a replica that already finished here"),
            Ignored::UnknownAction(a) => write!(f, "unknown action {a}"),
            Ignored::LeaseExpired => write!(f, "not started or resumed: the lease ran out"),
            Ignored::NoLease => write!(f, "not started or resumed: no lease was granted yet"),
            Ignored::BeingStopped => write!(f, "a RUN of a replica that is being stopped; it does not restart here"),
            Ignored::JournalFailing(why) => {
                write!(f, "not started or resumed until the journal takes writes again: {why}")
            }
            Ignored::UnknownLive(n) => write!(
                f,
                "not started or resumed until {n} live replica cgroup(s) the journal did not know are gone (killed)"
            ),
        }
    }
}

/// Why a whole directive is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectiveRefused {
    #[error(transparent)]
    Fenced(#[from] Refused),
    #[error("{count} assignments; at most {MAX_ASSIGNMENTS_PER_DIRECTIVE}")]
    TooManyAssignments { count: usize },
}

/// What a directive asks of the supervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// A fence to journal before anything else is done (a new term or leader).
    pub remember: Option<Fence>,
    pub acts: Vec<Act>,
    /// The replicas that wait for their GPUs from now on (replaces the earlier set).
    pub deferred: BTreeSet<ReplicaKey>,
    /// The keys the directive places here (finished records of these are kept).
    pub wanted: BTreeSet<ReplicaKey>,
}

pub fn key_of(a: &Assignment) -> ReplicaKey {
    ReplicaKey { job_id: a.job_id, attempt: a.attempt, rank: a.rank }
}

/// Reconciles a directive (the whole desired state of the node) with what runs here.
pub fn plan(d: &Directive, inputs: &Inputs) -> Result<Plan, DirectiveRefused> {
    let next = inputs.fence.check(d.term, d.leader_id)?;
    if d.assignments.len() > MAX_ASSIGNMENTS_PER_DIRECTIVE {
        return Err(DirectiveRefused::TooManyAssignments { count: d.assignments.len() });
    }
    let mut plan = Plan { remember: (next != inputs.fence).then_some(next), ..Plan::default() };
    let mut wanted: BTreeMap<ReplicaKey, &Assignment> = BTreeMap::new();
    for a in &d.assignments {
        let key = key_of(a);
        match inputs.max_attempts.get(&a.job_id) {
            Some(&newest) if a.attempt < newest => {
                plan.acts.push(Act::Ignore { key, why: Ignored::OlderAttempt { newest } });
            }
            _ => {
                wanted.insert(key, a);
            }
        }
    }
    plan.wanted = wanted.keys().copied().collect();
    // The newest directive decides what still waits for its GPUs.
    plan.deferred = inputs.deferred.iter().filter(|k| wanted.contains_key(k)).copied().collect();
    // Whatever runs here and is not wanted any more goes first.
    for (key, known) in &inputs.replicas {
        if known.phase != Phase::Finished && !wanted.contains_key(key) {
            plan.acts.push(Act::Kill(*key));
        }
    }
    // GPUs held by a replica that has not ended, or by one this plan starts.
    let mut held: Vec<Hold> = inputs
        .replicas
        .iter()
        .filter(|(_, k)| k.phase != Phase::Finished)
        .map(|(&key, k)| Hold { key, gpus: &k.gpus, milli: k.gpu_milli })
        .chain(inputs.lingering.iter().map(|(&key, (gpus, milli))| Hold { key, gpus, milli: *milli }))
        .collect();
    for (key, a) in &wanted {
        if inputs.lingering.contains_key(key) {
            // Its end is told once its processes are gone (or it is reported unkillable):
            // until then nothing is said or done of it.
            continue;
        }
        let act = match Action::try_from(a.action) {
            Ok(Action::Run) => plan_run(*key, a, inputs, &mut held, &mut plan.deferred),
            Ok(Action::Stop) => {
                plan.deferred.remove(key);
                plan_stop(*key, inputs)
            }
            Ok(Action::Suspend) => {
                plan.deferred.remove(key);
                plan_suspend(*key, a, d.state_index, inputs)
            }
            _ => Some(Act::Ignore { key: *key, why: Ignored::UnknownAction(a.action) }),
        };
        plan.acts.extend(act);
    }
    Ok(plan)
}

fn plan_run<'a>(
    key: ReplicaKey,
    a: &'a Assignment,
    inputs: &Inputs,
    held: &mut Vec<Hold<'a>>,
    deferred: &mut BTreeSet<ReplicaKey>,
) -> Option<Act> {
    if inputs.lease_expired {
        // Maybe the leader has declared this node lost and placed the job elsewhere:
        // nothing starts or resumes until a leader renews the lease.
        return Some(Act::Ignore { key, why: Ignored::LeaseExpired });
    }
    if inputs.lease_never_granted {
        // A leader may have placed the job here and, since, elsewhere: the agent learns which
        // leader it may obey only with a grant (a node that attached and was cut off at once
        // must not start what it was told before the cut).
        return Some(Act::Ignore { key, why: Ignored::NoLease });
    }
    let refused = match &inputs.journal_failing {
        Some(why) => Some(Act::Ignore { key, why: Ignored::JournalFailing(why.clone()) }),
        None => {
            (inputs.unknown_live > 0).then_some(Act::Ignore { key, why: Ignored::UnknownLive(inputs.unknown_live) })
        }
    };
    let Some(known) = inputs.replicas.get(&key) else {
        if inputs.pruned.contains(&key) {
            // It finished here; how is forgotten. Asked to run it, the leader has missed its
            // end (or is stale, and then the report is ignored as not placed).
            return Some(Act::ReportKilledHere { key, checkpointed: false });
        }
        if let Some(why) = &inputs.journal_failing {
            return Some(Act::Unrecorded { key, why: why.clone() });
        }
        if refused.is_some() {
            return refused;
        }
        let hold = Hold { key, gpus: &a.gpus, milli: a.gpu_milli };
        if blocker(&hold, held).is_some() {
            deferred.insert(key);
            return None;
        }
        deferred.remove(&key);
        held.push(hold);
        return Some(Act::Start(key));
    };
    match known.phase {
        Phase::Suspended => refused.or(Some(Act::Resume(key))),
        Phase::Running => None,
        Phase::Finished => run_of_finished(key, known.outcome),
        Phase::Stopping | Phase::Killing => Some(Act::Ignore { key, why: Ignored::BeingStopped }),
    }
}

/// A RUN (or a SUSPEND) of a replica that finished here: it never starts again (the attempt
/// fence), but a leader that sends it believes it runs, and would hold the job Running (or
/// Preempting) with no process, so it is told how the replica ended.
pub fn run_of_finished(key: ReplicaKey, outcome: Option<Outcome>) -> Option<Act> {
    match outcome {
        // Its own exit ends the job: said again.
        Some(Outcome::Exited { code }) if key.rank == 0 || code != 0 => Some(Act::ReportExited { key, code }),
        // A rank other than 0 that exited 0 is done by design while the gang goes on; its
        // exit was reported, and saying it again each time the RUN is applied would change nothing.
        Some(Outcome::Exited { .. }) => Some(Act::Ignore { key, why: Ignored::FinishedHere }),
        Some(Outcome::Stopped { checkpointed }) => Some(Act::ReportKilledHere { key, checkpointed }),
        Some(Outcome::Killed) | None => Some(Act::ReportKilledHere { key, checkpointed: false }),
    }
}

/// A replica that ran here and ended while no record knew it (its agent down, its journal
/// then lost): its end was never told, whatever its rank, so it is told now. A rank other
/// than 0 that exited 0 too: the leader holds its resources until it hears of it (a chaos
/// run found a job's gang rank held for ever on a node that ignored each RUN of it).
pub fn end_of_unrecorded(key: ReplicaKey, outcome: Outcome) -> Act {
    match outcome {
        Outcome::Exited { code } => Act::ReportExited { key, code },
        Outcome::Stopped { checkpointed } => Act::ReportKilledHere { key, checkpointed },
        Outcome::Killed => Act::ReportKilledHere { key, checkpointed: false },
    }
}

/// How a replica that ended while no record knew it ended, from what it left (`Traces`):
/// its watchdog's lease marker, or the agent's stop marker, makes it a stop whatever its
/// exit code, as `ending` reads a journaled replica's (a workload exits 0 after the
/// checkpoint its stop signal asked for: read as its own exit, chaos runs' jobs counted
/// Succeeded at step 81 of 133 and 57 of 74); else its exit file's code; else it was killed.
pub fn unrecorded_ending(t: Traces) -> Outcome {
    if t.watchdog_stopped || t.stop_sent {
        return Outcome::Stopped { checkpointed: saved_since(t.started_unix_ms, t.newest_checkpoint_unix_ms) };
    }
    match t.code {
        Some(code) => Outcome::Exited { code },
        None => Outcome::Killed,
    }
}

/// Whether a rank's newest file (`newest`, 0: none) was written since its attempt started
/// at `started_ms` on the agent's wall clock, within the file times' slack.
fn saved_since(started_ms: u64, newest: u64) -> bool {
    newest > 0 && newest + MTIME_SLACK_MS >= started_ms
}

/// What an ended replica no record knew left behind (`unrecorded_ending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traces {
    /// The code in its exit file, if it wrote one.
    pub code: Option<i32>,
    /// Its watchdog left the lease marker: the lease ran out and it stopped the replica.
    pub watchdog_stopped: bool,
    /// The agent left its stop marker: it signalled the replica to stop or to die.
    pub stop_sent: bool,
    /// When its wrapper started (its start marker's time; 0 unknown).
    pub started_unix_ms: u64,
    /// The newest file of its rank under the job's checkpoint directory (0: none).
    pub newest_checkpoint_unix_ms: u64,
}

fn plan_stop(key: ReplicaKey, inputs: &Inputs) -> Option<Act> {
    let Some(known) = inputs.replicas.get(&key) else { return Some(Act::StopNeverRan(key)) };
    match (known.phase, known.outcome) {
        (Phase::Running | Phase::Suspended | Phase::Killing, _) => Some(Act::Stop(key)),
        (Phase::Finished, Some(Outcome::Stopped { checkpointed })) => Some(Act::ReportStopped { key, checkpointed }),
        (Phase::Finished, Some(Outcome::Killed)) => Some(Act::KilledCountsAsStopped(key)),
        // Stopping already; or it ended on its own, and that Exited observation is what
        // the leader needs.
        (Phase::Stopping | Phase::Finished, _) => None,
    }
}

fn plan_suspend(key: ReplicaKey, a: &Assignment, state_index: u64, inputs: &Inputs) -> Option<Act> {
    match inputs.replicas.get(&key) {
        None => Some(Act::SuspendNeverRan(key)),
        Some(k) if k.phase == Phase::Running => Some(Act::Suspend(key)),
        Some(k) if k.phase == Phase::Suspended && a.awaiting_suspended => {
            new_suspension(inputs.suspensions.get(&key), state_index).then_some(Act::ReportSuspended(key))
        }
        // It ended here (its lease stop, say, whose report the leader missed): its end is
        // told as to a RUN, or the leader holds the job Preempting until the node is lost.
        // As `KilledHere`, not as stopped: a job suspended with no process would never resume.
        Some(k) if k.phase == Phase::Finished => run_of_finished(key, k.outcome),
        Some(_) => None,
    }
}

/// A SUSPEND the leader awaits, of a replica held suspended, in a directive built from a
/// state that had applied `state_index` commands, is a new suspension (this agent missed a
/// resume in place since the one it reported, see
/// `tests::a_suspend_the_leader_awaits_is_answered_again_only_if_it_is_a_new_suspension`)
/// when the leader had recorded the report of the earlier one by then. One whose report is
/// still on its way is answered by it; a repeat would arrive later, and count as whatever
/// stop of the job is in progress then. Not reported since this agent started: said again,
/// once.
fn new_suspension(answer: Option<&Answer>, state_index: u64) -> bool {
    match answer {
        None => true,
        Some(Answer::InFlight) => false,
        Some(Answer::Recorded { state_index: recorded }) => state_index >= *recorded,
    }
}

/// GPUs a replica holds, or would.
#[derive(Debug, Clone, Copy)]
pub struct Hold<'a> {
    pub key: ReplicaKey,
    pub gpus: &'a [u32],
    /// Thousandths of its one GPU when it shares it (decisions.md section 11); 0: whole.
    pub milli: u32,
}

/// What keeps `want` from starting now: a replica that has not ended holding one of its GPUs
/// (`gpu_holder`), or an older attempt of its own job still here. The older one's last save,
/// written as it stops, is the newer one's to resume from, and two attempts of one job never
/// run side by side on a node (chaos seed 22502: a CPU job's next attempt started here beside
/// its predecessor, which a thaw had run again, and started from zero 150 ms before that one
/// saved its checkpoint).
pub fn blocker(want: &Hold, held: &[Hold]) -> Option<ReplicaKey> {
    gpu_holder(want, held).or_else(|| {
        let older = |h: &&Hold| h.key.job_id == want.key.job_id && h.key.attempt < want.key.attempt;
        held.iter().find(older).map(|h| h.key)
    })
}

/// A replica other than `want`'s that has not ended holds one of its GPUs in a way that
/// keeps `want` off it: whole, or (both sharing it) with so much that `want`'s share does
/// not fit beside what the sharers hold.
pub fn gpu_holder(want: &Hold, held: &[Hold]) -> Option<ReplicaKey> {
    for g in want.gpus {
        let on: Vec<&Hold> = held.iter().filter(|h| h.key != want.key && h.gpus.contains(g)).collect();
        let Some(first) = on.first() else { continue };
        let whole = want.milli == 0 || on.iter().any(|h| h.milli == 0);
        let shared: u64 = on.iter().map(|h| u64::from(h.milli)).sum::<u64>() + u64::from(want.milli);
        if whole || shared > baton_model::ledger::GPU_MILLI {
            return Some(first.key);
        }
    }
    None
}

/// How a replica ended, as recorded and told to the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Its own exit, reported `Exited`.
    Exited { code: i32 },
    /// Stopped (a STOP, or its lease ran out), reported `Stopped`.
    Stopped { checkpointed: bool, lease_expired: bool },
    /// Killed as no longer wanted: nothing is reported.
    Killed,
}

/// What the supervisor saw of a replica that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The wrapper's exit code.
    pub code: i32,
    /// Its watchdog left the marker that says it stopped the replica (the lease ran out
    /// while no agent acted).
    pub watchdog_stopped: bool,
    /// The agent left its stop marker (`launch::stop_marker`): it signalled the replica to
    /// stop or to die, maybe while its journal took no writes, so that the record still
    /// says it runs.
    pub stop_sent: bool,
    /// The newest file under the job's checkpoint directory (0: none).
    pub newest_checkpoint_unix_ms: u64,
    pub now_unix_ms: u64,
}

/// How a replica in `rec`'s phase that ended as `e` is recorded; `None` if it had already.
/// A replica journaled running whose stop marker is there was signalled to stop (its stop
/// could not be journaled, or the agent went down before it was): not its own exit, as for
/// a replica no record knew (`unrecorded_ending`); a workload exits 0 after the checkpoint
/// its stop signal asked for.
pub fn ending(rec: &ReplicaRecord, e: Ended) -> Option<Ending> {
    let newest = e.newest_checkpoint_unix_ms;
    match rec.phase {
        Phase::Running | Phase::Suspended if e.watchdog_stopped || e.stop_sent => {
            // Not the job's own exit. Any checkpoint this attempt wrote counts, also one
            // written while no agent watched (the leader may not know of it yet): a file
            // newer than the newest at its start, file times against file times, as for a
            // stop. A record journaled before that was recorded has only its start on the
            // agent's wall clock.
            let checkpointed = match rec.newest_checkpoint_at_start_unix_ms {
                Some(before_ms) => written_after(before_ms, newest),
                None => saved_since(rec.started_unix_ms, newest),
            };
            Some(Ending::Stopped { checkpointed, lease_expired: e.watchdog_stopped })
        }
        Phase::Running | Phase::Suspended => Some(Ending::Exited { code: e.code }),
        Phase::Stopping => {
            let (at_signal_ms, lease_expired) = match rec.stop {
                Some(s) => (s.newest_before_unix_ms, s.lease_expired),
                // A record without its stop: only a file written from now on would count.
                None => (u64::MAX, false),
            };
            // Any checkpoint this attempt wrote is one to resume from, also one written
            // just before the signal (a rank that saved and exited as the stop came:
            // `tests::a_stop_counts_every_checkpoint_this_attempt_wrote`). A record journaled
            // before the newest file at its start was recorded counts only what was written
            // since the signal, as then.
            let before_ms = rec.newest_checkpoint_at_start_unix_ms.map_or(at_signal_ms, |s| s.min(at_signal_ms));
            let checkpointed = written_after(before_ms, newest);
            Some(Ending::Stopped { checkpointed, lease_expired })
        }
        Phase::Killing => Some(Ending::Killed),
        Phase::Finished => None,
    }
}

/// What a restarted agent makes of a replica journaled without its pid, from the `traces`
/// it found of it (`launch::find_unjournaled`); `same_boot`: the machine has not restarted
/// since the agent journaled it. No trace proves it never started only within one boot:
/// the wrapper's `.started` marker is not synced, and a power cut takes it with the page
/// cache. After a restart of the machine such a replica may have run, so it counts as
/// ended (its exit unknown, reported as killed) and no RUN of its attempt starts it again.
pub fn without_pid(traces: Unjournaled, same_boot: bool) -> Unjournaled {
    match traces {
        Unjournaled::NeverStarted if !same_boot => Unjournaled::Ended,
        other => other,
    }
}

/// One step of talking to the outside world, done in the order given.
// A stop makes at most four steps, carried out at once: boxing the record would only add
// an allocation per step.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Journal(ReplicaRecord),
    /// Signal the replica's process group.
    Signal {
        pid: u32,
        signal: i32,
    },
}

/// The clocks a step is stamped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    pub unix_ms: u64,
    pub boot_ms: u64,
}

/// The grace a stop for the lease still has at `now_ms` (monotonic), the lease having run
/// out at `ran_out_at_ms`. The timing argument (L + S + D < T, docs/protocol.md) has every
/// such stop end by the lease's end plus the watchdog's slack and the grace, before the
/// leader may declare the node lost and place its jobs elsewhere. Whoever acts late (an
/// agent stopped, or a whole node frozen and thawed) has that much less; none once the
/// moment passed, and the replica is then killed without its stop signal: told to stop, it
/// would save a checkpoint beside its job's next attempt. Unknown when it ran out: the
/// whole grace.
pub fn lease_stop_grace_ms(ran_out_at_ms: Option<u64>, now_ms: u64) -> u64 {
    let Some(ran_out) = ran_out_at_ms else { return LEASE_STOP_GRACE_MS };
    let deadline = ran_out.saturating_add(WATCHDOG_SLACK_MS + LEASE_STOP_GRACE_MS);
    deadline.saturating_sub(now_ms).min(LEASE_STOP_GRACE_MS)
}

/// A checkpoint-then-stop of `rec`. The stop is journaled before the signal goes out, and
/// marked signalled after: a crash between the two leaves a record that says the signal
/// may not have gone out (`adopt_steps` sends it), never a replica that was told to stop
/// while the journal says it runs (whose exit would be reported as the job's own).
pub fn stop_steps(
    rec: &ReplicaRecord,
    signal: i32,
    grace_ms: u64,
    lease_expired: bool,
    newest_before_unix_ms: u64,
    now: Clock,
) -> Vec<Step> {
    let grace_ms = grace_ms.min(MAX_GRACE_MS);
    let stop = StopInfo {
        signal_unix_ms: now.unix_ms,
        deadline_unix_ms: now.unix_ms + grace_ms,
        deadline_boot_ms: now.boot_ms + grace_ms,
        newest_before_unix_ms,
        lease_expired,
        signal,
        signalled: false,
    };
    let intent = ReplicaRecord { phase: Phase::Stopping, stop: Some(stop), ..rec.clone() };
    // A stopped process cannot handle its checkpoint signal until it runs again: suspended,
    // or journaled running by an agent that died while it suspended it.
    vec![
        Step::Journal(intent.clone()),
        Step::Signal { pid: rec.pid, signal },
        Step::Signal { pid: rec.pid, signal: libc::SIGCONT },
        Step::Journal(signalled(intent)),
    ]
}

fn signalled(mut rec: ReplicaRecord) -> ReplicaRecord {
    if let Some(stop) = rec.stop.as_mut() {
        stop.signalled = true;
    }
    rec
}

/// What a restarted agent does for a replica it re-adopted alive: a stop journaled but
/// maybe not signalled (the agent went down in between) gets its signal now, with a SIGCONT
/// in case it was suspended before.
pub fn adopt_steps(rec: &ReplicaRecord) -> Vec<Step> {
    match rec.stop {
        Some(stop) if rec.phase == Phase::Stopping && !stop.signalled => vec![
            Step::Signal { pid: rec.pid, signal: stop.signal },
            Step::Signal { pid: rec.pid, signal: libc::SIGCONT },
            Step::Journal(signalled(rec.clone())),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
