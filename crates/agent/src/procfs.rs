//! What /proc says about a process: its start time (so a reused pid is not mistaken for
//! the replica), its state letter, and finding a process by its command line.

/// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot) and field 3 (state).
pub fn stat(pid: u32) -> Option<(u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // `rest` starts at field 3, so field 22 is index 19.
    let start = fields.get(19)?.parse().ok()?;
    Some((start, state))
}

/// The process's start time, if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(t, _)| t)
}

/// When process `pid` started, in milliseconds of the wall clock, by the kernel's count
/// (its start time in clock ticks since boot, so to 10 ms with the usual 100 ticks a
/// second): what no clock of the agent or the job can skew. The wall clock's reading less
/// the process's age on the boot clock.
pub fn born_wall_ms(pid: u32) -> Option<u64> {
    let start_ticks = start_time(pid)?;
    // SAFETY: sysconf reads a constant of the system.
    let ticks_per_s = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|t| *t > 0)?;
    let mut boot = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut boot) } != 0 {
        return None;
    }
    let boot_ms = u64::try_from(boot.tv_sec).ok()? * 1_000 + u64::try_from(boot.tv_nsec).ok()? / 1_000_000;
    let age_ms = boot_ms.checked_sub(start_ticks * 1_000 / ticks_per_s)?;
    let wall_ms =
        u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_millis()).ok()?;
    wall_ms.checked_sub(age_ms)
}

/// A file's identity as `/proc/locks` prints it: the device's major and minor, the inode.
pub type FileId = (u64, u64, u64);

/// The identity of a file with device `dev` and inode `ino` (`MetadataExt`), as
/// `/proc/locks` prints it.
pub fn file_id(dev: u64, ino: u64) -> FileId {
    // glibc's gnu_dev_major and gnu_dev_minor.
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x00ff);
    (major, minor, ino)
}

/// Each lock held, as (file, the pid that took it), from the text of `/proc/locks`
/// (`1: FLOCK ADVISORY WRITE pid MAJ:MIN:INODE start end`, device numbers in hex); waiters
/// (`->`) hold nothing. A lock taken before a fork is held by the child too, under the
/// parent's pid, which may be gone.
pub fn lock_holders(proc_locks: &str) -> Vec<(FileId, u32)> {
    let mut out = Vec::new();
    for line in proc_locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) == Some(&"->") {
            continue;
        }
        let (Some(pid), Some(id)) = (f.get(4).and_then(|p| p.parse().ok()), f.get(5)) else { continue };
        let mut parts = id.split(':');
        let (Some(major), Some(minor), Some(ino)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if let (Ok(major), Ok(minor), Ok(ino)) =
            (u64::from_str_radix(major, 16), u64::from_str_radix(minor, 16), ino.parse::<u64>())
        {
            out.push(((major, minor, ino), pid));
        }
    }
    out
}

/// Whether `pid` is still the process that started at `start` (and not a zombie).
pub fn is_same_process(pid: u32, start: u64) -> bool {
    matches!(stat(pid), Some((t, state)) if t == start && state != 'Z' && state != 'X')
}

/// Live processes with `arg` as one of their command line arguments. Bounded by the
/// processes of the machine (pid_max); used only when an agent restarts.
pub fn find_by_arg(arg: &[u8]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.split(|b| *b == 0).any(|a| a == arg) && matches!(stat(pid), Some((_, s)) if s != 'Z' && s != 'X') {
            found.push(pid);
        }
    }
    found
}

/// Process `pid` has `arg` as one of its command line arguments.
pub fn has_arg(pid: u32, arg: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg))
}

/// A process of a group, as /proc/<pid>/stat shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub pid: u32,
    /// Field 4: its parent.
    pub parent: u32,
}

/// The live processes of process group `pgid`. Bounded by the processes of the machine
/// (pid_max).
pub fn group_members(pgid: u32) -> Vec<Member> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let member = |pid: u32| -> Option<Member> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
        let state = fields.first()?.chars().next()?;
        let parent = fields.get(1)?.parse().ok()?;
        let group: u32 = fields.get(2)?.parse().ok()?;
        (group == pgid && state != 'Z' && state != 'X').then_some(Member { pid, parent })
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(member)
        .collect()
}

/// Every process id /proc lists now. Bounded by the processes of the machine (pid_max).
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())).collect()
}

/// Field 4 of /proc/<pid>/stat: the parent's process id.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_number(pid, 4)
}

/// Field `n` (numbered from 1, as proc(5) does; 3 or later) of /proc/<pid>/stat as a number.
fn stat_number(pid: u32, n: usize) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    text[text.rfind(')')? + 1..].split_whitespace().nth(n - 3)?.parse().ok()
}

/// The command line arguments of `pid` (`$0` first for a shell's `-c` script: the fourth).
pub fn argv(pid: u32) -> Option<Vec<Vec<u8>>> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args: Vec<Vec<u8>> = cmdline.split(|b| *b == 0).map(<[u8]>::to_vec).collect();
    // The command line ends with a NUL: no empty argument after it.
    if args.last().is_some_and(Vec::is_empty) {
        args.pop();
    }
    Some(args)
}

/// Field 5 of /proc/<pid>/stat: the process group id.
pub fn process_group(pid: u32) -> Option<u32> {
    stat_number(pid, 5)
}

/// This boot of the machine (`/proc/sys/kernel/random/boot_id`); `None` where it cannot be
/// read.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_the_members_of_a_process_group() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = process_group(std::process::id()).unwrap();
        let found = group_members(me);
        child.kill().unwrap();
        child.wait().unwrap();
        let child_member = found.iter().find(|m| m.pid == child.id()).copied();
        assert_eq!(child_member.map(|m| m.parent), Some(std::process::id()), "{found:?}");
        assert!(group_members(u32::MAX).is_empty());
    }

    #[test]
    fn reads_own_stat() {
        let me = std::process::id();
        let (start, state) = stat(me).expect("own stat");
        assert!(start > 0);
        assert!(state == 'R' || state == 'S');
        assert!(is_same_process(me, start));
        assert!(!is_same_process(me, start + 1));
    }

    /// A child started between two readings of the wall clock is born between them, to the
    /// kernel's tick (10 ms with 100 ticks a second) and the rounding of both clocks.
    #[test]
    fn a_process_is_born_when_the_kernel_says_on_the_wall_clock() {
        let wall_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let before = wall_ms();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let after = wall_ms();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let born = born_wall_ms(child.id()).expect("a live child's birth");
        child.kill().unwrap();
        child.wait().unwrap();
        const TICK_AND_ROUNDING_MS: u64 = 25;
        assert!(
            born + TICK_AND_ROUNDING_MS >= before && born <= after + TICK_AND_ROUNDING_MS,
            "{before} <= {born} <= {after}"
        );
        assert_eq!(born_wall_ms(u32::MAX), None);
    }

    #[test]
    fn finds_a_process_by_an_argument() {
        let marker = format!("baton-procfs-test-{}", std::process::id());
        // `; :` keeps the shell from replacing itself with sleep (and its command line).
        let mut child = std::process::Command::new("sh").arg("-c").arg("sleep 5; :").arg(&marker).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(find_by_arg(marker.as_bytes()), vec![child.id()]);
        // SAFETY: getpgrp has no memory effects.
        assert_eq!(process_group(child.id()), Some(unsafe { libc::getpgrp() } as u32));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(find_by_arg(marker.as_bytes()).is_empty());
    }
}
