//! The real `baton` binary against a fake replica: flags, exit codes, and what it prints on
//! stdout and stderr.

use crate::fake;

use fake::{Fake, baton, dead_addr, job, serve_baton};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn submit_by_flags_sends_the_job_the_flags_describe() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let out = baton(&[
        "submit",
        "--server",
        &server.addr(),
        "--name",
        "train-1",
        "--queue",
        "team-a",
        "--priority",
        "-5",
        "--gpus",
        "4",
        "--cpu",
        "2.5",
        "--memory",
        "64Gi",
        "--replicas",
        "2",
        "--pool",
        "a100",
        "--pool",
        "h100",
        "--topology",
        "rack",
        "--preemption-mode",
        "suspend",
        "--grace",
        "2m",
        "--min-runtime",
        "30s",
        "--time-limit",
        "1h30m",
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        "--checkpoint-signal",
        "SIGUSR1",
        "--request-id",
        "req-1",
        "--",
        "python",
        "train.py",
        "--lr",
        "3e-4",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "submitted job train-1 (id 1)\n");
    assert!(text(&out.stderr).contains("request id: req-1"), "{}", text(&out.stderr));
    let s = fake.state();
    assert_eq!(s.submits.len(), 1);
    assert_eq!(s.submits[0].request_id, "req-1");
    let spec = s.submits[0].spec.as_ref().unwrap();
    assert_eq!((spec.name.as_str(), spec.queue.as_str()), ("train-1", "team-a"));
    assert_eq!((spec.priority_class.as_str(), spec.priority_value), ("", Some(-5)));
    assert_eq!(spec.tasks.len(), 1);
    assert_eq!(spec.tasks[0].replicas, 2);
    let r = &spec.tasks[0].resources.as_ref().unwrap().amounts;
    // CPUs travel in thousandths.
    assert_eq!((r["gpu"], r["cpu"], r["memory"]), (4, 2500, 64 << 30));
    assert_eq!(spec.pools, vec!["a100", "h100"]);
    assert_eq!(
        (spec.topology(), spec.preemption_mode()),
        (baton_proto::v1::Topology::Rack, baton_proto::v1::PreemptionMode::Suspend)
    );
    assert_eq!((spec.grace_ms, spec.min_runtime_ms), (Some(120_000), 30_000));
    assert_eq!(spec.time_limit_ms, Some(5_400_000));
    assert_eq!(spec.command, vec!["python", "train.py", "--lr", "3e-4"]);
    assert_eq!((spec.env["A"].as_str(), spec.env["B"].as_str()), ("1", "x=y"));
    assert_eq!(spec.checkpoint_signal, "SIGUSR1");
}

#[test]
fn submit_defaults_are_left_to_the_server_and_retry_is_idempotent() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let args =
        ["submit", "--server", &server.addr(), "--name", "a", "--queue", "q", "--request-id", "same", "--", "true"];
    let first = baton(&args);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let again = baton(&args);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), "job a already submitted (same request id)\n");
    let s = fake.state();
    let spec = s.submits[0].spec.as_ref().unwrap();
    assert_eq!((spec.priority_class.as_str(), spec.priority_value, spec.grace_ms), ("", None, None));
    // The preemption mode and the checkpoint signal too: the server fills them.
    assert_eq!(
        (spec.preemption_mode(), spec.checkpoint_signal.as_str()),
        (baton_proto::v1::PreemptionMode::Unspecified, "")
    );
    assert_eq!(
        (spec.topology(), spec.time_limit_ms, spec.pools.len()),
        (baton_proto::v1::Topology::Unspecified, None, 0)
    );
    assert_eq!(spec.tasks[0].resources.as_ref().unwrap().amounts["gpu"], 1);
}

#[test]
fn a_bad_job_file_names_file_line_and_field_and_sends_nothing() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, "name: a\nqueue: q\nresources: {gpu: 4x}\ncommand: [python]\n").unwrap();
    let out = baton(&["submit", "--server", &server.addr(), "-f", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("job.yaml:3: field resources.gpu: bad quantity \"4x\""), "{err}");
    assert!(fake.state().calls.is_empty(), "nothing is sent for a bad file");
}

#[test]
fn unknown_job_says_so_and_where_to_look() {
    let fake = Fake::with(|s| s.jobs.push(job(1, "train-1", "q", "Pending", &[])));
    let server = serve_baton(fake.clone());
    let out = baton(&["describe", "ghost", "--server", &server.addr()]);
    assert!(!out.status.success());
    assert_eq!(text(&out.stderr), "error: unknown job \"ghost\"; see baton list\n");
    let out = baton(&["cancel", "ghost", "--server", &server.addr()]);
    assert_eq!(text(&out.stderr), "error: unknown job \"ghost\"; see baton list\n");
}

#[test]
fn unreachable_servers_are_listed_with_what_to_check() {
    let (a, b) = (dead_addr(), dead_addr());
    let out = baton(&["list", "--server", &format!("{a},{b}")]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(&format!("tried {a}, {b}")), "{err}");
    assert!(err.contains("check --server (or BATON_SERVER) and that `baton server` runs"), "{err}");
}

#[test]
fn server_list_comes_from_the_environment() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["list"])
        .env("BATON_SERVER", format!("{},{}", dead_addr(), server.addr()))
        .env("BATON_INSECURE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no jobs match\n");
}

#[test]
fn bad_flags_are_refused_before_sending() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    for (args, needle) in [
        (vec!["submit", "--server", &addr, "--queue", "q", "--", "x"], "--name is required"),
        (vec!["submit", "--server", &addr, "--name", "a", "--queue", "q"], "no command to run"),
        (vec!["submit", "--server", &addr, "--name", "a b", "--queue", "q", "--", "x"], "--name:"),
        (vec!["submit", "--server", &addr, "--name", "a", "--queue", "q", "--memory", "1.5", "--", "x"], "--memory:"),
        (
            vec!["submit", "--server", &addr, "--name", "a", "--queue", "q", "--cpu", "0.0001", "--", "x"],
            "--cpu: bad quantity \"0.0001\" for cpu",
        ),
        (
            vec!["submit", "--server", &addr, "--name", "a", "--queue", "q", "--grace", "soon", "--", "x"],
            "bad duration",
        ),
        (vec!["list", "--server", &addr, "--state", "Sleeping"], "\"Sleeping\" is not one of Pending, Running"),
    ] {
        let out = baton(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(text(&out.stderr).contains(needle), "{args:?}: {}", text(&out.stderr));
    }
    assert!(fake.state().calls.is_empty());
}

/// Section 10's levels from the command line: `--topology required=...,preferred=...` and a
/// job file's `topology: {required, preferred}` travel as the two fields; a bad one is
/// refused before anything is sent; `cluster set --topology-levels` declares the levels.
#[test]
fn topology_levels_travel_from_flags_and_job_files_and_bad_ones_send_nothing() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let base = ["submit", "--server", &server.addr(), "--name", "g", "--queue", "q", "--replicas", "2"];
    let flags = [&base[..], &["--topology", "required=nvlink,preferred=rack", "--", "true"]].concat();
    let out = baton(&flags);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.yaml");
    let yaml = "name: h\nqueue: q\nresources: {gpu: 4}\nreplicas: 2\ntopology: {required: zone, preferred: nvlink}\ncommand: [\"true\"]\n";
    std::fs::write(&file, yaml).unwrap();
    let out = baton(&["submit", "--server", &server.addr(), "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = fake.state();
    let levels = |i: usize| {
        let spec = s.submits[i].spec.as_ref().unwrap();
        (spec.topology(), spec.topology_required.clone(), spec.topology_preferred.clone())
    };
    assert_eq!(levels(0), (baton_proto::v1::Topology::Unspecified, "nvlink".into(), "rack".into()));
    assert_eq!(levels(1), (baton_proto::v1::Topology::Unspecified, "zone".into(), "nvlink".into()));
    drop(s);

    let bad = baton(&[&base[..], &["--topology", "preferred=node", "--", "true"]].concat());
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("--topology: preferred: node"), "{}", text(&bad.stderr));
    assert_eq!(fake.state().submits.len(), 2, "nothing was sent");

    let out = baton(&["cluster", "set", "--server", &server.addr(), "--topology-levels", "nvlink,rack,zone"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "topology levels are now nvlink, rack, zone\n");
    assert_eq!(fake.state().topology_sets[0].levels, ["nvlink", "rack", "zone"]);
    let bad = baton(&["cluster", "set", "--server", &server.addr(), "--topology-levels", "NVLink"]);
    assert!(text(&bad.stderr).contains("--topology-levels: bad topology level \"NVLink\""), "{}", text(&bad.stderr));
}

/// `--resources NAME=QTY` (decisions.md section 11's MIG slices): a job that asks slices asks
/// no whole GPU unless `--gpus` says so; a resource with a flag of its own, a bad name or one
/// given twice is refused before anything is sent.
#[test]
fn resources_travel_from_the_flag_and_bad_ones_send_nothing() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let base = ["submit", "--server", &server.addr(), "--name", "infer", "--queue", "q"];
    let out = baton(&[&base[..], &["--resources", "mig-1g.10gb=2,mig-3g.40gb=1", "--", "true"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = baton(&[&base[..], &["--gpus", "1", "--resources", "mig-1g.10gb=1", "--", "true"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = fake.state();
    let amounts = |i: usize| s.submits[i].spec.as_ref().unwrap().tasks[0].resources.as_ref().unwrap().amounts.clone();
    let first = amounts(0);
    assert_eq!((first.get("mig-1g.10gb"), first.get("mig-3g.40gb"), first.get("gpu")), (Some(&2), Some(&1), None));
    assert_eq!((amounts(1).get("mig-1g.10gb"), amounts(1).get("gpu")), (Some(&1), Some(&1)));
    drop(s);
    for (flag, says) in [
        ("gpu=2", "--resources \"gpu=2\": give gpu with --gpus"),
        ("mig 1g=1", "--resources \"mig 1g=1\": bad resource name"),
        ("mig-1g.10gb", "expected NAME=QTY"),
        ("mig-1g.10gb=1,mig-1g.10gb=2", "mig-1g.10gb is given twice"),
        ("mig-1g.10gb=0.5", "bad quantity"),
    ] {
        let bad = baton(&[&base[..], &["--resources", flag, "--", "true"]].concat());
        assert!(!bad.status.success(), "{flag}");
        assert!(text(&bad.stderr).contains(says), "{flag}: {}", text(&bad.stderr));
    }
    assert_eq!(fake.state().submits.len(), 2, "nothing was sent");
}
