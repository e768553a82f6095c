//! `baton bench`: measurements of a live local cluster of real `baton server` processes.
//!
//! - `latency`: submit-to-running and preemption latency with real job processes.
//! - `submit`: durable submissions per second over gRPC from many concurrent clients, and
//!   the same load against etcd (`--etcd`) as a peer anchor.
//! - `scale`: N simulated agents (`simagents`) and submitting clients against 3 replicas,
//!   a backlog to place, and a leader kill.
//! - `sim`: trace-mode simulation speed (no cluster: the simulator on one core).
//! - `clients`: submitting clients in processes of their own, for `scale`.
//! - `hostile`: random and maximal messages from an authenticated agent and user against the
//!   dev cluster, while honest jobs run: the leader's apply time, leases lost, processes dead.
//! - `load`: the closed-loop client driver shared by `submit` and `scale`; `etcd`: the one
//!   etcd call the anchor needs; `procstat`: a process's CPU and memory from /proc.

mod clients;
mod etcd;
mod hostile;
mod latency;
mod load;
mod procstat;
mod scale;
mod sim;
mod simagents;
mod submit;

use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Subcommand, Debug)]
pub enum BenchWhat {
    /// Submit-to-running and preemption latency on an idle local cluster.
    Latency {
        /// Preemption rounds (each also measures one submit on an idle cluster).
        #[arg(long, default_value_t = 50)]
        rounds: u32,
        /// First port of the local cluster.
        #[arg(long, default_value_t = 7170)]
        port: u16,
    },
    /// Durable submissions per second (acknowledged = committed) from concurrent clients
    /// against 3 local replicas, or against etcd with `--etcd`.
    Submit(submit::SubmitArgs),
    /// 3 local replicas, N simulated agents and submitting clients: throughput, time to
    /// place a backlog, submit-to-running, leader CPU and memory, and a leader kill.
    Scale(scale::ScaleArgs),
    /// One process of submitting clients, started by `scale --client-procs` (internal).
    #[command(hide = true)]
    Clients(clients::ClientsArgs),
    /// Random and maximal messages from an authenticated agent and user against a local
    /// cluster with mutual TLS and tokens, while honest jobs run (BENCHMARKS.md, "Hostile
    /// callers").
    Hostile(hostile::HostileArgs),
    /// Trace-mode simulation speed: generated traces of each size on a cluster file, one
    /// after another on one core (BENCHMARKS.md, "Simulation speed").
    Sim {
        /// The cluster (a scenario file without timeline).
        #[arg(long)]
        cluster: String,
        /// Trace sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10000,30000,100000")]
        jobs: Vec<usize>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Offered load of the generated traces.
        #[arg(long, default_value_t = 0.9)]
        load: f64,
        /// Replace the cluster file's `reserve_after` (seconds, or `never`).
        #[arg(long, value_parser = crate::sim::parse_reserve_after)]
        reserve_after: Option<crate::sim::ReserveAfter>,
    },
}

pub fn run(args: BenchArgs) -> ExitCode {
    match args.what {
        BenchWhat::Latency { rounds, port } => latency::run(rounds, port),
        BenchWhat::Submit(a) => submit::run(a),
        BenchWhat::Scale(a) => scale::run(a),
        BenchWhat::Clients(a) => clients::run(a),
        BenchWhat::Hostile(a) => hostile::run(a),
        BenchWhat::Sim { cluster, jobs, seed, load, reserve_after } => {
            sim::run(&cluster, &jobs, seed, load, reserve_after)
        }
    }
}

/// The body of `GET` on a plain-HTTP `/metrics` URL (`http://HOST:PORT/metrics`), within 5 s.
async fn scrape_url(url: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.strip_prefix("http://")?.split('/').next()?;
    let read = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(body)
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), read).await.ok()?
}

/// The value of sample `name` (without labels) in a Prometheus text exposition, as a float
/// (histogram sums are).
fn float(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name).then(|| value.trim().parse::<f64>().ok())?
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// The value at quantile `q` (0..=1) of sorted `ms`, by the nearest rank; 0 when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// `p50 .. ms   p99 .. ms   max .. ms` of `ms` (sorted in place).
fn percentiles_line(ms: &mut [f64]) -> String {
    ms.sort_by(f64::total_cmp);
    format!(
        "p50 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms",
        quantile(ms, 0.5),
        quantile(ms, 0.99),
        quantile(ms, 1.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank_and_an_empty_list_gives_zero() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 51.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
