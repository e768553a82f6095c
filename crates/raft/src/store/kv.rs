//! The small storage trait the raft log and the state machine's snapshot sit on.
//!
//! Records are byte strings under `u64` keys in a few key spaces. Writes become visible at
//! once and durable only after [`KvStore::flush`]; callers decide when to pay for a flush
//! (before acknowledging an entry or a vote). sled implements it on disk, a `BTreeMap` in
//! memory for tests and simulations.

use std::ops::Range;

/// A key space. Each is ordered by key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    /// Log entries by index.
    Log,
    /// Vote, committed and purged log ids, under the keys in [`meta_key`].
    Meta,
    /// The latest snapshot, under key 0.
    Snapshot,
}

impl Space {
    pub const ALL: [Space; 3] = [Space::Log, Space::Meta, Space::Snapshot];

    pub fn name(self) -> &'static str {
        match self {
            Space::Log => "log",
            Space::Meta => "meta",
            Space::Snapshot => "snapshot",
        }
    }
}

/// Keys in [`Space::Meta`].
pub mod meta_key {
    pub const VOTE: u64 = 1;
    pub const COMMITTED: u64 = 2;
    pub const PURGED: u64 = 3;
}

/// One change in a write batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Put(Space, u64, Vec<u8>),
    /// Removes every key in the range.
    Remove(Space, Range<u64>),
}

/// A storage failure, naming where it happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct KvError {
    pub location: String,
    pub message: String,
}

/// Ordered, flushable records. Implementations are shared between the log and the state
/// machine, so every method takes `&self`.
pub trait KvStore: Send + Sync + 'static {
    fn get(&self, space: Space, key: u64) -> Result<Option<Vec<u8>>, KvError>;

    /// Records with keys in `keys`, in key order, at most `limit` of them.
    fn scan(&self, space: Space, keys: Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError>;

    /// The record with the greatest key.
    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError>;

    /// Applies the writes in order. Writes to one space are applied atomically; a crash may
    /// leave a batch that spans spaces half applied, so callers order such writes to be safe.
    fn write(&self, batch: &[Write]) -> Result<(), KvError>;

    /// Makes every earlier write durable.
    fn flush(&self) -> Result<(), KvError>;

    /// Flushes and releases the storage (for sled: its files and their lock), so the same
    /// directory can be opened again in this process. Later calls fail.
    fn close(&self) -> Result<(), KvError>;

    /// Whether `flush` reaches a disk. A memory store acknowledges without waiting for it.
    fn is_durable(&self) -> bool;

    /// Whether its reads, writes and flushes block a thread for real time (a disk): then the
    /// log is written on a thread of its own and snapshots are built off the async runtime. A
    /// simulated disk does not, so that a simulation's timing depends on its seed alone.
    fn blocks(&self) -> bool {
        self.is_durable()
    }

    /// How long a sync takes on a simulated disk that is slow now (0: at once). A store
    /// that does not block (`blocks`) is written inline, so its slowness is waited for on
    /// the runtime's clock before a sync is acknowledged; a real disk takes what it takes,
    /// on the log writer's thread.
    fn sync_delay_ms(&self) -> u64 {
        0
    }

    /// Where a space's records live, for error messages (a file path, or "memory").
    fn location(&self, space: Space) -> String;
}
