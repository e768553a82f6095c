//! `baton bench submit`: durable submissions per second. Each client is its own gRPC
//! connection and sends its next submit once the last is acknowledged (acknowledged =
//! committed by a quorum and applied). Clients are spread over the 3 replicas; followers
//! forward to the leader, as for any client. With `--etcd`, the same clients put the same
//! payloads (the encoded submit) into etcd instead.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::{Queue, SubmitRequest, WithinQueue};
use clap::Args;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

use super::etcd::EtcdKv;
use super::load::{Caller, Outcome, drive};
use super::scale::wait_ready;
use super::simagents::{self, Fleet, Seen};
use super::{percentiles_line, procstat, runtime};
use crate::dev::procs::{Children, Security};

#[derive(Args, Debug, Clone)]
pub struct SubmitArgs {
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 64)]
    pub clients: u32,
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// First port of the local cluster.
    #[arg(long, default_value_t = 7270)]
    pub port: u16,
    /// Simulated agents (8 GPUs each) registered before the load, so that submits fit a
    /// node; most jobs then wait in the queue, as in a busy cluster.
    #[arg(long, default_value_t = 10)]
    pub nodes: u32,
    /// Drive etcd at these endpoints (HOST:PORT,...) instead of starting baton replicas.
    #[arg(long)]
    pub etcd: Option<String>,
    /// How long each placed job runs before its simulated agent reports it exited 0 (e.g.
    /// 500ms): short runs end attempts, and so make accounting records, all through the
    /// load. Default: longer than any run (placed jobs keep their GPUs).
    #[arg(long, value_parser = crate::client::human::parse_duration_ms)]
    pub run_ms: Option<u64>,
    /// The data format the replicas stand for (`baton server --max-format`): 8 keeps
    /// accounting off (its records need format 9), to measure side by side what it costs.
    #[arg(long)]
    pub max_format: Option<u32>,
}

/// Most clients one run may have (each is a connection and a task).
const MAX_CLIENTS: u32 = 4_096;
/// Longest run.
const MAX_SECONDS: u64 = 3_600;
/// Most simulated nodes.
const MAX_NODES: u32 = 10_000;
/// GPUs of each simulated node.
const GPUS_PER_NODE: u32 = 8;
/// How long a simulated job runs: longer than any run, so the placed ones keep their GPUs.
const RUN_MS: u64 = 24 * 3600 * 1000;
/// Longest wait for the simulated nodes to be Ready.
const READY_TIMEOUT_S: u64 = 60;
/// The queue the benchmark's jobs go to.
pub const QUEUE: &str = "bench";

pub fn run(a: SubmitArgs) -> ExitCode {
    if let Err(e) = check(&a) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let result = runtime().and_then(|rt| {
        rt.block_on(async move {
            match &a.etcd {
                Some(endpoints) => against_etcd(&a, endpoints).await,
                None => against_baton(&a).await,
            }
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check(a: &SubmitArgs) -> Result<(), String> {
    if a.nodes == 0 || a.nodes > MAX_NODES {
        return Err(format!("--nodes {}: must be 1 to {MAX_NODES}", a.nodes));
    }
    if a.clients == 0 || a.clients > MAX_CLIENTS {
        return Err(format!("--clients {}: must be 1 to {MAX_CLIENTS}", a.clients));
    }
    if a.seconds == 0 || a.seconds > MAX_SECONDS {
        return Err(format!("--seconds {}: must be 1 to {MAX_SECONDS}", a.seconds));
    }
    Ok(())
}

/// The submit every client sends: a one-GPU job with a unique name.
pub fn submit_request(client: u32, seq: u64) -> SubmitRequest {
    submit_of_class(Backlog::Train, client, seq)
}

/// Which jobs a benchmark client submits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// The backlog: class `train` (the default), named `c<client>-<seq>`.
    Train,
    /// Urgent work that preempts the backlog: class `interactive` (priority 75, above
    /// `train`'s 50), named `u<client>-<seq>`.
    Urgent,
}

/// A one-GPU job of `kind` with a name unique to the client and sequence number.
pub fn submit_of_class(kind: Backlog, client: u32, seq: u64) -> SubmitRequest {
    let (prefix, class) = match kind {
        Backlog::Train => ("c", baton_model::class::DEFAULT_CLASS),
        Backlog::Urgent => ("u", "interactive"),
    };
    let name = format!("{prefix}{client}-{seq}");
    let spec = gpu_job(&name, QUEUE, class, 1, 1, vec!["sleep".into(), "3600".into()]);
    SubmitRequest { spec: Some(spec), request_id: String::new(), run_as: String::new(), after: Vec::new(), array: None }
}

pub async fn channel(addr: &str) -> Result<Channel, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("{addr}: {e}"))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))
}

/// The benchmark's queue, able to hold `capacity` GPUs of work, and the cluster's bounds on
/// unfinished jobs raised to their most: a backlog is what the benchmarks measure, and
/// the default bound (10,000 per queue) would turn most submits into refusals. Written
/// through the CLI's connection, which waits while the replicas, just started or with a
/// first leader unseated under load, answer "no leader yet" (one run of `bench scale`
/// stopped here when it did not).
pub async fn bench_queue(servers: &[String], capacity: u64) -> Result<(), String> {
    let timeout = Duration::from_millis(crate::client::connect::DEFAULT_TIMEOUT_MS);
    let conn = crate::client::Conn::new(servers.to_vec(), timeout, baton_proto::tls::Transport::Insecure);
    // Urgent jobs (`Backlog::Urgent`) preempt the backlog's lower-priority ones.
    let queue = Queue { within_queue: WithinQueue::LowerPriority.into(), ..gpu_queue(QUEUE, capacity) };
    let other = crate::client::error::Subject::Other;
    let put = |mut c: crate::client::connect::Api| {
        let queue = queue.clone();
        async move { c.put_queue(queue).await }
    };
    conn.call(other, "", put).await.map_err(|e| e.to_string())?;
    let most = baton_model::limits::MAX_JOBS as u32;
    let bounds = baton_proto::v1::TenancySettings {
        allow_root_jobs: None,
        max_jobs_per_user: Some(most),
        max_jobs_per_queue: Some(most),
    };
    let set = |mut c: crate::client::connect::Api| async move { c.set_tenancy(bounds).await };
    conn.call(other, "", set).await.map_err(|e| e.to_string())?;
    Ok(())
}

pub fn client(ch: Channel) -> BatonClient<Channel> {
    BatonClient::new(ch)
        .max_decoding_message_size(baton_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(baton_proto::MAX_MESSAGE_BYTES)
}

pub struct BatonSubmitter {
    pub client: BatonClient<Channel>,
    pub id: u32,
}

impl Caller for BatonSubmitter {
    async fn call(&mut self, seq: u64) -> Result<(), String> {
        self.client.submit(submit_request(self.id, seq)).await.map(drop).map_err(|e| e.message().to_string())
    }
}

struct EtcdPutter {
    kv: EtcdKv,
    id: u32,
}

impl Caller for EtcdPutter {
    async fn call(&mut self, seq: u64) -> Result<(), String> {
        let req = submit_request(self.id, seq);
        let key = format!("/jobs/c{}-{seq}", self.id).into_bytes();
        self.kv.put(key, req.encode_to_vec()).await.map_err(|e| e.message().to_string())
    }
}

async fn against_baton(a: &SubmitArgs) -> Result<(), String> {
    let tmp = tempfile::Builder::new().prefix("baton-bench-").tempdir().map_err(|e| e.to_string())?;
    let extra: Vec<String> = a.max_format.map(|f| vec!["--max-format".into(), f.to_string()]).unwrap_or_default();
    let mut children = Children::start_replicas(tmp.path(), a.port, &extra, Security::Insecure).await?;
    let result = load_baton(a, &children).await;
    children.stop(Duration::from_secs(5)).await;
    result
}

/// The replica that leads now, as (index in `servers`, its child's name).
pub async fn leader(servers: &[String]) -> Result<(usize, String), String> {
    for addr in servers {
        let Ok(ch) = channel(addr).await else { continue };
        let Ok(info) = client(ch).cluster_info(baton_proto::v1::Empty {}).await else { continue };
        let id = info.get_ref().leader_id;
        if id != 0 {
            return Ok((id as usize - 1, format!("replica {id}")));
        }
    }
    Err("no replica names a leader".into())
}

async fn load_baton(a: &SubmitArgs, children: &Children) -> Result<(), String> {
    let servers = children.servers();
    let fleet = Fleet {
        nodes: a.nodes,
        gpus: GPUS_PER_NODE,
        racks: 1,
        run_ms: a.run_ms.unwrap_or(RUN_MS),
        heartbeat_ms: baton_agent::config::AgentConfig::new("", "").heartbeat_ms,
        servers: servers.clone(),
        nodes_per_connection: simagents::NODES_PER_CONNECTION,
    };
    let capacity = u64::from(a.nodes) * u64::from(GPUS_PER_NODE);
    bench_queue(&servers, capacity).await?;
    simagents::start(fleet, Arc::new(Seen::new(a.nodes)))?;
    wait_ready(&servers, a.nodes as usize, Duration::from_secs(READY_TIMEOUT_S)).await?;
    let mut callers = Vec::new();
    for id in 0..a.clients {
        let addr = &servers[id as usize % servers.len()];
        callers.push(BatonSubmitter { client: client(channel(addr).await?), id });
    }
    let (_, leader) = leader(&servers).await?;
    let pid = children.pid(&leader).ok_or("the leader is not running")?;
    let cpu0 = procstat::cpu_s(pid);
    let mut out = drive(callers, Duration::from_secs(a.seconds)).await;
    let cpu = procstat::cpu_s(pid).zip(cpu0).map(|(b, a)| b - a);
    print_outcome(&format!("baton ({} replicas)", servers.len()), a, &mut out);
    let accounting = client(channel(&servers[0]).await?).cluster_info(baton_proto::v1::Empty {}).await;
    if let Some(acc) = accounting.ok().and_then(|r| r.into_inner().accounting) {
        let state = if acc.on { "on" } else { "off" };
        println!("  accounting {state}: {} records made", acc.records_made);
    }
    if let Some(cpu) = cpu {
        println!("  leader ({leader}) CPU: {:.2} cores", cpu / out.elapsed.as_secs_f64());
    }
    if let Some(rss) = procstat::rss_bytes(pid) {
        println!("  leader RSS: {:.0} MiB", rss as f64 / (1 << 20) as f64);
    }
    Ok(())
}

async fn against_etcd(a: &SubmitArgs, endpoints: &str) -> Result<(), String> {
    let endpoints: Vec<&str> = endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    if endpoints.is_empty() {
        return Err("--etcd: no endpoints given".into());
    }
    let mut callers = Vec::new();
    for id in 0..a.clients {
        let addr = endpoints[id as usize % endpoints.len()];
        callers.push(EtcdPutter { kv: EtcdKv::new(channel(addr).await?), id });
    }
    let mut out = drive(callers, Duration::from_secs(a.seconds)).await;
    print_outcome(&format!("etcd ({} members)", endpoints.len()), a, &mut out);
    Ok(())
}

fn print_outcome(what: &str, a: &SubmitArgs, out: &mut Outcome) {
    println!(
        "{what}: {} clients, {} s: {} acknowledged ({:.0}/s), {} errors",
        a.clients,
        a.seconds,
        out.ok,
        out.per_s(),
        out.errors
    );
    println!("  latency {}", percentiles_line(&mut out.latencies_ms));
    if let Some(e) = &out.first_error {
        println!("  first error: {e}");
    }
}
