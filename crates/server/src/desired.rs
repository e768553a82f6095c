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
