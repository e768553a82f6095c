//! `baton sim trace`, `baton sim gen-trace` and `--report` through the real binary.

use std::process::{Command, Output};

fn baton(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton")).args(args).output().expect("baton runs")
}

const CLUSTER: &str = "nodes:\n  - {name: \"n[1-2]\", resources: {gpu: 8}}\nqueues:\n  - {name: a, quota: {gpu: 8}}\n  - {name: b, quota: {gpu: 8}}\n";

#[test]
fn a_generated_trace_runs_and_writes_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, trace, page) = (dir.path().join("c.yaml"), dir.path().join("t.csv"), dir.path().join("r.html"));
    std::fs::write(&cluster, CLUSTER).unwrap();
    let generated = baton(&["sim", "gen-trace", "--jobs", "50", "--seed", "3", "--queues", "a,b", "--gpus", "16"]);
    assert!(generated.status.success(), "{}", String::from_utf8_lossy(&generated.stderr));
    assert_eq!(
        generated.stdout,
        baton(&["sim", "gen-trace", "--jobs", "50", "--seed", "3", "--queues", "a,b", "--gpus", "16"]).stdout
    );
    std::fs::write(&trace, &generated.stdout).unwrap();
    let (c, t, p) = (cluster.to_str().unwrap(), trace.to_str().unwrap(), page.to_str().unwrap());
    let out = baton(&["sim", "trace", "--cluster", c, "--trace", t, "-o", "json", "--report", p]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["jobs"], 50);
    assert_eq!(v["summary"]["finished"], 50);
    assert_eq!(v["queues"].as_array().unwrap().len(), 2);
    assert!(std::fs::read_to_string(&page).unwrap().contains("data-series=\"a quota\""));
    assert!(dir.path().join("r-wait.svg").exists());
}

#[test]
fn a_bad_row_is_refused_naming_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, trace) = (dir.path().join("c.yaml"), dir.path().join("t.csv"));
    std::fs::write(&cluster, CLUSTER).unwrap();
    let csv = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval\n0,a,train,1,1,60,,\n5,a,train,one,1,60,,\n";
    std::fs::write(&trace, csv).unwrap();
    let out = baton(&["sim", "trace", "--cluster", cluster.to_str().unwrap(), "--trace", trace.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("t.csv:3: column 4 (gpus): bad quantity \"one\""), "{err}");
    let out =
        baton(&["sim", "trace", "--cluster", cluster.to_str().unwrap(), "--generate", "5", "--reserve-after", "soon"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither whole seconds nor `never`"));
}

/// `baton sim gen-trace ... | head -1`: the reader goes away after one line; baton ends by
/// SIGPIPE, as other Unix tools do, instead of panicking in `print!` (it did).
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["sim", "gen-trace", "--jobs", "200000", "--seed", "1", "--queues", "a", "--gpus", "64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {err}", out.status);
}
