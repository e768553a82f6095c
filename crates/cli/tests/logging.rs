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
