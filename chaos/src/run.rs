//! One chaos run: start the cluster, submit the load while injecting faults, heal, let the
//! jobs finish, judge.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::v1::{ListJobsRequest, SubmitRequest};

use crate::check::Report;
use crate::cluster::{Cluster, NodeArgs, Timing, connect_any};
use crate::faults::Faults;
use crate::load::{self, Load};
use crate::rng::Rng;

/// Attempts at one submit before giving up on it (it then counts as not acknowledged).
const SUBMIT_TRIES: u32 = 50;
const SUBMIT_RETRY_MS: u64 = 200;
/// Bound on the jobs one run submits.
const MAX_JOBS: usize = 2_000;
/// Once the faults stop, the jobs are given time to finish as long as some job finishes
/// every `DRAIN_STALL_S`, and `DRAIN_MAX_S` at most.
const DRAIN_STALL_S: u64 = 30;
const DRAIN_MAX_S: u64 = 900;

#[derive(Clone, Debug)]
pub struct Config {
    /// The `baton` binary.
    pub baton: PathBuf,
    /// How long faults are injected.
    pub seconds: u64,
    pub seed: u64,
    pub nodes: usize,
    pub gpus_per_node: u64,
    /// Keep the run's directory (logs, witness records) and print where it is.
    pub keep_dir: bool,
}

impl Config {
    pub fn new(baton: impl Into<PathBuf>, seconds: u64, seed: u64) -> Config {
        Config { baton: baton.into(), seconds, seed, nodes: 3, gpus_per_node: 4, keep_dir: false }
    }
}

pub async fn run(cfg: &Config) -> Report {
    let nodes: Vec<NodeArgs> =
        (1..=cfg.nodes).map(|i| NodeArgs::gpus(&format!("n{i}"), &format!("rack-{i}"), cfg.gpus_per_node)).collect();
    let timing = Timing::default();
    let mut c = Cluster::start_with(&cfg.baton, &nodes, &timing).await;
    let witness = c.path("witness");
    std::fs::create_dir_all(&witness).expect("a witness directory");
    let (cohort, queues) = load::setup(cfg.gpus_per_node * cfg.nodes as u64);
    let mut api = c.client().await;
    api.put_cohort(cohort).await.expect("the cohort is created");
    for q in queues {
        api.put_queue(q).await.expect("the queues are created");
    }

    let mut load = Load::new(cfg.seed, &cfg.baton, &witness);
    let acked = Arc::new(Mutex::new(Vec::new()));
    // Training gangs fill the cluster first, so that interactive jobs must reclaim.
    for _ in 0..cfg.nodes {
        submit(&c.servers, load.train(), &acked).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = tokio::spawn(submit_load(c.servers.clone(), load, cfg.seed, acked.clone(), stop.clone()));

    let mut faults = Faults::new(cfg.seed, timing.heartbeat_timeout_ms);
    let mut log = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(cfg.seconds) {
        tokio::time::sleep(faults.pause_before_next()).await;
        let fault = faults.inject(&mut c).await;
        log.push(format!("{:>6.1} s  {fault}", start.elapsed().as_secs_f64()));
    }
    stop.store(true, Ordering::SeqCst);
    let _ = submitter.await;

    let acked: Vec<String> = acked.lock().expect("not poisoned").clone();
    let jobs = drain(&c, &acked).await;
    let report = Report::judge(cfg.seconds, log, &acked, &jobs, &witness);
    if cfg.keep_dir || !report.ok() {
        // Kept for a post-mortem: the replicas' and agents' logs, the witness records.
        c.dir.disable_cleanup(true);
        eprintln!("chaos: the run's directory is kept at {}", c.dir.path().display());
    }
    report
}

/// Submits until told to stop, a job every 0.6 to 1.4 s: about what 12 GPUs get through, so
/// the backlog stays short while preemptions keep coming.
async fn submit_load(
    servers: Vec<String>,
    mut load: Load,
    seed: u64,
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed ^ 0x5ab);
    while !stop.load(Ordering::SeqCst) && acked.lock().expect("not poisoned").len() < MAX_JOBS {
        tokio::time::sleep(Duration::from_millis(rng.range(600, 1_400))).await;
        submit(&servers, load.any(), &acked).await;
    }
}

/// Submits with retries under the same request id; records the job if acknowledged.
async fn submit(servers: &[String], req: SubmitRequest, acked: &Mutex<Vec<String>>) {
    let name = req.request_id.clone();
    for _ in 0..SUBMIT_TRIES {
        if let Some(mut c) = connect_any(servers).await {
            let call = tokio::time::timeout(Duration::from_secs(2), c.submit(req.clone())).await;
            if let Ok(Ok(_)) = call {
                acked.lock().expect("not poisoned").push(name);
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(SUBMIT_RETRY_MS)).await;
    }
    eprintln!("chaos: submit of {name} never acknowledged");
}

/// Waits until every acknowledged job has ended, or none ended for `DRAIN_STALL_S`, or
/// `DRAIN_MAX_S` passed; the final job list.
async fn drain(c: &Cluster, acked: &[String]) -> Vec<baton_proto::v1::Job> {
    let start = Instant::now();
    let (mut ended_before, mut progress) = (0, Instant::now());
    loop {
        let mut api = c.client().await;
        if let Ok(r) = api.list_jobs(ListJobsRequest::default()).await {
            let jobs = r.into_inner().jobs;
            let is_ended = |name: &String| {
                jobs.iter().any(|j| {
                    j.spec.as_ref().is_some_and(|s| &s.name == name)
                        && matches!(j.state.as_str(), "Succeeded" | "Failed" | "Cancelled")
                })
            };
            let ended = acked.iter().filter(|n| is_ended(n)).count();
            if ended > ended_before {
                (ended_before, progress) = (ended, Instant::now());
            }
            let stalled = progress.elapsed() > Duration::from_secs(DRAIN_STALL_S);
            if ended == acked.len() || stalled || start.elapsed() > Duration::from_secs(DRAIN_MAX_S) {
                return jobs;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
