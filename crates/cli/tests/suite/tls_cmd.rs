//! `baton tls ca create` and `baton tls cert create`: the files they make, the identity the
//! certificates carry (read back as the services read it), and their refusals.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use baton_proto::tls::{PeerId, Role, TlsFiles};

const BATON: &str = env!("CARGO_BIN_EXE_baton");

fn baton(args: &[&str]) -> Output {
    Command::new(BATON).args(args).output().expect("baton runs")
}

fn ok(args: &[&str]) -> String {
    let out = baton(args);
    assert!(out.status.success(), "baton {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(args: &[&str]) -> String {
    let out = baton(args);
    assert!(!out.status.success(), "baton {args:?} should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn ca_create_writes_a_certificate_and_a_private_key_readable_by_its_owner_only() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    let pem = std::fs::read_to_string(ca.join("ca.pem")).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(std::fs::read_to_string(ca.join("ca.key")).unwrap().contains("PRIVATE KEY"));
    assert_eq!(mode(&ca.join("ca.key")), 0o600);
}

#[test]
fn ca_create_refuses_to_overwrite_and_leaves_the_old_ca_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    let before = std::fs::read(ca.join("ca.key")).unwrap();
    let err = refused(&["tls", "ca", "create", "--dir", s(&ca)]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(ca.join("ca.key")).unwrap(), before);
}

#[test]
fn each_role_gets_a_certificate_whose_identity_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    for (flag, value, role) in
        [("--server", "2", Role::Replica), ("--agent", "gpu-7", Role::Agent), ("--client", "alice", Role::Client)]
    {
        let out = tmp.path().join(format!("{flag}-{value}"));
        ok(&["tls", "cert", "create", flag, value, "--ca-dir", s(&ca), "--out-dir", s(&out)]);
        let files = TlsFiles::load(&out).unwrap();
        assert_eq!(files.own, PeerId { role, name: value.to_string() });
        assert_eq!(std::fs::read(out.join("ca.pem")).unwrap(), std::fs::read(ca.join("ca.pem")).unwrap());
        assert_eq!(mode(&out.join("key.pem")), 0o600);
        let shown = ok(&["tls", "cert", "show", "--dir", s(&out)]);
        assert_eq!(shown.trim(), format!("role={role} name={value}"));
    }
}

/// An agent's certificate can fix its node's pool, rack and the most of each resource (the
/// gateway holds the node to it: `crates/server/tests/suite/tls.rs`); the shape reads back in the
/// resources' smallest units, and a wrong one is refused naming what is wrong.
#[test]
fn an_agent_certificate_fixes_its_nodes_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    let out = tmp.path().join("agent-g1");
    let (ca_dir, out_dir) = (s(&ca), s(&out));
    let args = ["--ca-dir", ca_dir, "--out-dir", out_dir, "--pool", "h100", "--rack", "r4"];
    ok(&[&["tls", "cert", "create", "--agent", "g1"][..], &args, &["--max", "gpu=8,cpu=64,memory=1Gi"]].concat());
    let shown = ok(&["tls", "cert", "show", "--dir", out_dir]);
    assert_eq!(shown.trim(), "role=agent name=g1 shape=pool=h100;rack=r4;cpu=64000;gpu=8;memory=1073741824");
    let der = baton_proto::tls::first_cert_der(&std::fs::read_to_string(out.join("cert.pem")).unwrap()).unwrap();
    let shape = baton_proto::tls::shape_of(&der).unwrap().expect("a shape");
    assert_eq!((shape.pool.as_deref(), shape.max["gpu"]), (Some("h100"), 8));

    let other_dir = tmp.path().join("other");
    let other = s(&other_dir);
    // An agent certificate for g2 with one more flag and its value: refused, naming why.
    let g2_refused = |flag: &str, value: &str| {
        refused(&["tls", "cert", "create", "--agent", "g2", "--ca-dir", ca_dir, "--out-dir", other, flag, value])
    };
    let err = g2_refused("--max", "gpu=eight");
    assert!(err.contains("gpu=eight"), "{err}");
    let err = g2_refused("--max", "gpu");
    assert!(err.contains("resource=amount"), "{err}");
    let err =
        refused(&["tls", "cert", "create", "--client", "bob", "--ca-dir", ca_dir, "--out-dir", other, "--pool", "a"]);
    assert!(err.contains("--agent"), "{err}");
    let err = g2_refused("--labels", "zone");
    assert!(err.contains("key=value"), "{err}");
    assert!(!tmp.path().join("other").exists(), "a refused certificate left files");

    // Labels: only those named, with their values; `--labels ''` fixes none at all.
    let labelled = tmp.path().join("agent-g3");
    let args = ["--ca-dir", ca_dir, "--out-dir", s(&labelled), "--labels", "zone=a,nvlink=nvl72-1"];
    ok(&[&["tls", "cert", "create", "--agent", "g3"][..], &args].concat());
    let shown = ok(&["tls", "cert", "show", "--dir", s(&labelled)]);
    assert_eq!(shown.trim(), "role=agent name=g3 shape=labels=fixed;label.nvlink=nvl72-1;label.zone=a");
    let bare = tmp.path().join("agent-g4");
    ok(&["tls", "cert", "create", "--agent", "g4", "--ca-dir", ca_dir, "--out-dir", s(&bare), "--labels", ""]);
    let shown = ok(&["tls", "cert", "show", "--dir", s(&bare)]);
    assert_eq!(shown.trim(), "role=agent name=g4 shape=labels=fixed");
}

#[test]
fn cert_create_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    let out = tmp.path().join("a");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    ok(&["tls", "cert", "create", "--agent", "n1", "--ca-dir", s(&ca), "--out-dir", s(&out)]);
    let before = std::fs::read(out.join("key.pem")).unwrap();
    let err = refused(&["tls", "cert", "create", "--agent", "n2", "--ca-dir", s(&ca), "--out-dir", s(&out)]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(out.join("key.pem")).unwrap(), before);
    assert_eq!(TlsFiles::load(&out).unwrap().own.name, "n1");
}

#[test]
fn cert_create_refuses_a_directory_holding_another_clusters_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca1, ca2, out) = (tmp.path().join("ca1"), tmp.path().join("ca2"), tmp.path().join("out"));
    ok(&["tls", "ca", "create", "--dir", s(&ca1)]);
    ok(&["tls", "ca", "create", "--dir", s(&ca2)]);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(ca1.join("ca.pem"), out.join("ca.pem")).unwrap();
    let err = refused(&["tls", "cert", "create", "--client", "bob", "--ca-dir", s(&ca2), "--out-dir", s(&out)]);
    assert!(err.contains("ca.pem already exists"), "{err}");
    assert!(!out.join("cert.pem").exists());
}

#[test]
fn cert_create_refuses_bad_identities_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    let out = tmp.path().join("out");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    let cases: [(&[&str], &str); 4] = [
        (&["--server", "0"], "--server 0"),
        (&["--agent", "a b"], "--agent"),
        (&["--client", ""], "--client"),
        (&["--client", "c", "--host", "example.org"], "--host"),
    ];
    for (who, wanted) in cases {
        let mut args = vec!["tls", "cert", "create", "--ca-dir", s(&ca), "--out-dir", s(&out)];
        args.extend_from_slice(who);
        let err = refused(&args);
        assert!(err.contains(wanted), "{who:?}: {err}");
    }
    let err = refused(&[
        "tls",
        "cert",
        "create",
        "--client",
        "x",
        "--ca-dir",
        s(&tmp.path().join("nope")),
        "--out-dir",
        s(&out),
    ]);
    assert!(err.contains("ca.pem"), "{err}");
    assert!(!out.exists());
}

#[test]
fn a_tls_dir_missing_its_key_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    let out = tmp.path().join("out");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    ok(&["tls", "cert", "create", "--client", "c", "--ca-dir", s(&ca), "--out-dir", s(&out)]);
    std::fs::remove_file(out.join("key.pem")).unwrap();
    let err = TlsFiles::load(&out).unwrap_err().to_string();
    assert!(err.contains("key.pem"), "{err}");
}

#[test]
fn without_tls_dir_or_insecure_every_command_refuses_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let d = s(tmp.path());
    for args in [
        &["list", "--server", "127.0.0.1:1"][..],
        &["server", "--id", "1", "--listen", "127.0.0.1:0", "--data-dir", d],
        &["agent", "--gpus", "1", "--server", "127.0.0.1:1", "--data-dir", d],
    ] {
        let out =
            Command::new(BATON).args(args).env_remove("BATON_TLS_DIR").env_remove("BATON_INSECURE").output().unwrap();
        assert!(!out.status.success(), "{args:?} ran without choosing a transport");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--tls-dir") && err.contains("--insecure"), "{args:?}: {err}");
    }
}

#[test]
fn a_replica_refuses_a_certificate_made_for_another_replica() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    let r2 = tmp.path().join("r2");
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    ok(&["tls", "cert", "create", "--server", "2", "--ca-dir", s(&ca), "--out-dir", s(&r2)]);
    let data = tmp.path().join("data");
    let out = Command::new(BATON)
        .args(["server", "--id", "1", "--listen", "127.0.0.1:0", "--data-dir", s(&data), "--tls-dir", s(&r2)])
        .env_remove("BATON_INSECURE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--id 1") && err.contains("replica \"2\""), "{err}");
}

#[test]
fn init_makes_every_identity_once_and_keeps_them_on_a_second_run() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("tls");
    let args = ["tls", "init", "--dir", s(&d), "--replicas", "2", "--agents", "gpu-1,gpu-2", "--clients", "admin"];
    ok(&args);
    let wanted = [
        ("replica-1", Role::Replica, "1"),
        ("replica-2", Role::Replica, "2"),
        ("agent-gpu-1", Role::Agent, "gpu-1"),
        ("agent-gpu-2", Role::Agent, "gpu-2"),
        ("client-admin", Role::Client, "admin"),
    ];
    for (sub, role, name) in wanted {
        assert_eq!(TlsFiles::load(&d.join(sub)).unwrap().own, PeerId { role, name: name.into() });
    }
    let key = std::fs::read(d.join("replica-1/key.pem")).unwrap();
    ok(&args);
    assert_eq!(std::fs::read(d.join("replica-1/key.pem")).unwrap(), key, "a second run replaced a key");
    assert!(!d.join("replica-3").exists());
}

/// `baton tls revoke` keeps what the CA's list already holds, and a directory holding the
/// list takes effect: that certificate is refused by `Tls::load`'s own check, another is not.
#[test]
fn revoke_adds_to_the_cas_list_and_refuses_a_certificate_of_another_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, other) = (tmp.path().join("ca"), tmp.path().join("other"));
    ok(&["tls", "ca", "create", "--dir", s(&ca)]);
    ok(&["tls", "ca", "create", "--dir", s(&other)]);
    for (name, ca_dir) in [("a", &ca), ("b", &ca), ("c", &ca), ("x", &other)] {
        let out = tmp.path().join(name);
        ok(&["tls", "cert", "create", "--agent", name, "--ca-dir", s(ca_dir), "--out-dir", s(&out)]);
    }
    let said = ok(&["tls", "revoke", "--ca-dir", s(&ca), "--cert", s(&tmp.path().join("a"))]);
    assert!(said.contains("agent \"a\"") && said.contains("lists 1 certificates"), "{said}");
    let said = ok(&["tls", "revoke", "--ca-dir", s(&ca), "--cert", s(&tmp.path().join("b").join("cert.pem"))]);
    assert!(said.contains("lists 2 certificates"), "the second revocation forgot the first: {said}");
    let err = refused(&["tls", "revoke", "--ca-dir", s(&ca), "--cert", s(&tmp.path().join("x"))]);
    assert!(err.contains("not by this CA"), "{err}");
    // With the list in its directory, a's own certificate no longer loads; c's does.
    for (name, loads) in [("a", false), ("c", true)] {
        let dir = tmp.path().join(name);
        std::fs::copy(ca.join("crl.pem"), dir.join("crl.pem")).unwrap();
        match TlsFiles::load(&dir).and_then(|_| baton_proto::tls::Tls::load(&dir)) {
            Ok(_) => assert!(loads, "{name}: a revoked certificate loaded"),
            Err(e) => {
                assert!(!loads, "{name}: {e}");
                assert!(e.to_string().contains("crl.pem"), "{e}");
            }
        }
    }
}
