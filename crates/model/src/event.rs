//! What happened, for people (`baton describe --events`, `watch`, the simulator's timeline).
//! Each job keeps a bounded history; responses carry the events an apply produced.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::name::Name;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub at_ms: u64,
    pub job: Option<Name>,
    /// The job's id, on the events an apply returns only (not in histories or snapshots, so
    /// not compared): who may see a live event is judged by its job, not by its name, which
    /// a newer job may have taken since.
    #[serde(skip)]
    pub job_id: Option<crate::job::JobId>,
    pub node: Option<Name>,
    pub kind: EventKind,
    pub message: String,
}

impl PartialEq for Event {
    fn eq(&self, o: &Event) -> bool {
        (self.at_ms, &self.job, &self.node, &self.kind, &self.message)
            == (o.at_ms, &o.job, &o.node, &o.kind, &o.message)
    }
}

impl Eq for Event {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Submitted,
    Started {
        attempt: u32,
        nodes: BTreeMap<Name, Vec<u32>>,
    },
    /// Chosen as a victim; it checkpoints (or is suspended, requeued, cancelled).
    Preempted {
        by: Name,
    },
    /// Stopped after a preemption or pause; `checkpointed` tells whether it saved its work.
    Stopped {
        checkpointed: bool,
    },
    Requeued,
    /// A replica of the job runs on a node where the model does not place it; its agent is
    /// told to stop it (recorded, nothing else changes).
    Stray,
    Suspended {
        by: Name,
    },
    Resumed,
    Paused,
    Unpaused,
    Succeeded,
    Failed {
        exit_code: i32,
    },
    Cancelled,
    /// It ran past its time limit: it is being stopped like a victim of its mode.
    TimeLimit,
    /// Stopped after its time limit: the job ends Failed (docs/policy.md section 9).
    TimedOut,
    /// A starving job reserved resources in a pool (docs/policy.md section 9).
    Reserved,
    /// Its reservation was dropped.
    Unreserved,
    NodeRegistered,
    NodeLost,
    NodeReady,
    NodeCordoned,
    NodeUncordoned,
    /// A process on the node could not be killed; the node takes no new work.
    NodeUnhealthy,
    QueueUpdated {
        queue: Name,
    },
    /// Every dependency of a held job holds: it joins its queue (decisions.md section 13).
    DependenciesMet,
    /// A maintenance window started: its nodes take no work until its end (section 14).
    MaintenanceStarted,
    /// A maintenance window ended (or was deleted while it ran): its nodes take work again.
    MaintenanceEnded,
    /// The job runs on a node whose maintenance window started: it is being stopped as in
    /// mode checkpoint, and goes back to the queue once stopped (not a preemption).
    MaintenanceStop,
    /// A GPU of the node was found unhealthy (section 14): it takes no new work.
    GpuUnhealthy,
    /// An unhealthy GPU was cleared: it takes work again.
    GpuHealthy,
    /// The job runs on a GPU found unhealthy: it is being stopped as in mode checkpoint, and
    /// goes back to the queue once stopped (not a preemption).
    GpuFaultStop,
    /// An elastic gang started with another number of replicas than its last attempt had
    /// (decisions.md section 13).
    Resized {
        from: u32,
        to: u32,
    },
    /// More replicas of an elastic gang fit: it is being stopped as in mode checkpoint, to
    /// be placed again with as many as then fit.
    Growing,
}

impl EventKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::Submitted => "Submitted",
            EventKind::Started { .. } => "Started",
            EventKind::Preempted { .. } => "Preempted",
            EventKind::Stopped { .. } => "Stopped",
            EventKind::Requeued => "Requeued",
            EventKind::Stray => "Stray",
            EventKind::Suspended { .. } => "Suspended",
            EventKind::Resumed => "Resumed",
            EventKind::Paused => "Paused",
            EventKind::Unpaused => "Unpaused",
            EventKind::Succeeded => "Succeeded",
            EventKind::Failed { .. } => "Failed",
            EventKind::Cancelled => "Cancelled",
            EventKind::TimeLimit => "TimeLimit",
            EventKind::TimedOut => "TimedOut",
            EventKind::Reserved => "Reserved",
            EventKind::Unreserved => "Unreserved",
            EventKind::NodeRegistered => "NodeRegistered",
            EventKind::NodeLost => "NodeLost",
            EventKind::NodeReady => "NodeReady",
            EventKind::NodeCordoned => "NodeCordoned",
            EventKind::NodeUncordoned => "NodeUncordoned",
            EventKind::NodeUnhealthy => "NodeUnhealthy",
            EventKind::QueueUpdated { .. } => "QueueUpdated",
            EventKind::DependenciesMet => "DependenciesMet",
            EventKind::MaintenanceStarted => "MaintenanceStarted",
            EventKind::MaintenanceEnded => "MaintenanceEnded",
            EventKind::MaintenanceStop => "MaintenanceStop",
            EventKind::GpuUnhealthy => "GpuUnhealthy",
            EventKind::GpuHealthy => "GpuHealthy",
            EventKind::GpuFaultStop => "GpuFaultStop",
            EventKind::Resized { .. } => "Resized",
            EventKind::Growing => "Growing",
        }
    }
}

/// `s` cut to at most `MAX_MESSAGE_LEN` bytes, on a character boundary: messages from agents
/// and plans are kept short in the replicated state.
pub fn clip_message(mut s: String) -> String {
    if s.len() > crate::limits::MAX_MESSAGE_LEN {
        let mut cut = crate::limits::MAX_MESSAGE_LEN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
