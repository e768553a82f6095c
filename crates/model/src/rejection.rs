//! Why the plan checker refused a decision of a plan (or the whole plan): a closed set, so
//! the leader, the simulator and tests match on the case, and `Display` gives the words
//! people see (event reasons, the simulator's `StepRefused`, logs).

use serde::{Deserialize, Serialize};

use crate::job::JobState;
use crate::name::Name;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    // The whole plan.
    #[error("the plan is based on {based_on} commands applied, but this state has applied only {applied}")]
    FromTheFuture { based_on: u64, applied: u64 },
    #[error("a plan may hold at most {max} decisions")]
    TooManyDecisions { max: usize },

    // The job a decision is about.
    #[error("unknown job")]
    UnknownJob,
    #[error("job {job} has finished")]
    Finished { job: Name },
    #[error("job {job} is {}", state.as_str())]
    WrongState { job: Name, state: JobState },
    #[error("job {job} is {} at attempt {attempt}", state.as_str())]
    WrongAttempt { job: Name, state: JobState, attempt: u32 },
    #[error("job {job} would start attempt {attempt}, expected {expected}")]
    NotNextAttempt { job: Name, attempt: u32, expected: u32 },
    #[error("job {job} is not waiting to be placed")]
    NotWaiting { job: Name },
    #[error("job {job} reaches its time limit only at {at_ms} ms")]
    TimeLimitLater { job: Name, at_ms: u64 },
    #[error("job {job} has no time limit")]
    NoTimeLimit { job: Name },
    #[error("job {job} still runs on its resources")]
    StillRunsOnItsResources { job: Name },
    /// Ranks of its last attempt still hold GPUs (docs/policy.md section 10, "Completing");
    /// `why` says which and where.
    #[error("job {job} is {why}")]
    Completing { job: Name, why: String },

    // Where it would run.
    #[error("unknown node {node}")]
    UnknownNode { node: Name },
    #[error("node {node} is not ready")]
    NodeNotReady { node: Name },
    #[error("node {node} is not schedulable")]
    NodeNotSchedulable { node: Name },
    /// decisions.md section 14: before a window's start only a job whose time limit ends it
    /// by then goes there; a reservation never takes such a node.
    #[error("node {node} is held for maintenance window {window}, which starts before the job would end")]
    MaintenanceAhead { node: Name, window: Name },
    #[error("node {node} is in maintenance window {window}")]
    InMaintenance { node: Name, window: Name },
    #[error("node {node} is not in an allowed pool")]
    PoolNotAllowed { node: Name },
    #[error("replicas do not cover the job's tasks exactly once")]
    ReplicasDoNotCover,
    #[error("replica {index} of task {task} has the wrong GPUs")]
    WrongGpus { index: u32, task: Name },
    #[error("topology node: the gang spans nodes")]
    SpansNodes,
    #[error("topology rack: the gang spans racks")]
    SpansRacks,
    #[error("two replicas were given the same GPU")]
    SameGpu,
    #[error("it no longer fits on node {node}")]
    NoLongerFits { node: Name },
    /// The queue's quota or its cohort's refuses it; the words name the queue, pool and
    /// resource from the ledger.
    #[error("{0}")]
    Quota(String),

    // Preemptions and the preemptor's held room.
    #[error("a reserved job must start where it was reserved")]
    NotWhereReserved,
    #[error("{waiting} victims have not stopped yet")]
    VictimsStillStopping { waiting: usize },
    #[error("a preemption needs victims")]
    NoVictims,
    #[error("victims must be distinct other jobs")]
    VictimsNotDistinct,
    #[error("unknown victim")]
    UnknownVictim,
    #[error("victim {job} is {} at attempt {attempt}", state.as_str())]
    VictimWrongAttempt { job: Name, state: JobState, attempt: u32 },
    #[error("victim {job} is not preemptible")]
    VictimNotPreemptible { job: Name },
    #[error("victim {job} is inside its minimum runtime")]
    VictimInMinRuntime { job: Name },

    // Elastic gangs (decisions.md section 13).
    #[error("an elastic gang runs with {min} to {max} replicas of its elastic task, not {got}")]
    ElasticSize { got: u32, min: u32, max: u32 },
    #[error("job {job} is not an elastic gang that may grow")]
    NotElastic { job: Name },

    // Starving jobs' pool reservations.
    #[error("reservations are turned off")]
    ReservationsOff,
    #[error("pool {pool} already holds a reservation for {holder}")]
    PoolAlreadyReserved { pool: Name, holder: Name },
    #[error("job {job} already holds a reservation")]
    AlreadyReserved { job: Name },
    #[error("job {job} holds no reservation")]
    NoReservation { job: Name },
    #[error("node {node} is not in pool {pool}")]
    NodeNotInPool { node: Name, pool: Name },
    /// It would use room held for another job's reservation (or wait behind one of its own
    /// queue's) and cannot backfill.
    #[error(
        "{} {holder}'s reservation in pool {pool}; {}",
        if *same_queue { format!("its queue {queue} waits behind") } else { "it would take resources reserved for".to_string() },
        if *preempting { "a preemption never backfills" } else { "it does not end in time to backfill" }
    )]
    TakesReserved { holder: Name, pool: Name, queue: Name, same_queue: bool, preempting: bool },
    /// Its user's jobs in its queue would hold more than the queue's `max_per_user`
    /// (decisions.md section 12); the words name the user, queue and resource.
    #[error("{0}")]
    UserLimit(String),
    /// A gang that requires a topology level (decisions.md section 10) spans two of its
    /// domains. Last, so older encodings keep their positions.
    #[error("topology {level}: the gang spans {level} domains")]
    SpansDomains { level: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are what events, logs and the simulator's output showed when these were
    /// strings; they must not change with the type.
    #[test]
    fn the_words_are_the_ones_people_saw() {
        let n = Name::lit;
        let cases = [
            (
                Rejection::WrongAttempt { job: n("a"), state: JobState::Suspended, attempt: 2 },
                "job a is Suspended at attempt 2",
            ),
            (
                Rejection::NotNextAttempt { job: n("a"), attempt: 3, expected: 2 },
                "job a would start attempt 3, expected 2",
            ),
            (Rejection::NoLongerFits { node: n("n1") }, "it no longer fits on node n1"),
            (Rejection::VictimsStillStopping { waiting: 2 }, "2 victims have not stopped yet"),
            (
                Rejection::TakesReserved {
                    holder: n("big"),
                    pool: n("p"),
                    queue: n("q"),
                    same_queue: true,
                    preempting: false,
                },
                "its queue q waits behind big's reservation in pool p; it does not end in time to backfill",
            ),
            (
                Rejection::TakesReserved {
                    holder: n("big"),
                    pool: n("p"),
                    queue: n("q"),
                    same_queue: false,
                    preempting: true,
                },
                "it would take resources reserved for big's reservation in pool p; a preemption never backfills",
            ),
        ];
        for (r, words) in cases {
            assert_eq!(r.to_string(), words);
        }
    }
}
