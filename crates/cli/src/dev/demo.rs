//! `baton dev --demo`: seed 000 (Run:ai "Understanding Preemption") played live. project-a
//! runs a training gang over its quota on idle GPUs; project-b claims its guaranteed quota
//! back; the training job checkpoints, waits, and resumes from its checkpoint.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::client::connect::Api;
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::*;
use baton_proto::words::Word;

/// The whole story must end within this; otherwise the demo says where it stuck.
const DEMO_TIMEOUT_MS: u64 = 60_000;
const TRAIN: &str = "large-training-job";
const JUPYTER: &str = "jupyter-workspace";

pub async fn play(children: &super::Children, dir: &Path) -> ExitCode {
    match story(children, dir).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}; logs are in {}", dir.join("logs").display());
            ExitCode::FAILURE
        }
    }
}

fn workload(steps: u32) -> Vec<String> {
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "baton".into());
    vec![exe, "workload".into(), "--steps".into(), steps.to_string(), "--step-ms".into(), "100".into()]
}

fn job(name: &str, queue: &str, class: &str, replicas: u32, steps: u32) -> JobSpec {
    JobSpec { grace_ms: Some(10_000), ..gpu_job(name, queue, class, replicas, 8, workload(steps)) }
}

async fn story(children: &super::Children, dir: &Path) -> Result<(), String> {
    let mut c = children.client(0).await?;
    let t0 = Instant::now();
    let mut events = c
        .watch(WatchRequest { job: String::new(), replay: false })
        .await
        .map_err(|e| e.message().to_string())?
        .into_inner();
    let printer = tokio::spawn(async move {
        while let Ok(Some(e)) = events.message().await {
            if !e.job.is_empty() {
                println!(
                    "{:>7.1}s  {:<10} {:<20} {}",
                    t0.elapsed().as_secs_f64(),
                    crate::client::human::event_kind(&e),
                    e.job,
                    e.message
                );
            }
        }
    });
    println!("seed 000: project-a and project-b each deserve 8 of the cluster's 16 GPUs.");
    for q in ["project-a", "project-b"] {
        c.put_queue(gpu_queue(q, 8)).await.map_err(|e| e.message().to_string())?;
    }
    println!("project-a submits a 2x8-GPU training gang (over its quota: the GPUs are idle).");
    super::submit(&mut c, job(TRAIN, "project-a", "train", 2, 1_000_000)).await?;
    wait(&mut c, TRAIN, |j| j.state() == JobState::Running).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("project-b wants its guaranteed 8 GPUs for an interactive workspace.");
    super::submit(&mut c, job(JUPYTER, "project-b", "interactive", 1, 40)).await?;
    wait(&mut c, JUPYTER, |j| j.state() == JobState::Running).await?;
    let victim = wait(&mut c, TRAIN, |j| j.state() == JobState::Pending).await?;
    println!("the training gang checkpointed: has_checkpoint = {}", victim.has_checkpoint);
    wait(&mut c, JUPYTER, |j| j.state() == JobState::Succeeded).await?;
    let resumed = wait(&mut c, TRAIN, |j| j.state() == JobState::Running && j.attempt == 2).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    printer.abort();
    println!();
    println!("what the training job's rank 0 printed:");
    for attempt in [1, resumed.attempt] {
        for line in log_lines(dir, resumed.id, attempt) {
            println!("  attempt {attempt}: {line}");
        }
    }
    c.cancel_job(JobRef { name: TRAIN.into(), ..Default::default() }).await.map_err(|e| e.message().to_string())?;
    println!("done: preempted with a checkpoint, resumed from it.");
    Ok(())
}

async fn wait(c: &mut Api, job: &str, ok: impl Fn(&Job) -> bool) -> Result<Job, String> {
    let deadline = Instant::now() + Duration::from_millis(DEMO_TIMEOUT_MS);
    loop {
        let j = match c.get_job(JobRef { name: job.into(), ..Default::default() }).await {
            Ok(j) => j.into_inner(),
            // A read the replica could not confirm with a quorum just now (a busy machine);
            // the next poll asks again, within the same deadline.
            Err(e) if e.code() == tonic::Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e.message().to_string()),
        };
        if ok(&j) {
            return Ok(j);
        }
        if Instant::now() > deadline {
            return Err(format!("{job} is still {} ({})", j.state().word(), j.reason));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The interesting lines of rank 0's output (checkpoint and resume), from whichever agent ran it.
fn log_lines(dir: &Path, job_id: u64, attempt: u32) -> Vec<String> {
    let mut out = Vec::new();
    for i in 1..=super::AGENTS {
        let path = dir.join(format!("node-{i}/logs/job-{job_id}/{attempt}/rank-0.stdout"));
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(text.lines().filter(|l| !l.starts_with("step ")).map(String::from));
        }
    }
    out
}
