//! An agent's attach held while leadership settles, so that a failover costs each agent one
//! attach, not a storm of them (issue 37).
//!
//! When a leader dies, its followers keep naming it until they elect another, and the new
//! leader refuses attaches until a quorum has confirmed it with its state caught up. Answered
//! at once, every agent bounced between a dead address, redirects to it and refusals: at
//! 1,000 nodes, 30,108 failed or redirected attaches within a 3.3 s reattach. Held instead,
//! an attach is answered once the answer is useful: a stream from a leader that directs, or
//! a redirect to a leader heard from lately. Past [`ATTACH_HOLD_MS`] it is answered with what
//! is known, never with the name of a leader not heard from (the agent then dials the next
//! replica). At most [`MAX_HELD_ATTACHES`] are held at once; more are answered at once.
//!
//! Whether an answer is worth giving is judged by one task per replica ([`judge`]), every
//! [`HOLD_POLL_MS`] while any attach is held, and held attaches wait for it to change its
//! mind. Each held attach looking for itself was 10,000 timers firing 50 times a second on
//! every replica during a failover at 10,000 nodes: the new leader's follower then answered
//! its AppendEntries too late (they get one heartbeat interval), and the new leader needed
//! 2.2 s to be confirmed.

use std::sync::Arc;
use std::time::Duration;

use baton_raft::types::RaftMetrics;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tonic::Status;

use crate::Ctx;

/// How long one attach may be held. Below the agents' own attach timeout (1 s,
/// `baton_agent::limits::ATTACH_TIMEOUT_MS`), so that a held attach is answered, not
/// abandoned (`tests/suite/leader_side.rs` checks the order).
pub const ATTACH_HOLD_MS: u64 = 700;
/// Attaches held at once on one replica: about one per node of a large cluster, each a
/// waiting task; the rest are answered at once, as if nothing were held.
pub const MAX_HELD_ATTACHES: usize = 16_384;
/// How often the judge looks again at raft's view (a leader elected, heard from) while an
/// attach is held; this replica beginning to direct agents wakes it at once.
const HOLD_POLL_MS: u64 = 20;

/// The attaches held on one replica, and the judge's last word on them.
pub(crate) struct Holds {
    /// One permit per held attach.
    permits: Arc<Semaphore>,
    /// Whether an answer is worth giving now, as last judged; sent only when it changes.
    worth: watch::Sender<bool>,
    /// Raised when an attach is held: the judge, idle while none is, starts looking.
    held: Notify,
}

impl Default for Holds {
    fn default() -> Holds {
        Holds {
            permits: Arc::new(Semaphore::new(MAX_HELD_ATTACHES)),
            worth: watch::channel(false).0,
            held: Notify::new(),
        }
    }
}

impl Holds {
    fn any_held(&self) -> bool {
        self.permits.available_permits() < MAX_HELD_ATTACHES
    }
}

/// This replica's term if it leads and directs agents; otherwise the refusal that sends the
/// agent on, held until it is worth sending (see the module's documentation).
pub(crate) async fn leader_for_attach(ctx: &Ctx) -> Result<u64, Status> {
    let raft = ctx.replica.watch();
    if let Some(answer) = settled(ctx, &raft) {
        return answer;
    }
    let Ok(_held) = ctx.holds.permits.clone().try_acquire_owned() else { return ctx.require_leader() };
    let mut worth = ctx.holds.worth.subscribe();
    ctx.holds.held.notify_one();
    let deadline = Instant::now() + Duration::from_millis(ATTACH_HOLD_MS);
    let mut leading = ctx.hub.leading();
    loop {
        tokio::select! {
            changed = leading.changed() => if changed.is_err() { return ctx.require_leader() },
            changed = worth.changed() => if changed.is_err() { return ctx.require_leader() },
            () = tokio::time::sleep_until(deadline) => return settled(ctx, &raft).unwrap_or_else(|| Err(unsettled(ctx, &raft))),
        }
        if let Some(answer) = settled(ctx, &raft) {
            return answer;
        }
    }
}

/// Judges, while any attach is held on this replica, whether an answer is worth giving,
/// and tells the held attaches when that changes. Runs until the server closes.
pub(crate) async fn judge(ctx: Arc<Ctx>) {
    let raft = ctx.replica.watch();
    let mut leading = ctx.hub.leading();
    let mut closing = ctx.closing.subscribe();
    loop {
        if !ctx.holds.any_held() {
            tokio::select! {
                () = ctx.holds.held.notified() => {}
                _ = closing.changed() => return,
            }
        }
        let worth = settled(&ctx, &raft).is_some();
        ctx.holds.worth.send_if_modified(|w| std::mem::replace(w, worth) != worth);
        tokio::select! {
            _ = leading.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(HOLD_POLL_MS)) => {}
            _ = closing.changed() => return,
        }
    }
}

/// The answer, if it is worth giving now: this replica directs agents, or it follows a
/// leader heard from lately (a redirect to it).
fn settled(ctx: &Ctx, raft: &watch::Receiver<RaftMetrics>) -> Option<Result<u64, Status>> {
    let answer = ctx.require_leader();
    if answer.is_ok() {
        return Some(answer);
    }
    let (leads, follows) = {
        let m = raft.borrow();
        (m.state.is_leader(), m.current_leader.is_some_and(|l| l != m.id))
    };
    // A leader not directing yet will once a quorum confirms it with its state caught up; a
    // follower of a leader not heard from lately (or of none) would send the agent nowhere.
    let waits = leads || !(follows && ctx.replica.leader_heard_recently());
    (!waits).then_some(answer)
}

/// The answer once the hold is over without a useful one.
fn unsettled(ctx: &Ctx, raft: &watch::Receiver<RaftMetrics>) -> Status {
    if raft.borrow().state.is_leader() {
        return ctx.require_leader().err().unwrap_or_else(|| Status::unavailable("leading now; attach again"));
    }
    Status::unavailable(format!(
        "this replica has heard from no leader lately (an election is likely under way); held \
         {ATTACH_HOLD_MS} ms for one; try another replica"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attaches held on a leader not yet directing are answered with its term once it
    /// directs, and none stays held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_attaches_are_answered_once_this_replica_directs() {
        let (replica, _stop) = crate::leader::tests::lone_leader().await;
        let term = replica.metrics().term;
        let settings = crate::ServerSettings::default();
        let ctx = Arc::new(Ctx::new(replica, settings, baton_proto::tls::Transport::Insecure));
        tokio::spawn(judge(ctx.clone()));
        const HELD: usize = 100;
        let held: Vec<_> = (0..HELD)
            .map(|_| {
                let ctx = ctx.clone();
                tokio::spawn(async move { leader_for_attach(&ctx).await.map_err(|s| s.code()) })
            })
            .collect();
        while ctx.holds.permits.available_permits() > MAX_HELD_ATTACHES - HELD {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        ctx.hub.set_leading(Some(term));
        for h in held {
            assert_eq!(h.await.expect("the attach ends"), Ok(term));
        }
        assert!(!ctx.holds.any_held());
    }
}
