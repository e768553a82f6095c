//! Nodes: what an agent registers (name, pool, rack, labels, resources) and the replicated
//! status (Ready or Lost, cordoned or not). Heartbeats never enter the log; only transitions do.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::name::Name;
use crate::resources::Resources;

/// The pool a node belongs to when none is named.
pub const DEFAULT_POOL: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: Name,
    pub pool: Name,
    pub rack: Option<Name>,
    pub labels: BTreeMap<String, String>,
    pub resources: Resources,
    /// GPU details reported by the agent (empty in the simulator and for dev inventories).
    pub gpus: Vec<GpuInfo>,
    /// Where the node's agent serves job logs ("host:port"); empty in the simulator.
    pub agent_addr: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_bytes: u64,
    pub healthy: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeStatus {
    Ready,
    /// Down or silent past the heartbeat timeout; its jobs were requeued.
    Lost,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub spec: NodeSpec,
    pub status: NodeStatus,
    /// No new work is placed on a cordoned node; what runs there keeps running.
    pub cordoned: bool,
    /// Why the node needs a person: a process there survived SIGKILL, so its GPUs cannot be
    /// given to anyone. No new work is placed here until `uncordon` clears it.
    pub unhealthy: Option<String>,
}

impl Node {
    /// New work may be placed here.
    pub fn schedulable(&self) -> bool {
        self.status == NodeStatus::Ready && !self.cordoned && self.unhealthy.is_none()
    }
}
