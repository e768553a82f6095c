//! Whether this replica has recently proven to a quorum that it still leads. Raft alone
//! lets a leader cut off from its peers (but not from its agents) believe it leads until
//! it hears a higher term; directing agents needs proof no older than the lease.
//!
//! Every agent report needs such a proof, started after the report arrived. One check costs
//! a round of messages to the followers, so checks are shared: one runs at a time, and the
//! reports that arrived while it ran share the next one (as writes share a log entry).
//! With 10,000 agents beating twice a second, that is a few checks per round trip instead
//! of 20,000 a second.
//!
//! [`Proofs`] decides, on times it is given; [`Quorum`] runs the shared checks on a
//! [`Clock`]: this process's ([`ProcessClock`]) in the server, a simulated and drifting one
//! in the simulator's leader, so both grant leases by one rule.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_raft::{ReadError, Replica};

use crate::clock::{Clock, ProcessClock};

/// Pause before checking again after a check went unanswered.
const RETRY: Duration = Duration::from_millis(50);

/// When checks of leadership began that a quorum answered, and the last that it did not, on
/// one clock (ms). Pure: the decisions of [`Quorum`] on times it is given.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Proofs {
    /// When the newest check that a quorum confirmed began.
    confirmed_ms: Option<u64>,
    /// When the newest check that failed began.
    failed_ms: Option<u64>,
}

impl Proofs {
    /// What a check begun after `since_ms` answered, if one did: a confirmation wins over a
    /// failure (either proves what it proves from its start). After, strictly: times are
    /// whole ms, and a check begun within the same ms may have begun before.
    pub fn since(&self, since_ms: u64) -> Option<bool> {
        if self.confirmed_since(since_ms) {
            return Some(true);
        }
        self.failed_ms.is_some_and(|t| t > since_ms).then_some(false)
    }

    /// Whether a check begun after `since_ms` was confirmed.
    pub fn confirmed_since(&self, since_ms: u64) -> bool {
        self.confirmed_ms.is_some_and(|t| t > since_ms)
    }

    /// Records the answer of a check begun at `began_ms`; an older answer never replaces a
    /// newer one.
    pub fn record(&mut self, began_ms: u64, confirmed: bool) {
        let at = if confirmed { &mut self.confirmed_ms } else { &mut self.failed_ms };
        if at.is_none_or(|prev| prev < began_ms) {
            *at = Some(began_ms);
        }
    }

    /// Whether a confirmation began within `age_ms` of `now_ms`.
    pub fn fresh(&self, now_ms: u64, age_ms: u64) -> bool {
        self.confirmed_ms.is_some_and(|at| now_ms.saturating_sub(at) <= age_ms)
    }
}

#[derive(Default)]
pub struct Quorum<C: Clock = ProcessClock> {
    proofs: Mutex<Proofs>,
    /// Held while a shared check runs; callers queue here for the next one.
    flight: tokio::sync::Mutex<()>,
    clock: C,
}

impl<C: Clock> Quorum<C> {
    pub fn with_clock(clock: C) -> Quorum<C> {
        Quorum { proofs: Mutex::default(), flight: tokio::sync::Mutex::default(), clock }
    }

    /// Now on this quorum's clock: what callers pass as `since` to [`Quorum::confirm_since`].
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Confirms leadership with a quorum, trying for at most `within`; records success.
    /// openraft waits one raft heartbeat interval for the answers, so a check that merely
    /// went unanswered (`QuorumLost`) is tried again every `RETRY`; a replica that knows it
    /// no longer leads gives up at once.
    pub async fn confirm(&self, replica: &Replica, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let began = self.now_ms();
            match tokio::time::timeout_at(deadline, replica.read(|_| ())).await {
                Ok(Ok(())) => {
                    self.lock().record(began, true);
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

    /// As [`Quorum::confirm`], by a check begun after `since_ms` (when the caller's request
    /// arrived, on this quorum's clock), shared with every other caller that a check begun
    /// then also covers.
    pub async fn confirm_since(&self, replica: &Replica, since_ms: u64, within: Duration) -> bool {
        self.shared(since_ms, || self.confirm(replica, within)).await
    }

    /// The answer of a check begun after `since_ms`: one already done, else the next one (at
    /// most one `check` runs at a time; waiters it covers take its answer). The caller's own
    /// check answers it whenever it began: after the caller arrived, which is what counts.
    async fn shared<F: Future<Output = bool>>(&self, since_ms: u64, check: impl FnOnce() -> F) -> bool {
        if self.lock().confirmed_since(since_ms) {
            return true;
        }
        let _turn = self.flight.lock().await;
        if let Some(answer) = self.lock().since(since_ms) {
            return answer;
        }
        let began = self.now_ms();
        let confirmed = check().await;
        self.lock().record(began, confirmed);
        confirmed
    }

    /// Whether a confirmation began within `age` of now.
    pub fn fresh(&self, age: Duration) -> bool {
        self.lock().fresh(self.now_ms(), age.as_millis() as u64)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Proofs> {
        self.proofs.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
        let since = q.now_ms();
        // They arrived before any check began: a check begun within the same ms would not
        // count for them (see `Proofs::since`).
        tokio::time::sleep(Duration::from_millis(2)).await;
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
        let (q, rounds) = (Arc::new(Quorum::<ProcessClock>::default()), Arc::new(AtomicU32::new(0)));
        let answers = concurrent(&q, &rounds, 200, true).await;
        assert!(answers.iter().all(|a| *a));
        assert_eq!(rounds.load(Ordering::SeqCst), 1, "200 reports, one round to the followers");
    }

    #[tokio::test]
    async fn a_caller_arriving_after_a_check_started_waits_for_a_new_one() {
        let (q, rounds) = (Arc::new(Quorum::<ProcessClock>::default()), Arc::new(AtomicU32::new(0)));
        assert!(q.shared(q.now_ms(), || counted(&rounds, true)).await);
        // The proof must date from after this caller's arrival: the old one does not do.
        assert!(q.shared(q.now_ms(), || counted(&rounds, true)).await);
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_check_answers_everyone_it_covers_and_the_next_caller_tries_again() {
        let (q, rounds) = (Arc::new(Quorum::<ProcessClock>::default()), Arc::new(AtomicU32::new(0)));
        let answers = concurrent(&q, &rounds, 50, false).await;
        assert!(answers.iter().all(|a| !*a), "no lease on a failed check");
        assert_eq!(rounds.load(Ordering::SeqCst), 1);
        assert!(q.shared(q.now_ms(), || counted(&rounds, true)).await);
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
    }

    /// A check begun within the ms a caller arrived in may have begun before it, so it does
    /// not count; an older answer never hides a newer one; a confirmation wins.
    #[test]
    fn a_proof_counts_only_for_callers_that_arrived_before_it_began() {
        let mut p = Proofs::default();
        assert_eq!(p.since(0), None);
        p.record(10, true);
        assert_eq!(p.since(9), Some(true));
        assert_eq!(p.since(10), None, "begun in the caller's ms");
        p.record(5, true);
        assert_eq!(p.since(9), Some(true), "an older confirmation replaced a newer one");
        p.record(12, false);
        assert_eq!((p.since(9), p.since(11)), (Some(true), Some(false)));
        p.record(14, true);
        assert_eq!(p.since(11), Some(true), "a newer confirmation wins over a failure");
        assert!(p.fresh(20, 6) && !p.fresh(21, 6));
    }
}
