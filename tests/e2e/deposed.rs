//! Issue 9, seen from the agents: a leader cut off from its peers, not from its agents, must
//! lose them once it can no longer prove that it leads, and the new leader must get them.
//! Each agent logs every directive it obeys (`baton_agent::directives`, at debug level): its
//! term, its leader, whether the agent held a lease when it read it, and the wall-clock
//! instant at which it did, read before the lease.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_chaos::cluster::{Cluster, NodeArgs, Timing};
use baton_chaos::net::cut_between;
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::{JobRef, SubmitRequest};

use crate::BATON;

/// Slack on the lease bound for the wall clock against CLOCK_BOOTTIME over a few seconds
/// (the agent reads the wall clock first, then the lease on the boot clock).
const CLOCK_SLACK_MS: u64 = 50;
/// How long the cut lasts: past the heartbeat timeout, so the deposed leader has long given
/// up and the new one has placed work.
const CUT_MS: u64 = 8_000;

/// One obeyed directive, as an agent logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Obeyed {
    term: u64,
    leader_id: u64,
    leased: bool,
    at_unix_ms: u64,
}

/// The value of `key=` in a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn obeyed(log: &Path) -> Vec<Obeyed> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("obeys a directive"))
        .map(|l| {
            let num = |k: &str| -> u64 {
                field(l, k).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {k} in {l:?}"))
            };
            Obeyed {
                term: num("term"),
                leader_id: num("leader_id"),
                leased: field(l, "leased") == Some("true"),
                at_unix_ms: num("at_unix_ms"),
            }
        })
        .collect()
}

fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis() as u64
}

/// Waits until every agent's log shows a directive of `(term, leader_id)` obeyed under a lease.
async fn wait_all_obey(c: &Cluster, names: &[String], term: u64, leader_id: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| {
                !obeyed(&c.path(&format!("agent-{n}.log")))
                    .iter()
                    .any(|o| o.term == term && o.leader_id == leader_id && o.leased)
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{missing:?} never obeyed {what}; logs in {}", c.dir.path().display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, ip and nft: ./test.sh runs it as root"]
async fn agents_stop_obeying_a_leader_cut_from_its_peers_and_obey_the_new_one() {
    let _one_at_a_time = crate::CHAOS_RUNS.lock().await;
    let nodes: Vec<NodeArgs> = (1..=3).map(|i| NodeArgs::gpus(&format!("n{i}"), &format!("rack-{i}"), 4)).collect();
    let t = Timing::default();
    let c = Cluster::start_partitionable(BATON.as_ref(), &nodes, &t).await.unwrap_or_else(|e| panic!("{e}"));
    let names = c.agent_names();
    let old = c.leader().await;
    let (_, info) = c.answering(old).await.expect("the leader answers");
    let (old_term, old_id) = (info.term, info.leader_id);
    wait_all_obey(&c, &names, old_term, old_id, "the first leader").await;

    let topo = c.topology();
    let peers: Vec<String> =
        topo.replicas.iter().enumerate().filter(|(i, _)| *i != old).map(|(_, l)| l.clone()).collect();
    let cut_at = Instant::now();
    c.set_network(&cut_between(&[topo.replicas[old].clone()], &peers));
    // Taken once the cut is in force: no later than the cut itself.
    let cut_unix_ms = now_unix_ms();

    let (new, info) = c.leader_other_than(old).await;
    assert!(info.term > old_term, "{info:?}");
    let (new_term, new_id) = (info.term, info.leader_id);
    // The new leader places a job on every node, the deposed leader's rack included.
    let (mut api, _) = c.answering(new).await.expect("the new leader answers");
    api.put_queue(gpu_queue("q", 12)).await.unwrap();
    let witness = c.path("witness");
    std::fs::create_dir_all(&witness).unwrap();
    let command: Vec<String> =
        [BATON, "workload", "--witness", &witness.display().to_string(), "--step-ms", "50", "--steps", "600"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let jobs: Vec<String> = (1..=3).map(|i| format!("after-the-cut-{i}")).collect();
    for name in &jobs {
        let spec = gpu_job(name, "q", "", 1, 4, command.clone());
        api.submit(SubmitRequest {
            spec: Some(spec),
            request_id: name.clone(),
            run_as: String::new(),
            after: Vec::new(),
            array: None,
        })
        .await
        .unwrap();
    }
    wait_all_obey(&c, &names, new_term, new_id, "the new leader").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut placed_on = Vec::new();
    for name in &jobs {
        loop {
            let j = api.get_job(JobRef { name: name.clone(), ..Default::default() }).await.unwrap().into_inner();
            if j.state() == baton_proto::v1::JobState::Running {
                placed_on.extend(j.placements.iter().map(|p| p.node.clone()));
                break;
            }
            assert!(Instant::now() < deadline, "{name} is {} ({})", j.state, j.reason);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    placed_on.sort();
    assert_eq!(placed_on, names, "one job per node");
    tokio::time::sleep(Duration::from_millis(CUT_MS).saturating_sub(cut_at.elapsed())).await;
    c.set_network(&[]);

    // The deposed leader's last proof started before the cut, and every lease it granted
    // ran from a report sent before that proof: L after the cut at the latest.
    let bound_unix_ms = cut_unix_ms + t.lease_ms + CLOCK_SLACK_MS;
    for n in &names {
        let log = c.path(&format!("agent-{n}.log"));
        let all = obeyed(&log);
        let last_old = all.iter().rfind(|o| o.term == old_term && o.leader_id == old_id && o.leased);
        let first_new = all.iter().find(|o| o.term == new_term && o.leader_id == new_id && o.leased);
        let since_cut = |o: Option<&Obeyed>| o.map(|o| o.at_unix_ms as i64 - cut_unix_ms as i64);
        eprintln!(
            "{n}: last directive of the deposed leader obeyed under a lease {:?} ms after the cut, first of the new leader {:?} ms after",
            since_cut(last_old),
            since_cut(first_new)
        );
        let late: Vec<&Obeyed> = all
            .iter()
            .filter(|o| o.term == old_term && o.leader_id == old_id && o.leased && o.at_unix_ms > bound_unix_ms)
            .collect();
        assert!(
            late.is_empty(),
            "{n} obeyed the deposed leader (term {old_term}, replica {old_id}) under a lease more than \
             {} ms after the cut at {cut_unix_ms}: {late:?}; log {}",
            t.lease_ms,
            log.display()
        );
        assert!(
            all.iter().any(|o| o.term == new_term && o.leader_id == new_id && o.leased && o.at_unix_ms > cut_unix_ms),
            "{n} never obeyed the new leader; log {}",
            log.display()
        );
    }
    let violations = std::fs::read_to_string(witness.join("violations")).unwrap_or_default();
    assert!(violations.is_empty(), "the witness saw:\n{violations}");
}
