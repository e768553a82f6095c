//! Tunables of a replica, their defaults and their bounds.

use serde::{Deserialize, Serialize};

/// Everything a replica can be tuned with. Every queue, batch and message has a bound here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RaftSettings {
    /// How often the leader sends heartbeats.
    pub heartbeat_interval_ms: u64,
    /// A follower that hears no leader for a random time in
    /// `[election_timeout_min_ms, election_timeout_max_ms)` starts an election.
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many entries since the last one; the log before the
    /// snapshot is then purged (the compaction policy).
    pub snapshot_every_entries: u64,
    /// Entries kept in the log behind the latest snapshot, so that a briefly lagging follower
    /// catches up from the log instead of receiving a whole snapshot.
    pub logs_kept_after_snapshot: u64,
    /// Entries in one AppendEntries message.
    pub max_entries_per_append: u64,
    /// Largest gRPC message a replica sends or accepts (AppendEntries, snapshot chunks).
    pub max_message_bytes: usize,
    /// Largest encoded command a client may write; larger ones are refused before they reach
    /// the log. Must leave room in `max_message_bytes`.
    pub max_command_bytes: usize,
    /// Size of one InstallSnapshot chunk.
    pub snapshot_chunk_bytes: u64,
    /// Largest snapshot a replica accepts from a leader.
    pub max_snapshot_bytes: u64,
    /// Deadline of one InstallSnapshot chunk, and of connecting to a peer.
    pub rpc_timeout_ms: u64,
    /// Deadline of a client write or linearizable read, forwarding included. A write that
    /// runs past it may still commit later (its outcome is unknown). A request that finds
    /// no leader (or a leader whose address has not arrived yet) first waits for one, at most
    /// `replica::LEADER_HOLD_MS` and at most this.
    pub request_timeout_ms: u64,
    /// How long a membership change waits for a new learner to catch up.
    pub membership_timeout_ms: u64,
    /// Client writes in flight on one replica; more are refused as overloaded.
    pub max_pending_writes: usize,
    /// Commands in one log entry: writes that wait together share one append and flush.
    pub max_batch_commands: usize,
    /// Encoded bytes of the commands in one log entry.
    pub max_batch_bytes: usize,
    /// Batches proposed and not yet applied (a bound on memory: `max_batches_unflushed`
    /// paces the proposals).
    pub max_batches_in_flight: usize,
    /// Batches proposed and not yet flushed by the leader's log; the next batch fills up
    /// meanwhile. openraft 0.9 flushes the leader's entries one at a time, each before it
    /// is replicated, so a batch cut while another waits for its flush only waits in line,
    /// holding writes that could have joined it.
    pub max_batches_unflushed: usize,
    /// Calls forwarding writes from this replica to the leader at once; writes that arrive
    /// meanwhile wait and go together in the next call.
    pub max_forwards_in_flight: usize,
    /// Log changes waiting for the log writer thread; appending waits when it is full.
    pub log_write_queue_len: usize,
}

impl Default for RaftSettings {
    fn default() -> Self {
        RaftSettings {
            heartbeat_interval_ms: 50,
            election_timeout_min_ms: 150,
            election_timeout_max_ms: 300,
            snapshot_every_entries: 10_000,
            logs_kept_after_snapshot: 1_000,
            max_entries_per_append: 512,
            max_message_bytes: 64 << 20,
            max_command_bytes: 4 << 20,
            snapshot_chunk_bytes: 4 << 20,
            max_snapshot_bytes: 4 << 30,
            rpc_timeout_ms: 2_000,
            request_timeout_ms: 10_000,
            membership_timeout_ms: 30_000,
            max_pending_writes: 65_536,
            max_batch_commands: 4_096,
            max_batch_bytes: 16 << 20,
            max_batches_in_flight: 8,
            max_batches_unflushed: 1,
            max_forwards_in_flight: 4,
            log_write_queue_len: 65_536,
        }
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{field} must be at least {min}, got {value}")]
    TooSmall { field: &'static str, min: u64, value: u64 },
    #[error("{field} ({value}) must be less than {other} ({other_value})")]
    Order { field: &'static str, value: u64, other: &'static str, other_value: u64 },
    #[error("invalid raft configuration: {0}")]
    Raft(String),
}

/// Bytes of envelope and framing allowed around the largest command in one message.
const MESSAGE_OVERHEAD_BYTES: usize = 64 << 10;

impl RaftSettings {
    /// Checks the settings and turns them into openraft's (validated) configuration.
    pub fn to_openraft(&self, cluster_id: &str) -> Result<openraft::Config, SettingsError> {
        self.check()?;
        let config = openraft::Config {
            cluster_name: cluster_id.to_string(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: self.rpc_timeout_ms,
            max_payload_entries: self.max_entries_per_append,
            // A follower this far behind gets a snapshot rather than the log.
            replication_lag_threshold: self.snapshot_every_entries,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every_entries),
            snapshot_max_chunk_size: self.snapshot_chunk_bytes,
            max_in_snapshot_log_to_keep: self.logs_kept_after_snapshot,
            // Purge as soon as a snapshot allows it, in bounded batches.
            purge_batch_size: self.snapshot_every_entries.clamp(1, 1_024),
            ..Default::default()
        };
        config.validate().map_err(|e| SettingsError::Raft(e.to_string()))
    }

    fn check(&self) -> Result<(), SettingsError> {
        let at_least = |field, value: u64, min| {
            if value < min { Err(SettingsError::TooSmall { field, min, value }) } else { Ok(()) }
        };
        at_least("heartbeat_interval_ms", self.heartbeat_interval_ms, 1)?;
        at_least("snapshot_every_entries", self.snapshot_every_entries, 1)?;
        at_least("max_entries_per_append", self.max_entries_per_append, 1)?;
        at_least("max_command_bytes", self.max_command_bytes as u64, 1_024)?;
        at_least("snapshot_chunk_bytes", self.snapshot_chunk_bytes, 1_024)?;
        at_least("rpc_timeout_ms", self.rpc_timeout_ms, 1)?;
        at_least("request_timeout_ms", self.request_timeout_ms, 1)?;
        at_least("membership_timeout_ms", self.membership_timeout_ms, 1)?;
        at_least("max_pending_writes", self.max_pending_writes as u64, 1)?;
        at_least("max_batch_commands", self.max_batch_commands as u64, 1)?;
        at_least("max_batches_in_flight", self.max_batches_in_flight as u64, 1)?;
        at_least("max_batches_unflushed", self.max_batches_unflushed as u64, 1)?;
        at_least("max_forwards_in_flight", self.max_forwards_in_flight as u64, 1)?;
        at_least("max_batch_bytes", self.max_batch_bytes as u64, self.max_command_bytes as u64)?;
        at_least("log_write_queue_len", self.log_write_queue_len as u64, 1)?;
        let before = |field, value: u64, other, other_value: u64| {
            if value >= other_value { Err(SettingsError::Order { field, value, other, other_value }) } else { Ok(()) }
        };
        before(
            "heartbeat_interval_ms",
            self.heartbeat_interval_ms,
            "election_timeout_min_ms",
            self.election_timeout_min_ms,
        )?;
        before(
            "election_timeout_min_ms",
            self.election_timeout_min_ms,
            "election_timeout_max_ms",
            self.election_timeout_max_ms,
        )?;
        // One command, and one snapshot chunk, must each fit in a message with its envelope.
        let room = self.max_message_bytes.saturating_sub(MESSAGE_OVERHEAD_BYTES) as u64;
        before(
            "max_command_bytes",
            self.max_command_bytes as u64 - 1,
            "max_message_bytes less 64 KiB of envelope",
            room,
        )?;
        before("max_batch_bytes", self.max_batch_bytes as u64 - 1, "max_message_bytes less 64 KiB of envelope", room)?;
        before(
            "snapshot_chunk_bytes",
            self.snapshot_chunk_bytes - 1,
            "max_message_bytes less 64 KiB of envelope",
            room,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = RaftSettings::default().to_openraft("c1").unwrap();
        assert_eq!(c.heartbeat_interval, 50);
        assert_eq!(c.snapshot_policy, openraft::SnapshotPolicy::LogsSinceLast(10_000));
    }

    #[test]
    fn election_timeout_must_exceed_heartbeat() {
        let s = RaftSettings { heartbeat_interval_ms: 200, election_timeout_min_ms: 150, ..RaftSettings::default() };
        let err = s.to_openraft("c1").unwrap_err();
        assert!(err.to_string().contains("heartbeat_interval_ms"), "{err}");
    }

    #[test]
    fn command_must_fit_in_a_message() {
        let s = RaftSettings { max_message_bytes: 1 << 20, max_command_bytes: 1 << 20, ..RaftSettings::default() };
        let err = s.to_openraft("c1").unwrap_err();
        assert!(err.to_string().contains("max_command_bytes"), "{err}");
    }
}
