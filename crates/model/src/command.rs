//! Commands replicated through the log, and what applying one returns.
//!
//! The leader stamps the time into every command: `apply` never reads a clock, so every
//! replica computes the same state from the same log.

use serde::{Deserialize, Serialize};

use crate::class::PriorityClass;
use crate::error::ApplyError;
use crate::event::Event;
use crate::job::{JobId, JobSpec};
use crate::name::Name;
use crate::node::{NodeSpec, NodeStatus};
use crate::plan::Plan;
use crate::queue::{Cohort, QueueSpec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Wall-clock time the leader stamped, in milliseconds since the Unix epoch (virtual
    /// time in the simulator).
    pub now_ms: u64,
    pub op: Op,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Create or replace a priority class.
    PutClass(PriorityClass),
    DeleteClass {
        name: Name,
    },
    /// Create or replace a cohort.
    PutCohort(Cohort),
    DeleteCohort {
        name: Name,
    },
    /// Create or replace a queue.
    PutQueue(QueueSpec),
    DeleteQueue {
        name: Name,
    },
    /// An agent registers its node (or re-registers with new facts).
    RegisterNode(NodeSpec),
    /// Several nodes at once (bringing a cluster up); all or none.
    RegisterNodes(Vec<NodeSpec>),
    /// Ready -> Lost (its jobs are requeued) or Lost -> Ready.
    SetNodeStatus {
        node: Name,
        status: NodeStatus,
    },
    Cordon {
        node: Name,
        cordoned: bool,
    },
    /// Submit a job; a retried submit with the same request id returns the first job.
    Submit {
        spec: JobSpec,
        request_id: Option<String>,
    },
    Cancel {
        job: Name,
    },
    /// Checkpoint a running job and hold it until `Resume`.
    Pause {
        job: Name,
    },
    Resume {
        job: Name,
    },
    /// An agent saw the job's process exit on its own.
    JobExited {
        job: JobId,
        attempt: u32,
        exit_code: i32,
    },
    /// An agent stopped the job after its checkpoint signal (or killed it after grace), or
    /// suspended it (mode suspend).
    JobStopped {
        job: JobId,
        attempt: u32,
        checkpointed: bool,
    },
    /// An agent reports a checkpoint written while the job keeps running.
    JobCheckpointed {
        job: JobId,
        attempt: u32,
    },
    ApplyPlan(Plan),
    /// Time passes: reservations whose victims outlived every bound are dropped.
    Tick,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::PutClass(_) => "PutClass",
            Op::DeleteClass { .. } => "DeleteClass",
            Op::PutCohort(_) => "PutCohort",
            Op::DeleteCohort { .. } => "DeleteCohort",
            Op::PutQueue(_) => "PutQueue",
            Op::DeleteQueue { .. } => "DeleteQueue",
            Op::RegisterNode(_) => "RegisterNode",
            Op::RegisterNodes(_) => "RegisterNodes",
            Op::SetNodeStatus { .. } => "SetNodeStatus",
            Op::Cordon { .. } => "Cordon",
            Op::Submit { .. } => "Submit",
            Op::Cancel { .. } => "Cancel",
            Op::Pause { .. } => "Pause",
            Op::Resume { .. } => "Resume",
            Op::JobExited { .. } => "JobExited",
            Op::JobStopped { .. } => "JobStopped",
            Op::JobCheckpointed { .. } => "JobCheckpointed",
            Op::ApplyPlan(_) => "ApplyPlan",
            Op::Tick => "Tick",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    Submitted {
        job: JobId,
        name: Name,
        /// The request id was seen before; nothing new was created.
        duplicate: bool,
    },
    PlanApplied {
        accepted: u32,
        /// Index of each rejected decision and why.
        rejected: Vec<(u32, String)>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub outcome: Outcome,
    pub events: Vec<Event>,
}

/// What `State::apply` returns. An error changes nothing.
pub type Response = Result<Applied, ApplyError>;
