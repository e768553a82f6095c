//! Whether this replica has recently proven to a quorum that it still leads. Raft alone
//! lets a leader cut off from its peers (but not from its agents) believe it leads until
//! it hears a higher term; directing agents needs proof no older than the lease.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_raft::{ReadError, Replica};

/// Pause before checking again after a check went unanswered.
const RETRY: Duration = Duration::from_millis(50);

#[derive(Default)]
pub struct Quorum {
    /// When a linearizable read last succeeded here (it confirms leadership with a quorum).
    confirmed: Mutex<Option<Instant>>,
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
