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
use crate::membership::Forwarded;
use crate::metrics::ReplicaMetrics;
use crate::transfer::TransferNote;
use crate::types::{LogId, NodeId};

/// Connections kept open at once; past it the cache is emptied and refilled (peers are few,
/// so this only bites when addresses churn).
const MAX_CACHED_PEERS: usize = 256;
/// How long a connection that failed once must have lived before it is dialed again;
/// doubled with each failure in a row, up to `MAX_REDIAL_AFTER_MS`. Why: openraft retries a
/// failed call at once, so dialing afresh after each failure dials a peer behind a partition
/// 20 times a second.
const MIN_REDIAL_AFTER_MS: u64 = 100;
/// The longest a connection that keeps failing is kept before it is dialed again: the most
/// a healed link waits for a fresh connection.
const MAX_REDIAL_AFTER_MS: u64 = 1_000;

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
    links: Mutex<HashMap<String, Link>>,
    /// This replica's wall clock, to time calls for `skew`.
    clock: crate::replica::WallClock,
    /// The other voters' clocks as their replies say them.
    pub skew: crate::skew::ClockSkew,
}

/// A cached connection to one address.
struct Link {
    /// The dialer's epoch it was dialed in.
    epoch: u64,
    client: Client,
    dialed_at: tokio::time::Instant,
    /// Calls over this address that failed in a row (carried over to a fresh dial).
    failures: u32,
    /// The next call dials afresh.
    redial: bool,
}

impl Link {
    /// Counts a failure; the connection is dialed again once it has lived long enough.
    fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let doublings = self.failures.saturating_sub(1).min(16);
        let redial_after_ms = (MIN_REDIAL_AFTER_MS << doublings).min(MAX_REDIAL_AFTER_MS);
        if self.dialed_at.elapsed() >= Duration::from_millis(redial_after_ms) {
            self.redial = true;
        }
    }
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
    pub fn new(
        cluster_id: String,
        self_id: NodeId,
        max_message_bytes: usize,
        dialer: Dialer,
        clock: crate::replica::WallClock,
    ) -> Peers {
        let (links, skew) = (Mutex::new(HashMap::new()), crate::skew::ClockSkew::default());
        Peers { cluster_id, self_id, max_message_bytes, dialer, links, clock, skew }
    }

    fn links(&self) -> std::sync::MutexGuard<'_, HashMap<String, Link>> {
        self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A client for `addr`, connecting lazily. One dialed before the certificates were
    /// reloaded is dropped and dialed again, so the peer sees the new certificate.
    pub fn client(&self, addr: &str) -> Result<Client, CallError> {
        let epoch = self.dialer.epoch();
        let mut links = self.links();
        let mut failures = 0;
        match links.get(addr) {
            Some(l) if l.epoch == epoch && !l.redial => return Ok(l.client.clone()),
            Some(l) if l.epoch == epoch => failures = l.failures,
            Some(_) => links.retain(|_, l| l.epoch == epoch),
            None => {}
        }
        if links.len() >= MAX_CACHED_PEERS && !links.contains_key(addr) {
            links.clear();
        }
        let channel = self.dialer.dial(addr).map_err(CallError::Dial)?;
        let client = RaftTransportClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        let dialed_at = tokio::time::Instant::now();
        links.insert(addr.to_string(), Link { epoch, client: client.clone(), dialed_at, failures, redial: false });
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
        let sent_ms = self.clock.now_ms();
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
            Ok(Ok(reply)) => {
                self.answered(addr);
                let reply = reply.into_inner();
                self.skew.note(to, sent_ms, self.clock.now_ms(), reply.now_ms);
                Ok(reply.payload)
            }
            // tonic's own deadline (`set_timeout`) may fire first: the same timeout, below.
            Ok(Err(status)) if !ran_out_of_time(&status) => {
                // Only statuses the other replica sends as answers leave the connection
                // trusted; a transport failure (reset, refused, a broken stream, a missed
                // deadline) makes a later call dial afresh, or a connection broken by a
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
                if answered {
                    self.answered(addr);
                } else {
                    self.failed(addr);
                }
                tracing::debug!(?rpc, to, addr, code = ?status.code(), message = status.message(), "call failed");
                Err(status.into())
            }
            _ => {
                // The connection may be wedged (a partition that drops packets silently);
                // a later call dials afresh.
                self.failed(addr);
                tracing::debug!(?rpc, to, addr, ?timeout, bytes, "call timed out");
                Err(CallError::Timeout(timeout))
            }
        }
    }

    fn failed(&self, addr: &str) {
        if let Some(l) = self.links().get_mut(addr) {
            l.failed();
        }
    }

    fn answered(&self, addr: &str) {
        if let Some(l) = self.links().get_mut(addr) {
            l.failures = 0;
        }
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
        change: &Forwarded,
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

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A peer that takes connections and never answers: every call runs out of time.
    pub(crate) async fn silent_peer() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        addr
    }

    /// openraft retries a call that timed out at once, and each timeout made the next call
    /// dial afresh: 20 dials a second to a peer behind a partition at a 50 ms heartbeat (and,
    /// in the simulator, ephemeral ports that wrapped onto connections still held). A
    /// connection that keeps failing is now dialed again only after it has lived a while,
    /// twice as long with each failure in a row, at most a second; the first failure after a
    /// healthy spell still dials afresh at once.
    #[tokio::test]
    async fn a_peer_that_keeps_timing_out_is_dialed_again_at_most_once_a_second() {
        let addr = silent_peer().await;
        let dials = Arc::new(AtomicU32::new(0));
        let counted = dials.clone();
        let tcp = Dialer::tcp(Duration::from_secs(1));
        let dialer = Dialer::custom(move |a| {
            counted.fetch_add(1, Ordering::SeqCst);
            tcp.dial(a)
        });
        let peers = Peers::new("c".into(), 1, 1 << 20, dialer, crate::replica::WallClock::system());
        let started = tokio::time::Instant::now();
        let mut calls = 0;
        while started.elapsed() < Duration::from_millis(2_500) {
            let r = peers.call(Rpc::Vote, 2, &addr, Vec::new(), Duration::from_millis(50)).await;
            assert!(matches!(r, Err(CallError::Timeout(_))), "a silent peer: {r:?}");
            calls += 1;
        }
        let dials = dials.load(Ordering::SeqCst);
        assert!(calls >= 40, "only {calls} calls ran in 2.5 s");
        // The first dial, then one after 1.5 s of failures (100 + 200 + 400 + 800 ms of life
        // bounded by the 1 s cap): 2 or 3 where every call used to dial.
        assert!((2..=3).contains(&dials), "{dials} dials for {calls} calls that timed out");
    }
}
