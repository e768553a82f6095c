//! Calls to other replicas: the envelope every request carries, a bounded cache of
//! connections, and the non-raft calls (forwarded writes, read index, identify).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use baton_model::{Command, Response};
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_proto::v1::{IdentifyReply, IdentifyRequest, RaftRequest};
use tokio::time::Instant;
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
/// The shortest pause after a failure (before dialing afresh, or, past
/// `FAILURES_BEFORE_PAUSE`, before trying again); doubled with each failure in a row, up to
/// `MAX_PAUSE_MS`. Why: openraft retries a failed call at once (a heartbeat every 50 ms), and
/// a channel whose connection failed connects anew for each call, so a peer behind a
/// partition was dialed and connected to 20 times a second.
const MIN_PAUSE_MS: u64 = 100;
/// The longest pause: the most a healed link waits for its next try.
const MAX_PAUSE_MS: u64 = 1_000;
/// Failures in a row that are each retried at once (a slow call, a batch halved after a
/// timeout); past them a call within the pause fails at once without touching the network.
const FAILURES_BEFORE_PAUSE: u32 = 3;

fn pause(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    Duration::from_millis((MIN_PAUSE_MS << doublings).min(MAX_PAUSE_MS))
}

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

impl Rpc {
    /// Whether a call of this kind waits out a pause after failures (`FAILURES_BEFORE_PAUSE`):
    /// raft's own traffic, which openraft retries at every heartbeat. A client's forwarded
    /// write or read goes out whenever the client asks: its answer (or its loss) is the
    /// client's to see, and clients do not retry at heartbeat speed.
    fn pauses(self) -> bool {
        matches!(self, Rpc::AppendEntries | Rpc::InstallSnapshot | Rpc::Vote | Rpc::PreVote | Rpc::TransferNote)
    }
}

/// Who calls and which cluster it belongs to.
pub struct Peers {
    pub cluster_id: String,
    pub self_id: NodeId,
    pub max_message_bytes: usize,
    dialer: Dialer,
    links: Mutex<HashMap<String, Link>>,
}

/// A cached connection to one address.
struct Link {
    /// The dialer's epoch it was dialed in.
    epoch: u64,
    client: Client,
    dialed_at: Instant,
    /// When a call last went out over it.
    tried_at: Instant,
    /// Calls over this address that failed in a row (carried over to a fresh dial).
    failures: u32,
    /// The next call dials afresh.
    redial: bool,
}

impl Link {
    /// Counts a failure; the connection is dialed again once it has lived long enough.
    fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        if self.dialed_at.elapsed() >= pause(self.failures) {
            self.redial = true;
        }
    }

    /// How much longer a call must wait before it may go out, if it must.
    fn pausing(&self, now: Instant) -> Option<Duration> {
        if self.failures <= FAILURES_BEFORE_PAUSE {
            return None;
        }
        let ends = self.tried_at + pause(self.failures - FAILURES_BEFORE_PAUSE);
        (now < ends).then(|| ends - now)
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
    /// Not sent: the last calls failed, and the next may go out only after a pause.
    #[error("not sent: {failures} calls in a row failed; the next goes out in {wait:?}")]
    Pausing { failures: u32, wait: Duration },
}

impl Peers {
    pub fn new(cluster_id: String, self_id: NodeId, max_message_bytes: usize, dialer: Dialer) -> Peers {
        Peers { cluster_id, self_id, max_message_bytes, dialer, links: Mutex::new(HashMap::new()) }
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
        tracing::debug!(addr, failures, "dialing a peer");
        let channel = self.dialer.dial(addr).map_err(CallError::Dial)?;
        let client = RaftTransportClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        let now = Instant::now();
        let link = Link { epoch, client: client.clone(), dialed_at: now, tried_at: now, failures, redial: false };
        links.insert(addr.to_string(), link);
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
        if rpc.pauses() {
            self.may_try(addr)?;
        }
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
            Ok(Ok(reply)) => {
                self.answered(addr);
                Ok(reply.into_inner().payload)
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

    /// Refuses a call to a peer whose last calls failed, within the pause; else notes the try.
    fn may_try(&self, addr: &str) -> Result<(), CallError> {
        let now = Instant::now();
        let mut links = self.links();
        let Some(l) = links.get_mut(addr) else { return Ok(()) };
        if let Some(wait) = l.pausing(now) {
            return Err(CallError::Pausing { failures: l.failures, wait });
        }
        l.tried_at = now;
        Ok(())
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

    /// Peers whose dials (channels made) are counted.
    fn counting_peers() -> (Peers, Arc<AtomicU32>) {
        let dials = Arc::new(AtomicU32::new(0));
        let counted = dials.clone();
        let tcp = Dialer::tcp(Duration::from_secs(1));
        let dialer = Dialer::custom(move |a| {
            counted.fetch_add(1, Ordering::SeqCst);
            tcp.dial(a)
        });
        (Peers::new("c".into(), 1, 1 << 20, dialer), dials)
    }

    /// Calls `addr` as openraft's heartbeats do, every 50 ms for `ms`; how many went out
    /// (were not refused for a pause) and how many were refused.
    async fn heartbeats(peers: &Peers, addr: &str, ms: u64) -> (u32, u32) {
        let (mut sent, mut paused) = (0, 0);
        let started = tokio::time::Instant::now();
        while started.elapsed() < Duration::from_millis(ms) {
            match peers.call(Rpc::Vote, 2, addr, Vec::new(), Duration::from_millis(50)).await {
                Err(CallError::Pausing { .. }) => {
                    paused += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => sent += 1,
                Ok(r) => panic!("a peer that never answers answered {r:?}"),
            }
        }
        (sent, paused)
    }

    /// openraft retries a call that timed out at once, and each timeout made the next call
    /// dial afresh: 20 dials a second to a peer behind a partition at a 50 ms heartbeat (and,
    /// in the simulator, ephemeral ports that wrapped onto connections still held). After
    /// three failures in a row a call goes out only after a pause (100 ms, doubled with each
    /// failure, at most 1 s) and is refused at once within it; a connection is dialed again
    /// only once it has lived as long.
    #[tokio::test]
    async fn a_peer_that_keeps_timing_out_is_tried_and_dialed_at_most_about_once_a_second() {
        let addr = silent_peer().await;
        let (peers, dials) = counting_peers();
        let (sent, paused) = heartbeats(&peers, &addr, 2_500).await;
        let dials = dials.load(Ordering::SeqCst);
        // 3 at once, then after pauses of 100, 200, 400, 800 and 1,000 ms: 7 or 8 in 2.5 s.
        assert!((5..=9).contains(&sent), "{sent} calls went out in 2.5 s ({paused} refused for a pause)");
        assert!(paused >= 15, "only {paused} calls were refused for a pause");
        // Dialed afresh once a failure finds the connection a pause old (about 1 s here).
        assert!((1..=3).contains(&dials), "{dials} dials for {sent} calls that timed out");
    }

    /// A peer whose port resets every connection (a replica restarting, a middlebox): a
    /// channel kept across failures connects anew for each call, so the pause is what
    /// bounds the connections, not the redial.
    #[tokio::test]
    async fn a_peer_that_resets_every_connection_is_connected_to_at_most_about_once_a_second() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicU32::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        let (peers, _) = counting_peers();
        let (sent, paused) = heartbeats(&peers, &addr, 2_500).await;
        let accepted = accepted.load(Ordering::SeqCst);
        assert!(paused >= 15, "only {paused} calls were refused for a pause ({sent} went out)");
        assert!(accepted <= 12, "{accepted} connections for {sent} calls in 2.5 s");
    }
}
