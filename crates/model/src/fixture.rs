//! Plain specs for tests: a one-task GPU job, a GPU node and a queue with a GPU quota in pool
//! `default`, every other field at its everyday value, so that a test spells out only what it is about
//! (`JobSpec { env, ..gpu_job("j", "q", 1) }`); and a gang's placement one rank per node.

use std::collections::BTreeMap;

use crate::alloc::ReplicaAlloc;
use crate::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec};
use crate::name::Name;
use crate::node::NodeSpec;
use crate::queue::{PoolQuota, QueueSpec};
use crate::resources::Resources;

/// Job `name` in `queue`: one replica of `gpus` GPUs, priority 1, checkpoint mode, 1 s grace,
/// command `train`, no environment, no time limit.
pub fn gpu_job(name: &str, queue: &str, gpus: u64) -> JobSpec {
    JobSpec {
        name: Name::lit(name),
        queue: Name::lit(queue),
        priority: PriorityRef::Value(1),
        tasks: vec![TaskSpec {
            name: Name::lit("main"),
            replicas: 1,
            resources: Resources::of(&[("gpu", gpus)]),
            pools: None,
        }],
        pools: None,
        topology: None,
        preemption_mode: PreemptionMode::Checkpoint,
        grace_ms: 1_000,
        min_runtime_ms: 0,
        command: vec!["train".into()],
        env: BTreeMap::new(),
        checkpoint_signal: None,
        time_limit_ms: None,
    }
}

/// Queue `name` with a nominal quota of `gpus` GPUs in pool `default`, no cohort, every
/// other field at its default (`QueueSpec { cohort, ..gpu_queue("q", 8) }` for more).
pub fn gpu_queue(name: &str, gpus: u64) -> QueueSpec {
    let mut q = QueueSpec::named(name);
    q.quotas.insert(Name::lit("default"), PoolQuota { nominal: Resources::of(&[("gpu", gpus)]), ..Default::default() });
    q
}

/// Node `name` in pool `default` with `gpus` GPUs (no inventory), no rack, no labels, no agent.
pub fn gpu_node(name: &str, gpus: u64) -> NodeSpec {
    NodeSpec {
        name: Name::lit(name),
        pool: Name::lit("default"),
        rack: None,
        labels: BTreeMap::new(),
        resources: Resources::of(&[("gpu", gpus)]),
        gpus: Vec::new(),
        agent_addr: String::new(),
    }
}

/// A one-task gang's placement: rank `i` on node `n{i+1}`, holding GPUs 0 to `gpus` - 1 there.
pub fn one_rank_per_node(ranks: u32, gpus: u32) -> Vec<ReplicaAlloc> {
    (0..ranks)
        .map(|i| ReplicaAlloc { task: 0, index: i, node: Name::lit(&format!("n{}", i + 1)), gpus: (0..gpus).collect() })
        .collect()
}
