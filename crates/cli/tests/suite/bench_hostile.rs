//! `baton bench hostile` end to end, briefly: the dev cluster under random and maximal
//! messages from an authenticated agent and user (issue 39's fuzzing run). The figure is in
//! BENCHMARKS.md; this checks that the command works and that nothing of the cluster died or
//! panicked, which the command itself fails on.

use std::process::Command;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

#[test]
fn hostile_callers_kill_and_panic_nothing() {
    // Below Linux's ephemeral range and apart from the other tests' ranges (dev 10,000-20,000,
    // e2e 20,000-29,700, the dashboard 30,200-32,280): six ports, metrics from base + 100.
    let base = 5_000 + (std::process::id() % 500) as u16 * 6;
    let out = Command::new(BATON)
        .args(["bench", "hostile", "--seconds", "5", "--port", &base.to_string()])
        .output()
        .expect("baton runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "baton bench hostile failed:\n{text}\n{err}");
    for line in ["hostile agents:", "hostile users:", "nodes declared lost:", "honest jobs:", "panics in the logs: 0"] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    assert!(text.contains("    OK "), "no hostile call was taken at all, so nothing reached the state:\n{text}");
}
