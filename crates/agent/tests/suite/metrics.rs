//! `/metrics` on an agent: after a replica runs, is stopped by its leader, a second one is
//! stopped because the lease ran out, the scrape shows the counts and states that implies.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use baton_proto::v1::Action;
use common::*;

async fn scrape(addr: std::net::SocketAddr) -> BTreeMap<String, f64> {
    let reply = scrape_reply(addr).await;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let types: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("# TYPE ")).collect();
    let helps = body.lines().filter(|l| l.starts_with("# HELP ")).count();
    assert_eq!(types.len(), helps, "every family has HELP and TYPE:\n{body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_exposes_its_replicas_stops_lease_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    gw.grant_lease_ms(800);
    let mut c = config(dir.path(), &[gw.addr]);
    c.metrics_listen = Some("127.0.0.1:0".into());
    let agent = start_agent(c).await;
    let addr = agent.metrics_addr().expect("metrics served");

    let run = assignment(1, 1, Action::Run, "trap 'exit 0' TERM; while :; do sleep 0.02; done");
    gw.set(1, vec![run.clone()]);
    wait_for(5, "one replica running", || (agent_running(&gw) == 1).then_some(())).await;
    let m = scrape(addr).await;
    assert_eq!(m["baton_agent_replicas_running"], 1.0);
    assert!(m["baton_agent_reports_sent_total"] >= 1.0);
    assert!(m["baton_agent_lease_seconds_left"] > 0.0 && m["baton_agent_lease_seconds_left"] <= 0.8);
    assert_eq!(m["baton_agent_lease_expiries_total"], 0.0);

    let mut stop = run.clone();
    stop.action = Action::Stop as i32;
    gw.set(1, vec![stop]);
    wait_for(5, "Stopped", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    let m = scrape(addr).await;
    assert_eq!(m["baton_agent_replicas_running"], 0.0);
    assert_eq!(m["baton_agent_replica_stops_total{cause=\"directed\"}"], 1.0);
    assert_eq!(m["baton_agent_replica_stop_seconds_count"], 1.0);
    assert!(m["baton_agent_replica_stop_seconds_sum"] < 2.0, "within the 2 s grace");

    // The leader goes silent: the lease runs out and what runs is stopped.
    let second = assignment(2, 1, Action::Run, "trap 'exit 0' TERM; while :; do sleep 0.02; done");
    gw.set(2, vec![second]);
    wait_for(5, "job 2 running", || (agent_running(&gw) == 1).then_some(())).await;
    gw.stall_reports(true);
    wait_for(10, "the lease ran out and job 2 stopped", || {
        let m = blocking_scrape(addr);
        (m.get("baton_agent_replica_stops_total{cause=\"lease_expired\"}") == Some(&1.0)).then_some(())
    })
    .await;
    // A report answered just before the stall may renew the lease once more (seen under
    // load: 0.786 s left right after the stop); with the gateway silent it runs out again.
    wait_for(5, "no lease left", || {
        let m = blocking_scrape(addr);
        (m.get("baton_agent_lease_seconds_left") == Some(&0.0)).then_some(())
    })
    .await;
    let m = scrape(addr).await;
    assert!(m["baton_agent_lease_expiries_total"] >= 1.0, "{m:?}");
    wait_for(5, "a stalled report timed out", || {
        (blocking_scrape(addr).get("baton_agent_reports_failed_total") >= Some(&1.0)).then_some(())
    })
    .await;
    assert!(!m.keys().any(|k| k.starts_with("baton_agent_gpu_")), "no NVML here: no GPU metrics");
    gw.stall_reports(false);
    let mut exposed = exposed_names(addr).await;
    exposed.extend(baton_agent::metrics::GPU_METRIC_NAMES.map(String::from));
    // Served with --insecure: no certificate to expire.
    exposed.insert(baton_agent::metrics::TLS_METRIC_NAME.to_string());
    // Shown once a GPU fault is found (tests/suite/gpu_health.rs injects one).
    exposed.insert("baton_agent_gpu_faults_total".to_string());
    assert_eq!(documented_names(), exposed, "docs/metrics.md lists exactly the agent's metrics");
    agent.shutdown().await.unwrap();
}

/// Names a user queries, from the TYPE lines (a counter `x` is queried as `x_total`).
async fn exposed_names(addr: std::net::SocketAddr) -> BTreeSet<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    reply
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_once(' ').unwrap())
        .map(|(name, kind)| if kind == "counter" { format!("{name}_total") } else { name.to_string() })
        .collect()
}

/// Names in the first column of docs/metrics.md's agent table.
fn documented_names() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let text = std::fs::read_to_string(path).expect("docs/metrics.md");
    let section = text.split("## Agent").nth(1).expect("an Agent section");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("baton_"))
        .map(String::from)
        .collect()
}

/// What the last report said runs.
fn agent_running(gw: &Gateway) -> usize {
    gw.last_report().map(|r| r.running.len()).unwrap_or(0)
}
