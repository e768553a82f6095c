//! A closed-loop load: each client sends its next call as soon as the last one is
//! acknowledged, for a fixed time; the figures are the acknowledged calls per second and
//! each call's latency.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One client's calls; `seq` numbers them from 0 for this client.
pub trait Caller: Send + 'static {
    fn call(&mut self, seq: u64) -> impl Future<Output = Result<(), String>> + Send;
}

/// What a load achieved.
#[derive(Debug, Default)]
pub struct Outcome {
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub latencies_ms: Vec<f64>,
}

impl Outcome {
    pub fn per_s(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Adds another caller's (or process's) counts and latencies; `elapsed` stays.
    pub fn add(&mut self, o: Outcome) {
        self.ok += o.ok;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.latencies_ms.extend(o.latencies_ms);
    }

    /// Makes call `seq` of `c` and counts how it went.
    async fn count<C: Caller>(&mut self, c: &mut C, seq: u64) {
        let t = Instant::now();
        match c.call(seq).await {
            Ok(()) => {
                self.ok += 1;
                if self.latencies_ms.len() < MAX_SAMPLES_PER_CLIENT {
                    self.latencies_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// Most latencies one client keeps (a long run at a high rate would otherwise grow without
/// bound); later calls are still counted.
const MAX_SAMPLES_PER_CLIENT: usize = 1_000_000;

/// Runs every caller for `duration` at once and gathers what they did. Each caller first
/// makes one call that is not counted, so connections are open before the clock starts.
pub async fn drive<C: Caller>(callers: Vec<C>, duration: Duration) -> Outcome {
    let start = tokio::sync::Barrier::new(callers.len() + 1);
    let start = std::sync::Arc::new(start);
    let mut tasks = Vec::new();
    for mut c in callers {
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::default();
            let warm = c.call(0).await;
            start.wait().await;
            if let Err(e) = warm {
                out.errors += 1;
                out.first_error = Some(e);
            }
            let end = Instant::now() + duration;
            let mut seq = 1;
            while Instant::now() < end {
                out.count(&mut c, seq).await;
                seq += 1;
            }
            out
        }));
    }
    start.wait().await;
    let began = Instant::now();
    let mut total = Outcome::default();
    for t in tasks {
        let Ok(o) = t.await else { continue };
        total.add(o);
    }
    total.elapsed = began.elapsed();
    total
}

/// Runs every caller at once, each making calls back to back, until `left` calls have been
/// taken between them; what they did, and how long it took.
pub async fn drive_until_taken<C: Caller>(callers: Vec<C>, left: Arc<AtomicU64>) -> Outcome {
    let began = Instant::now();
    let mut tasks = Vec::new();
    for mut c in callers {
        let left = left.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Outcome::default();
            let mut seq = 0;
            while left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
                out.count(&mut c, seq).await;
                seq += 1;
            }
            out
        }));
    }
    let mut total = Outcome::default();
    for t in tasks {
        let Ok(o) = t.await else { continue };
        total.add(o);
    }
    total.elapsed = began.elapsed();
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Every3rdFails;
    impl Caller for Every3rdFails {
        async fn call(&mut self, seq: u64) -> Result<(), String> {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if seq % 3 == 2 { Err(format!("call {seq} failed")) } else { Ok(()) }
        }
    }

    #[tokio::test]
    async fn the_load_counts_acknowledged_and_failed_calls_apart() {
        let out = drive(vec![Every3rdFails, Every3rdFails], Duration::from_millis(50)).await;
        assert!(out.ok > 0 && out.errors > 0, "{out:?}");
        assert_eq!(out.latencies_ms.len() as u64, out.ok, "one latency per acknowledged call");
        assert_eq!(out.first_error.as_deref().map(|e| e.ends_with("failed")), Some(true));
    }
}
