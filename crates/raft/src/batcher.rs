//! Batches client writes into log entries.
//!
//! Writes that wait together go into one entry, so they share one append, one flush on
//! every replica and one round of replication. A batch is cut when it reaches
//! `max_batch_commands` or `max_batch_bytes`; at most `max_batches_in_flight` batches are
//! proposed and not yet applied, and the next batch grows while they are.

use std::sync::Arc;

use baton_model::{Command, Response};
use openraft::error::ClientWriteError;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::WriteError;
use crate::settings::RaftSettings;
use crate::types::{CommandBatch, Raft};

/// One client write waiting to be proposed.
pub(crate) struct Pending {
    pub cmd: Command,
    pub bytes: usize,
    pub reply: oneshot::Sender<Result<Response, WriteError>>,
}

/// Starts the batching task for `raft`; it ends when the returned sender is dropped.
pub(crate) fn start(raft: Raft, settings: &RaftSettings) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(settings.max_pending_writes);
    let limits = Limits { commands: settings.max_batch_commands, bytes: settings.max_batch_bytes };
    let in_flight = Arc::new(Semaphore::new(settings.max_batches_in_flight));
    tokio::spawn(run(raft, rx, limits, in_flight));
    tx
}

struct Limits {
    commands: usize,
    bytes: usize,
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<Pending>, limits: Limits, in_flight: Arc<Semaphore>) {
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // Wait for a slot before collecting: the batch grows while earlier ones commit.
        let Ok(slot) = in_flight.clone().acquire_owned().await else {
            return;
        };
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
        match raft.client_write_ff(CommandBatch { commands }).await {
            Err(_) => answer_all(replies, WriteError::Stopped),
            Ok(committed) => {
                tokio::spawn(async move {
                    let _slot = slot;
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

fn answer_all(replies: Vec<oneshot::Sender<Result<Response, WriteError>>>, e: WriteError) {
    for r in replies {
        let _ = r.send(Err(e.clone()));
    }
}
