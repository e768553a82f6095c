//! Certificates change under running processes: `baton server` and `baton agent` reload
//! their `--tls-dir` on SIGHUP (same process, new certificate for new connections, an agent
//! attaches again with it and its jobs keep running; bad files refused and logged) and
//! replicas refuse certificates `baton tls revoke` listed once the CRL is in force.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_chaos::cluster::{Cluster, NodeArgs};
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::tls::{AGENT_HOST, REPLICA_HOST};
use baton_proto::v1::{Empty, JobRef, JobState, NodeStatus, SubmitRequest};
use tokio_rustls::rustls;

use crate::{BATON, wait_file_lines};

/// The serial of the certificate the replica (`REPLICA_HOST`) or agent (`AGENT_HOST`) at
/// `addr` presents to a new connection.
async fn served_serial(addr: &str, ca_pem: &str, host: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(baton_proto::tls::first_cert_der(ca_pem).unwrap())).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    serial_of_der(&tls.get_ref().1.peer_certificates().unwrap()[0])
}

fn serial_of_der(der: &[u8]) -> String {
    x509_parser::parse_x509_certificate(der).unwrap().1.raw_serial_as_string()
}

fn serial_of(dir: &Path) -> String {
    let pem = std::fs::read_to_string(dir.join("cert.pem")).unwrap();
    serial_of_der(&baton_proto::tls::first_cert_der(&pem).unwrap())
}

fn baton(args: &[&str]) -> std::process::Output {
    Command::new(BATON).args(args).env_remove("BATON_TLS_DIR").env_remove("BATON_INSECURE").output().unwrap()
}

fn baton_ok(args: &[&str]) -> String {
    let out = baton(args);
    assert!(out.status.success(), "baton {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn install(from: &Path, to: &Path) {
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// Waits until replica `i` has logged `needle` `times` times.
async fn logged(c: &Cluster, i: usize, needle: &str, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.replica_log(i).matches(needle).count() < times {
        assert!(Instant::now() < deadline, "replica {} never logged {needle:?}:\n{}", i + 1, c.replica_log(i));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_a_replicas_certificate_and_a_crl_refuses_a_revoked_client() {
    let c = Cluster::start(Path::new(BATON), &[]).await;
    let tls = c.path("tls");
    let ca = tls.join("ca");
    let ca_pem = std::fs::read_to_string(ca.join("ca.pem")).unwrap();
    let dir1 = tls.join("replica-1");
    let addr = c.servers.addrs[0].clone();
    let pid = c.replica_pid(0).unwrap();
    let old = serial_of(&dir1);
    assert_eq!(served_serial(&addr, &ca_pem, REPLICA_HOST).await, old);

    // Rotate: a new certificate for replica 1, put in place, then SIGHUP.
    let rotated = tls.join("replica-1-rotated");
    let s = |p: &Path| p.display().to_string();
    baton_ok(&["tls", "cert", "create", "--server", "1", "--ca-dir", &s(&ca), "--out-dir", &s(&rotated)]);
    install(&rotated, &dir1);
    c.signal_replica(0, libc::SIGHUP);
    logged(&c, 0, "reloaded its certificates", 1).await;
    let new = serial_of(&rotated);
    assert_ne!(new, old);
    assert_eq!(
        served_serial(&addr, &ca_pem, REPLICA_HOST).await,
        new,
        "a new connection did not get the new certificate"
    );
    assert_eq!(c.replica_pid(0), Some(pid));
    assert!(alive(pid), "the replica exited on SIGHUP");
    let info =
        |client: &Path| baton(&["cluster", "info", "--server", &addr, "--tls-dir", &s(client), "--timeout", "5s"]);
    assert!(info(&tls.join("client-chaos")).status.success(), "a client cannot reach the rotated replica");

    // A bad reload (the client's certificate, another identity) is refused and logged,
    // naming the file and why; the new certificate stays in force.
    install(&tls.join("client-chaos"), &dir1);
    c.signal_replica(0, libc::SIGHUP);
    logged(&c, 0, "refused to reload its certificates", 1).await;
    let log = c.replica_log(0);
    let line = log.lines().find(|l| l.contains("refused to reload")).unwrap();
    assert!(line.contains("cert.pem") && line.contains("client \"chaos\""), "{line}");
    assert_eq!(served_serial(&addr, &ca_pem, REPLICA_HOST).await, new);
    assert!(alive(pid));
    install(&rotated, &dir1);

    // Revoke a client's certificate with `baton tls revoke`; the CRL goes to every replica.
    let mallory = tls.join("client-mallory");
    baton_ok(&["tls", "cert", "create", "--client", "mallory", "--ca-dir", &s(&ca), "--out-dir", &s(&mallory)]);
    assert!(info(&mallory).status.success(), "mallory's certificate does not work before its revocation");
    let said = baton_ok(&["tls", "revoke", "--ca-dir", &s(&ca), "--cert", &s(&mallory)]);
    assert!(said.contains("client \"mallory\"") && said.contains("lists 1 certificates"), "{said}");
    for i in 0..3 {
        std::fs::copy(ca.join("crl.pem"), tls.join(format!("replica-{}", i + 1)).join("crl.pem")).unwrap();
        c.signal_replica(i, libc::SIGHUP);
        logged(&c, i, "reloaded its certificates", if i == 0 { 2 } else { 1 }).await;
    }
    let out = info(&mallory);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("revoked"), "a revoked client was not refused clearly: {err}");
    assert!(info(&tls.join("client-chaos")).status.success(), "revoking mallory refused another client");
}

/// The node whose agent's certificates are rotated.
const NODE: &str = "n1";
/// How long the agent tests wait for a condition (a log line, reports, a metric).
const AGENT_WAIT_MS: u64 = 20_000;
/// Reports the leader must accept from the agent for it to count as reporting still (it
/// reports every 100 ms in the harness).
const REPORTS_AGAIN: f64 = 5.0;

/// A TLS cluster of one node whose agent runs `long`, a job whose process (a shell) writes
/// its pid to `pids` and runs until it is stopped.
struct AgentScene {
    c: Cluster,
    agent_pid: u32,
    job_pid: u32,
    pids: std::path::PathBuf,
}

impl AgentScene {
    async fn start() -> AgentScene {
        let mut c = Cluster::start(Path::new(BATON), &[NodeArgs::gpus(NODE, "", 4)]).await;
        call!(c, |api| api.put_queue(gpu_queue("q", 4)));
        let pids = c.path("pids");
        // No `exec sleep`: the shell stays, and its command line names the cluster's
        // directory, by which the harness ends the jobs a dropped cluster leaves.
        let script = format!("echo $$ >> '{}'; while :; do sleep 1; done", pids.display());
        let spec = gpu_job("long", "q", "", 1, 1, vec!["sh".into(), "-c".into(), script]);
        call!(c, |api| api.submit(SubmitRequest {
            spec: Some(spec.clone()),
            request_id: "long".into(),
            run_as: String::new(),
            after: Vec::new(),
            array: None,
        }));
        c.wait_job("long", "running", |j| j.state() == JobState::Running).await;
        wait_file_lines(&pids, 1).await;
        let job_pid = std::fs::read_to_string(&pids).unwrap().trim().parse().unwrap();
        let agent_pid = c.agent_pid(NODE).expect("the agent runs");
        AgentScene { c, agent_pid, job_pid, pids }
    }

    fn dir(&self) -> std::path::PathBuf {
        self.c.path(&format!("tls/agent-{NODE}"))
    }

    /// Waits until the agent has logged `needle` `times` times; returns the last such line.
    async fn logged(&self, needle: &str, times: usize) -> String {
        let deadline = Instant::now() + Duration::from_millis(AGENT_WAIT_MS);
        loop {
            let log = self.c.agent_log(NODE);
            if log.matches(needle).count() >= times {
                return log.lines().rfind(|l| l.contains(needle)).unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "the agent never logged {needle:?} {times} times:\n{log}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of the agent's metric sample `key` (name and labels as exposed), waiting
    /// for its metrics to answer.
    async fn metric(&self, key: &str) -> f64 {
        let deadline = Instant::now() + Duration::from_millis(AGENT_WAIT_MS);
        loop {
            let found = self.c.agent_metrics(NODE).await.map(|body| {
                body.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
            });
            match found {
                Ok(Some(v)) => return v,
                r => assert!(Instant::now() < deadline, "the agent's metrics show no {key}: {r:?}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the leader has accepted `n` more of the agent's reports than now.
    async fn reports_accepted(&self, n: f64) {
        let sent = "baton_agent_reports_sent_total";
        let before = self.metric(sent).await;
        let deadline = Instant::now() + Duration::from_millis(AGENT_WAIT_MS);
        loop {
            let now = self.metric(sent).await;
            if now >= before + n {
                return;
            }
            assert!(Instant::now() < deadline, "the leader accepted {} reports since, expected {n}", now - before);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the agent has logged `first`, then that it attached to a replica.
    async fn attached_after(&self, first: &str) {
        let deadline = Instant::now() + Duration::from_millis(AGENT_WAIT_MS);
        loop {
            let log = self.c.agent_log(NODE);
            let after = log.find(first).map(|at| &log[at..]);
            if after.is_some_and(|rest| rest.contains("leader: attached")) {
                return;
            }
            assert!(Instant::now() < deadline, "the agent never attached after {first:?}:\n{log}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The serial of the certificate the agent's log service presents to a new connection
    /// (a replica's view of it: replicas dial there for jobs' logs).
    async fn served_serial(&self) -> String {
        let nodes = call!(self.c, |api| api.list_nodes(Empty {})).nodes;
        let node = nodes.iter().find(|n| n.name == NODE).expect("the node is listed");
        let ca_pem = std::fs::read_to_string(self.c.path("tls/ca/ca.pem")).unwrap();
        served_serial(&node.agent_addr, &ca_pem, AGENT_HOST).await
    }

    async fn own_not_after_s(&self) -> f64 {
        self.metric("baton_agent_tls_not_after_seconds{cert=\"own\"}").await
    }

    /// The agent keeps working: the same process, its job's process untouched and still
    /// running (attempt 1), the leader accepting its reports from now on, its node Ready,
    /// and a new job (`name`) that runs to its end there (the only node).
    async fn keeps_working(&mut self, name: &str) {
        assert_eq!(self.c.agent_pid(NODE), Some(self.agent_pid), "the agent exited or was replaced");
        assert!(alive(self.job_pid), "the job's process {} is gone", self.job_pid);
        let started = std::fs::read_to_string(&self.pids).unwrap();
        assert_eq!(started.lines().count(), 1, "the job's process was started again: {started:?}");
        let long = call!(self.c, |api| api.get_job(JobRef { name: "long".into(), ..Default::default() }));
        assert_eq!((long.state(), long.attempt), (JobState::Running, 1), "{long:?}");

        self.reports_accepted(REPORTS_AGAIN).await;
        let nodes = call!(self.c, |api| api.list_nodes(Empty {})).nodes;
        let node = nodes.iter().find(|n| n.name == NODE).expect("the node is listed");
        assert_eq!(node.status(), NodeStatus::Ready, "{node:?}");

        let spec = gpu_job(name, "q", "", 1, 1, vec!["true".into()]);
        call!(self.c, |api| api.submit(SubmitRequest {
            spec: Some(spec.clone()),
            request_id: name.into(),
            run_as: String::new(),
            after: Vec::new(),
            array: None,
        }));
        let done =
            self.c.wait_job(name, "ended", |j| matches!(j.state(), JobState::Succeeded | JobState::Failed)).await;
        // The cluster has no other node: the job ran on this agent's.
        assert_eq!(done.state(), JobState::Succeeded, "{done:?}");
    }
}

/// When `cert.pem` in `dir` expires, in Unix seconds.
fn not_after_of(dir: &Path) -> f64 {
    let pem = std::fs::read_to_string(dir.join("cert.pem")).unwrap();
    let der = baton_proto::tls::first_cert_der(&pem).unwrap();
    x509_parser::parse_x509_certificate(&der).unwrap().1.validity().not_after.timestamp() as f64
}

/// Issue 11: a new certificate for a running agent's node, moved over its files, then
/// SIGHUP. The same agent process puts it in force (its log names the new serial, its
/// metrics the new expiry) and attaches to the leader again with it: once the old
/// certificate is revoked at every replica, the agent keeps reporting and runs a new job,
/// and no replica ever refused it (an agent still calling with the old certificate is
/// refused, and attaches again only after its reports fail). Its job keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_an_agents_certificate_while_its_job_runs() {
    let mut a = AgentScene::start().await;
    let tls = a.c.path("tls");
    let ca = tls.join("ca");
    let dir = a.dir();
    let s = |p: &Path| p.display().to_string();
    let old_serial = serial_of(&dir);
    let old_pem = tls.join("agent-old-cert.pem");
    std::fs::copy(dir.join("cert.pem"), &old_pem).unwrap();
    let old_not_after = a.own_not_after_s().await;
    assert_eq!(old_not_after, not_after_of(&dir));
    assert_eq!(a.served_serial().await, old_serial);

    // Another validity than the harness's certificates, so that the expiry the metrics
    // show tells the two apart.
    let rotated = tls.join("agent-rotated");
    let (ca_dir, out) = (s(&ca), s(&rotated));
    baton_ok(&["tls", "cert", "create", "--agent", NODE, "--ca-dir", &ca_dir, "--out-dir", &out, "--days", "30"]);
    let new_serial = serial_of(&rotated);
    assert_ne!(new_serial, old_serial);
    install(&rotated, &dir);
    a.c.signal_agent(NODE, libc::SIGHUP);
    let line = a.logged("this agent reloaded its certificates", 1).await;
    assert!(line.contains(&new_serial), "the reload's log line does not name the new serial {new_serial}: {line}");
    a.attached_after("certificates reloaded; attaching again with them").await;
    // Two reports accepted after that attach: the second began after the first ended, with
    // the channel the new attach made (a report already in flight on the old one is done).
    a.reports_accepted(2.0).await;
    assert_eq!(a.served_serial().await, new_serial, "a new connection to the agent did not get the new certificate");
    let new_not_after = not_after_of(&rotated);
    assert_ne!(new_not_after, old_not_after);
    let deadline = Instant::now() + Duration::from_millis(AGENT_WAIT_MS);
    while a.own_not_after_s().await != new_not_after {
        assert!(Instant::now() < deadline, "the metrics never showed the new certificate's expiry {new_not_after}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The old certificate revoked at every replica: from here on only an agent that
    // attached with the new one can report.
    let said = baton_ok(&["tls", "revoke", "--ca-dir", &s(&ca), "--cert", &s(&old_pem)]);
    assert!(said.contains(&format!("agent {NODE:?}")), "{said}");
    for i in 0..3 {
        std::fs::copy(ca.join("crl.pem"), tls.join(format!("replica-{}", i + 1)).join("crl.pem")).unwrap();
        a.c.signal_replica(i, libc::SIGHUP);
        logged(&a.c, i, "reloaded its certificates", 1).await;
    }
    a.keeps_working("after-rotation").await;
    for i in 0..3 {
        let log = a.c.replica_log(i);
        let refused: Vec<&str> = log.lines().filter(|l| l.contains("the caller's certificate is revoked")).collect();
        assert!(refused.is_empty(), "replica {} refused the agent's old certificate: {refused:?}", i + 1);
    }
}

/// Issue 11, the refusals: another node's certificate, then one of another CA for this
/// node, moved over a running agent's files, each followed by SIGHUP. Each reload is refused
/// and logged naming why; the certificate in force stays (the metrics' expiry, no reattach)
/// and the agent keeps working with the bad files still in its directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_refuses_another_nodes_or_another_cas_certificate_and_keeps_working() {
    let mut a = AgentScene::start().await;
    let tls = a.c.path("tls");
    let dir = a.dir();
    let s = |p: &Path| p.display().to_string();
    let in_force = a.own_not_after_s().await;
    assert_eq!(in_force, not_after_of(&dir));
    let serial = serial_of(&dir);

    let other = tls.join("agent-other-node");
    let ca = s(&tls.join("ca"));
    baton_ok(&["tls", "cert", "create", "--agent", "n2", "--ca-dir", &ca, "--out-dir", &s(&other), "--days", "30"]);
    install(&other, &dir);
    a.c.signal_agent(NODE, libc::SIGHUP);
    let line = a.logged("this agent refused to reload its certificates", 1).await;
    assert!(line.contains("cert.pem") && line.contains("agent \"n2\""), "{line}");

    let other_ca = tls.join("other-ca");
    baton_ok(&["tls", "ca", "create", "--dir", &s(&other_ca)]);
    let foreign = tls.join("agent-other-ca");
    let (oca, out) = (s(&other_ca), s(&foreign));
    baton_ok(&["tls", "cert", "create", "--agent", NODE, "--ca-dir", &oca, "--out-dir", &out, "--days", "30"]);
    install(&foreign, &dir);
    a.c.signal_agent(NODE, libc::SIGHUP);
    let line = a.logged("this agent refused to reload its certificates", 2).await;
    assert!(line.contains("cert.pem") && line.contains("does not verify against ca.pem"), "{line}");

    let log = a.c.agent_log(NODE);
    assert!(!log.contains("reloaded its certificates"), "a refused reload was put in force:\n{log}");
    assert!(!log.contains("attaching again"), "a refused reload made the agent attach again:\n{log}");
    assert_eq!(a.own_not_after_s().await, in_force, "the certificate in force changed");
    assert_eq!(a.served_serial().await, serial, "a new connection to the agent got another certificate");
    a.keeps_working("after-refusals").await;
}
