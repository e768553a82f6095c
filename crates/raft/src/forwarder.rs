//! Sends a follower's client writes on to the leader, those that wait together in one call.
//!
//! With clients spread over the replicas, most writes reach a follower. One call per write
//! cost a request and a reply on the peer connection, and a request for the leader to
//! decode and dispatch, per write: as many messages as the write's own replication. Writes
//! that wait together now go in one `ForwardWrites` call (up to `max_batch_commands` and
//! `max_batch_bytes`), at most `max_forwards_in_flight` calls at once; the next call grows
//! while they are out. The leader hands them to its batcher together, so they also share a
//! log entry there. A leader of an older build, which lacks the call, gets them one by one,
//! and so does a leader that refuses the call as a whole (more writes than its own
//! `max_batch_commands`): nothing was applied then. A call that fails otherwise may have
//! been applied: each of its writes is answered once as failed ("may or may not have been
//! applied") and never sent again, so none is applied twice.

use std::sync::Arc;
use std::time::Duration;

use baton_model::{Command, Response};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::WriteError;
use crate::net::peers::Peers;
use crate::replica::known_leader;
use crate::settings::RaftSettings;
use crate::stats::SharedStats;
use crate::types::Raft;

/// One client write waiting to be forwarded.
pub(crate) struct Forward {
    pub cmd: Command,
    pub bytes: usize,
    pub reply: oneshot::Sender<Result<Response, WriteError>>,
}

/// Starts the forwarding task; it ends when the returned sender is dropped.
pub(crate) fn start(
    raft: Raft,
    peers: Arc<Peers>,
    settings: &RaftSettings,
    stats: SharedStats,
) -> mpsc::Sender<Forward> {
    let (tx, rx) = mpsc::channel(settings.max_pending_writes);
    let task = Task {
        raft,
        peers,
        stats,
        commands: settings.max_batch_commands,
        bytes: settings.max_batch_bytes,
        calls: Arc::new(Semaphore::new(settings.max_forwards_in_flight)),
        timeout: Duration::from_millis(settings.request_timeout_ms),
    };
    tokio::spawn(task.run(rx));
    tx
}

struct Task {
    raft: Raft,
    peers: Arc<Peers>,
    stats: SharedStats,
    commands: usize,
    bytes: usize,
    calls: Arc<Semaphore>,
    timeout: Duration,
}

impl Task {
    async fn run(self, mut rx: mpsc::Receiver<Forward>) {
        let mut carried: Option<Forward> = None;
        loop {
            let first = match carried.take() {
                Some(f) => f,
                None => match rx.recv().await {
                    Some(f) => f,
                    None => return,
                },
            };
            // Wait for a call before collecting: the next call grows while others are out.
            let Ok(call) = self.calls.clone().acquire_owned().await else {
                return;
            };
            let mut bytes = first.bytes;
            let mut batch = vec![first];
            while batch.len() < self.commands {
                match rx.try_recv() {
                    Ok(f) if bytes + f.bytes > self.bytes => {
                        carried = Some(f);
                        break;
                    }
                    Ok(f) => {
                        bytes += f.bytes;
                        batch.push(f);
                    }
                    Err(_) => break,
                }
            }
            let (cmds, replies): (Vec<Command>, Vec<_>) = batch.into_iter().map(|f| (f.cmd, f.reply)).unzip();
            let (raft, peers, stats, timeout) =
                (self.raft.clone(), self.peers.clone(), self.stats.clone(), self.timeout);
            tokio::spawn(async move {
                let _call = call;
                let answers = send(&raft, &peers, &stats, cmds, timeout).await;
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(answer);
                }
            });
        }
    }
}

/// Forwards `cmds` to the leader known now; one answer per command, in order.
async fn send(
    raft: &Raft,
    peers: &Peers,
    stats: &SharedStats,
    cmds: Vec<Command>,
    timeout: Duration,
) -> Vec<Result<Response, WriteError>> {
    let all = |e: WriteError| vec![Err(e); cmds.len()];
    // The leader may have changed since the writes were taken: ask again, once, for all.
    let (leader_id, at) = match known_leader(raft) {
        None => return all(WriteError::NoLeader),
        Some((leader_id, None)) => {
            return all(WriteError::ForwardFailed {
                leader_id,
                leader_addr: String::new(),
                reason: "the leader's address is not in the membership".into(),
            });
        }
        Some((leader_id, Some(at))) => (leader_id, at),
    };
    stats.forward_called();
    match peers.forward_writes(leader_id, &at, &cmds, timeout).await {
        Ok(Some(answers)) => answers,
        Ok(None) => {
            let one_by_one = cmds.iter().map(|c| {
                stats.forward_called();
                peers.forward_write(leader_id, &at, c, timeout)
            });
            futures::future::join_all(one_by_one).await
        }
        Err(e) => all(e),
    }
}
