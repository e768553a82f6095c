//! A real 3-replica cluster on loopback gRPC with sled storage: election, commit, leader
//! loss, restart, rebuild from snapshot, membership changes.

use crate::common;

use common::*;

use baton_raft::error::WriteError;
use baton_raft::metrics::Role;
use baton_raft::settings::RaftSettings;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_loss_keeps_every_acknowledged_write_and_a_restarted_replica_catches_up() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = cluster(root.path(), 3, settings()).await;
    let first_leader = leader_of(&nodes).await;

    // Writes sent to every replica: followers forward to the leader.
    let mut acknowledged = Vec::new();
    for i in 0..30 {
        let name = format!("before-{i}");
        let node = &nodes[i % 3];
        node.replica.write(put(&name)).await.expect("write").expect("applied");
        acknowledged.push(name);
    }

    // Kill the leader.
    let pos = nodes.iter().position(|n| n.id == first_leader).unwrap();
    let old = nodes.remove(pos);
    let old_id = old.id;
    let (old_dir, old_addr) = old.stop().await;

    let second_leader = wait_for("a new leader", || {
        let l = nodes[0].replica.metrics().leader_id?;
        (l != first_leader && nodes[1].replica.metrics().leader_id == Some(l)).then_some(l)
    })
    .await;
    assert_ne!(second_leader, first_leader);

    for i in 0..30 {
        let name = format!("after-{i}");
        nodes[i % 2].replica.write(put(&name)).await.expect("write").expect("applied");
        acknowledged.push(name);
    }

    // Every acknowledged write is in a linearizable read on both survivors.
    for n in &nodes {
        let missing = n
            .replica
            .read(|s| acknowledged.iter().filter(|a| !has(s, a)).cloned().collect::<Vec<_>>())
            .await
            .expect("linearizable read");
        assert!(missing.is_empty(), "replica {} lost {missing:?}", n.id);
    }

    // The old leader restarts from its data directory, on its old address, and catches up.
    let listener = tokio::net::TcpListener::bind(&old_addr).await.expect("rebind old address");
    let back = Node::start(old_id, CLUSTER, &old_dir, listener, settings()).await;
    let target = nodes[0].replica.metrics().last_applied_index.unwrap();
    applied(&back.replica, target).await;
    let leader_state = nodes[0].replica.read(|s| s.clone()).await.unwrap();
    wait_for("the restarted replica to hold the leader's state", || {
        back.replica.read_local(|s| *s == leader_state).then_some(())
    })
    .await;
    assert_ne!(back.replica.metrics().role, Role::Leader, "a rejoining replica does not take over by itself");

    back.stop().await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_replica_is_rebuilt_from_a_snapshot() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let s = RaftSettings { snapshot_every_entries: 20, logs_kept_after_snapshot: 0, ..settings() };
    let mut nodes = cluster(root.path(), 3, s.clone()).await;
    let leader = leader_of(&nodes).await;
    let victim_pos = nodes.iter().position(|n| n.id != leader).unwrap();
    let victim = nodes.remove(victim_pos);
    let victim_id = victim.id;
    let (dir, addr) = victim.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();

    for i in 0..100 {
        nodes[0].replica.write(put(&format!("w{i}"))).await.unwrap().unwrap();
    }
    // The log is bounded: the leader snapshotted and purged what the snapshot covers.
    let leader_node = nodes.iter().find(|n| n.id == leader).unwrap();
    wait_for("the leader to snapshot and purge its log", || {
        let m = leader_node.replica.metrics();
        (m.snapshot_index.is_some() && m.purged_index.is_some()).then_some(())
    })
    .await;

    // Entries up to here are gone from the leader's log: only a snapshot can carry them.
    let purged = leader_node.replica.metrics().purged_index.unwrap();

    let listener = tokio::net::TcpListener::bind(&addr).await.expect("rebind");
    let rebuilt = Node::start(victim_id, CLUSTER, &dir, listener, s).await;
    let leader_state = leader_node.replica.read(|s| s.clone()).await.unwrap();
    wait_for("the wiped replica to hold the leader's state", || {
        rebuilt.replica.read_local(|s| *s == leader_state).then_some(())
    })
    .await;
    let m = rebuilt.replica.metrics();
    assert!(m.snapshot_index >= Some(purged), "the wiped replica was rebuilt from a snapshot covering {purged}: {m:?}");

    rebuilt.stop().await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_online() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = cluster(root.path(), 3, settings()).await;
    let leader = leader_of(&nodes).await;
    let leader_replica = nodes.iter().find(|n| n.id == leader).unwrap().replica.clone();
    leader_replica.write(put("early")).await.unwrap().unwrap();

    // A fourth replica joins as a learner, catches up, and is promoted.
    let (l, _) = listener().await;
    let fourth = Node::start(4, CLUSTER, &root.path().join("r4"), l, settings()).await;

    // Only the leader changes membership; a follower names the leader.
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    let err = follower.replica.add_learner(4, &fourth.addr).await.unwrap_err();
    assert!(err.to_string().contains(&leader_replica.addr().to_string()), "{err}");

    leader_replica.add_learner(4, &fourth.addr).await.expect("add learner");
    let m = leader_replica.metrics();
    assert!(m.learners.contains(&4) && !m.voters.contains(&4), "{m:?}");
    // Caught up in the log; it applies once it hears the commit index.
    wait_for("the learner to apply the early write", || fourth.replica.read_local(|s| has(s, "early")).then_some(()))
        .await;

    leader_replica.promote(4).await.expect("promote");
    assert!(leader_replica.metrics().voters.contains(&4));

    // The new voter serves writes (forwarded) and linearizable reads.
    fourth.replica.write(put("from-four")).await.unwrap().unwrap();
    assert!(fourth.replica.read(|s| has(s, "from-four")).await.unwrap());

    // Remove a follower that is not the new one.
    let gone = nodes.iter().find(|n| n.id != leader).unwrap().id;
    leader_replica.remove(gone).await.expect("remove");
    let m = leader_replica.metrics();
    assert!(!m.voters.contains(&gone) && !m.members.contains_key(&gone), "{m:?}");
    assert_eq!(m.voters.len(), 3);
    leader_replica.write(put("after-removal")).await.unwrap().unwrap();

    // Removing an unknown replica is refused by name.
    let err = leader_replica.remove(99).await.unwrap_err();
    assert!(err.to_string().contains("99"), "{err}");

    fourth.stop().await;
    let pos = nodes.iter().position(|n| n.id == gone).unwrap();
    nodes.remove(pos).stop().await;
    for n in nodes {
        n.stop().await;
    }
}

/// A removed replica's id is never taken back (behaviour 6): a leader of an older
/// configuration may still count it as a voter, and an empty replica under it would answer
/// that leader's votes and appends with nothing it stored (the simulator's operator, stop 77).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_replicas_id_is_refused_by_every_later_leader() {
    use baton_model::{Command, Op, behaviour};
    use baton_raft::MembershipError;
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), 3, settings()).await;
    let leader = leader_of(&nodes).await;
    let leading = nodes.iter().find(|n| n.id == leader).unwrap().replica.clone();
    let raise = Command { now_ms: 1, op: Op::SetBehaviour(behaviour::RETIRED_REPLICAS) };
    leading.write(raise).await.unwrap().unwrap();

    let (l, _) = listener().await;
    let fourth = Node::start(4, CLUSTER, &root.path().join("r4"), l, settings()).await;
    leading.add_replica(4, &fourth.addr).await.expect("replica 4 joins");
    leading.remove_replica(4).await.expect("replica 4 leaves");
    fourth.stop().await;

    // Its machine is replaced: an empty disk under the same id.
    let (l, _) = listener().await;
    let again = Node::start(4, CLUSTER, &root.path().join("r4-new"), l, settings()).await;
    let e = leading.add_replica(4, &again.addr).await.unwrap_err();
    assert_eq!(e, MembershipError::Retired { id: 4 }, "{e}");
    assert!(e.to_string().contains("new id"), "{e}");

    // Every replica applied the record: the next leader refuses it too, and takes a new id.
    leading.transfer_leader(None).await.expect("leadership moves");
    wait_for("another replica leads", || {
        nodes.iter().find(|n| n.id != leader && n.replica.metrics().role == Role::Leader).map(|n| n.replica.clone())
    })
    .await;
    let next = leader_of(&nodes).await;
    let next = &nodes.iter().find(|n| n.id == next).unwrap().replica;
    assert_eq!(next.add_replica(4, &again.addr).await.unwrap_err(), MembershipError::Retired { id: 4 });
    again.stop().await;
    let (l, _) = listener().await;
    let fifth = Node::start(5, CLUSTER, &root.path().join("r5"), l, settings()).await;
    next.add_replica(5, &fifth.addr).await.expect("a new id joins");
    fifth.stop().await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_leader_is_refused_clearly() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let (l, _) = listener().await;
    // Never bootstrapped: no leader exists.
    let lone = Node::start(1, CLUSTER, &root.path().join("r1"), l, settings()).await;
    assert_eq!(lone.replica.write(put("x")).await, Err(WriteError::NoLeader));
    lone.stop().await;
}

/// A write and a read that reach a replica while it knows no leader wait for the election
/// (`LEADER_HOLD_MS`) instead of answering "no leader yet" at once: here the replicas know
/// none until the cluster is bootstrapped, after the requests were made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_and_a_read_during_an_election_wait_for_its_leader() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let (l, _) = listener().await;
        nodes.push(Node::start(id, CLUSTER, &root.path().join(format!("r{id}")), l, settings()).await);
    }
    let (writer, reader) = (nodes[1].replica.clone(), nodes[2].replica.clone());
    let write = tokio::spawn(async move { writer.write(put("during-election")).await });
    let read = tokio::spawn(async move { reader.read(|_| ()).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!write.is_finished() && !read.is_finished(), "both wait while no leader is known");

    let members = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
    nodes[0].replica.bootstrap(members).await.expect("bootstrap");
    write.await.unwrap().expect("the write waited for the first leader").expect("applied");
    read.await.unwrap().expect("the read waited for the first leader");
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_are_batched_and_each_gets_its_own_response() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), 3, settings()).await;
    let leader = leader_of(&nodes).await;
    let mut tasks = Vec::new();
    for i in 0..300u32 {
        // Through every replica; odd writes are refused by the state machine, naming what
        // they asked for, so a response handed to the wrong caller would show.
        let r = nodes[i as usize % 3].replica.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("c{i}");
            let cmd = if i % 2 == 0 {
                put(&name)
            } else {
                baton_model::Command {
                    now_ms: 1,
                    op: baton_model::Op::DeleteClass { name: baton_model::Name::lit(&name) },
                }
            };
            (i, name, r.write(cmd).await)
        }));
    }
    for t in tasks {
        let (i, name, result) = t.await.unwrap();
        let response = result.expect("write reaches the log");
        if i % 2 == 0 {
            assert!(response.is_ok(), "write {i}: {response:?}");
        } else {
            let err = response.expect_err("deleting an unknown class is refused");
            assert!(err.to_string().contains(&format!("\"{name}\"")), "write {i}: {err}");
        }
    }
    let leader_node = nodes.iter().find(|n| n.id == leader).unwrap();
    let m = leader_node.replica.metrics();
    // Fewer entries than writes: concurrent writes shared entries.
    assert!(m.last_log_index.unwrap() < 300, "300 concurrent writes took {:?} log entries", m.last_log_index);
    // The write counters agree: the followers forwarded their writes, the leader proposed
    // all 300 in fewer batches, and flushed its log fewer times than it took writes.
    let counts = leader_node.replica.write_counts();
    let followers: Vec<_> = nodes.iter().filter(|n| n.id != leader).map(|n| n.replica.write_counts()).collect();
    let forwarded: u64 = followers.iter().map(|c| c.writes_forwarded).sum();
    let calls: u64 = followers.iter().map(|c| c.forward_calls).sum();
    assert_eq!(forwarded, 200, "every write sent to a follower is forwarded");
    // Writes that waited together on a follower went to the leader in one call.
    assert!(calls < forwarded / 2, "200 forwarded writes took {calls} calls");
    assert_eq!(counts.writes_forwarded, 0);
    assert_eq!((counts.writes_queued, counts.commands_proposed), (300, 300), "{counts:?}");
    assert!(counts.batches_proposed < 300 && counts.log_flushes < 300, "{counts:?}");
    assert_eq!(counts.batches_in_flight, 0, "{counts:?}");
    for n in nodes {
        n.stop().await;
    }
}

/// A replica with a peer port of its own is added by both its addresses (`API/PEER`): raft
/// reaches it at the peer address, a replica that does not lead sends clients to its API
/// address, writes are forwarded to it at the peer address, and a member's address in
/// either place is refused to another replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_with_a_peer_port_is_reached_there_and_redirects_name_its_api_address() {
    use baton_raft::{Addrs, ReplicaConfig};
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), 3, settings()).await;
    let leader = leader_of(&nodes).await;
    let leading = &nodes.iter().find(|n| n.id == leader).unwrap().replica;

    // Replica 4 serves raft on its peer listener; nothing serves its API address here, so a
    // replica that dialed it for raft would never reach it.
    let (peer_listener, peer) = listener().await;
    let api = "127.0.0.1:9".to_string();
    let addrs = Addrs { api: api.clone(), peer: peer.clone() };
    let mut config = ReplicaConfig::new(4, CLUSTER, addrs.to_member(), root.path().join("r4"));
    config.settings = settings();
    let fourth = baton_raft::Replica::open(config).await.unwrap();
    let serving = fourth.clone();
    tokio::spawn(async move { serving.run(peer_listener, std::future::pending()).await.unwrap() });

    leading.add_replica(4, &addrs.to_member()).await.expect("replica 4 joins at its peer address");
    assert_eq!(leading.metrics().members[&4], addrs);
    let e = leading.add_replica(5, &format!("127.0.0.1:8/{peer}")).await.unwrap_err();
    assert!(e.to_string().contains(&peer) && e.to_string().contains("replica 4"), "{e}");

    // Replica 4 leads: the others forward writes to its peer address, and redirect to its
    // API address.
    leading.transfer_leader(Some(4)).await.expect("leadership goes to replica 4");
    wait_for("replica 4 leads", || (fourth.metrics().role == Role::Leader).then_some(())).await;
    let follower = &nodes[0].replica;
    wait_for("replica 1 follows replica 4", || (follower.metrics().leader_id == Some(4)).then_some(())).await;
    follower.write(put("through-4")).await.expect("forwarded to replica 4").expect("applied");
    assert!(fourth.read_local(|s| has(s, "through-4")));
    match follower.write_on_leader(put("redirected")).await {
        Err(WriteError::NotLeader { leader_id: 4, leader_addr }) => assert_eq!(leader_addr, api),
        other => panic!("expected a redirect to replica 4's API address, got {other:?}"),
    }
    let m = follower.metrics();
    assert_eq!((m.leader_addr.as_deref(), m.leader_peer_addr.as_deref()), (Some(api.as_str()), Some(peer.as_str())));
}
