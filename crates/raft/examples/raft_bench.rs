//! Benchmarks for the replicated log (numbers and machine in BENCHMARKS.md).
//!
//! ```text
//! cargo build --release -p baton-raft --examples
//! target/release/examples/raft_bench throughput [--clients 256] [--seconds 10]
//! target/release/examples/raft_bench latency [--writes 2000]
//! target/release/examples/raft_bench failover [--kills 50]
//! ```
//!
//! `throughput` and `latency` run three replicas in this process, on loopback gRPC, with
//! sled and flushing on (an entry is acknowledged only after fsync). `failover` runs three
//! replica processes (the `replica` example), kills the leader with SIGKILL, and measures
//! the time until a write is committed again.
//!
//! `RAFT_BENCH_MEMORY=1` runs `throughput` and `latency` with in-memory storage instead of
//! sled, to show what the disk costs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command as Process, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_model::class::PriorityClass;
use baton_model::{Command, Name, Op, Response};
use baton_proto::v1::RaftRequest;
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_raft::codec::{decode, encode};
use baton_raft::error::WriteError;
use baton_raft::metrics::Role;
use baton_raft::replica::{Replica, ReplicaConfig};
use tokio::sync::oneshot;

const CLUSTER: &str = "bench";

/// A small write any replica may forward (a Tick is the leader's own and is refused when
/// forwarded), and that the state machine accepts at any time stamp.
fn small_write(now_ms: u64) -> Command {
    let class = PriorityClass { name: Name::lit("bench"), value: 1, preemptible: true };
    Command { now_ms, op: Op::PutClass(class) }
}

fn flag(args: &[String], name: &str, default: u64) -> u64 {
    args.windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].parse().unwrap_or_else(|e| panic!("{name} {:?}: {e}", w[1])))
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{what}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms mean={:.3} ms",
        samples.len(),
        percentile(&samples, 0.50).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().unwrap().as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
    );
}

struct InProcess {
    replicas: Vec<Replica>,
    stops: Vec<oneshot::Sender<()>>,
}

async fn in_process_cluster(root: &Path) -> InProcess {
    let mut replicas = Vec::new();
    let mut stops = Vec::new();
    for id in 1..=3u64 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut config = ReplicaConfig::new(id, CLUSTER, addr, root.join(format!("r{id}")));
        if std::env::var_os("RAFT_BENCH_MEMORY").is_some() {
            config.storage = baton_raft::replica::Storage::Memory;
        }
        let replica = Replica::open(config).await.expect("open replica");
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = replica.clone();
        tokio::spawn(async move {
            let _ = serving
                .run(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        replicas.push(replica);
        stops.push(stop);
    }
    let members: BTreeMap<u64, String> = replicas.iter().map(|r| (r.id(), r.addr().to_string())).collect();
    replicas[0].bootstrap(members).await.expect("bootstrap");
    InProcess { replicas, stops }
}

impl InProcess {
    async fn leader(&self) -> Replica {
        loop {
            if let Some(r) = self.replicas.iter().find(|r| r.metrics().role == Role::Leader) {
                return r.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        for r in &self.replicas {
            r.shutdown().await;
        }
        for s in self.stops {
            let _ = s.send(());
        }
    }
}

async fn throughput(clients: u64, seconds: u64) {
    let root = tempfile::tempdir().unwrap();
    let cluster = in_process_cluster(root.path()).await;
    let leader = cluster.leader().await;
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (leader, done, failed, counting, stop) =
            (leader.clone(), done.clone(), failed.clone(), counting.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let ok = matches!(leader.write(small_write(c * 1_000_000 + n)).await, Ok(Ok(_)));
                if counting.load(Ordering::Relaxed) {
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    // Warm up, then count.
    tokio::time::sleep(Duration::from_secs(1)).await;
    counting.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let ok = done.load(Ordering::Relaxed);
    println!(
        "throughput: {clients} clients, {seconds} s: {ok} committed ({:.0} commands/s), {} failed",
        ok as f64 / elapsed,
        failed.load(Ordering::Relaxed)
    );
    cluster.stop().await;
}

async fn latency(writes: u64) {
    let root = tempfile::tempdir().unwrap();
    let cluster = in_process_cluster(root.path()).await;
    let leader = cluster.leader().await;
    for i in 0..100 {
        leader.write(small_write(i)).await.unwrap().unwrap();
    }
    let mut samples = Vec::new();
    for i in 0..writes {
        let t0 = Instant::now();
        leader.write(small_write(1_000 + i)).await.unwrap().unwrap();
        samples.push(t0.elapsed());
    }
    report("single-client commit latency", samples);
    cluster.stop().await;
}

/// Writes through `ForwardWrite`, which applies only on the leader (it never forwards).
async fn write_to(addr: &str, id: u64, cmd: &Command) -> Result<Response, String> {
    let attempt = async {
        let mut c = RaftTransportClient::connect(format!("http://{addr}")).await.map_err(|e| e.to_string())?;
        let reply = c
            .forward_write(RaftRequest {
                cluster_id: CLUSTER.into(),
                from_node_id: 0,
                to_node_id: id,
                payload: encode(cmd).map_err(|e| e.to_string())?,
            })
            .await
            .map_err(|e| e.to_string())?;
        let r: Result<Response, WriteError> = decode(&reply.into_inner().payload).map_err(|e| e.to_string())?;
        r.map_err(|e| e.to_string())
    };
    tokio::time::timeout(Duration::from_millis(300), attempt).await.map_err(|_| "timeout".to_string())?
}

fn spawn_replica(exe: &Path, id: u64, addr: &str, root: &Path, members: Option<&str>) -> Child {
    let mut p = Process::new(exe);
    p.args(["--id", &id.to_string(), "--cluster", CLUSTER, "--addr", addr])
        .arg("--dir")
        .arg(root.join(format!("r{id}")))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(m) = members {
        p.args(["--bootstrap", m]);
    }
    p.spawn().expect("start the replica example (build it with --examples)")
}

async fn find_leader(addrs: &BTreeMap<u64, String>, now: &mut u64) -> u64 {
    loop {
        for (id, addr) in addrs {
            *now += 1;
            if let Ok(Ok(_)) = write_to(addr, *id, &small_write(*now)).await {
                return *id;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn failover(kills: u64) {
    let exe = std::env::current_exe().unwrap().with_file_name(format!("replica{}", std::env::consts::EXE_SUFFIX));
    let root = tempfile::tempdir().unwrap();
    let mut addrs = BTreeMap::new();
    for id in 1..=3u64 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        addrs.insert(id, l.local_addr().unwrap().to_string());
    }
    let members = addrs.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(",");
    let mut children: BTreeMap<u64, Child> = addrs
        .iter()
        .map(|(&id, a)| {
            let m = (id == 1).then_some(members.as_str());
            (id, spawn_replica(&exe, id, a, root.path(), m))
        })
        .collect();
    let mut now = 1u64;
    let mut samples = Vec::new();
    for k in 0..kills {
        let leader = find_leader(&addrs, &mut now).await;
        let mut child = children.remove(&leader).unwrap();
        child.kill().expect("kill -9 the leader");
        let t0 = Instant::now();
        child.wait().unwrap();
        'retry: loop {
            for (id, addr) in addrs.iter().filter(|(id, _)| **id != leader) {
                now += 1;
                if let Ok(Ok(_)) = write_to(addr, *id, &small_write(now)).await {
                    break 'retry;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let took = t0.elapsed();
        samples.push(took);
        eprintln!("kill {k}: leader {leader}, next commit after {took:?}");
        // Bring it back, and let it rejoin before the next kill.
        children.insert(leader, spawn_replica(&exe, leader, &addrs[&leader], root.path(), None));
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }
    report("leader kill to next committed write", samples);
    for (_, mut c) in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("throughput") => throughput(flag(&args, "--clients", 256), flag(&args, "--seconds", 10)).await,
        Some("latency") => latency(flag(&args, "--writes", 2_000)).await,
        Some("failover") => failover(flag(&args, "--kills", 50)).await,
        _ => {
            eprintln!("usage: raft_bench throughput|latency|failover [flags]");
            std::process::exit(2);
        }
    }
}
