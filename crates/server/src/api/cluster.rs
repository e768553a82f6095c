//! `cluster info`: who is in the cluster, who leads, and how full it is.

use baton_model::command::Op;
use baton_model::job::JobState;
use baton_proto::convert::{pool_reservation_to_proto, scheduler_from_proto, scheduler_to_proto};
use baton_proto::v1::{Ack, ClusterInfoReply, Replica, SchedulerSettings};
use tonic::{Response, Status};

use super::{Api, usage};

pub async fn info(api: &Api) -> Result<Response<ClusterInfoReply>, Status> {
    let m = api.ctx.replica.metrics();
    let (pools, queues, pending, running, scheduler, reservations) = api
        .read(|s| {
            let count = |st: JobState| s.jobs().values().filter(|j| j.state == st).count() as u32;
            let reservations = s.pool_reservations().values().map(|r| pool_reservation_to_proto(r, s)).collect();
            let scheduler = scheduler_to_proto(s.scheduler());
            (
                usage::pools(s),
                usage::queues(s),
                count(JobState::Pending),
                count(JobState::Running),
                scheduler,
                reservations,
            )
        })
        .await?;
    let replicas = m
        .members
        .iter()
        .map(|(id, addr)| {
            let role = if Some(*id) == m.leader_id {
                "Leader"
            } else if m.learners.contains(id) {
                "Learner"
            } else if m.voters.contains(id) {
                "Follower"
            } else {
                "Unknown"
            };
            Replica { id: *id, addr: addr.clone(), role: role.into() }
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
    }))
}

/// `cluster set`: the scheduler's settings change through the log, like any other state.
pub async fn set_scheduler(api: &Api, s: SchedulerSettings) -> Result<Response<Ack>, Status> {
    let settings = scheduler_from_proto(&s).map_err(crate::status::from_convert)?;
    api.ack(Op::SetScheduler(settings)).await
}
