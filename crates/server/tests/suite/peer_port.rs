//! The raft transport on a peer port of its own (`baton server --peer-listen`), with mutual
//! TLS: only replica certificates reach it there, the API port serves no raft, a cluster of
//! such replicas elects and commits, and a replica that does not lead sends clients and
//! agents to the leader's API address, never to its peer address.

use crate::test_ca;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton_model::command::{Command, Op};
use baton_proto::make::gpu_queue;
use baton_proto::tls::{REPLICA_HOST, Transport};
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_proto::v1::{AttachRequest, Empty, IdentifyRequest, NodeInfo, RaftRequest};
use baton_raft::{Addrs, ReplicaConfig};
use baton_server::{Listeners, ServerConfig, ServerSettings};
use test_ca::Ca;
use tonic::Code;
use tonic::transport::Channel;

/// Replicas serving with mutual TLS, each with its API and its peer port.
struct Split {
    addrs: Vec<Addrs>,
    ca: Ca,
    dir: tempfile::TempDir,
}

impl Split {
    async fn start(n: u64) -> Split {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("test CA");
        let mut listeners = Vec::new();
        for _ in 0..n {
            let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let peer = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listeners.push((api, peer));
        }
        let addrs: Vec<Addrs> = listeners
            .iter()
            .map(|(a, p)| Addrs { api: a.local_addr().unwrap().to_string(), peer: p.local_addr().unwrap().to_string() })
            .collect();
        let members: BTreeMap<u64, String> =
            addrs.iter().enumerate().map(|(i, a)| (i as u64 + 1, a.to_member())).collect();
        for (i, (api, peer)) in listeners.into_iter().enumerate() {
            let id = i as u64 + 1;
            let config = ServerConfig {
                replica: ReplicaConfig::new(id, "split", addrs[i].to_member(), dir.path().join(format!("r{id}"))),
                bootstrap: (id == 1).then(|| members.clone()),
                // Tokens are tested in auth.rs; these tests check the transport alone.
                settings: ServerSettings { auth: baton_server::auth::AuthMode::None, ..ServerSettings::default() },
                scheduler: None,
                transport: ca.transport(dir.path(), "replica", &id.to_string()),
            };
            let listeners = Listeners { api, peer: Some(peer), metrics: None, metrics_plain: None };
            tokio::spawn(async move { baton_server::run_on(config, listeners, std::future::pending()).await.unwrap() });
        }
        Split { addrs, ca, dir }
    }

    fn transport(&self, role: &str, name: &str) -> Transport {
        self.ca.transport(self.dir.path(), role, name)
    }

    async fn channel(&self, addr: &str, role: &str, name: &str) -> Channel {
        self.transport(role, name).endpoint(addr, REPLICA_HOST).unwrap().connect().await.unwrap()
    }

    async fn api(&self, i: usize) -> BatonClient<Channel> {
        BatonClient::new(self.channel(&self.addrs[i].api, "client", "admin").await)
    }

    /// The index of the leader, once every replica agrees on it.
    async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut seen = Vec::new();
            for i in 0..self.addrs.len() {
                if let Ok(info) = self.api(i).await.cluster_info(Empty {}).await {
                    seen.push(info.into_inner().leader_id);
                }
            }
            if seen.len() == self.addrs.len() && seen[0] != 0 && seen.iter().all(|l| *l == seen[0]) {
                return seen[0] as usize - 1;
            }
            assert!(Instant::now() < deadline, "no leader all replicas agree on within 30 s: {seen:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn queues(&self, i: usize) -> Vec<String> {
        let r = self.api(i).await.list_queues(Empty {}).await.unwrap().into_inner();
        r.queues.into_iter().filter_map(|q| q.queue.map(|q| q.name)).collect()
    }
}

/// A forwarded write as replica 2 would send it to replica `to`, creating queue `forged`.
fn forged_write(to: u64) -> RaftRequest {
    let spec = baton_proto::convert::queue_from_proto(&gpu_queue("forged", 8)).unwrap();
    let cmd = Command { now_ms: 1, op: Op::PutQueue(spec) };
    RaftRequest {
        cluster_id: "split".into(),
        from_node_id: 2,
        to_node_id: to,
        payload: baton_raft::codec::encode(&cmd).unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_on_peer_ports_elects_commits_and_redirects_to_api_addresses() {
    let s = Split::start(3).await;
    let leader = s.leader().await;
    let follower = (leader + 1) % 3;
    // A write through a follower is forwarded to the leader over the peer ports and
    // committed; every replica reads it.
    s.api(follower).await.put_queue(gpu_queue("q", 8)).await.unwrap();
    for i in 0..3 {
        assert_eq!(s.queues(i).await, vec!["q".to_string()], "replica {}", i + 1);
    }
    // `cluster info` gives the leader's API address and each replica's two addresses.
    let info = s.api(follower).await.cluster_info(Empty {}).await.unwrap().into_inner();
    assert_eq!(info.leader_addr, s.addrs[leader].api);
    for r in &info.replicas {
        let at = &s.addrs[r.id as usize - 1];
        assert_eq!((&r.addr, &r.peer_addr), (&at.api, &at.peer), "{r:?}");
    }
    // An agent at a follower is sent to the leader's API address.
    let ch = s.channel(&s.addrs[follower].api, "agent", "n1").await;
    let node = NodeInfo { name: "n1".into(), pool: "default".into(), ..Default::default() };
    let e = AgentGatewayClient::new(ch).attach(AttachRequest { node: Some(node), term_seen: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    let hint = e.metadata().get(baton_proto::LEADER_METADATA).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(hint, s.addrs[leader].api, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_peer_port_takes_only_replica_certificates_and_the_api_port_serves_no_raft() {
    let s = Split::start(1).await;
    s.leader().await;
    s.api(0).await.put_queue(gpu_queue("q", 8)).await.unwrap();
    let peer = s.addrs[0].peer.clone();
    for (role, name) in [("client", "mallory"), ("agent", "n1")] {
        let mut raft = RaftTransportClient::new(s.channel(&peer, role, name).await);
        let e = raft.forward_write(forged_write(1)).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e}");
        assert!(e.message().contains("takes only replica certificates") && e.message().contains(role), "{e}");
        let e = raft.identify(IdentifyRequest::default()).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e}");
    }
    assert_eq!(s.queues(0).await, vec!["q".to_string()], "a refused forwarded write was applied");
    // The API port does not serve raft, even to a replica's certificate.
    let mut raft = RaftTransportClient::new(s.channel(&s.addrs[0].api, "replica", "2").await);
    let e = raft.forward_write(forged_write(1)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e}");
    let e = raft.identify(IdentifyRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e}");
    assert_eq!(s.queues(0).await, vec!["q".to_string()]);
    // Nor does the peer port serve the client API or the gateway.
    let e = BatonClient::new(s.channel(&peer, "client", "admin").await).list_queues(Empty {}).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e}");
    // A replica's certificate on the peer port gets through: the refusals above are the
    // certificate's and the port's doing.
    let mut raft = RaftTransportClient::new(s.channel(&peer, "replica", "2").await);
    assert_eq!(raft.identify(IdentifyRequest::default()).await.unwrap().into_inner().node_id, 1);
    raft.forward_write(forged_write(1)).await.unwrap();
    assert_eq!(s.queues(0).await, vec!["forged".to_string(), "q".to_string()]);
}

/// One replica's certificate cannot speak as another replica: a request whose
/// `from_node_id` is not the id its certificate names is refused before anything in it is
/// decoded (before, `from_node_id` was taken on the sender's word).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_certificate_cannot_speak_as_another_replica() {
    let s = Split::start(1).await;
    s.leader().await;
    let peer = s.addrs[0].peer.clone();
    let mut raft = RaftTransportClient::new(s.channel(&peer, "replica", "3").await);
    let e = raft.forward_write(forged_write(1)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    assert!(e.message().contains("replica 2") && e.message().contains("replica 3's"), "{e}");
    assert!(s.queues(0).await.is_empty(), "the forged write was applied");
}
