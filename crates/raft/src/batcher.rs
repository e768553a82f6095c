//! Batches client writes into log entries.
//!
//! Writes that wait together go into one entry, so they share one append, one flush on
//! every replica and one round of replication. A batch is cut when it reaches
//! `max_batch_commands` or `max_batch_bytes`.
//!
//! When to cut: openraft 0.9's core appends the leader's entries one at a time and waits for
//! each flush before it takes the next message (and before it replicates the entry), so the
//! leader's log flushes are a serial line every write passes through. A batch proposed
//! while an earlier one waits for its flush only queues behind it as an entry of its own,
//! costing a flush of its own, and writes arriving meanwhile must wait for a third. So the
//! next batch is cut only once the previous one is flushed on the leader
//! (`max_batches_unflushed`, 1 by default; the log store fires the batch's [`FlushSignal`]),
//! and everything that arrived during that flush goes into it. Replication and apply
//! overlap with the next flush; `max_batches_in_flight` bounds the batches proposed and not
//! yet answered.

use std::sync::Arc;

use baton_model::{Command, Response};
use openraft::error::ClientWriteError;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::WriteError;
use crate::settings::RaftSettings;
use crate::stats::SharedStats;
use crate::types::{CommandBatch, FlushSignal, Raft};

/// One client write waiting to be proposed.
pub(crate) struct Pending {
    pub cmd: Command,
    pub bytes: usize,
    pub reply: oneshot::Sender<Result<Response, WriteError>>,
}

/// Starts the batching task for `raft`; it ends when the returned sender is dropped.
pub(crate) fn start(raft: Raft, settings: &RaftSettings, stats: SharedStats) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(settings.max_pending_writes);
    let limits = Limits { commands: settings.max_batch_commands, bytes: settings.max_batch_bytes };
    let slots = Slots {
        in_flight: Arc::new(Semaphore::new(settings.max_batches_in_flight)),
        unflushed: Arc::new(Semaphore::new(settings.max_batches_unflushed)),
    };
    tokio::spawn(run(raft, rx, limits, slots, stats));
    tx
}

struct Limits {
    commands: usize,
    bytes: usize,
}

/// Permits a batch needs before it is cut.
struct Slots {
    /// Held until the batch is answered.
    in_flight: Arc<Semaphore>,
    /// Held until the batch is flushed on the leader, or answered if that comes first (a
    /// batch refused before it reached the log).
    unflushed: Arc<Semaphore>,
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<Pending>, limits: Limits, slots: Slots, stats: SharedStats) {
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // Wait for the permits before collecting: the batch grows while the previous one
        // is flushed.
        let Ok(slot) = slots.in_flight.clone().acquire_owned().await else {
            return;
        };
        let Ok(unflushed) = slots.unflushed.clone().acquire_owned().await else {
            return;
        };
        let flushed = FlushSignal::holding(unflushed);
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < limits.commands {
            match rx.try_recv() {
                Ok(p) if bytes + p.bytes > limits.bytes => {
                    carried = Some(p);
                    break;
                }
                Ok(p) => {
                    bytes += p.bytes;
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let (commands, replies): (Vec<Command>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
        stats.batch_proposed(commands.len());
        let answered = Answered { stats: stats.clone(), flushed: flushed.clone() };
        match raft.client_write_ff(CommandBatch { commands, flushed }).await {
            Err(_) => answer_all(replies, WriteError::Stopped),
            Ok(committed) => {
                tokio::spawn(async move {
                    let _slot = slot;
                    let _answered = answered;
                    match committed.await {
                        Ok(Ok(resp)) => {
                            let responses = resp.data.responses;
                            if responses.len() != replies.len() {
                                // The state machine answers once per command; anything else
                                // is a bug, and no caller may get another's answer.
                                tracing::error!(
                                    commands = replies.len(),
                                    responses = responses.len(),
                                    "batch answered with the wrong number of responses"
                                );
                                answer_all(replies, WriteError::Stopped);
                                return;
                            }
                            for (reply, r) in replies.into_iter().zip(responses) {
                                let _ = reply.send(Ok(r));
                            }
                        }
                        Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
                            let e = match (f.leader_id, f.leader_node) {
                                (Some(leader_id), Some(node)) => WriteError::NotLeader {
                                    leader_id,
                                    leader_addr: crate::addrs::Addrs::parse(&node.addr).api,
                                },
                                _ => WriteError::NoLeader,
                            };
                            answer_all(replies, e);
                        }
                        // Only membership changes fail this way, and a batch is not one.
                        Ok(Err(ClientWriteError::ChangeMembershipError(_))) | Err(_) => {
                            answer_all(replies, WriteError::Stopped)
                        }
                    }
                });
            }
        }
    }
}

/// Takes a batch off the in-flight count, and gives its unflushed permit back if the log
/// store has not, when dropped: however the batch's task ends.
struct Answered {
    stats: SharedStats,
    flushed: FlushSignal,
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.flushed.release();
        self.stats.batch_answered();
    }
}

fn answer_all(replies: Vec<oneshot::Sender<Result<Response, WriteError>>>, e: WriteError) {
    for r in replies {
        let _ = r.send(Err(e.clone()));
    }
}
