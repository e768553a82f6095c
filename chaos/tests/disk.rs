//! The slow-disk cgroup (`baton_chaos::disk`) on the real kernel. Needs root, a block IO
//! cgroup controller and the temporary directory on a block device, so a plain `cargo test`
//! ignores these tests; `./test.sh` runs them as root. Without them they fail saying why.

use std::process::Command;
use std::time::{Duration, Instant};

use baton_chaos::disk::{SlowDisk, check};

/// Bound on waiting for the child to stop itself.
const STOP_WAIT_S: u64 = 10;

fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's closing parenthesis.
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
}

#[test]
#[ignore = "needs root and a block IO cgroup controller: ./test.sh runs it as root"]
fn a_slowed_process_writes_through_the_limit_and_the_cgroup_is_removed_after() {
    let dir = tempfile::tempdir().unwrap();
    check(dir.path()).unwrap_or_else(|e| panic!("slow disks cannot be made here: {e}"));
    let disk = SlowDisk::new(dir.path()).unwrap();
    let before = disk.writes().unwrap();
    // Stops itself, so that it is moved before it writes; its `dd` inherits its cgroup.
    let file = dir.path().join("written");
    let script = format!("kill -STOP $$; dd if=/dev/zero of={} bs=4k count=5 oflag=dsync 2>/dev/null", file.display());
    let mut child = Command::new("sh").arg("-c").arg(script).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(STOP_WAIT_S);
    while !stopped(child.id()) {
        assert!(Instant::now() < deadline, "the child did not stop itself");
        std::thread::sleep(Duration::from_millis(10));
    }
    disk.slow(child.id(), 20).unwrap();
    let procs = std::fs::read_to_string(disk.group().join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|p| p == child.id().to_string()), "not moved: {procs:?}");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 5 * 4096);
    let through = disk.writes().unwrap() - before;
    assert!(through >= 5, "{through} writes went through the cgroup's limit, not the 5 synced ones");
    // A process that has ended needs nothing restored.
    disk.restore(child.id()).unwrap();
    let group = disk.group().to_path_buf();
    drop(disk);
    assert!(!group.exists(), "{} left behind", group.display());
}

#[test]
#[ignore = "needs root and a block IO cgroup controller: ./test.sh runs it as root"]
fn a_restored_process_is_back_in_the_harness_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    check(dir.path()).unwrap_or_else(|e| panic!("slow disks cannot be made here: {e}"));
    let disk = SlowDisk::new(dir.path()).unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let cgroup = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let home = cgroup(child.id());
    disk.slow(child.id(), 10).unwrap();
    assert_ne!(cgroup(child.id()), home, "not moved");
    disk.restore(child.id()).unwrap();
    assert_eq!(cgroup(child.id()), home, "not given back");
    let _ = child.kill();
    let _ = child.wait();
}
