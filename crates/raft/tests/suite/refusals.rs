//! Bad input is refused clearly: damaged data directories, replicas of another cluster,
//! oversized messages and commands.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use baton_model::plan::{Decision, Plan};
use baton_model::{Command, Op};
use baton_proto::v1::RaftRequest;
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_raft::error::{MembershipError, OpenError, WriteError};
use baton_raft::replica::{Replica, ReplicaConfig};
use baton_raft::settings::RaftSettings;
use baton_raft::store::{KvStore, SledKv, Space, Write};
use common::*;

/// A one-replica cluster: elects itself at once.
async fn single(dir: &Path, cluster: &str, settings: RaftSettings) -> Node {
    let (l, _) = listener().await;
    let node = Node::start(1, cluster, dir, l, settings).await;
    node.replica.bootstrap(BTreeMap::from([(1, node.addr.clone())])).await.unwrap();
    wait_for("the single replica to lead", || (node.replica.metrics().leader_id == Some(1)).then_some(())).await;
    node
}

async fn reopen(dir: &Path, cluster: &str) -> Result<Replica, OpenError> {
    Replica::open(ReplicaConfig::new(1, cluster, "127.0.0.1:1", dir)).await
}

/// A single replica with a few committed writes, stopped; returns its data directory.
async fn stopped_replica_with_data(root: &Path) -> std::path::PathBuf {
    let dir = root.join("r1");
    let node = single(&dir, CLUSTER, settings()).await;
    for i in 0..5 {
        node.replica.write(put(&format!("w{i}"))).await.unwrap().unwrap();
    }
    node.stop().await;
    dir
}

#[tokio::test]
async fn corrupted_identity_file_is_named() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let file = dir.join("cluster.id");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, &text[..text.len() / 2]).unwrap();
    let err = reopen(&dir, CLUSTER).await.err().expect("must refuse").to_string();
    assert!(err.contains(&file.display().to_string()), "{err}");
}

#[tokio::test]
async fn corrupted_log_record_is_named() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let sled_dir = dir.join("raft.sled");
    {
        // Flip one bit inside the value of log entry 3, as bit rot would.
        let kv = SledKv::open(&sled_dir).unwrap();
        let mut rec = kv.get(Space::Log, 3).unwrap().expect("entry 3 exists");
        let last = rec.len() - 1;
        rec[last] ^= 0x10;
        kv.write(&[Write::Put(Space::Log, 3, rec)]).unwrap();
        kv.flush().unwrap();
    }
    let err = reopen(&dir, CLUSTER).await.err().expect("must refuse").to_string();
    assert!(err.contains(&sled_dir.display().to_string()), "{err}");
    assert!(err.contains("log entry 3") && err.contains("checksum"), "{err}");
}

#[tokio::test]
async fn missing_log_entries_are_detected() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let sled_dir = dir.join("raft.sled");
    {
        // Entries lost from the middle (a truncated or damaged database).
        let kv = SledKv::open(&sled_dir).unwrap();
        kv.write(&[Write::Remove(Space::Log, 2..4)]).unwrap();
        kv.flush().unwrap();
    }
    let err = reopen(&dir, CLUSTER).await.err().expect("must refuse").to_string();
    assert!(err.contains(&sled_dir.display().to_string()), "{err}");
    assert!(err.contains("entries 2 to 3 are missing"), "{err}");
}

#[tokio::test]
async fn lost_log_tail_is_detected() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let sled_dir = dir.join("raft.sled");
    {
        // The committed tail is gone: acknowledged writes would silently vanish.
        let kv = SledKv::open(&sled_dir).unwrap();
        kv.write(&[Write::Remove(Space::Log, 4..u64::MAX)]).unwrap();
        kv.flush().unwrap();
    }
    let err = reopen(&dir, CLUSTER).await.err().expect("must refuse").to_string();
    assert!(err.contains(&sled_dir.display().to_string()), "{err}");
    assert!(err.contains("acknowledged entries are missing"), "{err}");
}

#[tokio::test]
async fn deleted_database_is_named() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    std::fs::remove_dir_all(dir.join("raft.sled")).unwrap();
    let err = reopen(&dir, CLUSTER).await.err().expect("must refuse");
    assert!(matches!(err, OpenError::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("raft.sled"), "{err}");
}

#[tokio::test]
async fn data_directory_of_another_cluster_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let err = reopen(&dir, "another-cluster").await.err().expect("must refuse");
    let text = err.to_string();
    assert!(matches!(err, OpenError::ClusterMismatch { .. }), "{text}");
    assert!(text.contains("cluster.id") && text.contains("another-cluster"), "{text}");
}

#[tokio::test]
async fn replica_of_another_cluster_cannot_join() {
    let root = tempfile::tempdir().unwrap();
    let ours = single(&root.path().join("a"), CLUSTER, settings()).await;
    let (l, _) = listener().await;
    let foreign = Node::start(2, "other-cluster", &root.path().join("b"), l, settings()).await;

    let err = ours.replica.add_learner(2, &foreign.addr).await.unwrap_err();
    assert!(matches!(err, MembershipError::ForeignCluster { .. }), "{err}");
    assert!(err.to_string().contains("other-cluster"), "{err}");
    assert!(!ours.replica.metrics().members.contains_key(&2));

    // And a raft RPC carrying another cluster's id is refused before it is decoded.
    let mut client = RaftTransportClient::connect(format!("http://{}", ours.addr)).await.unwrap();
    let status = client
        .vote(RaftRequest {
            cluster_id: "other-cluster".into(),
            from_node_id: 2,
            to_node_id: 1,
            payload: vec![1, 2, 3],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(status.message().contains(CLUSTER) && status.message().contains("other-cluster"), "{status:?}");

    foreign.stop().await;
    ours.stop().await;
}

#[tokio::test]
async fn oversized_message_is_refused_and_the_replica_keeps_serving() {
    let root = tempfile::tempdir().unwrap();
    let s = RaftSettings {
        max_message_bytes: 1 << 20,
        max_command_bytes: 512 << 10,
        max_batch_bytes: 512 << 10,
        snapshot_chunk_bytes: 256 << 10,
        ..settings()
    };
    let node = single(&root.path().join("a"), CLUSTER, s).await;

    let mut client =
        RaftTransportClient::connect(format!("http://{}", node.addr)).await.unwrap().max_encoding_message_size(8 << 20);
    let status = client
        .append_entries(RaftRequest {
            cluster_id: CLUSTER.into(),
            from_node_id: 2,
            to_node_id: 1,
            payload: vec![0; 2 << 20],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");

    // A payload of the right size but not an openraft message is refused too.
    let status = client
        .append_entries(RaftRequest {
            cluster_id: CLUSTER.into(),
            from_node_id: 2,
            to_node_id: 1,
            payload: vec![0xff; 64],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");

    node.replica.write(put("still-alive")).await.unwrap().unwrap();
    node.stop().await;
}

#[tokio::test]
async fn oversized_command_is_refused_before_the_log() {
    let root = tempfile::tempdir().unwrap();
    let node = single(&root.path().join("a"), CLUSTER, settings()).await;
    let before = node.replica.metrics().last_log_index;
    let huge = Command {
        now_ms: 1,
        op: Op::ApplyPlan(Plan {
            based_on: 0,
            decisions: (0..10_000).map(|job| Decision::Wait { job, reason: "x".repeat(500) }).collect(),
        }),
    };
    let err = node.replica.write(huge).await.unwrap_err();
    assert!(matches!(err, WriteError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("max_command_bytes"), "{err}");
    assert_eq!(node.replica.metrics().last_log_index, before);
    node.stop().await;
}

/// Sends `cmd` to `addr` as another replica's forwarded write would, and decodes the answer.
async fn forward(addr: &str, cmd: &Command) -> Result<baton_model::Response, WriteError> {
    let mut client = RaftTransportClient::connect(format!("http://{addr}")).await.unwrap();
    let reply = client
        .forward_write(RaftRequest {
            cluster_id: CLUSTER.into(),
            from_node_id: 2,
            to_node_id: 1,
            payload: baton_raft::codec::encode(cmd).unwrap(),
        })
        .await
        .unwrap();
    baton_raft::codec::decode(&reply.into_inner().payload).unwrap()
}

#[tokio::test]
async fn a_forwarded_tick_is_refused_and_the_clock_stays() {
    let root = tempfile::tempdir().unwrap();
    let node = single(&root.path().join("a"), CLUSTER, settings()).await;
    node.replica.write(put("before")).await.unwrap().unwrap();
    let before = node.replica.read_local(|s| s.now_ms());
    let index = node.replica.metrics().last_log_index;

    let report = Op::Report { node: baton_model::name::Name::lit("n1"), observations: Vec::new() };
    let register = Op::RegisterNode(baton_model::fixture::gpu_node("n1", 64));
    for op in [Op::Tick, Op::ApplyPlan(Plan { based_on: 0, decisions: Vec::new() }), report, register] {
        let name = op.name();
        let err = forward(&node.addr, &Command { now_ms: 4_000_000_000_000, op }).await.unwrap_err();
        assert!(matches!(err, WriteError::LeaderOnly { .. }), "{name}: {err}");
        assert!(err.to_string().contains(name), "{err}");
    }
    assert_eq!(node.replica.read_local(|s| s.now_ms()), before);
    assert_eq!(node.replica.metrics().last_log_index, index, "nothing reached the log");
    node.stop().await;
}

/// A follower does not forward an operation only the leader issues: the leader would refuse
/// it (above), so the follower says at once who leads. A deposed leader's loops (declaring
/// silent nodes lost, registering attaches) met that refusal one forwarded write at a
/// time, thousands of them, at the new leader (a 50,000-node run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_refuses_a_leader_only_write_itself_naming_the_leader() {
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), 3, settings()).await;
    let leader = leader_of(&nodes).await;
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    let before = follower.replica.write_counts().writes_forwarded;
    let lost =
        Op::SetNodeStatus { node: baton_model::name::Name::lit("n1"), status: baton_model::node::NodeStatus::Lost };
    let register = Op::RegisterNode(baton_model::fixture::gpu_node("n1", 8));
    for op in [Op::Tick, lost, register] {
        let name = op.name();
        let err = follower.replica.write(Command { now_ms: 1, op }).await.unwrap_err();
        assert!(matches!(err, WriteError::NotLeader { leader_id, .. } if leader_id == leader), "{name}: {err}");
    }
    assert_eq!(follower.replica.write_counts().writes_forwarded, before, "nothing was forwarded");
    // Any other write is still forwarded.
    follower.replica.write(put("forwarded")).await.unwrap().unwrap();
    assert_eq!(follower.replica.write_counts().writes_forwarded, before + 1);
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test]
async fn a_forwarded_write_carries_the_leaders_time_not_the_senders() {
    let root = tempfile::tempdir().unwrap();
    let node = single(&root.path().join("a"), CLUSTER, settings()).await;
    // Year 2096: accepted by the model's bound, but no clock here reads it.
    let forged = Command { now_ms: 4_000_000_000_000, ..put("forged") };
    forward(&node.addr, &forged).await.unwrap().unwrap();
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let now = node.replica.read_local(|s| s.now_ms());
    assert!(now <= wall, "the state's clock {now} was taken from the sender, not the leader ({wall})");
    assert!(node.replica.read_local(|s| has(s, "forged")), "the write itself is applied");
    node.stop().await;
}

/// Several writes forwarded in one call are checked one by one as a single forwarded write
/// is: a leader-only operation among them is refused, the others are applied with the
/// leader's time, and each answer comes back in its place.
#[tokio::test]
async fn writes_forwarded_together_are_each_checked_and_answered_in_order() {
    let root = tempfile::tempdir().unwrap();
    let node = single(&root.path().join("a"), CLUSTER, settings()).await;
    let forged = Command { now_ms: 4_000_000_000_000, ..put("together-1") };
    let cmds = vec![forged, Command { now_ms: 4_000_000_000_000, op: Op::Tick }, put("together-2")];
    let mut client = RaftTransportClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let reply = client
        .forward_writes(RaftRequest {
            cluster_id: CLUSTER.into(),
            from_node_id: 2,
            to_node_id: 1,
            payload: baton_raft::codec::encode(&cmds).unwrap(),
        })
        .await
        .unwrap();
    let answers: Vec<Result<baton_model::Response, WriteError>> =
        baton_raft::codec::decode(&reply.into_inner().payload).unwrap();
    assert_eq!(answers.len(), 3);
    assert!(matches!(answers[0], Ok(Ok(_))), "{:?}", answers[0]);
    assert!(matches!(answers[1], Err(WriteError::LeaderOnly { .. })), "{:?}", answers[1]);
    assert!(matches!(answers[2], Ok(Ok(_))), "{:?}", answers[2]);
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(node.replica.read_local(|s| s.now_ms()) <= wall, "the sender's clock reached the state");
    assert!(node.replica.read_local(|s| has(s, "together-1") && has(s, "together-2")));
    // Answered, they no longer count as waiting (the leader rests for those that do).
    assert!(!node.replica.forwarded_writes_wait(), "answered forwarded writes still count as waiting");
    node.stop().await;
}
