//! The agent gateway (`AgentGateway` in `proto/agent.proto`), served by the leader only.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use baton_model::command::{Command, Observed, Op, Outcome};
use baton_model::error::ApplyError;
use baton_model::event::clip_message;
use baton_model::limits::{MAX_OBSERVATIONS_PER_REPORT, MAX_REPORT_OBSERVATIONS, MAX_REPORT_RUNNING};
use baton_model::name::Name;
use baton_model::node::{NodeSpec, NodeStatus};
use baton_model::topology::LevelName;
use baton_proto::convert::{self, node_from_agent};
use baton_proto::tls::{CertGuard, PeerId};
use baton_proto::v1::agent_gateway_server::AgentGateway;
use baton_proto::v1::{
    AttachRequest, Directive, Observation, ReportReply, ReportRequest, StopCause, observation::What,
};
use futures::Stream;
use tokio::sync::{mpsc, watch};
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
        let term = crate::attach_hold::leader_for_attach(&self.ctx).await?;
        let who = req.extensions().get::<PeerId>().cloned();
        let cert = CertGuard::of(&self.ctx.transport, &req);
        // What the certificate fixes of the node's shape: read here, the one call that needs it.
        let shape = if who.is_some() { baton_proto::tls::caller_shape(&req)? } else { None };
        let req = req.into_inner();
        not_deposed(req.term_seen, term)?;
        let info = req.node.ok_or_else(|| Status::invalid_argument("node: missing"))?;
        let spec = node_from_agent(&info).map_err(status::from_convert)?;
        crate::tls::check_node(who.as_ref(), &spec.name)?;
        if who.is_some() {
            // Under mutual TLS a node's shape is the operator's word, not its agent's.
            let registered = self.ctx.replica.read_local(|s| s.nodes().get(&spec.name).map(|n| n.spec.clone()));
            crate::tls::check_shape(shape.as_ref(), &spec, registered.as_ref()).inspect_err(|e| {
                tracing::warn!(node = %spec.name, "refused an attach: {}", e.message());
            })?;
        }
        // An agent needs one stream (two while it reconnects); each carries its jobs'
        // environments, so one node's certificate must not open them without end.
        let assignments = self.ctx.hub.subscribe_bounded(&spec.name, MAX_ATTACH_STREAMS_PER_NODE).ok_or_else(|| {
            Status::resource_exhausted(format!(
                "node {} has {MAX_ATTACH_STREAMS_PER_NODE} directive streams open on this replica \
                 (MAX_ATTACH_STREAMS_PER_NODE); an agent needs one",
                spec.name
            ))
        })?;
        self.register(&spec).await?;
        let domains = convert::node_domains_from_agent(&info).map_err(status::from_convert)?;
        self.set_domains(&spec.name, domains).await;
        let node = spec.name.clone();
        self.ctx.liveness.touch(&node);
        tracing::info!(node = %node, term, "agent attached");
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(stream_directives(self.ctx.clone(), node, term, cert, assignments, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report(&self, req: Request<ReportRequest>) -> Result<Response<ReportReply>, Status> {
        // On the quorum's clock: the lease needs a proof begun after this moment.
        let arrived_ms = self.ctx.quorum.now_ms();
        let term = self.ctx.require_leader()?;
        let who = req.extensions().get::<PeerId>().cloned();
        let req = req.into_inner();
        not_deposed(req.term_seen, term)?;
        check_report_size(&req)?;
        let node = convert::name(&req.node, "node").map_err(status::from_convert)?;
        crate::tls::check_node(who.as_ref(), &node)?;
        let status = self.ctx.replica.read_local(|s| s.nodes().get(&node).map(|n| n.status));
        let Some(status) = status else {
            // Only registered nodes are tracked, so the heartbeat map stays bounded by them.
            return Err(Status::not_found(format!("node {:?} is not registered; attach first", node.as_str())));
        };
        self.ctx.liveness.touch(&node);
        let (strays, vanished) = match self.ctx.hub.current(&node, term) {
            Some(published) => {
                let (settle_ms, bound_ms) = (self.ctx.settings.resend_ms, self.ctx.settings.heartbeat_timeout_ms);
                let (list, running) = (&published.assignments, &req.running);
                let strays = self.ctx.strays.check(&node, list, running, settle_ms, arrived_ms);
                (strays, self.ctx.vanished.check(&node, list, running, bound_ms, arrived_ms))
            }
            None => (Vec::new(), Vec::new()),
        };
        let awaiting = req.awaiting_state_index;
        let found = strays.iter().chain(&vanished).cloned().collect();
        self.observe(&node, req.observations, found).await?;
        self.ctx.strays.committed(&node, &strays);
        self.ctx.vanished.committed(&node, &vanished);
        // Only once what the node reports is committed: a lease stop's checkpoint, reported
        // after the node was declared lost, is known before anything is placed there again.
        if status == NodeStatus::Lost {
            self.write(Op::SetNodeStatus { node: node.clone(), status: NodeStatus::Ready }).await?;
        }
        let lease_ms = self.lease(&node, arrived_ms).await;
        // Read after the proof and after this node's return was committed: a directive
        // built from a state this new knows whatever happened to the node meanwhile.
        let state_index = self.ctx.replica.read_local(|s| s.applied());
        if awaiting > 0 {
            // Its lease was renewed after it ran out, and it waits for a directive built
            // from a state as new as the renewing reply's: the newest published goes again
            // (if still older, the agent asks again with its next report).
            self.ctx.hub.nudge(&node);
        }
        Ok(Response::new(ReportReply { term, leader_id: self.ctx.replica.id(), lease_ms, state_index }))
    }
}

/// Refuses a report listing more than the bounds allow, before anything in it is acted on.
fn check_report_size(req: &ReportRequest) -> Result<(), Status> {
    for (field, n, max) in [
        ("observations", req.observations.len(), MAX_REPORT_OBSERVATIONS),
        ("running", req.running.len(), MAX_REPORT_RUNNING),
    ] {
        if n > max {
            return Err(Status::invalid_argument(format!(
                "{field}: {n} entries; one report lists at most {max} (send the rest in the next report)"
            )));
        }
    }
    Ok(())
}

impl Gateway {
    /// The lease a report's answer grants: only after this replica has confirmed with a
    /// quorum that it still leads (a linearizable read begun after the report arrived,
    /// `arrived_ms`, shared with the reports that arrived with it, bounded by the lease
    /// itself), so a deposed or cut-off leader renews nothing; and none to a node the leader is declaring
    /// lost (`liveness`: the commit would requeue what the lease lets it run), nor to one
    /// committed lost while this report was handled (its next report makes it ready).
    async fn lease(&self, node: &Name, arrived_ms: u64) -> u64 {
        let lease_ms = self.ctx.settings.lease_ms;
        let within = Duration::from_millis(lease_ms);
        let confirmed = self.ctx.quorum.confirm_since(&self.ctx.replica, arrived_ms, within).await;
        if confirmed && !self.ctx.liveness.fenced(node) && self.ctx.node_ready(node) { lease_ms } else { 0 }
    }

    /// Registers the node unless the state already has it with the same facts; with the
    /// other nodes attaching at the same time (`registrar`). A lost node that comes back
    /// unchanged stays lost until its first report is committed (`report`): registering it
    /// would make it ready at once, and work could be placed before what it reports of its
    /// lease stops (their checkpoints) is known. One that comes back changed is registered
    /// anew, ready.
    async fn register(&self, spec: &NodeSpec) -> Result<(), Status> {
        let known = self.ctx.replica.read_local(|s| s.nodes().get(&spec.name).is_some_and(|n| n.spec == *spec));
        if known {
            return Ok(());
        }
        self.ctx.registrar.register(spec.clone()).await
    }

    /// Records the node's topology domains (decisions.md section 10) when they changed. An
    /// attach does not wait on them: while an older member cannot read them (the format
    /// gate) or the write fails, the node runs with the domains it had, and says so in the log.
    async fn set_domains(&self, node: &Name, domains: BTreeMap<LevelName, Name>) {
        let same = self
            .ctx
            .replica
            .read_local(|s| s.topology().domains.get(node).map_or(domains.is_empty(), |d| *d == domains));
        if same {
            return;
        }
        let op = Op::SetNodeDomains(vec![(node.clone(), domains)]);
        match self.ctx.replica.write(Command { now_ms: now_ms(), op }).await {
            Ok(Ok(_)) => tracing::info!(node = %node, "topology domains recorded"),
            Ok(Err(e)) => tracing::warn!(node = %node, "topology domains refused: {e}"),
            Err(e) => tracing::warn!(node = %node, "topology domains not recorded: {e}"),
        }
    }

    /// The number of ranks of the job's current attempt if it is `attempt` and `rank` of it
    /// runs on `node`; `None` for anything else (the model says why when it is committed).
    fn world_if_placed(&self, node: &Name, job_id: u64, attempt: u32, rank: u32) -> Option<u32> {
        self.ctx.replica.read_local(|s| {
            let job = s.job(job_id).filter(|j| j.attempt == attempt)?;
            let placed = job.replica_at(rank).is_some_and(|r| r.node == *node);
            placed.then_some(job.replicas.len() as u32)
        })
    }

    /// Tallies `rank`'s checkpoint; true when the job has one now: every rank of the attempt
    /// has saved its work, or the observation does not fit the placement (committed as it
    /// is, for the model to refuse with its reason).
    fn rank_saved(&self, node: &Name, job_id: u64, attempt: u32, rank: u32) -> bool {
        match self.world_if_placed(node, job_id, attempt, rank) {
            Some(world) => self.ctx.checkpoints.saved(job_id, attempt, rank, world),
            None => true,
        }
    }

    /// Whether a lease stop of `rank` that saved its work leaves the whole job resumable:
    /// every other rank has saved its work too (the others are stopped without a word when
    /// the job goes back to the queue).
    fn all_saved(&self, node: &Name, job_id: u64, attempt: u32, rank: u32) -> bool {
        match self.world_if_placed(node, job_id, attempt, rank) {
            Some(world) => world <= 1 || self.ctx.checkpoints.others_saved(job_id, attempt, rank, world),
            None => true,
        }
    }

    /// Commits a report's observations, and the strays found in its running list, as one
    /// command per `MAX_OBSERVATIONS_PER_REPORT` (the model checks each against the
    /// placement and applies the gang rules).
    async fn observe(&self, node: &Name, observations: Vec<Observation>, strays: Vec<Observed>) -> Result<(), Status> {
        let mut observed = Vec::with_capacity(observations.len() + strays.len());
        let observations = self.gpu_findings(node, observations).await?;
        let behaviour = self.ctx.replica.read_local(|s| s.behaviour());
        // Behaviour 3: the state tallies the ranks' checkpoints and judges lease stops by it;
        // before, this leader's memory did (`checkpoints`), and lost it on failover.
        let tallies = behaviour >= baton_model::behaviour::RANK_SAVES;
        // The ranks whose lease stop saved their work count before any of them is judged:
        // the ranks of a gang on one node come in one report (the state does it, tallying).
        let noted = if tallies { &[][..] } else { &observations[..] };
        for o in noted {
            if let Some(What::Stopped(s)) = &o.what
                && s.cause() == StopCause::LeaseExpired
                && s.checkpointed
            {
                if let Some(world) = self.world_if_placed(node, s.job_id, s.attempt, s.rank) {
                    self.ctx.checkpoints.note(s.job_id, s.attempt, s.rank, world);
                }
            }
        }
        for o in observations {
            match o.what {
                Some(What::Exited(e)) if !e.reason.is_empty() => observed.push(Observed::NotStarted {
                    job: e.job_id,
                    attempt: e.attempt,
                    rank: e.rank,
                    exit_code: e.exit_code,
                    // Cut short, as an Unkillable reason is (below).
                    reason: clip_message(e.reason),
                }),
                Some(What::Exited(e)) => observed.push(Observed::Exited {
                    job: e.job_id,
                    attempt: e.attempt,
                    rank: e.rank,
                    exit_code: e.exit_code,
                }),
                // A lease stop is the node's loss seen from the node: the model requeues a
                // running job; a directed stop completes a preemption or pause.
                Some(What::Stopped(s)) if s.cause() == StopCause::LeaseExpired => {
                    tracing::warn!(node = %node, job_id = s.job_id, attempt = s.attempt, rank = s.rank, "the agent's lease ran out; it stopped this replica");
                    // With the state's tally, the model judges the whole gang.
                    let all_saved = !tallies && s.checkpointed && self.all_saved(node, s.job_id, s.attempt, s.rank);
                    observed.push(Observed::LeaseStopped {
                        job: s.job_id,
                        attempt: s.attempt,
                        rank: s.rank,
                        checkpointed: all_saved,
                        rank_saved: s.checkpointed,
                    })
                }
                // Asked to run a replica that ended there without its own exit (killed as
                // no longer wanted, e.g. by a directive from a stale state): the model
                // requeues the job, or counts it as the rank's stop in a stop in progress.
                Some(What::Stopped(s)) if s.cause() == StopCause::KilledHere => {
                    tracing::warn!(node = %node, job_id = s.job_id, attempt = s.attempt, rank = s.rank, "the agent was asked to run a replica that already ended there");
                    observed.push(Observed::KilledHere {
                        job: s.job_id,
                        attempt: s.attempt,
                        rank: s.rank,
                        rank_saved: s.checkpointed,
                    })
                }
                // A suspension that names its preemption: the model takes it only for that one.
                Some(What::Stopped(s)) if s.suspension_by != 0 => observed.push(Observed::Suspended {
                    job: s.job_id,
                    attempt: s.attempt,
                    rank: s.rank,
                    by: s.suspension_by,
                    requested_ms: s.suspension_ms,
                }),
                Some(What::Stopped(s)) => observed.push(Observed::Stopped {
                    job: s.job_id,
                    attempt: s.attempt,
                    rank: s.rank,
                    checkpointed: s.checkpointed,
                }),
                Some(What::Checkpointed(c)) if tallies => {
                    observed.push(Observed::RankCheckpointed { job: c.job_id, attempt: c.attempt, rank: c.rank })
                }
                Some(What::Checkpointed(c)) => {
                    if self.rank_saved(node, c.job_id, c.attempt, c.rank) {
                        observed.push(Observed::Checkpointed { job: c.job_id, attempt: c.attempt })
                    }
                }
                Some(What::Unkillable(u)) => {
                    tracing::error!(node = %node, job_id = u.job_id, attempt = u.attempt, rank = u.rank, reason = u.reason, "a replica cannot be killed; the node takes no new work");
                    // Cut short here: a reason too long for a log entry would have the
                    // whole report refused on every resend, and no later exit would commit.
                    observed.push(Observed::Unkillable {
                        job: u.job_id,
                        attempt: u.attempt,
                        rank: u.rank,
                        reason: clip_message(u.reason),
                    })
                }
                Some(What::Unrecorded(u)) => {
                    tracing::error!(node = %node, job_id = u.job_id, attempt = u.attempt, rank = u.rank, reason = u.reason, "the agent cannot record a start in its journal; the job goes back to the queue and the node takes no new work");
                    // Cut short as an unkillable's reason is.
                    observed.push(Observed::Unrecorded {
                        job: u.job_id,
                        attempt: u.attempt,
                        rank: u.rank,
                        reason: clip_message(u.reason),
                    })
                }
                // Committed first, by `gpu_findings`.
                Some(What::Gpu(_)) => {}
                None => return Err(Status::invalid_argument("observations: an observation without a kind")),
            }
        }
        for stray in strays {
            tracing::warn!(node = %node, observation = ?stray, "what the agent runs differs from its directive");
            observed.push(stray);
        }
        // Mid-upgrade, a member may not read the newest observations: they go as the older
        // ones it reads, so that reports (and the agent's lease) never wait for an upgrade.
        // The committed behaviour was raised only once every member read its format: that
        // one is read, whatever this replica has heard (a new leader that has not heard
        // from a dead member yet takes it for one of format 3 until then, and the rank
        // checkpoints, which have no older form, would be dropped).
        let observed = baton_model::format::for_members(observed, self.ctx.replica.oldest_format(), behaviour);
        for chunk in observed.chunks(MAX_OBSERVATIONS_PER_REPORT) {
            let op = Op::Report { node: node.clone(), observations: chunk.to_vec() };
            if let Some(Outcome::Reported { ignored }) = self.write(op).await? {
                for (i, why) in ignored {
                    tracing::info!(node = %node, observation = ?chunk[i as usize], why, "agent observation ignored");
                }
            }
        }
        Ok(())
    }

    /// Commits the report's GPU findings, the last of each GPU the node has, and returns the
    /// rest of the report. One write per GPU at most: a report may carry 65,536 findings,
    /// and each was a raft write of its own, in turn, before the rest of the report.
    async fn gpu_findings(&self, node: &Name, observations: Vec<Observation>) -> Result<Vec<Observation>, Status> {
        // Most reports carry none: they pay neither the state's lock nor a copy.
        if !observations.iter().any(|o| matches!(o.what, Some(What::Gpu(_)))) {
            return Ok(observations);
        }
        let gpus = self.ctx.replica.read_local(|s| s.nodes().get(node).map_or(0, |n| n.spec.resources.gpus()));
        let mut last = BTreeMap::new();
        let mut unknown = 0usize;
        let mut rest = Vec::with_capacity(observations.len());
        for o in observations {
            match o.what {
                Some(What::Gpu(g)) if u64::from(g.gpu) < gpus => {
                    last.insert(g.gpu, g);
                }
                Some(What::Gpu(_)) => unknown += 1,
                _ => rest.push(o),
            }
        }
        if unknown > 0 {
            tracing::warn!(node = %node, unknown, gpus, "GPU findings for GPUs the node does not have; not recorded");
        }
        for g in last.into_values() {
            self.gpu_health(node, g).await?;
        }
        Ok(rest)
    }

    /// Commits what the agent found of one of its GPUs (decisions.md section 14), before
    /// the rest of its report. Mid-upgrade, while a member cannot read it yet, it is logged
    /// and dropped, so that reports (and the agent's lease) never wait for an upgrade: an
    /// operator marks the GPU by hand (`baton gpu unhealthy`) until every replica reads it.
    async fn gpu_health(&self, node: &Name, g: baton_proto::v1::GpuHealth) -> Result<(), Status> {
        let fault = (!g.healthy).then(|| clip_message(g.error));
        let op = Op::ReportGpu { node: node.clone(), gpu: g.gpu, fault, by_check: g.by_check };
        if self.ctx.replica.oldest_format() < op.format() {
            tracing::error!(node = %node, op = ?op, "a replica cannot record GPU health yet (upgrade it); not recorded");
            return Ok(());
        }
        match &op {
            Op::ReportGpu { fault: Some(error), .. } => {
                tracing::error!(node = %node, gpu = g.gpu, error, "the agent found a GPU unhealthy")
            }
            _ => tracing::info!(node = %node, gpu = g.gpu, "the agent's health check passed on this GPU"),
        }
        match self.write(op).await {
            // A GPU the node does not have: the agent's word is wrong, not its report.
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                tracing::warn!(node = %node, gpu = g.gpu, "GPU health not recorded: {}", status.message());
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Commits `op`. A report the state has moved past (a stale attempt, a job no longer
    /// in that state) is acknowledged: telling the agent again would change nothing.
    async fn write(&self, op: Op) -> Result<Option<Outcome>, Status> {
        let name = op.name();
        match self.ctx.replica.write(Command { now_ms: now_ms(), op }).await.map_err(status::from_write)? {
            Ok(applied) => Ok(Some(applied.outcome)),
            Err(e @ (ApplyError::StaleAttempt { .. } | ApplyError::WrongState { .. } | ApplyError::Unknown { .. })) => {
                tracing::debug!(op = name, error = %e, "agent report already overtaken");
                Ok(None)
            }
            Err(e) => Err(status::from_apply(e)),
        }
    }
}

/// Refuses an agent that has seen a term above this replica's: a newer leader exists, so
/// this one is deposed whether or not it has heard of it yet.
fn not_deposed(term_seen: u64, term: u64) -> Result<(), Status> {
    if term_seen > term {
        return Err(Status::failed_precondition(format!(
            "this replica is deposed: the agent has seen term_seen {term_seen}, above this leader's term {term}"
        )));
    }
    Ok(())
}

/// How often a node's directive is sent again while it does not change and its agent does
/// not ask. Agents apply their last directive again on their own and ask for a newer one
/// when they need it (`ReportRequest.awaiting_state_index`); this is for agents of builds
/// before that field, which waited for a resend. At 10,000 nodes, sending every node its
/// list every 2 s, as before, was 5,000 directives a second that changed nothing.
const UNCHANGED_RESEND_MS: u64 = 30_000;
/// Directive streams one node may have open on a replica: its agent needs one, two while it
/// reconnects (a stream its agent left ends within `STREAM_RECHECK_MS`).
pub const MAX_ATTACH_STREAMS_PER_NODE: usize = 4;

/// Sends the node's directive once this term has published it, then on every change, when
/// the agent asks (`Hub::nudge`), and every `UNCHANGED_RESEND_MS`; ends when the agent goes
/// or this replica stops leading in `term`. Until the first publish nothing is sent: the
/// agent holds what it runs.
async fn stream_directives(
    ctx: Arc<Ctx>,
    node: Name,
    term: u64,
    cert: CertGuard,
    mut assignments: watch::Receiver<Option<crate::hub::Published>>,
    tx: mpsc::Sender<Result<Directive, Status>>,
) {
    // A certificate revoked by a reload ends the stream: directives carry jobs' environments.
    let mut recheck = tokio::time::interval(Duration::from_millis(crate::auth::STREAM_RECHECK_MS));
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading = ctx.hub.leading();
    let mut closing = ctx.closing.subscribe();
    let resend = Duration::from_millis(UNCHANGED_RESEND_MS);
    let mut directed = crate::trace::Directed::default();
    loop {
        if let Some(current) = ctx.hub.current(&node, term) {
            directed.note(&node, term, &current.assignments);
            let directive = Directive {
                term,
                leader_id: ctx.replica.id(),
                assignments: current.assignments.as_ref().clone(),
                heartbeat_timeout_ms: ctx.settings.heartbeat_timeout_ms,
                lease_ms: ctx.settings.lease_ms,
                state_index: current.state_index,
            };
            let next = cert.check().map(|()| directive);
            let revoked = next.is_err();
            if tx.send(next).await.is_err() || revoked {
                return;
            }
        }
        let resend_at = tokio::time::sleep(resend);
        tokio::pin!(resend_at);
        // Until something is worth sending: a check of the certificate sends nothing.
        loop {
            tokio::select! {
                changed = assignments.changed() => if changed.is_err() { return } else { break },
                changed = leading.changed() => {
                    if changed.is_err() || *leading.borrow() != Some(term) {
                        tracing::info!(node = %node, term, "no longer leading; closing the agent's stream");
                        return;
                    }
                    break;
                }
                () = &mut resend_at => break,
                _ = recheck.tick() => {
                    // An agent gone already has nothing to be told.
                    if tx.is_closed() {
                        return;
                    }
                    if let Err(s) = cert.check() {
                        let _ = tx.send(Err(s)).await;
                        return;
                    }
                }
                // Its output (a guard, not Send) must not live across the await above.
                () = async { let _ = closing.wait_for(|c| *c).await; } => return,
            }
        }
    }
}
