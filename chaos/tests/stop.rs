//! `baton-chaos` stopped by a signal tears its clusters down: every process of a run leads
//! a session of its own (so a terminal's Ctrl-C reaches none of them), and a run killed by
//! its signal left its replicas, agents and jobs running for good. Needs the `baton` binary
//! beside `baton-chaos` (`cargo build --bin baton`, which `cargo test --workspace` does).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on a run's clusters coming up (two debug clusters on a loaded machine).
const UP_S: u64 = 180;
/// Bound on the runs' teardown once told to stop.
const DOWN_S: u64 = 60;

fn baton() -> PathBuf {
    let baton = Path::new(env!("CARGO_BIN_EXE_baton-chaos")).with_file_name("baton");
    assert!(baton.is_file(), "{} is missing: cargo build --bin baton", baton.display());
    baton
}

/// Processes other than `baton-chaos` itself whose command line names `dir` (each
/// cluster's directory is under it).
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_str().is_none_or(|n| n.parse::<u32>().is_err()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && !cmdline.split(' ').next().is_some_and(|p| p.ends_with("baton-chaos")) {
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn runs_stopped_by_a_signal_leave_no_process_of_their_clusters() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("runs");
    let mut chaos = Command::new(env!("CARGO_BIN_EXE_baton-chaos"))
        .args(["--runs", "2", "--seed", "3", "--seconds", "600", "--no-partitions", "--no-slow-disks"])
        .args(["--adversarial-percent", "0", "--baton"])
        .arg(baton())
        .arg("--out")
        .arg(&out)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both runs are past their cluster's start once each says whether disks are slowed.
    let deadline = Instant::now() + Duration::from_secs(UP_S);
    let up = |seed: u32| {
        std::fs::read_to_string(out.join(format!("seed-{seed}.log"))).is_ok_and(|l| l.contains("chaos: slow disks"))
    };
    while !(up(3) && up(4)) {
        assert!(Instant::now() < deadline, "the runs' clusters did not come up within {UP_S} s");
        assert!(chaos.try_wait().unwrap().is_none(), "baton-chaos ended before its clusters came up");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!processes_under(tmp.path()).is_empty(), "no cluster process found to outlive the runs");
    // SAFETY: kill signals our own child, not yet reaped.
    unsafe { libc::kill(chaos.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(DOWN_S);
    let status = loop {
        if let Some(status) = chaos.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "baton-chaos did not end within {DOWN_S} s of its SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut said = String::new();
    chaos.stderr.take().unwrap().read_to_string(&mut said).unwrap();
    assert_eq!(status.code(), Some(143), "{said}");
    assert!(said.contains("stopped by SIGTERM"), "{said}");
    let left = processes_under(tmp.path());
    assert!(left.is_empty(), "processes of the stopped runs live on:\n{}", left.join("\n"));
}
