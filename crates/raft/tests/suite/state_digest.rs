//! Committed state digests (issue 32): replicas hash their state at the leader's marks, and
//! one whose state parted from the leader's stops, naming the index, while the others go on.

use crate::common;

use baton_model::{Command, Op};
use baton_raft::codec::{decode_state, encode};
use baton_raft::settings::RaftSettings;
use baton_raft::store::{KvStore, SledKv, StoredSnapshot};
use common::*;

/// Snapshots every 20 entries, so a replica's state is on disk where a test can change it.
fn snapshotting() -> RaftSettings {
    RaftSettings { snapshot_every_entries: 20, ..settings() }
}

/// Gives the stopped replica in `dir` a state that differs from everyone's: its stored
/// snapshot gains a class no command made. A real replica gets there by a bug in its build's
/// `apply`, or memory or a disk that changed a valid state into another valid one.
fn part_the_state(dir: &std::path::Path) {
    let kv = SledKv::open(&dir.join("raft.sled")).unwrap();
    let mut stored = StoredSnapshot::load(&kv).unwrap().expect("the replica took a snapshot");
    let mut state = decode_state(&stored.data).unwrap();
    state.apply(put("forged")).unwrap();
    stored.data = encode(&state).unwrap();
    stored.save(&kv).unwrap();
    kv.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_state_parted_stops_at_the_next_check_and_names_the_index() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = cluster(root.path(), 3, snapshotting()).await;
    let leader = leader_of(&nodes).await;
    let lead = nodes.iter().find(|n| n.id == leader).unwrap().replica.clone();
    for i in 0..30 {
        lead.write(put(&format!("w{i}"))).await.unwrap().unwrap();
    }
    let index = lead.applied_index().unwrap();

    // One follower stops with everything applied and snapshotted; its state is changed.
    let pos = nodes.iter().position(|n| n.id != leader).unwrap();
    applied(&nodes[pos].replica, index).await;
    wait_for("the follower's snapshot", || nodes[pos].replica.metrics().snapshot_index.map(|_| ())).await;
    let victim = nodes.remove(pos);
    let victim_id = victim.id;
    let (dir, addr) = victim.stop().await;
    part_the_state(&dir);
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("rebind");
    let parted = Node::start(victim_id, CLUSTER, &dir, listener, snapshotting()).await;
    assert!(parted.replica.read_local(|s| has(s, "forged") && has(s, "w29")), "it came back with the changed state");

    // A mark, then the check of it: the changed replica stops; the others agree.
    let digest = |op: Op| Command { now_ms: 2, op };
    lead.write(digest(lead.state_digest_op())).await.unwrap().unwrap();
    let mark = lead.applied_index().unwrap();
    let check = lead.state_digest_op();
    assert!(matches!(check, Op::StateDigest(Some(at)) if at.index == mark), "{check:?}");
    lead.write(digest(check)).await.unwrap().unwrap();

    let why = tokio::time::timeout(WAIT, parted.replica.failed()).await.expect("the parted replica stops");
    assert!(why.contains(&format!("log index {mark}")) && why.contains("differs from the leader's"), "{why}");
    for n in &nodes {
        let r = n.replica.clone();
        wait_for("the other replicas to agree", || (r.digest_counts().agreed == 1).then_some(())).await;
        assert_eq!(r.failure_now(), None);
    }
    // The two that agree go on committing.
    lead.write(put("after")).await.unwrap().unwrap();
    assert!(nodes.iter().all(|n| !n.replica.read_local(|s| has(s, "forged"))));

    parted.stop().await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_applied_one_log_agree_at_every_check() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), 3, settings()).await;
    let leader = leader_of(&nodes).await;
    let lead = nodes.iter().find(|n| n.id == leader).unwrap().replica.clone();
    for round in 0..3 {
        lead.write(put(&format!("c{round}"))).await.unwrap().unwrap();
        let op = lead.state_digest_op();
        lead.write(Command { now_ms: 3, op }).await.unwrap().unwrap();
    }
    let index = lead.applied_index().unwrap();
    for n in &nodes {
        applied(&n.replica, index).await;
        // The applied index moves before the last mark's hash is counted: hashing runs off
        // the runtime after the entries apply, so wait for the count, not the index.
        let r = n.replica.clone();
        wait_for("the third mark's hash", || (r.digest_counts().marks >= 3).then_some(())).await;
        let counts = n.replica.digest_counts();
        assert_eq!((counts.marks, counts.agreed, counts.not_compared), (3, 2, 0), "replica {}", n.id);
        assert_eq!(n.replica.failure_now(), None);
    }
    for n in nodes {
        n.stop().await;
    }
}
