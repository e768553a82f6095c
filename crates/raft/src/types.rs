//! The openraft type configuration: what the log carries and what applying it returns.

use std::io::Cursor;

use baton_model::{Command, Response};

openraft::declare_raft_types!(
    /// Log entries carry a model [`Command`]; applying one returns its [`Response`]. Nodes are
    /// known by a `u64` id and reached at a `host:port` address.
    pub TypeConfig:
        D = Command,
        R = Response,
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
