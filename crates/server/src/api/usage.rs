//! Capacity and usage per pool and per queue, computed from the applied state for
//! `cluster info` and `queue list`.

use std::collections::BTreeMap;

use baton_model::State;
use baton_model::job::{Job, JobState};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::resources::Resources;
use baton_proto::convert::resources_to_proto;
use baton_proto::v1::{PoolUsage, QueueUsage};

/// What runs (or is stopping) holds resources; a suspended job keeps its GPUs but charges
/// no quota, so it shows on nodes and not against its queue.
fn charged(job: &Job) -> bool {
    matches!(job.state, JobState::Running | JobState::Preempting)
}

/// Each replica's resources by the pool of its node.
fn by_pool(state: &State, job: &Job) -> Vec<(Name, Resources)> {
    job.replicas
        .iter()
        .filter_map(|r| {
            let pool = state.nodes().get(&r.node)?.spec.pool.clone();
            Some((pool, job.spec.tasks.get(r.task as usize)?.resources.clone()))
        })
        .collect()
}

pub fn pools(state: &State) -> Vec<PoolUsage> {
    let mut cap: BTreeMap<Name, Resources> = BTreeMap::new();
    for n in state.nodes().values().filter(|n| n.status == NodeStatus::Ready) {
        cap.entry(n.spec.pool.clone()).or_default().add(&n.spec.resources);
    }
    let mut used: BTreeMap<Name, Resources> = BTreeMap::new();
    for job in state.jobs().values().filter(|j| j.state.is_active() || j.state == JobState::Suspended) {
        for (pool, r) in by_pool(state, job) {
            used.entry(pool).or_default().add(&r);
        }
    }
    cap.into_iter()
        .map(|(pool, capacity)| PoolUsage {
            used: Some(resources_to_proto(&used.remove(&pool).unwrap_or_default())),
            pool: pool.to_string(),
            capacity: Some(resources_to_proto(&capacity)),
        })
        .collect()
}

/// Per queue and pool: used against nominal quota (`capacity` is the nominal here).
pub fn queues(state: &State) -> Vec<QueueUsage> {
    let mut used: BTreeMap<(Name, Name), Resources> = BTreeMap::new();
    let mut counts: BTreeMap<Name, (u32, u32)> = BTreeMap::new();
    for job in state.jobs().values() {
        let c = counts.entry(job.spec.queue.clone()).or_default();
        match job.state {
            JobState::Pending => c.0 += 1,
            JobState::Running | JobState::Preempting => c.1 += 1,
            _ => {}
        }
        if charged(job) {
            for (pool, r) in by_pool(state, job) {
                used.entry((job.spec.queue.clone(), pool)).or_default().add(&r);
            }
        }
    }
    state
        .queues()
        .values()
        .map(|q| {
            let mut pools: BTreeMap<Name, PoolUsage> = BTreeMap::new();
            for (pool, quota) in &q.quotas {
                pools.insert(pool.clone(), usage(pool, &Resources::new(), &quota.nominal));
            }
            for ((_, pool), r) in used.iter().filter(|((queue, _), _)| *queue == q.name) {
                pools.insert(pool.clone(), usage(pool, r, &q.nominal(pool.as_str())));
            }
            let (pending, running) = counts.get(&q.name).copied().unwrap_or_default();
            QueueUsage {
                queue: Some(baton_proto::convert::queue_to_proto(q)),
                pools: pools.into_values().collect(),
                pending,
                running,
            }
        })
        .collect()
}

fn usage(pool: &Name, used: &Resources, nominal: &Resources) -> PoolUsage {
    PoolUsage {
        pool: pool.to_string(),
        used: Some(resources_to_proto(used)),
        capacity: Some(resources_to_proto(nominal)),
    }
}
