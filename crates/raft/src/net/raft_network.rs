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
use crate::types::{Node, NodeId, TypeConfig};

/// Room left in a message for the envelope around an encoded openraft request.
const ENVELOPE_BYTES: usize = 4 << 10;

/// Makes one [`PeerLink`] per peer for openraft.
#[derive(Clone)]
pub struct NetworkFactory {
    pub(crate) peers: Arc<Peers>,
}

/// The link from this replica to one peer.
pub struct PeerLink {
    peers: Arc<Peers>,
    target: NodeId,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerLink;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerLink {
        PeerLink { peers: self.peers.clone(), target, addr: crate::addrs::Addrs::parse(&node.addr).peer }
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
        let payload = match self.encode(Rpc::AppendEntries, &rpc) {
            // Too big for one message: openraft retries with fewer entries.
            Err(RPCError::Network(_)) if entries > 1 => return Err(fewer_entries(entries)),
            other => other?,
        };
        if entries <= 1 {
            return self.send(Rpc::AppendEntries, payload, option.hard_ttl()).await;
        }
        // openraft gives every AppendEntries one heartbeat interval, and after a timeout sends
        // the same range again: a catch-up batch that cannot cross the link and be written in
        // that time (a long or slow link, a connection dialled afresh after each timeout, a
        // slow disk) would be resent for ever, while heartbeats keep the followers from
        // electing anyone. Cut off a little before openraft does, and ask for half as many
        // entries instead; a single entry times out as usual.
        match self.send(Rpc::AppendEntries, payload, option.soft_ttl()).await {
            Err(RPCError::Timeout(_)) => Err(fewer_entries(entries)),
            other => other,
        }
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

    fn append(entries: u64) -> AppendEntriesRequest<TypeConfig> {
        let log_id = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
        AppendEntriesRequest {
            vote: openraft::Vote::new_committed(1, 1),
            prev_log_id: Some(log_id(0)),
            entries: (1..=entries).map(|i| Entry { log_id: log_id(i), payload: EntryPayload::Blank }).collect(),
            leader_commit: None,
        }
    }

    /// openraft resends the same range after a timeout, so a batch that cannot cross the link
    /// within a heartbeat interval stalled replication for ever (the simulator's seeds 0 and 5
    /// of 5 minutes, after a leader's restart). A batch now asks for half as many entries; a
    /// lone entry or a heartbeat still reports the timeout.
    #[tokio::test]
    async fn a_batch_that_runs_out_of_time_asks_for_half_as_many_entries() {
        let addr = silent_peer().await;
        let peers = Arc::new(Peers::new(
            "c".into(),
            1,
            1 << 20,
            Dialer::tcp(Duration::from_secs(1)),
            crate::replica::WallClock::system(),
        ));
        let mut link = NetworkFactory { peers }.new_client(2, &Node { addr }).await;
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
}
