//! Whether this replica has recently proven to a quorum that it still leads. Raft alone
//! lets a leader cut off from its peers (but not from its agents) believe it leads until
//! it hears a higher term; directing agents needs proof no older than the lease.
//!
//! Every agent report needs such a proof, started after the report arrived. One check costs
//! a round of messages to the followers, so checks are shared: one runs at a time, and the
//! reports that arrived while it ran share the next one (as writes share a log entry).
//! With 10,000 agents beating twice a second, that is a few checks per round trip instead
//! of 20,000 a second.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_raft::{ReadError, Replica};

/// Pause before checking again after a check went unanswered.
const RETRY: Duration = Duration::from_millis(50);

#[derive(Default)]
pub struct Quorum {
    /// When a linearizable read last succeeded here (it confirms leadership with a quorum).
    confirmed: Mutex<Option<Instant>>,
    /// When the last shared check that failed was started.
    failed: Mutex<Option<Instant>>,
    /// Held while a shared check runs; callers queue here for the next one.
    flight: tokio::sync::Mutex<()>,
}

impl Quorum {
    /// Confirms leadership with a quorum, trying for at most `within`; records success.
    /// openraft waits one raft heartbeat interval for the answers, so a check that merely
    /// went unanswered (`QuorumLost`) is tried again every `RETRY`; a replica that knows it
    /// no longer leads gives up at once.
    pub async fn confirm(&self, replica: &Replica, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let started = Instant::now();
            match tokio::time::timeout_at(deadline, replica.read(|_| ())).await {
                Ok(Ok(())) => {
                    self.record(started);
                    return true;
                }
                Ok(Err(ReadError::QuorumLost(e))) if tokio::time::Instant::now() + RETRY < deadline => {
                    tracing::debug!(error = %e, "leadership check unanswered; trying again");
                    tokio::time::sleep(RETRY).await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "leadership not confirmed by a quorum");
                    return false;
                }
                Err(_) => {
                    tracing::debug!(within_ms = within.as_millis() as u64, "leadership not confirmed in time");
                    return false;
                }
            }
        }
    }

    /// As [`Quorum::confirm`], by a check started no earlier than `since` (when the caller's
    /// request arrived), shared with every other caller that a check started then also covers.
    pub async fn confirm_since(&self, replica: &Replica, since: Instant, within: Duration) -> bool {
        self.shared(since, || self.confirm(replica, within)).await
    }

    /// The answer of a check started at or after `since`: one already done, else the next
    /// one (at most one `check` runs at a time; waiters it covers take its answer).
    async fn shared<F: Future<Output = bool>>(&self, since: Instant, check: impl FnOnce() -> F) -> bool {
        if started_since(&self.confirmed, since) {
            return true;
        }
        let _turn = self.flight.lock().await;
        if started_since(&self.confirmed, since) {
            return true;
        }
        if started_since(&self.failed, since) {
            return false;
        }
        let started = Instant::now();
        let ok = check().await;
        if ok {
            self.record(started);
        } else {
            *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
        }
        ok
    }

    /// Whether a confirmation started within `age` of now.
    pub fn fresh(&self, age: Duration) -> bool {
        self.lock().is_some_and(|at| at.elapsed() <= age)
    }

    /// Records a confirmation that was asked for at `asked` (the proof dates from then).
    fn record(&self, asked: Instant) {
        let mut at = self.lock();
        if at.is_none_or(|prev| prev < asked) {
            *at = Some(asked);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.confirmed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn started_since(at: &Mutex<Option<Instant>>, since: Instant) -> bool {
    at.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|t| t >= since)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A check that takes 10 ms, answers `ok`, and counts itself.
    async fn counted(rounds: &AtomicU32, ok: bool) -> bool {
        rounds.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        ok
    }

    async fn concurrent(q: &Arc<Quorum>, rounds: &Arc<AtomicU32>, callers: usize, ok: bool) -> Vec<bool> {
        let since = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (q, rounds) = (q.clone(), rounds.clone());
                tokio::spawn(async move { q.shared(since, || counted(&rounds, ok)).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn callers_that_arrived_together_share_one_check() {
        let (q, rounds) = (Arc::new(Quorum::default()), Arc::new(AtomicU32::new(0)));
        let answers = concurrent(&q, &rounds, 200, true).await;
        assert!(answers.iter().all(|a| *a));
        assert_eq!(rounds.load(Ordering::SeqCst), 1, "200 reports, one round to the followers");
    }

    #[tokio::test]
    async fn a_caller_arriving_after_a_check_started_waits_for_a_new_one() {
        let (q, rounds) = (Arc::new(Quorum::default()), Arc::new(AtomicU32::new(0)));
        assert!(q.shared(Instant::now(), || counted(&rounds, true)).await);
        // The proof must date from after this caller's arrival: the old one does not do.
        assert!(q.shared(Instant::now(), || counted(&rounds, true)).await);
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_check_answers_everyone_it_covers_and_the_next_caller_tries_again() {
        let (q, rounds) = (Arc::new(Quorum::default()), Arc::new(AtomicU32::new(0)));
        let answers = concurrent(&q, &rounds, 50, false).await;
        assert!(answers.iter().all(|a| !*a), "no lease on a failed check");
        assert_eq!(rounds.load(Ordering::SeqCst), 1);
        assert!(q.shared(Instant::now(), || counted(&rounds, true)).await);
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
    }
}
