//! Liveness: once the faults have healed, every job ends or waits for a named reason. Safety
//! checks (`truth`, the invariants) pass for a cluster that does nothing at all; this one
//! fails a cluster that holds a job Running with nothing running (a lost report, a
//! declaration forgotten before it committed), a stop that never completes, a process that
//! runs on though nothing names it, or a job that waits without saying why.
//!
//! What the state asks of each node (`baton_server::desired`, the directives the leader
//! sends) is held against what runs there (`truth`). A disagreement is normal while it
//! lasts a few beats (a start on its way, a stop within its grace, a report not yet
//! committed); one that lasts `LIVENESS_BOUND_MS` after the faults healed is a violation.
//! The bound is not a tolerance on an exact fact: "eventually" needs one, and every step the
//! cluster takes to settle has its own bound (`timing`), which this sums with room to spare.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::job::{JobState, UNSEEN_REASON, UNTIL_PREEMPTOR_GONE};
use baton_model::state::State;
use baton_proto::v1::Action;

use crate::timing::{CYCLE_MS, GRACE_MS, HEARTBEAT_TIMEOUT_MS, LEASE_MS, STOP_BOUND_MS, STRAY_SETTLE_MS};
use crate::truth::{Rank, Truth};

/// How long a disagreement between the state and the processes may last once the faults
/// have healed: a node's silence declared (or a vanished replica), a stray settled and
/// stopped within its grace, a lease run out and stopped, each at most once, and cycles
/// between them. In 1,000 seeds of one minute the longest lasted 4,000 ms (stop 82).
pub const LIVENESS_BOUND_MS: u64 =
    HEARTBEAT_TIMEOUT_MS + STRAY_SETTLE_MS + GRACE_MS + LEASE_MS + STOP_BOUND_MS + 4 * CYCLE_MS;
/// How long a run goes on after the healing, at most, in bounds: long enough for a
/// disagreement that begins a bound after the healing to be told.
pub const MAX_DRAIN_BOUNDS: u64 = 3;
/// How often the step loop looks, after the faults healed.
pub const LOOK_EVERY_MS: u64 = 500;
/// Disagreements followed at once, at most (each rank of each job, and waiting jobs).
const MAX_FOLLOWED: usize = 100_000;

/// What the state asks of a rank on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Asked {
    Run,
    Suspend,
    Stop,
    /// The state runs its attempt and knows this rank ended (`Job::ended_ranks`).
    Ended,
    /// Nothing: no directive names it.
    Nothing,
}

/// What runs of a rank on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Found {
    Absent,
    Running,
    Suspended,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Stuck {
    Rank {
        node: String,
        rank: Rank,
        asked: Asked,
        found: Found,
    },
    /// A pending job whose reason is empty, or still the one it was submitted with.
    Unexplained {
        job: u64,
    },
    /// A job suspended in place whose preemptor holds nothing any more, and whose reason
    /// still says it waits for that (no cycle resumed it or said why it may not).
    Forgotten {
        job: u64,
    },
}

impl Stuck {
    fn describe(&self) -> String {
        let (node, rank, asked, found) = match self {
            Stuck::Rank { node, rank, asked, found } => (node, rank, asked, found),
            Stuck::Unexplained { job } => return format!("job {job} waits, and no cycle has said why"),
            Stuck::Forgotten { job } => {
                return format!(
                    "job {job} stays suspended though its preemptor holds nothing, and no cycle has said why"
                );
            }
        };
        let what = match (asked, found) {
            (Asked::Run, Found::Absent) => "the state runs it there, and no process of it runs",
            (Asked::Run, _) => "the state runs it there, and it stays suspended",
            (Asked::Suspend, Found::Absent) => "the state keeps it suspended there, and no process of it is there",
            (Asked::Suspend, _) => "the state suspends it there, and it runs on",
            (Asked::Stop, Found::Absent) => "its stop there is not complete, and no process of it runs",
            (Asked::Stop, _) => "its stop there is not complete, and it runs on",
            (Asked::Ended, _) => "the state says it ended, and it runs on there",
            (Asked::Nothing, _) => "it runs there, and no directive names it",
        };
        format!("job {} attempt {} rank {} on {node}: {what}", rank.job, rank.attempt, rank.rank)
    }
}

/// The disagreements seen, each since when, and those reported.
#[derive(Debug, Default)]
pub struct Progress {
    since_ms: BTreeMap<Stuck, u64>,
    reported: BTreeSet<Stuck>,
    /// When the faults healed; before, nothing is judged (a partitioned node may hold its
    /// job for as long as the partition lasts).
    healed_ms: Option<u64>,
    next_look_ms: u64,
    /// The disagreement that lasted longest past the healing and then ended, and for how
    /// long: how close the cluster came to the bound.
    pub slowest: Option<(u64, String)>,
}

impl Progress {
    /// How long the slowest disagreement that ended lasted past the healing (0: none did).
    pub fn settled_ms(&self) -> u64 {
        self.slowest.as_ref().map_or(0, |(ms, _)| *ms)
    }

    /// The load ended and the faults healed at `now_ms` (a later call changes nothing).
    pub fn healed(&mut self, now_ms: u64) {
        self.healed_ms.get_or_insert(now_ms);
    }

    /// Whether to look at `now_ms`: every `LOOK_EVERY_MS` once the faults healed (a look
    /// costs a pass over every job).
    pub fn due(&mut self, now_ms: u64) -> bool {
        if self.healed_ms.is_none() || now_ms < self.next_look_ms {
            return false;
        }
        self.next_look_ms = now_ms + LOOK_EVERY_MS;
        true
    }

    /// Whether a run may end at `now_ms`: every disagreement that began before the healing
    /// has been judged, and the last look found none still open (each one then is told,
    /// or ended); or `MAX_DRAIN_BOUNDS` bounds have passed since the healing (jobs still
    /// end and start, and each may disagree for a moment).
    pub fn judged_all(&self, now_ms: u64) -> bool {
        let Some(healed_ms) = self.healed_ms else { return true };
        let open = self.since_ms.keys().any(|k| !self.reported.contains(k));
        let judged = now_ms >= healed_ms + LIVENESS_BOUND_MS + LOOK_EVERY_MS;
        (judged && !open) || now_ms >= healed_ms + MAX_DRAIN_BOUNDS * LIVENESS_BOUND_MS
    }

    /// Compares `state` (the leader's) with the processes in `truth` at `now_ms`, and returns
    /// the disagreements that have now lasted past the bound, each once.
    pub fn look(&mut self, now_ms: u64, state: &State, truth: &Truth) -> Vec<String> {
        let found = disagreements(state, truth);
        let healed_ms = self.healed_ms;
        let past = |since_ms: u64| healed_ms.map_or(0, |h| now_ms.saturating_sub(since_ms.max(h)));
        let settled = self.since_ms.iter().filter(|(k, _)| !found.contains(*k)).map(|(k, s)| (past(*s), k)).max();
        if let Some((ms, k)) = settled.filter(|(ms, _)| *ms > self.settled_ms()) {
            self.slowest = Some((ms, k.describe()));
        }
        self.since_ms.retain(|k, _| found.contains(k));
        for k in found {
            if self.since_ms.len() < MAX_FOLLOWED {
                self.since_ms.entry(k).or_insert(now_ms);
            }
        }
        let late: Vec<Stuck> = self
            .since_ms
            .iter()
            .filter(|(k, since)| past(**since) > LIVENESS_BOUND_MS && !self.reported.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in late {
            let for_ms = past(self.since_ms[&k]);
            out.push(format!("{} ({for_ms} ms after the faults healed)", k.describe()));
            self.reported.insert(k);
        }
        out
    }
}

/// Every rank whose process disagrees with what the state asks of it, every pending job
/// that no cycle has said why it waits, and every job suspended for a preemptor that is gone
/// that no cycle resumed or said why not.
fn disagreements(state: &State, truth: &Truth) -> BTreeSet<Stuck> {
    let mut asked: BTreeMap<(String, Rank), Asked> = BTreeMap::new();
    for (node, list) in baton_server::desired::desired(state) {
        for a in list {
            let rank = Rank { job: a.job_id, attempt: a.attempt, rank: a.rank };
            let what = match a.action() {
                Action::Stop => Asked::Stop,
                // A rank that ended before its job was suspended (a rank other than 0 that
                // exited 0, done while its gang goes on) has nothing to suspend: the agent
                // answers its SUSPEND as it answers its RUN (`reconcile::run_of_finished`).
                Action::Run | Action::Unspecified | Action::Suspend if ended(state, rank) => Asked::Ended,
                Action::Suspend => Asked::Suspend,
                Action::Run | Action::Unspecified => Asked::Run,
            };
            asked.insert((node.to_string(), rank), what);
        }
    }
    let mut running: BTreeMap<(String, Rank), Found> = BTreeMap::new();
    for (node, j) in &truth.journals {
        for (rank, p) in &j.processes {
            let found = if p.suspended { Found::Suspended } else { Found::Running };
            running.insert((node.clone(), *rank), found);
        }
    }
    let keys: BTreeSet<&(String, Rank)> = asked.keys().chain(running.keys()).collect();
    let mut out = BTreeSet::new();
    for key in keys {
        let a = asked.get(key).copied().unwrap_or(Asked::Nothing);
        let f = running.get(key).copied().unwrap_or(Found::Absent);
        if !agree(a, f) {
            out.insert(Stuck::Rank { node: key.0.clone(), rank: key.1, asked: a, found: f });
        }
    }
    for (&job, j) in state.jobs().iter() {
        let unexplained = j.reason.trim().is_empty() || j.reason == UNSEEN_REASON;
        match j.state {
            JobState::Pending if unexplained => out.insert(Stuck::Unexplained { job }),
            // Decisions.md section 7: a job suspended in place resumes once its preemptor is
            // gone (the cycle's `resume_suspended`), or waits for a reason the cycle names.
            JobState::Suspended if state.preemptor_gone(j) && j.reason.ends_with(UNTIL_PREEMPTOR_GONE) => {
                out.insert(Stuck::Forgotten { job })
            }
            _ => false,
        };
    }
    out
}

fn agree(asked: Asked, found: Found) -> bool {
    matches!(
        (asked, found),
        (Asked::Run, Found::Running) | (Asked::Suspend, Found::Suspended) | (Asked::Ended, Found::Absent)
    )
}

/// Whether the state knows that `rank` of its job's current attempt ended.
fn ended(state: &State, rank: Rank) -> bool {
    state.job(rank.job).is_some_and(|j| j.attempt == rank.attempt && j.ended_ranks.contains_key(&rank.rank))
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_model::command::{Command, Op};
    use baton_model::fixture::{self, gpu_job, gpu_node};
    use baton_model::job::TaskSpec;

    use crate::truth::Devices;

    fn apply(s: &mut State, now_ms: u64, op: Op) {
        s.apply(Command { now_ms, op }).expect("the command applies");
    }

    /// Two 4-GPU nodes and a gang of two 4-GPU ranks placed by a real cycle, one per node;
    /// a job submitted after it waits for room.
    fn running_gang() -> State {
        let mut s = State::default();
        apply(&mut s, 1_000, Op::RegisterNodes(vec![gpu_node("n1", 4), gpu_node("n2", 4)]));
        apply(&mut s, 1_000, Op::PutQueue(fixture::gpu_queue("q", 8)));
        let mut spec = gpu_job("gang", "q", 4);
        spec.tasks = vec![TaskSpec { replicas: 2, ..spec.tasks[0].clone() }];
        apply(&mut s, 2_000, Op::Submit { spec, request_id: None });
        let plan = baton_sched::cycle(&s, 2_000);
        apply(&mut s, 2_000, Op::ApplyPlan(plan));
        apply(&mut s, 3_000, Op::Submit { spec: gpu_job("big", "q", 4), request_id: None });
        let plan = baton_sched::cycle(&s, 3_000);
        apply(&mut s, 3_000, Op::ApplyPlan(plan));
        s
    }

    fn rank(job: u64, r: u32) -> Rank {
        Rank { job, attempt: 1, rank: r }
    }

    fn start(t: &mut Truth, node: &str, r: Rank) {
        t.start(0, node, r, Devices { gpus: &[0, 1, 2, 3], gpu_milli: 0, slices: 0 }, 0, u64::MAX);
    }

    /// The gang's rank 1 never runs: nothing is judged before the faults heal, nothing
    /// until the bound has passed after it, and then the rank is told once. The job that
    /// waits for room says why, so it is no disagreement.
    #[test]
    fn a_rank_the_state_runs_and_nothing_runs_is_told_once_past_the_bound_after_healing() {
        let s = running_gang();
        let gang = s.job_by_name("gang").expect("submitted").id;
        assert!(!s.job_by_name("big").expect("submitted").reason.is_empty(), "a waiting job says why");
        let mut t = Truth::default();
        start(&mut t, "n1", rank(gang, 0));
        let mut p = Progress::default();
        assert!(p.look(0, &s, &t).is_empty());
        assert!(p.look(10 * LIVENESS_BOUND_MS, &s, &t).is_empty(), "not judged while faults last");
        p.healed(10 * LIVENESS_BOUND_MS);
        assert!(p.look(11 * LIVENESS_BOUND_MS, &s, &t).is_empty(), "judged from the healing on");
        let told = p.look(11 * LIVENESS_BOUND_MS + 1, &s, &t);
        assert_eq!(told.len(), 1, "{told:?}");
        let expected = format!("job {gang} attempt 1 rank 1 on n2: the state runs it there, and no process of it runs");
        assert!(told[0].starts_with(&expected), "{told:?}");
        assert!(p.look(12 * LIVENESS_BOUND_MS, &s, &t).is_empty(), "told once");
    }

    /// A process nothing names is a stray; one that stops within the bound is only
    /// measured: how long it lasted past the healing.
    #[test]
    fn a_process_no_directive_names_is_told_unless_it_ends_within_the_bound() {
        let s = running_gang();
        let gang = s.job_by_name("gang").expect("submitted").id;
        let mut t = Truth::default();
        start(&mut t, "n1", rank(gang, 0));
        start(&mut t, "n2", rank(gang, 1));
        let stray = Rank { job: gang, attempt: 2, rank: 0 };
        let process = t.journals["n1"].processes[&rank(gang, 0)].clone();
        t.journals.entry("n2".into()).or_default().processes.insert(stray, process.clone());
        let mut p = Progress::default();
        p.healed(1_000);
        assert!(p.look(1_000, &s, &t).is_empty());
        t.end(4_000, "n2", stray, baton_agent::journal::Outcome::Killed, "stopped");
        assert!(p.look(4_000, &s, &t).is_empty());
        assert_eq!(p.settled_ms(), 3_000);
        t.journals.entry("n2".into()).or_default().processes.insert(stray, process);
        assert!(p.look(5_000, &s, &t).is_empty());
        let told = p.look(5_001 + LIVENESS_BOUND_MS, &s, &t);
        assert!(
            told.len() == 1 && told[0].contains("attempt 2 rank 0 on n2: it runs there, and no directive names it"),
            "{told:?}"
        );
    }

    /// A job that no cycle has looked at waits without a reason of its own: normal for a
    /// cycle or two, a violation past the bound.
    #[test]
    fn a_job_that_waits_without_a_reason_is_told_past_the_bound() {
        let mut s = running_gang();
        apply(&mut s, 4_000, Op::Submit { spec: gpu_job("unseen", "q", 4), request_id: None });
        let unseen = s.job_by_name("unseen").expect("submitted").id;
        let mut t = Truth::default();
        let gang = s.job_by_name("gang").expect("submitted").id;
        start(&mut t, "n1", rank(gang, 0));
        start(&mut t, "n2", rank(gang, 1));
        let mut p = Progress::default();
        p.healed(0);
        assert!(p.look(0, &s, &t).is_empty());
        let told = p.look(LIVENESS_BOUND_MS + 1, &s, &t);
        assert_eq!(
            told,
            [format!(
                "job {unseen} waits, and no cycle has said why ({} ms after the faults healed)",
                LIVENESS_BOUND_MS + 1
            )]
        );
    }

    /// Section 7: a job suspended in place for a preemptor that is gone (here cancelled
    /// while it waited for its reservation) must be resumed, or a cycle must say why not;
    /// one whose reason still waits for the preemptor is forgotten.
    #[test]
    fn a_job_suspended_for_a_preemptor_that_is_gone_is_told_until_a_cycle_resumes_it() {
        use baton_model::job::{PreemptionMode, PriorityRef};
        use baton_model::plan::{Decision, Plan, Victim};
        use baton_model::resources::Resources;

        let mut s = State::default();
        let node = baton_model::node::NodeSpec { resources: Resources::of(&[("cpu", 1_000)]), ..gpu_node("n1", 0) };
        apply(&mut s, 1_000, Op::RegisterNodes(vec![node]));
        let mut q = baton_model::queue::QueueSpec::named("q");
        let nominal = Resources::of(&[("cpu", 1_000)]);
        q.quotas.insert(
            baton_model::name::Name::lit("default"),
            baton_model::queue::PoolQuota { nominal, ..Default::default() },
        );
        apply(&mut s, 1_000, Op::PutQueue(q));
        let cpu_job = |name: &str, priority: i32, mode: PreemptionMode| {
            let mut spec = gpu_job(name, "q", 0);
            spec.tasks[0].resources = Resources::of(&[("cpu", 1_000)]);
            spec.priority = PriorityRef::Value(priority);
            spec.preemption_mode = mode;
            spec
        };
        apply(&mut s, 1_000, Op::Submit { spec: cpu_job("low", 1, PreemptionMode::Suspend), request_id: None });
        let plan = baton_sched::cycle(&s, 1_000);
        apply(&mut s, 1_000, Op::ApplyPlan(plan));
        let low = s.job_by_name("low").expect("submitted").id;
        apply(&mut s, 2_000, Op::Submit { spec: cpu_job("high", 100, PreemptionMode::Checkpoint), request_id: None });
        let high = s.job_by_name("high").expect("submitted").id;
        let replicas = s.job(low).expect("low").replicas.clone();
        let preempt = Decision::Preempt {
            job: high,
            victims: vec![Victim { job: low, attempt: 1 }],
            replicas,
            message: "test".into(),
        };
        let plan = Plan { based_on: s.applied(), decisions: vec![preempt] };
        apply(&mut s, 2_000, Op::ApplyPlan(plan));
        let suspended = baton_model::command::Observed::Stopped { job: low, attempt: 1, rank: 0, checkpointed: false };
        apply(&mut s, 3_000, Op::Report { node: baton_model::name::Name::lit("n1"), observations: vec![suspended] });
        assert_eq!(s.job(low).expect("low").state, JobState::Suspended);
        apply(&mut s, 4_000, Op::Cancel { job: high });
        let mut t = Truth::default();
        t.start(0, "n1", rank(low, 0), Devices { gpus: &[], gpu_milli: 0, slices: 0 }, 0, u64::MAX);
        t.journals.get_mut("n1").expect("n1").processes.get_mut(&rank(low, 0)).expect("low").suspended = true;
        let mut p = Progress::default();
        p.healed(0);
        assert!(p.look(0, &s, &t).is_empty());
        let told = p.look(LIVENESS_BOUND_MS + 1, &s, &t);
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].starts_with(&format!("job {low} stays suspended though its preemptor holds nothing")),
            "{told:?}"
        );
        let plan = baton_sched::cycle(&s, 5_000);
        apply(&mut s, 5_000, Op::ApplyPlan(plan));
        assert_eq!(s.job(low).expect("low").state, JobState::Running, "resumed in place");
        t.journals.get_mut("n1").expect("n1").processes.get_mut(&rank(low, 0)).expect("low").suspended = false;
        let mut p = Progress::default();
        p.healed(0);
        assert!(p.look(0, &s, &t).is_empty());
        assert!(p.look(LIVENESS_BOUND_MS + 1, &s, &t).is_empty(), "resumed: nothing is told");
    }
}
