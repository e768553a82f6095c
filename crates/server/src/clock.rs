//! The wall clock the leader stamps into commands (`Command::now_ms`). `apply` never reads a
//! clock; this is the only place a replica does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, never less than a value it returned before: a clock
/// stepped back must not make time run backwards in the replicated state.
pub fn now_ms() -> u64 {
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    LAST_MS.fetch_max(wall, Ordering::Relaxed).max(wall)
}
