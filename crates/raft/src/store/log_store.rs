//! The raft log over a [`KvStore`]: openraft's storage-v2 `RaftLogStorage`.
//!
//! Entries, the vote, and the committed and purged log ids are checksummed records. Appends
//! are acknowledged by the [`Flusher`] after a flush; a vote returns only once it is durable.

use std::fmt::Debug;
use std::ops::{Bound, Range, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, OptionalSend, RaftLogReader, StorageIOError};

use super::StoreError;
use super::flusher::Flusher;
use super::kv::{KvError, KvStore, Space, Write, meta_key};
use super::snapshot_record::StoredSnapshot;
use crate::codec::{seal, unseal};
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// Entries checked per read while verifying the log at start.
const VERIFY_CHUNK: usize = 4_096;

fn any(e: impl std::fmt::Display) -> AnyError {
    AnyError::error(e.to_string())
}

/// Reads log entries; cheap to clone, one per replication stream.
#[derive(Clone)]
pub struct LogReader {
    kv: Arc<dyn KvStore>,
}

/// The log store handed to openraft.
#[derive(Clone)]
pub struct LogStore {
    kv: Arc<dyn KvStore>,
    flusher: Arc<Flusher>,
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

fn read_entries(kv: &dyn KvStore, keys: Range<u64>) -> Result<Vec<Entry>, StorageError> {
    let records = kv
        .scan(Space::Log, keys, usize::MAX)
        .map_err(|e| StorageIOError::read_logs(any(e)))?;
    records
        .into_iter()
        .map(|(index, rec)| {
            unseal::<Entry>(&rec).map_err(|e| {
                StorageIOError::read_log_at_index(
                    index,
                    any(format!("{}: {e}", kv.location(Space::Log))),
                )
                .into()
            })
        })
        .collect()
}

fn read_meta<T: serde::de::DeserializeOwned>(
    kv: &dyn KvStore,
    key: u64,
) -> Result<Option<T>, StoreError> {
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
        read_entries(self.kv.as_ref(), index_range(&range))
    }
}

impl LogStore {
    /// Opens the log, checking every record: a corrupt or missing one stops the replica here,
    /// naming the file and the record, instead of diverging later.
    pub fn open(kv: Arc<dyn KvStore>, flush_queue_len: usize) -> Result<LogStore, StoreError> {
        verify(kv.as_ref())?;
        let flusher = Flusher::start(kv.clone(), flush_queue_len)?;
        Ok(LogStore {
            kv,
            flusher: Arc::new(flusher),
        })
    }

    fn write(&self, batch: Vec<Write>) -> Result<(), KvError> {
        self.kv.write(batch)
    }
}

/// Checks the log for checksum errors, gaps and lost acknowledged entries, and drops entries
/// an interrupted purge left behind.
fn verify(kv: &dyn KvStore) -> Result<(), StoreError> {
    let _vote: Option<Vote> = read_meta(kv, meta_key::VOTE)?;
    let committed: Option<LogId> = read_meta(kv, meta_key::COMMITTED)?;
    let purged: Option<LogId> = read_meta(kv, meta_key::PURGED)?;
    let snapshot_index = StoredSnapshot::load(kv)?
        .and_then(|s| s.meta.last_log_id)
        .map(|id| id.index);
    let location = kv.location(Space::Log);
    let corrupt = |record: String, reason: String| StoreError::Corrupt {
        location: location.clone(),
        record,
        reason,
    };

    if let Some(p) = purged {
        // Entries at or below the purged id are leftovers of a purge cut short by a crash.
        kv.write(vec![Write::Remove(
            Space::Log,
            0..p.index.saturating_add(1),
        )])?;
    }
    let mut next = purged.map_or(0, |p| p.index + 1);
    let mut prev: Option<u64> = None;
    let mut last: Option<u64> = None;
    loop {
        let chunk = kv.scan(Space::Log, next..u64::MAX, VERIFY_CHUNK)?;
        let Some((last_key, _)) = chunk.last() else {
            break;
        };
        let resume = last_key.saturating_add(1);
        for (index, rec) in chunk {
            let entry: Entry =
                unseal(&rec).map_err(|e| corrupt(format!("log entry {index}"), e.to_string()))?;
            if entry.log_id.index != index {
                return Err(corrupt(
                    format!("log entry {index}"),
                    format!("it holds entry {}", entry.log_id.index),
                ));
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
            prev = Some(index);
            last = Some(index);
        }
        next = resume;
    }
    if let Some(c) = committed {
        let held = [last, snapshot_index, purged.map(|p| p.index)]
            .into_iter()
            .flatten()
            .max();
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
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read_entries(self.kv.as_ref(), index_range(&range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let purged: Option<LogId> = read_meta(self.kv.as_ref(), meta_key::PURGED)
            .map_err(|e| StorageIOError::read_logs(any(e)))?;
        let last = match self
            .kv
            .last(Space::Log)
            .map_err(|e| StorageIOError::read_logs(any(e)))?
        {
            Some((index, rec)) => Some(
                unseal::<Entry>(&rec)
                    .map_err(|e| StorageIOError::read_log_at_index(index, any(e)))?
                    .log_id,
            ),
            None => purged,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            kv: self.kv.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let rec = seal(vote).map_err(|e| StorageIOError::write_vote(any(e)))?;
        self.write(vec![Write::Put(Space::Meta, meta_key::VOTE, rec)])
            .map_err(|e| StorageIOError::write_vote(any(e)))?;
        // A vote must survive a crash before the candidate hears about it.
        self.flusher
            .flush_now()
            .await
            .map_err(|e| StorageIOError::write_vote(any(e)))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        read_meta(self.kv.as_ref(), meta_key::VOTE)
            .map_err(|e| StorageIOError::read_vote(any(e)).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not flushed: losing it only means re-learning the commit index from the leader.
        let w = match committed {
            Some(c) => Write::Put(
                Space::Meta,
                meta_key::COMMITTED,
                seal(&c).map_err(|e| StorageIOError::write(any(e)))?,
            ),
            None => Write::Remove(Space::Meta, meta_key::COMMITTED..meta_key::COMMITTED + 1),
        };
        self.write(vec![w])
            .map_err(|e| StorageIOError::write(any(e)).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        read_meta(self.kv.as_ref(), meta_key::COMMITTED)
            .map_err(|e| StorageIOError::read(any(e)).into())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Vec::new();
        for entry in entries {
            let rec =
                seal(&entry).map_err(|e| StorageIOError::write_log_entry(entry.log_id, any(e)))?;
            batch.push(Write::Put(Space::Log, entry.log_id.index, rec));
        }
        self.write(batch)
            .map_err(|e| StorageIOError::write_logs(any(e)))?;
        self.flusher
            .after_flush(callback)
            .await
            .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write(vec![Write::Remove(Space::Log, log_id.index..u64::MAX)])
            .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The purged id is written first: if a crash comes between the two writes, the next
        // start removes the leftovers (see `verify`).
        let rec = seal(&log_id).map_err(|e| StorageIOError::write_logs(any(e)))?;
        self.write(vec![
            Write::Put(Space::Meta, meta_key::PURGED, rec),
            Write::Remove(Space::Log, 0..log_id.index.saturating_add(1)),
        ])
        .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }
}
