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

use std::time::Duration;

use baton_raft::types::RaftMetrics;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::Status;

use crate::Ctx;

/// How long one attach may be held. Below the agents' own attach timeout (1 s,
/// `baton_agent::limits::ATTACH_TIMEOUT_MS`), so that a held attach is answered, not
/// abandoned (`tests/leader_side.rs` checks the order).
pub const ATTACH_HOLD_MS: u64 = 700;
/// Attaches held at once on one replica: about one per node of a large cluster, each a
/// waiting task; the rest are answered at once, as if nothing were held.
pub const MAX_HELD_ATTACHES: usize = 16_384;
/// How often a held attach looks again at raft's view (a leader elected, heard from);
/// this replica beginning to direct agents wakes it at once.
const HOLD_POLL_MS: u64 = 20;

/// This replica's term if it leads and directs agents; otherwise the refusal that sends the
/// agent on, held until it is worth sending (see the module's documentation).
pub(crate) async fn leader_for_attach(ctx: &Ctx) -> Result<u64, Status> {
    let raft = ctx.replica.watch();
    if let Some(answer) = settled(ctx, &raft) {
        return answer;
    }
    let Ok(_held) = ctx.attach_holds.clone().try_acquire_owned() else { return ctx.require_leader() };
    let deadline = Instant::now() + Duration::from_millis(ATTACH_HOLD_MS);
    let mut leading = ctx.hub.leading();
    loop {
        // Not on every change of raft's metrics: it publishes them on nearly every pass of
        // its core, and thousands of held attaches would each look every time.
        tokio::select! {
            changed = leading.changed() => if changed.is_err() { return ctx.require_leader() },
            () = tokio::time::sleep(Duration::from_millis(HOLD_POLL_MS)) => {}
        }
        if let Some(answer) = settled(ctx, &raft) {
            return answer;
        }
        if Instant::now() >= deadline {
            return Err(unsettled(ctx, &raft));
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
