//! Heartbeats and observations: every `heartbeat_ms`, and at once when something new was
//! observed, send the running replicas and the unacknowledged observations to the replica
//! the directive stream is attached to. An OK reply acknowledges what was sent.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::{Observation, ReportRequest, Running};
use tokio::sync::{Notify, watch};

use crate::journal::Journal;
use crate::leader::Attached;
use crate::lease::{Floor, Lease};
use crate::lease_file::{self, boot_ms};
use crate::limits::{MAX_MESSAGE_BYTES, MAX_OBSERVATIONS_PER_REPORT, REATTACH_AFTER_FAILED_REPORTS, REPORT_TIMEOUT_MS};

pub struct Reporter {
    pub node: String,
    pub heartbeat_ms: u64,
    pub journal: Arc<Journal>,
    pub running: watch::Receiver<Vec<Running>>,
    /// The state index of the directive the supervisor waits for (0: none).
    pub awaiting: watch::Receiver<u64>,
    pub observed: Arc<Notify>,
    pub attached: watch::Receiver<Attached>,
    pub reattach: Arc<Notify>,
    /// Renewed by every reply that grants a lease; the supervisor watches it.
    pub lease: watch::Sender<Lease>,
    /// Where the replicas' watchdogs read the lease.
    pub lease_file: PathBuf,
    pub metrics: Arc<crate::metrics::AgentMetrics>,
    /// The fence last read from the journal, for a moment it cannot be read (a failing
    /// journal is being opened again).
    pub fence: crate::fence::Fence,
    /// Observations the leader acknowledged that are still in the journal.
    pub acked: Arc<Mutex<Acked>>,
    /// Told the state index at which each reported suspension was acknowledged.
    pub suspensions: Arc<crate::suspensions::Suspensions>,
    /// Starts refused while the journal fails: sent after the journaled observations.
    pub unrecorded: Arc<crate::unrecorded::Unrecorded>,
    /// Observations the journal could not take: sent after the journaled ones.
    pub unjournaled: Arc<crate::unjournaled::Outbox>,
}

/// Observations with the numbers a reply acknowledges them by (journal sequence numbers,
/// or the ids of those waiting in memory).
type Numbered = Vec<(u64, Observation)>;

/// Acknowledged observations on their way out of the journal.
#[derive(Default)]
pub struct Acked {
    /// Their sequence numbers.
    seqs: BTreeSet<u64>,
    /// A drop runs (it takes whatever is here until nothing is).
    dropping: bool,
}

/// Drops acknowledged observations until none is left, then says it no longer runs.
fn drop_acked(journal: &Journal, acked: &Mutex<Acked>) {
    loop {
        let seqs: Vec<u64> = {
            let mut a = acked.lock().unwrap_or_else(PoisonError::into_inner);
            if a.seqs.is_empty() {
                a.dropping = false;
                return;
            }
            a.seqs.iter().copied().collect()
        };
        if let Err(e) = journal.ack(&seqs) {
            tracing::warn!("{e}; acknowledged observations are sent again");
        }
        let mut a = acked.lock().unwrap_or_else(PoisonError::into_inner);
        for seq in &seqs {
            a.seqs.remove(seq);
        }
    }
}

impl Reporter {
    pub async fn run(mut self) {
        let beat = Duration::from_millis(self.heartbeat_ms);
        let mut failed_in_a_row = 0u32;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(beat) => {}
                _ = self.observed.notified() => {}
                changed = self.attached.changed() => if changed.is_err() { return },
            }
            let Some((addr, channel)) = self.attached.borrow_and_update().clone() else { continue };
            let Some(more) = self.report_once(&addr, channel).await else {
                failed_in_a_row += 1;
                if failed_in_a_row >= REATTACH_AFTER_FAILED_REPORTS {
                    tracing::info!(addr, failed_in_a_row, "reports fail; looking for the leader again");
                    self.reattach.notify_one();
                    failed_in_a_row = 0;
                }
                continue;
            };
            failed_in_a_row = 0;
            if more {
                // More observations than fit in one report: send the rest right away.
                self.observed.notify_one();
            }
        }
    }

    /// Drops acknowledged observations from the journal off the heartbeat's path: a slow disk
    /// (a sync that takes seconds) must not hold back the next report, and the lease with
    /// it. One drop runs at a time and takes everything acknowledged meanwhile; reports leave
    /// out what is acknowledged, and carry it again if its drop failed (as after a report
    /// that timed out: the leader takes a repeated observation as the same one).
    fn drop_later(&self, seqs: Vec<u64>) {
        if seqs.is_empty() {
            return;
        }
        let mut acked = self.acked.lock().unwrap_or_else(PoisonError::into_inner);
        acked.seqs.extend(seqs);
        if acked.dropping {
            return;
        }
        acked.dropping = true;
        let (journal, acked) = (self.journal.clone(), self.acked.clone());
        tokio::task::spawn_blocking(move || drop_acked(&journal, &acked));
    }

    /// Up to `MAX_OBSERVATIONS_PER_REPORT` observations the leader has not acknowledged:
    /// the journaled ones, then, in what room is left, those the journal could not take
    /// (newer than any journaled one: they wait only while the journal fails).
    fn pending(&self) -> (Numbered, Numbered) {
        let acked = self.acked.lock().unwrap_or_else(PoisonError::into_inner).seqs.clone();
        let journaled: Vec<_> = match self.journal.pending(MAX_OBSERVATIONS_PER_REPORT + acked.len()) {
            Ok(p) => p.into_iter().filter(|(seq, _)| !acked.contains(seq)).take(MAX_OBSERVATIONS_PER_REPORT).collect(),
            Err(e) => {
                // Sending the newer ones alone would tell the leader of an exit before an
                // older observation of the same replica.
                tracing::warn!("{e}; this report carries no observations");
                return (Vec::new(), Vec::new());
            }
        };
        let unjournaled = self.unjournaled.outbox(MAX_OBSERVATIONS_PER_REPORT - journaled.len());
        (journaled, unjournaled)
    }

    fn acked_len(&self) -> usize {
        self.acked.lock().unwrap_or_else(PoisonError::into_inner).seqs.len()
    }

    /// Extends the lease and tells the watchdogs; a lease file that cannot be written leaves
    /// them with the old expiry (they stop their replicas early: safe).
    fn renew(&self, sent_at_ms: u64, lease_ms: u64, from: Floor) {
        let mut lease = *self.lease.borrow();
        lease.renew(sent_at_ms, lease_ms, boot_ms());
        if lease_ms > 0 {
            lease.granted_from(from);
        }
        if lease == *self.lease.borrow() {
            return;
        }
        if let Err(e) = lease_file::write(&self.lease_file, &lease) {
            tracing::error!(path = %self.lease_file.display(), "cannot write the lease file: {e}");
        }
        self.lease.send_replace(lease);
    }

    /// Whether observations are still waiting after this report; `None` if the replica did
    /// not take it (refused, timed out, or a deposed leader).
    ///
    /// A journal that cannot be read or written does not stop the heartbeat: the lease must
    /// go on covering what runs here. Observations it cannot read wait for the next report.
    async fn report_once(&mut self, addr: &str, channel: tonic::transport::Channel) -> Option<bool> {
        let (pending, unjournaled) = self.pending();
        match self.journal.fence() {
            Ok(f) => self.fence = f,
            Err(e) => tracing::warn!("{e}; reporting the term last read from it"),
        }
        let fence = self.fence;
        let term_seen = fence.term;
        let seqs: Vec<u64> = pending.iter().map(|(s, _)| *s).collect();
        let kept: Vec<u64> = unjournaled.iter().map(|(id, _)| *id).collect();
        let stops = crate::suspensions::stops_in(pending.iter().chain(&unjournaled).map(|(_, o)| o));
        let unrecorded = self.unrecorded.outbox(MAX_OBSERVATIONS_PER_REPORT - pending.len() - unjournaled.len());
        let refused: Vec<_> = unrecorded.iter().map(|(k, _)| *k).collect();
        let observations = pending
            .into_iter()
            .chain(unjournaled)
            .map(|(_, o)| o)
            .chain(unrecorded.into_iter().map(|(_, o)| o))
            .collect();
        let req = ReportRequest {
            node: self.node.clone(),
            term_seen,
            running: self.running.borrow().clone(),
            observations,
            awaiting_state_index: *self.awaiting.borrow(),
        };
        let mut client = AgentGatewayClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        // The lease counts from here: the leader proves its leadership after this moment.
        let sent_at_ms = boot_ms();
        let reply = match tokio::time::timeout(Duration::from_millis(REPORT_TIMEOUT_MS), client.report(req)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => {
                self.metrics.report(false);
                tracing::debug!(addr, "report refused: {status}");
                return None;
            }
            Err(_) => {
                self.metrics.report(false);
                tracing::debug!(addr, "report timed out");
                return None;
            }
        };
        let next = match fence.check(reply.term, reply.leader_id) {
            Ok(next) => next,
            Err(why) => {
                // Not the leader this agent follows (deposed, or another one of its term):
                // keep the observations, take no lease, and look for the real leader.
                self.metrics.report(false);
                tracing::warn!(addr, "report answered by a replica that is not the leader: {why}; reattaching");
                self.reattach.notify_one();
                return Some(false);
            }
        };
        if next != fence {
            // A new term or leader is on stable storage before its lease is taken.
            if let Err(e) = self.journal.remember(next) {
                tracing::error!("{e}");
                return Some(false);
            }
            self.fence = next;
        }
        self.metrics.report(true);
        self.renew(sent_at_ms, reply.lease_ms, Floor { term: reply.term, state_index: reply.state_index });
        // Read after this report's observations were committed.
        self.suspensions.acknowledged(&stops, reply.state_index);
        self.unrecorded.taken(&refused);
        self.unjournaled.taken(&kept);
        let sent = seqs.len();
        self.drop_later(seqs);
        // More waiting than this report carried: send the rest right away.
        let more_journaled = sent == MAX_OBSERVATIONS_PER_REPORT && self.journal.pending_len() > self.acked_len();
        Some(more_journaled || !self.unjournaled.is_empty())
    }
}
