//! A replica whose disk syncs slowly (a flush that takes seconds), on a follower and on the
//! leader of three replicas (issue 10): the cluster keeps (or elects) a leader, every write
//! gets an answer or a clear error in bounded time, never a hang, and no acknowledged write
//! is lost.

use crate::common;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_raft::metrics::Role;
use baton_raft::replica::{SharedStore, Storage};
use baton_raft::store::{KvError, KvStore, MemKv, Space, Write};
use baton_raft::types::NodeId;
use common::{CLUSTER, Node, WAIT, has, leader_of, listener, put};

/// Each flush takes `delay` (set while the test runs).
#[derive(Default)]
struct SlowKv {
    inner: MemKv,
    delay: Mutex<Duration>,
}

impl KvStore for SlowKv {
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
        let delay = *self.delay.lock().unwrap();
        std::thread::sleep(delay);
        self.inner.flush()
    }
    fn close(&self) -> Result<(), KvError> {
        self.inner.close()
    }
    fn is_durable(&self) -> bool {
        true
    }
    fn location(&self, space: Space) -> String {
        format!("slow disk ({})", space.name())
    }
}

/// How long one flush takes on the slow disk: several election timeouts (150-300 ms).
const SLOW: Duration = Duration::from_millis(2_000);
/// Writes sent while the disk is slow.
const WRITES: usize = 12;

async fn cluster_on(disks: &[Arc<SlowKv>]) -> Vec<Node> {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let (l, _) = listener().await;
        let storage = Storage::Store(SharedStore(disk.clone()));
        let dir = root.path().join(format!("r{}", i + 1));
        nodes.push(Node::start_on(i as NodeId + 1, CLUSTER, &dir, l, common::settings(), storage).await);
    }
    let members: BTreeMap<NodeId, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
    nodes[0].replica.bootstrap(members).await.expect("bootstrap");
    leader_of(&nodes).await;
    nodes
}

/// Sends `WRITES` writes through `via`, each bounded: an answer or an error, never a hang.
/// Returns the names acknowledged and the errors of the others.
async fn write_through(via: &Node, prefix: &str) -> (Vec<String>, Vec<String>) {
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for i in 0..WRITES {
        let name = format!("{prefix}-{i}");
        // The replica's own request timeout (5 s in these tests) bounds each write; WAIT is
        // only the test's guard against a hang.
        match tokio::time::timeout(WAIT, via.replica.write(put(&name))).await {
            Err(_) => panic!("a write hung for {WAIT:?} on a slow disk"),
            Ok(Ok(r)) => {
                assert!(r.is_ok(), "{r:?}");
                acked.push(name);
            }
            Ok(Err(e)) => {
                let text = e.to_string();
                assert!(!text.is_empty(), "an error without a reason");
                failed.push(text);
            }
        }
    }
    (acked, failed)
}

/// Every acknowledged write is in the state a linearizable read on the leader sees.
async fn none_lost(nodes: &[Node], acked: &[String]) {
    let leader = leader_of(nodes).await;
    let node = nodes.iter().find(|n| n.id == leader).unwrap();
    let acked = acked.to_vec();
    let missing: Vec<String> = node
        .replica
        .read(move |s| acked.iter().filter(|n| !has(s, n)).cloned().collect::<Vec<_>>())
        .await
        .expect("a linearizable read on the leader");
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
}

async fn stop_all(nodes: Vec<Node>) {
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_follower_does_not_hold_back_the_cluster() {
    common::init_tracing();
    let disks: Vec<Arc<SlowKv>> = (0..3).map(|_| Arc::new(SlowKv::default())).collect();
    let nodes = cluster_on(&disks).await;
    let leader = leader_of(&nodes).await;
    let term = nodes[0].replica.metrics().term;
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    *disks[(follower.id - 1) as usize].delay.lock().unwrap() = SLOW;

    let via = nodes.iter().find(|n| n.id == leader).unwrap();
    let (acked, failed) = write_through(via, "f").await;
    // The leader and the other follower make a quorum: every write commits.
    assert_eq!((acked.len(), failed), (WRITES, Vec::<String>::new()));
    let m = via.replica.metrics();
    assert_eq!((m.role, m.term), (Role::Leader, term), "the slow follower cost the leader its place");
    none_lost(&nodes, &acked).await;
    *disks[(follower.id - 1) as usize].delay.lock().unwrap() = Duration::ZERO;
    stop_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_leader_answers_or_gives_way_and_loses_nothing() {
    common::init_tracing();
    let disks: Vec<Arc<SlowKv>> = (0..3).map(|_| Arc::new(SlowKv::default())).collect();
    let nodes = cluster_on(&disks).await;
    let leader = leader_of(&nodes).await;
    *disks[(leader - 1) as usize].delay.lock().unwrap() = SLOW;

    // Through a follower: writes are forwarded to whoever leads.
    let via = nodes.iter().find(|n| n.id != leader).unwrap();
    let (acked, failed) = write_through(via, "l").await;
    let now = leader_of(&nodes).await;
    println!(
        "slow leader r{leader}: {} of {WRITES} writes acknowledged, leader now r{now}; the others: {failed:?}",
        acked.len()
    );
    none_lost(&nodes, &acked).await;
    // The cluster takes writes afterwards, whoever leads.
    *disks[(leader - 1) as usize].delay.lock().unwrap() = Duration::ZERO;
    let (after, _) = write_through(via, "after").await;
    assert!(!after.is_empty(), "no write succeeded once the disk was fast again");
    none_lost(&nodes, &[acked, after].concat()).await;
    stop_all(nodes).await;
}
