//! The record store on disk and in memory: idempotent writes, queries by user, queue, time
//! and ending, pages, totals clipped to their window, pruning, and records that survive a
//! reopen.

use baton_accounting::{AccountingError, By, Query, RecordStore};
use baton_model::accounting::{AttemptRecord, Ending};
use baton_model::job::PreemptionMode;
use baton_model::resources::Resources;

const HOUR_MS: u64 = 3_600_000;

fn record(seq: u64, user: &str, queue: &str, start_h: u64, end_h: u64, gpus: u64) -> AttemptRecord {
    AttemptRecord {
        seq,
        job: seq,
        name: format!("j{seq}"),
        attempt: 1,
        user: user.into(),
        queue: queue.into(),
        pool: if queue == "b" { "public".into() } else { "default".into() },
        nodes: vec!["n1".into()],
        gpus,
        resources: Resources::of(&[("gpu", gpus)]),
        start_ms: start_h * HOUR_MS,
        end_ms: end_h * HOUR_MS,
        ending: Ending::Succeeded,
        detail: "exited 0".into(),
        lost_ms: 0,
    }
}

fn filled(store: &RecordStore) {
    let mut preempted = record(3, "alice", "b", 2, 4, 4);
    preempted.ending = Ending::Preempted { by: "urgent".into(), mode: PreemptionMode::Checkpoint };
    preempted.lost_ms = HOUR_MS / 2;
    let records = vec![
        record(1, "alice", "a", 0, 1, 2),
        record(2, "bob", "a", 0, 2, 1),
        preempted,
        record(4, "alice", "a", 5, 6, 8),
    ];
    assert_eq!(store.put(&records).unwrap(), 4);
    assert_eq!(store.put(&records).unwrap(), 0, "written again: nothing changes");
}

fn seqs(store: &RecordStore, q: Query) -> Vec<u64> {
    store.query(&q, |_| true).unwrap().records.iter().map(|r| r.seq).collect()
}

fn queries_answer(store: &RecordStore) {
    filled(store);
    assert_eq!(store.len().unwrap(), 4);
    assert_eq!(store.newest_seq().unwrap(), 4);
    let alice = || Query { user: Some("alice".into()), ..Query::default() };
    assert_eq!(seqs(store, alice()), vec![1, 3, 4], "oldest first");
    assert_eq!(seqs(store, Query { since_ms: 2 * HOUR_MS, ..alice() }), vec![3, 4]);
    assert_eq!(seqs(store, Query { until_ms: 4 * HOUR_MS, ..alice() }), vec![1]);
    assert_eq!(seqs(store, Query { queue: Some("a".into()), ..alice() }), vec![1, 4]);
    assert_eq!(seqs(store, Query { queue: Some("a".into()), ..Query::default() }), vec![1, 2, 4]);
    assert_eq!(seqs(store, Query { ending: Some("preempted".into()), ..Query::default() }), vec![3]);
    assert_eq!(seqs(store, Query { user: Some("nobody".into()), ..Query::default() }), Vec::<u64>::new());
    let page = store.query(&Query { limit: 2, ..Query::default() }, |_| true).unwrap();
    assert_eq!((page.records.iter().map(|r| r.seq).collect::<Vec<_>>(), page.more), (vec![3, 4], true));
    let only_bob = store.query(&Query::default(), |r| r.user == "bob").unwrap();
    assert_eq!(only_bob.records.len(), 1);

    let by_user = store.totals(By::User, HOUR_MS, 10 * HOUR_MS, |_| true).unwrap();
    let alice = by_user.iter().find(|t| t.key == "alice").unwrap();
    // Record 1 ended at the window's start (not in it); 3 gives 2 h x 4, 4 gives 1 h x 8.
    assert_eq!((alice.gpu_ms, alice.attempts, alice.jobs), (16 * HOUR_MS, 2, 2));
    assert_eq!((alice.preempted_gpu_ms, alice.lost_gpu_ms), (8 * HOUR_MS, 2 * HOUR_MS));
    let bob = by_user.iter().find(|t| t.key == "bob").unwrap();
    assert_eq!(bob.gpu_ms, HOUR_MS, "its first hour is before the window");
    let by_pool = store.totals(By::Pool, 0, 10 * HOUR_MS, |_| true).unwrap();
    assert_eq!(by_pool.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), vec!["default", "public"]);

    let next: Vec<u64> = store.after(HOUR_MS, 1, 2).unwrap().iter().map(|r| r.seq).collect();
    assert_eq!(next, vec![2, 3], "an exporter's next batch, in number order");
    assert_eq!(store.after(0, 0, 10).unwrap().len(), 4, "from the oldest");
    assert!(store.after(6 * HOUR_MS, 4, 10).unwrap().is_empty());

    assert_eq!(store.prune(2 * HOUR_MS + 1, 100).unwrap(), 2);
    assert_eq!(seqs(store, Query::default()), vec![3, 4]);
    assert_eq!(seqs(store, Query { user: Some("bob".into()), ..Query::default() }), Vec::<u64>::new());
}

#[test]
fn a_store_in_memory_answers_queries() {
    queries_answer(&RecordStore::memory());
}

#[test]
fn a_store_on_disk_answers_queries_and_keeps_its_records_when_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    queries_answer(&store);
    store.close().unwrap();
    assert!(store.len().is_err(), "closed");
    let again = RecordStore::open(dir.path()).unwrap();
    assert_eq!(again.len().unwrap(), 2);
    assert_eq!(again.newest_seq().unwrap(), 4);
}

#[test]
fn a_reversed_range_and_an_unknown_ending_are_refused_by_flag() {
    let store = RecordStore::memory();
    let reversed = Query { since_ms: 10, until_ms: 5, ..Query::default() };
    let e = store.query(&reversed, |_| true).unwrap_err();
    assert!(matches!(&e, AccountingError::Query(m) if m.contains("--since") && m.contains("--until")), "{e}");
    let e = store.query(&Query { ending: Some("exploded".into()), ..Query::default() }, |_| true).unwrap_err();
    assert!(e.to_string().contains("--state \"exploded\""), "{e}");
}
