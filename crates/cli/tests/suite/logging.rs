//! Log formats of the long-running commands: `BATON_LOG_FORMAT=json` gives one JSON object
//! per line that a log collector can read; an unknown format is refused by name.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn baton() -> Command {
    Command::new(env!("CARGO_BIN_EXE_baton"))
}

/// Kills the child when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_replica_logs_json_lines_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let child = baton()
        .args(["server", "--insecure", "--id", "1", "--listen", &addr, "--bootstrap", &format!("1={addr}")])
        .arg("--data-dir")
        .arg(dir.path())
        .env("BATON_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    // The first line is the start-up line; every line up to it must be JSON.
    for line in stderr.lines().take(50) {
        let line = line.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if v["fields"]["message"] == "baton server starting" {
            assert_eq!(v["level"], "INFO", "{line}");
            assert_eq!(v["fields"]["id"], 1, "{line}");
            assert!(v["timestamp"].is_string(), "{line}");
            return;
        }
    }
    panic!("no start-up line among the first 50 log lines");
}

#[test]
fn an_unknown_log_format_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for command in
        [vec!["server", "--insecure", "--id", "1"], vec!["agent", "--insecure", "--run-as-self", "--gpus", "1"]]
    {
        let out =
            baton().args(&command).arg("--data-dir").arg(dir.path()).env("BATON_LOG_FORMAT", "xml").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {err}");
        assert!(err.contains("BATON_LOG_FORMAT=\"xml\"") && err.contains("`json`"), "{command:?}: {err}");
    }
}

/// `BATON_LOG_SPANS=1` logs each step of a decision path as its span closes, with its
/// fields: here the commit of a queue, as one JSON line.
#[test]
fn decision_path_spans_are_logged_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let child = baton()
        .args(["server", "--insecure", "--auth", "none", "--id", "1", "--listen", &addr])
        .args(["--bootstrap", &format!("1={addr}"), "--data-dir"])
        .arg(dir.path())
        .env("BATON_LOG_FORMAT", "json")
        .env("BATON_LOG_SPANS", "1")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut made = false;
    for _ in 0..50 {
        let out =
            baton().args(["queue", "create", "q", "--gpus", "1", "--insecure", "--server", &addr]).output().unwrap();
        if out.status.success() {
            made = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(made, "the queue was never created");
    // Read on a thread: a server that never logs the line must fail the test, not hang it.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if v["span"]["name"] == "commit" && v["span"]["op"] == "CreateQueue" {
            assert_eq!(v["fields"]["message"], "close", "{line}");
            assert!(v["span"]["term"].as_u64().is_some_and(|t| t >= 1), "{line}");
            return;
        }
    }
    panic!("no log line for the commit span of CreateQueue within 10 s of the queue's creation");
}
