//! `baton cluster info` against a real replica served with `--insecure` says so: the
//! transport line reads INSECURE, never "mutual TLS". (A cluster on mutual TLS says "mutual
//! TLS" and never INSECURE: `dev.rs`, `dev_cluster_speaks_only_mutual_tls`.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// Stops the replica when the test ends, however it ends.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now (the kernel's pick, released for the replica to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn cluster_info_of_a_replica_served_with_insecure_says_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let (api, peer) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let data = dir.path().join("r1");
    let bootstrap = format!("1={api}/{peer}");
    let _replica = Kill(
        Command::new(BATON)
            .args(["server", "--id", "1", "--listen", &api, "--peer-listen", &peer, "--insecure", "--auth", "none"])
            .args(["--data-dir", data.to_str().unwrap(), "--bootstrap", &bootstrap])
            .env_remove("BATON_TLS_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Waits for the replica to serve; the deadline only bounds a replica that never does.
    let deadline = Instant::now() + Duration::from_secs(60);
    let info = loop {
        let out = Command::new(BATON)
            .args(["cluster", "info", "--insecure", "--timeout", "2s", "--server", &api])
            .env_remove("BATON_TLS_DIR")
            .output()
            .unwrap();
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(Instant::now() < deadline, "the replica never answered: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(info.contains("transport: INSECURE (plain TCP, no certificates"), "{info}");
    assert!(!info.contains("mutual TLS"), "{info}");
    tls_client_is_told_the_replica_is_plain(&api, dir.path());
}

/// A client with certificates, against this plain replica, is told to pass --insecure
/// instead of "received corrupt message of type InvalidContentType".
fn tls_client_is_told_the_replica_is_plain(api: &str, dir: &std::path::Path) {
    let tls = dir.join("tls");
    let made = Command::new(BATON)
        .args(["tls", "init", "--dir", tls.to_str().unwrap(), "--replicas", "1", "--clients", "c"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let out = Command::new(BATON)
        .args(["cluster", "info", "--timeout", "5s", "--server", api])
        .env("BATON_TLS_DIR", tls.join("client-c"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not speak TLS") && err.contains("--insecure"), "{err}");
}
