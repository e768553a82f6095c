//! Counts of what the write path did on one replica: batches proposed and how many commands
//! they carried, log appends and the flushes that made them durable, writes forwarded to the
//! leader and the calls that carried them. Divided by the number of writes they give the cost of one write (flushes per
//! write, entries per write) whatever the machine's speed, which a rate measured on a loaded
//! machine does not. Plain atomic counters, so that counting adds no lock to the write path.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A point-in-time copy of a replica's write counters, all counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Client writes this replica took to propose as leader (its own and forwarded ones).
    pub writes_queued: u64,
    /// Batches (log entries of client commands) this replica proposed as leader.
    pub batches_proposed: u64,
    /// Commands those batches carried.
    pub commands_proposed: u64,
    /// Batches proposed and not yet answered, now.
    pub batches_in_flight: u64,
    /// Most batches that were in flight at once.
    pub batches_in_flight_max: u64,
    /// Appends openraft asked of the log store (a leader's proposals, a follower's
    /// replicated entries).
    pub log_appends: u64,
    /// Entries those appends carried.
    pub log_entries_appended: u64,
    /// Flushes of the log to stable storage (each one fsync of the log, or more than one
    /// when sled wrote blob files), however many appends each acknowledged.
    pub log_flushes: u64,
    /// Client writes this replica sent on to the leader.
    pub writes_forwarded: u64,
    /// Calls that carried them (writes that waited together share one).
    pub forward_calls: u64,
    /// Log entries this replica sent its peers in AppendEntries as leader, counted once the
    /// peer answered (whether it took them or not).
    pub entries_delivered: u64,
    /// AppendEntries without entries a new leader sent to learn whether a peer already
    /// holds a batch (`net::raft_network`), so as not to resend it.
    pub append_probes: u64,
}

/// The live counters, shared by the batcher, the log store and the replica.
#[derive(Debug, Default)]
pub(crate) struct WriteStats {
    writes_queued: AtomicU64,
    batches_proposed: AtomicU64,
    commands_proposed: AtomicU64,
    batches_in_flight: AtomicU64,
    batches_in_flight_max: AtomicU64,
    log_appends: AtomicU64,
    log_entries_appended: AtomicU64,
    log_flushes: AtomicU64,
    writes_forwarded: AtomicU64,
    forward_calls: AtomicU64,
    entries_delivered: AtomicU64,
    append_probes: AtomicU64,
}

pub(crate) type SharedStats = Arc<WriteStats>;

impl WriteStats {
    pub(crate) fn counts(&self) -> WriteCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WriteCounts {
            writes_queued: get(&self.writes_queued),
            batches_proposed: get(&self.batches_proposed),
            commands_proposed: get(&self.commands_proposed),
            batches_in_flight: get(&self.batches_in_flight),
            batches_in_flight_max: get(&self.batches_in_flight_max),
            log_appends: get(&self.log_appends),
            log_entries_appended: get(&self.log_entries_appended),
            log_flushes: get(&self.log_flushes),
            writes_forwarded: get(&self.writes_forwarded),
            forward_calls: get(&self.forward_calls),
            entries_delivered: get(&self.entries_delivered),
            append_probes: get(&self.append_probes),
        }
    }

    pub(crate) fn queued(&self) {
        self.writes_queued.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch of `commands` was proposed; it stays in flight until `batch_answered`.
    pub(crate) fn batch_proposed(&self, commands: usize) {
        self.batches_proposed.fetch_add(1, Ordering::Relaxed);
        self.commands_proposed.fetch_add(commands as u64, Ordering::Relaxed);
        let now = self.batches_in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.batches_in_flight_max.fetch_max(now, Ordering::Relaxed);
    }

    pub(crate) fn batch_answered(&self) {
        self.batches_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn appended(&self, entries: usize) {
        self.log_appends.fetch_add(1, Ordering::Relaxed);
        self.log_entries_appended.fetch_add(entries as u64, Ordering::Relaxed);
    }

    pub(crate) fn flushed(&self) {
        self.log_flushes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn forwarded(&self) {
        self.writes_forwarded.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn forward_called(&self) {
        self.forward_calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn entries_delivered(&self, entries: u64) {
        self.entries_delivered.fetch_add(entries, Ordering::Relaxed);
    }

    pub(crate) fn probed(&self) {
        self.append_probes.fetch_add(1, Ordering::Relaxed);
    }
}
