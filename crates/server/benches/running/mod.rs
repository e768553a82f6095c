//! The cluster the server's benchmarks run on: 10,000 4-GPU nodes, each running four 1-GPU
//! jobs placed by a real cycle (40,000 running).

use baton_model::command::{Command, Op};
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::job::JobId;
use baton_model::limits::MAX_NODES_PER_COMMAND;
use baton_model::state::State;

pub const NODES: usize = 10_000;
pub const JOBS_PER_NODE: usize = 4;

pub fn apply(s: &mut State, op: Op) {
    let now_ms = s.now_ms() + 1;
    s.apply(Command { now_ms, op }).expect("benchmark setup is valid");
}

/// 10,000 4-GPU nodes, each running four 1-GPU jobs placed by a real cycle.
pub fn running_cluster() -> (State, Vec<JobId>) {
    let mut s = State::new();
    let nodes: Vec<_> = (0..NODES).map(|i| gpu_node(&format!("n{i:05}"), JOBS_PER_NODE as u64)).collect();
    for chunk in nodes.chunks(MAX_NODES_PER_COMMAND) {
        apply(&mut s, Op::RegisterNodes(chunk.to_vec()));
    }
    apply(&mut s, Op::PutQueue(gpu_queue("q", (NODES * JOBS_PER_NODE) as u64)));
    for i in 0..NODES * JOBS_PER_NODE {
        apply(&mut s, Op::Submit { spec: gpu_job(&format!("j{i}"), "q", 1), request_id: None });
    }
    let plan = baton_sched::cycle(&s, s.now_ms());
    apply(&mut s, Op::ApplyPlan(plan));
    let running: Vec<JobId> = s.jobs().values().filter(|j| !j.replicas.is_empty()).map(|j| j.id).collect();
    assert_eq!(running.len(), NODES * JOBS_PER_NODE, "every job runs");
    (s, running)
}
