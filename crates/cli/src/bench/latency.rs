//! `baton bench latency`: starts a local cluster (as `baton dev` does) and measures, with
//! real job processes, how long work takes to start and how fast a preemption goes:
//! - submit -> running: from the submit call to the job's process printing its start;
//! - preempt signal: from the high-priority submit to the victim's signal handler;
//! - exit -> start: from the victim's handler (it exits right after) to the preemptor's start;
//! - GPU fault -> stop signal: from an XID injected into a development GPU a job runs on
//!   (decisions.md section 14) to that job's signal handler.
//!
//! Jobs stamp `date +%s%N` into files; every figure is wall-clock time on this machine.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::connect::Api;
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::*;

use super::{percentiles_line, runtime};
use crate::dev::procs::Children;
use crate::dev::submit;

/// Longest wait for one stamp; a round that takes longer fails the benchmark.
const STAMP_TIMEOUT_MS: u64 = 30_000;

pub fn run(rounds: u32, port: u16) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let tmp = match tempfile::Builder::new().prefix("baton-bench-").tempdir() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut children = match Children::start(tmp.path(), port, 8, None).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let result = measure(&children, tmp.path(), rounds).await;
        children.stop(Duration::from_secs(5)).await;
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// A job that stamps its start, and stamps its signal then exits on SIGTERM.
fn job(name: &str, queue: &str, class: &str, dir: &Path) -> JobSpec {
    let start = dir.join(format!("{name}.start"));
    let term = dir.join(format!("{name}.term"));
    let script = format!(
        "trap 'date +%s%N > {term}; exit 0' TERM; date +%s%N > {start}; while :; do sleep 0.01; done",
        term = term.display(),
        start = start.display()
    );
    let command = vec!["sh".into(), "-c".into(), script];
    JobSpec { grace_ms: Some(5_000), ..gpu_job(name, queue, class, 2, 8, command) }
}

async fn stamp(path: PathBuf) -> Result<f64, String> {
    let deadline = Instant::now() + Duration::from_millis(STAMP_TIMEOUT_MS);
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(ns) = text.trim().parse::<u128>()
        {
            return Ok(ns as f64 / 1e6);
        }
        if Instant::now() > deadline {
            return Err(format!("{} never appeared", path.display()));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn cancel(c: &mut Api, name: &str) -> Result<(), String> {
    c.cancel_job(JobRef { name: name.into(), ..Default::default() }).await.map_err(|e| e.message().to_string())?;
    Ok(())
}

async fn measure(children: &Children, dir: &Path, rounds: u32) -> Result<(), String> {
    let mut c = children.client(0).await?;
    // Borrowing queue `lo` (no guarantee) and `hi` (all 16 GPUs guaranteed): hi reclaims.
    c.put_queue(gpu_queue("lo", 0)).await.map_err(|e| e.message().to_string())?;
    c.put_queue(gpu_queue("hi", 16)).await.map_err(|e| e.message().to_string())?;
    let stamps = dir.join("stamps");
    std::fs::create_dir_all(&stamps).map_err(|e| e.to_string())?;
    let (mut start, mut signal, mut handoff) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let (lo, hi) = (format!("lo-{i}"), format!("hi-{i}"));
        let t = now_ms();
        submit(&mut c, job(&lo, "lo", "train", &stamps)).await?;
        start.push(stamp(stamps.join(format!("{lo}.start"))).await? - t);
        let t = now_ms();
        submit(&mut c, job(&hi, "hi", "inference", &stamps)).await?;
        let term = stamp(stamps.join(format!("{lo}.term"))).await?;
        let hi_start = stamp(stamps.join(format!("{hi}.start"))).await?;
        signal.push(term - t);
        handoff.push(hi_start - term);
        cancel(&mut c, &hi).await?;
        cancel(&mut c, &lo).await?;
        // Let the cancelled processes go before the next idle-cluster submit.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut fault = Vec::new();
    for i in 0..rounds {
        fault.push(gpu_fault_round(&mut c, dir, &stamps, i).await?);
    }
    println!("rounds: {rounds} (2 agents x 8 development GPUs, 3 replicas, each job a 2x8-GPU gang)");
    report("submit -> running (idle cluster)", &mut start);
    report("high-priority submit -> victim's signal", &mut signal);
    report("victim's exit -> preemptor's start", &mut handoff);
    report("GPU fault -> its job's stop signal", &mut fault);
    Ok(())
}

/// One round of the GPU-fault path: a gang runs, an XID is injected into one of its GPUs
/// (the file its agent polls for), and the time to the gang's signal handler is taken. The
/// GPU is cleared and the job cancelled before the next round.
async fn gpu_fault_round(c: &mut Api, dir: &Path, stamps: &Path, i: u32) -> Result<f64, String> {
    let name = format!("xid-{i}");
    submit(c, job(&name, "lo", "train", stamps)).await?;
    stamp(stamps.join(format!("{name}.start"))).await?;
    let j =
        c.get_job(JobRef { name: name.clone(), ..Default::default() }).await.map_err(|e| e.message().to_string())?;
    let p = j.into_inner().placements.into_iter().next().ok_or("the gang has no placement")?;
    let gpu = *p.gpus.first().ok_or("the gang was given no GPU")?;
    let agent_dir = dir.join(&p.node);
    let (tmp, faults) = (agent_dir.join("xid.tmp"), agent_dir.join("gpu-faults"));
    std::fs::create_dir_all(&faults).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, "XID 79 (benchmark)").map_err(|e| e.to_string())?;
    let t = now_ms();
    std::fs::rename(&tmp, faults.join(gpu.to_string())).map_err(|e| e.to_string())?;
    let term = stamp(stamps.join(format!("{name}.term"))).await?;
    let healthy = SetGpuHealthRequest { node: p.node.clone(), gpu, healthy: true, error: String::new() };
    c.set_gpu_health(healthy).await.map_err(|e| e.message().to_string())?;
    cancel(c, &name).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(term - t)
}

fn report(what: &str, ms: &mut [f64]) {
    println!("{what:<42} {}", percentiles_line(ms));
}
