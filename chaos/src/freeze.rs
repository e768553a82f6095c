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
    let bound = Duration::from_millis(THAW_BOUND_MS);
    if let Some(line) = outlived_thaw(name, frozen, bound).await {
        eprintln!("chaos: {line}");
        baton_agent::workload::append(&c.path("witness").join("violations"), &line);
    }
}

/// Waits until no replica of `frozen` holds a killable process, or `bound` passed: then
/// says which still did.
async fn outlived_thaw(name: &str, frozen: &FrozenNode, bound: Duration) -> Option<String> {
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
            return None;
        }
        if start.elapsed() > bound {
            let names: Vec<String> = still.iter().map(|d| d.display().to_string()).collect();
            return Some(format!(
                "replicas of node {name} still had processes {} ms after it thawed (bound {} ms): {}",
                start.elapsed().as_millis(),
                bound.as_millis(),
                names.join(", ")
            ));
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

/// Writes `witness/thawed-<node>`: the wall clock's ms as node `node` thaws, and its
/// replicas' cgroup tree if it has one (a temporary file renamed, so a reader sees both).
pub fn say_thawed(witness: &Path, node: &str, tree: Option<&Path>) {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let (tmp, path) = (witness.join(format!(".thawed-{node}.tmp")), witness.join(format!("thawed-{node}")));
    // Its replicas' cgroup tree on the next line: a start whose first look finds an older
    // attempt running there, in its thaw's moment, waits for it.
    let text = match tree {
        Some(tree) => format!("{now_ms}\n{}\n", tree.display()),
        None => format!("{now_ms}\n"),
    };
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
        eprintln!("chaos: cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica cgroup as the thaw sees it: a directory whose `cgroup.procs` lists `pids`.
    fn replica(root: &Path, name: &str, pids: &[u32]) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let procs: String = pids.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(dir.join("cgroup.procs"), procs).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_thaw_is_judged_by_the_replicas_left_with_a_process_past_the_bound() {
        let root = tempfile::tempdir().unwrap();
        let mut live = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let (gone, held) = (replica(root.path(), "1-1-0", &[]), replica(root.path(), "2-1-0", &[live.id()]));
        let frozen =
            FrozenNode { root: Some(root.path().to_path_buf()), guards: Vec::new(), replicas: vec![gone, held] };
        let line = outlived_thaw("n1", &frozen, Duration::from_millis(50)).await;
        let _ = live.kill();
        let _ = live.wait();
        let line = line.expect("a replica with a live process past the bound");
        assert!(
            line.starts_with("replicas of node n1 still had processes") && line.contains("(bound 50 ms)"),
            "{line}"
        );
        assert!(line.ends_with("2-1-0"), "only the replica that held one: {line}");
        // Its process gone (the cgroup lists a pid no longer alive, or none): no verdict.
        std::fs::write(root.path().join("2-1-0/cgroup.procs"), "").unwrap();
        assert_eq!(outlived_thaw("n1", &frozen, Duration::from_millis(50)).await, None);
    }
}
