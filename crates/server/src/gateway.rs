//! The agent gateway (`AgentGateway` in `proto/agent.proto`), served by the leader only.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use baton_model::command::{Command, Op};
use baton_model::error::ApplyError;
use baton_model::name::Name;
use baton_model::node::{NodeSpec, NodeStatus};
use baton_proto::convert::{self, node_from_agent};
use baton_proto::v1::agent_gateway_server::AgentGateway;
use baton_proto::v1::{AttachRequest, Directive, Exited, ReportReply, ReportRequest, Stopped, observation::What};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::Ctx;
use crate::clock::now_ms;
use crate::status;

pub struct Gateway {
    pub(crate) ctx: Arc<Ctx>,
}

type DirectiveStream = Pin<Box<dyn Stream<Item = Result<Directive, Status>> + Send>>;

#[tonic::async_trait]
impl AgentGateway for Gateway {
    type AttachStream = DirectiveStream;

    async fn attach(&self, req: Request<AttachRequest>) -> Result<Response<DirectiveStream>, Status> {
        let term = self.ctx.require_leader()?;
        let info = req.into_inner().node.ok_or_else(|| Status::invalid_argument("node: missing"))?;
        let spec = node_from_agent(&info).map_err(status::from_convert)?;
        self.register(&spec).await?;
        let node = spec.name.clone();
        self.ctx.liveness.touch(&node);
        tracing::info!(node = %node, term, "agent attached");
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(stream_directives(self.ctx.clone(), node, term, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report(&self, req: Request<ReportRequest>) -> Result<Response<ReportReply>, Status> {
        let term = self.ctx.require_leader()?;
        let req = req.into_inner();
        let node = convert::name(&req.node, "node").map_err(status::from_convert)?;
        self.ctx.liveness.touch(&node);
        let lost = self.ctx.replica.read_local(|s| s.nodes().get(&node).map(|n| n.status == NodeStatus::Lost));
        if lost == Some(true) {
            self.write(Op::SetNodeStatus { node: node.clone(), status: NodeStatus::Ready }).await?;
        }
        for o in req.observations {
            match o.what {
                Some(What::Exited(e)) => self.exited(e).await?,
                Some(What::Stopped(s)) => self.stopped(s).await?,
                Some(What::Checkpointed(c)) => {
                    self.write(Op::JobCheckpointed { job: c.job_id, attempt: c.attempt }).await?
                }
                Some(What::Unkillable(u)) => {
                    tracing::error!(node = %node, job_id = u.job_id, attempt = u.attempt, rank = u.rank, reason = u.reason, "a replica cannot be killed")
                }
                None => return Err(Status::invalid_argument("observations: an observation without a kind")),
            }
        }
        Ok(Response::new(ReportReply { term, leader_id: self.ctx.replica.id(), lease_ms: 0 }))
    }
}

impl Gateway {
    /// Registers the node unless the state already has it, ready, with the same facts.
    async fn register(&self, spec: &NodeSpec) -> Result<(), Status> {
        let known = self.ctx.replica.read_local(|s| {
            s.nodes().get(&spec.name).is_some_and(|n| n.spec == *spec && n.status == NodeStatus::Ready)
        });
        if known {
            return Ok(());
        }
        self.write(Op::RegisterNode(spec.clone())).await
    }

    /// The first rank's exit code is the job's; any other rank failing fails the job.
    async fn exited(&self, e: Exited) -> Result<(), Status> {
        if e.rank != 0 && e.exit_code == 0 {
            return Ok(());
        }
        self.write(Op::JobExited { job: e.job_id, attempt: e.attempt, exit_code: e.exit_code }).await
    }

    async fn stopped(&self, s: Stopped) -> Result<(), Status> {
        let world = self.ctx.replica.read_local(|st| st.job(s.job_id).map(|j| j.replicas.len() as u32));
        let Some(world) = world else { return Ok(()) };
        match self.ctx.stops.record(s.job_id, s.attempt, s.rank, world, s.checkpointed) {
            Some(checkpointed) => self.write(Op::JobStopped { job: s.job_id, attempt: s.attempt, checkpointed }).await,
            None => Ok(()),
        }
    }

    /// Commits `op`. A report the state has moved past (a stale attempt, a job no longer
    /// in that state) is acknowledged: telling the agent again would change nothing.
    async fn write(&self, op: Op) -> Result<(), Status> {
        let name = op.name();
        match self.ctx.replica.write(Command { now_ms: now_ms(), op }).await.map_err(status::from_write)? {
            Ok(_) => Ok(()),
            Err(e @ (ApplyError::StaleAttempt { .. } | ApplyError::WrongState { .. } | ApplyError::Unknown { .. })) => {
                tracing::debug!(op = name, error = %e, "agent report already overtaken");
                Ok(())
            }
            Err(e) => Err(status::from_apply(e)),
        }
    }
}

/// Sends the node's directive now, on every change, and every `resend_ms`; ends when the
/// agent goes or this replica stops leading in `term`.
async fn stream_directives(ctx: Arc<Ctx>, node: Name, term: u64, tx: mpsc::Sender<Result<Directive, Status>>) {
    let mut assignments = ctx.hub.subscribe(&node);
    let mut leading = ctx.hub.leading();
    let mut closing = ctx.closing.subscribe();
    let resend = Duration::from_millis(ctx.settings.resend_ms);
    loop {
        let directive = Directive {
            term,
            leader_id: ctx.replica.id(),
            assignments: ctx.hub.current(&node).as_ref().clone(),
            heartbeat_timeout_ms: ctx.settings.heartbeat_timeout_ms,
            lease_ms: 0,
        };
        if tx.send(Ok(directive)).await.is_err() {
            return;
        }
        tokio::select! {
            changed = assignments.changed() => if changed.is_err() { return },
            changed = leading.changed() => {
                if changed.is_err() || *leading.borrow() != Some(term) {
                    tracing::info!(node = %node, term, "no longer leading; closing the agent's stream");
                    return;
                }
            }
            () = tokio::time::sleep(resend) => {}
            _ = closing.wait_for(|c| *c) => return,
        }
    }
}
