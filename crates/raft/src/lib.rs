//! baton's replicated cluster state: every replica applies the same committed
//! [`baton_model::Command`]s, in the same order, to its own [`baton_model::State`].
//!
//! Pipeline: `model` (the pure state machine) <- `raft` (this crate: log, storage,
//! transport) <- `server` (client API, agent gateway, leader loop).
//!
//! Layout, one concept per module:
//! - [`types`]: the openraft type configuration; a log entry carries a [`types::CommandBatch`].
//! - [`settings`]: every tunable with its default and bound, and the openraft config.
//! - [`replica`]: [`replica::Replica`], the API the server uses: open, serve, write, read,
//!   membership, metrics, shutdown.
//! - `batcher`: concurrent writes waiting together share one log entry.
//! - `forwarder`: a follower's writes waiting together go to the leader in one call.
//! - [`stats`]: counts of what the write path did (batches, appends, flushes, forwards).
//! - [`store`]: the small [`store::KvStore`] trait (sled on disk, memory for tests), the log
//!   store with its writer thread (group commit: flush before acknowledging), and the state
//!   machine with its snapshots.
//! - [`net`]: the gRPC transport (`proto/raft.proto`): dialing, openraft's network traits,
//!   the server side, forwarded writes and read-index calls.
//! - [`campaign`]: pre-vote, so a replica without a quorum does not raise its term.
//! - [`membership`]: the changes an operator asks for (add, remove, transfer leadership)
//!   and their rules; [`transfer`]: handing leadership over, which openraft 0.9 lacks.
//! - `racks`: each member's rack, asked in the background for `cluster info`.
//! - [`skew`]: how far this replica's clock is from the other voters', from their replies;
//!   a leader far ahead of the quorum's clock stamps no later than the quorum's time.
//! - [`addrs`]: a member's API and peer addresses, both in the one string the membership
//!   keeps.
//! - [`backup`]: the backup file (`baton snapshot save`) and restoring it into a new cluster.
//! - [`datadir`], [`identity`]: the data directory and its `cluster.id` file.
//! - [`codec`]: bincode and checksummed records.
//! - [`digest`]: the committed state digests: a hash of the state at each mark, and a
//!   replica that disagrees with the leader's stops.
//! - [`error`], [`metrics`]: typed errors and what a replica reports.

// openraft's error types are large and fixed by its traits; boxing them here would only
// move the allocation.
#![allow(clippy::result_large_err)]

pub mod addrs;
pub mod backup;
mod batcher;
pub mod campaign;
pub mod codec;
pub mod datadir;
pub mod digest;
pub mod error;
mod forwarder;
pub mod identity;
pub mod in_flight;
pub mod membership;
pub mod metrics;
pub mod net;
mod racks;
pub mod replica;
pub mod settings;
pub mod skew;
pub mod stats;
pub mod store;
pub mod transfer;
pub mod types;

pub use addrs::Addrs;
pub use error::{MembershipError, OpenError, ReadError, ServeError, WriteError};
pub use membership::{Change, Forwarded, MIN_VOTERS, MembershipGate};
pub use metrics::{ReplicaMetrics, Role};
pub use racks::MAX_RACK_BYTES;
pub use replica::{Bootstrap, Replica, ReplicaConfig, Storage};
pub use settings::RaftSettings;
pub use stats::WriteCounts;
