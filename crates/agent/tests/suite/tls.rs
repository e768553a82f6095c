//! Mutual TLS at an agent: its log service takes only certificates of the cluster's CA, and
//! it dials as a replica only a server whose certificate is a replica's of that CA, so
//! directives come from nobody else. Certificates are made here with rcgen the way
//! `baton tls` makes them (OU = role, CN = name, the role's DNS name).

use crate::common;

#[path = "../../../proto/testing/test_ca.rs"]
#[allow(dead_code)] // what makes CRLs and rotated certificates is the server's tests'
mod test_ca;
#[path = "../../../proto/testing/web.rs"]
mod web;

use std::path::Path;
use std::time::Duration;

use baton_proto::tls::{AGENT_HOST, Transport};
use baton_proto::v1::LogsRequest;
use baton_proto::v1::agent_logs_client::AgentLogsClient;
use common::*;
use test_ca::Ca;
use tonic::Code;

/// An agent serving its logs with mutual TLS as `identity` (role, name); no gateway answers.
async fn tls_agent(dir: &Path, ca: &Ca, identity: (&str, &str)) -> baton_agent::Agent {
    tls_agent_with(dir, ca, identity, |_| {}).await
}

/// As [`tls_agent`], its configuration changed by `change` first.
async fn tls_agent_with(
    dir: &Path,
    ca: &Ca,
    identity: (&str, &str),
    change: impl FnOnce(&mut baton_agent::AgentConfig),
) -> baton_agent::Agent {
    // The certificate's directory is named after the CA and the identity: a data dir inside
    // it is this agent's own.
    let tls_dir = ca.issue(dir, identity.0, identity.1);
    let mut c = config(&tls_dir.join("data"), &["127.0.0.1:1".parse().unwrap()]);
    c.transport = Transport::load(&tls_dir).unwrap();
    change(&mut c);
    start_agent(c).await
}

fn missing_job() -> LogsRequest {
    LogsRequest { job: "nope".into(), job_id: 99, ..Default::default() }
}

/// How long one step of these tests may take: each is a handshake and one call on this
/// machine, so a step that takes longer is a hang, reported by name instead of stalling the run.
const STEP: Duration = Duration::from_secs(20);

/// `fut`, or a panic naming `what` once it has taken [`STEP`].
async fn step<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, fut).await.unwrap_or_else(|_| panic!("{what}: no outcome within {STEP:?}"))
}

/// A logs call through `ep`, connected within [`STEP`]: the status it was refused with.
async fn refused(what: &str, ep: tonic::transport::Endpoint) -> tonic::Status {
    let ch = step(what, ep.connect_timeout(STEP).connect()).await.unwrap();
    step(what, AgentLogsClient::new(ch).logs(missing_job())).await.unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_service_takes_only_replica_certificates_of_the_clusters_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let agent = step("starting the agent", tls_agent(dir.path(), &ca, ("agent", "node-a"))).await;
    let addr = agent.logs_addr().to_string();

    // A replica of the CA gets past the certificate check: the job is simply not here.
    let t = ca.transport(dir.path(), "replica", "1");
    let e = refused("a replica's call", t.endpoint(&addr, AGENT_HOST).unwrap()).await;
    assert_eq!(e.code(), Code::NotFound, "{e}");

    // Clients and agents read logs through a replica, which checks their token: refused here.
    for (role, name) in [("client", "alice"), ("agent", "node-b")] {
        let t = ca.transport(dir.path(), role, name);
        let e = refused(role, t.endpoint(&addr, AGENT_HOST).unwrap()).await;
        assert_eq!(e.code(), Code::PermissionDenied, "{role}: {e}");
        assert!(e.message().contains("takes only replica certificates"), "{e}");
    }

    // No certificate: UNAUTHENTICATED, saying what is missing.
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca.pem()))
        .domain_name(AGENT_HOST)
        .timeout(STEP);
    let ep = tonic::transport::Endpoint::from_shared(format!("https://{addr}")).unwrap();
    let e = refused("a call without a certificate", ep.tls_config(tls).unwrap()).await;
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("no client certificate"), "{e}");

    // Another CA's certificate: no handshake.
    let other = Ca::new("other");
    let t = other.transport(dir.path(), "client", "mallory");
    let ep = t.endpoint(&addr, AGENT_HOST).unwrap().connect_timeout(STEP);
    assert!(step("another CA's handshake", ep.connect()).await.is_err());

    // Plain TCP: no answer either. Whether the refusal comes at connecting or at the call
    // depends on when the server's hang-up arrives; either way no answer may come back.
    let ep = Transport::Insecure.endpoint(&addr, AGENT_HOST).unwrap().connect_timeout(STEP);
    if let Ok(ch) = step("a plain TCP connection", ep.connect()).await {
        let mut client = AgentLogsClient::new(ch);
        assert!(step("a plain TCP call", client.logs(missing_job())).await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_dials_as_its_leader_only_a_replica_certificate_of_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let me = ca.transport(dir.path(), "agent", "node-a");
    // Stand-ins for a replica: TLS servers holding each kind of certificate.
    let as_agent = tls_agent(dir.path(), &ca, ("agent", "node-b")).await;
    let as_client = tls_agent(dir.path(), &ca, ("client", "mallory")).await;
    let as_replica = tls_agent(dir.path(), &ca, ("replica", "1")).await;
    let other = Ca::new("other");
    let as_foreign_replica = tls_agent(dir.path(), &other, ("replica", "1")).await;
    for (who, server) in
        [("an agent", &as_agent), ("a client", &as_client), ("another CA's replica", &as_foreign_replica)]
    {
        let r = baton_agent::endpoint::connect(&server.logs_addr().to_string(), &me).await;
        assert!(r.is_err(), "the agent accepted {who}'s certificate as a replica's");
    }
    baton_agent::endpoint::connect(&as_replica.logs_addr().to_string(), &me).await.unwrap();
}

/// Issue 39: an agent's `/metrics` was plain HTTP whatever its transport. Under TLS its
/// `--metrics-listen` is mutual TLS: a certificate of the cluster's CA (Prometheus's client
/// certificate) scrapes it, no certificate gets 401 saying what is missing, plain HTTP no
/// answer; `--metrics-plain-listen` serves `/metrics` over plain HTTP where asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_over_mutual_tls_and_plain_only_where_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let agent = step(
        "starting the agent",
        tls_agent_with(dir.path(), &ca, ("agent", "node-m"), |c| {
            c.metrics_listen = Some("127.0.0.1:0".into());
            c.metrics_plain_listen = Some("127.0.0.1:0".into());
        }),
    )
    .await;
    let tls = agent.metrics_addr().unwrap().to_string();
    let plain = agent.metrics_plain_addr().unwrap().to_string();
    let prometheus = ca.issue(dir.path(), "client", "prometheus");

    let (code, body) =
        step("a scrape", web::https_get(ca.pem(), AGENT_HOST, &tls, Some(&prometheus), "/metrics")).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("baton_agent_replicas_running"), "{body}");
    let (code, body) =
        step("no certificate", web::https_get(ca.pem(), AGENT_HOST, &tls, None, "/metrics")).await.unwrap();
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("no client certificate"), "{body}");
    let e = step("plain HTTP on TLS", web::http_get(&tls, "/metrics")).await;
    assert!(e.is_err(), "plain HTTP was answered on the TLS listener: {e:?}");

    let (code, body) = step("a plain scrape", web::http_get(&plain, "/metrics")).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("baton_agent_replicas_running"), "{body}");
}
