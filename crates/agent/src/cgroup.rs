//! One cgroup v2 per replica, under the agent's own subtree: the kernel, not the job's
//! cooperation, says which processes belong to a replica. A replica's processes cannot leave
//! its cgroup by `setsid` or a double fork (only a process with write access to another
//! cgroup's `cgroup.procs` can move, and the job's user has none), so `cgroup.kill` ends all
//! of them and `cgroup.events` says when none is left.
//!
//! Layout: `<root>/<job>-<attempt>-<rank>`, where `<root>` is `--cgroup-root` or, by default,
//! `baton-<node>-<hash of the data directory>` inside the agent's own cgroup in the v2
//! hierarchy (the subtree systemd's `Delegate=yes` hands to the service): stable across agent
//! restarts, so a restarted agent finds its replicas' cgroups, and distinct per agent, so two
//! agents on one host never share one.
//!
//! Modes (`--containment`): `cgroup` refuses to start without a writable v2 hierarchy that has
//! `cgroup.kill` (Linux 5.14); `process-group` is the weaker mode of earlier versions, where a
//! replica is its process group and a process that leaves the group escapes; `auto` takes
//! `cgroup` where it can and says in its log and `/metrics` when it could not.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::journal::ReplicaKey;

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainmentMode {
    /// cgroup v2, or refuse to start.
    Cgroup,
    /// Process groups only (the job can escape them).
    ProcessGroup,
    /// cgroup v2 where the host allows it, else process groups, said in the log and metrics.
    Auto,
}

impl ContainmentMode {
    pub fn parse(text: &str) -> Result<ContainmentMode, String> {
        match text {
            "cgroup" => Ok(ContainmentMode::Cgroup),
            "process-group" => Ok(ContainmentMode::ProcessGroup),
            "auto" => Ok(ContainmentMode::Auto),
            other => Err(format!("--containment {other:?}: one of cgroup, process-group, auto")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup v2 hierarchy is mounted here (/proc/self/mountinfo lists no cgroup2)")]
    NoHierarchy,
    #[error(
        "cgroup {path}: {why}; give the agent a delegated cgroup v2 subtree (systemd: Delegate=yes; \
         containers: a writable /sys/fs/cgroup) or name the weaker mode with --containment process-group"
    )]
    Unusable { path: PathBuf, why: String },
    #[error("cgroup {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cgroup {path} still holds processes: a replica is never started beside another's")]
    Populated { path: PathBuf },
}

/// The replica a cgroup's name `<job>-<attempt>-<rank>` names.
fn parse_key(name: &str) -> Option<ReplicaKey> {
    let mut parts = name.splitn(3, '-');
    let job_id = parts.next()?.parse().ok()?;
    let attempt = parts.next()?.parse().ok()?;
    let rank = parts.next()?.parse().ok()?;
    Some(ReplicaKey { job_id, attempt, rank })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io { path: path.to_path_buf(), source }
}

/// The agent's subtree, where it makes one cgroup per replica.
#[derive(Debug, Clone)]
pub struct CgroupRoot {
    dir: PathBuf,
}

impl CgroupRoot {
    /// `dir` itself, made if missing, checked usable (writable, with `cgroup.kill`).
    pub fn at(dir: &Path) -> Result<CgroupRoot, CgroupError> {
        std::fs::create_dir_all(dir).map_err(|e| unusable(dir, format!("cannot create it: {e}")))?;
        for file in ["cgroup.procs", "cgroup.kill"] {
            let path = dir.join(file);
            if !path.exists() {
                return Err(unusable(dir, format!("has no {file} (not cgroup v2, or a kernel before 5.14)")));
            }
        }
        let probe = dir.join(".baton-probe");
        std::fs::create_dir(&probe)
            .or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
            .map_err(|e| unusable(dir, format!("cannot make a child cgroup: {e}")))?;
        let _ = std::fs::remove_dir(&probe);
        Ok(CgroupRoot { dir: dir.to_path_buf() })
    }

    /// The default root for the agent of `node` keeping its data in `data_dir`: a child of the
    /// agent's own cgroup in the v2 hierarchy. No controller is enabled on it, so the agent
    /// may stay in its own cgroup beside it (v2's rule against inner processes binds only
    /// cgroups that hand controllers down).
    pub fn default_for(node: &str, data_dir: &Path) -> Result<CgroupRoot, CgroupError> {
        let mount = v2_mount()?;
        let own = own_v2_path().unwrap_or_default();
        let parent = mount.join(own.trim_start_matches('/'));
        // The absolute path: two agents given the same relative `--data-dir` from different
        // working directories must not share a root (and a job id of one would name a cgroup
        // of the other's).
        let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        CgroupRoot::at(&parent.join(format!("baton-{node}-{:08x}", short_hash(&data_dir))))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cgroup of one replica (not made yet).
    pub fn replica(&self, job_id: u64, attempt: u32, rank: u32) -> ReplicaCgroup {
        ReplicaCgroup { dir: self.dir.join(format!("{job_id}-{attempt}-{rank}")) }
    }

    /// The replica cgroups here that still hold processes, by the replica their names say
    /// (`<job>-<attempt>-<rank>`), at most `max` of them.
    pub fn populated_children(&self, max: usize) -> Vec<(ReplicaKey, ReplicaCgroup)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| {
                let key = parse_key(e.file_name().to_str()?)?;
                let cgroup = ReplicaCgroup { dir: e.path() };
                cgroup.populated().then_some((key, cgroup))
            })
            .take(max)
            .collect()
    }

    /// Removes the empty replica cgroups a run before this one left (an agent killed before it
    /// removed them); a populated one stays, for adoption.
    pub fn remove_empty_children(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                // rmdir(2) of a cgroup fails while it has processes or children.
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

/// The cgroup root the agent uses under `mode`, or `None` for process groups only. `auto`
/// falls back to process groups, saying why in the log.
pub fn resolve(
    mode: ContainmentMode,
    root: Option<&Path>,
    node: &str,
    data_dir: &Path,
) -> Result<Option<CgroupRoot>, CgroupError> {
    let found = || match root {
        Some(dir) => CgroupRoot::at(dir),
        None => CgroupRoot::default_for(node, data_dir),
    };
    let resolved = match mode {
        ContainmentMode::ProcessGroup => None,
        ContainmentMode::Cgroup => Some(found()?),
        ContainmentMode::Auto => match found() {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!("--containment auto: {e}; holding replicas by process groups only");
                None
            }
        },
    };
    match &resolved {
        Some(r) => tracing::info!(root = %r.dir.display(), "each replica runs in a cgroup of its own"),
        None => tracing::warn!(
            "replicas are held by process groups only: a process that leaves its group (setsid) escapes stops and kills"
        ),
    }
    Ok(resolved)
}

fn unusable(path: &Path, why: String) -> CgroupError {
    CgroupError::Unusable { path: path.to_path_buf(), why }
}

/// The cgroup of one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaCgroup {
    dir: PathBuf,
}

impl ReplicaCgroup {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Up to 8 of its processes with their states (`D` is uninterruptible sleep), for a
    /// person: `pid 812 (D), pid 815 (D)`.
    pub fn describe_processes(&self) -> String {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<&str> = procs.split_whitespace().collect();
        let mut shown: Vec<String> = pids
            .iter()
            .take(8)
            .map(|p| {
                let state = p.parse().ok().and_then(crate::procfs::stat).map_or('?', |(_, s)| s);
                format!("pid {p} ({state})")
            })
            .collect();
        if pids.len() > 8 {
            shown.push(format!("and {} more", pids.len() - 8));
        }
        if shown.is_empty() { "no process listed".to_string() } else { shown.join(", ") }
    }

    /// Freezes (`true`) or thaws its processes (`cgroup.freeze`): every one of them, whatever
    /// group or session it is in. Frozen processes act on no signal but SIGKILL until thawed.
    pub fn freeze(&self, frozen: bool) -> Result<(), CgroupError> {
        let path = self.dir.join("cgroup.freeze");
        std::fs::write(&path, if frozen { "1" } else { "0" }).map_err(io(&path))
    }

    /// Every process of it is frozen (`cgroup.events`: `frozen 1`).
    pub fn frozen(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events")).is_ok_and(|e| e.lines().any(|l| l == "frozen 1"))
    }

    /// It holds a process.
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
    }

    /// Makes it (an existing empty one is reused: a replica started again after a crash
    /// before its spawn) and opens its `cgroup.procs` for the child to join before it runs
    /// anything. One that holds processes is refused: joining it would make two replicas
    /// one.
    pub fn create(&self) -> Result<OwnedFd, CgroupError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        if self.populated() {
            return Err(CgroupError::Populated { path: self.dir.clone() });
        }
        let procs = self.dir.join("cgroup.procs");
        let f = std::fs::OpenOptions::new().write(true).open(&procs).map_err(io(&procs))?;
        Ok(f.into())
    }

    /// Kills every process in it at once (`cgroup.kill`), whatever group or session it is in.
    /// A cgroup that is gone has nothing to kill.
    pub fn kill(&self) -> Result<(), CgroupError> {
        let path = self.dir.join("cgroup.kill");
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(mut f) => f.write_all(b"1").map_err(io(&path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CgroupError::Io { path, source: e }),
        }
    }

    /// Kills what is left in it and removes it; `false` while it is not gone yet (a process
    /// takes a moment to die after SIGKILL, and rmdir(2) refuses a cgroup with processes).
    pub fn kill_and_remove(&self) -> bool {
        if let Err(e) = self.kill() {
            tracing::warn!("{e}");
        }
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is open as `procs`. Runs
/// between fork and exec: no allocation, only write(2) of digits from the stack.
pub fn join_in_child(procs: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: getpid(2) has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut digits = [0u8; 10];
    let mut n = pid;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let text = &digits[at..];
    // SAFETY: write(2) of a buffer that lives on this stack frame to an fd the parent opened.
    let written = unsafe { libc::write(procs.as_raw_fd(), text.as_ptr().cast(), text.len()) };
    if written < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Where the v2 hierarchy is mounted: `/sys/fs/cgroup` on a pure v2 host,
/// `/sys/fs/cgroup/unified` on a hybrid one.
fn v2_mount() -> Result<PathBuf, CgroupError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(io(Path::new("/proc/self/mountinfo")))?;
    text.lines().find_map(mount_of_cgroup2).ok_or(CgroupError::NoHierarchy)
}

/// The mount point of a mountinfo line whose filesystem type is cgroup2.
fn mount_of_cgroup2(line: &str) -> Option<PathBuf> {
    // Fields: id parent major:minor root mount-point options... - fstype source options
    let (left, right) = line.split_once(" - ")?;
    if right.split_whitespace().next()? != "cgroup2" {
        return None;
    }
    left.split_whitespace().nth(4).map(PathBuf::from)
}

/// The agent's own cgroup in the v2 hierarchy (`0::/path` in /proc/self/cgroup).
fn own_v2_path() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

/// FNV-1a of the path: a stable, short name part (not a security boundary).
fn short_hash(path: &Path) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_mount_is_read_from_mountinfo() {
        let hybrid = "35 25 0:30 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw";
        assert_eq!(mount_of_cgroup2(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let v1 = "36 25 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory";
        assert_eq!(mount_of_cgroup2(v1), None);
    }

    #[test]
    fn modes_parse_and_a_wrong_one_is_named() {
        assert_eq!(ContainmentMode::parse("cgroup"), Ok(ContainmentMode::Cgroup));
        assert_eq!(ContainmentMode::parse("auto"), Ok(ContainmentMode::Auto));
        assert!(ContainmentMode::parse("jail").unwrap_err().contains("\"jail\""));
    }

    #[test]
    fn a_root_that_is_not_a_cgroup_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let err = CgroupRoot::at(dir.path()).unwrap_err().to_string();
        assert!(err.contains("has no cgroup.procs") && err.contains("--containment process-group"), "{err}");
    }

    #[test]
    fn a_replica_cgroups_name_says_its_replica() {
        assert_eq!(parse_key("12-3-0"), Some(ReplicaKey { job_id: 12, attempt: 3, rank: 0 }));
        assert_eq!(parse_key(".baton-probe"), None);
        assert_eq!(parse_key("12-3"), None);
    }

    #[test]
    fn roots_differ_per_data_directory() {
        assert_ne!(short_hash(Path::new("/var/lib/a")), short_hash(Path::new("/var/lib/b")));
    }
}
