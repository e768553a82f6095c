//! The gRPC server side: checks the envelope, decodes, and hands the request to openraft
//! (or to the replica, for forwarded writes and read-index requests).

use std::sync::Arc;

use baton_model::Command;
use baton_proto::v1::raft_transport_server::RaftTransport;
use baton_proto::v1::{IdentifyReply, IdentifyRequest, RaftReply, RaftRequest};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::campaign::PreVote;
use crate::codec::{decode, encode};
use crate::error::WriteError;
use crate::membership::{Change, Forwarded, MAX_AUTHORITY_BYTES};
use crate::replica::{Core, Replica};
use crate::transfer::{TransferNote, on_note};
use crate::types::{NodeId, TypeConfig};

/// The raft transport service of one replica.
pub struct RaftService {
    core: Arc<Core>,
}

impl RaftService {
    pub(crate) fn new(core: Arc<Core>) -> RaftService {
        RaftService { core }
    }

    /// Refuses a request from another cluster or meant for another replica, before anything
    /// in it is decoded.
    fn admit(&self, req: &RaftRequest) -> Result<(), Status> {
        if req.cluster_id != self.core.cluster_id {
            return Err(Status::failed_precondition(format!(
                "cluster id mismatch: replica {} belongs to cluster {:?}, the request from replica {} came from cluster {:?}",
                self.core.id, self.core.cluster_id, req.from_node_id, req.cluster_id
            )));
        }
        if req.to_node_id != self.core.id {
            return Err(Status::failed_precondition(format!(
                "this address serves replica {}, not replica {}",
                self.core.id, req.to_node_id
            )));
        }
        Ok(())
    }

    /// Refuses, before taking any of it, a snapshot that needs a newer data format than this
    /// replica reads: installed, its state would not decode (or, under `--max-format`, the
    /// rehearsal would not be one). Nothing is changed here; the leader retries later, and
    /// an upgraded replica takes it.
    fn readable(&self, from: NodeId, snapshot_id: &str) -> Result<(), Status> {
        let needs = crate::store::format_of(snapshot_id);
        if needs <= self.core.max_format {
            return Ok(());
        }
        let why = format!(
            "snapshot {snapshot_id} from replica {from} needs data format {needs}, but replica {} reads formats up to {}: refused, this replica keeps what it had; upgrade it to a build that reads format {needs}",
            self.core.id, self.core.max_format
        );
        tracing::warn!(from, needs, reads = self.core.max_format, "{why}");
        *self.core.snapshot_refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.clone());
        Err(Status::failed_precondition(why))
    }

    /// The request, once admitted and its sender checked against its certificate.
    fn admitted(&self, req: Request<RaftRequest>) -> Result<RaftRequest, Status> {
        let certified = certified_replica(&req);
        let req = req.into_inner();
        self.admit(&req)?;
        check_sender(certified.as_deref(), req.from_node_id)?;
        Ok(req)
    }

    fn take<T: DeserializeOwned>(&self, req: Request<RaftRequest>) -> Result<(NodeId, T), Status> {
        let req = self.admitted(req)?;
        let value = decode(&req.payload).map_err(|e| {
            Status::invalid_argument(format!("request from replica {} does not decode: {e}", req.from_node_id))
        })?;
        Ok((req.from_node_id, value))
    }
}

impl RaftService {
    /// A forwarded write goes through what the API's writes go through (the state machine's
    /// checks, in `apply`), minus what only the leader may decide: operations it alone
    /// issues are refused, and the time is this leader's, never the sender's, so a forged
    /// stamp cannot move the replicated clock.
    async fn admit_forwarded(&self, from: NodeId, mut cmd: Command) -> Result<baton_model::Response, WriteError> {
        if cmd.op.leader_only() {
            tracing::warn!(from, op = cmd.op.name(), "forwarded leader-only operation refused");
            return Err(WriteError::LeaderOnly { op: cmd.op.name().to_string() });
        }
        cmd.now_ms = self.core.clock.now_ms();
        let _waiting = self.core.forwarded_waiting.begin();
        self.core.write_here(cmd).await
    }
}

impl RaftService {
    /// `value` as the reply, with this replica's time (the caller learns the skew from it).
    fn reply<T: Serialize>(&self, value: &T) -> Result<GrpcResponse<RaftReply>, Status> {
        let payload = encode(value).map_err(|e| Status::internal(e.to_string()))?;
        Ok(GrpcResponse::new(RaftReply { payload, now_ms: self.core.clock.now_ms() }))
    }
}

/// The replica id the caller's certificate names, under TLS (the peer port's guard put it in
/// the request); `None` over plain TCP, where the operator chose to trust the network.
fn certified_replica<T>(req: &Request<T>) -> Option<String> {
    req.extensions().get::<baton_proto::tls::PeerId>().map(|p| p.name.clone())
}

/// Refuses a request whose `from_node_id` is not the replica its certificate names: one
/// replica's certificate must not speak as another (a forwarded write, a membership change
/// or a vote in another replica's name).
fn check_sender(certified: Option<&str>, from: NodeId) -> Result<(), Status> {
    match certified {
        Some(name) if name != from.to_string() => Err(Status::permission_denied(format!(
            "the request says it comes from replica {from}, but the caller's certificate is replica {name}'s"
        ))),
        _ => Ok(()),
    }
}

#[tonic::async_trait]
impl RaftTransport for RaftService {
    async fn append_entries(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (_, rpc): (_, AppendEntriesRequest<TypeConfig>) = self.take(req)?;
        let answer = self.core.raft.append_entries(rpc).await;
        if let Ok(r) = &answer
            && !matches!(r, AppendEntriesResponse::HigherVote(_))
        {
            // A leader this replica follows is alive.
            self.core.campaign.leader_heard();
        }
        self.reply(&answer)
    }

    async fn install_snapshot(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (from, rpc): (_, InstallSnapshotRequest<TypeConfig>) = self.take(req)?;
        let end = rpc.offset.saturating_add(rpc.data.len() as u64);
        let limit = self.core.settings.max_snapshot_bytes;
        if end > limit {
            return Err(Status::resource_exhausted(format!(
                "snapshot {} from replica {from} reaches {end} bytes, over max_snapshot_bytes {limit}",
                rpc.meta.snapshot_id
            )));
        }
        self.readable(from, &rpc.meta.snapshot_id)?;
        self.reply(&self.core.raft.install_snapshot(rpc).await)
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (_, rpc): (_, VoteRequest<NodeId>) = self.take(req)?;
        self.reply(&self.core.raft.vote(rpc).await)
    }

    async fn forward_write(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (from, cmd): (_, Command) = self.take(req)?;
        self.reply(&self.admit_forwarded(from, cmd).await)
    }

    async fn forward_writes(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (from, cmds): (_, Vec<Command>) = self.take(req)?;
        let limit = self.core.settings.max_batch_commands;
        if cmds.len() > limit {
            return Err(Status::invalid_argument(format!(
                "{} forwarded writes from replica {from}, over max_batch_commands {limit}",
                cmds.len()
            )));
        }
        // All at once, so that they reach the batcher together and share a batch.
        let answers = futures::future::join_all(cmds.into_iter().map(|c| self.admit_forwarded(from, c))).await;
        self.reply(&answers)
    }

    async fn read_index(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        self.admitted(req)?;
        self.reply(&self.core.read_index_here().await)
    }

    async fn pre_vote(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (from, ask): (_, PreVote) = self.take(req)?;
        let granted = self.core.campaign.grants(&self.core.raft, &ask);
        tracing::debug!(from, granted, ?ask, "pre-vote");
        self.reply(&granted)
    }

    async fn identify(&self, _req: Request<IdentifyRequest>) -> Result<GrpcResponse<IdentifyReply>, Status> {
        Ok(GrpcResponse::new(IdentifyReply {
            cluster_id: self.core.cluster_id.clone(),
            node_id: self.core.id,
            rack: self.core.rack.clone().unwrap_or_default(),
            max_format: self.core.max_format,
            version: crate::replica::BUILD_VERSION.to_string(),
        }))
    }

    async fn membership(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let req = self.admitted(req)?;
        let from = req.from_node_id;
        // A replica of an older build forwards the bare change, naming no one.
        let forwarded = decode::<Forwarded>(&req.payload)
            .or_else(|_| decode::<Change>(&req.payload).map(|change| Forwarded { change, authority: None }))
            .map_err(|e| Status::invalid_argument(format!("request from replica {from} does not decode: {e}")))?;
        if forwarded.authority.as_ref().is_some_and(|a| a.len() > MAX_AUTHORITY_BYTES) {
            return Err(Status::invalid_argument(format!(
                "request from replica {from}: its authority is over {MAX_AUTHORITY_BYTES} bytes"
            )));
        }
        tracing::info!(from, change = ?forwarded.change, "forwarded membership change");
        let replica = Replica::from_core(self.core.clone());
        self.reply(&replica.change_forwarded(forwarded).await)
    }

    async fn transfer_note(&self, req: Request<RaftRequest>) -> Result<GrpcResponse<RaftReply>, Status> {
        let (from, note): (_, TransferNote) = self.take(req)?;
        tracing::info!(from, to = note.to, window_ms = note.window_ms, "leadership is being handed over");
        on_note(self.core.clone(), note);
        self.reply(&())
    }
}
