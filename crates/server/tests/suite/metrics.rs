//! `/metrics` on every replica after a scripted story: submit, run, a reclaiming job
//! preempts a borrower (which checkpoints), the victim resumes on a new node, that node is
//! lost, and the victim runs again elsewhere. The scrape's values are the ones the story
//! implies, on every replica; docs/metrics.md names exactly the metrics exposed.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_story_every_replica_exposes_the_values_it_implies() {
    let started = Instant::now();
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("research", 0)).await.unwrap();
    c.put_queue(queue("prod", 8)).await.unwrap();
    let mut n1 = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;

    let low = gpu_job("low", "research", "train", 8);
    c.submit(submit_of(low)).await.unwrap();
    let d = n1.until("low runs", |d| has(d, "low", Action::Run)).await;
    let low_id = d.assignments[0].job_id;
    wait_state(&mut c, "low", JobState::Running).await;

    let high = gpu_job("high", "prod", "inference", 8);
    c.submit(submit_of(high)).await.unwrap();
    n1.until("low is told to stop", |d| has(d, "low", Action::Stop)).await;
    let stopped = Stopped { job_id: low_id, attempt: 1, checkpointed: true, rank: 0, cause: 0, ..Default::default() };
    n1.report(vec![What::Stopped(stopped)]).await.unwrap();
    n1.until("high runs", |d| has(d, "high", Action::Run)).await;

    let mut n2 = FakeAgent::attach(&cluster.addrs(), node("n2", 8)).await;
    n2.until("low resumes on n2", |d| has(d, "low", Action::Run)).await;
    wait_state(&mut c, "low", JobState::Running).await;
    n2.silence();
    wait_state(&mut c, "low", JobState::Pending).await;
    // n3 also offers MIG slices (docs/policy.md section 17).
    let mut n3_info = node("n3", 8);
    n3_info.resources.insert("mig-1g.10gb".into(), 7);
    let mut n3 = FakeAgent::attach(&cluster.addrs(), n3_info).await;
    n3.until("low runs on n3", |d| has(d, "low", Action::Run)).await;
    wait_state(&mut c, "low", JobState::Running).await;

    let scrapes = settled(&cluster).await;
    let story_s = started.elapsed().as_secs_f64();
    for (addr, s) in &scrapes {
        let v = |key: &str| s.get(key).copied().unwrap_or_else(|| panic!("{addr}: no sample {key}"));
        for (queue, nominal, used, borrowed) in [("prod", 8.0, 8.0, 0.0), ("research", 0.0, 8.0, 8.0)] {
            let l = format!("{{queue=\"{queue}\",pool=\"default\"}}");
            assert_eq!(v(&format!("baton_queue_gpus_nominal{l}")), nominal, "{addr} {queue}");
            assert_eq!(v(&format!("baton_queue_gpus_used{l}")), used, "{addr} {queue}");
            assert_eq!(v(&format!("baton_queue_gpus_borrowed{l}")), borrowed, "{addr} {queue}");
            assert_eq!(v(&format!("baton_queue_gpus_lent{l}")), 0.0, "{addr} {queue}");
            let q = format!("{{queue=\"{queue}\"}}");
            assert_eq!(v(&format!("baton_queue_pending_jobs{q}")), 0.0, "{addr} {queue}");
            assert_eq!(v(&format!("baton_queue_pending_gpus{q}")), 0.0, "{addr} {queue}");
            assert_eq!(v(&format!("baton_queue_running_jobs{q}")), 1.0, "{addr} {queue}");
        }
        let slices =
            |kind: &str| format!("baton_pool_mig_slices{{pool=\"default\",profile=\"mig-1g.10gb\",kind=\"{kind}\"}}");
        assert_eq!((v(&slices("offered")), v(&slices("held"))), (7.0, 0.0), "{addr}");
        assert_eq!(v("baton_nodes{status=\"ready\"}"), 2.0, "{addr}");
        assert_eq!(v("baton_nodes{status=\"lost\"}"), 1.0, "{addr}");
        assert_eq!(v("baton_pool_gpus_capacity{pool=\"default\"}"), 16.0, "{addr}");
        // low: attempts 1, 2 (after its checkpoint) and 3 (after n2 was lost); high: 1.
        assert_eq!(v("baton_admissions_total{queue=\"research\"}"), 3.0, "{addr}");
        assert_eq!(v("baton_admissions_total{queue=\"prod\"}"), 1.0, "{addr}");
        assert_eq!(v("baton_preemptions_total{reason=\"reclaim\",mode=\"checkpoint\"}"), 1.0, "{addr}");
        assert!(!s.keys().any(|k| k.starts_with("baton_preemptions_total{reason=\"priority\"")), "{addr}");
        assert_eq!(v("baton_checkpoints_written_total"), 1.0, "{addr}");
        assert_eq!(v("baton_nodes_lost_total"), 1.0, "{addr}");
        assert_eq!(v("baton_job_wait_seconds_count"), 2.0, "{addr}: first starts of low and high");
        let lost = v("baton_preemption_uncheckpointed_gpu_seconds_total");
        assert!(lost > 0.0 && lost <= 8.0 * story_s, "{addr}: 8 GPUs for part of the story, got {lost}");
        assert_eq!(v("baton_metrics_events_missed_total"), 0.0, "{addr}");
        assert_eq!(v("baton_raft_apply_lag_entries"), 0.0, "{addr}");
        // Each replica applied the two submits itself, and timed them.
        assert_eq!(v("baton_apply_seconds_count{kind=\"Submit\"}"), 2.0, "{addr}");
        assert!(v("baton_raft_log_flushes_total") > 0.0, "{addr}: its log was flushed");
    }
    let leaders: Vec<&String> =
        scrapes.iter().filter(|(_, s)| s["baton_raft_is_leader"] == 1.0).map(|(a, _)| a).collect();
    assert_eq!(leaders.len(), 1, "exactly one replica says it leads");
    let ids: BTreeSet<u64> = scrapes.values().map(|s| s["baton_raft_leader_id"] as u64).collect();
    assert_eq!(ids.len(), 1, "every replica names the same leader: {ids:?}");
    let lead = &scrapes[leaders[0]];
    // The leader proposed every write in batches; the followers forwarded theirs to it.
    let proposed = lead["baton_raft_batches_proposed_total"];
    assert!(proposed > 0.0 && lead["baton_raft_batch_commands_total"] >= proposed);
    let forwarded: f64 = scrapes.values().map(|s| s["baton_raft_writes_forwarded_total"]).sum();
    assert!(forwarded <= lead["baton_raft_writes_queued_total"], "forwarded writes are queued on the leader");
    assert!(lead["baton_cycle_seconds_count"] > 0.0);
    assert!(lead["baton_plans_proposed_total"] >= 4.0, "place low, preempt for high, place low twice more");
    assert!(lead["baton_cycle_decisions_total{kind=\"preempt\"}"] >= 1.0);
    assert!(lead["baton_plan_decisions_accepted_total"] >= 4.0);
    drop((n1, n3));

    let mut exposed = exposed_names(&cluster).await;
    // Served with --insecure: no certificate to expire.
    exposed.insert(::baton_server::metrics::TLS_METRIC_NAME.to_string());
    let documented = documented_names();
    assert_eq!(documented, exposed, "docs/metrics.md lists exactly the metrics the replicas expose");
}

/// Scrapes every replica until all have applied the same index and agree on every state
/// gauge; returns each replica's samples.
async fn settled(cluster: &Cluster) -> BTreeMap<String, BTreeMap<String, f64>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut all = BTreeMap::new();
        for r in &cluster.replicas {
            all.insert(r.metrics.clone(), samples(&scrape(&r.metrics).await));
        }
        // As text: f64 has no total order.
        let state = |s: &BTreeMap<String, f64>| -> Vec<(String, String)> {
            s.iter().filter(|(k, _)| is_state(k)).map(|(k, v)| (k.clone(), v.to_string())).collect()
        };
        let views: BTreeSet<Vec<(String, String)>> = all.values().map(state).collect();
        let lag: f64 = all.values().map(|s| s.get("baton_raft_apply_lag_entries").copied().unwrap_or(1.0)).sum();
        if views.len() == 1 && lag == 0.0 {
            return all;
        }
        assert!(Instant::now() < deadline, "replicas disagree after 10 s: {views:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Metrics computed from the replicated state (or counted from its events): every replica
/// that applied the same entries exposes the same values.
fn is_state(key: &str) -> bool {
    [
        "baton_queue_",
        "baton_pool_",
        "baton_nodes",
        "baton_state_",
        "baton_admissions",
        "baton_preemptions",
        "baton_checkpoints",
        "baton_job_wait",
    ]
    .iter()
    .any(|p| key.starts_with(p))
}

/// Names a user queries, from the TYPE lines of every replica (a counter `x` is queried as
/// `x_total`).
async fn exposed_names(cluster: &Cluster) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for r in &cluster.replicas {
        for line in scrape(&r.metrics).await.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
            let (name, kind) = rest.split_once(' ').unwrap();
            names.insert(if kind == "counter" { format!("{name}_total") } else { name.to_string() });
        }
    }
    names
}

/// Names in the first column of docs/metrics.md's replica table.
fn documented_names() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let text = std::fs::read_to_string(path).expect("docs/metrics.md");
    let section = text.split("## Agent").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("baton_"))
        .map(String::from)
        .collect()
}

/// The leader writes a state digest every `state_digest_interval_ms`; every replica hashes
/// its state at each and finds the leader's hash of the previous one equal to its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_replica_agrees_with_the_leaders_state_digests() {
    let settings = ::baton_server::ServerSettings { state_digest_interval_ms: 1_000, ..settings() };
    let cluster = Cluster::start_with(3, settings).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("research", 8)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut agreed = Vec::new();
        for r in &cluster.replicas {
            let s = samples(&scrape(&r.metrics).await);
            agreed.push(s.get("baton_state_digest_checks_total{result=\"agreed\"}").copied().unwrap_or(0.0));
            assert_eq!(s.get("baton_state_digest_checks_total{result=\"not_compared\"}"), Some(&0.0));
        }
        if agreed.iter().all(|a| *a >= 2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "checks agreed per replica after 20 s: {agreed:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
