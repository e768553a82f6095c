//! Plain specs for tests: a one-task GPU job, a GPU node and a queue with a GPU quota in pool
//! `default`, every other field at its everyday value, so that a test spells out only what it is about
//! (`JobSpec { env, ..gpu_job("j", "q", 1) }`).

use std::collections::BTreeMap;

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
