//! Processes that SIGKILL cannot end (`Misbehave::Unkillable`): a job leaves a process
//! behind that the kernel's cgroup v1 freezer holds stopped, as a hung driver or file
//! system leaves one in uninterruptible sleep. Its agent must report it `Unkillable` (the
//! node takes no new work) and keep the GPUs it holds held, which the witness's GPU locks,
//! kept by that process, check. The harness plays the operator who fixes such a node: once
//! the cluster lists a node unhealthy because a process could not be killed, it thaws that
//! node's frozen processes that a SIGKILL waits on (which then ends them), waits until they
//! are gone, and uncordons the node.
//!
//! Frozen processes never outlive the harness: it thaws and kills those of its own run when
//! the run ends or unwinds (`Freezer`'s drop), and those of harnesses that died (their pid,
//! the tag in the cgroup's name, is gone) when a run starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_agent::workload::unkillable_cgroups::{FREEZER_ROOT, PREFIX};
use baton_proto::v1::{CordonRequest, Empty};

use crate::cluster::{Servers, connect_any};

/// How often the operator looks at the nodes.
const LOOK_MS: u64 = 500;
/// How long the operator takes to come, after a node is listed unhealthy: long enough for
/// the cluster to go on without it for a while.
const REPAIR_AFTER_MS: u64 = 2_000;
/// How long a thawed process may take to die before the repair gives up (the node stays
/// out; the run's drain then fails to finish, which the verdict shows).
const DIE_WITHIN_MS: u64 = 10_000;
/// Tries at uncordoning while the cluster has no leader.
const UNCORDON_TRIES: u32 = 100;
const RETRY_MS: u64 = 200;
/// What the cluster says of a node whose process could not be killed (`Unkillable`).
const UNKILLABLE_WORDS: &str = "could not be killed";

/// The frozen cgroups of this harness's run, named by its pid.
pub struct Freezer {
    tag: String,
}

impl Freezer {
    /// This run's freezer, after thawing what harnesses that died left frozen.
    pub fn start() -> Freezer {
        for dir in cgroups(|tag| !harness_lives(tag)) {
            if let Err(e) = thaw_and_kill(&dir) {
                eprintln!("chaos: a frozen process of a dead run stays in {}: {e}", dir.display());
            }
        }
        Freezer { tag: std::process::id().to_string() }
    }

    /// The tag a job's environment gives its frozen cgroups (`TAG_ENV`).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Thaws node `node`'s frozen processes of this run that a SIGKILL waits on (the
    /// agent's kill of their replica; one whose job still runs is left frozen), which then
    /// die of it; `Err` if one outlives `DIE_WITHIN_MS`.
    pub fn thaw_node(&self, node: &str) -> Result<usize, String> {
        let prefix = format!("{}-{node}-", self.tag);
        let killed = |dir: &PathBuf| {
            let pids = pids(dir);
            !pids.is_empty() && pids.iter().all(|&p| kill_pending(p))
        };
        let dirs: Vec<PathBuf> = cgroups(|rest| rest.starts_with(&prefix)).into_iter().filter(killed).collect();
        for dir in &dirs {
            thaw(dir).map_err(|e| format!("cannot thaw {}: {e}", dir.display()))?;
        }
        for dir in &dirs {
            remove_once_empty(dir)?;
        }
        Ok(dirs.len())
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let prefix = format!("{}-", self.tag);
        for dir in cgroups(|rest| rest.starts_with(&prefix)) {
            if let Err(e) = thaw_and_kill(&dir) {
                eprintln!("chaos: a frozen process stays in {}: {e}", dir.display());
            }
        }
    }
}

/// The freezer's cgroups of unkillable workloads whose name after the prefix `keep` keeps.
fn cgroups(keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(FREEZER_ROOT) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().and_then(|n| n.strip_prefix(PREFIX)).is_some_and(&keep))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// Whether the harness whose pid is the tag at the start of `rest` still runs.
fn harness_lives(rest: &str) -> bool {
    let pid = rest.split('-').next().unwrap_or("");
    !pid.is_empty() && Path::new("/proc").join(pid).exists()
}

fn pids(dir: &Path) -> Vec<i32> {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    procs.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Whether a SIGKILL waits on process `pid` (its pending signals, `/proc/PID/status`).
fn kill_pending(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let sigkill_bit = 1u64 << (libc::SIGKILL - 1);
    status
        .lines()
        .filter_map(|l| l.strip_prefix("ShdPnd:").or_else(|| l.strip_prefix("SigPnd:")))
        .any(|mask| u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & sigkill_bit != 0))
}

fn thaw(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("freezer.state"), "THAWED")
}

/// Kills every process in `dir`, thaws them so that they die, and removes the cgroup.
fn thaw_and_kill(dir: &Path) -> Result<(), String> {
    for pid in pids(dir) {
        // SAFETY: kill(2) with a pid read from the cgroup; a gone pid only fails.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    thaw(dir).map_err(|e| e.to_string())?;
    remove_once_empty(dir)
}

/// Removes `dir` once its processes are gone (within `DIE_WITHIN_MS`).
fn remove_once_empty(dir: &Path) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_millis(DIE_WITHIN_MS);
    while !pids(dir).is_empty() {
        if std::time::Instant::now() >= deadline {
            return Err(format!("processes {:?} outlived their thaw by {DIE_WITHIN_MS} ms", pids(dir)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_dir(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}

/// One node fixed by the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub node: String,
    /// Its frozen processes thawed (each the leftover of one unkillable replica).
    pub thawed: usize,
    /// Why it was not uncordoned, if it was not.
    pub failed: Option<String>,
}

/// Plays the operator until `stop`: every node listed unhealthy because a process could not
/// be killed is thawed and uncordoned `REPAIR_AFTER_MS` later.
pub async fn operate(servers: Servers, freezer: Arc<Freezer>, stop: Arc<AtomicBool>) -> Vec<Repair> {
    let mut repairs = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(LOOK_MS)).await;
        for node in unkillable_nodes(&servers).await {
            tokio::time::sleep(Duration::from_millis(REPAIR_AFTER_MS)).await;
            repairs.push(repair(&servers, &freezer, node).await);
        }
    }
    repairs
}

/// Fixes node `node`: thaws its frozen processes, then uncordons it.
pub async fn repair(servers: &Servers, freezer: &Arc<Freezer>, node: String) -> Repair {
    // Blocking file work and waits, off the runtime's workers.
    let (f, n) = (freezer.clone(), node.clone());
    let thawed = tokio::task::spawn_blocking(move || f.thaw_node(&n)).await.map_err(|e| e.to_string());
    let thawed = match thawed.and_then(|r| r) {
        Ok(n) => n,
        Err(e) => return Repair { node, thawed: 0, failed: Some(e) },
    };
    let failed = (!uncordon(servers, &node).await).then(|| "no leader took the uncordon".to_string());
    eprintln!("chaos: repaired node {node}: {thawed} frozen processes thawed, uncordoned: {}", failed.is_none());
    Repair { node, thawed, failed }
}

/// The nodes the cluster lists unhealthy because a process could not be killed.
pub async fn unkillable_nodes(servers: &Servers) -> Vec<String> {
    let Some(mut api) = connect_any(servers).await else { return Vec::new() };
    let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_millis(2_000), api.list_nodes(Empty {})).await else {
        return Vec::new();
    };
    reply.into_inner().nodes.into_iter().filter(|n| n.unhealthy.contains(UNKILLABLE_WORDS)).map(|n| n.name).collect()
}

async fn uncordon(servers: &Servers, node: &str) -> bool {
    let req = CordonRequest { node: node.into(), cordoned: false };
    for _ in 0..UNCORDON_TRIES {
        if let Some(mut api) = connect_any(servers).await
            && let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(2_000), api.cordon(req.clone())).await
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
    }
    false
}
