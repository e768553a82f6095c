//! `baton dev`: a local HA cluster on this machine (3 replicas, 2 agents with development
//! GPUs) as child processes of this one, data in a temporary directory; `--demo` then plays
//! seed 000's story live with real processes. Everything runs with mutual TLS: a CA and one
//! certificate per replica, agent and the `dev` client are made in `<dir>/tls` on the
//! first start and kept after.
//!
//! - `procs`: starting, watching and stopping the child processes.
//! - `demo`: the story and its timeline.

mod demo;
pub(crate) mod procs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use procs::Children;

#[derive(Args, Debug, Clone)]
pub struct DevArgs {
    /// Play seed 000's story (a training job over quota preempted with a checkpoint, then
    /// resumed from it) and print its timeline, then stop.
    #[arg(long)]
    pub demo: bool,
    /// First port; replicas listen on it and the next two for clients and agents, and on
    /// the three after those for each other (raft's peer ports). `/metrics` is served from
    /// this port + 100 on: the replicas', then the agents'.
    #[arg(long, default_value_t = 7070)]
    pub port: u16,
    /// Development GPUs per agent.
    #[arg(long, default_value_t = 8)]
    pub gpus: u32,
    /// Where data and logs go (default: a new temporary directory, removed on exit).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Every replica and agent sends its tracing spans (each job's decision path) to the
    /// OpenTelemetry collector at this address over OTLP/gRPC, http://HOST:PORT
    /// (docs/metrics.md).
    #[arg(long, env = crate::otel::ENDPOINT_VAR, value_name = "URL", value_parser = crate::otel::parse_endpoint)]
    pub otlp_endpoint: Option<String>,
}

/// Replicas in a dev cluster: the smallest that survives losing one.
pub const REPLICAS: u16 = 3;
/// Agents (nodes) in a dev cluster.
pub const AGENTS: u16 = 2;
/// The development MIG slices the last agent offers besides its GPUs.
pub const DEV_MIG: &str = "mig-1g.10gb=7";
/// The first `/metrics` port is `--port` plus this.
pub const METRICS_PORT_OFFSET: u16 = 100;

pub fn run(args: DevArgs) -> ExitCode {
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => match tempfile::Builder::new().prefix("baton-dev-").tempdir() {
            Ok(t) => {
                tmp = t;
                tmp.path().to_path_buf()
            }
            Err(e) => return fail(format!("cannot make a temporary directory: {e}")),
        },
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async move {
        let mut children = match Children::start(&dir, args.port, args.gpus, args.otlp_endpoint.as_deref()).await {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        let code = if args.demo {
            demo::play(&children, &dir).await
        } else {
            serve(&children, &dir, args.otlp_endpoint.as_deref()).await
        };
        children.stop(Duration::from_secs(5)).await;
        code
    })
}

fn fail(e: String) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

async fn serve(children: &Children, dir: &std::path::Path, otlp: Option<&str>) -> ExitCode {
    let servers = children.servers().join(",");
    println!("baton dev: {REPLICAS} replicas and {AGENTS} agents with development GPUs are up.");
    println!("  data and logs: {}", dir.display());
    for (name, url) in children.metrics_urls() {
        println!("  metrics of {name}: {url}");
    }
    if let Some(url) = children.dashboard_url() {
        println!("  dashboard: {url}   (any replica's metrics address serves it; docs/dashboard.md)");
    }
    match otlp {
        Some(url) => println!("  traces: sent over OTLP to {url}   (docs/metrics.md, \"OpenTelemetry\")"),
        None => println!("  traces: not exported (--otlp-endpoint http://HOST:4317 sends them to a collector)"),
    }
    println!();
    println!("In another shell:");
    println!("  export BATON_SERVER={servers}");
    println!("  export BATON_TLS_DIR={}", children.client_tls_dir().display());
    println!("  export BATON_TOKEN_FILE={}   # the admin token (docs/security.md)", children.token_file().display());
    println!("  baton cluster info");
    println!("  baton queue create team-a --gpus 8");
    println!("  baton submit --name hello --queue team-a --gpus 1 -- sh -c 'echo hello from $CUDA_VISIBLE_DEVICES'");
    println!(
        "  baton submit --name infer --queue team-a --resources mig-1g.10gb=2 -- sh -c 'echo slices $CUDA_VISIBLE_DEVICES'"
    );
    println!(
        "  baton submit --name share --queue team-a --gpus 0.5 -- sh -c 'echo $BATON_GPU_FRACTION of GPU $CUDA_VISIBLE_DEVICES'"
    );
    println!("  baton nodes; baton list; baton logs hello");
    println!();
    println!("Press Ctrl-C to stop the cluster.");
    tokio::select! {
        () = crate::logging::shutdown_signal() => ExitCode::SUCCESS,
        e = children.first_exit() => {
            eprintln!("error: {e}; see the logs in {}", dir.display());
            ExitCode::FAILURE
        }
    }
}

/// Submits without a request id; the error is the server's message.
pub(crate) async fn submit(c: &mut crate::client::connect::Api, spec: baton_proto::v1::JobSpec) -> Result<(), String> {
    let req = baton_proto::v1::SubmitRequest {
        spec: Some(spec),
        request_id: String::new(),
        run_as: String::new(),
        after: Vec::new(),
        array: None,
    };
    c.submit(req).await.map_err(|e| e.message().to_string())?;
    Ok(())
}
