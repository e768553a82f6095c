//! What each node should be running, computed from the replicated state alone: the agent
//! protocol is declarative, so a new leader only has to compute this again and send it.
//!
//! A pure function of `&State`, tested without any IO.

use std::collections::BTreeMap;

use baton_model::State;
use baton_model::job::{Job, JobState, PreemptionMode, StopWhy};
use baton_model::name::Name;
use baton_proto::v1::{Action, Assignment};

/// Every node with something to run, stop or keep suspended, and its assignments ordered
/// by (job id, rank). Nodes without work are absent (their agents get an empty directive).
pub fn desired(state: &State) -> BTreeMap<Name, Vec<Assignment>> {
    let mut out: BTreeMap<Name, Vec<Assignment>> = BTreeMap::new();
    for job in state.jobs().values() {
        let Some(action) = action(job) else { continue };
        // The granted grace as a duration: the agent counts it from when it first acts on
        // the stop, so no leader's clock (nor a failover) shortens it.
        let grace_ms = job.stopping.map_or(0, |s| s.deadline_ms.saturating_sub(s.requested_ms));
        let run_as = state.tenancy().run_as(job.id).map(|u| u.to_string()).unwrap_or_default();
        // The model's rank order: its gang rules check reports against it.
        let replicas = job.ranked();
        let world_size = replicas.len() as u32;
        for (rank, r) in replicas.into_iter().enumerate() {
            let a = Assignment {
                job_id: job.id,
                job: job.spec.name.to_string(),
                attempt: job.attempt,
                task: r.task,
                replica: r.index,
                rank: rank as u32,
                world_size,
                action: action as i32,
                gpus: r.gpus.clone(),
                command: job.spec.command.clone(),
                env: job.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                checkpoint_signal: job
                    .spec
                    .checkpoint_signal
                    .clone()
                    .unwrap_or_else(|| baton_proto::DEFAULT_CHECKPOINT_SIGNAL.into()),
                grace_ms,
                resume: job.has_checkpoint,
                run_as: run_as.clone(),
            };
            out.entry(r.node.clone()).or_default().push(a);
        }
    }
    out
}

/// What the agents should do with a job's processes; `None`: nothing may run.
fn action(job: &Job) -> Option<Action> {
    match job.state {
        JobState::Running => Some(Action::Run),
        JobState::Suspended => Some(Action::Suspend),
        JobState::Preempting => match job.stopping.map(|s| s.why) {
            Some(StopWhy::Preempted { mode: PreemptionMode::Suspend, .. }) => Some(Action::Suspend),
            _ => Some(Action::Stop),
        },
        JobState::Pending | JobState::Paused | JobState::Succeeded | JobState::Failed | JobState::Cancelled => None,
    }
}

#[cfg(test)]
mod tests {
    use baton_model::command::{Command, Op};
    use baton_model::fixture::{gpu_job, gpu_node};
    use baton_model::job::TaskSpec;
    use baton_model::queue::{PoolQuota, QueueSpec};
    use baton_model::resources::Resources;

    use super::*;

    fn apply(s: &mut State, now_ms: u64, op: Op) {
        s.apply(Command { now_ms, op }).expect("the command applies");
    }

    /// Two 4-GPU nodes, a queue owning all 8 GPUs, and a two-replica job of 4 GPUs each
    /// placed by a real cycle: one replica per node.
    fn running_gang() -> (State, u64) {
        let mut s = State::default();
        apply(&mut s, 1_000, Op::RegisterNodes(vec![gpu_node("n1", 4), gpu_node("n2", 4)]));
        let mut q = QueueSpec::named("q");
        q.quotas
            .insert(Name::lit("default"), PoolQuota { nominal: Resources::of(&[("gpu", 8)]), ..Default::default() });
        apply(&mut s, 1_000, Op::PutQueue(q));
        let mut spec = gpu_job("gang", "q", 4);
        spec.tasks = vec![TaskSpec { replicas: 2, ..spec.tasks[0].clone() }];
        spec.grace_ms = 7_000;
        apply(&mut s, 2_000, Op::Submit { spec, request_id: None });
        let plan = baton_sched::cycle(&s, 2_000);
        apply(&mut s, 2_000, Op::ApplyPlan(plan));
        let id = s.job_by_name("gang").expect("submitted").id;
        assert_eq!(s.jobs()[&id].state, JobState::Running);
        (s, id)
    }

    #[test]
    fn a_running_gang_is_one_ranked_run_per_replica_on_its_nodes() {
        let (s, id) = running_gang();
        let d = desired(&s);
        assert_eq!(d.keys().map(|n| n.as_str()).collect::<Vec<_>>(), ["n1", "n2"]);
        let all: Vec<&Assignment> = d.values().flatten().collect();
        let mut ranks: Vec<u32> = all.iter().map(|a| a.rank).collect();
        ranks.sort();
        assert_eq!(ranks, [0, 1]);
        for a in all {
            assert_eq!((a.job_id, a.attempt, a.world_size), (id, 1, 2));
            assert_eq!(a.action, Action::Run as i32);
            assert_eq!(a.gpus.len(), 4);
            assert_eq!(a.checkpoint_signal, baton_proto::DEFAULT_CHECKPOINT_SIGNAL);
            assert_eq!((a.grace_ms, a.resume, a.run_as.as_str()), (0, false, ""), "no stop, no checkpoint, no token");
        }
    }

    #[test]
    fn a_pausing_job_is_told_to_stop_with_its_grace_as_a_duration() {
        let (mut s, id) = running_gang();
        apply(&mut s, 50_000, Op::Pause { job: id });
        let d = desired(&s);
        let all: Vec<&Assignment> = d.values().flatten().collect();
        assert_eq!(all.len(), 2);
        for a in all {
            assert_eq!(a.action, Action::Stop as i32);
            assert_eq!(a.grace_ms, 7_000, "the grace, not a deadline on the leader's clock");
        }
    }

    #[test]
    fn a_cancelled_job_is_desired_nowhere() {
        let (mut s, id) = running_gang();
        apply(&mut s, 3_000, Op::Cancel { job: id });
        assert!(desired(&s).is_empty(), "{:?}", desired(&s));
    }
}
