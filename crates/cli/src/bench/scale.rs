//! `baton bench scale`: 3 real replica processes, N simulated agents over real gRPC (in this
//! process, see `simagents`) and concurrent submitting clients. It measures, in order:
//! 1. the fleet's registration (every node attached and Ready);
//! 2. a backlog submitted through the API: submissions/s and submit latency;
//! 3. placing the backlog: time until every job has been told to run on a node, and
//!    submit-to-running per job (submit sent -> the node's directive says run);
//! 4. steady state with the jobs running: leader CPU and memory, directive and report bytes/s;
//! 5. a leader kill: time until every node has a directive of a newer term (reattached to the
//!    new leader and sent its whole desired state), and nodes declared lost meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_proto::v1::Empty;
use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::load::Caller;
use super::simagents::{self, Fleet, Seen};
use super::submit::{channel, client, leader, submit_request};
use super::{percentiles_line, procstat, runtime};
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
    /// Skip the leader kill.
    #[arg(long)]
    pub no_kill: bool,
    /// First port of the local cluster.
    #[arg(long, default_value_t = 7370)]
    pub port: u16,
}

const MAX_NODES: u32 = 100_000;
const MAX_CLIENTS: u32 = 4_096;
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
    if a.backlog == 0 {
        return Err("--backlog: must be above 0".into());
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
    if result.is_err() {
        eprintln!("replica logs were in {} (removed on exit)", tmp.path().display());
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
    let capacity = u64::from(a.nodes) * u64::from(a.gpus);
    super::submit::bench_queue(&servers[0], capacity).await?;
    let seen = Arc::new(Seen::new(a.nodes));
    let fleet = Fleet {
        nodes: a.nodes,
        gpus: a.gpus,
        racks: a.racks,
        run_ms: a.run_ms,
        heartbeat_ms: a.heartbeat_ms,
        servers: servers.clone(),
    };
    let t = Instant::now();
    simagents::start(fleet, seen.clone())?;
    wait_ready(&servers, a.nodes as usize, timeout).await?;
    println!("registration: {} nodes Ready in {:.1} s", a.nodes, t.elapsed().as_secs_f64());

    let (_, name) = leader(&servers).await?;
    let pid = children.pid(&name).ok_or("the leader is not running")?;
    let usage = Usage::start(pid, &seen);
    let first_submit = Instant::now();
    let acknowledged = submit_backlog(a, &servers, &seen).await?;
    let placed = wait_started(&seen, acknowledged, first_submit, timeout).await;
    let placing = usage.stop(pid, &seen);
    println!(
        "placing: {} of {acknowledged} acknowledged jobs running {:.1} s after the first submit",
        placed.0, placed.1
    );
    let (_, now_leader) = leader(&servers).await?;
    if now_leader != name {
        println!("  (the leader changed from {name} to {now_leader} meanwhile: the CPU below is {name}'s)");
    }
    if placed.0 < acknowledged {
        println!("  (not all placed within --timeout-s {}; capacity is {capacity} GPUs)", a.timeout_s);
    }
    let mut ms = std::mem::take(&mut *seen.to_running_ms.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    println!("  submit -> running {}", percentiles_line(&mut ms));
    placing.print("  while submitting and placing");

    let (_, name) = leader(&servers).await?;
    let pid = children.pid(&name).ok_or("the leader is not running")?;
    let usage = Usage::start(pid, &seen);
    tokio::time::sleep(Duration::from_secs(a.steady_s)).await;
    usage.stop(pid, &seen).print(&format!("steady state, jobs running, leader {name}"));
    if !a.no_kill {
        let (_, name) = leader(&servers).await?;
        leader_kill(a, children, &seen, &name).await?;
    }
    Ok(())
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

/// Submits the backlog from `a.clients` clients sharing one counter; the jobs acknowledged.
async fn submit_backlog(a: &ScaleArgs, servers: &[String], seen: &Arc<Seen>) -> Result<u64, String> {
    let left = Arc::new(AtomicU64::new(u64::from(a.backlog)));
    let mut callers = Vec::new();
    for id in 0..a.clients {
        let addr = &servers[id as usize % servers.len()];
        callers.push(Backlog { client: client(channel(addr).await?), id, seen: seen.clone() });
    }
    let t = Instant::now();
    let out = drive_until_empty(callers, &left).await;
    let took = t.elapsed();
    println!(
        "submitting: {} acknowledged in {:.1} s ({:.0}/s), {} errors",
        out.0,
        took.as_secs_f64(),
        out.0 as f64 / took.as_secs_f64(),
        out.1
    );
    let mut lat = out.2;
    println!("  submit latency {}", percentiles_line(&mut lat));
    if let Some(e) = out.3 {
        println!("  first error: {e}");
    }
    Ok(out.0)
}

struct Backlog {
    client: baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>,
    id: u32,
    seen: Arc<Seen>,
}

impl Caller for Backlog {
    async fn call(&mut self, seq: u64) -> Result<(), String> {
        let req = submit_request(self.id, seq);
        if let Some(spec) = &req.spec {
            self.seen.submitted_now(spec.name.clone());
        }
        self.client.submit(req).await.map(drop).map_err(|e| e.message().to_string())
    }
}

/// Runs the callers until `left` jobs have been taken; (ok, errors, latencies, first error).
async fn drive_until_empty(callers: Vec<Backlog>, left: &Arc<AtomicU64>) -> (u64, u64, Vec<f64>, Option<String>) {
    let mut tasks = Vec::new();
    for mut c in callers {
        let left = left.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut errors, mut lat, mut first) = (0u64, 0u64, Vec::new(), None);
            let mut seq = 0;
            while left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
                let t = Instant::now();
                match c.call(seq).await {
                    Ok(()) => {
                        ok += 1;
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    Err(e) => {
                        errors += 1;
                        first.get_or_insert(e);
                    }
                }
                seq += 1;
            }
            (ok, errors, lat, first)
        }));
    }
    let mut total = (0, 0, Vec::new(), None);
    for t in tasks {
        let Ok((ok, errors, lat, first)) = t.await else { continue };
        total.0 += ok;
        total.1 += errors;
        total.2.extend(lat);
        if total.3.is_none() {
            total.3 = first;
        }
    }
    total
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

/// (jobs started, seconds since `first_submit`) once all `n` started or at the timeout.
async fn wait_started(seen: &Seen, n: u64, first_submit: Instant, timeout: Duration) -> (u64, f64) {
    let deadline = Instant::now() + timeout;
    loop {
        let started = seen.started.load(Ordering::Relaxed);
        if started >= n || Instant::now() > deadline {
            return (started, first_submit.elapsed().as_secs_f64());
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

/// `baton_nodes_lost` of replica `index` (0-based), from its /metrics.
async fn nodes_lost(port: u16, index: usize) -> Option<u64> {
    let addr = format!("127.0.0.1:{}", port + METRICS_PORT_OFFSET + index as u16);
    let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.ok()?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body)).await.ok()?.ok()?;
    counter(&body, "baton_nodes_lost")
}

/// The value of counter `name` in a Prometheus text exposition (`name_total` or `name`).
fn counter(text: &str, name: &str) -> Option<u64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name || key == format!("{name}_total")).then(|| value.trim().parse::<f64>().ok().map(|v| v as u64))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_read_with_or_without_its_total_suffix() {
        let text = "# HELP baton_nodes_lost Nodes declared lost\nbaton_nodes_lost_total 3\nbaton_other 9\n";
        assert_eq!(counter(text, "baton_nodes_lost"), Some(3));
        assert_eq!(counter("baton_nodes_lost 2\n", "baton_nodes_lost"), Some(2));
        assert_eq!(counter("baton_other 9\n", "baton_nodes_lost"), None);
    }
}
