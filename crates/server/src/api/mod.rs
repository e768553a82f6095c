//! The client API (`Baton` in `proto/baton.proto`). Any replica answers: writes go through
//! [`baton_raft::Replica::write`] (forwarded to the leader), reads are linearizable
//! ([`baton_raft::Replica::read`]).
//!
//! - `jobs`: submit, get, list, cancel, pause, resume.
//! - `objects`: queues, cohorts, priority classes.
//! - `nodes`: list, cordon, drain.
//! - `cluster`: replicas, leader, term, usage.
//! - `history`: accounting's records (`baton history`, `baton usage`).
//! - `watch`: the event stream.
//! - `visible`: what a caller sees of a job and of its events (get, list, watch, dashboard).
//! - `usage`: capacity and usage arithmetic shared by the above.
//! - `rates`: how many writes a second a queue user may send (`max_user_writes_per_s`).

pub(crate) mod cluster;
pub use cluster::HIDDEN_JOB;
pub(crate) mod history;
pub(crate) mod jobs;
mod logs;
pub(crate) mod nodes;
mod objects;
pub(crate) mod rates;
pub mod usage;
pub(crate) mod visible;
mod watch;
pub(crate) mod watchers;

use std::pin::Pin;
use std::sync::Arc;

use baton_model::State;
use baton_model::command::{Applied, Command, Op};
use baton_proto::convert::event_to_proto;
use baton_proto::v1::baton_server::Baton;
use baton_proto::v1::*;
use futures::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::Ctx;
use crate::auth::{self, AuthMode, Caller};
use crate::clock::now_ms;
use crate::status;

pub struct Api {
    pub(crate) ctx: Arc<Ctx>,
}

impl Api {
    /// Who is calling: UNAUTHENTICATED unless the call carries a live token (or this
    /// replica runs with `--auth none` and the cluster has no token yet). Checked against the state linearizably, so a
    /// revocation anywhere counts here at once.
    pub(crate) async fn caller(&self, meta: &MetadataMap) -> Result<Caller, Status> {
        // `--auth none` holds only while the cluster has no token: a replica left with it on a
        // cluster that has tokens must not hand anyone its jobs' private data.
        if self.ctx.settings.auth == AuthMode::None && !self.read(|s| s.access().enforced()).await? {
            return Ok(Caller::Open);
        }
        let hash = auth::hash_token(auth::bearer(meta)?);
        let found = self
            .read(move |s| match s.access().authenticate(&hash) {
                Ok(t) => Ok(t.clone()),
                Err(_) if !s.access().enforced() => Err(Status::unauthenticated(
                    "this cluster has no tokens yet: start a replica with --bootstrap-admin-token-file, \
                     or run every replica with --auth none for development",
                )),
                Err(e) => Err(status::from_apply(e)),
            })
            .await?;
        Ok(Caller::Token { hash, token: found? })
    }

    /// Who sends a command that the state machine checks again when it applies it (the
    /// token, its roles and grants, and whether the cluster requires a token, as of that
    /// log index): answered from this replica's applied state, without the linearizable
    /// read of [`Api::caller`]. That read is a round of messages to a quorum (and, on a
    /// follower, one to the leader), as costly as the write itself; done for every submit it
    /// took half the messages a submit costs. Only a token this replica does not know yet
    /// (made a moment ago through another replica) falls back to it.
    pub(crate) async fn writer(&self, meta: &MetadataMap) -> Result<Caller, Status> {
        let hash = auth::bearer(meta).ok().map(auth::hash_token);
        let auth = self.ctx.settings.auth;
        match self.ctx.replica.read_local(|s| known_writer(s, auth, hash)) {
            Some(who) => Ok(who),
            None => self.caller(meta).await,
        }
    }

    /// Commits `op` as `who` and returns what it produced, or the state machine's refusal
    /// (which re-checks `who`'s token and permissions) as a status.
    pub(crate) async fn write(&self, who: &Caller, op: Op) -> Result<Applied, Status> {
        self.ctx.write_rates.admit(who, self.ctx.settings.max_user_writes_per_s)?;
        let _waiting = self.ctx.client_writes.begin();
        let span = crate::trace::commit_span(op.name(), self.ctx.replica.term());
        let cmd = Command { now_ms: now_ms(), op: who.wrap(op) };
        let response = self.ctx.replica.write(cmd).instrument(span.clone()).await.map_err(status::from_client_write)?;
        let applied = response.map_err(status::from_apply)?;
        crate::trace::record_outcome(&span, &applied.outcome);
        Ok(applied)
    }

    pub(crate) async fn ack(&self, who: &Caller, op: Op) -> Result<Response<Ack>, Status> {
        let applied = self.write(who, op).await?;
        Ok(Response::new(Ack { events: applied.events.iter().map(event_to_proto).collect() }))
    }

    pub(crate) async fn read<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, Status> {
        self.ctx.replica.read(f).await.map_err(status::from_read)
    }

    /// `read` for work that walks every job or node (listings, the cluster's summary): `f`
    /// runs on a clone of the state, as in `off_the_lock`.
    pub(crate) async fn read_whole<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, Status> {
        let state = self.read(State::clone).await?;
        Ok(f(&state))
    }
}

/// `f` of this replica's applied state, run on a clone: the clone holds the state machine's
/// lock for a fraction of a millisecond, where work that walks every job or node (a
/// `/metrics` scrape, a listing: tens of ms at 10,000 nodes) run under it held every apply,
/// and so every submit, back until it ended.
pub(crate) fn off_the_lock<T>(replica: &baton_raft::Replica, f: impl FnOnce(&State) -> T) -> T {
    let state = replica.read_local(State::clone);
    f(&state)
}

/// The caller as this replica's applied state knows it, or `None` when it cannot tell (a
/// token it does not know). Only for commands the state machine re-checks: a token revoked
/// since is refused when the command applies.
fn known_writer(s: &State, auth: AuthMode, hash: Option<baton_model::access::TokenHash>) -> Option<Caller> {
    if auth == AuthMode::None && !s.access().enforced() {
        return Some(Caller::Open);
    }
    let hash = hash?;
    let token = s.access().authenticate(&hash).ok()?.clone();
    Some(Caller::Token { hash, token })
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;
type LogStream = Pin<Box<dyn Stream<Item = Result<LogChunk, Status>> + Send>>;

#[tonic::async_trait]
impl Baton for Api {
    type WatchStream = EventStream;
    type JobLogsStream = LogStream;
    type SaveSnapshotStream = cluster::ChunkStream;

    async fn submit(&self, r: Request<SubmitRequest>) -> Result<Response<SubmitReply>, Status> {
        let who = self.writer(r.metadata()).await?;
        jobs::submit(self, &who, r.into_inner()).await
    }
    async fn get_job(&self, r: Request<JobRef>) -> Result<Response<Job>, Status> {
        let who = self.caller(r.metadata()).await?;
        jobs::get(self, &who, r.into_inner()).await
    }
    async fn list_jobs(&self, r: Request<ListJobsRequest>) -> Result<Response<ListJobsReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        jobs::list(self, &who, r.into_inner()).await
    }
    async fn cancel_job(&self, r: Request<JobRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        match jobs::resolve_cancel(self, &who, &r.into_inner()).await? {
            jobs::Target::Job(job) => self.ack(&who, Op::Cancel { job }).await,
            jobs::Target::Array(array) => self.ack(&who, Op::CancelArray { array }).await,
        }
    }
    async fn list_arrays(&self, r: Request<ListArraysRequest>) -> Result<Response<ListArraysReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        jobs::list_arrays(self, &who, r.into_inner()).await
    }
    async fn pause_job(&self, r: Request<JobRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let job = jobs::resolve(self, &who, &r.into_inner()).await?;
        self.ack(&who, Op::Pause { job }).await
    }
    async fn resume_job(&self, r: Request<JobRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let job = jobs::resolve(self, &who, &r.into_inner()).await?;
        self.ack(&who, Op::Resume { job }).await
    }
    async fn watch(&self, r: Request<WatchRequest>) -> Result<Response<EventStream>, Status> {
        let who = self.caller(r.metadata()).await?;
        let identity = watchers::identity(&who, r.extensions().get::<baton_proto::tls::PeerId>());
        let cert = baton_proto::tls::CertGuard::of(&self.ctx.transport, &r);
        watch::watch(self, who, identity, cert, r.into_inner()).await
    }
    async fn job_logs(&self, r: Request<JobLogsRequest>) -> Result<Response<LogStream>, Status> {
        let who = self.caller(r.metadata()).await?;
        let identity = watchers::identity(&who, r.extensions().get::<baton_proto::tls::PeerId>());
        let cert = baton_proto::tls::CertGuard::of(&self.ctx.transport, &r);
        logs::job_logs(self, &who, identity, cert, r.into_inner()).await
    }

    async fn put_queue(&self, r: Request<Queue>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::put_queue(self, &who, r.into_inner()).await
    }
    async fn create_queue(&self, r: Request<Queue>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::create_queue(self, &who, r.into_inner()).await
    }
    async fn update_queue(&self, r: Request<UpdateQueueRequest>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::update_queue(self, &who, r.into_inner()).await
    }
    async fn delete_queue(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let name = objects::name(&r.into_inner().name)?;
        self.ack(&who, Op::DeleteQueue { name }).await
    }
    async fn list_queues(&self, r: Request<Empty>) -> Result<Response<ListQueuesReply>, Status> {
        // The queues' settings are shown to any caller, their visibility included.
        self.caller(r.metadata()).await?;
        Ok(Response::new(ListQueuesReply { queues: self.read_whole(usage::queues).await? }))
    }
    async fn put_cohort(&self, r: Request<Cohort>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::put_cohort(self, &who, r.into_inner()).await
    }
    async fn create_cohort(&self, r: Request<Cohort>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::create_cohort(self, &who, r.into_inner()).await
    }
    async fn delete_cohort(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let name = objects::name(&r.into_inner().name)?;
        self.ack(&who, Op::DeleteCohort { name }).await
    }
    async fn list_cohorts(&self, r: Request<Empty>) -> Result<Response<ListCohortsReply>, Status> {
        self.caller(r.metadata()).await?;
        objects::list_cohorts(self).await
    }
    async fn put_class(&self, r: Request<PriorityClass>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::put_class(self, &who, r.into_inner()).await
    }
    async fn create_class(&self, r: Request<PriorityClass>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        objects::create_class(self, &who, r.into_inner()).await
    }
    async fn delete_class(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let name = objects::name(&r.into_inner().name)?;
        self.ack(&who, Op::DeleteClass { name }).await
    }
    async fn list_classes(&self, r: Request<Empty>) -> Result<Response<ListClassesReply>, Status> {
        self.caller(r.metadata()).await?;
        objects::list_classes(self).await
    }

    async fn list_nodes(&self, r: Request<Empty>) -> Result<Response<ListNodesReply>, Status> {
        self.caller(r.metadata()).await?;
        nodes::list(self).await
    }
    async fn cordon(&self, r: Request<CordonRequest>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let r = r.into_inner();
        let node = objects::name(&r.node)?;
        self.ack(&who, Op::Cordon { node, cordoned: r.cordoned }).await
    }
    async fn drain(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let node = objects::name(&r.into_inner().name)?;
        self.ack(&who, Op::Cordon { node, cordoned: true }).await
    }
    async fn create_maintenance(&self, r: Request<MaintenanceWindow>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let spec = baton_proto::convert::window_from_proto(&r.into_inner()).map_err(status::from_convert)?;
        self.ack(&who, Op::CreateMaintenance(spec)).await
    }
    async fn delete_maintenance(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let name = objects::name(&r.into_inner().name)?;
        self.ack(&who, Op::DeleteMaintenance { name }).await
    }
    async fn set_gpu_health(&self, r: Request<SetGpuHealthRequest>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        let op = baton_proto::convert::gpu_health_from_proto(&r.into_inner()).map_err(status::from_convert)?;
        self.ack(&who, op).await
    }
    async fn list_maintenance(&self, r: Request<Empty>) -> Result<Response<ListMaintenanceReply>, Status> {
        self.caller(r.metadata()).await?;
        let windows = self.read(|s| s.windows().values().map(baton_proto::convert::window_to_proto).collect()).await?;
        Ok(Response::new(ListMaintenanceReply { windows }))
    }

    /// Open to any caller, like a health check: replicas, leader, term and usage, no job
    /// data (probes and `baton dev` find the leader through it).
    async fn cluster_info(&self, r: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        // Answered without a token too (operators and health checks ask it); a token, if
        // any, says which reserved jobs the caller may see by name.
        let who = self.caller(r.metadata()).await.ok();
        cluster::info(self, who.as_ref()).await
    }
    async fn set_scheduler(&self, r: Request<SchedulerSettings>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::set_scheduler(self, &who, r.into_inner()).await
    }
    async fn set_tenancy(&self, r: Request<TenancySettings>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::set_tenancy(self, &who, r.into_inner()).await
    }
    async fn set_usage(&self, r: Request<UsageSettings>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::set_usage(self, &who, r.into_inner()).await
    }
    async fn set_user_limit(&self, r: Request<UserLimitRequest>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::set_user_limit(self, &who, r.into_inner()).await
    }
    async fn set_topology(&self, r: Request<TopologyRequest>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::set_topology(self, &who, r.into_inner()).await
    }
    async fn get_usage(&self, r: Request<Empty>) -> Result<Response<UsageReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::get_usage(self, &who).await
    }
    async fn history(&self, r: Request<HistoryRequest>) -> Result<Response<HistoryReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        history::history(self, &who, r.into_inner()).await
    }
    async fn usage_totals(&self, r: Request<UsageTotalsRequest>) -> Result<Response<UsageTotalsReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        history::usage_totals(self, &who, r.into_inner()).await
    }
    async fn set_accounting(&self, r: Request<AccountingSettings>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        history::set_accounting(self, &who, r.into_inner()).await
    }
    async fn add_replica(&self, r: Request<AddReplicaRequest>) -> Result<Response<MembershipReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        let r = r.into_inner();
        let addr = match r.peer_addr.as_str() {
            "" => r.addr,
            peer => baton_raft::Addrs { api: r.addr, peer: peer.to_string() }.to_member(),
        };
        baton_raft::Addrs::check_member(&addr).map_err(Status::invalid_argument)?;
        cluster::change(self, &who, "AddReplica", baton_raft::Change::Add { id: r.id, addr }).await
    }
    async fn remove_replica(&self, r: Request<ReplicaRef>) -> Result<Response<MembershipReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        let id = r.into_inner().id;
        cluster::change(self, &who, "RemoveReplica", baton_raft::Change::Remove { id }).await
    }
    async fn save_snapshot(&self, r: Request<Empty>) -> Result<Response<cluster::ChunkStream>, Status> {
        let who = self.caller(r.metadata()).await?;
        cluster::save_snapshot(self, &who).await
    }
    async fn transfer_leader(&self, r: Request<ReplicaRef>) -> Result<Response<MembershipReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        let to = Some(r.into_inner().id).filter(|id| *id != 0);
        cluster::change(self, &who, "TransferLeader", baton_raft::Change::Transfer { to }).await
    }

    async fn create_token(&self, r: Request<CreateTokenRequest>) -> Result<Response<TokenInfo>, Status> {
        let who = self.caller(r.metadata()).await?;
        auth::tokens::create(self, &who, r.into_inner()).await
    }
    async fn revoke_token(&self, r: Request<TokenRef>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        auth::tokens::revoke(self, &who, r.into_inner()).await
    }
    async fn grant_queue(&self, r: Request<GrantQueueRequest>) -> Result<Response<Ack>, Status> {
        let who = self.caller(r.metadata()).await?;
        auth::tokens::grant(self, &who, r.into_inner()).await
    }
    async fn list_tokens(&self, r: Request<Empty>) -> Result<Response<ListTokensReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        auth::tokens::list(self, &who).await
    }
    async fn who_am_i(&self, r: Request<Empty>) -> Result<Response<WhoAmIReply>, Status> {
        let who = self.caller(r.metadata()).await?;
        auth::tokens::who_am_i(self, &who).await
    }
}

#[cfg(test)]
mod tests {
    use baton_model::access::{Role, TokenSpec};
    use baton_model::{Name, State};

    use super::*;

    fn with_token(hash: baton_model::access::TokenHash) -> State {
        let mut s = State::default();
        let spec = TokenSpec {
            user: Name::lit("ann"),
            roles: [Role::Admin].into_iter().collect(),
            queues: Default::default(),
        };
        s.apply(Command { now_ms: 1, op: Op::AddToken { hash, spec } }).unwrap();
        s
    }

    #[test]
    fn a_token_this_replica_knows_needs_no_round_to_a_quorum() {
        let hash = auth::hash_token("secret");
        let s = with_token(hash);
        for mode in [AuthMode::Tokens, AuthMode::None] {
            match known_writer(&s, mode, Some(hash)) {
                Some(Caller::Token { hash: h, token }) => assert_eq!((h, token.spec.user.as_str()), (hash, "ann")),
                other => panic!("{mode:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_token_this_replica_does_not_know_yet_is_checked_linearizably() {
        let s = with_token(auth::hash_token("secret"));
        assert!(known_writer(&s, AuthMode::Tokens, Some(auth::hash_token("made-just-now"))).is_none());
        assert!(known_writer(&s, AuthMode::Tokens, None).is_none());
        // A cluster with tokens takes no open caller, even from a replica run with --auth none.
        assert!(known_writer(&s, AuthMode::None, None).is_none());
    }

    #[test]
    fn auth_none_on_a_cluster_without_tokens_is_open() {
        assert!(matches!(known_writer(&State::default(), AuthMode::None, None), Some(Caller::Open)));
        assert!(known_writer(&State::default(), AuthMode::Tokens, None).is_none());
    }
}
