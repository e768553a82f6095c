//! Where a write waits on its way to the log (issue 13): the leader's log flushes are a
//! serial line (openraft 0.9 flushes each entry before it takes the next), so writes that
//! arrive while one batch is being flushed must wait and go together into the next batch,
//! not each be cut into an entry of its own that queues for a flush of its own.

use crate::common;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

use baton_raft::replica::{SharedStore, Storage};
use baton_raft::store::{KvError, KvStore, MemKv, Space, Write};
use common::{CLUSTER, Node, has, leader_of, listener, put, wait_for};

/// A disk whose flushes wait while the gate is closed.
#[derive(Default)]
struct GatedKv {
    inner: MemKv,
    gate: Mutex<Gate>,
    opened: Condvar,
}

#[derive(Default)]
struct Gate {
    closed: bool,
    /// Flushes waiting at the closed gate now.
    waiting: usize,
}

impl GatedKv {
    fn close(&self) {
        self.gate.lock().unwrap().closed = true;
    }

    fn open(&self) {
        self.gate.lock().unwrap().closed = false;
        self.opened.notify_all();
    }

    fn waiting(&self) -> usize {
        self.gate.lock().unwrap().waiting
    }
}

impl KvStore for GatedKv {
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
        let mut g = self.gate.lock().unwrap();
        g.waiting += 1;
        while g.closed {
            g = self.opened.wait(g).unwrap();
        }
        g.waiting -= 1;
        drop(g);
        self.inner.flush()
    }
    fn close(&self) -> Result<(), KvError> {
        self.inner.close()
    }
    fn is_durable(&self) -> bool {
        // The replica writes through its log writer thread and waits for flushes, as on sled.
        true
    }
    fn location(&self, space: Space) -> String {
        format!("gated disk ({})", space.name())
    }
}

/// Writes sent while the first one's flush is held.
const LATER: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_arriving_during_a_flush_go_together_into_the_next_batch() {
    let disk = Arc::new(GatedKv::default());
    let root = tempfile::tempdir().unwrap();
    let (l, _) = listener().await;
    let storage = Storage::Store(SharedStore(disk.clone()));
    let node = Node::start_on(1, CLUSTER, &root.path().join("r1"), l, common::settings(), storage).await;
    node.replica.bootstrap(BTreeMap::from([(1, node.addr.clone())])).await.expect("bootstrap");
    leader_of(std::slice::from_ref(&node)).await;
    let r = node.replica.clone();
    // Settled: the leader's first entries are flushed.
    node.replica.write(put("warm-up")).await.expect("write").expect("applied");
    let before = r.write_counts();

    disk.close();
    let first = tokio::spawn({
        let r = r.clone();
        async move { r.write(put("first")).await }
    });
    wait_for("the first batch to wait for its flush", || {
        (r.write_counts().batches_proposed == before.batches_proposed + 1 && disk.waiting() == 1).then_some(())
    })
    .await;
    let later: Vec<_> = (0..LATER)
        .map(|i| {
            let r = r.clone();
            tokio::spawn(async move { r.write(put(&format!("later-{i}"))).await })
        })
        .collect();
    wait_for("every later write to reach the batcher", || {
        (r.write_counts().writes_queued == before.writes_queued + 1 + LATER as u64).then_some(())
    })
    .await;
    let held = r.write_counts();
    assert_eq!(
        held.batches_proposed,
        before.batches_proposed + 1,
        "a batch was cut while the one before it waited for its flush: {held:?}"
    );

    disk.open();
    first.await.unwrap().expect("write").expect("applied");
    for w in later {
        w.await.unwrap().expect("write").expect("applied");
    }
    let after = r.write_counts();
    let (batches, entries, flushes) = (
        after.batches_proposed - before.batches_proposed,
        after.log_entries_appended - before.log_entries_appended,
        after.log_flushes - before.log_flushes,
    );
    assert_eq!((batches, entries), (2, 2), "{} writes: the first, then the others together", 1 + LATER);
    assert_eq!(flushes, 2, "one flush per entry: {after:?}");
    assert_eq!(after.commands_proposed - before.commands_proposed, 1 + LATER as u64);
    assert_eq!(after.batches_in_flight, 0, "every batch was answered");
    assert!(r.read_local(|s| (0..LATER).all(|i| has(s, &format!("later-{i}")))));
    node.stop().await;
}
