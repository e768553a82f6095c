//! Slow disks: a replica's writes throttled by the kernel's block IO controller, so that its
//! fsyncs (raft's log appends and votes) take seconds instead of milliseconds.
//!
//! The harness makes a child cgroup of its own (`baton-chaos-disk-<pid>-<n>`, at the root of the
//! controller's hierarchy), writes a write-IOPS limit for the block device that holds the
//! replicas' data into it (cgroup v1: `blkio.throttle.write_iops_device`, "MAJ:MIN IOPS";
//! v2: `io.max`, "MAJ:MIN wiops=IOPS"), and moves a replica's pid into its `cgroup.procs`;
//! moving the pid back to the harness's own cgroup (where every process it starts lives)
//! restores the disk. The child cgroup is removed when [`SlowDisk`] drops (its processes
//! moved back first), and a run removes those left by runs that died.
//!
//! Needs root and a block device: a data directory on overlay or tmpfs has no device of its
//! own to throttle, and the fault is refused ([`DiskError::NoBlockDevice`]) rather than
//! made with no effect.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where cgroup v1's block IO controller is mounted, on the machines this runs on.
const V1_ROOT: &str = "/sys/fs/cgroup/blkio";
/// Where cgroup v2's unified hierarchy is mounted.
const V2_ROOT: &str = "/sys/fs/cgroup";
/// The kernel's view of block devices by number.
const SYS_DEV_BLOCK: &str = "/sys/dev/block";
/// Prefix of the harness's cgroups; the rest of the name is the harness's pid and a number
/// of its own (a process may make several).
const GROUP_PREFIX: &str = "baton-chaos-disk-";
/// The number of the next cgroup this process makes.
static NEXT_GROUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("slow disks need root (the cgroup files are root's); run as root or give --no-slow-disks")]
    NotRoot,
    #[error(
        "slow disks need the block IO controller: neither cgroup v1 blkio ({V1_ROOT}) nor cgroup v2 with `io` in \
         {V2_ROOT}/cgroup.controllers is here; give --no-slow-disks"
    )]
    NoController,
    #[error(
        "{path} is on a file system with no block device of its own (device {dev}; overlay, tmpfs or the like), \
         so its writes cannot be throttled; put TMPDIR on a disk or give --no-slow-disks"
    )]
    NoBlockDevice { path: PathBuf, dev: DevNum },
    #[error("slow disk: cannot {what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("slow disk: cannot read {what} from {text:?}")]
    Parse { what: &'static str, text: String },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DiskError {
    let path = path.to_path_buf();
    move |source| DiskError::Io { what, path, source }
}

/// A device number, as the kernel writes it ("MAJ:MIN").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevNum {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// A `dev` file of sysfs: "MAJ:MIN\n".
pub fn parse_dev(text: &str) -> Result<DevNum, DiskError> {
    let bad = || DiskError::Parse { what: "a device number", text: text.to_string() };
    let (major, minor) = text.trim().split_once(':').ok_or_else(bad)?;
    Ok(DevNum { major: major.parse().map_err(|_| bad())?, minor: minor.parse().map_err(|_| bad())? })
}

/// Which controller is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// cgroup v1 blkio.
    V1,
    /// cgroup v2 `io`.
    V2,
}

impl Version {
    /// The file that holds the limit.
    pub fn limit_file(&self) -> &'static str {
        match self {
            Version::V1 => "blkio.throttle.write_iops_device",
            Version::V2 => "io.max",
        }
    }

    /// What to write into `limit_file` to allow `iops` writes a second on `dev`.
    pub fn limit_line(&self, dev: DevNum, iops: u32) -> String {
        match self {
            Version::V1 => format!("{dev} {iops}"),
            Version::V2 => format!("{dev} wiops={iops}"),
        }
    }

    /// The file that counts the cgroup's IOs by device.
    pub fn stat_file(&self) -> &'static str {
        match self {
            Version::V1 => "blkio.throttle.io_serviced",
            Version::V2 => "io.stat",
        }
    }

    /// The write IOs to `dev` that `stat` (the text of `stat_file`) counts; 0 when `dev`
    /// has none yet (the kernel lists a device once it saw IO).
    pub fn writes_in(&self, stat: &str, dev: DevNum) -> u64 {
        let dev = dev.to_string();
        let mut lines = stat.lines().map(|l| l.split_whitespace().collect::<Vec<_>>());
        let found = lines.find_map(|w| match (self, w.as_slice()) {
            (Version::V1, [d, "Write", n]) if *d == dev => n.parse().ok(),
            (Version::V2, [d, fields @ ..]) if *d == dev => {
                fields.iter().find_map(|f| f.strip_prefix("wios=")).and_then(|n| n.parse().ok())
            }
            _ => None,
        });
        found.unwrap_or(0)
    }

    /// The cgroup path (relative to the hierarchy's root) of a process, from its
    /// `/proc/PID/cgroup`: v1's line naming `blkio` among its controllers, v2's `0::` line.
    pub fn cgroup_of(&self, proc_cgroup: &str) -> Result<String, DiskError> {
        let path = proc_cgroup.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let ours = match self {
                Version::V1 => controllers.split(',').any(|c| c == "blkio"),
                Version::V2 => id == "0" && controllers.is_empty(),
            };
            ours.then(|| path.to_string())
        });
        path.ok_or_else(|| DiskError::Parse { what: "the process's cgroup", text: proc_cgroup.to_string() })
    }
}

/// The controller here, if any: v1 blkio first (a hybrid machine mounts v2 too, without
/// `io`), then v2 with `io` available at its root.
pub fn controller() -> Result<(Version, PathBuf), DiskError> {
    let v1 = Path::new(V1_ROOT);
    if v1.join(Version::V1.limit_file()).exists() {
        return Ok((Version::V1, v1.to_path_buf()));
    }
    let v2 = Path::new(V2_ROOT);
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "io") {
        return Ok((Version::V2, v2.to_path_buf()));
    }
    Err(DiskError::NoController)
}

/// The whole disk that holds `path` (a partition's disk: the controllers limit disks).
pub fn device_of(path: &Path) -> Result<DevNum, DiskError> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).map_err(io("look at", path))?.dev();
    let num = DevNum { major: libc::major(dev), minor: libc::minor(dev) };
    whole_disk(Path::new(SYS_DEV_BLOCK), num).map_err(|e| match e {
        DiskError::NoBlockDevice { dev, .. } => DiskError::NoBlockDevice { path: path.to_path_buf(), dev },
        e => e,
    })
}

/// The disk `dev` is, or the disk it is a partition of, as `sys_dev_block` (the layout of
/// /sys/dev/block: a link per device number to the device's directory, a partition's
/// directory inside its disk's, with a `partition` file) tells. A number with no entry
/// (major 0: overlay, tmpfs, other anonymous devices) is no block device.
pub fn whole_disk(sys_dev_block: &Path, dev: DevNum) -> Result<DevNum, DiskError> {
    let entry = sys_dev_block.join(dev.to_string());
    if dev.major == 0 || !entry.exists() {
        return Err(DiskError::NoBlockDevice { path: entry, dev });
    }
    if !entry.join("partition").exists() {
        return Ok(dev);
    }
    let dir = entry.canonicalize().map_err(io("resolve", &entry))?;
    let disk = dir.parent().map(|p| p.join("dev")).unwrap_or_default();
    parse_dev(&std::fs::read_to_string(&disk).map_err(io("read", &disk))?)
}

/// Whether a slow disk can be made for data under `dir` here: root, a controller, a block
/// device. The run checks it before it starts, so that the fault is refused up front.
pub fn check(dir: &Path) -> Result<DevNum, DiskError> {
    // SAFETY: geteuid(2) reads the caller's id; nothing can fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(DiskError::NotRoot);
    }
    controller()?;
    device_of(dir)
}

/// The harness's cgroup for slow disks on one device (see the module's documentation).
pub struct SlowDisk {
    version: Version,
    dev: DevNum,
    /// The child cgroup's directory.
    group: PathBuf,
    /// The harness's own cgroup's directory, where the processes it starts live.
    home: PathBuf,
}

impl SlowDisk {
    /// Makes the child cgroup for the disk holding `dir` (removing those of dead runs first).
    pub fn new(dir: &Path) -> Result<SlowDisk, DiskError> {
        let dev = check(dir)?;
        let (version, root) = controller()?;
        let own = Path::new("/proc/self/cgroup");
        let home = version.cgroup_of(&std::fs::read_to_string(own).map_err(io("read", own))?)?;
        let home = root.join(home.trim_start_matches('/'));
        remove_stale(&root, &home);
        if version == Version::V2 {
            // The root's children get the `io` controller only once the root hands it down.
            let control = root.join("cgroup.subtree_control");
            std::fs::write(&control, "+io").map_err(io("enable io in", &control))?;
        }
        let n = NEXT_GROUP.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let group = root.join(format!("{GROUP_PREFIX}{}-{n}", std::process::id()));
        std::fs::create_dir(&group).map_err(io("make the cgroup", &group))?;
        Ok(SlowDisk { version, dev, group, home })
    }

    /// The device throttled.
    pub fn device(&self) -> DevNum {
        self.dev
    }

    /// The child cgroup's directory.
    pub fn group(&self) -> &Path {
        &self.group
    }

    /// The write IOs to the disk that went through the child cgroup so far.
    pub fn writes(&self) -> Result<u64, DiskError> {
        let stat = self.group.join(self.version.stat_file());
        let text = std::fs::read_to_string(&stat).map_err(io("read", &stat))?;
        Ok(self.version.writes_in(&text, self.dev))
    }

    /// Limits process `pid` to `iops` writes a second on the disk.
    pub fn slow(&self, pid: u32, iops: u32) -> Result<(), DiskError> {
        let limit = self.group.join(self.version.limit_file());
        std::fs::write(&limit, self.version.limit_line(self.dev, iops)).map_err(io("write the limit to", &limit))?;
        move_pid(&self.group, pid)
    }

    /// Gives process `pid` its disk back (moves it home). A process that has died meanwhile
    /// needs nothing.
    pub fn restore(&self, pid: u32) -> Result<(), DiskError> {
        match move_pid(&self.home, pid) {
            Err(DiskError::Io { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            r => r,
        }
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        empty_and_remove(&self.group, &self.home);
    }
}

fn move_pid(group: &Path, pid: u32) -> Result<(), DiskError> {
    let procs = group.join("cgroup.procs");
    std::fs::write(&procs, pid.to_string()).map_err(io("move a process into", &procs))
}

/// Moves what is left in `group` to `home` and removes it; best effort (cleanup).
fn empty_and_remove(group: &Path, home: &Path) {
    let pids = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
    for pid in pids.lines().filter_map(|p| p.trim().parse().ok()) {
        let _ = move_pid(home, pid);
    }
    if let Err(e) = std::fs::remove_dir(group)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("chaos: cannot remove the slow-disk cgroup {}: {e}", group.display());
    }
}

/// Removes the cgroups of runs whose harness is gone (killed before it could clean up).
fn remove_stale(root: &Path, home: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if stale_group(&name, |pid| Path::new(&format!("/proc/{pid}")).exists()) {
            empty_and_remove(&e.path(), home);
        }
    }
}

/// Whether `name` is a harness's cgroup whose harness (by `alive`) is gone.
fn stale_group(name: &str, alive: impl Fn(u32) -> bool) -> bool {
    let pid = name.strip_prefix(GROUP_PREFIX).and_then(|rest| rest.split('-').next());
    pid.and_then(|pid| pid.parse().ok()).is_some_and(|pid| !alive(pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_are_read_as_sysfs_writes_them() {
        assert_eq!(parse_dev("254:0\n").unwrap(), DevNum { major: 254, minor: 0 });
        assert_eq!(DevNum { major: 8, minor: 16 }.to_string(), "8:16");
        for bad in ["", "254", "a:b", "254:"] {
            assert!(parse_dev(bad).is_err(), "{bad:?} read");
        }
    }

    #[test]
    fn the_limit_is_written_in_each_versions_format() {
        let dev = DevNum { major: 254, minor: 0 };
        assert_eq!(Version::V1.limit_line(dev, 10), "254:0 10");
        assert_eq!(Version::V1.limit_file(), "blkio.throttle.write_iops_device");
        assert_eq!(Version::V2.limit_line(dev, 20), "254:0 wiops=20");
        assert_eq!(Version::V2.limit_file(), "io.max");
    }

    #[test]
    fn a_process_cgroup_is_found_by_its_controller() {
        let v1 = "12:pids:/\n6:blkio,cpu:/ci/job-7\n0::/user.slice\n";
        assert_eq!(Version::V1.cgroup_of(v1).unwrap(), "/ci/job-7");
        assert_eq!(Version::V2.cgroup_of(v1).unwrap(), "/user.slice");
        assert_eq!(Version::V2.cgroup_of("0::/\n").unwrap(), "/");
        // A controller whose name merely contains "blkio" is not it.
        assert!(Version::V1.cgroup_of("3:blkio2:/x\n0::/\n").is_err());
        assert!(Version::V1.cgroup_of("").is_err());
    }

    #[test]
    fn the_writes_through_the_cgroup_are_counted_per_device() {
        let (vda, sda) = (DevNum { major: 254, minor: 0 }, DevNum { major: 8, minor: 0 });
        let v1 = "8:0 Write 3\n254:0 Read 2\n254:0 Write 31\n254:0 Total 33\nTotal 36\n";
        assert_eq!(Version::V1.writes_in(v1, vda), 31);
        assert_eq!(Version::V1.writes_in(v1, sda), 3);
        let v2 = "8:0 rbytes=0 wbytes=4096 rios=0 wios=1\n254:0 rbytes=8192 wbytes=126976 rios=2 wios=31 dbytes=0\n";
        assert_eq!(Version::V2.writes_in(v2, vda), 31);
        assert_eq!(Version::V2.writes_in(v2, sda), 1);
        assert_eq!(Version::V1.writes_in("Total 0\n", vda), 0, "no IO yet");
    }

    /// A /sys/dev/block with disk 254:0, its partition 254:1, and a link for each.
    fn sys_dev_block() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let disk = t.path().join("devices/vda");
        std::fs::create_dir_all(disk.join("vda1")).unwrap();
        std::fs::write(disk.join("dev"), "254:0\n").unwrap();
        std::fs::write(disk.join("vda1/dev"), "254:1\n").unwrap();
        std::fs::write(disk.join("vda1/partition"), "1\n").unwrap();
        let links = t.path().join("block");
        std::fs::create_dir(&links).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("254:0")).unwrap();
        std::os::unix::fs::symlink(disk.join("vda1"), links.join("254:1")).unwrap();
        t
    }

    #[test]
    fn a_partition_is_throttled_as_its_disk_and_an_anonymous_device_not_at_all() {
        let t = sys_dev_block();
        let links = t.path().join("block");
        let dev = |major, minor| DevNum { major, minor };
        assert_eq!(whole_disk(&links, dev(254, 0)).unwrap(), dev(254, 0));
        assert_eq!(whole_disk(&links, dev(254, 1)).unwrap(), dev(254, 0));
        // overlay and tmpfs have major 0; an unknown number has no entry.
        for d in [dev(0, 45), dev(9, 9)] {
            assert!(matches!(whole_disk(&links, d), Err(DiskError::NoBlockDevice { .. })), "{d} throttled");
        }
    }

    #[test]
    fn only_a_dead_harness_cgroup_is_stale() {
        let alive = |pid| pid == 7;
        assert!(stale_group("baton-chaos-disk-8-0", alive));
        assert!(!stale_group("baton-chaos-disk-7-3", alive));
        assert!(!stale_group("baton-chaos-disk-x", alive));
        assert!(!stale_group("system.slice", alive));
    }
}
