//! The campaign guard: a replica starts an election only when a quorum of voters agrees
//! that it may (pre-vote), because openraft 0.9 has none of its own.
//!
//! Without it, a replica cut off from the others keeps starting elections and raising its
//! term; when it comes back, the higher term in its answers deposes a healthy leader and
//! the cluster goes through an election for nothing. Here openraft's own election timer is
//! switched off (`RuntimeConfigHandle::elect(false)`) unless the last pre-vote round won:
//! every `heartbeat_interval_ms`, a voter that has not heard from a leader for
//! `election_timeout_min_ms` asks the other voters whether they would take part in an
//! election now. A voter says yes only if it has not heard from a leader for that long
//! either, is not leading, and the asker's log is at least as up to date as its own (Raft's
//! election restriction: a later last term, or the same last term and at least as long). With a
//! majority of yeses (its own included) the timer is switched on and openraft elects as
//! usual (the real vote still checks terms and logs). A replica that cannot reach a quorum
//! therefore never campaigns, and rejoins under the leader and term it left.
//!
//! openraft's own timer waits for its leader lease (`election_timeout_max_ms`) and then a
//! whole random election timeout more: with a 1 s timeout, a dead leader was replaced 2.3
//! s after its last heartbeat, most of a failover at 10,000 nodes. So a follower that still
//! holds the dead leader's committed vote, once the pre-vote is won, prompts one election
//! itself as soon as the other voters' leases have run out too: the lease, one heartbeat
//! interval for the spread of their last heartbeats, and a random share of the spread of
//! election timeouts, drawn once per silence, so that two followers rarely ask at once (if
//! they do, the vote splits and openraft's timer elects as before). It prompts only from a
//! committed vote: one that voted for another candidate since must not start a newer term
//! under it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use openraft::ServerState;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::net::peers::Peers;
use crate::store::LastLog;
use crate::types::{NodeId, Raft, RaftMetrics};

/// What a replica that wants to campaign says about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVote {
    pub term: u64,
    pub last_log_index: Option<u64>,
    /// The term of the asker's last log entry (0 for an empty log).
    pub last_log_term: u64,
}

/// The asker's log is at least as up to date as ours, `mine` being our last log entry's
/// (term, index): Raft's election restriction, which the real vote applies. The last term
/// comes first: comparing indexes alone lets a log with a long tail from an old term
/// outrank the newer, committed entries.
pub fn log_up_to_date(ask: &PreVote, mine: (u64, Option<u64>)) -> bool {
    (ask.last_log_term, ask.last_log_index) >= mine
}

/// When this replica last heard from a leader it follows. tokio's clock, so simulated time
/// (turmoil) is honoured.
pub(crate) struct Campaign {
    leader_heard_at: Mutex<Option<Instant>>,
    /// Until then this replica neither campaigns nor grants pre-votes: leadership is being
    /// handed to another replica (see `transfer`).
    held_until: Mutex<Option<Instant>>,
    /// How long without a leader before an election may start.
    quiet: Duration,
    /// When this replica prompts an election itself (see the module's documentation).
    prompt: Mutex<Prompt>,
    /// This replica's last log entry.
    log: LastLog,
}

impl Campaign {
    pub(crate) fn new(settings: &crate::settings::RaftSettings, seed: u64, log: LastLog) -> Campaign {
        Campaign {
            leader_heard_at: Mutex::new(None),
            held_until: Mutex::new(None),
            quiet: Duration::from_millis(settings.election_timeout_min_ms),
            prompt: Mutex::new(Prompt::new(settings, seed)),
            log,
        }
    }

    /// When to prompt an election for the current silence, if this replica heard a leader
    /// and has not prompted one for this silence yet.
    fn prompt_at(&self) -> Option<Instant> {
        let heard = (*self.leader_heard_at.lock().unwrap_or_else(PoisonError::into_inner))?;
        self.prompt.lock().unwrap_or_else(PoisonError::into_inner).at(heard)
    }

    /// Marks the current silence as prompted, unless a leader was heard since `at` was
    /// given: whether to prompt now.
    fn take_prompt(&self, at: Instant) -> bool {
        let Some(heard) = *self.leader_heard_at.lock().unwrap_or_else(PoisonError::into_inner) else { return false };
        self.prompt.lock().unwrap_or_else(PoisonError::into_inner).take(heard, at)
    }

    /// (term, index) of this replica's last log entry; (0, None) for an empty log.
    fn last_log(&self) -> (u64, Option<u64>) {
        self.log.get().map_or((0, None), |id| (id.leader_id.term, Some(id.index)))
    }

    /// Holds this replica's own campaigns back for `d`, while leadership moves to another.
    pub(crate) fn hold_back(&self, d: Duration) {
        *self.held_until.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + d);
    }

    fn held_back(&self) -> bool {
        self.held_until.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|until| Instant::now() < until)
    }

    pub(crate) fn leader_heard(&self) {
        *self.leader_heard_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Whether a leader this replica follows was heard from within `within`.
    pub(crate) fn leader_heard_within(&self, within: Duration) -> bool {
        self.leader_heard_at.lock().unwrap_or_else(PoisonError::into_inner).is_some_and(|at| at.elapsed() < within)
    }

    /// No leader heard for `quiet` (or ever).
    fn leaderless(&self) -> bool {
        self.leader_heard_at.lock().unwrap_or_else(PoisonError::into_inner).is_none_or(|at| at.elapsed() >= self.quiet)
    }

    /// Whether this replica would take part in the asker's election now.
    pub(crate) fn grants(&self, raft: &Raft, ask: &PreVote) -> bool {
        let m = raft.metrics().borrow().clone();
        m.state != ServerState::Leader
            && !self.held_back()
            && self.leaderless()
            && ask.term >= m.current_term
            && log_up_to_date(ask, self.last_log())
    }
}

/// One silence's prompt: when, drawn once per last heartbeat heard, and whether it was made.
struct Prompt {
    /// The leader lease plus one heartbeat interval.
    after: Duration,
    /// The spread of election timeouts, from which a random share is added.
    spread_ms: u64,
    rng: baton_rng::SplitMix64,
    /// The last heartbeat the current draw is for, and the prompt's time.
    drawn: Option<(Instant, Instant)>,
    /// The last heartbeat whose silence was prompted.
    made_for: Option<Instant>,
}

impl Prompt {
    fn new(settings: &crate::settings::RaftSettings, seed: u64) -> Prompt {
        let lease_ms = settings.election_timeout_max_ms;
        Prompt {
            after: Duration::from_millis(lease_ms.saturating_add(settings.heartbeat_interval_ms)),
            spread_ms: settings.election_timeout_max_ms.saturating_sub(settings.election_timeout_min_ms).max(1),
            rng: baton_rng::SplitMix64::new(seed),
            drawn: None,
            made_for: None,
        }
    }

    fn at(&mut self, heard: Instant) -> Option<Instant> {
        if self.made_for == Some(heard) {
            return None;
        }
        match self.drawn {
            Some((h, at)) if h == heard => Some(at),
            _ => {
                let at = heard + self.after + Duration::from_millis(self.rng.below(self.spread_ms));
                self.drawn = Some((heard, at));
                Some(at)
            }
        }
    }

    fn take(&mut self, heard: Instant, at: Instant) -> bool {
        let current = self.drawn == Some((heard, at)) && self.made_for != Some(heard);
        if current {
            self.made_for = Some(heard);
        }
        current
    }
}

/// Prompts one election at `at` if this replica is then still a follower holding a
/// committed vote (the silent leader's), and no leader was heard meanwhile.
async fn prompt(raft: &Raft, campaign: &Campaign, at: Instant) {
    tokio::time::sleep_until(at).await;
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Follower || !m.vote.is_committed() || campaign.held_back() {
        return;
    }
    if campaign.take_prompt(at) {
        tracing::info!(term = m.current_term, "no leader heard for its lease; prompting an election");
        let _ = raft.trigger().elect().await;
    }
}

/// Runs the guard until the replica shuts down (its metrics channel closes).
pub(crate) fn start(raft: Raft, campaign: Arc<Campaign>, peers: Arc<Peers>, self_id: NodeId, every: Duration) {
    raft.runtime_config().elect(false);
    let mut metrics = raft.metrics();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                closed = closed(&mut metrics) => if closed { return },
            }
            let allow = may_campaign(&raft, &campaign, &peers, self_id, every).await;
            raft.runtime_config().elect(allow);
            // Before the next round: a prompt is not put off to a round's boundary.
            let due = allow.then(|| campaign.prompt_at()).flatten().filter(|at| *at <= Instant::now() + every);
            if let Some(at) = due {
                prompt(&raft, &campaign, at).await;
            }
        }
    });
}

/// Completes when the metrics channel closes (true) — never otherwise.
pub(crate) async fn closed(metrics: &mut watch::Receiver<RaftMetrics>) -> bool {
    while metrics.changed().await.is_ok() {}
    true
}

/// One guard round: may openraft start an election now?
async fn may_campaign(raft: &Raft, campaign: &Campaign, peers: &Peers, self_id: NodeId, timeout: Duration) -> bool {
    let m = raft.metrics().borrow().clone();
    if m.state == ServerState::Leader || campaign.held_back() || !campaign.leaderless() {
        return false;
    }
    let membership = m.membership_config.membership();
    let voters: BTreeMap<NodeId, String> = membership
        .voter_ids()
        .filter_map(|id| membership.get_node(&id).map(|n| (id, crate::addrs::Addrs::parse(&n.addr).peer)))
        .collect();
    if !voters.contains_key(&self_id) {
        return false;
    }
    let (last_log_term, last_log_index) = campaign.last_log();
    let ask = PreVote { term: m.current_term + 1, last_log_index, last_log_term };
    let asks =
        voters.iter().filter(|(id, _)| **id != self_id).map(|(id, addr)| peers.pre_vote(*id, addr, &ask, timeout));
    let yes = 1 + futures::future::join_all(asks).await.into_iter().filter(|granted| *granted).count();
    yes * 2 > voters.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(last_log_term: u64, last_log_index: u64) -> PreVote {
        PreVote { term: 9, last_log_index: Some(last_log_index), last_log_term }
    }

    /// Raft's election restriction compares the last entries' terms first. A replica whose
    /// log ends in a long tail of an old term (term 1 up to index 10, never committed) must
    /// not outrank one holding the newer, committed entries (term 2 up to index 6): with
    /// index alone, the first passed every pre-vote and lost every real vote, and the second
    /// never passed a pre-vote, so the two of a three-voter cluster elected nobody.
    #[test]
    fn a_later_last_term_is_more_up_to_date_than_a_longer_log() {
        let (stale, current) = ((1, Some(10)), (2, Some(6)));
        assert!(log_up_to_date(&ask(2, 6), stale), "the current log must win the stale voter's pre-vote");
        assert!(!log_up_to_date(&ask(1, 10), current), "the stale log must not win the current voter's pre-vote");
        // Same last term: the longer log is more up to date.
        assert!(log_up_to_date(&ask(2, 7), current));
        assert!(!log_up_to_date(&ask(2, 5), current));
        assert!(log_up_to_date(&ask(2, 6), current), "equal logs grant");
        // An empty log is behind any entry; two empty logs are equal.
        let empty = PreVote { term: 9, last_log_index: None, last_log_term: 0 };
        assert!(!log_up_to_date(&empty, (1, Some(1))));
        assert!(log_up_to_date(&empty, (0, None)));
    }
}
