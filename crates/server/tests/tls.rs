//! Mutual TLS at a replica's edge: each service refuses a caller without a certificate, with
//! a certificate of another CA, or with the wrong role or node, and nothing changes.
//! Certificates are made here with rcgen the way `baton tls` makes them (OU = role,
//! CN = name, the role's DNS name).

#[path = "../../proto/testing/test_ca.rs"]
mod test_ca;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton_model::command::{Command, Op};
use baton_proto::make::gpu_queue;
use baton_proto::tls::{REPLICA_HOST, Transport};
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_proto::v1::{AttachRequest, Empty, IdentifyRequest, NodeInfo, RaftRequest, ReportRequest};
use baton_raft::ReplicaConfig;
use baton_server::{ServerConfig, ServerSettings};
use test_ca::Ca;
use tonic::Code;
use tonic::transport::Channel;

struct Setup {
    addr: String,
    ca: Ca,
    dir: tempfile::TempDir,
}

impl Setup {
    /// One replica serving with mutual TLS, leading.
    async fn start() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("test CA");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let transport = ca.transport(dir.path(), "replica", "1");
        let config = ServerConfig {
            replica: ReplicaConfig::new(1, "tls", addr.clone(), dir.path().join("r1")),
            bootstrap: Some(BTreeMap::from([(1, addr.clone())])),
            // Tokens are tested in auth.rs; these tests check the transport alone.
            settings: ServerSettings { auth: baton_server::auth::AuthMode::None, ..ServerSettings::default() },
            scheduler: None,
            transport,
        };
        tokio::spawn(async move { baton_server::run(config, listener, std::future::pending()).await.unwrap() });
        let s = Setup { addr, ca, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut c = s.api("client", "admin").await;
            if c.put_queue(gpu_queue("q", 8)).await.is_ok() {
                return s;
            }
            assert!(Instant::now() < deadline, "the replica did not start leading");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn transport(&self, role: &str, name: &str) -> Transport {
        self.ca.transport(self.dir.path(), role, name)
    }

    async fn channel(&self, t: &Transport) -> Result<Channel, tonic::transport::Error> {
        t.endpoint(&self.addr, REPLICA_HOST).unwrap().connect().await
    }

    async fn api(&self, role: &str, name: &str) -> BatonClient<Channel> {
        BatonClient::new(self.channel(&self.transport(role, name)).await.unwrap())
    }

    /// A TLS channel that verifies the replica but presents no certificate.
    async fn anonymous(&self) -> Channel {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(self.ca.pem()))
            .domain_name(REPLICA_HOST);
        let ep = tonic::transport::Endpoint::from_shared(format!("https://{}", self.addr)).unwrap();
        ep.tls_config(tls).unwrap().connect().await.unwrap()
    }

    async fn queues(&self) -> Vec<String> {
        let mut c = self.api("client", "reader").await;
        let r = c.list_queues(Empty {}).await.unwrap().into_inner();
        r.queues.into_iter().filter_map(|q| q.queue.map(|q| q.name)).collect()
    }

    async fn nodes(&self) -> Vec<String> {
        let mut c = self.api("client", "reader").await;
        c.list_nodes(Empty {}).await.unwrap().into_inner().nodes.into_iter().map(|n| n.name).collect()
    }
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        pool: "default".into(),
        resources: [("gpu".to_string(), 8)].into(),
        ..Default::default()
    }
}

/// A forwarded write as a replica would send it, creating queue `forged`.
fn forged_write() -> RaftRequest {
    let spec = baton_proto::convert::queue_from_proto(&gpu_queue("forged", 8)).unwrap();
    let cmd = Command { now_ms: 1, op: Op::PutQueue(spec) };
    RaftRequest {
        cluster_id: "tls".into(),
        from_node_id: 2,
        to_node_id: 1,
        payload: baton_raft::codec::encode(&cmd).unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_reaches_the_api_over_tls() {
    let s = Setup::start().await;
    let mut c = s.api("client", "alice").await;
    let info = c.cluster_info(Empty {}).await.unwrap().into_inner();
    assert!(!info.insecure, "a TLS replica says it is insecure");
    assert_eq!(s.queues().await, vec!["q".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_certificate_is_unauthenticated_on_every_service_and_changes_nothing() {
    let s = Setup::start().await;
    let ch = s.anonymous().await;
    let e = BatonClient::new(ch.clone()).put_queue(gpu_queue("anon", 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("no client certificate"), "{e}");
    let e = AgentGatewayClient::new(ch.clone())
        .attach(AttachRequest { node: Some(node("anon")), term_seen: 0 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    let e = RaftTransportClient::new(ch).forward_write(forged_write()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert_eq!(s.queues().await, vec!["q".to_string()]);
    assert!(s.nodes().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_another_ca_cannot_connect() {
    let s = Setup::start().await;
    let other = Ca::new("another cluster's CA");
    let t = other.transport(s.dir.path(), "client", "mallory");
    assert!(s.channel(&t).await.is_err(), "a certificate of another CA completed the handshake");
    // Nor does an agent of another CA get to register its node.
    let t = other.transport(s.dir.path(), "agent", "n9");
    assert!(s.channel(&t).await.is_err());
    assert_eq!(s.queues().await, vec!["q".to_string()]);
    assert!(s.nodes().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_certificate_speaks_only_for_its_own_node() {
    let s = Setup::start().await;
    let ch = s.channel(&s.transport("agent", "n1")).await.unwrap();
    let mut gw = AgentGatewayClient::new(ch);
    let e = gw.attach(AttachRequest { node: Some(node("n2")), term_seen: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    assert!(e.message().contains("\"n2\"") && e.message().contains("agent \"n1\""), "{e}");
    assert!(s.nodes().await.is_empty(), "the refused attach registered a node");
    // Its own node is fine; then reporting as another node is refused.
    let stream = gw.attach(AttachRequest { node: Some(node("n1")), term_seen: 0 }).await.unwrap();
    assert_eq!(s.nodes().await, vec!["n1".to_string()]);
    let e = gw.report(ReportRequest { node: "n2".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    gw.report(ReportRequest { node: "n1".into(), ..Default::default() }).await.unwrap();
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_agents_reach_the_gateway() {
    let s = Setup::start().await;
    for (role, name) in [("client", "n1"), ("replica", "2")] {
        let ch = s.channel(&s.transport(role, name)).await.unwrap();
        let e = AgentGatewayClient::new(ch)
            .attach(AttachRequest { node: Some(node("n1")), term_seen: 0 })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e}");
        assert!(e.message().contains("takes only agent certificates"), "{e}");
    }
    assert!(s.nodes().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_rpcs_need_a_replica_certificate() {
    let s = Setup::start().await;
    for (role, name) in [("client", "mallory"), ("agent", "n1")] {
        let ch = s.channel(&s.transport(role, name)).await.unwrap();
        let mut raft = RaftTransportClient::new(ch);
        let e = raft.forward_write(forged_write()).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e}");
        assert!(e.message().contains("takes only replica certificates"), "{e}");
        let e = raft.identify(IdentifyRequest::default()).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e}");
    }
    assert_eq!(s.queues().await, vec!["q".to_string()], "a forged forwarded write was applied");
    // The same forwarded write from a replica's certificate goes through: the refusals
    // above are the certificate's doing.
    let ch = s.channel(&s.transport("replica", "2")).await.unwrap();
    RaftTransportClient::new(ch).forward_write(forged_write()).await.unwrap();
    assert_eq!(s.queues().await, vec!["forged".to_string(), "q".to_string()]);
}

/// CA rotation as docs/security.md describes it: while every `ca.pem` holds the old and the
/// new CA, a replica with an old-CA certificate and a client with a new-CA one reach each
/// other; a client that trusts only the new CA does not yet reach that replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_bundle_lets_old_and_new_certificates_meet_during_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    let bundle = format!("{}{}", old.pem(), new.pem());
    let with_bundle = |d: PathBuf| {
        std::fs::write(d.join("ca.pem"), &bundle).unwrap();
        Transport::load(&d).unwrap()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = ServerConfig {
        replica: ReplicaConfig::new(1, "tls", addr.clone(), dir.path().join("r1")),
        bootstrap: Some(BTreeMap::from([(1, addr.clone())])),
        settings: ServerSettings { auth: baton_server::auth::AuthMode::None, ..ServerSettings::default() },
        scheduler: None,
        transport: with_bundle(old.issue(dir.path(), "replica", "1")),
    };
    tokio::spawn(async move { baton_server::run(config, listener, std::future::pending()).await.unwrap() });
    let client = with_bundle(new.issue(dir.path(), "client", "alice"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(ch) = client.endpoint(&addr, REPLICA_HOST).unwrap().connect().await
            && BatonClient::new(ch).put_queue(gpu_queue("q", 8)).await.is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "a new-CA client never reached an old-CA replica over the bundle");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let new_only = Transport::load(&new.issue(dir.path(), "client", "bob")).unwrap();
    assert!(new_only.endpoint(&addr, REPLICA_HOST).unwrap().connect().await.is_err());
}
