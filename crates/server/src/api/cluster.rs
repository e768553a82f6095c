//! `cluster info`: who is in the cluster, who leads, and how full it is.

use baton_model::job::JobState;
use baton_proto::v1::{ClusterInfoReply, Replica};
use tonic::{Response, Status};

use super::{Api, usage};

pub async fn info(api: &Api) -> Result<Response<ClusterInfoReply>, Status> {
    let m = api.ctx.replica.metrics();
    let (pools, queues, pending, running) = api
        .read(|s| {
            let count = |st: JobState| s.jobs().values().filter(|j| j.state == st).count() as u32;
            (usage::pools(s), usage::queues(s), count(JobState::Pending), count(JobState::Running))
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
    }))
}
