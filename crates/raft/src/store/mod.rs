//! Durable storage: the small [`KvStore`] trait with its sled and memory implementations,
//! and on top of it openraft's log store and state machine.

mod disk_health;
pub mod kv;
mod kv_mem;
mod kv_power_loss;
mod kv_sled;
mod log_store;
mod log_writer;
mod snapshot_record;
mod state_machine;

pub use baton_durable::SyncCounts;
pub use disk_health::DiskHealth;
pub use kv::{KvError, KvStore, Space, Write};
pub use kv_mem::MemKv;
pub use kv_power_loss::{PowerCut, PowerLossDisk, PowerLossKv};
pub use kv_sled::SledKv;
pub use log_store::{LastLog, LogReader, LogStore};
pub use snapshot_record::{StoredSnapshot, UNSTAMPED_FORMAT, format_of, stamped};
pub use state_machine::{ApplyObserver, DigestCounts, SmShared, SnapshotBuilder, StateMachineStore};

/// Why stored data cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error("{location}: {record} is corrupt: {reason}")]
    Corrupt { location: String, record: String, reason: String },
}
