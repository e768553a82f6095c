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

impl RaftNetwork<TypeConfig> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let entries = rpc.entries.len() as u64;
        let payload = match self.encode(Rpc::AppendEntries, &rpc) {
            // Too big for one message: openraft retries with fewer entries.
            Err(RPCError::Network(_)) if entries > 1 => {
                return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries / 2)));
            }
            other => other?,
        };
        self.send(Rpc::AppendEntries, payload, option.hard_ttl()).await
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
