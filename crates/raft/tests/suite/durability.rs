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
    fn write(&self, batch: &[Write]) -> Result<(), KvError> {
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

/// sled's own flush is not an fsync; the sled store's flush must sync its data file, and
/// every blob file (large values live in files of their own) written since the last flush.
#[test]
fn a_sled_flush_syncs_the_data_file_and_new_blob_files() {
    let dir = tempfile::tempdir().unwrap();
    let kv = baton_raft::store::SledKv::open(&dir.path().join("raft.sled")).unwrap();
    let before = kv.sync_counts().unwrap();
    // Large enough that sled stores it as a blob file.
    kv.write(&[Write::Put(Space::Snapshot, 0, vec![7; 1 << 20])]).unwrap();
    kv.flush().unwrap();
    let after_blob = kv.sync_counts().unwrap();
    let blobs_on_disk = std::fs::read_dir(dir.path().join("raft.sled").join("blobs")).unwrap().count() as u64;
    assert!(blobs_on_disk >= 1, "the large value did not become a blob file");
    assert_eq!(after_blob.data, before.data + 1);
    assert_eq!(after_blob.blobs, before.blobs + blobs_on_disk);
    // A flush with no new blob syncs the data file only.
    kv.write(&[Write::Put(Space::Log, 1, vec![1; 16])]).unwrap();
    kv.flush().unwrap();
    let after_small = kv.sync_counts().unwrap();
    assert_eq!(after_small, baton_raft::store::SyncCounts { data: after_blob.data + 1, blobs: after_blob.blobs });
}

/// What the log store acknowledged survives a power cut that loses everything unsynced.
#[tokio::test]
async fn acknowledged_appends_and_votes_survive_a_power_cut() {
    let disk = baton_raft::store::PowerLossDisk::new("disk");
    let mut log = LogStore::open(Arc::new(disk.open()), 16).unwrap();
    log.save_vote(&Vote::new(2, 1)).await.unwrap();
    // Random 0: nothing unsynced reaches the disk.
    disk.power_loss(0);
    let mut log = LogStore::open(Arc::new(disk.open()), 16).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
    log.blocking_append([entry(0), entry(1)]).await.unwrap();
    disk.power_loss(0);
    let mut log = LogStore::open(Arc::new(disk.open()), 16).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id.map(|id| id.index), Some(1));
}
