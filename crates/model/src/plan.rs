//! A plan: the scheduler's decisions for one cycle. The leader proposes it through the log;
//! `State::apply` re-checks every decision against the state it meets and rejects what no
//! longer holds (one serialising checker, like Nomad's plan applier).

use serde::{Deserialize, Serialize};

use crate::alloc::ReplicaAlloc;
use crate::job::JobId;
use crate::name::Name;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// How many commands the state had applied when the plan was computed. `apply` refuses
    /// a plan from a state it has not reached, and reports how stale an accepted one was.
    pub based_on: u64,
    /// Applied in order; each is checked against the state left by the ones before it.
    pub decisions: Vec<Decision>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Victim {
    pub job: JobId,
    pub attempt: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// A suspended job whose preemptor is gone runs again on its own resources (not a
    /// person's resume of a paused job, `Op::Resume`; not a restart from a checkpoint).
    /// Named `Resume` in the log, as before the rename.
    #[serde(rename = "Resume")]
    ResumeInPlace { job: JobId, attempt: u32 },
    /// Start the next attempt of a pending job on these replicas.
    Place { job: JobId, attempt: u32, replicas: Vec<ReplicaAlloc> },
    /// Stop `victims` so that `job` can run on `replicas`, which are reserved for it meanwhile.
    Preempt { job: JobId, victims: Vec<Victim>, replicas: Vec<ReplicaAlloc>, message: String },
    /// The job keeps waiting; the reason changed.
    Wait { job: JobId, reason: String },
    /// The running attempt reached its time limit: stop it like a victim of its mode; it
    /// then ends Failed.
    TimeLimit { job: JobId, attempt: u32 },
    /// A starving job reserves these replicas in `pool` (docs/policy.md section 9); it waits
    /// for `waits_for` to end.
    Reserve { job: JobId, pool: Name, replicas: Vec<ReplicaAlloc>, waits_for: Vec<JobId> },
    /// The job's reservation no longer holds (its queue's limits would not admit it, a
    /// reserved node takes no new work, or a window is ahead of one).
    Unreserve { job: JobId, reason: String },
    /// A running elastic gang below its `replicas` is stopped, to start again at once on
    /// `replicas` (more than it runs with; its own resources among them) as its stop
    /// completes (decisions.md section 13). Data format 9.
    Grow { job: JobId, attempt: u32, replicas: Vec<ReplicaAlloc> },
    /// `Preempt` that also takes elastic gangs' replicas above their minimum (`shrunk`,
    /// decisions.md section 13): each is stopped in its mode and starts again at once on
    /// the replicas it keeps (ranks below its minimum). Data format 9.
    PreemptShrinking {
        job: JobId,
        victims: Vec<Victim>,
        shrunk: Vec<Victim>,
        replicas: Vec<ReplicaAlloc>,
        message: String,
    },
}

impl Decision {
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::ResumeInPlace { .. } => "resume",
            Decision::Place { .. } => "place",
            Decision::Preempt { .. } => "preempt",
            Decision::Wait { .. } => "wait",
            Decision::TimeLimit { .. } => "time limit",
            Decision::Reserve { .. } => "reserve",
            Decision::Unreserve { .. } => "unreserve",
            Decision::Grow { .. } => "grow",
            Decision::PreemptShrinking { .. } => "preempt",
        }
    }

    pub fn job(&self) -> JobId {
        match self {
            Decision::ResumeInPlace { job, .. }
            | Decision::Place { job, .. }
            | Decision::Preempt { job, .. }
            | Decision::Wait { job, .. }
            | Decision::TimeLimit { job, .. }
            | Decision::Reserve { job, .. }
            | Decision::Unreserve { job, .. }
            | Decision::Grow { job, .. }
            | Decision::PreemptShrinking { job, .. } => *job,
        }
    }

    /// The data format that introduced this decision (see `Op::format`).
    /// Every variant has its line (no wildcard), as in `Op::format`.
    pub fn format(&self) -> u32 {
        match self {
            Decision::ResumeInPlace { .. }
            | Decision::Place { .. }
            | Decision::Preempt { .. }
            | Decision::Wait { .. }
            | Decision::TimeLimit { .. }
            | Decision::Reserve { .. }
            | Decision::Unreserve { .. } => 1,
            Decision::Grow { .. } | Decision::PreemptShrinking { .. } => 9,
        }
    }
}
