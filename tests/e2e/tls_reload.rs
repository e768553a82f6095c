//! Certificates change under running processes: `baton server` reloads its `--tls-dir` on
//! SIGHUP (same process, new certificate for new connections; bad files refused and logged)
//! and refuses certificates `baton tls revoke` listed once the CRL is in force.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_chaos::cluster::Cluster;
use baton_proto::tls::REPLICA_HOST;
use tokio_rustls::rustls;

use crate::BATON;

/// The serial of the certificate the replica at `addr` presents to a new connection.
async fn served_serial(addr: &str, ca_pem: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(baton_proto::tls::first_cert_der(ca_pem).unwrap())).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(REPLICA_HOST).unwrap();
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
    assert_eq!(served_serial(&addr, &ca_pem).await, old);

    // Rotate: a new certificate for replica 1, put in place, then SIGHUP.
    let rotated = tls.join("replica-1-rotated");
    let s = |p: &Path| p.display().to_string();
    baton_ok(&["tls", "cert", "create", "--server", "1", "--ca-dir", &s(&ca), "--out-dir", &s(&rotated)]);
    install(&rotated, &dir1);
    c.signal_replica(0, libc::SIGHUP);
    logged(&c, 0, "reloaded its certificates", 1).await;
    let new = serial_of(&rotated);
    assert_ne!(new, old);
    assert_eq!(served_serial(&addr, &ca_pem).await, new, "a new connection did not get the new certificate");
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
    assert_eq!(served_serial(&addr, &ca_pem).await, new);
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
