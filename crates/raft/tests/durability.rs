//! The log store acknowledges nothing before it is flushed: appends and votes wait for a
//! flush that saw them.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use baton_raft::store::{KvError, KvStore, LogStore, MemKv, Space, Write};
use baton_raft::types::{Entry, Vote};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId};

/// A disk-like store that records, at each flush, how many log records it made durable.
#[derive(Default)]
struct RecordingKv {
    inner: MemKv,
    flushes: AtomicU64,
    durable_log_records: AtomicU64,
}

impl KvStore for RecordingKv {
    fn get(&self, space: Space, key: u64) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(space, key)
    }
    fn scan(&self, space: Space, keys: Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
        self.inner.scan(space, keys, limit)
    }
    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
        self.inner.last(space)
    }
    fn write(&self, batch: Vec<Write>) -> Result<(), KvError> {
        self.inner.write(batch)
    }
    fn flush(&self) -> Result<(), KvError> {
        let n = self.inner.scan(Space::Log, 0..u64::MAX, usize::MAX)?.len();
        self.durable_log_records.store(n as u64, Ordering::SeqCst);
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn close(&self) -> Result<(), KvError> {
        Ok(())
    }
    fn is_durable(&self) -> bool {
        true
    }
    fn location(&self, space: Space) -> String {
        self.inner.location(space)
    }
}

fn entry(index: u64) -> Entry {
    Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Blank }
}

#[tokio::test]
async fn an_append_is_acknowledged_only_after_a_flush_that_includes_it() {
    let kv = Arc::new(RecordingKv::default());
    let mut log = LogStore::open(kv.clone(), 16).unwrap();
    log.blocking_append([entry(0), entry(1), entry(2)]).await.unwrap();
    assert!(kv.flushes.load(Ordering::SeqCst) >= 1);
    assert_eq!(kv.durable_log_records.load(Ordering::SeqCst), 3);
    log.blocking_append([entry(3)]).await.unwrap();
    assert_eq!(kv.durable_log_records.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_vote_is_durable_when_saving_it_returns() {
    let kv = Arc::new(RecordingKv::default());
    let mut log = LogStore::open(kv.clone(), 16).unwrap();
    let before = kv.flushes.load(Ordering::SeqCst);
    log.save_vote(&Vote::new(3, 2)).await.unwrap();
    assert!(kv.flushes.load(Ordering::SeqCst) > before);
    // And it is what a restart reads back.
    let mut reopened = LogStore::open(kv.clone(), 16).unwrap();
    assert_eq!(reopened.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
}
