//! Elastic gangs from the command line (decisions.md section 13), against a fake server:
//! what `submit --min-replicas` and a job file's `min_replicas` send, `describe` of a gang
//! with its range and its resizes, and what is refused before anything is sent.

use crate::fake;

use baton_proto::v1;
use fake::{Fake, job, run, serve_baton};

#[test]
fn submit_with_min_replicas_sends_the_range_on_the_task() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let args = ["submit", "--server", &server.addr(), "--name", "t", "--queue", "q", "--replicas", "8"];
    let (r, _) = run(&[&args[..], &["--min-replicas", "2", "--", "python", "train.py"]].concat());
    r.unwrap();
    let task = fake.state().submits[0].spec.as_ref().unwrap().tasks[0].clone();
    assert_eq!((task.replicas, task.min_replicas), (8, Some(2)));
}

#[test]
fn a_job_file_names_min_replicas_on_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    let text = "name: t\nqueue: q\ntasks:\n  - {name: ps, resources: {cpu: 1}}\n  \
                - {name: worker, replicas: 8, min_replicas: 3, resources: {gpu: 1}}\ncommand: [python, train.py]\n";
    std::fs::write(&path, text).unwrap();
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let (r, _) = run(&["submit", "--server", &server.addr(), "-f", path.to_str().unwrap()]);
    r.unwrap();
    let tasks = fake.state().submits[0].spec.as_ref().unwrap().tasks.clone();
    assert_eq!(tasks.iter().map(|t| t.min_replicas).collect::<Vec<_>>(), vec![None, Some(3)]);
}

#[test]
fn a_bad_range_is_refused_before_anything_is_sent() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    for (min, says) in [("9", "--min-replicas: 9 is above --replicas (8)"), ("0", "--min-replicas: must be at least 1")]
    {
        let args = ["submit", "--server", &server.addr(), "--name", "t", "--queue", "q", "--replicas", "8"];
        let (r, _) = run(&[&args[..], &["--min-replicas", min, "--", "true"]].concat());
        let e = r.unwrap_err().to_string();
        assert!(e.contains(says), "{min}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, "name: t\nqueue: q\nreplicas: 4\nmin_replicas: 6\nresources: {gpu: 1}\ncommand: [x]\n")
        .unwrap();
    let (r, _) = run(&["submit", "--server", &server.addr(), "-f", path.to_str().unwrap()]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("min_replicas") && e.contains("6 is above replicas (4)"), "{e}");
    assert!(fake.state().submits.is_empty(), "nothing was sent");
}

#[test]
fn describe_shows_the_range_and_the_resizes() {
    let fake = Fake::with(|s| {
        let mut g = job(9, "train", "q", "Running", &[("n1", &[0, 1])]);
        let spec = g.spec.as_mut().unwrap();
        spec.tasks[0].replicas = 2;
        spec.tasks[0].min_replicas = Some(2);
        g.elastic_max_replicas = Some(8);
        let event = |at_ms, message: &str| v1::Event {
            at_ms,
            job: "train".into(),
            kind: v1::EventKind::Resized.into(),
            message: message.into(),
            ..Default::default()
        };
        g.events = vec![
            event(1_000, "started with 8 of 8 replicas (minimum 2)"),
            v1::Event {
                at_ms: 2_000,
                kind: v1::EventKind::Preempted.into(),
                message: "by urgent".into(),
                ..Default::default()
            },
            event(3_000, "resized from 8 to 2 of 8 replicas (minimum 2)"),
        ];
        s.jobs.push(g);
    });
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["describe", "train", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("main: 2 x (gpu 4); elastic: 2 to 8 replicas"), "{out}");
    assert!(out.contains("Resizes:") && out.contains("resized from 8 to 2 of 8 replicas (minimum 2) at"), "{out}");
    assert!(!out.contains("Events:"), "other events only with --events: {out}");
    let (r, out) = run(&["describe", "train", "--events", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Events:") && out.contains("by urgent"), "{out}");
}
