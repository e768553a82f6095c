//! Accounting from the command line (issue 34), against a fake server: what `baton history`
//! asks and prints as a table, CSV and JSON; what `baton usage` asks and prints; `cluster
//! set --accounting-retention`; and bad flags refused by name before anything is sent.

use crate::fake;

use baton_proto::v1;
use fake::{Fake, parse_error, run, serve_baton};

const DAY_MS: u64 = 86_400_000;
const NOV_1_MS: u64 = 1_793_491_200_000;

fn record(seq: u64, name: &str, ending: &str) -> v1::AttemptRecord {
    v1::AttemptRecord {
        seq,
        job: seq,
        name: name.into(),
        attempt: 1,
        user: "alice".into(),
        queue: "lab".into(),
        pool: "default".into(),
        nodes: vec!["n1".into(), "n2".into()],
        gpus: 4,
        resources: Some(v1::Resources { amounts: [("gpu".to_string(), 4)].into() }),
        start_ms: NOV_1_MS,
        end_ms: NOV_1_MS + 90 * 60_000,
        ending: ending.into(),
        exit_code: (ending == "succeeded").then_some(0),
        preempted_by: if ending == "preempted" { "urgent".into() } else { String::new() },
        detail: "said \"bye\", then left".into(),
        gpu_ms: 4 * 90 * 60_000,
        lost_ms: if ending == "preempted" { 20 * 60_000 } else { 0 },
    }
}

fn with_records() -> Fake {
    Fake::with(|s| {
        s.history = v1::HistoryReply {
            records: vec![record(1, "train", "succeeded"), record(2, "sweep-3", "preempted")],
            more: true,
            ..Default::default()
        }
    })
}

#[test]
fn history_asks_for_the_range_and_prints_a_table() {
    let fake = with_records();
    let server = serve_baton(fake.clone());
    let args =
        ["history", "--server", &server.addr(), "--user", "alice", "--since", "2026-11-01T00:00:00Z", "--limit", "2"];
    let (r, out) = run(&args);
    r.unwrap();
    let asked = fake.state().history_asked[0].clone();
    assert_eq!(
        (asked.user.as_deref(), asked.since_ms, asked.until_ms, asked.limit),
        (Some("alice"), NOV_1_MS, None, 2)
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("JOB") && lines[0].contains("GPU-HOURS") && lines[0].contains("ENDED"), "{out}");
    assert!(lines[1].contains("train") && lines[1].contains("6.00") && lines[1].contains("succeeded"), "{out}");
    assert!(lines[2].contains("preempted by urgent") && lines[2].contains("20m00s"), "{out}");
    assert!(out.contains("the newest 2; older ones matched too"), "{out}");
}

#[test]
fn history_prints_csv_and_json() {
    let fake = with_records();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["history", "--server", &server.addr(), "-o", "csv", "--state", "preempted", "--since", "30d"]);
    r.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("seq,job,name,attempt,user,queue,pool,nodes,gpus"), "{out}");
    assert!(lines[1].starts_with("1,1,train,1,alice,lab,default,n1 n2,4,gpu 4,2026-11-01T00:00:00.000Z"), "{out}");
    assert!(lines[1].ends_with(",6.000000,0,\"said \"\"bye\"\", then left\""), "{out}");
    assert_eq!(fake.state().history_asked[0].state.as_deref(), Some("preempted"));
    let (r, out) = run(&["history", "--server", &server.addr(), "-o", "json"]);
    r.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["records"][1]["preempted_by"], "urgent");
}

#[test]
fn an_empty_history_says_why() {
    let fake = Fake::with(|s| s.history.note = "no records of user carol in this time range that you may see".into());
    let server = serve_baton(fake);
    let (r, out) = run(&["history", "--server", &server.addr(), "--user", "carol"]);
    r.unwrap();
    assert_eq!(out.trim(), "no records of user carol in this time range that you may see");
}

#[test]
fn usage_sums_gpu_hours_by_what_is_asked() {
    let fake = Fake::with(|s| {
        s.totals = v1::UsageTotalsReply {
            rows: vec![v1::UsageTotal {
                key: "lab".into(),
                gpu_ms: 36 * 3_600_000,
                attempts: 5,
                jobs: 3,
                preempted_gpu_ms: 6 * 3_600_000,
                lost_gpu_ms: 3_600_000 / 2,
                running: 1,
            }],
            since_ms: NOV_1_MS,
            until_ms: NOV_1_MS + 30 * DAY_MS,
            note: String::new(),
        }
    });
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["usage", "--server", &server.addr(), "--by", "queue", "--since", "2026-11-01T00:00:00Z"]);
    r.unwrap();
    let asked = fake.state().totals_asked[0].clone();
    assert_eq!((asked.by.as_str(), asked.since_ms), ("queue", NOV_1_MS));
    assert!(out.starts_with("from 2026-11-01T00:00:00.000Z to 2026-12-01T00:00:00.000Z"), "{out}");
    let row = out.lines().find(|l| l.starts_with("lab")).expect("a row for lab");
    for cell in ["36.00", "3", "5", "1", "6.00", "0.50"] {
        assert!(row.split_whitespace().any(|c| c == cell), "{cell} in {row}");
    }
    let (r, _) = run(&["usage", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(fake.state().totals_asked[1].by, "user", "by user unless asked");
}

#[test]
fn retention_is_sent_and_bad_flags_are_refused_by_name_before_anything_is_sent() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let (r, out) = run(&["cluster", "set", "--server", &addr, "--accounting-retention", "90d"]);
    r.unwrap();
    assert_eq!(fake.state().accounting_sets[0].retention_ms, 90 * DAY_MS);
    assert!(out.contains("accounting records are now kept for 90d00h"), "{out}");
    let e = parse_error(&["cluster", "set", "--server", &server.addr(), "--accounting-retention", "forever"]);
    assert!(e.contains("--accounting-retention"), "{e}");
    for (args, says) in [
        (vec!["history", "--since", "last week"], "--since \"last week\""),
        (vec!["history", "--since", "1d", "--until", "2d"], "--until"),
        (vec!["history", "--limit", "0"], "--limit must be from 1 to 10000"),
        (vec!["usage", "--since", "someday"], "--since \"someday\""),
        (vec!["usage", "--user", "alice"], "baton history"),
    ] {
        let mut full = args.clone();
        full.extend(["--server", addr.as_str()]);
        let (r, _) = run(&full);
        let e = r.unwrap_err().to_string();
        assert!(e.contains(says), "{args:?}: {e}");
    }
    let st = fake.state();
    assert!(st.history_asked.is_empty() && st.totals_asked.is_empty(), "nothing was asked");
}
