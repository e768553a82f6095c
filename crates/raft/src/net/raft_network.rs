//! openraft's network traits over the gRPC transport.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::peers::{CallError, Peers, Rpc};
use crate::codec::{decode, encode};
use crate::stats::SharedStats;
use crate::types::{Node, NodeId, TypeConfig};

/// Room left in a message for the envelope around an encoded openraft request.
const ENVELOPE_BYTES: usize = 4 << 10;

/// Makes one [`PeerLink`] per peer for openraft.
#[derive(Clone)]
pub struct NetworkFactory {
    pub(crate) peers: Arc<Peers>,
    pub(crate) stats: SharedStats,
}

/// The link from this replica to one peer, for one term of its leadership (openraft makes
/// a link per peer each time this replica becomes leader).
pub struct PeerLink {
    peers: Arc<Peers>,
    stats: SharedStats,
    target: NodeId,
    addr: String,
    /// Whether a batch goes first as a probe (`probe`): until one finds the peer lacking,
    /// or gets no answer.
    probing: bool,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerLink;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerLink {
        let addr = crate::addrs::Addrs::parse(&node.addr).peer;
        PeerLink { peers: self.peers.clone(), stats: self.stats.clone(), target, addr, probing: true }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failure(String);

fn rpc_type(rpc: Rpc) -> RPCTypes {
    match rpc {
        Rpc::AppendEntries => RPCTypes::AppendEntries,
        Rpc::InstallSnapshot => RPCTypes::InstallSnapshot,
        _ => RPCTypes::Vote,
    }
}

impl PeerLink {
    /// Encodes a request, refusing one that would not fit in a message.
    fn encode<Req: Serialize, E: std::error::Error>(
        &self,
        rpc: Rpc,
        req: &Req,
    ) -> Result<Vec<u8>, RPCError<NodeId, Node, E>> {
        let payload = encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if payload.len() + ENVELOPE_BYTES > self.peers.max_message_bytes {
            return Err(RPCError::Network(NetworkError::new(&Failure(format!(
                "{rpc:?} to replica {} is {} bytes, over max_message_bytes {}",
                self.target,
                payload.len(),
                self.peers.max_message_bytes
            )))));
        }
        Ok(payload)
    }

    async fn send<Resp, E>(&self, rpc: Rpc, payload: Vec<u8>, ttl: Duration) -> Result<Resp, RPCError<NodeId, Node, E>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let reply = match self.peers.call(rpc, self.target, &self.addr, payload, ttl).await {
            Ok(r) => r,
            Err(CallError::Timeout(d)) => {
                return Err(RPCError::Timeout(Timeout {
                    action: rpc_type(rpc),
                    id: self.peers.self_id,
                    target: self.target,
                    timeout: d,
                }));
            }
            // A replica of another cluster, or another replica now at this address, or no
            // connection at all: retrying at full speed cannot help, so openraft backs off.
            Err(CallError::Status(s))
                if matches!(s.code(), tonic::Code::FailedPrecondition | tonic::Code::Unavailable) =>
            {
                if matches!(rpc, Rpc::InstallSnapshot) {
                    // A snapshot refused (one newer than the replica reads) holds that
                    // replica back until it is upgraded: an operator must see it.
                    tracing::warn!(target_node = self.target, addr = %self.addr, message = s.message(), "snapshot refused");
                }
                tracing::debug!(
                    target_node = self.target,
                    addr = %self.addr,
                    message = s.message(),
                    "peer refused the request"
                );
                return Err(RPCError::Unreachable(Unreachable::new(&s)));
            }
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        let result: Result<Resp, E> = decode(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// Asks the peer whether it already holds the last entry of `rpc` written before this
    /// term, sending no entries: when it does, the answer for the batch up to that entry (or
    /// the newer vote the peer has seen); `None` when it does not, or when every entry is of
    /// this term (this leader's own, which no peer holds before it sends them).
    ///
    /// openraft 0.9 starts a new leader's replication to each peer from the middle of its
    /// log, not knowing what the peer holds, and walks to the end a batch at a time: after a
    /// failover the followers hold nearly all of it already, and got half the log again
    /// (batches of plans, at 10,000 nodes, that can take longer than a heartbeat interval to
    /// cross and are then retried halved). Log matching makes the shortcut safe: a peer that
    /// holds an entry holds every entry before it, and a follower commits only up to the
    /// entry it was asked about.
    async fn probe(
        &mut self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        ttl: Duration,
    ) -> Result<Option<AppendEntriesResponse<NodeId>>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let term = rpc.vote.leader_id().get_term();
        let Some(held) = rpc.entries.iter().rev().map(|e| e.log_id).find(|id| id.leader_id.get_term() < term) else {
            return Ok(None);
        };
        let probe = AppendEntriesRequest::<TypeConfig> {
            vote: rpc.vote,
            prev_log_id: Some(held),
            entries: Vec::new(),
            leader_commit: rpc.leader_commit,
        };
        let payload = self.encode(Rpc::AppendEntries, &probe)?;
        self.stats.probed();
        let whole = rpc.entries.last().map(|e| e.log_id) == Some(held);
        match self.send(Rpc::AppendEntries, payload, ttl).await? {
            AppendEntriesResponse::Conflict => {
                // The peer lags behind the old leader: it needs what openraft sends.
                self.probing = false;
                Ok(None)
            }
            AppendEntriesResponse::Success if !whole => Ok(Some(AppendEntriesResponse::PartialSuccess(Some(held)))),
            answer => Ok(Some(answer)),
        }
    }
}

/// openraft's answer to "fewer entries, please": it retries at once with half of `entries`
/// for the next few messages to this peer.
fn fewer_entries<E: std::error::Error>(entries: u64) -> RPCError<NodeId, Node, E> {
    RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries / 2))
}

impl RaftNetwork<TypeConfig> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let entries = rpc.entries.len() as u64;
        // Until a probe fails, a batch that holds entries of earlier terms goes first as a
        // probe; one of this term's entries alone goes whole, and so does a batch from the
        // log's start: that peer holds nothing yet (a new cluster, a new member), and a probe
        // would only delay the membership it needs to forward writes to this leader (a
        // follower that learns its leader from the probe and its address a round trip later
        // refused writes meanwhile: `tests/suite/cluster.rs`'s concurrent writes at start).
        if self.probing && entries > 0 && rpc.prev_log_id.is_some() {
            match self.probe(&rpc, option.soft_ttl()).await {
                Ok(Some(answer)) => return Ok(answer),
                Ok(None) => {}
                Err(e) => {
                    self.probing = false;
                    return Err(e);
                }
            }
        }
        let payload = match self.encode(Rpc::AppendEntries, &rpc) {
            // Too big for one message: openraft retries with fewer entries.
            Err(RPCError::Network(_)) if entries > 1 => return Err(fewer_entries(entries)),
            other => other?,
        };
        let sent = if entries <= 1 {
            self.send(Rpc::AppendEntries, payload, option.hard_ttl()).await
        } else {
            // openraft gives every AppendEntries one heartbeat interval, and after a timeout
            // sends the same range again: a catch-up batch that cannot cross the link and be
            // written in that time (a long or slow link, a connection dialled afresh after
            // each timeout, a slow disk) would be resent for ever, while heartbeats keep the
            // followers from electing anyone. Cut off a little before openraft does, and ask
            // for half as many entries instead; a single entry times out as usual.
            match self.send(Rpc::AppendEntries, payload, option.soft_ttl()).await {
                Err(RPCError::Timeout(_)) => Err(fewer_entries(entries)),
                other => other,
            }
        };
        if sent.is_ok() {
            self.stats.entries_delivered(entries);
        }
        sent
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>> {
        let payload = self.encode(Rpc::InstallSnapshot, &rpc)?;
        self.send(Rpc::InstallSnapshot, payload, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let payload = self.encode(Rpc::Vote, &rpc)?;
        self.send(Rpc::Vote, payload, option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    use super::*;
    use crate::net::dialer::Dialer;
    use crate::net::peers::tests::silent_peer;

    /// `entries` entries of term 1 sent by the leader of `term`.
    fn append_in(term: u64, entries: u64) -> AppendEntriesRequest<TypeConfig> {
        let log_id = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
        AppendEntriesRequest {
            vote: openraft::Vote::new_committed(term, 1),
            prev_log_id: Some(log_id(0)),
            entries: (1..=entries).map(|i| Entry { log_id: log_id(i), payload: EntryPayload::Blank }).collect(),
            leader_commit: None,
        }
    }

    /// Entries a leader sends in its own term: it does not probe.
    fn append(entries: u64) -> AppendEntriesRequest<TypeConfig> {
        append_in(1, entries)
    }

    async fn link_to_silent_peer() -> PeerLink {
        let addr = silent_peer().await;
        let peers = Arc::new(Peers::new(
            "c".into(),
            1,
            1 << 20,
            Dialer::tcp(Duration::from_secs(1)),
            crate::replica::WallClock::system(),
        ));
        NetworkFactory { peers, stats: Arc::default() }.new_client(2, &Node { addr }).await
    }

    /// openraft resends the same range after a timeout, so a batch that cannot cross the link
    /// within a heartbeat interval stalled replication for ever (the simulator's seeds 0 and 5
    /// of 5 minutes, after a leader's restart). A batch now asks for half as many entries; a
    /// lone entry or a heartbeat still reports the timeout.
    #[tokio::test]
    async fn a_batch_that_runs_out_of_time_asks_for_half_as_many_entries() {
        let mut link = link_to_silent_peer().await;
        let option = RPCOption::new(Duration::from_millis(200));
        match link.append_entries(append(9), option.clone()).await {
            Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 4),
            other => panic!("a batch of 9 that ran out of time: {other:?}"),
        }
        for entries in [1, 0] {
            match link.append_entries(append(entries), option.clone()).await {
                Err(RPCError::Timeout(_)) => {}
                other => panic!("{entries} entries that ran out of time: {other:?}"),
            }
        }
    }

    /// A new leader's batch of an earlier term's entries goes first as a probe. One that gets
    /// no answer in time ends probing on the link for its term: were it retried, a link
    /// slower than the timeout would never carry the batch itself.
    #[tokio::test]
    async fn a_probe_that_runs_out_of_time_is_not_sent_again() {
        let mut link = link_to_silent_peer().await;
        let option = RPCOption::new(Duration::from_millis(200));
        match link.append_entries(append_in(2, 9), option.clone()).await {
            Err(RPCError::Timeout(_)) => {}
            other => panic!("a probe that ran out of time: {other:?}"),
        }
        match link.append_entries(append_in(2, 9), option.clone()).await {
            Err(RPCError::PayloadTooLarge(p)) => assert_eq!(p.entries_hint(), 4),
            other => panic!("the batch after the probe: {other:?}"),
        }
        let counts = link.stats.counts();
        assert_eq!((counts.append_probes, counts.entries_delivered), (1, 0));
    }
}
