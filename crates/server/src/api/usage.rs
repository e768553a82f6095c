//! Capacity and usage per pool and per queue for `cluster info` and `queue list`: pools
//! from the nodes and what occupies them, queues from the ledger the scheduler uses.

use std::collections::BTreeMap;

use baton_model::State;
use baton_model::job::{Job, JobState};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::resources::Resources;
use baton_proto::convert::{self, resources_to_proto};
use baton_proto::v1::{self, PoolUsage, QueueUsage};

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

/// Per queue and pool: used against nominal quota (`capacity` is the nominal here). Usage
/// is the ledger's, the numbers admission decides by: a preemptor's reservation is charged
/// to its queue, a stopping victim and a suspended job are not.
pub fn queues(state: &State) -> Vec<QueueUsage> {
    let mut counts: BTreeMap<Name, (u32, u32)> = BTreeMap::new();
    for job in state.jobs().values() {
        let c = counts.entry(job.spec.queue.clone()).or_default();
        match job.state {
            JobState::Pending => c.0 += 1,
            JobState::Running | JobState::Preempting => c.1 += 1,
            _ => {}
        }
    }
    let l = state.ledger();
    state
        .queues()
        .values()
        .map(|q| {
            // Pools with a quota show even with no node yet (the ledger has no such pool).
            let mut pools: BTreeMap<Name, PoolUsage> = BTreeMap::new();
            for (pool, quota) in &q.quotas {
                pools.insert(pool.clone(), usage(pool, &Resources::new(), &quota.nominal));
            }
            for (p, used, _) in l.queue(q.name.as_str()).map(|i| l.queue_usage(i)).unwrap_or_default() {
                let pool = &l.pools[p].name;
                pools.insert(pool.clone(), usage(pool, &l.kinds.resources(&used), &q.nominal(pool.as_str())));
            }
            let (pending, running) = counts.get(&q.name).copied().unwrap_or_default();
            QueueUsage {
                queue: Some(v1::Queue {
                    visibility: convert::visibility_to_proto(state.queue_visibility(&q.name)).into(),
                    ..convert::queue_to_proto(q)
                }),
                pools: pools.into_values().collect(),
                pending,
                running,
                max_per_user: state.usage().limit(&q.name).map(resources_to_proto),
                revision: state.queue_revision(&q.name).unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use baton_model::alloc::ReplicaAlloc;
    use baton_model::command::{Command, Op};
    use baton_model::fixture;
    use baton_model::job::{JobSpec, PreemptionMode};
    use baton_model::plan::{Decision, Plan, Victim};

    use super::*;

    fn apply(s: &mut State, op: Op) {
        let now_ms = s.now_ms() + 1_000;
        s.apply(Command { now_ms, op }).expect("command applies");
    }

    fn spec(name: &str, queue: &str) -> JobSpec {
        JobSpec { preemption_mode: PreemptionMode::Requeue, ..fixture::gpu_job(name, queue, 4) }
    }

    fn plan(s: &mut State, d: Decision) {
        let based_on = s.applied();
        apply(s, Op::ApplyPlan(Plan { based_on, decisions: vec![d] }));
    }

    /// `low` (queue a) runs on n1's 4 GPUs and is being preempted for `high` (queue b),
    /// whose room is reserved meanwhile.
    fn preempting() -> State {
        let mut s = State::new();
        let node = fixture::gpu_node("n1", 4);
        apply(&mut s, Op::RegisterNodes(vec![node]));
        for q in ["a", "b"] {
            let q = baton_model::fixture::gpu_queue(q, 4);
            apply(&mut s, Op::PutQueue(q));
        }
        apply(&mut s, Op::Submit { spec: spec("low", "a"), request_id: None });
        apply(&mut s, Op::Submit { spec: spec("high", "b"), request_id: None });
        let (low, high) = (s.job_by_name("low").unwrap().id, s.job_by_name("high").unwrap().id);
        let on_n1 = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![0, 1, 2, 3] }];
        plan(&mut s, Decision::Place { job: low, attempt: 1, replicas: on_n1.clone() });
        let victims = vec![Victim { job: low, attempt: 1 }];
        plan(&mut s, Decision::Preempt { job: high, victims, replicas: on_n1, message: "test".into() });
        assert!(s.reservations().contains_key(&high), "the preemption applied");
        s
    }

    fn gpus_used(q: &QueueUsage) -> u64 {
        q.pools.iter().map(|p| p.used.as_ref().and_then(|u| u.amounts.get("gpu")).copied().unwrap_or(0)).sum()
    }

    #[test]
    fn queue_usage_is_what_the_scheduler_counts() {
        let s = preempting();
        let by_name: BTreeMap<String, u64> =
            queues(&s).iter().map(|q| (q.queue.as_ref().unwrap().name.clone(), gpus_used(q))).collect();
        // The stopping victim's resources are held for the preemptor: the preemptor's
        // queue is charged, the victim's is not (as the quota check sees it).
        assert_eq!(by_name["a"], 0, "{by_name:?}");
        assert_eq!(by_name["b"], 4, "{by_name:?}");
        let l = s.ledger();
        for name in ["a", "b"] {
            let q = l.queue(name).unwrap();
            assert_eq!(
                by_name[name],
                baton_model::ledger::whole_gpus(
                    l.queues[q].usage.iter().map(|v| v[baton_model::ledger::GPU_KIND]).sum::<u64>()
                ),
                "queue {name}"
            );
        }
        let running: BTreeMap<String, u32> =
            queues(&s).iter().map(|q| (q.queue.as_ref().unwrap().name.clone(), q.running)).collect();
        assert_eq!(running["a"], 1, "a stopping job still counts as running");
    }
}
