//! `baton bench scale`: 3 real replica processes, N simulated agents over real gRPC (in this
//! process, see `simagents`) and concurrent submitting clients. It measures, in order:
//! 1. the fleet's registration (every node attached and Ready);
//! 2. a backlog submitted through the API: submissions/s and submit latency;
//! 3. placing the backlog: time until every job has been told to run on a node, and
//!    submit-to-running per job (submit sent -> the node's directive says run);
//!    meanwhile each replica's apply lag, sampled from its /metrics;
//! 4. steady state with the jobs running: leader CPU and memory, directive and report bytes/s;
//! 5. preemption: urgent jobs submitted at once into the (full) cluster, submit-to-running of
//!    each, its victim's stop included;
//! 6. a leader kill: time until every node has a directive of a newer term (reattached to the
//!    new leader and sent its whole desired state), and nodes declared lost meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_proto::v1::Empty;
use clap::Args;

use super::clients;
use super::load::{Caller, drive_until_taken};
use super::simagents::{self, Fleet, Seen};
use super::submit::{Backlog, channel, client, leader, submit_of_class};
use super::{float, percentiles_line, procstat, runtime};
use crate::dev::METRICS_PORT_OFFSET;
use crate::dev::procs::{Children, Security};

#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Simulated nodes (agents).
    #[arg(long, default_value_t = 1_000)]
    pub nodes: u32,
    /// GPUs per simulated node.
    #[arg(long, default_value_t = 8)]
    pub gpus: u32,
    /// Racks the nodes are spread over.
    #[arg(long, default_value_t = 10)]
    pub racks: u32,
    /// One-GPU jobs submitted as the backlog.
    #[arg(long, default_value_t = 50_000)]
    pub backlog: u32,
    /// Concurrent submitting clients.
    #[arg(long, default_value_t = 64)]
    pub clients: u32,
    /// How long a simulated job runs once started, in ms.
    #[arg(long, default_value_t = 600_000)]
    pub run_ms: u64,
    /// Simulated agents' heartbeat (`baton agent --heartbeat-ms`).
    #[arg(long, default_value_t = 500)]
    pub heartbeat_ms: u64,
    /// Simulated nodes whose attach streams and reports share one HTTP/2 connection (1 to
    /// 1,000). Real agents hold one each; with many nodes on one connection, a server that
    /// ends the connection (HTTP/2's guard against reset floods) drops them all at once.
    #[arg(long, default_value_t = simagents::NODES_PER_CONNECTION)]
    pub nodes_per_connection: u32,
    /// Seconds of steady state measured once the backlog is placed.
    #[arg(long, default_value_t = 10)]
    pub steady_s: u64,
    /// Longest wait for the fleet to register, the backlog to be placed, or the fleet to
    /// reattach after the leader kill, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// The replicas' raft election timeout (`baton server --election-timeout-ms`); on a
    /// machine short of CPU a longer one keeps the load from causing elections.
    #[arg(long, default_value_t = baton_raft::RaftSettings::default().election_timeout_min_ms)]
    pub election_timeout_ms: u64,
    /// Urgent one-GPU jobs (class `interactive`, above the backlog's `train`) submitted at
    /// once after the steady state: in a full cluster each preempts a running job. 0: skip.
    #[arg(long, default_value_t = 100)]
    pub preemptors: u32,
    /// Skip the leader kill.
    #[arg(long)]
    pub no_kill: bool,
    /// Submit from this many client processes of their own (the clients split between
    /// them); 0: from tasks in the benchmark's own process.
    #[arg(long, default_value_t = 0)]
    pub client_procs: u32,
    /// Also print submit-to-running of the backlog by the second its submits were sent
    /// (where a tail comes from).
    #[arg(long)]
    pub by_second: bool,
    /// Keep the replicas' directory (their data and logs) and say where it is.
    #[arg(long)]
    pub keep_dir: bool,
    /// First port of the local cluster.
    #[arg(long, default_value_t = 7370)]
    pub port: u16,
}

const MAX_NODES: u32 = 100_000;
const MAX_CLIENTS: u32 = 4_096;
const MAX_PREEMPTORS: u32 = 100_000;
/// Clients that submit the urgent jobs (each sends its share back to back).
const PREEMPTOR_CLIENTS: u32 = 16;
/// How often the apply-lag sampler reads every replica's /metrics.
const LAG_SAMPLE_MS: u64 = 250;
/// How often the benchmark looks at the progress it waits for.
const POLL_MS: u64 = 10;
/// The servers' heartbeat timeout (their default): after a leader kill the benchmark waits
/// this long plus a margin before it counts nodes declared lost.
const HEARTBEAT_TIMEOUT_MS: u64 = 5_000;
const LOST_MARGIN_MS: u64 = 2_000;

pub fn run(a: ScaleArgs) -> std::process::ExitCode {
    if let Err(e) = check(&a) {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    let result = runtime().and_then(|rt| rt.block_on(bench(a)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn check(a: &ScaleArgs) -> Result<(), String> {
    if a.nodes == 0 || a.nodes > MAX_NODES {
        return Err(format!("--nodes {}: must be 1 to {MAX_NODES}", a.nodes));
    }
    if a.gpus == 0 || u64::from(a.gpus) > baton_model::limits::MAX_GPUS_PER_NODE {
        return Err(format!("--gpus {}: must be 1 to {}", a.gpus, baton_model::limits::MAX_GPUS_PER_NODE));
    }
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        return Err(format!("--clients {}: must be 1 to {MAX_CLIENTS}", a.clients));
    }
    if a.preemptors > MAX_PREEMPTORS {
        return Err(format!("--preemptors {}: must be 0 to {MAX_PREEMPTORS}", a.preemptors));
    }
    if a.backlog == 0 {
        return Err("--backlog: must be above 0".into());
    }
    if a.client_procs > clients::MAX_CLIENT_PROCS {
        return Err(format!("--client-procs {}: at most {}", a.client_procs, clients::MAX_CLIENT_PROCS));
    }
    if a.nodes_per_connection == 0 || a.nodes_per_connection > simagents::MAX_NODES_PER_CONNECTION {
        let most = simagents::MAX_NODES_PER_CONNECTION;
        return Err(format!("--nodes-per-connection {}: must be 1 to {most}", a.nodes_per_connection));
    }
    if a.heartbeat_ms == 0 || a.heartbeat_ms >= HEARTBEAT_TIMEOUT_MS {
        return Err(format!("--heartbeat-ms {}: must be 1 to {}", a.heartbeat_ms, HEARTBEAT_TIMEOUT_MS - 1));
    }
    Ok(())
}

async fn bench(a: ScaleArgs) -> Result<(), String> {
    let tmp = tempfile::Builder::new().prefix("baton-scale-").tempdir().map_err(|e| e.to_string())?;
    let extra = ["--election-timeout-ms".to_string(), a.election_timeout_ms.to_string()];
    let mut children = Children::start_replicas(tmp.path(), a.port, &extra, Security::Insecure).await?;
    let result = phases(&a, &mut children).await;
    children.stop(Duration::from_secs(5)).await;
    if a.keep_dir {
        eprintln!("replica data and logs kept in {}", tmp.keep().display());
    } else if result.is_err() {
        eprintln!("replica logs were in {} (removed on exit; --keep-dir keeps them)", tmp.path().display());
    }
    result
}

async fn phases(a: &ScaleArgs, children: &mut Children) -> Result<(), String> {
    let servers = children.servers();
    let timeout = Duration::from_secs(a.timeout_s);
    println!(
        "baton bench scale: 3 replicas (election timeout {} ms), {} simulated nodes x {} GPUs in {} racks, backlog {} one-GPU jobs, {} clients, jobs run {} ms, heartbeat {} ms",
        a.election_timeout_ms, a.nodes, a.gpus, a.racks, a.backlog, a.clients, a.run_ms, a.heartbeat_ms
    );
    if a.client_procs > 0 {
        println!("  the clients run in {} processes of their own", a.client_procs.min(a.clients));
    }
    let capacity = u64::from(a.nodes) * u64::from(a.gpus);
    super::submit::bench_queue(&servers, capacity).await?;
    let seen = Arc::new(Seen::new(a.nodes));
    let fleet = Fleet {
        nodes: a.nodes,
        gpus: a.gpus,
        racks: a.racks,
        run_ms: a.run_ms,
        heartbeat_ms: a.heartbeat_ms,
        servers: servers.clone(),
        nodes_per_connection: a.nodes_per_connection,
    };
    let t = Instant::now();
    simagents::start(fleet, seen.clone())?;
    wait_ready(&servers, a.nodes as usize, timeout).await?;
    println!("registration: {} nodes Ready in {:.1} s", a.nodes, t.elapsed().as_secs_f64());

    let (_, name) = leader(&servers).await?;
    let pid = children.pid(&name).ok_or("the leader is not running")?;
    let usage = Usage::start(pid, &seen);
    let cycles_before = cycles(a.port, &name).await;
    let lag = Lag::start(a.port);
    let first_submit = Instant::now();
    let first_submit_ms = seen.since_epoch_ms();
    let acknowledged = submit_backlog(a, &servers, &seen, Backlog::Train, a.backlog, a.clients).await?;
    // A backlog larger than the cluster leaves the rest waiting: all that fits is the goal.
    let fits = acknowledged.min(capacity);
    let placed = wait_started(&seen, 0, fits, first_submit, timeout).await;
    let placing = usage.stop(pid, &seen);
    let lag = lag.stop().await;
    println!(
        "placing: {} of {acknowledged} acknowledged jobs running {:.1} s after the first submit",
        placed.0, placed.1
    );
    let (_, now_leader) = leader(&servers).await?;
    if now_leader != name {
        println!("  (the leader changed from {name} to {now_leader} meanwhile: the CPU below is {name}'s)");
    }
    if placed.0 < fits {
        println!("  (not all that fits placed within --timeout-s {}; capacity is {capacity} GPUs)", a.timeout_s);
    }
    let starts = seen.take_starts();
    println!(
        "  submit -> running {}",
        percentiles_line(&mut starts.iter().map(|s| s.to_running_ms).collect::<Vec<_>>())
    );
    if a.by_second {
        print_by_second(&starts, first_submit_ms);
    }
    placing.print("  while submitting and placing");
    lag.print("  apply lag while submitting and placing");
    print_cycles(a.port, &name, cycles_before, "  while submitting and placing").await;

    let (_, name) = leader(&servers).await?;
    let pid = children.pid(&name).ok_or("the leader is not running")?;
    let usage = Usage::start(pid, &seen);
    let cycles_before = cycles(a.port, &name).await;
    tokio::time::sleep(Duration::from_secs(a.steady_s)).await;
    usage.stop(pid, &seen).print(&format!("steady state, jobs running, leader {name}"));
    print_cycles(a.port, &name, cycles_before, "  steady state").await;
    if a.preemptors > 0 {
        let cycles_before = cycles(a.port, &name).await;
        preemption(a, &servers, &seen, timeout).await?;
        print_cycles(a.port, &name, cycles_before, "  while preempting").await;
    }
    if !a.no_kill {
        let (_, name) = leader(&servers).await?;
        leader_kill(a, children, &seen, &name).await?;
    }
    Ok(())
}

/// Submit-to-running by the second (from `from_ms`) the submits were sent.
fn print_by_second(starts: &[simagents::Start], from_ms: u64) {
    for (second, mut ms) in by_second(starts, from_ms) {
        println!("    submitted in second {second:>3}: {:>6} jobs, {}", ms.len(), percentiles_line(&mut ms));
    }
}

/// Submit-to-running times grouped by the second (from `from_ms`) their submits were sent.
fn by_second(starts: &[simagents::Start], from_ms: u64) -> std::collections::BTreeMap<u64, Vec<f64>> {
    let mut by: std::collections::BTreeMap<u64, Vec<f64>> = std::collections::BTreeMap::new();
    for s in starts {
        by.entry(s.sent_ms.saturating_sub(from_ms) / 1000).or_default().push(s.to_running_ms);
    }
    by
}

/// The leader's CPU seconds and the fleet's counters at the start of a window.
struct Usage {
    at: Instant,
    cpu_s: f64,
    directive_bytes: u64,
    report_bytes: u64,
    directives: u64,
    reports: u64,
}

struct Window {
    secs: f64,
    cpu_s: f64,
    rss: u64,
    directive_bytes: u64,
    report_bytes: u64,
    directives: u64,
    reports: u64,
}

impl Usage {
    fn start(pid: u32, seen: &Seen) -> Usage {
        Usage {
            at: Instant::now(),
            cpu_s: procstat::cpu_s(pid).unwrap_or(0.0),
            directive_bytes: seen.directive_bytes.load(Ordering::Relaxed),
            report_bytes: seen.report_bytes.load(Ordering::Relaxed),
            directives: seen.directives.load(Ordering::Relaxed),
            reports: seen.reports.load(Ordering::Relaxed),
        }
    }

    fn stop(&self, pid: u32, seen: &Seen) -> Window {
        Window {
            secs: self.at.elapsed().as_secs_f64(),
            cpu_s: procstat::cpu_s(pid).unwrap_or(0.0) - self.cpu_s,
            rss: procstat::rss_bytes(pid).unwrap_or(0),
            directive_bytes: seen.directive_bytes.load(Ordering::Relaxed) - self.directive_bytes,
            report_bytes: seen.report_bytes.load(Ordering::Relaxed) - self.report_bytes,
            directives: seen.directives.load(Ordering::Relaxed) - self.directives,
            reports: seen.reports.load(Ordering::Relaxed) - self.reports,
        }
    }
}

impl Window {
    fn print(&self, what: &str) {
        let s = self.secs.max(1e-9);
        println!(
            "{what} ({:.1} s): leader CPU {:.2} cores, RSS {:.0} MiB; directives {:.0}/s ({:.2} MB/s), reports {:.0}/s ({:.2} MB/s)",
            self.secs,
            self.cpu_s / s,
            self.rss as f64 / f64::from(1 << 20),
            self.directives as f64 / s,
            self.directive_bytes as f64 / s / 1e6,
            self.reports as f64 / s,
            self.report_bytes as f64 / s / 1e6,
        );
    }
}

/// Submits `jobs` jobs of `kind` from `clients` clients sharing one counter; the jobs
/// acknowledged.
async fn submit_backlog(
    a: &ScaleArgs,
    servers: &[String],
    seen: &Arc<Seen>,
    kind: Backlog,
    jobs: u32,
    clients: u32,
) -> Result<u64, String> {
    let clients = clients.min(a.clients);
    let out = if a.client_procs > 0 {
        seen.keep_early.store(true, Ordering::Relaxed);
        let procs = a.client_procs.min(clients);
        clients::submit_from_processes(servers, seen, kind, u64::from(jobs), clients, procs).await?
    } else {
        let mut callers = Vec::new();
        for id in 0..clients {
            let addr = &servers[id as usize % servers.len()];
            callers.push(Submitter { client: client(channel(addr).await?), id, kind, seen: seen.clone() });
        }
        drive_until_taken(callers, Arc::new(AtomicU64::new(u64::from(jobs)))).await
    };
    let took = out.elapsed;
    println!(
        "submitting: {} acknowledged in {:.1} s ({:.0}/s), {} errors",
        out.ok,
        took.as_secs_f64(),
        out.per_s(),
        out.errors
    );
    let mut lat = out.latencies_ms;
    println!("  submit latency {}", percentiles_line(&mut lat));
    if let Some(e) = out.first_error {
        println!("  first error: {e}");
    }
    Ok(out.ok)
}

struct Submitter {
    client: baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>,
    id: u32,
    kind: Backlog,
    seen: Arc<Seen>,
}

impl Caller for Submitter {
    async fn call(&mut self, seq: u64) -> Result<(), String> {
        let req = submit_of_class(self.kind, self.id, seq);
        if let Some(spec) = &req.spec {
            self.seen.submitted_now(spec.name.clone());
        }
        self.client.submit(req).await.map(drop).map_err(|e| e.message().to_string())
    }
}

/// Urgent jobs submitted at once into the running cluster: each preempts a running backlog
/// job when the cluster is full. Submit-to-running of each includes its victim's stop (the
/// signal in a directive, the simulated agent's report of its checkpoint, the commit) and its
/// own placement.
async fn preemption(a: &ScaleArgs, servers: &[String], seen: &Arc<Seen>, timeout: Duration) -> Result<(), String> {
    let stopped_before = seen.stopped.load(Ordering::Relaxed);
    let started_before = seen.started.load(Ordering::Relaxed);
    // Starts of backlog jobs still waiting would mix in; only the urgent jobs' are kept.
    seen.take_to_running_ms();
    seen.forget_submitted();
    let t = Instant::now();
    let acknowledged = submit_backlog(a, servers, seen, Backlog::Urgent, a.preemptors, PREEMPTOR_CLIENTS).await?;
    let started = wait_started(seen, started_before, acknowledged, t, timeout).await;
    let stops = seen.stopped.load(Ordering::Relaxed) - stopped_before;
    println!(
        "preemption: {} of {acknowledged} urgent jobs running {:.2} s after the first submit; {stops} running jobs stopped for them",
        started.0, started.1
    );
    println!("  urgent submit -> running {}", percentiles_line(&mut seen.take_to_running_ms()));
    print_timeline(&servers[0], "u0-0").await;
    Ok(())
}

/// The events of job `name` as committed, in ms after its first: where its time went.
async fn print_timeline(server: &str, name: &str) {
    let Ok(ch) = channel(server).await else { return };
    let r = baton_proto::v1::JobRef { name: name.to_string(), ..Default::default() };
    let Ok(job) = client(ch).get_job(r).await else {
        println!("  (the events of {name} could not be read)");
        return;
    };
    let events = &job.get_ref().events;
    let first = events.first().map_or(0, |e| e.at_ms);
    let line: Vec<String> = events.iter().map(|e| format!("+{} ms {}", e.at_ms - first, e.message)).collect();
    println!("  {name}'s events: {}", line.join("; "));
}

/// Samples every replica's apply lag while a phase runs: `baton_raft_apply_lag_entries`
/// (entries appended but not applied) and how far each replica's applied index is behind
/// the furthest one's.
struct Lag {
    task: tokio::task::JoinHandle<LagSeen>,
    stop: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct LagSeen {
    samples: u64,
    /// Most entries appended but not applied, on any replica.
    most_unapplied: u64,
    /// Most entries a replica's applied index was behind the furthest replica's.
    most_behind: u64,
}

impl Lag {
    fn start(port: u16) -> Lag {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut seen = LagSeen::default();
            while !*stopped.borrow() {
                seen.sample(port).await;
                let _ = tokio::time::timeout(Duration::from_millis(LAG_SAMPLE_MS), stopped.changed()).await;
            }
            seen
        });
        Lag { task, stop }
    }

    async fn stop(self) -> LagSeen {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

impl LagSeen {
    async fn sample(&mut self, port: u16) {
        let mut applied = Vec::new();
        for i in 0..3 {
            let Some(text) = metrics(port, i).await else { continue };
            if let Some(n) = value(&text, "baton_raft_apply_lag_entries") {
                self.most_unapplied = self.most_unapplied.max(n);
            }
            applied.extend(value(&text, "baton_raft_applied_index"));
        }
        if let (Some(hi), Some(lo)) = (applied.iter().max(), applied.iter().min()) {
            self.most_behind = self.most_behind.max(hi - lo);
        }
        self.samples += 1;
    }

    fn print(&self, what: &str) {
        println!(
            "{what}: at most {} entries appended but not applied on a replica, a replica at most {} entries behind the furthest ({} samples, every {LAG_SAMPLE_MS} ms)",
            self.most_unapplied, self.most_behind, self.samples
        );
    }
}

pub async fn wait_ready(servers: &[String], n: usize, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut c = client(channel(&servers[0]).await?);
    loop {
        if let Ok(nodes) = c.list_nodes(Empty {}).await {
            let ready =
                nodes.get_ref().nodes.iter().filter(|x| x.status() == baton_proto::v1::NodeStatus::Ready).count();
            if ready >= n {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("the {n} simulated nodes were not all Ready within {} s", timeout.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (jobs started beyond `before`, seconds since `since`) once `n` more started or at the
/// timeout. Only jobs whose submit is remembered count (`Seen::first_start`).
async fn wait_started(seen: &Seen, before: u64, n: u64, since: Instant, timeout: Duration) -> (u64, f64) {
    let deadline = Instant::now() + timeout;
    loop {
        let started = seen.started.load(Ordering::Relaxed) - before;
        if started >= n || Instant::now() > deadline {
            return (started, since.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

async fn leader_kill(a: &ScaleArgs, children: &mut Children, seen: &Seen, name: &str) -> Result<(), String> {
    let servers = children.servers();
    let old_term = seen.term_of.iter().map(|t| t.load(Ordering::Relaxed)).max().unwrap_or(0);
    let survivors: Vec<usize> = (0..servers.len()).filter(|i| format!("replica {}", i + 1) != name).collect();
    let lost_before = nodes_lost(a.port, survivors[0]).await.unwrap_or(0);
    let t = Instant::now();
    let killed_at_ms = seen.since_epoch_ms();
    let failures_before = seen.attach_failures.load(Ordering::Relaxed);
    children.kill(name).await?;
    let deadline = t + Duration::from_secs(a.timeout_s);
    let mut all = false;
    while Instant::now() < deadline {
        if seen.directed_after(old_term) >= a.nodes as usize {
            all = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    let took = t.elapsed().as_secs_f64();
    let moved = seen.directed_after(old_term);
    println!(
        "leader kill ({name}, term {old_term}): {moved} of {} nodes reattached and re-sent their directive in {took:.2} s{}",
        a.nodes,
        if all { "" } else { " (timed out)" }
    );
    failover_timeline(seen, old_term, killed_at_ms, failures_before);
    tokio::time::sleep(Duration::from_millis(HEARTBEAT_TIMEOUT_MS + LOST_MARGIN_MS)).await;
    let survivor_addrs: Vec<String> = survivors.iter().map(|i| servers[*i].clone()).collect();
    let (_, new_leader) = leader(&survivor_addrs).await?;
    let i = new_leader.trim_start_matches("replica ").parse::<usize>().map_err(|e| e.to_string())? - 1;
    let lost_after = nodes_lost(a.port, i).await;
    match lost_after {
        Some(after) => println!(
            "  nodes declared lost from the kill to {} s after it: {}",
            (HEARTBEAT_TIMEOUT_MS + LOST_MARGIN_MS) / 1000,
            after.saturating_sub(lost_before)
        ),
        None => println!("  nodes declared lost: the new leader's /metrics could not be read"),
    }
    Ok(())
}

/// Where a failover's time goes, per node moved to the new term, counted from the kill: its
/// reattach accepted, then its first directive of the new term (the first of which is no
/// earlier than the new leader's first publish); and how many attaches failed meanwhile.
fn failover_timeline(seen: &Seen, old_term: u64, killed_at_ms: u64, failures_before: u64) {
    let moved: Vec<usize> =
        (0..seen.term_of.len()).filter(|i| seen.term_of[*i].load(Ordering::Relaxed) > old_term).collect();
    let after_kill = |v: &[AtomicU64]| -> Vec<f64> {
        moved.iter().map(|i| v[*i].load(Ordering::Relaxed).saturating_sub(killed_at_ms) as f64).collect()
    };
    let (mut attached, mut directed) = (after_kill(&seen.attached_at_ms), after_kill(&seen.term_began_ms));
    let first = directed.iter().copied().fold(f64::INFINITY, f64::min);
    println!("  reattach accepted after the kill: {}", percentiles_line(&mut attached));
    println!("  first directive of the new term:  {}   (first at {first:.1} ms)", percentiles_line(&mut directed));
    println!(
        "  attaches failed or redirected meanwhile: {}",
        seen.attach_failures.load(Ordering::Relaxed).saturating_sub(failures_before)
    );
}

/// `baton_nodes_lost` of replica `index` (0-based), from its /metrics.
async fn nodes_lost(port: u16, index: usize) -> Option<u64> {
    value(&metrics(port, index).await?, "baton_nodes_lost")
}

/// Replica `index`'s (0-based) /metrics text.
async fn metrics(port: u16, index: usize) -> Option<String> {
    super::scrape_url(&format!("http://127.0.0.1:{}/metrics", port + METRICS_PORT_OFFSET + index as u16)).await
}

/// Replica `name`'s ("replica N") scheduling cycles so far: (count, seconds in them), from
/// its `baton_cycle_seconds` histogram.
async fn cycles(port: u16, name: &str) -> Option<(f64, f64)> {
    let index = name.trim_start_matches("replica ").parse::<usize>().ok()?.checked_sub(1)?;
    let text = metrics(port, index).await?;
    Some((float(&text, "baton_cycle_seconds_count")?, float(&text, "baton_cycle_seconds_sum")?))
}

/// Prints the cycles `name` ran since `before` (from `cycles`), if both reads worked.
async fn print_cycles(port: u16, name: &str, before: Option<(f64, f64)>, what: &str) {
    let (Some((n0, s0)), Some((n1, s1))) = (before, cycles(port, name).await) else {
        println!("{what}: the leader's cycles could not be read from its /metrics");
        return;
    };
    let n = n1 - n0;
    let mean_ms = if n > 0.0 { (s1 - s0) / n * 1000.0 } else { 0.0 };
    println!("{what}: {n:.0} scheduling cycles on {name}, {:.1} s in them, {mean_ms:.1} ms each on average", s1 - s0);
}

/// The value of counter or gauge `name` in a Prometheus text exposition (`name_total` or
/// `name`, without labels).
fn value(text: &str, name: &str) -> Option<u64> {
    float(text, name).or_else(|| float(text, &format!("{name}_total"))).map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark's arguments as the command line gives them.
    fn args(line: &[&str]) -> Result<ScaleArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            scale: ScaleArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("scale").chain(line.iter().copied())).map(|c| c.scale)
    }

    #[test]
    fn nodes_per_connection_is_checked_and_named_when_out_of_bounds() {
        let default = args(&[]).expect("the defaults parse");
        assert_eq!(default.nodes_per_connection, simagents::NODES_PER_CONNECTION);
        assert!(check(&default).is_ok());
        for bad in ["0", "1001"] {
            let a = args(&["--nodes-per-connection", bad]).expect("a number parses");
            let e = check(&a).expect_err("out of bounds");
            assert!(e.contains("--nodes-per-connection") && e.contains("1 to 1000"), "{e}");
        }
        assert!(check(&args(&["--nodes-per-connection", "1"]).unwrap()).is_ok());
    }

    #[test]
    fn a_counter_is_read_with_or_without_its_total_suffix() {
        let text = "# HELP baton_nodes_lost Nodes declared lost\nbaton_nodes_lost_total 3\nbaton_other 9\n";
        assert_eq!(value(text, "baton_nodes_lost"), Some(3));
        assert_eq!(value("baton_nodes_lost 2\n", "baton_nodes_lost"), Some(2));
        assert_eq!(value("baton_other 9\n", "baton_nodes_lost"), None);
    }

    #[test]
    fn starts_are_grouped_by_the_second_their_submits_were_sent_from_the_first() {
        let start = |sent_ms, to_running_ms| simagents::Start { sent_ms, to_running_ms };
        let starts = [start(5_000, 10.0), start(5_999, 20.0), start(6_000, 30.0), start(4_000, 40.0)];
        let by = by_second(&starts, 5_000);
        let want: Vec<(u64, Vec<f64>)> = vec![(0, vec![10.0, 20.0, 40.0]), (1, vec![30.0])];
        assert_eq!(by.into_iter().collect::<Vec<_>>(), want, "one sent before the first counts in second 0");
    }
}
