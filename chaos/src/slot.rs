//! Slots: what one cluster of this machine holds for itself, so that several chaos runs (or
//! tests) at once, in one process or many, never share a port, a subnet or a namespace name.
//!
//! A slot is a number below [`SLOTS`], held by an exclusive `flock(2)` on a file of its own
//! in a directory every process of the machine sees ([`lock_dir`]). The kernel drops the lock
//! when its holder dies, however it dies, so a slot whose lock can be taken has no live
//! owner, and whatever carries its number (namespaces and links left by a killed run) may be
//! removed. Locks taken through two opens exclude each other in one process too, so threads
//! of one test binary each get their own slot.
//!
//! Slot `n` owns:
//! - loopback ports `FIRST_PORT + n * PORTS_PER_SLOT` and the `PORTS_PER_SLOT - 1` after it,
//!   below Linux's ephemeral range (32768-60999 by default), so that no outgoing connection
//!   of any process takes one while a replica that listens on it is down between a kill and
//!   its restart (a port picked by binding port 0 comes from that range, and can be);
//! - the `n`-th /28 of 198.18.0.0/15 and the names starting with `bcs<n>` (`net`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Bound on the clusters of one machine at once.
pub const SLOTS: u32 = 64;
/// Loopback ports per slot: the 3 first replicas and the replicas a test adds later.
pub const PORTS_PER_SLOT: u16 = 16;
/// The first slot's first port; the last slot's last is 21,023.
const FIRST_PORT: u16 = 20_000;
/// Where the slots' lock files are: one directory for every process of the machine, made
/// writable by all (sticky, as /tmp) so that runs of different users share it.
const DIR_NAME: &str = "baton-chaos-slots";

/// An exclusive hold on slot `number` until dropped (or its process ends).
#[derive(Debug)]
pub struct Slot {
    number: u32,
    /// Holds the lock: closing it releases the slot.
    _lock: File,
}

/// The directory of the lock files (under the system's temporary directory).
pub fn lock_dir() -> PathBuf {
    std::env::temp_dir().join(DIR_NAME)
}

impl Slot {
    /// The lowest slot that is free and for which `usable` holds (its ports or subnet are not
    /// taken by something else of the machine), or an error when there is none.
    pub fn take(usable: impl Fn(u32) -> bool) -> Result<Slot, String> {
        for n in 0..SLOTS {
            if let Some(slot) = Slot::try_take(n)?
                && usable(n)
            {
                return Ok(slot);
            }
        }
        Err(format!(
            "no free slot for a cluster: {SLOTS} clusters run on this machine at once, or their ports or subnets are taken (locks in {})",
            lock_dir().display()
        ))
    }

    /// Slot `n` if no one holds it; an error when its lock file cannot be opened.
    pub fn try_take(n: u32) -> Result<Option<Slot>, String> {
        let file = open_lock(n)?;
        // SAFETY: flock(2) on a descriptor this function owns; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Some(Slot { number: n, _lock: file }));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(format!("cannot lock slot {n} ({}): {e}", lock_path(n).display()))
        }
    }

    pub fn number(&self) -> u32 {
        self.number
    }

    /// The `i`-th loopback port of the slot, `None` past `PORTS_PER_SLOT`.
    pub fn port(&self, i: usize) -> Option<u16> {
        port_of(self.number, i)
    }
}

/// Port `i` of slot `n`.
pub fn port_of(n: u32, i: usize) -> Option<u16> {
    let i = u16::try_from(i).ok().filter(|i| *i < PORTS_PER_SLOT)?;
    Some(FIRST_PORT + n as u16 * PORTS_PER_SLOT + i)
}

/// Whether every loopback port of slot `n` can be bound now (no other program listens there).
pub fn ports_free(n: u32) -> bool {
    (0..PORTS_PER_SLOT as usize)
        .filter_map(|i| port_of(n, i))
        .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
}

fn lock_path(n: u32) -> PathBuf {
    lock_dir().join(format!("slot-{n}.lock"))
}

fn open_lock(n: u32) -> Result<File, String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = lock_dir();
    if !dir.is_dir() {
        // Two processes may make it at once: the loser's error is no error.
        let _ = std::fs::create_dir(&dir);
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    }
    let path = lock_path(n);
    // A lock file another user made is opened for reading: flock needs no write access.
    match std::fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o644).open(&path) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))
        }
        Err(e) => Err(format!("cannot open {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_slot_is_not_taken_again_until_dropped() {
        let a = Slot::take(|_| true).unwrap();
        let b = Slot::take(|_| true).unwrap();
        assert_ne!(a.number(), b.number());
        assert!(Slot::try_take(a.number()).unwrap().is_none(), "slot {} is held", a.number());
        let n = a.number();
        drop(a);
        // Another test of this binary may take it meanwhile; it is free or held by that one.
        let again = Slot::try_take(n).unwrap();
        assert!(again.is_none() || again.as_ref().is_some_and(|s| s.number() == n));
    }

    #[test]
    fn slots_own_disjoint_ports_below_the_ephemeral_range() {
        assert_eq!(port_of(0, 0), Some(FIRST_PORT));
        assert_eq!(port_of(1, 0), Some(FIRST_PORT + PORTS_PER_SLOT));
        assert_eq!(port_of(0, PORTS_PER_SLOT as usize), None, "a slot's ports end where the next's begin");
        let last = port_of(SLOTS - 1, PORTS_PER_SLOT as usize - 1).unwrap();
        assert!(last < 32_768, "{last} is in Linux's default ephemeral range");
    }

    #[test]
    fn a_slot_that_is_not_usable_is_skipped_and_left_free() {
        let s = Slot::take(|n| n % 2 == 1).unwrap();
        assert_eq!(s.number() % 2, 1);
    }
}
