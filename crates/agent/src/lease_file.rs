//! The lease file the agent renews and every replica's watchdog reads
//! (`<data-dir>/run/lease`): one line, `<expiry ms> <boot id>`.
//!
//! The expiry is on CLOCK_BOOTTIME, the clock `/proc/uptime` shows (the watchdog is a few
//! lines of `sh` and reads that): it never steps when the wall clock is set, and it keeps
//! counting while the machine is suspended, as the leader's clock does. The boot id makes a
//! file left from before a reboot mean nothing (CLOCK_BOOTTIME starts again from zero).
//! Written to a temporary file and renamed, so a reader sees the old line or the new one.

use std::path::{Path, PathBuf};

use crate::lease::Lease;

/// Where the lease file lives under the agent's data directory.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("run").join("lease")
}

/// Milliseconds on CLOCK_BOOTTIME.
pub fn boot_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_BOOTTIME is available on every Linux this agent runs on");
    ts.tv_sec as u64 * 1_000 + ts.tv_nsec as u64 / 1_000_000
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`); empty if unreadable.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Writes the lease's expiry atomically. Nothing is written for a lease never granted.
pub fn write(path: &Path, lease: &Lease) -> std::io::Result<()> {
    let Some(expires_at_ms) = lease.expires_at_ms() else { return Ok(()) };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{expires_at_ms} {}\n", boot_id()))?;
    std::fs::rename(&tmp, path)
}

/// The lease a previous run of the agent held in this boot; never granted if there is no
/// file, it is unreadable, or it was written before a reboot.
pub fn load(path: &Path) -> Lease {
    let lease = Lease::default();
    let Ok(text) = std::fs::read_to_string(path) else { return lease };
    let mut parts = text.split_whitespace();
    let (Some(ms), Some(boot)) = (parts.next().and_then(|s| s.parse::<u64>().ok()), parts.next()) else {
        return lease;
    };
    if boot == boot_id() { Lease::until(ms) } else { lease }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_within_a_boot_and_means_nothing_across_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        assert_eq!(load(&p), Lease::default(), "no file: never granted");
        let mut l = Lease::default();
        l.grant(1_000, 2_000);
        write(&p, &l).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap().split(' ').next(), Some("3000"));
        assert_eq!(load(&p), l);
        std::fs::write(&p, "3000 another-boot\n").unwrap();
        assert_eq!(load(&p), Lease::default(), "written before a reboot");
        std::fs::write(&p, "garbage").unwrap();
        assert_eq!(load(&p), Lease::default());
    }

    #[test]
    fn boot_ms_agrees_with_proc_uptime() {
        let up = std::fs::read_to_string("/proc/uptime").unwrap();
        let secs: f64 = up.split_whitespace().next().unwrap().parse().unwrap();
        let diff = (boot_ms() as f64 - secs * 1_000.0).abs();
        assert!(diff < 1_000.0, "boot_ms {} vs /proc/uptime {secs}", boot_ms());
    }
}
