//! Usage over time and per-user limits from the command line (decisions.md section 12),
//! against a fake server: what `cluster set --usage-half-life/--usage-weights` and `queue
//! update --max-per-user` send, what `usage --decayed` prints, and what is refused before
//! anything is sent.

use crate::fake;

use baton_proto::v1;
use fake::{Fake, parse_error, run, serve_baton};

#[test]
fn cluster_set_sends_the_half_life_and_the_weights() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let args =
        ["cluster", "set", "--server", &server.addr(), "--usage-half-life", "7d", "--usage-weights", "gpu=1,cpu=0.25"];
    let (r, _) = run(&args);
    r.unwrap();
    let sent = fake.state().usage_sets.clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].half_life_ms, Some(7 * 86_400_000));
    assert_eq!(sent[0].weights_milli.get("cpu"), Some(&250));
    let (r, _) = run(&["cluster", "set", "--server", &server.addr(), "--usage-half-life", "off"]);
    r.unwrap();
    let last = fake.state().usage_sets.last().cloned().unwrap();
    assert_eq!((last.half_life_ms, last.weights_milli.is_empty()), (Some(0), true), "off is 0; weights kept");
}

#[test]
fn bad_usage_settings_are_refused_naming_the_flag() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    for (flag, value, says) in [
        ("--usage-half-life", "soon", "soon"),
        ("--usage-weights", "gpu", "RESOURCE=WEIGHT"),
        ("--usage-weights", "gpu=0.1234", "at most 3 decimals"),
    ] {
        let e = parse_error(&["cluster", "set", "--server", &server.addr(), flag, value]);
        assert!(e.contains(flag) && e.contains(says), "{flag} {value}: {e}");
    }
    assert!(fake.state().usage_sets.is_empty(), "nothing was sent");
}

#[test]
fn queue_update_max_per_user_sends_the_limit_alone() {
    let fake = Fake::with(|s| {
        s.queues = vec![v1::QueueUsage {
            queue: Some(v1::Queue { name: "lab".into(), ..Default::default() }),
            ..Default::default()
        }]
    });
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["queue", "update", "lab", "--server", &server.addr(), "--max-per-user", "gpu=8,cpu=16"]);
    r.unwrap();
    assert!(out.contains("queue lab: max_per_user cpu 16, gpu 8"), "{out}");
    let st = fake.state();
    assert!(st.updated_queues.is_empty(), "the queue itself did not change");
    let limit = st.user_limits[0].limit.clone().unwrap();
    assert_eq!((st.user_limits[0].queue.as_str(), limit.amounts["gpu"], limit.amounts["cpu"]), ("lab", 8, 16_000));
    drop(st);
    let (r, _) = run(&["queue", "update", "lab", "--server", &server.addr(), "--max-per-user", "none"]);
    r.unwrap();
    assert!(fake.state().user_limits[1].limit.as_ref().unwrap().amounts.is_empty(), "none sends an empty limit");
    let e = parse_error(&["queue", "update", "lab", "--server", &server.addr(), "--max-per-user", "gpu=x"]);
    assert!(e.contains("--max-per-user") && e.contains("bad quantity"), "{e}");
}

#[test]
fn usage_decayed_prints_the_heaviest_first_and_sums_per_user() {
    let row = |queue: &str, user: &str, gpu_s: f64| v1::UsageRow {
        queue: queue.into(),
        user: user.into(),
        usage: [("gpu".to_string(), gpu_s)].into(),
        weighted: gpu_s,
        held: Some(v1::Resources { amounts: [("gpu".to_string(), 2)].into() }),
    };
    let fake = Fake::with(|s| {
        s.usage = v1::UsageReply {
            settings: Some(v1::UsageSettings {
                half_life_ms: Some(604_800_000),
                weights_milli: [("gpu".to_string(), 1000)].into(),
            }),
            at_ms: 1,
            rows: vec![row("a", "alice", 3_600.0), row("b", "alice", 7_200.0), row("a", "bob", 36_000.0)],
        }
    });
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["usage", "--decayed", "--server", &server.addr()]);
    r.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("QUEUE") && lines[1].contains("bob") && lines[1].contains("10.00h"), "{out}");
    let (r, out) = run(&["usage", "--decayed", "--by", "user", "--server", &server.addr()]);
    r.unwrap();
    let alice = out.lines().find(|l| l.contains("alice")).unwrap();
    assert!(alice.contains("3.00h") && alice.contains("gpu 4"), "summed over both queues: {out}");
    let (r, _) = run(&["usage", "--by", "pair", "--server", &server.addr()]);
    assert!(r.unwrap_err().to_string().contains("--by pair is for --decayed"));
}

#[test]
fn a_queue_files_max_per_user_is_set_after_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.yaml");
    std::fs::write(&path, "name: lab\nquota: {gpu: 16}\nmax_per_user: {gpu: 8}\n").unwrap();
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["queue", "create", "-f", path.to_str().unwrap(), "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("queue lab: max_per_user gpu 8"), "{out}");
    let st = fake.state();
    assert_eq!(st.calls.iter().filter(|c| *c == "CreateQueue" || *c == "SetUserLimit").count(), 2, "{:?}", st.calls);
    assert_eq!(st.user_limits[0].limit.as_ref().unwrap().amounts["gpu"], 8);
}
