//! Handing leadership to another voter (`baton cluster transfer-leader`).
//!
//! openraft 0.9 has no leader transfer (its `trigger()` offers elect, heartbeat, snapshot
//! and purge), so it is built from what it does offer:
//! 1. the leader refuses new writes (`WriteError::Transferring`, which clients retry) and
//!    waits until the target's log matches its own;
//! 2. it stops heartbeating (`RuntimeConfigHandle::heartbeat(false)`) and sends every other
//!    voter a [`TransferNote`]: the target campaigns once the voters' leader lease (openraft's
//!    `election_timeout_max`) has run out since the last heartbeat; everyone else, the old
//!    leader included, holds its own campaigns back (the pre-vote guard) for the window;
//! 3. the target calls `trigger().elect()`; no one else campaigns and its log is as long as
//!    any, so it wins, and its first AppendEntries deposes the old leader.
//!
//! Limits: the cluster takes no writes for about two election timeouts. If the target does
//! not win within the window (it died, or a partition cut it off), the old leader resumes
//! heartbeating and keeps leading; the target's failed elections may have raised its term,
//! which then costs one ordinary election. A voter that did not get the note (unreachable)
//! may campaign as usual once it misses heartbeats; whoever wins, the answer says so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use serde::{Deserialize, Serialize};

use crate::error::MembershipError;
use crate::replica::{Core, Replica};
use crate::types::{NodeId, Raft, RaftMetrics};

/// Elections the target tries, one per `election_timeout_max_ms`.
const ELECTION_TRIES: u64 = 5;
/// Longest hold a note may ask for, whatever the sender's settings.
const MAX_WINDOW_MS: u64 = 60_000;

/// What the leader tells each voter while it hands leadership to `to`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TransferNote {
    pub to: NodeId,
    /// How long the others hold their campaigns back.
    pub window_ms: u64,
}

/// Writes are refused while this lives; heartbeats are switched back on when it ends.
struct Handing<'a> {
    core: &'a Core,
}

impl Drop for Handing<'_> {
    fn drop(&mut self) {
        self.core.raft.runtime_config().heartbeat(true);
        self.core.set_transferring(None);
    }
}

/// How long a transfer may take from the heartbeats' stop to a new leader.
fn window_ms(core: &Core) -> u64 {
    let s = &core.settings;
    (s.election_timeout_max_ms * (ELECTION_TRIES + 2) + s.heartbeat_interval_ms).min(MAX_WINDOW_MS)
}

/// The voter `to` names, or the other voter with the longest replicated log.
fn target(core: &Core, to: Option<NodeId>) -> Result<NodeId, MembershipError> {
    let m = core.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    if let Some(id) = to {
        if membership.get_node(&id).is_none() {
            return Err(MembershipError::UnknownNode(id));
        }
        if !membership.voter_ids().any(|v| v == id) {
            return Err(MembershipError::NotVoter(id));
        }
        return Ok(id);
    }
    let matched = m.replication.clone().unwrap_or_default();
    membership
        .voter_ids()
        .filter(|id| *id != core.id)
        .max_by_key(|id| matched.get(id).copied().flatten().map(|l| l.index))
        .ok_or(MembershipError::NoOtherVoter)
}

fn caught_up(m: &RaftMetrics, to: NodeId) -> bool {
    let matched = m.replication.as_ref().and_then(|r| r.get(&to).copied().flatten()).map(|l| l.index);
    matched.is_some() && matched >= m.last_log_index
}

impl Replica {
    /// Hands leadership to voter `to` (or the most up-to-date other voter) and returns once
    /// another replica leads (the one elected, normally `to`). Runs on the leader.
    pub async fn transfer_leader(&self, to: Option<NodeId>) -> Result<NodeId, MembershipError> {
        self.require_leader()?;
        let core = self.core();
        let to = target(core, to)?;
        if to == core.id {
            return Ok(to);
        }
        core.set_transferring(Some(to));
        let handing = Handing { core };
        let timeout_ms = core.settings.membership_timeout_ms;
        core.raft
            .wait(Some(Duration::from_millis(timeout_ms)))
            .metrics(move |m| caught_up(m, to), "transfer target caught up")
            .await
            .map_err(|_| MembershipError::TransferFailed {
                to,
                reason: format!("its log did not catch up within {timeout_ms} ms"),
            })?;
        core.raft.runtime_config().heartbeat(false);
        let window_ms = window_ms(core);
        core.campaign.hold_back(Duration::from_millis(window_ms));
        tracing::info!(to, window_ms, "handing leadership over");
        self.send_notes(TransferNote { to, window_ms }).await?;
        let me = core.id;
        let elected = core
            .raft
            .wait(Some(Duration::from_millis(window_ms)))
            .metrics(move |m| m.current_leader.is_some_and(|l| l != me), "another replica leads")
            .await;
        drop(handing);
        match elected.map(|m| m.current_leader) {
            Ok(Some(leader)) => Ok(leader),
            _ => Err(MembershipError::TransferFailed {
                to,
                reason: format!("it did not win an election within {window_ms} ms; replica {me} keeps leading"),
            }),
        }
    }

    /// Sends `note` to every other voter; the target must get it.
    async fn send_notes(&self, note: TransferNote) -> Result<(), MembershipError> {
        let core = self.core();
        let voters: BTreeMap<NodeId, String> = {
            let m = core.raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            membership
                .voter_ids()
                .filter_map(|id| membership.get_node(&id).map(|n| (id, crate::addrs::Addrs::parse(&n.addr).peer)))
                .collect()
        };
        let timeout = Duration::from_millis(core.settings.rpc_timeout_ms);
        let sends = voters
            .iter()
            .filter(|(id, _)| **id != core.id)
            .map(|(id, addr)| async move { (*id, core.peers.transfer_note(*id, addr, &note, timeout).await) });
        for (id, sent) in futures::future::join_all(sends).await {
            match sent {
                Ok(()) => {}
                Err(e) if id == note.to => {
                    return Err(MembershipError::TransferFailed { to: id, reason: format!("cannot reach it: {e}") });
                }
                Err(e) => tracing::warn!(id, error = %e, "a voter did not get the transfer note; it may campaign"),
            }
        }
        Ok(())
    }
}

/// On a voter that got `note`: the target campaigns once the lease ran out, the others hold
/// back.
pub(crate) fn on_note(core: Arc<Core>, note: TransferNote) {
    let window = Duration::from_millis(note.window_ms.min(MAX_WINDOW_MS));
    if note.to != core.id {
        core.campaign.hold_back(window);
        return;
    }
    tokio::spawn(async move {
        let s = &core.settings;
        // The voters' lease runs `election_timeout_max_ms` from the last heartbeat, which
        // came before this note.
        tokio::time::sleep(Duration::from_millis(s.election_timeout_max_ms + s.heartbeat_interval_ms)).await;
        for _ in 0..ELECTION_TRIES {
            if leads(&core.raft) {
                return;
            }
            if core.raft.trigger().elect().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(s.election_timeout_max_ms)).await;
        }
    });
}

fn leads(raft: &Raft) -> bool {
    raft.metrics().borrow().state == ServerState::Leader
}
