//! Typed errors of the replica API. They become `tonic::Status` only at the gRPC edge.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::identity::IdentityError;
use crate::settings::SettingsError;
use crate::store::StoreError;
use crate::types::NodeId;

/// Why a replica could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(
        "{file}: this data directory belongs to cluster {found:?}, but the replica was started for cluster {configured:?}"
    )]
    ClusterMismatch { file: PathBuf, found: String, configured: String },
    #[error(
        "{file}: this data directory belongs to replica {found}, but the replica was started as replica {configured}"
    )]
    NodeMismatch { file: PathBuf, found: NodeId, configured: NodeId },
    #[error(
        "{missing}: missing from data directory {dir}, which is therefore incomplete (truncated or partly deleted); restore it, or wipe the whole directory to rebuild this replica from the cluster"
    )]
    Incomplete { dir: PathBuf, missing: PathBuf },
    #[error(
        "{file}: the data directory is in format {found}, newer than this build reads (formats up to {newest}); run a build that reads format {found}"
    )]
    FormatTooNew { file: PathBuf, found: u32, newest: u32 },
    #[error(
        "{file}: the data directory is in format {found}, older than this build reads (formats from {oldest}); open it with an older build first, which upgrades it"
    )]
    FormatTooOld { file: PathBuf, found: u32, oldest: u32 },
    #[error("--max-format {given} is outside the formats this build can stand for ({oldest} to {newest})")]
    MaxFormat { given: u32, oldest: u32, newest: u32 },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Accounting(String),
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("cannot start raft: {0}")]
    Raft(String),
}

/// Why a write was not applied. It is serializable because it travels back to the follower
/// that forwarded the write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum WriteError {
    /// This replica cannot take the write; send it to the leader.
    #[error("replica is not the leader; the leader is replica {leader_id} at {leader_addr}")]
    NotLeader { leader_id: NodeId, leader_addr: String },
    #[error("no leader is known (an election may be under way); retry shortly")]
    NoLeader,
    /// A forwarded write carried an operation only the leader itself issues (its clock,
    /// plans, node liveness); no other replica or client may send one.
    #[error("operation {op} is issued only by the leader itself; a forwarded {op} is refused")]
    LeaderOnly { op: String },
    #[error("command is {bytes} bytes encoded, over the limit of {limit} (max_command_bytes)")]
    TooLarge { bytes: usize, limit: usize },
    #[error("{limit} writes are already in flight on this replica (max_pending_writes); retry later")]
    Overloaded { limit: usize },
    /// The write went to the leader but no answer came back: it may or may not be applied.
    #[error(
        "forwarding to the leader, replica {leader_id} at {leader_addr}, failed; the write may or may not have been applied: {reason}"
    )]
    ForwardFailed { leader_id: NodeId, leader_addr: String, reason: String },
    /// No answer within `request_timeout_ms`: the write may still commit later.
    #[error("no answer within {timeout_ms} ms; the write may or may not be applied")]
    Timeout { timeout_ms: u64 },
    #[error("the replica is shutting down")]
    Stopped,
    #[error("cannot encode the command: {0}")]
    Encode(String),
    /// This replica's log cannot be written (a full disk, an I/O error); it refuses writes
    /// until a retry succeeds, and still serves reads.
    #[error(
        "this replica cannot write its raft log ({location}: {reason}); writes are refused until it can, reads still work"
    )]
    DiskFailing { location: String, reason: String },
    /// The leader is handing leadership over and takes no writes until a new leader is
    /// elected (about two election timeouts).
    #[error("no leader for a moment: leadership is moving to replica {to}; retry shortly")]
    Transferring { to: NodeId },
    /// The command needs a newer data format than some member reads: committed, it would
    /// stop that member (it could not decode the entry). Retry once they are upgraded.
    #[error(transparent)]
    FormatBehind(#[from] baton_model::format::FormatBehind),
}

/// Why a linearizable read was not served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ReadError {
    #[error("replica is not the leader; the leader is replica {leader_id} at {leader_addr}")]
    NotLeader { leader_id: NodeId, leader_addr: String },
    #[error("no leader is known (an election may be under way); retry shortly")]
    NoLeader,
    #[error("the leader could not confirm it still leads a quorum: {0}")]
    QuorumLost(String),
    #[error("asking the leader, replica {leader_id} at {leader_addr}, for a read index failed: {reason}")]
    ForwardFailed { leader_id: NodeId, leader_addr: String, reason: String },
    #[error("no read index within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("the replica is shutting down")]
    Stopped,
    /// The state read could not be encoded (a backup).
    #[error("cannot encode the state: {0}")]
    Encode(String),
}

/// Why a membership change was refused. Serializable: it travels back to the follower that
/// forwarded the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MembershipError {
    #[error("membership changes go to the leader; the leader is replica {leader_id} at {leader_addr}")]
    NotLeader { leader_id: NodeId, leader_addr: String },
    #[error("no leader is known (an election may be under way); retry shortly")]
    NoLeader,
    #[error("the replica at {addr} belongs to cluster {theirs:?}, not to this cluster {ours:?}; it cannot join")]
    ForeignCluster { addr: String, theirs: String, ours: String },
    #[error("the replica at {addr} is replica {found}, not replica {expected}")]
    WrongNode { addr: String, expected: NodeId, found: NodeId },
    #[error("cannot reach the replica at {addr}: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("replica {0} is not a member of the cluster")]
    UnknownNode(NodeId),
    #[error("no membership change within {timeout_ms} ms; it may still complete")]
    Timeout { timeout_ms: u64 },
    #[error("membership change refused: {0}")]
    Refused(String),
    #[error("the replica is shutting down")]
    Stopped,
    #[error(
        "replica {id} at {addr} reads data formats up to {reads}, older than format {used}, which this cluster already uses: upgrade it (or start it without --max-format) before adding it"
    )]
    FormatBehind { id: NodeId, addr: String, reads: u32, used: u32 },
    #[error("replica {id} is already a member (at {addr}); remove it first to add it again")]
    DuplicateId { id: NodeId, addr: String },
    #[error("{addr} is already the address of replica {id}")]
    DuplicateAddr { addr: String, id: NodeId },
    #[error(
        "removing replica {id} would leave {left} voters, fewer than {min} voters (the fewest that survive losing one); add a replica first"
    )]
    TooFewVoters { id: NodeId, left: usize, min: usize },
    #[error("replica {0} leads; hand leadership to another first (`baton cluster transfer-leader`)")]
    RemoveLeader(NodeId),
    #[error("replica {0} is a learner, not a voter; only a voter can lead")]
    NotVoter(NodeId),
    #[error("no other voter to hand leadership to")]
    NoOtherVoter,
    #[error("leadership did not move to replica {to}: {reason}")]
    TransferFailed { to: NodeId, reason: String },
    #[error(
        "forwarding to the leader, replica {leader_id} at {leader_addr}, failed; the change may or may not be made: {reason}"
    )]
    ForwardFailed { leader_id: NodeId, leader_addr: String, reason: String },
    /// Refused by the leader's gate (who asked may not make it). Last, so that the other
    /// variants keep their encoding.
    #[error("membership change not allowed: {0}")]
    NotAllowed(String),
    /// After `NotAllowed`, for the same reason (a follower of an older build that forwarded
    /// the change reads it as a failed forward).
    #[error(
        "replica {id} was removed from this cluster, and a removed id is never used again (a leader of an older configuration may still count it as a voter); give the new replica a new id"
    )]
    Retired { id: NodeId },
}

/// Why serving raft RPCs stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("raft transport failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}
