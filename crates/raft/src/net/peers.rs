//! Calls to other replicas: the envelope every request carries, a bounded cache of
//! connections, and the non-raft calls (forwarded writes, read index, identify).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use baton_model::{Command, Response};
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_proto::v1::{IdentifyReply, IdentifyRequest, RaftRequest};
use tonic::transport::Channel;

use super::dialer::Dialer;
use crate::addrs::Addrs;
use crate::campaign::PreVote;
use crate::codec::{decode, encode};
use crate::error::{MembershipError, ReadError, WriteError};
use crate::membership::Change;
use crate::metrics::ReplicaMetrics;
use crate::transfer::TransferNote;
use crate::types::{LogId, NodeId};

/// Connections kept open at once; past it the cache is emptied and refilled (peers are few,
/// so this only bites when addresses churn).
const MAX_CACHED_PEERS: usize = 256;

pub type Client = RaftTransportClient<Channel>;

/// Which RPC a call is, for choosing the generated method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    AppendEntries,
    InstallSnapshot,
    Vote,
    ForwardWrite,
    ForwardWrites,
    ReadIndex,
    PreVote,
    Membership,
    TransferNote,
}

/// Who calls and which cluster it belongs to.
pub struct Peers {
    pub cluster_id: String,
    pub self_id: NodeId,
    pub max_message_bytes: usize,
    dialer: Dialer,
    /// Each client with the dialer's epoch it was dialed in.
    clients: Mutex<HashMap<String, (u64, Client)>>,
}

/// A failed call: the gRPC status, or a channel that could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Status(#[from] tonic::Status),
    #[error("{0}")]
    Dial(String),
    #[error("reply does not decode: {0}")]
    Decode(String),
    #[error("request does not encode: {0}")]
    Encode(String),
    #[error("no reply within {0:?}")]
    Timeout(Duration),
}

impl Peers {
    pub fn new(cluster_id: String, self_id: NodeId, max_message_bytes: usize, dialer: Dialer) -> Peers {
        Peers { cluster_id, self_id, max_message_bytes, dialer, clients: Mutex::new(HashMap::new()) }
    }

    /// A client for `addr`, connecting lazily. One dialed before the certificates were
    /// reloaded is dropped and dialed again, so the peer sees the new certificate.
    pub fn client(&self, addr: &str) -> Result<Client, CallError> {
        let epoch = self.dialer.epoch();
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match clients.get(addr) {
            Some((e, c)) if *e == epoch => return Ok(c.clone()),
            Some(_) => {
                clients.retain(|_, (e, _)| *e == epoch);
            }
            None => {}
        }
        if clients.len() >= MAX_CACHED_PEERS {
            clients.clear();
        }
        let channel = self.dialer.dial(addr).map_err(CallError::Dial)?;
        let client = RaftTransportClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        clients.insert(addr.to_string(), (epoch, client.clone()));
        Ok(client)
    }

    /// Sends `payload` (already encoded) to replica `to` at `addr` and returns the reply's
    /// payload.
    pub async fn call(
        &self,
        rpc: Rpc,
        to: NodeId,
        addr: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let mut client = self.client(addr)?;
        let bytes = payload.len();
        let mut req = tonic::Request::new(RaftRequest {
            cluster_id: self.cluster_id.clone(),
            from_node_id: self.self_id,
            to_node_id: to,
            payload,
        });
        req.set_timeout(timeout);
        let call = async {
            match rpc {
                Rpc::AppendEntries => client.append_entries(req).await,
                Rpc::InstallSnapshot => client.install_snapshot(req).await,
                Rpc::Vote => client.vote(req).await,
                Rpc::ForwardWrite => client.forward_write(req).await,
                Rpc::ForwardWrites => client.forward_writes(req).await,
                Rpc::ReadIndex => client.read_index(req).await,
                Rpc::PreVote => client.pre_vote(req).await,
                Rpc::Membership => client.membership(req).await,
                Rpc::TransferNote => client.transfer_note(req).await,
            }
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(reply)) => Ok(reply.into_inner().payload),
            // tonic's own deadline (`set_timeout`) may fire first: the same timeout, below.
            Ok(Err(status)) if !ran_out_of_time(&status) => {
                // Only statuses the other replica sends as answers leave the connection
                // trusted; a transport failure (reset, refused, a broken stream, a missed
                // deadline) makes the next call dial afresh, or a connection broken by a
                // partition could stay cached after the network heals.
                let answered = matches!(
                    status.code(),
                    tonic::Code::InvalidArgument
                        | tonic::Code::FailedPrecondition
                        | tonic::Code::OutOfRange
                        | tonic::Code::PermissionDenied
                        | tonic::Code::NotFound
                        | tonic::Code::AlreadyExists
                        // A replica of an older build, without the call.
                        | tonic::Code::Unimplemented
                );
                if !answered {
                    self.forget(addr);
                }
                tracing::debug!(?rpc, to, addr, code = ?status.code(), message = status.message(), "call failed");
                Err(status.into())
            }
            _ => {
                // The connection may be wedged (a partition that drops packets silently);
                // the next call dials afresh.
                self.forget(addr);
                tracing::debug!(?rpc, to, addr, ?timeout, bytes, "call timed out");
                Err(CallError::Timeout(timeout))
            }
        }
    }

    fn forget(&self, addr: &str) {
        self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(addr);
    }

    /// Asks the replica at `addr` who it is.
    pub async fn identify(&self, addr: &str, timeout: Duration) -> Result<IdentifyReply, CallError> {
        let mut client = self.client(addr)?;
        let mut req = tonic::Request::new(IdentifyRequest { cluster_id: self.cluster_id.clone() });
        req.set_timeout(timeout);
        match tokio::time::timeout(timeout, client.identify(req)).await {
            Ok(reply) => Ok(reply?.into_inner()),
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }

    /// Sends a client write to the leader, which applies it without forwarding further.
    pub async fn forward_write(
        &self,
        leader_id: NodeId,
        leader: &Addrs,
        cmd: &Command,
        timeout: Duration,
    ) -> Result<Response, WriteError> {
        let payload = encode(cmd).map_err(|e| WriteError::Encode(e.to_string()))?;
        let failed = |reason: String| WriteError::ForwardFailed { leader_id, leader_addr: leader.peer.clone(), reason };
        let reply = match self.call(Rpc::ForwardWrite, leader_id, &leader.peer, payload, timeout).await {
            Ok(r) => r,
            // Nothing was sent: the caller can safely send the write to the leader itself, at
            // the leader's API address.
            Err(CallError::Dial(_)) => {
                return Err(WriteError::NotLeader { leader_id, leader_addr: leader.api.clone() });
            }
            Err(e) => return Err(failed(e.to_string())),
        };
        decode::<Result<Response, WriteError>>(&reply).map_err(|e| failed(e.to_string()))?
    }

    /// Sends client writes that waited together to the leader in one call; the leader
    /// answers each, in order, as [`Peers::forward_write`] would. `Ok(None)`: nothing was
    /// applied, send them one by one: the leader does not know the call (an older build), or
    /// refused it as a whole before applying any (INVALID_ARGUMENT: more writes than its
    /// `max_batch_commands`, which may be smaller than this replica's, or a call it cannot
    /// decode). Any other failure may come after the leader applied them: each is answered
    /// as failed, "may or may not have been applied", and none is sent again.
    pub async fn forward_writes(
        &self,
        leader_id: NodeId,
        leader: &Addrs,
        cmds: &[Command],
        timeout: Duration,
    ) -> Result<Option<Vec<Result<Response, WriteError>>>, WriteError> {
        let payload = encode(&cmds).map_err(|e| WriteError::Encode(e.to_string()))?;
        let failed = |reason: String| WriteError::ForwardFailed { leader_id, leader_addr: leader.peer.clone(), reason };
        let reply = match self.call(Rpc::ForwardWrites, leader_id, &leader.peer, payload, timeout).await {
            Ok(r) => r,
            Err(CallError::Status(s))
                if matches!(s.code(), tonic::Code::Unimplemented | tonic::Code::InvalidArgument) =>
            {
                tracing::debug!(leader_id, code = ?s.code(), message = s.message(), "forwarding the writes one by one");
                return Ok(None);
            }
            Err(CallError::Dial(_)) => {
                return Err(WriteError::NotLeader { leader_id, leader_addr: leader.api.clone() });
            }
            Err(e) => return Err(failed(e.to_string())),
        };
        let answers: Vec<Result<Response, WriteError>> = decode(&reply).map_err(|e| failed(e.to_string()))?;
        if answers.len() != cmds.len() {
            return Err(failed(format!("{} answers to {} writes", answers.len(), cmds.len())));
        }
        Ok(Some(answers))
    }

    /// Sends a membership change to the leader, which makes it without forwarding further.
    /// Bounded by `timeout`: adding a replica waits for it to catch up.
    pub async fn forward_membership(
        &self,
        leader_id: NodeId,
        leader: &Addrs,
        change: &Change,
        timeout: Duration,
    ) -> Result<ReplicaMetrics, MembershipError> {
        let failed =
            |reason: String| MembershipError::ForwardFailed { leader_id, leader_addr: leader.peer.clone(), reason };
        let payload = encode(change).map_err(|e| failed(e.to_string()))?;
        let reply = match self.call(Rpc::Membership, leader_id, &leader.peer, payload, timeout).await {
            Ok(r) => r,
            Err(CallError::Dial(_)) => {
                return Err(MembershipError::NotLeader { leader_id, leader_addr: leader.api.clone() });
            }
            Err(e) => return Err(failed(e.to_string())),
        };
        decode::<Result<ReplicaMetrics, MembershipError>>(&reply).map_err(|e| failed(e.to_string()))?
    }

    /// Tells voter `to` that leadership is being handed over.
    pub async fn transfer_note(
        &self,
        to: NodeId,
        addr: &str,
        note: &TransferNote,
        timeout: Duration,
    ) -> Result<(), CallError> {
        let payload = encode(note).map_err(|e| CallError::Encode(e.to_string()))?;
        self.call(Rpc::TransferNote, to, addr, payload, timeout).await.map(|_| ())
    }

    /// Asks a voter whether it would take part in an election now; any failure is a no.
    pub async fn pre_vote(&self, to: NodeId, addr: &str, ask: &PreVote, timeout: Duration) -> bool {
        let Ok(payload) = encode(ask) else {
            return false;
        };
        match self.call(Rpc::PreVote, to, addr, payload, timeout).await {
            Ok(reply) => decode::<bool>(&reply).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Asks the leader for the log id a linearizable read must wait for.
    pub async fn read_index(
        &self,
        leader_id: NodeId,
        leader_addr: &str,
        timeout: Duration,
    ) -> Result<Option<LogId>, ReadError> {
        let failed =
            |reason: String| ReadError::ForwardFailed { leader_id, leader_addr: leader_addr.to_string(), reason };
        let reply = self
            .call(Rpc::ReadIndex, leader_id, leader_addr, Vec::new(), timeout)
            .await
            .map_err(|e| failed(e.to_string()))?;
        decode::<Result<Option<LogId>, ReadError>>(&reply).map_err(|e| failed(e.to_string()))?
    }
}

/// Whether a call failed because tonic's deadline for it passed.
fn ran_out_of_time(status: &tonic::Status) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = cause {
        if e.is::<tonic::TimeoutExpired>() {
            return true;
        }
        cause = e.source();
    }
    false
}
