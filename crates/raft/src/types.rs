//! The openraft type configuration: what the log carries and what applying it returns.

use std::io::Cursor;
use std::sync::{Arc, Mutex, PoisonError};

use baton_model::{Command, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::OwnedSemaphorePermit;

/// What one log entry carries: the commands that arrived together, applied in order.
///
/// openraft 0.9 writes (and flushes) each entry the leader proposes before it takes the next
/// one, so one entry per command would cost one fsync per command. Batching the commands
/// that wait together into one entry is what lets a burst share a flush.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CommandBatch {
    pub commands: Vec<Command>,
    /// Fired by the leader's log store once this entry is flushed, so the batcher can cut
    /// the next batch (see `batcher`). Never written: the log format is `commands` alone.
    #[serde(skip)]
    pub(crate) flushed: FlushSignal,
}

impl CommandBatch {
    pub fn new(commands: Vec<Command>) -> CommandBatch {
        CommandBatch { commands, flushed: FlushSignal::default() }
    }
}

/// Holds the batcher's permit for one proposed batch until the batch is flushed (or
/// answered, whichever comes first). Cloning shares the permit; releasing it once releases
/// it for every clone. Equal to every other signal: it is not part of the entry's value.
#[derive(Clone, Default)]
pub(crate) struct FlushSignal(Option<Arc<Mutex<Option<OwnedSemaphorePermit>>>>);

impl FlushSignal {
    pub(crate) fn holding(permit: OwnedSemaphorePermit) -> FlushSignal {
        FlushSignal(Some(Arc::new(Mutex::new(Some(permit)))))
    }

    /// Gives the permit back; later calls (and calls on clones) do nothing.
    pub(crate) fn release(&self) {
        if let Some(p) = &self.0 {
            p.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
    }

    /// Takes the signal out, leaving none: an entry kept in memory must not hold a permit.
    pub(crate) fn take(&mut self) -> FlushSignal {
        FlushSignal(self.0.take())
    }
}

impl PartialEq for FlushSignal {
    fn eq(&self, _: &FlushSignal) -> bool {
        true
    }
}

impl std::fmt::Debug for FlushSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushSignal")
    }
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
