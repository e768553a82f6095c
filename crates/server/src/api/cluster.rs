//! `cluster info`: who is in the cluster, who leads, and how full it is.

use crate::auth::Caller;
use baton_model::State;
use baton_model::access::Role;
use baton_model::command::Op;
use baton_model::job::JobState;
use baton_model::queue::Visibility;
use baton_model::scheduler::PoolReservation;
use baton_proto::convert::{
    pool_reservation_to_proto, resources_to_proto, scheduler_from_proto, scheduler_to_proto, tenancy_from_proto,
    tenancy_to_proto, usage_settings_from_proto, usage_settings_to_proto, user_limit_from_proto,
};
use baton_proto::v1::{
    Ack, ClusterInfoReply, MembershipReply, Replica, ReplicaRole, SchedulerSettings, SnapshotChunk, TenancySettings,
    UsageReply, UsageRow, UsageSettings, UserLimitRequest,
};
use tonic::{Response, Status};

use super::{Api, usage};

/// The rack shown for a replica not heard from yet (a rack name cannot be it).
const RACK_UNKNOWN: &str = "?";
/// The version shown for a replica of a build that does not send it (before it was sent).
const VERSION_UNSAID: &str = "?";

/// Stands for the name of a reserved job the caller may not see (its queue shows others
/// nothing, `--visibility own`): the reservation itself, its pool and nodes, is the cluster's.
pub const HIDDEN_JOB: &str = "(a job you cannot see)";

/// The reservations of `s` as `who` sees them (`None`: a caller without a valid token).
fn reservations_seen(s: &State, who: Option<&Caller>) -> Vec<baton_proto::v1::PoolReservation> {
    let hidden = |id| {
        let Some(job) = s.job(id) else { return false };
        match who {
            Some(w) => super::visible::view(s, w, job) == super::visible::View::Hidden,
            None => s.access().enforced() && s.queue_visibility(&job.spec.queue) == Visibility::Own,
        }
    };
    let seen = |r: &PoolReservation| {
        let mut p = pool_reservation_to_proto(r, s);
        if hidden(r.job) {
            p.job = HIDDEN_JOB.into();
        }
        p
    };
    s.pool_reservations().values().map(seen).collect()
}

pub async fn info(api: &Api, who: Option<&Caller>) -> Result<Response<ClusterInfoReply>, Status> {
    let m = api.ctx.replica.metrics();
    let records = api.ctx.replica.records();
    let here = (records.oldest_end_ms().ok().flatten().unwrap_or(0), records.newest_seq().unwrap_or(0));
    let summary = |s: &State| {
        let count = |st: JobState| s.jobs().values().filter(|j| j.state == st).count() as u32;
        let reservations = reservations_seen(s, who);
        let scheduler = scheduler_to_proto(s.scheduler());
        let settings =
            (scheduler, tenancy_to_proto(s.tenancy().settings()), usage_settings_to_proto(s.usage().settings()));
        let accounting = super::history::info(s, here);
        let counts = (count(JobState::Pending), count(JobState::Running));
        (usage::pools(s), usage::queues(s), counts, settings, reservations, accounting)
    };
    let failure = api.ctx.replica.failure_now();
    // A replica that cannot write cannot confirm a read index either; it answers from its
    // own (possibly stale) state so the operator learns what is wrong with it.
    let (pools, queues, (pending, running), (scheduler, tenancy, usage), reservations, accounting) = match &failure {
        Some(_) => super::off_the_lock(&api.ctx.replica, summary),
        None => api.read_whole(summary).await?,
    };
    let racks = api.ctx.replica.racks();
    let builds = api.ctx.replica.builds();
    let replicas = m
        .members
        .iter()
        .map(|(id, addr)| {
            let role = if Some(*id) == m.leader_id {
                ReplicaRole::Leader
            } else if m.learners.contains(id) {
                ReplicaRole::Learner
            } else if m.voters.contains(id) {
                ReplicaRole::Follower
            } else {
                ReplicaRole::Unknown
            };
            let failure = if *id == m.node_id { failure.clone().unwrap_or_default() } else { String::new() };
            let rack = racks.get(id).cloned().flatten().unwrap_or_else(|| RACK_UNKNOWN.into());
            let (format, version) = match builds.get(id).cloned().flatten() {
                Some((format, v)) if v.is_empty() => (format, VERSION_UNSAID.to_string()),
                Some(build) => build,
                None => (0, String::new()),
            };
            Replica {
                id: *id,
                addr: addr.api.clone(),
                peer_addr: addr.peer.clone(),
                role: role.into(),
                failure,
                rack,
                format,
                version,
            }
        })
        .collect();
    Ok(Response::new(ClusterInfoReply {
        cluster_id: api.ctx.replica.cluster_id().to_string(),
        replicas,
        leader_id: m.leader_id.unwrap_or(0),
        leader_addr: m.leader_addr.clone().unwrap_or_default(),
        term: m.term,
        applied_index: m.last_applied_index.unwrap_or(0),
        answered_by: m.node_id,
        pools,
        queues,
        jobs_pending: pending,
        jobs_running: running,
        scheduler: Some(scheduler),
        reservations,
        insecure: !api.ctx.transport.is_tls(),
        tenancy: Some(tenancy),
        usage: Some(usage),
        accounting: Some(accounting),
        // After the read above: this replica's state holds at least what it read.
        behaviour: api.ctx.replica.read_local(|s| s.behaviour()),
        topology_levels: api.ctx.replica.read_local(|s| s.topology().levels().iter().map(|l| l.to_string()).collect()),
    }))
}

/// `cluster set --usage-half-life`, `--usage-weights`: what is not given keeps its value,
/// read from the state this replica has applied (as `set_tenancy`).
pub async fn set_usage(api: &Api, who: &Caller, s: UsageSettings) -> Result<Response<Ack>, Status> {
    let current = api.read(|st| st.usage().settings().clone()).await?;
    let settings = usage_settings_from_proto(&s, &current).map_err(crate::status::from_convert)?;
    api.ack(who, Op::SetUsage(settings)).await
}

/// `cluster set --topology-levels nvlink,rack,zone` (decisions.md section 10).
pub async fn set_topology(
    api: &Api,
    who: &Caller,
    r: baton_proto::v1::TopologyRequest,
) -> Result<Response<Ack>, Status> {
    let levels = r
        .levels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            baton_model::topology::LevelName::new(l).map_err(|e| Status::invalid_argument(format!("levels[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    api.ack(who, Op::SetTopologyLevels(levels)).await
}

/// `queue update --max-per-user`.
pub async fn set_user_limit(api: &Api, who: &Caller, r: UserLimitRequest) -> Result<Response<Ack>, Status> {
    let (queue, limit) = user_limit_from_proto(&r).map_err(crate::status::from_convert)?;
    api.ack(who, Op::SetUserLimit { queue, limit }).await
}

/// `baton usage --decayed`: each (queue, user)'s decayed usage at this replica's time, the
/// rows `who` may see (its own user's, its queues' as their admin; all for operators).
pub async fn get_usage(api: &Api, who: &Caller) -> Result<Response<UsageReply>, Status> {
    let token = who.token().cloned();
    let now_ms = crate::clock::now_ms();
    let reply = api
        .read(move |s| {
            let usage = s.usage();
            let weights = usage.settings().weights();
            let sees = super::history::Sees(token);
            let at_ms = now_ms.max(s.now_ms());
            let rows = usage
                .accounts()
                .keys()
                .filter(|(q, u)| sees.of(q, u))
                .map(|key| {
                    let raw = usage.usage_at(key, at_ms);
                    UsageRow {
                        queue: key.0.to_string(),
                        user: key.1.clone(),
                        weighted: baton_model::usage::weighted(&raw, &weights),
                        usage: baton_model::usage::in_units(&raw).into_iter().collect(),
                        held: usage.held_by(key).map(resources_to_proto),
                    }
                })
                .collect();
            UsageReply { settings: Some(usage_settings_to_proto(usage.settings())), at_ms, rows }
        })
        .await?;
    Ok(Response::new(reply))
}

/// `cluster set`: the scheduler's settings change through the log, like any other state.
pub async fn set_scheduler(api: &Api, who: &Caller, s: SchedulerSettings) -> Result<Response<Ack>, Status> {
    let settings = scheduler_from_proto(&s).map_err(crate::status::from_convert)?;
    api.ack(who, Op::SetScheduler(settings)).await
}

/// `cluster set` for tenancy: fields left out keep their value, read from the state this
/// replica has applied (a concurrent change of another field may be overwritten: admins
/// change these rarely, and the reply's `cluster info` shows the result).
pub async fn set_tenancy(api: &Api, who: &Caller, s: TenancySettings) -> Result<Response<Ack>, Status> {
    let current = api.read(|st| *st.tenancy().settings()).await?;
    let settings = tenancy_from_proto(&s, &current).map_err(crate::status::from_convert)?;
    api.ack(who, Op::SetTenancy(settings)).await
}

/// Add, remove a replica or hand leadership over: admins only; a follower forwards the
/// change to the leader.
pub async fn change(
    api: &Api,
    who: &Caller,
    what: &str,
    change: baton_raft::Change,
) -> Result<Response<MembershipReply>, Status> {
    who.require(Role::Admin, what)?;
    tracing::info!(?change, "membership change asked");
    // The leader checks the token again (`auth::membership_gate`) when the change is forwarded.
    let m = api.ctx.replica.change_membership(change, who.hash().map(|h| h.to_vec())).await;
    let m = m.map_err(crate::status::from_membership)?;
    Ok(Response::new(MembershipReply {
        leader_id: m.leader_id.unwrap_or(0),
        voters: m.voters.into_iter().collect(),
        learners: m.learners.into_iter().collect(),
    }))
}

/// One message of a backup stream: well under the 16 MiB message bound.
const CHUNK_BYTES: usize = 1 << 20;

pub type ChunkStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<SnapshotChunk, Status>> + Send>>;

/// `snapshot save`: the backup file's bytes, in chunks. Admins only: it holds every job's
/// environment and every token's hash.
pub async fn save_snapshot(api: &Api, who: &Caller) -> Result<Response<ChunkStream>, Status> {
    who.require(Role::Admin, "SaveSnapshot")?;
    let backup = api.ctx.replica.backup().await.map_err(crate::status::from_read)?;
    let bytes = backup.to_bytes().map_err(|e| Status::internal(e.to_string()))?;
    tracing::info!(index = backup.index, bytes = bytes.len(), "backup streamed");
    let chunks: Vec<Result<SnapshotChunk, Status>> =
        bytes.chunks(CHUNK_BYTES).map(|c| Ok(SnapshotChunk { data: c.to_vec() })).collect();
    Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
}
