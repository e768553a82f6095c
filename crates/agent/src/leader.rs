//! Following the leader: attach to any replica, go where a follower points
//! (FAILED_PRECONDITION with `baton-leader` metadata), back off between rounds of failures
//! (`dialing`), and
//! forward each directive to the supervisor. The replica the stream is attached to is
//! published so that reports go to the same one.

use std::sync::Arc;
use std::time::Duration;

use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::{AttachRequest, Directive, NodeInfo};
use tokio::sync::{Notify, mpsc, watch};
use tonic::transport::Channel;

use crate::backoff::seed_for;
use crate::dialing::{Dialing, Tried};
use crate::endpoint::connect;
use crate::journal::Journal;
use crate::limits::{ATTACH_TIMEOUT_MS, MAX_MESSAGE_BYTES};

/// Response metadata key in which a follower names the leader.
pub use baton_proto::LEADER_METADATA;

/// The replica currently attached: its address and channel.
pub type Attached = Option<(String, Channel)>;

pub struct Follower {
    pub servers: Vec<String>,
    /// How to reach them: mutual TLS or plain TCP.
    pub transport: baton_proto::tls::Transport,
    pub node: NodeInfo,
    pub journal: Arc<Journal>,
    pub directives: mpsc::Sender<Directive>,
    pub attached: watch::Sender<Attached>,
    /// Raised by the reporter when the attached replica turns out to be a deposed leader.
    pub reattach: Arc<Notify>,
}

impl Follower {
    /// Runs until the supervisor goes away.
    pub async fn run(self) {
        let mut dialing = Dialing::new(self.servers.clone(), 0, seed_for(&self.node.name));
        loop {
            let addr = dialing.next_addr();
            let tried = match self.attach_once(&addr).await {
                Attach::Closed => return,
                Attach::Served => Tried::Served,
                Attach::Redirect(leader) => {
                    tracing::info!(from = addr, to = leader, "not the leader; following its hint");
                    Tried::Redirect(leader)
                }
                Attach::Failed(why) => {
                    tracing::debug!(addr, "attach failed: {why}");
                    Tried::Failed
                }
            };
            let _ = self.attached.send(None);
            let wait_ms = dialing.wait_ms(tried);
            if wait_ms > 0 {
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            }
        }
    }

    async fn attach_once(&self, addr: &str) -> Attach {
        let channel = match connect(addr, &self.transport).await {
            Ok(c) => c,
            Err(e) => return Attach::Failed(e),
        };
        let mut client = AgentGatewayClient::new(channel.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES);
        let term_seen = self.journal.term().unwrap_or(0);
        let req = AttachRequest { node: Some(self.node.clone()), term_seen };
        let answer = tokio::time::timeout(Duration::from_millis(ATTACH_TIMEOUT_MS), client.attach(req)).await;
        let Ok(answer) = answer else {
            return Attach::Failed(format!("no answer to the attach within {ATTACH_TIMEOUT_MS} ms"));
        };
        let mut stream = match answer {
            Ok(resp) => resp.into_inner(),
            Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                let leader = status
                    .metadata()
                    .get(LEADER_METADATA)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && *s != addr);
                return match leader {
                    Some(l) => Attach::Redirect(l.to_string()),
                    None => Attach::Failed(format!("not the leader, and no leader known: {}", status.message())),
                };
            }
            Err(status) => return Attach::Failed(status.to_string()),
        };
        tracing::info!(addr, "attached");
        let _ = self.attached.send(Some((addr.to_string(), channel)));
        let mut served = false;
        // A reload of this agent's certificates: attach again, so that the replica sees the
        // new certificate and the reporter uses the new channel.
        let mut reloads = self.transport.reloads();
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = self.reattach.notified() => {
                    return if served { Attach::Served } else { Attach::Failed("deposed leader".into()) };
                }
                () = reloaded(&mut reloads) => {
                    tracing::info!(addr, "certificates reloaded; attaching again with them");
                    return Attach::Served;
                }
            };
            match msg {
                Ok(Some(d)) => {
                    let (term, leader_id) = (d.term, d.leader_id);
                    if self.directives.send(d).await.is_err() {
                        return Attach::Closed;
                    }
                    let fence = self.journal.fence().unwrap_or_default();
                    if let Err(why) = fence.check(term, leader_id) {
                        // The supervisor refuses it too; look for the real leader.
                        return Attach::Failed(format!("directive refused: {why}"));
                    }
                    served = true;
                }
                Ok(None) => return if served { Attach::Served } else { Attach::Failed("stream ended".into()) },
                Err(status) => {
                    tracing::info!(addr, "directive stream broke: {status}");
                    return if served { Attach::Served } else { Attach::Failed(status.to_string()) };
                }
            }
        }
    }
}

/// Returns when `reloads` says the certificates were reloaded; never without TLS.
async fn reloaded(reloads: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    let changed = match reloads {
        Some(r) => r.changed().await.is_ok(),
        None => false,
    };
    if !changed {
        std::future::pending::<()>().await;
    }
}

enum Attach {
    /// Directives flowed, then the stream ended: reattach soon.
    Served,
    Redirect(String),
    Failed(String),
    /// The supervisor is gone: the agent is shutting down.
    Closed,
}
