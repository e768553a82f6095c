//! One cgroup v2 per replica, under the agent's own subtree: the kernel, not the job's
//! cooperation, says which processes belong to a replica. A replica's processes cannot leave
//! its cgroup by `setsid` or a double fork (only a process with write access to another
//! cgroup's `cgroup.procs` can move, and the job's user has none), so `cgroup.kill` ends all
//! of them and `cgroup.events` says when none is left.
//!
//! Layout: `<root>/<job>-<attempt>-<rank>`, where `<root>` is `--cgroup-root` or, by default,
//! `baton-<node>-<hash of the data directory>` inside the agent's home cgroup in the v2
//! hierarchy (the subtree systemd's `Delegate=yes` hands to the service, or a container's
//! own cgroup namespace): stable across agent restarts, so a restarted agent finds its
//! replicas' cgroups, and distinct per agent, so two agents on one host never share one.
//!
//! Limits: a replica is held to the memory and CPU its task asked for (`memory.max`,
//! `cpu.max`). On a pure v2 host the agent enables those controllers for its subtree,
//! moving every process of its home cgroup (itself; in a container `baton init` too) into a
//! leaf of it, `baton-agent`, first (v2 hands controllers down only from a cgroup without
//! processes; Slurm's cgroup/v2 plugin does the same for slurmd). On a
//! hybrid host, where the memory and cpu controllers are bound to v1 hierarchies, each
//! replica also gets a cgroup of the same name in those (`memory.limit_in_bytes`,
//! `cpu.cfs_quota_us`), joined by the child with its v2 one before it runs anything. Where
//! neither is possible the limits are advisory, said once in the agent's log.
//!
//! Modes (`--containment`): `cgroup` refuses to start without a writable v2 hierarchy that has
//! `cgroup.kill` (Linux 5.14); `process-group` is the weaker mode of earlier versions, where a
//! replica is its process group and a process that leaves the group escapes; `auto` takes
//! `cgroup` where it can and says in its log and `/metrics` when it could not.

use std::collections::BTreeMap;
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
    #[error(transparent)]
    Devices(#[from] crate::devfilter::FilterError),
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

/// What a replica's cgroup holds it to: what it asked for (0: not asked, no limit) and the
/// GPUs it was given (by index; the node's others are denied to it where the root isolates
/// GPUs, `CgroupRoot::isolate_gpus`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: u64,
    /// Thousandths of a CPU.
    pub cpu_millis: u64,
    pub gpus: Vec<u32>,
}

/// The major number of NVIDIA's GPU device files (`/dev/nvidia<minor>`, and `nvidiactl` at
/// minor 255, which every CUDA process needs and no replica is denied).
pub const NVIDIA_MAJOR: u32 = 195;

/// The period of a CPU limit: the kernel's default, 100 ms, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// A cgroup v1 controller a limit can be set through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V1Controller {
    Memory,
    Cpu,
    /// Device access: v1's controller (v2 has none: an eBPF program per cgroup,
    /// [`crate::devfilter`]).
    Devices,
}

impl V1Controller {
    fn name(self) -> &'static str {
        match self {
            V1Controller::Memory => "memory",
            V1Controller::Cpu => "cpu",
            V1Controller::Devices => "devices",
        }
    }
}

/// The agent's subtree, where it makes one cgroup per replica.
#[derive(Debug, Clone)]
pub struct CgroupRoot {
    dir: PathBuf,
    /// The same subtree in the v1 hierarchies of controllers the v2 one lacks (a hybrid host).
    v1: Vec<(V1Controller, PathBuf)>,
    /// The node's GPUs' device minors by index, once the root isolates GPUs.
    gpu_minors: BTreeMap<u32, u32>,
    /// GPUs are isolated by a device program per replica (v2 alone), not v1's controller.
    gpu_program: bool,
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
        Ok(CgroupRoot { dir: dir.to_path_buf(), v1: Vec::new(), gpu_minors: BTreeMap::new(), gpu_program: false })
    }

    /// Keeps each replica from the node's GPUs it was not given: their device files (major
    /// `NVIDIA_MAJOR`, by minor: `minors` maps GPU index to minor) are denied in its cgroup,
    /// so opening one fails with EPERM whatever `CUDA_VISIBLE_DEVICES` says. Through the v1
    /// devices controller where the host has it (hybrid hosts), else through a device
    /// program attached to each replica's v2 cgroup ([`CgroupRoot::isolate_gpus_by_program`]);
    /// where neither works the log says that replicas can reach every GPU device of the node.
    pub fn isolate_gpus(mut self, minors: BTreeMap<u32, u32>) -> CgroupRoot {
        if minors.is_empty() {
            return self;
        }
        let v1_refused = match v1_dir(V1Controller::Devices, self.name()) {
            Ok(dir) => {
                tracing::info!(dir = %dir.display(), "each replica is denied the GPU devices it was not given");
                self.v1.push((V1Controller::Devices, dir));
                self.gpu_minors = minors;
                return self;
            }
            Err(why) => why,
        };
        match probe_device_program(&self.dir) {
            Ok(()) => {
                tracing::info!(root = %self.dir.display(), "each replica is denied the GPU devices it was not given, by a device program on its cgroup");
                self.gpu_minors = minors;
                self.gpu_program = true;
            }
            Err(e) => tracing::warn!(
                "replicas can open every GPU device of this node (only CUDA_VISIBLE_DEVICES keeps them apart): \
                 no v1 devices controller ({v1_refused}), and {e}"
            ),
        }
        self
    }

    /// Isolates GPUs (as [`CgroupRoot::isolate_gpus`]) by a device program attached to each
    /// replica's v2 cgroup, after trying one on a probe cgroup here: a kernel without
    /// `CGROUP_BPF`, an agent without CAP_SYS_ADMIN, or an ancestor whose own program forbids
    /// others below it is found now, not at a replica's start.
    pub fn isolate_gpus_by_program(mut self, minors: BTreeMap<u32, u32>) -> Result<CgroupRoot, CgroupError> {
        probe_device_program(&self.dir)?;
        self.gpu_minors = minors;
        self.gpu_program = true;
        Ok(self)
    }

    /// Sets the subtree up to hold replicas to their limits (see the module's doc): the v2
    /// controllers where the host has them there, else the v1 hierarchies of a hybrid host.
    /// Never fails (limits are not containment): what cannot be enforced is said in the log.
    pub fn enable_limits(mut self) -> CgroupRoot {
        for c in self.enable_v2_controllers() {
            match v1_dir(c, self.name()) {
                Ok(dir) => {
                    tracing::info!(dir = %dir.display(), "{} limits of replicas go through cgroup v1", c.name());
                    self.v1.push((c, dir));
                }
                Err(why) => tracing::warn!("the {} limits of replicas are not enforced: {why}", c.name()),
            }
        }
        self
    }

    /// Its directory's name, which its counterparts in v1 hierarchies share.
    fn name(&self) -> &std::ffi::OsStr {
        self.dir.file_name().unwrap_or_default()
    }

    /// Hands the memory and cpu controllers down to the replicas' cgroups where the v2
    /// hierarchy has them; returns those it could not.
    fn enable_v2_controllers(&self) -> Vec<V1Controller> {
        let wanted = [V1Controller::Memory, V1Controller::Cpu];
        if let Some(parent) = self.dir.parent() {
            let missing: Vec<&str> = wanted
                .iter()
                .map(|c| c.name())
                .filter(|n| !has_controller(&self.dir, n) && has_controller(parent, n))
                .collect();
            if !missing.is_empty()
                && let Err(e) = hand_down(parent, &missing)
            {
                tracing::warn!("cgroup {}: cannot hand {missing:?} down to the replicas: {e}", parent.display());
            }
        }
        let here: Vec<V1Controller> = wanted.into_iter().filter(|c| has_controller(&self.dir, c.name())).collect();
        let names: Vec<&str> = here.iter().map(|c| c.name()).collect();
        if !names.is_empty()
            && let Err(e) = write_subtree_control(&self.dir, &names)
        {
            tracing::warn!("cgroup {}: cannot enable {names:?} for the replicas: {e}", self.dir.display());
            return wanted.to_vec();
        }
        wanted.into_iter().filter(|c| !here.contains(c)).collect()
    }

    /// The default root for the agent of `node` keeping its data in `data_dir`: a child of the
    /// agent's home cgroup in the v2 hierarchy (its own, or the one above the leaf it moved
    /// into: [`home_of`]). No controller is enabled on it, so the agent may stay in its own
    /// cgroup beside it (v2's rule against inner processes binds only cgroups that hand
    /// controllers down).
    pub fn default_for(node: &str, data_dir: &Path) -> Result<CgroupRoot, CgroupError> {
        let mount = v2_mount()?;
        let own = own_v2_path().unwrap_or_default();
        let parent = mount.join(home_of(&own).trim_start_matches('/'));
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
        self.replica_named(&format!("{job_id}-{attempt}-{rank}"))
    }

    fn replica_named(&self, name: &str) -> ReplicaCgroup {
        let v1 = self.v1.iter().map(|(c, d)| (*c, d.join(name))).collect();
        ReplicaCgroup {
            dir: self.dir.join(name),
            v1,
            gpu_minors: self.gpu_minors.clone(),
            gpu_program: self.gpu_program,
        }
    }

    /// The replica cgroups here that still hold processes, by the replica their names say
    /// (`<job>-<attempt>-<rank>`), at most `max` of them.
    pub fn populated_children(&self, max: usize) -> Vec<(ReplicaKey, ReplicaCgroup)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let key = parse_key(name.to_str()?)?;
                let cgroup = self.replica_named(name.to_str()?);
                cgroup.populated().then_some((key, cgroup))
            })
            .take(max)
            .collect()
    }

    /// Removes the empty replica cgroups a run before this one left (an agent killed before it
    /// removed them); a populated one stays, for adoption.
    pub fn remove_empty_children(&self) {
        for dir in std::iter::once(&self.dir).chain(self.v1.iter().map(|(_, d)| d)) {
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    // rmdir(2) of a cgroup fails while it has processes or children.
                    let _ = std::fs::remove_dir(e.path());
                }
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
        ContainmentMode::Cgroup => Some(found()?.enable_limits()),
        ContainmentMode::Auto => match found() {
            Ok(r) => Some(r.enable_limits()),
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
    /// Its cgroups of the same name in v1 hierarchies (a hybrid host), for its limits.
    v1: Vec<(V1Controller, PathBuf)>,
    /// The node's GPUs' device minors by index (empty: GPUs are not isolated).
    gpu_minors: BTreeMap<u32, u32>,
    /// Its GPUs are isolated by a device program on its v2 cgroup.
    gpu_program: bool,
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
    /// before its spawn), sets its `limits` (every time: a reused one may hold older ones),
    /// and opens its `cgroup.procs` files, v2 first, for the child to join before it runs
    /// anything. One that holds processes is refused: joining it would make two replicas
    /// one.
    pub fn create(&self, limits: &Limits) -> Result<Vec<OwnedFd>, CgroupError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        if self.populated() {
            return Err(CgroupError::Populated { path: self.dir.clone() });
        }
        set_v2_limits(&self.dir, limits)?;
        if self.gpu_program {
            set_device_program(&self.dir, &self.gpu_minors, &limits.gpus)?;
        }
        let mut joins = vec![open_procs(&self.dir)?];
        for (c, dir) in &self.v1 {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            set_v1_limit(*c, dir, limits, &self.gpu_minors)?;
            joins.push(open_procs(dir)?);
        }
        Ok(joins)
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
        let gone = match std::fs::remove_dir(&self.dir) {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        if gone {
            // Its processes are gone from every hierarchy with it; a v1 one that lags is
            // swept at the agent's next start (`remove_empty_children`).
            for (_, dir) in &self.v1 {
                let _ = std::fs::remove_dir(dir);
            }
        }
        gone
    }
}

fn open_procs(dir: &Path) -> Result<OwnedFd, CgroupError> {
    let procs = dir.join("cgroup.procs");
    let f = std::fs::OpenOptions::new().write(true).open(&procs).map_err(io(&procs))?;
    Ok(f.into())
}

fn write_limit(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    std::fs::write(&path, value).map_err(io(&path))
}

/// The quota of a CPU limit per `CPU_PERIOD_US`, at least the kernel's least (1 ms).
fn cpu_quota_us(cpu_millis: u64) -> u64 {
    (cpu_millis.saturating_mul(CPU_PERIOD_US) / 1_000).max(1_000)
}

/// Allows the GPUs in `given` and denies the node's others (by their minors). Both, every
/// time: a reused cgroup may deny what this replica was given.
fn set_gpu_devices(dir: &Path, minors: &BTreeMap<u32, u32>, given: &[u32]) -> Result<(), CgroupError> {
    for (index, minor) in minors {
        let file = if given.contains(index) { "devices.allow" } else { "devices.deny" };
        write_limit(dir, file, &format!("c {NVIDIA_MAJOR}:{minor} rwm"))?;
    }
    Ok(())
}

/// Attaches a device program to a probe cgroup under `root`, then removes it: whether this
/// kernel, this agent's rights and the cgroups above allow one.
fn probe_device_program(root: &Path) -> Result<(), CgroupError> {
    let probe = root.join(".baton-device-probe");
    std::fs::create_dir_all(&probe).map_err(io(&probe))?;
    let tried = crate::devfilter::load(NVIDIA_MAJOR, &[]).and_then(|p| crate::devfilter::attach(&p, &probe));
    let _ = std::fs::remove_dir(&probe);
    Ok(tried?)
}

/// Attaches a device program denying the node's GPUs not in `given` (replacing one a reused
/// cgroup holds, which may deny what this replica was given).
fn set_device_program(dir: &Path, minors: &BTreeMap<u32, u32>, given: &[u32]) -> Result<(), CgroupError> {
    let denied: Vec<u32> = minors.iter().filter(|(index, _)| !given.contains(index)).map(|(_, m)| *m).collect();
    let program = crate::devfilter::load(NVIDIA_MAJOR, &denied)?;
    crate::devfilter::attach(&program, dir)?;
    Ok(())
}

/// `memory.max` and `cpu.max`, where the controllers are enabled here (their files exist).
fn set_v2_limits(dir: &Path, limits: &Limits) -> Result<(), CgroupError> {
    if dir.join("memory.max").exists() {
        let memory = if limits.memory_bytes == 0 { "max".to_string() } else { limits.memory_bytes.to_string() };
        write_limit(dir, "memory.max", &memory)?;
        // No swap beyond it (Slurm's AllowedSwapSpace defaults to 0): a replica over its
        // memory is stopped by the kernel, not slowed to a crawl.
        if dir.join("memory.swap.max").exists() {
            write_limit(dir, "memory.swap.max", if limits.memory_bytes == 0 { "max" } else { "0" })?;
        }
    }
    if dir.join("cpu.max").exists() {
        let quota =
            if limits.cpu_millis == 0 { "max".to_string() } else { cpu_quota_us(limits.cpu_millis).to_string() };
        write_limit(dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
    }
    Ok(())
}

/// The v1 files of controller `c` (-1: no limit; for devices, the node's GPUs by `minors`).
fn set_v1_limit(c: V1Controller, dir: &Path, limits: &Limits, minors: &BTreeMap<u32, u32>) -> Result<(), CgroupError> {
    match c {
        V1Controller::Memory => {
            let memory = if limits.memory_bytes == 0 { "-1".to_string() } else { limits.memory_bytes.to_string() };
            // Memory plus swap is never below memory alone: lifted first, set last, so no
            // order of old and new values is refused. Equal: no swap beyond the limit.
            let memsw = dir.join("memory.memsw.limit_in_bytes").exists();
            if memsw {
                write_limit(dir, "memory.memsw.limit_in_bytes", "-1")?;
            }
            write_limit(dir, "memory.limit_in_bytes", &memory)?;
            if memsw {
                write_limit(dir, "memory.memsw.limit_in_bytes", &memory)?;
            }
            Ok(())
        }
        V1Controller::Cpu => {
            write_limit(dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
            let quota =
                if limits.cpu_millis == 0 { "-1".to_string() } else { cpu_quota_us(limits.cpu_millis).to_string() };
            write_limit(dir, "cpu.cfs_quota_us", &quota)
        }
        V1Controller::Devices => set_gpu_devices(dir, minors, &limits.gpus),
    }
}

/// A v2 cgroup has controller `name` (`cgroup.controllers`), to enable for its children.
fn has_controller(dir: &Path, name: &str) -> bool {
    let text = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    text.split_whitespace().any(|c| c == name)
}

fn write_subtree_control(dir: &Path, names: &[&str]) -> std::io::Result<()> {
    let text: Vec<String> = names.iter().map(|n| format!("+{n}")).collect();
    std::fs::write(dir.join("cgroup.subtree_control"), text.join(" "))
}

/// Enables `names` for the children of `parent`. v2 refuses that (EBUSY) while `parent` holds
/// processes itself: when it is the agent's home cgroup, every process in it (the agent, and
/// in a container `baton init` too) moves into a leaf of it, [`AGENT_LEAF`], first, as a
/// container runtime nested in a container does. A process that forks meanwhile can still
/// leave one there; then it stays refused, and the log says so.
fn hand_down(parent: &Path, names: &[&str]) -> std::io::Result<()> {
    match write_subtree_control(parent, names) {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) && is_home_v2_cgroup(parent) => {
            let moved = vacate(parent)?;
            tracing::info!(leaf = %parent.join(AGENT_LEAF).display(), moved, "the agent's cgroup moved into a leaf to hand controllers down");
            write_subtree_control(parent, names)
        }
        other => other,
    }
}

/// The leaf of its home cgroup the agent moves into, with every other process there, to hand
/// controllers down from its home (v2's rule against inner processes).
pub const AGENT_LEAF: &str = "baton-agent";

/// Bound on the processes [`vacate`] moves: a home cgroup holds the agent, its init and the
/// guards of replicas, not thousands.
const VACATE_MAX: usize = 4096;

/// Passes [`vacate`] makes: a process that forked while the one before moved is moved by the
/// next.
const VACATE_PASSES: usize = 3;

/// Moves every process of cgroup `dir` into its leaf [`AGENT_LEAF`] (made if missing), at most
/// [`VACATE_MAX`]; returns how many moved. One that exits before its move is skipped.
pub fn vacate(dir: &Path) -> std::io::Result<usize> {
    let leaf = dir.join(AGENT_LEAF);
    std::fs::create_dir_all(&leaf)?;
    let mut moved = 0;
    for _ in 0..VACATE_PASSES {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs"))?;
        let pids: Vec<&str> = procs.split_whitespace().take(VACATE_MAX.saturating_sub(moved)).collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            match std::fs::write(leaf.join("cgroup.procs"), pid) {
                Ok(()) => moved += 1,
                // ESRCH: it exited meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(moved)
}

fn is_home_v2_cgroup(dir: &Path) -> bool {
    let (Ok(mount), Some(own)) = (v2_mount(), own_v2_path()) else { return false };
    mount.join(home_of(&own).trim_start_matches('/')) == dir
}

/// The cgroup (a v2 path) the agent's subtree hangs from, for an agent whose own cgroup is
/// `own`: that one, or the parent of the leaf [`AGENT_LEAF`] an earlier start moved into. An
/// agent restarted from that leaf (by `baton init` in a container, which moved with it) so
/// finds the same root, and its replicas.
fn home_of(own: &str) -> &str {
    match own.strip_suffix(AGENT_LEAF) {
        Some("/") => "/",
        Some(parent) if parent.ends_with('/') => parent.trim_end_matches('/'),
        _ => own,
    }
}

/// The agent's subtree named `name` in the v1 hierarchy of controller `c`, made if missing.
fn v1_dir(c: V1Controller, name: &std::ffi::OsStr) -> Result<PathBuf, String> {
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let (mount, mount_root) = mountinfo
        .lines()
        .find_map(|l| v1_mount_of(l, c.name()))
        .ok_or_else(|| format!("neither cgroup v2 nor a v1 hierarchy here has the {} controller", c.name()))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let own = own.lines().find_map(|l| v1_path_of(l, c.name())).unwrap_or_else(|| "/".into());
    let relative = own.strip_prefix(&mount_root).unwrap_or(&own).trim_start_matches('/').to_string();
    let dir = mount.join(relative).join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if !dir.join("cgroup.procs").exists() {
        return Err(format!("{} is not a cgroup", dir.display()));
    }
    Ok(dir)
}

/// The mount point and the hierarchy's root there, of a mountinfo line of a v1 hierarchy
/// with `controller` (its super options, e.g. `rw,cpu,cpuacct`).
fn v1_mount_of(line: &str, controller: &str) -> Option<(PathBuf, String)> {
    let (left, right) = line.split_once(" - ")?;
    let mut right = right.split_whitespace();
    if right.next()? != "cgroup" {
        return None;
    }
    let options = right.nth(1)?;
    if !options.split(',').any(|o| o == controller) {
        return None;
    }
    let mut left = left.split_whitespace();
    let root = left.nth(3)?.to_string();
    let mount = left.next()?;
    Some((PathBuf::from(mount), root))
}

/// The path of a /proc/self/cgroup line `N:controllers:/path` whose list has `controller`.
fn v1_path_of(line: &str, controller: &str) -> Option<String> {
    let mut parts = line.splitn(3, ':');
    let _id = parts.next()?;
    let list = parts.next()?;
    let path = parts.next()?;
    list.split(',').any(|c| c == controller).then(|| path.to_string())
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
    v2_path_in("/proc/self/cgroup")
}

/// The v2 line's path of a `/proc/<pid>/cgroup` file.
fn v2_path_in(cgroup_file: &str) -> Option<String> {
    let text = std::fs::read_to_string(cgroup_file).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

/// This process's own cgroup directory in the v2 hierarchy (its mount joined with
/// `own_v2_path`); `None` without one.
pub fn own_v2_dir() -> Option<PathBuf> {
    Some(v2_mount().ok()?.join(own_v2_path()?.trim_start_matches('/')))
}

/// Process `pid`'s cgroup directory in the v2 hierarchy; `None` without one, or once the
/// process is gone.
pub fn v2_dir_of(pid: u32) -> Option<PathBuf> {
    Some(v2_mount().ok()?.join(v2_path_in(&format!("/proc/{pid}/cgroup"))?.trim_start_matches('/')))
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

    /// A replica's cgroup that already holds processes (another replica's, come in between the
    /// agent's scan and this start) is never joined: the two would be killed, frozen and
    /// counted as one. Its empty twin is reused.
    #[test]
    fn a_cgroup_that_holds_processes_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let cg = ReplicaCgroup {
            dir: dir.path().join("7-2-0"),
            v1: Vec::new(),
            gpu_minors: BTreeMap::new(),
            gpu_program: false,
        };
        std::fs::create_dir_all(cg.dir()).unwrap();
        std::fs::write(cg.dir().join("cgroup.procs"), "4242\n").unwrap();
        let limits = Limits { memory_bytes: 0, cpu_millis: 0, gpus: Vec::new() };
        let err = cg.create(&limits).unwrap_err();
        assert!(matches!(&err, CgroupError::Populated { path } if path == cg.dir()), "{err:?}");
        assert!(err.to_string().contains("still holds processes"), "{err}");
        std::fs::write(cg.dir().join("cgroup.procs"), "").unwrap();
        assert_eq!(cg.create(&limits).map(|joins| joins.len()).unwrap(), 1, "the empty one is joined, v2 only");
    }

    #[test]
    fn a_replica_cgroups_name_says_its_replica() {
        assert_eq!(parse_key("12-3-0"), Some(ReplicaKey { job_id: 12, attempt: 3, rank: 0 }));
        assert_eq!(parse_key(".baton-probe"), None);
        assert_eq!(parse_key("12-3"), None);
    }

    #[test]
    fn v1_hierarchies_are_found_by_controller() {
        let cpu = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct";
        assert_eq!(v1_mount_of(cpu, "cpu"), Some((PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"), "/".into())));
        assert_eq!(v1_mount_of(cpu, "cpuset"), None, "cpu is not cpuset");
        let nested = "35 31 0:32 /kubepods/pod1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        let found = v1_mount_of(nested, "memory");
        assert_eq!(found, Some((PathBuf::from("/sys/fs/cgroup/memory"), "/kubepods/pod1".into())));
        let v2 = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert_eq!(v1_mount_of(v2, "memory"), None);
        assert_eq!(v1_path_of("4:memory:/process_api/5d26", "memory"), Some("/process_api/5d26".into()));
        assert_eq!(v1_path_of("2:cpu,cpuacct:/system.slice", "cpu"), Some("/system.slice".into()));
        assert_eq!(v1_path_of("0::/", "memory"), None);
    }

    /// The kernel's formats: `cpu.max` is "quota period" in microseconds, never under 1 ms
    /// of quota; no limit is `max` in v2 and -1 in v1.
    #[test]
    fn limits_are_written_in_the_kernels_units() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["memory.max", "cpu.max"] {
            std::fs::write(dir.path().join(f), "max").unwrap();
        }
        set_v2_limits(dir.path(), &Limits { memory_bytes: 4 << 30, cpu_millis: 2_500, gpus: Vec::new() }).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!((read("memory.max"), read("cpu.max")), ("4294967296".into(), "250000 100000".into()));
        set_v2_limits(dir.path(), &Limits { memory_bytes: 0, cpu_millis: 1, gpus: Vec::new() }).unwrap();
        assert_eq!((read("memory.max"), read("cpu.max")), ("max".into(), "1000 100000".into()));
        set_v1_limit(V1Controller::Cpu, dir.path(), &Limits::default(), &BTreeMap::new()).unwrap();
        set_v1_limit(V1Controller::Memory, dir.path(), &Limits::default(), &BTreeMap::new()).unwrap();
        assert_eq!((read("cpu.cfs_quota_us"), read("memory.limit_in_bytes")), ("-1".into(), "-1".into()));
    }

    #[test]
    fn roots_differ_per_data_directory() {
        assert_ne!(short_hash(Path::new("/var/lib/a")), short_hash(Path::new("/var/lib/b")));
    }

    /// An agent restarted from the leaf it moved into (under `baton init`, which moved with
    /// it) hangs its replicas from the same cgroup as before: it finds them.
    #[test]
    fn an_agent_in_its_leaf_has_the_home_it_had_before_it_moved() {
        assert_eq!(home_of("/baton-agent"), "/");
        assert_eq!(home_of("/system.slice/baton-agent.service/baton-agent"), "/system.slice/baton-agent.service");
        assert_eq!(home_of("/system.slice/baton-agent.service"), "/system.slice/baton-agent.service");
        assert_eq!(home_of("/"), "/");
        assert_eq!(home_of("/jobs/not-baton-agent"), "/jobs/not-baton-agent");
    }
}
