//! What reading the accounting store costs (numbers in BENCHMARKS.md): a store on disk with
//! 1,000,000 records of 1,000 users in 20 queues over 90 days, and
//! - `history/user-7d`: one user's records of the last 7 days (`baton history --user U
//!   --since 7d`), about 78 of them;
//! - `history/queue-page-1000`: a queue's newest 1,000 records;
//! - `history/totals-by-user-30d`: GPU time per user over 30 days (`baton usage --by user
//!   --since 30d`), a pass over about 333,000 records;
//! - `history/write-1000`: writing 1,000 new records into a store on disk (what a
//!   replica does as it applies the commands that ended them).
//!
//! The store is built once under `target/` and reused while it holds the same records.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use baton_accounting::{By, Query, RecordStore};
use baton_model::accounting::{AttemptRecord, Ending};
use baton_model::resources::Resources;
use criterion::{Criterion, criterion_group, criterion_main};

const RECORDS: u64 = 1_000_000;
const USERS: u64 = 1_000;
const QUEUES: u64 = 20;
const DAY_MS: u64 = 86_400_000;
const SPAN_MS: u64 = 90 * DAY_MS;
const NOW_MS: u64 = 1_800_000_000_000;

fn record(seq: u64) -> AttemptRecord {
    // Spread evenly in time, users and queues interleaved so no index is in seq order.
    let end_ms = NOW_MS - SPAN_MS + seq * (SPAN_MS / RECORDS);
    let gpus = 1 + seq % 8;
    AttemptRecord {
        seq,
        job: seq / 2,
        name: format!("train-{}", seq / 2),
        attempt: 1 + (seq % 2) as u32,
        user: format!("user{}", (seq * 7_919) % USERS),
        queue: format!("queue{}", seq % QUEUES),
        pool: "default".into(),
        nodes: vec![format!("node{}", seq % 10_000)],
        gpus,
        resources: Resources::of(&[("gpu", gpus), ("cpu", 8_000)]),
        start_ms: end_ms - 3_600_000,
        end_ms,
        ending: if seq % 5 == 0 {
            Ending::Preempted { by: "urgent".into(), mode: Default::default() }
        } else {
            Ending::Succeeded
        },
        detail: "exited 0".into(),
        lost_ms: 0,
    }
}

fn store() -> RecordStore {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("accounting-1m");
    let store = RecordStore::open(&dir).expect("open the bench store");
    if store.newest_seq().unwrap() != RECORDS {
        let from = store.newest_seq().unwrap() + 1;
        for chunk in (from..=RECORDS).collect::<Vec<_>>().chunks(10_000) {
            let records: Vec<AttemptRecord> = chunk.iter().map(|&s| record(s)).collect();
            store.put(&records).unwrap();
        }
        store.flush().unwrap();
    }
    assert_eq!(store.len().unwrap() as u64, RECORDS);
    store
}

fn bench(c: &mut Criterion) {
    let store = store();
    let mut g = c.benchmark_group("history");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    let week = Query { user: Some("user42".into()), since_ms: NOW_MS - 7 * DAY_MS, ..Query::default() };
    assert!(!store.query(&week, |_| true).unwrap().records.is_empty());
    g.bench_function("user-7d", |b| b.iter(|| black_box(store.query(&week, |_| true).unwrap())));
    let page = Query { queue: Some("queue3".into()), limit: 1_000, ..Query::default() };
    g.bench_function("queue-page-1000", |b| b.iter(|| black_box(store.query(&page, |_| true).unwrap())));
    g.bench_function("totals-by-user-30d", |b| {
        b.iter(|| black_box(store.totals(By::User, NOW_MS - 30 * DAY_MS, NOW_MS, |_| true).unwrap()))
    });
    // Into a store of its own, so the million stays the same from run to run.
    let dir = tempfile::tempdir().unwrap();
    let fresh = RecordStore::open(dir.path()).unwrap();
    let mut next = 1;
    g.bench_function("write-1000", |b| {
        b.iter(|| {
            let records: Vec<AttemptRecord> = (next..next + 1_000).map(record).collect();
            next += 1_000;
            black_box(fresh.put(&records).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
