//! A whole node frozen, as a paused virtual machine (`Fault::FreezeNode`): what the harness
//! froze (`Cluster::freeze_node` and `Cluster::thaw_node` do it), and the judgement of the
//! thaw: every replica of the node must be gone within `THAW_BOUND_MS` of it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
/// A node frozen whole (`Cluster::freeze_node`).
pub struct FrozenNode {
    /// Its replicas' cgroup tree; `None`: its agent holds replicas by process groups.
    pub root: Option<PathBuf>,
    /// Its replicas' guards, stopped.
    pub guards: Vec<u32>,
    /// The replicas' cgroups that held processes when it froze.
    pub replicas: Vec<PathBuf>,
}

/// How long after its node thaws a replica frozen with it may keep a process: its guard's
/// and its agent's first look (the guard's sleep ran out while frozen) and a kill, on a
/// loaded machine. The same bound the workload's witness gives a frozen older attempt.
pub const THAW_BOUND_MS: u64 = baton_agent::workload::THAW_BOUND_MS;

/// Judges a thaw: every replica that held processes when node `name` froze (its lease ran
/// out meanwhile) must have none within `THAW_BOUND_MS`; a process held by the harness's
/// cgroup v1 freezer (an `unkillable` job's) is not counted, SIGKILL cannot end it. A
/// replica that outlives the bound is a violation in the witness's file.
pub async fn judge_thaw(c: &Cluster, name: &str, frozen: &FrozenNode) {
    let start = Instant::now();
    let left = || frozen.replicas.iter().filter(|dir| has_killable_process(dir)).cloned().collect::<Vec<_>>();
    loop {
        let still = left();
        if still.is_empty() {
            eprintln!(
                "chaos: node {name} thawed: the processes of its {} replicas were gone {} ms after the thaw",
                frozen.replicas.len(),
                start.elapsed().as_millis()
            );
            return;
        }
        if start.elapsed() > Duration::from_millis(THAW_BOUND_MS) {
            let names: Vec<String> = still.iter().map(|d| d.display().to_string()).collect();
            let line = format!(
                "replicas of node {name} still had processes {} ms after it thawed (bound {THAW_BOUND_MS} ms): {}",
                start.elapsed().as_millis(),
                names.join(", ")
            );
            eprintln!("chaos: {line}");
            baton_agent::workload::append(&c.path("witness").join("violations"), &line);
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether cgroup `dir` holds a process that SIGKILL can end (one not held by a cgroup v1
/// freezer of the harness's `unkillable` jobs).
fn has_killable_process(dir: &Path) -> bool {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()).any(|pid| {
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let frozen_v1 = format!(":freezer:/{}", baton_agent::workload::unkillable_cgroups::PREFIX);
        !cgroups.lines().any(|l| l.contains(&frozen_v1))
    })
}

/// The child cgroups of `root` that hold processes.
pub fn populated_children(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && std::fs::read_to_string(p.join("cgroup.procs")).is_ok_and(|t| !t.trim().is_empty()))
        .collect()
}

/// Writes `value` to cgroup `dir`'s `file`; a cgroup gone meanwhile is no error.
pub fn write_cgroup(dir: &Path, file: &str, value: &str) {
    let path = dir.join(file);
    if let Err(e) = std::fs::write(&path, value)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        panic!("cannot write {value} to {}: {e}", path.display());
    }
}

/// Sends `sig` to process `pid`; one gone meanwhile is no error.
pub fn signal_pid(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Writes `witness/thawed-<node>`: the wall clock's ms as node `node` thaws (a temporary
/// file renamed, so a reader sees a whole number).
pub fn say_thawed(witness: &Path, node: &str) {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let (tmp, path) = (witness.join(format!(".thawed-{node}.tmp")), witness.join(format!("thawed-{node}")));
    if let Err(e) = std::fs::write(&tmp, format!("{now_ms}\n")).and_then(|()| std::fs::rename(&tmp, &path)) {
        eprintln!("chaos: cannot write {}: {e}", path.display());
    }
}
