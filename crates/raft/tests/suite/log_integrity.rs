//! The log on disk is what was written, in the order it was written, and a log that breaks
//! raft's rules is refused at start with the file and the index named.

use std::sync::Arc;

use baton_raft::codec::seal;
use baton_raft::store::{KvStore, LogStore, MemKv, SledKv, Space, StoreError, Write, kv::meta_key};
use baton_raft::types::{Entry, Vote};
use openraft::{CommittedLeaderId, EntryPayload, LogId};

fn entry(term: u64, index: u64) -> Entry {
    Entry { log_id: LogId::new(CommittedLeaderId::new(term, 1), index), payload: EntryPayload::Blank }
}

fn put_entry(e: &Entry) -> Write {
    Write::Put(Space::Log, e.log_id.index, seal(e).unwrap())
}

fn put_vote(v: &Vote) -> Write {
    Write::Put(Space::Meta, meta_key::VOTE, seal(v).unwrap())
}

fn open_err(kv: Arc<dyn KvStore>) -> String {
    match LogStore::open(kv, 16) {
        Ok(_) => panic!("the log must be refused"),
        Err(e) => e.to_string(),
    }
}

fn terms_on_disk(kv: &dyn KvStore) -> Vec<(u64, u64)> {
    kv.scan(Space::Log, 0..u64::MAX, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, rec)| (k, baton_raft::codec::unseal::<Entry>(&rec).unwrap().log_id.leader_id.term))
        .collect()
}

#[test]
fn sled_applies_a_truncate_after_puts_of_the_same_batch() {
    let dir = tempfile::tempdir().unwrap();
    let kv = SledKv::open(&dir.path().join("raft.sled")).unwrap();
    // Term-1 entries 1..=5, then a new leader truncates from 3 and appends its term-2 entry
    // 3, all merged into one batch by the log writer.
    let mut batch: Vec<Write> = (1..=5).map(|i| put_entry(&entry(1, i))).collect();
    batch.push(Write::Remove(Space::Log, 3..u64::MAX));
    batch.push(put_entry(&entry(2, 3)));
    kv.write(&batch).unwrap();
    assert_eq!(terms_on_disk(&kv), vec![(1, 1), (2, 1), (3, 2)]);
}

#[test]
fn sled_keeps_a_put_that_follows_a_remove_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let kv = SledKv::open(&dir.path().join("raft.sled")).unwrap();
    kv.write(&(1..=4).map(|i| put_entry(&entry(1, i))).collect::<Vec<_>>()).unwrap();
    kv.write(&[
        Write::Remove(Space::Log, 2..u64::MAX),
        put_entry(&entry(2, 2)),
        Write::Remove(Space::Log, 3..u64::MAX),
    ])
    .unwrap();
    assert_eq!(terms_on_disk(&kv), vec![(1, 1), (2, 2)]);
}

#[test]
fn a_log_whose_terms_decrease_is_refused_naming_the_index() {
    let kv = Arc::new(MemKv::new());
    kv.write(&[
        put_vote(&Vote::new_committed(2, 1)),
        put_entry(&entry(1, 1)),
        put_entry(&entry(2, 2)),
        put_entry(&entry(1, 3)),
    ])
    .unwrap();
    let err = open_err(kv);
    assert!(err.contains("log entry 3") && err.contains("term 1") && err.contains("term 2"), "{err}");
    assert!(err.contains("memory (log)"), "{err}");
}

#[test]
fn a_vote_older_than_the_log_is_refused() {
    let kv = Arc::new(MemKv::new());
    kv.write(&[put_vote(&Vote::new(1, 1)), put_entry(&entry(1, 1)), put_entry(&entry(3, 2))]).unwrap();
    let err = open_err(kv);
    assert!(err.contains("vote") && err.contains("term 1") && err.contains("term 3"), "{err}");
    assert!(err.contains("log entry 2"), "{err}");
}

#[test]
fn a_log_without_a_vote_is_refused_once_it_has_a_leader_term() {
    let kv = Arc::new(MemKv::new());
    kv.write(&[put_entry(&entry(0, 0)), put_entry(&entry(2, 1))]).unwrap();
    let err = open_err(kv);
    assert!(err.contains("no vote") && err.contains("log entry 1"), "{err}");
}

#[test]
fn a_consistent_log_opens() {
    let kv = Arc::new(MemKv::new());
    kv.write(&[
        put_vote(&Vote::new_committed(3, 2)),
        put_entry(&entry(0, 0)),
        put_entry(&entry(1, 1)),
        put_entry(&entry(1, 2)),
        put_entry(&entry(3, 3)),
    ])
    .unwrap();
    let opened: Result<LogStore, StoreError> = LogStore::open(kv, 16);
    assert!(opened.is_ok());
}
