//! The clocks a replica reads: the wall clock the leader stamps into commands
//! (`Command::now_ms`; `apply` never reads a clock), and a monotonic one in ms for the
//! leader's own timers (silences, quorum proofs, strays, vanished replicas), which the
//! simulator replaces with its simulated, drifting clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A monotonic clock in ms.
pub trait Clock {
    fn now_ms(&self) -> u64;
}

/// This process's monotonic clock, counted from when it was made.
pub struct ProcessClock(Instant);

impl Default for ProcessClock {
    fn default() -> Self {
        ProcessClock(Instant::now())
    }
}

impl Clock for ProcessClock {
    fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// Milliseconds since the Unix epoch, never less than a value it returned before: a clock
/// stepped back must not make time run backwards in the replicated state.
pub fn now_ms() -> u64 {
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    LAST_MS.fetch_max(wall, Ordering::Relaxed).max(wall)
}
