//! The openraft type configuration: what the log carries and what applying it returns.

use std::io::Cursor;

use baton_model::{Command, Response};
use serde::{Deserialize, Serialize};

/// What one log entry carries: the commands that arrived together, applied in order.
///
/// openraft 0.9 writes (and flushes) each entry the leader proposes before it takes the next
/// one, so one entry per command would cost one fsync per command. Batching the commands
/// that wait together into one entry is what lets a burst share a flush.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CommandBatch {
    pub commands: Vec<Command>,
}

/// What applying a [`CommandBatch`] returns: one model [`Response`] per command, in order.
/// Entries without commands (blank and membership entries) answer an empty batch.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ResponseBatch {
    pub responses: Vec<Response>,
}

openraft::declare_raft_types!(
    /// Log entries carry a batch of model [`Command`]s; applying one returns their
    /// [`Response`]s. Nodes are known by a `u64` id and reached at a `host:port` address.
    pub TypeConfig:
        D = CommandBatch,
        R = ResponseBatch,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A replica's id, unique and stable within its cluster.
pub type NodeId = u64;
/// What the cluster records about a replica: its address (`host:port`).
pub type Node = openraft::BasicNode;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;
