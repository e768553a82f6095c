//! The test workload behind `baton workload --steps N --step-ms M`: a preemptible job in
//! miniature. It counts steps, printing `step i`. On SIGTERM or SIGUSR1 it writes the
//! number of finished steps to `$BATON_CHECKPOINT_DIR/rank-<BATON_RANK>.ckpt` (a temp file,
//! then a rename, so a reader never sees half a checkpoint), prints
//! `checkpointed at step i` and exits 0. Exiting 0 after a checkpoint is safe: the agent
//! sent the signal, so it reports the replica as `Stopped` (not as `Exited` with success).
//! With `BATON_RESUME` set it starts from the step in its checkpoint and prints
//! `resumed from step i`. After N steps it exits 0.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The signal that arrived (0: none). Set by the handler, read by the loop.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// How often the loop looks at the signal flag while it sleeps through a step.
const SIGNAL_POLL_MS: u64 = 10;

fn checkpoint_path() -> Option<PathBuf> {
    let dir = std::env::var_os("BATON_CHECKPOINT_DIR")?;
    let rank = std::env::var("BATON_RANK").unwrap_or_else(|_| "0".to_string());
    Some(PathBuf::from(dir).join(format!("rank-{rank}.ckpt")))
}

fn save(step: u64) -> Result<PathBuf, String> {
    let path = checkpoint_path().ok_or("BATON_CHECKPOINT_DIR is not set")?;
    let tmp = path.with_extension("ckpt.tmp");
    std::fs::write(&tmp, format!("{step}\n")).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("cannot rename to {}: {e}", path.display()))?;
    Ok(path)
}

fn load() -> Result<u64, String> {
    let path = checkpoint_path().ok_or("BATON_CHECKPOINT_DIR is not set")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.trim().parse().map_err(|_| format!("{}: not a step number: {:?}", path.display(), text.trim()))
}

/// Runs the workload; returns the process exit code.
pub fn run(steps: u64, step_ms: u64) -> i32 {
    for sig in [libc::SIGTERM, libc::SIGUSR1] {
        // SAFETY: installs a handler that only stores to an atomic.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
    let mut out = std::io::stdout();
    let mut step = 0;
    if std::env::var_os("BATON_RESUME").is_some() {
        match load() {
            Ok(s) => {
                step = s;
                let _ = writeln!(out, "resumed from step {step}");
            }
            Err(e) => {
                eprintln!("workload: cannot resume ({e}); starting from step 0");
            }
        }
    }
    while step < steps {
        let until = Instant::now() + Duration::from_millis(step_ms);
        loop {
            if SIGNALLED.load(Ordering::SeqCst) != 0 {
                return match save(step) {
                    Ok(_) => {
                        let _ = writeln!(out, "checkpointed at step {step}");
                        let _ = out.flush();
                        0
                    }
                    Err(e) => {
                        eprintln!("workload: checkpoint failed: {e}");
                        1
                    }
                };
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(SIGNAL_POLL_MS)));
        }
        step += 1;
        let _ = writeln!(out, "step {step}");
        let _ = out.flush();
    }
    0
}
