//! Writes a follower forwards to the leader in one `ForwardWrites` call are each answered
//! exactly once, and applied at most once, when the call does not go as planned: a leader
//! of an older build that lacks the call (UNIMPLEMENTED), a call whose answer is lost after
//! the leader applied the writes, and a leader that refuses the call as a whole (more
//! writes than its `max_batch_commands`).
//!
//! A follower's calls to the others go through a proxy of the test's own, which passes
//! every call on except, depending on the test, `ForwardWrites`.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_model::{Command, Op};
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_proto::v1::raft_transport_server::{RaftTransport, RaftTransportServer};
use baton_proto::v1::{IdentifyReply, IdentifyRequest, RaftReply, RaftRequest};
use baton_raft::error::WriteError;
use baton_raft::net::Dialer;
use baton_raft::net::dialer::endpoint;
use baton_raft::replica::{Replica, ReplicaConfig};
use baton_raft::settings::RaftSettings;
use common::*;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// What the proxy does with a `ForwardWrites` call.
#[derive(Clone, Copy)]
enum Forwards {
    /// Passes it on.
    Pass,
    /// Answers UNIMPLEMENTED, as a build without the call does.
    Unknown,
    /// Passes it on, then drops the leader's answer and fails the call, as a connection
    /// reset after the leader applied the writes would.
    LoseAnswer,
}

struct Proxy {
    to: RaftTransportClient<Channel>,
    forwards: Forwards,
}

type Reply = Result<Response<RaftReply>, Status>;

#[tonic::async_trait]
impl RaftTransport for Proxy {
    async fn append_entries(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().append_entries(r.into_inner()).await
    }
    async fn install_snapshot(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().install_snapshot(r.into_inner()).await
    }
    async fn vote(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().vote(r.into_inner()).await
    }
    async fn forward_write(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().forward_write(r.into_inner()).await
    }
    async fn forward_writes(&self, r: Request<RaftRequest>) -> Reply {
        match self.forwards {
            Forwards::Pass => self.to.clone().forward_writes(r.into_inner()).await,
            Forwards::Unknown => Err(Status::unimplemented("ForwardWrites is not known here")),
            Forwards::LoseAnswer => {
                self.to.clone().forward_writes(r.into_inner()).await?;
                Err(Status::unavailable("connection reset after the leader answered"))
            }
        }
    }
    async fn read_index(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().read_index(r.into_inner()).await
    }
    async fn pre_vote(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().pre_vote(r.into_inner()).await
    }
    async fn identify(&self, r: Request<IdentifyRequest>) -> Result<Response<IdentifyReply>, Status> {
        self.to.clone().identify(r.into_inner()).await
    }
    async fn membership(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().membership(r.into_inner()).await
    }
    async fn transfer_note(&self, r: Request<RaftRequest>) -> Reply {
        self.to.clone().transfer_note(r.into_inner()).await
    }
}

/// Serves a proxy to `to` on a fresh loopback port; returns its address.
async fn proxy(to: &str, forwards: Forwards) -> String {
    let (l, addr) = listener().await;
    let channel = endpoint(to, Duration::from_secs(1)).unwrap().connect_lazy();
    let service = RaftTransportServer::new(Proxy { to: RaftTransportClient::new(channel), forwards });
    let incoming = tonic::transport::server::TcpIncoming::from(l);
    tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
    addr
}

/// A three-replica cluster (with `settings`) and a fourth replica, a voter, whose calls to
/// the others go through proxies doing `forwards`.
struct Setup {
    nodes: Vec<Node>,
    fourth: Replica,
    /// Commands of kind PutClass replica 1 applied.
    puts_applied: Arc<AtomicU64>,
}

async fn setup(root: &std::path::Path, settings: RaftSettings, fourth: RaftSettings, forwards: Forwards) -> Setup {
    let nodes = cluster(root, 3, settings).await;
    let puts_applied = Arc::new(AtomicU64::new(0));
    let counter = puts_applied.clone();
    nodes[0].replica.observe_applies(Arc::new(move |kind, _| {
        if kind == "PutClass" {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }));
    let mut via = BTreeMap::new();
    for n in &nodes {
        via.insert(n.addr.clone(), proxy(&n.addr, forwards).await);
    }
    let dialer = Dialer::custom(move |addr| {
        let to = via.get(addr).cloned().unwrap_or_else(|| addr.to_string());
        Ok(endpoint(&to, Duration::from_secs(1))?.connect_lazy())
    });
    let (l, addr) = listener().await;
    let mut config = ReplicaConfig::new(4, CLUSTER, addr.clone(), root.join("r4"));
    config.settings = fourth;
    let replica = Replica::open_with(config, dialer).await.expect("open replica 4");
    let serving = replica.clone();
    tokio::spawn(async move { serving.run(l, std::future::pending()).await });
    let leader = leader_of(&nodes).await;
    let lead = nodes.iter().find(|n| n.id == leader).unwrap().replica.clone();
    lead.add_replica(4, &addr).await.expect("replica 4 joins");
    wait_for("replica 4 to know the leader", || (replica.metrics().leader_id == Some(leader)).then_some(())).await;
    Setup { nodes, fourth: replica, puts_applied }
}

/// Sends `n` writes to replica 4 at once; returns each one's answer.
async fn write_through_fourth(s: &Setup, n: usize) -> Vec<Result<baton_model::Response, WriteError>> {
    let writes = (0..n).map(|i| {
        let r = s.fourth.clone();
        async move { r.write(put(&format!("w{i}"))).await }
    });
    futures::future::join_all(writes).await
}

/// How many writes replica 1 applied, once everything committed before now is applied there.
async fn puts_applied(s: &Setup) -> u64 {
    let leader = leader_of(&s.nodes).await;
    let lead = &s.nodes.iter().find(|n| n.id == leader).unwrap().replica;
    // Committed whatever the state machine says of it (its clock is ahead of this stamp).
    let _answer = lead.write(Command { now_ms: 1, op: Op::Tick }).await.unwrap();
    applied(&s.nodes[0].replica, lead.applied_index().unwrap()).await;
    s.puts_applied.load(Ordering::SeqCst)
}

async fn stop(s: Setup) {
    s.fourth.shutdown().await;
    for n in s.nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_forward_writes_gets_them_one_by_one_each_applied_once() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let s = setup(root.path(), settings(), settings(), Forwards::Unknown).await;
    let answers = write_through_fourth(&s, 40).await;
    for (i, a) in answers.iter().enumerate() {
        assert!(matches!(a, Ok(Ok(_))), "write {i}: {a:?}");
    }
    assert_eq!(puts_applied(&s).await, 40, "each write applied exactly once");
    let counts = s.fourth.write_counts();
    assert!(counts.forward_calls > 40, "the one-by-one fallback was taken: {counts:?}");
    stop(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_fails_each_write_once_and_none_is_sent_again() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let s = setup(root.path(), settings(), settings(), Forwards::LoseAnswer).await;
    let answers = write_through_fourth(&s, 40).await;
    for (i, a) in answers.iter().enumerate() {
        let said = format!("{a:?}");
        assert!(matches!(a, Err(WriteError::ForwardFailed { .. })), "write {i}: {said}");
    }
    assert_eq!(puts_applied(&s).await, 40, "applied by the leader once, never sent again");
    stop(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_the_leaders_batch_bound_is_sent_one_by_one() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    // The others take one command per call; replica 4 sends up to 4,096 in one, one call at
    // a time, so the writes that wait while a call is out go together in the next.
    let small = RaftSettings { max_batch_commands: 1, ..settings() };
    let big = RaftSettings { max_forwards_in_flight: 1, ..settings() };
    let s = setup(root.path(), small, big, Forwards::Pass).await;
    let answers = write_through_fourth(&s, 40).await;
    for (i, a) in answers.iter().enumerate() {
        assert!(matches!(a, Ok(Ok(_))), "write {i}: {a:?}");
    }
    assert_eq!(puts_applied(&s).await, 40, "each write applied exactly once");
    stop(s).await;
}
