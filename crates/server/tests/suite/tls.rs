//! Mutual TLS at a replica's edge: each service refuses a caller without a certificate, with
//! a certificate of another CA, or with the wrong role or node, and nothing changes.
//! Certificates are made here with rcgen the way `baton tls` makes them (OU = role,
//! CN = name, the role's DNS name).

use crate::test_ca;
use crate::web;

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
    /// `--metrics-listen` (mutual TLS) and `--metrics-plain-listen` on 0.0.0.0 (not loopback).
    metrics: String,
    plain: String,
    ca: Ca,
    dir: tempfile::TempDir,
    /// The replica's `--tls-dir` and its transport, which a test reloads as SIGHUP would.
    server_dir: PathBuf,
    server: Transport,
}

impl Setup {
    /// One replica serving with mutual TLS, leading.
    async fn start() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("test CA");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server_dir = ca.issue(dir.path(), "replica", "1");
        let transport = Transport::load(&server_dir).unwrap();
        let server = transport.clone();
        let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let metrics_addr = metrics.local_addr().unwrap().to_string();
        let plain_addr = format!("127.0.0.1:{}", plain.local_addr().unwrap().port());
        let config = ServerConfig {
            replica: ReplicaConfig::new(1, "tls", addr.clone(), dir.path().join("r1")),
            bootstrap: Some(BTreeMap::from([(1, addr.clone())])),
            // Tokens are tested in auth.rs; these tests check the transport alone.
            settings: ServerSettings { auth: baton_server::auth::AuthMode::None, ..ServerSettings::default() },
            scheduler: None,
            transport,
        };
        let listeners =
            baton_server::Listeners { api: listener, peer: None, metrics: Some(metrics), metrics_plain: Some(plain) };
        tokio::spawn(async move { baton_server::run_on(config, listeners, std::future::pending()).await.unwrap() });
        let s = Setup { addr, metrics: metrics_addr, plain: plain_addr, ca, dir, server_dir, server };
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

/// Issue 39: an agent declared its own shape, so a stolen agent certificate could re-attach
/// as a 64-GPU node of a protected pool and receive other teams' jobs. Now the node's pool,
/// rack and most of each resource are the operator's word: what its certificate fixes, and
/// without that, the pool and rack it was first registered with. Refusals say why; a node
/// may always declare less. (Before: every attach below was taken, and the node grew.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_move_its_node_or_make_it_larger_than_the_operator_said() {
    let s = Setup::start().await;
    let shaped = s.ca.issue_shaped(s.dir.path(), "n1", "-shaped", "baton-shape:pool=default;gpu=8");
    let mut gw = AgentGatewayClient::new(s.channel(&Transport::load(&shaped).unwrap()).await.unwrap());
    let with = |pool: &str, gpus: u64, rack: &str| NodeInfo {
        pool: pool.into(),
        rack: rack.into(),
        resources: [("gpu".to_string(), gpus)].into(),
        ..node("n1")
    };
    let attach = |info: NodeInfo| AttachRequest { node: Some(info), term_seen: 0 };
    let refused = |e: tonic::Status, words: &[&str]| {
        assert_eq!(e.code(), Code::PermissionDenied, "{e}");
        assert!(words.iter().all(|w| e.message().contains(w)), "{e}");
    };
    refused(gw.attach(attach(with("default", 64, ""))).await.unwrap_err(), &["64 of gpu", "at most 8"]);
    refused(gw.attach(attach(with("protected", 8, ""))).await.unwrap_err(), &["\"protected\"", "fixes pool"]);
    assert!(s.nodes().await.is_empty(), "a refused attach registered the node");
    let first = gw.attach(attach(with("default", 8, ""))).await.unwrap();
    assert_eq!(s.nodes().await, vec!["n1".to_string()]);
    drop(first);
    let fewer = gw.attach(attach(with("default", 7, ""))).await.expect("a node may declare less");
    drop(fewer);

    // A certificate that fixes nothing: the node stays in the pool and rack it is registered
    // with, whatever it declares.
    let plain = s.ca.issue_into(s.dir.path(), "agent", "n1", "-plain");
    let mut gw = AgentGatewayClient::new(s.channel(&Transport::load(&plain).unwrap()).await.unwrap());
    refused(gw.attach(attach(with("protected", 8, ""))).await.unwrap_err(), &["registered with pool", "--pool"]);
    refused(gw.attach(attach(with("default", 8, "r9"))).await.unwrap_err(), &["registered with rack", "\"r9\""]);
    let again = gw.attach(attach(with("default", 64, ""))).await.expect("no maximum fixed: any size");
    drop(again);
    let mut c = s.api("client", "reader").await;
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(nodes.iter().map(|n| n.pool.as_str()).collect::<Vec<_>>(), ["default"]);
}

/// Issue 39: labels were the agent's word too, so a stolen agent certificate could claim a
/// label that jobs select (and receive them). A certificate that fixes labels allows only
/// those, with their values; a node may declare fewer. (Before: every attach was taken.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_declares_only_the_labels_its_certificate_fixes() {
    let s = Setup::start().await;
    let uri = "baton-shape:pool=default;labels=fixed;label.zone=a";
    let shaped = s.ca.issue_shaped(s.dir.path(), "n1", "-labelled", uri);
    let mut gw = AgentGatewayClient::new(s.channel(&Transport::load(&shaped).unwrap()).await.unwrap());
    let with = |labels: &[(&str, &str)]| AttachRequest {
        node: Some(NodeInfo {
            pool: "default".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..node("n1")
        }),
        term_seen: 0,
    };
    for (labels, words) in [
        (&[("secure", "true")][..], &["label secure=true", "only the labels [zone=a]"][..]),
        (&[("zone", "b")][..], &["label zone=b"][..]),
    ] {
        let e = gw.attach(with(labels)).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e}");
        assert!(words.iter().all(|w| e.message().contains(w)), "{e}");
    }
    assert!(s.nodes().await.is_empty(), "a refused attach registered the node");
    drop(gw.attach(with(&[("zone", "a")])).await.expect("the label its certificate fixes"));
    drop(gw.attach(with(&[])).await.expect("a node may declare fewer labels"));
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

impl Setup {
    /// The serial of the certificate the replica presents to a new connection.
    async fn served_serial(&self) -> String {
        use tokio_rustls::rustls;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from(test_ca::der_of(self.ca.pem()))).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from(REPLICA_HOST).unwrap();
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
        let der = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        x509_parser::parse_x509_certificate(&der).unwrap().1.raw_serial_as_string()
    }

    /// Puts `from`'s certificate and key (and `crl`, when given) in the replica's directory.
    fn install(&self, from: &std::path::Path, crl: Option<&str>) {
        for f in ["cert.pem", "key.pem"] {
            std::fs::copy(from.join(f), self.server_dir.join(f)).unwrap();
        }
        if let Some(crl) = crl {
            std::fs::write(self.server_dir.join("crl.pem"), crl).unwrap();
        }
    }

    fn reload(&self) -> Result<(), String> {
        let Transport::Tls(tls) = &self.server else { unreachable!("the setup serves TLS") };
        tls.reload().map(|_| ()).map_err(|e| e.to_string())
    }
}

fn serial_of(dir: &std::path::Path) -> String {
    let der = test_ca::der_of(&std::fs::read_to_string(dir.join("cert.pem")).unwrap());
    x509_parser::parse_x509_certificate(&der).unwrap().1.raw_serial_as_string()
}

/// A reload puts a new certificate in force for new connections, while the process serves on;
/// files that are wrong for this replica are refused, naming the file and why, and the
/// certificate in force stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_new_certificate_and_a_bad_one_keeps_the_old() {
    let s = Setup::start().await;
    let old = serial_of(&s.server_dir);
    assert_eq!(s.served_serial().await, old);
    let before_reload = s.api("client", "alice").await;

    let rotated = s.ca.issue_into(s.dir.path(), "replica", "1", "-rotated");
    s.install(&rotated, None);
    // Until the reload the old certificate is served: the files alone change nothing.
    assert_eq!(s.served_serial().await, old);
    let expiry = s.server.not_after().expect("under TLS");
    s.reload().unwrap();
    let after = s.server.not_after().expect("under TLS");
    assert!(after.own_unix_s > expiry.own_unix_s, "the expiry shown is not the new certificate's: {after:?}");
    assert_eq!(after.ca_unix_s, expiry.ca_unix_s, "same CA");
    let new = serial_of(&rotated);
    assert_ne!(new, old);
    assert_eq!(s.served_serial().await, new, "a new connection did not get the new certificate");
    assert_eq!(s.queues().await, vec!["q".to_string()], "a client could not reach the rotated replica");
    // A connection made before the reload keeps working.
    let mut c = before_reload;
    c.cluster_info(Empty {}).await.unwrap();

    // Another replica's certificate: refused, naming cert.pem and both identities.
    s.install(&s.ca.issue(s.dir.path(), "replica", "2"), None);
    let e = s.reload().unwrap_err();
    assert!(e.contains("cert.pem") && e.contains("replica \"2\"") && e.contains("replica \"1\""), "{e}");
    assert_eq!(s.served_serial().await, new);
    // A key that does not go with the certificate.
    let third = s.ca.issue_into(s.dir.path(), "replica", "1", "-third");
    std::fs::copy(third.join("cert.pem"), s.server_dir.join("cert.pem")).unwrap();
    std::fs::copy(rotated.join("key.pem"), s.server_dir.join("key.pem")).unwrap();
    let e = s.reload().unwrap_err();
    assert!(e.contains("key.pem") && e.contains("does not go with cert.pem"), "{e}");
    assert_eq!(s.served_serial().await, new);
    // An unreadable file.
    std::fs::remove_file(s.server_dir.join("key.pem")).unwrap();
    let e = s.reload().unwrap_err();
    assert!(e.contains("key.pem"), "{e}");
    // A certificate for this replica, but from another CA.
    let other = Ca::new("another CA").issue(s.dir.path(), "replica", "1");
    s.install(&other, None);
    let e = s.reload().unwrap_err();
    assert!(e.contains("cert.pem") && e.contains("does not verify against ca.pem"), "{e}");
    // A CRL revoking this replica's own certificate.
    s.install(&third, Some(&s.ca.crl(&[&third])));
    let e = s.reload().unwrap_err();
    assert!(e.contains("cert.pem") && e.contains("crl.pem"), "{e}");
    assert_eq!(s.served_serial().await, new, "a refused reload changed the certificate served");
    assert_eq!(s.queues().await, vec!["q".to_string()]);
}

/// A CRL put in force by a reload keeps a revoked agent from attaching, and refuses the
/// reports of one that attached before the reload; other agents are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_agent_certificate_cannot_attach_after_a_reload() {
    let s = Setup::start().await;
    let revoked = s.ca.issue(s.dir.path(), "agent", "n1");
    let early = s.ca.issue(s.dir.path(), "agent", "n3");
    // n3 attaches before the reload, on a connection that stays open.
    let mut gw3 = AgentGatewayClient::new(s.channel(&Transport::load(&early).unwrap()).await.unwrap());
    let stream = gw3.attach(AttachRequest { node: Some(node("n3")), term_seen: 0 }).await.unwrap();
    // Before the reload the certificate to be revoked still connects.
    assert!(s.channel(&Transport::load(&revoked).unwrap()).await.is_ok());

    std::fs::write(s.server_dir.join("crl.pem"), s.ca.crl(&[&revoked, &early])).unwrap();
    s.reload().unwrap();

    let attached = match s.channel(&Transport::load(&revoked).unwrap()).await {
        Err(e) => Err(format!("{e:?}")),
        Ok(ch) => AgentGatewayClient::new(ch)
            .attach(AttachRequest { node: Some(node("n1")), term_seen: 0 })
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    let e = attached.expect_err("a revoked agent certificate attached");
    assert!(e.to_lowercase().contains("revoked"), "the refusal does not say the certificate is revoked: {e}");
    let e = gw3.report(ReportRequest { node: "n3".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("revoked") && e.message().contains("agent \"n3\""), "{e}");
    // An agent whose certificate is not listed attaches as before.
    let ch = s.channel(&s.transport("agent", "n2")).await.unwrap();
    let _n2 = AgentGatewayClient::new(ch).attach(AttachRequest { node: Some(node("n2")), term_seen: 0 }).await.unwrap();
    assert_eq!(s.nodes().await, vec!["n2".to_string(), "n3".to_string()], "n1 registered");
    drop(stream);
}

/// The same for a client: no new connection, and a connection opened before the reload is
/// refused on its next call, so nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_client_certificate_is_refused_after_a_reload() {
    let s = Setup::start().await;
    let mallory = s.ca.issue(s.dir.path(), "client", "mallory");
    let mut open = BatonClient::new(s.channel(&Transport::load(&mallory).unwrap()).await.unwrap());
    open.cluster_info(Empty {}).await.unwrap();

    std::fs::write(s.server_dir.join("crl.pem"), s.ca.crl(&[&mallory])).unwrap();
    s.reload().unwrap();

    let fresh = match s.channel(&Transport::load(&mallory).unwrap()).await {
        Err(e) => Err(format!("{e:?}")),
        Ok(ch) => BatonClient::new(ch).put_queue(gpu_queue("fresh", 1)).await.map(|_| ()).map_err(|e| e.to_string()),
    };
    let e = fresh.expect_err("a revoked client certificate connected");
    assert!(e.to_lowercase().contains("revoked"), "the refusal does not say the certificate is revoked: {e}");
    let e = open.put_queue(gpu_queue("open", 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("revoked") && e.message().contains("client \"mallory\""), "{e}");
    assert_eq!(s.queues().await, vec!["q".to_string()], "a revoked client changed the queues");
}

/// A reload that revokes a certificate ends the streams its holder has open: an agent's
/// `Attach` (directives carry jobs' environments) and a client's `Watch`, each with
/// UNAUTHENTICATED naming the certificate; a stream of a certificate not listed goes on.
/// Before, they kept flowing until the leader changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_ends_the_open_streams_of_the_revoked_certificate() {
    let s = Setup::start().await;
    let agent = s.ca.issue(s.dir.path(), "agent", "n1");
    let mallory = s.ca.issue(s.dir.path(), "client", "mallory");
    let mut gw = AgentGatewayClient::new(s.channel(&Transport::load(&agent).unwrap()).await.unwrap());
    let mut directives = gw.attach(AttachRequest { node: Some(node("n1")), term_seen: 0 }).await.unwrap().into_inner();
    let mut api = BatonClient::new(s.channel(&Transport::load(&mallory).unwrap()).await.unwrap());
    let watch = baton_proto::v1::WatchRequest::default();
    let mut events = api.watch(watch.clone()).await.unwrap().into_inner();
    let mut other = s.api("client", "reader").await.watch(watch).await.unwrap().into_inner();

    std::fs::write(s.server_dir.join("crl.pem"), s.ca.crl(&[&agent, &mallory])).unwrap();
    s.reload().unwrap();

    let within = Duration::from_secs(10);
    let e = tokio::time::timeout(within, end_of(&mut directives))
        .await
        .expect("the revoked agent's directives kept coming");
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("revoked") && e.message().contains("agent \"n1\""), "{e}");
    let e = tokio::time::timeout(within, end_of(&mut events)).await.expect("the revoked client's watch stayed open");
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("revoked") && e.message().contains("client \"mallory\""), "{e}");
    // A watcher whose certificate is not listed still gets events.
    s.api("client", "admin").await.put_queue(gpu_queue("after", 1)).await.unwrap();
    let next = tokio::time::timeout(within, other.message()).await.expect("the other watch went quiet");
    assert!(next.unwrap().is_some(), "the other watch ended");
}

/// The status a stream ends with, after whatever it still sends (a clean end is a failure).
async fn end_of<T>(stream: &mut tonic::Streaming<T>) -> tonic::Status {
    loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without a status"),
            Err(e) => return e,
        }
    }
}

/// Issue 39: nothing bounded the connections one caller held. One certificate may hold
/// `MAX_CONNECTIONS_PER_CALLER` open on a listener; its next is closed after the handshake,
/// while another caller still connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_certificate_holds_a_bounded_number_of_connections() {
    let s = Setup::start().await;
    let greedy = s.transport("client", "greedy");
    let mut held = Vec::new();
    for _ in 0..baton_proto::tls::MAX_CONNECTIONS_PER_CALLER {
        let mut c = BatonClient::new(s.channel(&greedy).await.unwrap());
        c.cluster_info(Empty {}).await.expect("within the bound");
        held.push(c);
    }
    let over = match s.channel(&greedy).await {
        Ok(ch) => BatonClient::new(ch).cluster_info(Empty {}).await.map(|_| ()),
        Err(e) => Err(tonic::Status::unavailable(e.to_string())),
    };
    assert!(over.is_err(), "a connection over the bound was served");
    let mut other = s.api("client", "other").await;
    other.cluster_info(Empty {}).await.expect("another caller still connects");
    drop(held);
}

/// An agent's log service whose one log says one line, then stays open without end.
struct QuietLogs;

#[tonic::async_trait]
impl baton_proto::v1::agent_logs_server::AgentLogs for QuietLogs {
    type LogsStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<baton_proto::v1::LogChunk, tonic::Status>> + Send + 'static>,
    >;

    async fn logs(
        &self,
        _r: tonic::Request<baton_proto::v1::LogsRequest>,
    ) -> Result<tonic::Response<Self::LogsStream>, tonic::Status> {
        use futures::StreamExt;
        let line = baton_proto::v1::LogChunk { attempt: 1, offset: 0, data: b"step 1\n".to_vec() };
        let stream = futures::stream::once(async move { Ok(line) }).chain(futures::stream::pending());
        Ok(tonic::Response::new(Box::pin(stream)))
    }
}

/// Issue 39: a client's `JobLogs` stream is re-checked against revocation as its watch is
/// (before each chunk and every second while quiet): the reload that revokes the client's
/// certificate ends its followed log with UNAUTHENTICATED, though the log itself goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_ends_a_followed_log_of_the_revoked_certificate() {
    let s = Setup::start().await;
    let agent = Transport::load(&s.ca.issue(s.dir.path(), "agent", "n1")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let logs_addr = listener.local_addr().unwrap().to_string();
    let logs = baton_proto::v1::agent_logs_server::AgentLogsServer::new(QuietLogs);
    tokio::spawn(agent.server().add_service(logs).serve_with_incoming(agent.incoming(listener)));
    let mut gw = AgentGatewayClient::new(s.channel(&agent).await.unwrap());
    let n1 = NodeInfo { agent_addr: logs_addr, ..node("n1") };
    let _directives = gw.attach(AttachRequest { node: Some(n1), term_seen: 0 }).await.unwrap();
    let mallory = s.ca.issue(s.dir.path(), "client", "mallory");
    let mut api = BatonClient::new(s.channel(&Transport::load(&mallory).unwrap()).await.unwrap());
    let job = baton_proto::make::gpu_job("j", "q", "train", 1, 1, vec!["train".into()]);
    api.submit(baton_proto::v1::SubmitRequest { spec: Some(job), ..Default::default() }).await.unwrap();
    let logs = baton_proto::v1::LogsRequest { job: "j".into(), follow: true, ..Default::default() };
    let req = baton_proto::v1::JobLogsRequest { node: "n1".into(), logs: Some(logs) };
    let mut stream = api.job_logs(req).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().expect("the log's first line");
    assert_eq!(first.data, b"step 1\n");

    std::fs::write(s.server_dir.join("crl.pem"), s.ca.crl(&[&mallory])).unwrap();
    s.reload().unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), end_of(&mut stream))
        .await
        .expect("the revoked client's log stream stayed open");
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("revoked") && e.message().contains("client \"mallory\""), "{e}");
}

/// Issue 39: the dashboard took bearer tokens over plain HTTP on `--metrics-listen`, with no
/// client certificate, on a cluster otherwise held by mutual TLS. Under TLS that listener is
/// now mutual TLS (HTTP/1.1 negotiated as browsers and Prometheus offer it): a certificate of
/// the cluster's CA reaches `/metrics` and the dashboard's API, no certificate gets 401
/// saying what is missing, a revoked one 401 saying so, and plain HTTP gets no answer. The
/// plain listener the operator asks for serves `/metrics` only, off loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_metrics_are_served_over_mutual_tls() {
    let s = Setup::start().await;
    let alice = s.ca.issue(s.dir.path(), "client", "alice");

    let (code, body) = web::https_get(s.ca.pem(), REPLICA_HOST, &s.metrics, Some(&alice), "/metrics").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("baton_"), "{body}");
    let (code, body) =
        web::https_get(s.ca.pem(), REPLICA_HOST, &s.metrics, Some(&alice), "/api/cluster").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"leader"), "{body}");
    let (code, _) = web::https_get(s.ca.pem(), REPLICA_HOST, &s.metrics, Some(&alice), "/").await.unwrap();
    assert_eq!(code, 200);

    let (code, body) = web::https_get(s.ca.pem(), REPLICA_HOST, &s.metrics, None, "/api/cluster").await.unwrap();
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("no client certificate"), "{body}");

    let plain = web::http_get(&s.metrics, "/api/cluster").await;
    assert!(plain.is_err(), "plain HTTP was answered on the TLS listener: {plain:?}");

    // The plain listener's metrics name no job (nor user): a job's name is not in them.
    let mut gw = AgentGatewayClient::new(s.channel(&s.transport("agent", "n1")).await.unwrap());
    let _attached = gw.attach(AttachRequest { node: Some(node("n1")), term_seen: 0 }).await.unwrap();
    let job = baton_proto::make::gpu_job("a-secret-experiment", "q", "train", 1, 1, vec!["train".into()]);
    let mut api = s.api("client", "admin").await;
    api.submit(baton_proto::v1::SubmitRequest { spec: Some(job), ..Default::default() }).await.unwrap();
    let (code, body) = web::http_get(&s.plain, "/metrics").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("baton_queue_pending_jobs"), "{body}");
    assert!(!body.contains("a-secret-experiment"), "a job's name on the plain /metrics:\n{body}");
    let (code, body) = web::http_get(&s.plain, "/api/cluster").await.unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("serves only /metrics"), "{body}");

    std::fs::write(s.server_dir.join("crl.pem"), s.ca.crl(&[&alice])).unwrap();
    s.reload().unwrap();
    let (code, body) =
        web::https_get(s.ca.pem(), REPLICA_HOST, &s.metrics, Some(&alice), "/api/cluster").await.unwrap();
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("revoked"), "{body}");
}
