//! The raft log over a [`KvStore`]: openraft's storage-v2 `RaftLogStorage`.
//!
//! Entries, the vote, and the committed and purged log ids are checksummed records. Reads
//! are served from an in-memory view of the log (bounded by compaction); every change goes
//! to the [`LogWriter`] thread, which acknowledges appends after a flush. A vote returns
//! only once it is durable.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, Range, RangeBounds};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, EntryPayload, LogState, OptionalSend, RaftLogReader, StorageIOError};

use super::StoreError;
use super::disk_health::DiskHealth;
use super::kv::{KvStore, Space, Write, meta_key};
use super::log_writer::LogWriter;
use super::snapshot_record::StoredSnapshot;
use crate::codec::{seal, unseal};
use crate::stats::{SharedStats, WriteStats};
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// Entries checked per read while verifying the log at start.
const VERIFY_CHUNK: usize = 4_096;

fn any(e: impl std::fmt::Display) -> AnyError {
    AnyError::error(e.to_string())
}

/// What is in the log now, including changes the writer has not stored yet.
#[derive(Default)]
struct View {
    entries: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

#[derive(Clone, Default)]
struct SharedView(Arc<RwLock<View>>);

impl SharedView {
    fn read(&self) -> RwLockReadGuard<'_, View> {
        // Every mutation below is a plain map or field update that cannot panic halfway.
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, View> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn entries(&self, keys: Range<u64>) -> Vec<Entry> {
        if keys.start >= keys.end {
            return Vec::new();
        }
        self.read().entries.range(keys).map(|(_, e)| e.clone()).collect()
    }
}

/// Reads log entries; cheap to clone, one per replication stream.
#[derive(Clone)]
pub struct LogReader {
    view: SharedView,
}

/// The id of the last entry in the log (the purged one if none is left), as it is now:
/// the pre-vote compares it. Cheap to clone.
#[derive(Clone)]
pub struct LastLog(SharedView);

impl LastLog {
    pub fn get(&self) -> Option<LogId> {
        let v = self.0.read();
        v.entries.last_key_value().map(|(_, e)| e.log_id).or(v.purged)
    }
}

/// The log store handed to openraft.
#[derive(Clone)]
pub struct LogStore {
    view: SharedView,
    writer: Arc<LogWriter>,
    health: DiskHealth,
    stats: SharedStats,
}

fn index_range(range: &impl RangeBounds<u64>) -> Range<u64> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    start..end
}

fn read_meta<T: serde::de::DeserializeOwned>(kv: &dyn KvStore, key: u64) -> Result<Option<T>, StoreError> {
    match kv.get(Space::Meta, key)? {
        None => Ok(None),
        Some(rec) => unseal(&rec).map(Some).map_err(|e| StoreError::Corrupt {
            location: kv.location(Space::Meta),
            record: meta_name(key).to_string(),
            reason: e.to_string(),
        }),
    }
}

fn meta_name(key: u64) -> &'static str {
    match key {
        meta_key::VOTE => "vote",
        meta_key::COMMITTED => "committed log id",
        meta_key::PURGED => "purged log id",
        _ => "unknown meta record",
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.view.entries(index_range(&range)))
    }
}

impl LogStore {
    /// Opens the log, checking every record: a corrupt or missing one stops the replica here,
    /// naming the file and the record, instead of diverging later.
    pub fn open(kv: Arc<dyn KvStore>, write_queue_len: usize) -> Result<LogStore, StoreError> {
        let view = load(kv.as_ref())?;
        let health = DiskHealth::default();
        let stats = Arc::new(WriteStats::default());
        let writer = LogWriter::start(kv, write_queue_len, health.clone(), stats.clone())?;
        Ok(LogStore { view: SharedView(Arc::new(RwLock::new(view))), writer: Arc::new(writer), health, stats })
    }

    /// The replica's write counters; this store counts its appends and flushes there.
    pub(crate) fn stats(&self) -> SharedStats {
        self.stats.clone()
    }

    pub fn last_log(&self) -> LastLog {
        LastLog(self.view.clone())
    }

    /// Whether the log's disk takes writes now.
    pub fn disk_health(&self) -> DiskHealth {
        self.health.clone()
    }
}

/// Reads the whole log, checking it for checksum errors, gaps and lost acknowledged
/// entries, and drops entries an interrupted purge left behind.
fn load(kv: &dyn KvStore) -> Result<View, StoreError> {
    let vote: Option<Vote> = read_meta(kv, meta_key::VOTE)?;
    let committed: Option<LogId> = read_meta(kv, meta_key::COMMITTED)?;
    let purged: Option<LogId> = read_meta(kv, meta_key::PURGED)?;
    let snapshot_index = StoredSnapshot::load(kv)?.and_then(|s| s.meta.last_log_id).map(|id| id.index);
    let location = kv.location(Space::Log);
    let corrupt = |record: String, reason: String| StoreError::Corrupt { location: location.clone(), record, reason };

    if let Some(p) = purged {
        // Entries at or below the purged id are leftovers of a purge cut short by a crash.
        kv.write(&[Write::Remove(Space::Log, 0..p.index.saturating_add(1))])?;
    }
    let mut next = purged.map_or(0, |p| p.index + 1);
    let mut prev: Option<u64> = None;
    let mut last: Option<u64> = None;
    let mut entries = BTreeMap::new();
    loop {
        let chunk = kv.scan(Space::Log, next..u64::MAX, VERIFY_CHUNK)?;
        let Some((last_key, _)) = chunk.last() else {
            break;
        };
        let resume = last_key.saturating_add(1);
        for (index, rec) in chunk {
            let entry: Entry = unseal(&rec).map_err(|e| corrupt(format!("log entry {index}"), e.to_string()))?;
            if entry.log_id.index != index {
                return Err(corrupt(format!("log entry {index}"), format!("it holds entry {}", entry.log_id.index)));
            }
            if let Some(p) = prev {
                // A gap is only allowed where the snapshot covers it (a snapshot installed
                // just before a crash, with its purge not yet written).
                let covered = snapshot_index.is_some_and(|s| index <= s + 1);
                if index != p + 1 && !covered {
                    return Err(corrupt(
                        format!("log entry {index}"),
                        format!("entries {} to {} are missing", p + 1, index - 1),
                    ));
                }
            }
            check_term(&entries, purged, &entry).map_err(|reason| corrupt(format!("log entry {index}"), reason))?;
            prev = Some(index);
            last = Some(index);
            entries.insert(index, entry);
        }
        next = resume;
    }
    if let Some(c) = committed {
        let held = [last, snapshot_index, purged.map(|p| p.index)].into_iter().flatten().max();
        if held.is_none_or(|h| h < c.index) {
            return Err(corrupt(
                "log tail".to_string(),
                format!(
                    "the log ends at {} but entry {} was committed: acknowledged entries are missing",
                    held.map_or("nothing".to_string(), |h| h.to_string()),
                    c.index
                ),
            ));
        }
    }
    let newest = entries.last_key_value().map(|(_, e)| e.log_id).or(purged);
    check_vote(vote, newest).map_err(|reason| corrupt("vote".to_string(), reason))?;
    Ok(View { entries, vote, committed, purged })
}

/// Terms never decrease along a raft log: a lower term after a higher one is a tail a
/// truncate should have removed.
fn check_term(entries: &BTreeMap<u64, Entry>, purged: Option<LogId>, entry: &Entry) -> Result<(), String> {
    let before = entries.last_key_value().map(|(_, e)| e.log_id).or(purged);
    match before {
        Some(b) if b.leader_id.term > entry.log_id.leader_id.term => Err(format!(
            "its term {} is below term {} of entry {} before it: a truncated tail was left on disk",
            entry.log_id.leader_id.term, b.leader_id.term, b.index
        )),
        _ => Ok(()),
    }
}

/// A replica saves a leader's vote before it accepts that leader's entries, so the stored
/// vote is never older than the last entry's term. An older one means the vote was lost.
fn check_vote(vote: Option<Vote>, newest: Option<LogId>) -> Result<(), String> {
    let Some(newest) = newest else {
        return Ok(());
    };
    let log_term = newest.leader_id.term;
    match vote {
        None if log_term > 0 => {
            Err(format!("no vote is stored but log entry {} has term {log_term}: the vote was lost", newest.index))
        }
        Some(v) if v.leader_id().term < log_term => Err(format!(
            "the vote's term {} is older than term {log_term} of log entry {}: the vote was lost",
            v.leader_id().term,
            newest.index
        )),
        _ => Ok(()),
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.view.entries(index_range(&range)))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let v = self.view.read();
        let last = v.entries.last_key_value().map(|(_, e)| e.log_id).or(v.purged);
        Ok(LogState { last_purged_log_id: v.purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader { view: self.view.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let rec = seal(vote).map_err(|e| StorageIOError::write_vote(any(e)))?;
        // A vote must survive a crash before the candidate hears about it.
        self.writer
            .write_durably(vec![Write::Put(Space::Meta, meta_key::VOTE, rec)])
            .await
            .map_err(|e| StorageIOError::write_vote(any(e)))?;
        self.view.write().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.view.read().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not waited for: losing it only means re-learning the commit index from the leader.
        let w = match committed {
            Some(c) => {
                Write::Put(Space::Meta, meta_key::COMMITTED, seal(&c).map_err(|e| StorageIOError::write(any(e)))?)
            }
            None => Write::Remove(Space::Meta, meta_key::COMMITTED..meta_key::COMMITTED + 1),
        };
        self.view.write().committed = committed;
        self.writer.write(vec![w]).await.map_err(|e| StorageIOError::write(any(e)).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.view.read().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Vec::new();
        let mut added = Vec::new();
        let mut signals = Vec::new();
        for mut entry in entries {
            // Out of the entry before it is kept: the view holds entries until they are
            // purged, and must not hold the batcher's permits with them.
            if let EntryPayload::Normal(b) = &mut entry.payload {
                signals.push(b.flushed.take());
            }
            let rec = seal(&entry).map_err(|e| StorageIOError::write_log_entry(entry.log_id, any(e)))?;
            batch.push(Write::Put(Space::Log, entry.log_id.index, rec));
            added.push(entry);
        }
        self.stats.appended(added.len());
        {
            let mut v = self.view.write();
            for e in added {
                v.entries.insert(e.log_id.index, e);
            }
        }
        self.writer.append(batch, callback, signals).await.map_err(|e| StorageIOError::write_logs(any(e)).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.view.write().entries.split_off(&log_id.index);
        self.writer
            .write(vec![Write::Remove(Space::Log, log_id.index..u64::MAX)])
            .await
            .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The purged id is written first: if a crash comes between the two writes, the next
        // start removes the leftovers (see `load`).
        let rec = seal(&log_id).map_err(|e| StorageIOError::write_logs(any(e)))?;
        {
            let mut v = self.view.write();
            v.entries = v.entries.split_off(&(log_id.index.saturating_add(1)));
            v.purged = Some(log_id);
        }
        self.writer
            .write(vec![
                Write::Put(Space::Meta, meta_key::PURGED, rec),
                Write::Remove(Space::Log, 0..log_id.index.saturating_add(1)),
            ])
            .await
            .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }
}
