//! A deterministic big cluster for benchmarks and the `probe` example: 8-GPU nodes in racks,
//! 200 queues in 20 cohorts, and a backlog of 1/2/4/8-GPU jobs and 2-8-node gangs.

#![allow(dead_code)] // each user takes what it needs

use std::collections::BTreeMap;

use baton_model::command::{Command, Op};
use baton_model::fixture;
use baton_model::job::{JobSpec, JobState, PreemptionMode, PriorityRef, TaskSpec};
use baton_model::limits::MAX_NODES_PER_COMMAND;
use baton_model::name::Name;
use baton_model::node::NodeSpec;
use baton_model::plan::Decision;
use baton_model::queue::{Cohort, QueueSpec};
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_sched::cycle;

pub const NOW_MS: u64 = 1_000_000;

/// A deterministic generator (no randomness crate needed, and every run is the same).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

pub fn apply(s: &mut State, op: Op) {
    s.apply(Command { now_ms: NOW_MS, op }).expect("benchmark setup is valid");
}

/// `nodes` 8-GPU nodes in `racks` racks, 200 queues in 20 cohorts sharing all but 64 GPUs
/// as guarantees, and a queue `urgent` guaranteed the last 64.
pub fn cluster(nodes: usize, racks: usize) -> State {
    let mut s = State::new();
    s.set_retain_finished(0);
    let specs: Vec<NodeSpec> = (0..nodes)
        .map(|i| NodeSpec {
            name: Name::lit(&format!("n{i}")),
            pool: Name::lit("default"),
            rack: Some(Name::lit(&format!("r{}", i * racks / nodes))),
            labels: BTreeMap::new(),
            resources: Resources::of(&[("gpu", 8), ("cpu", 128), ("memory", 1 << 40)]),
            gpus: Vec::new(),
            agent_addr: String::new(),
        })
        .collect();
    for chunk in specs.chunks(MAX_NODES_PER_COMMAND) {
        apply(&mut s, Op::RegisterNodes(chunk.to_vec()));
    }
    for c in 0..20 {
        apply(&mut s, Op::PutCohort(Cohort { name: Name::lit(&format!("c{c}")), parent: None, fair_sharing: false }));
    }
    let per_queue = (nodes as u64 * 8 - 64) / 200;
    for q in 0..200 {
        let spec = QueueSpec {
            cohort: Some(Name::lit(&format!("c{}", q / 10))),
            ..fixture::gpu_queue(&format!("q{q}"), per_queue)
        };
        apply(&mut s, Op::PutQueue(spec));
    }
    apply(&mut s, Op::PutQueue(fixture::gpu_queue("urgent", 64)));
    s
}

pub fn job(name: String, queue: String, class: &str, replicas: u32, gpus: u64) -> JobSpec {
    JobSpec {
        name: Name::new(name).unwrap(),
        queue: Name::new(queue).unwrap(),
        priority: PriorityRef::Class(Name::lit(class)),
        tasks: vec![TaskSpec {
            name: Name::lit("main"),
            replicas,
            resources: Resources::of(&[("gpu", gpus), ("cpu", gpus * 8), ("memory", gpus << 36)]),
            pools: None,
        }],
        pools: None,
        topology: None,
        preemption_mode: PreemptionMode::Checkpoint,
        grace_ms: 30_000,
        min_runtime_ms: 0,
        time_limit_ms: None,
        command: Vec::new(),
        env: BTreeMap::new(),
        checkpoint_signal: None,
    }
}

/// The backlog: 80% single jobs of 1, 2, 4 or 8 GPUs, 20% gangs of 2 to 8 whole nodes.
pub fn submit_backlog(s: &mut State, jobs: usize, seed: u64) {
    submit_backlog_of(s, jobs, seed, false);
}

/// `submit_backlog`, each job run as one of `users` Unix users `u0`.. (drawn after the
/// job, so the jobs are the same): decisions.md section 12 orders them by user.
pub fn submit_backlog_as(s: &mut State, jobs: usize, seed: u64, users: u64) {
    let mut rng = Lcg(seed);
    let mut who = Lcg(seed ^ 0x5eed);
    for i in 0..jobs {
        let spec = backlog_job(&mut rng, i);
        let run_as = Some(baton_model::tenancy::UnixUser::new(format!("u{}", who.next(users))).unwrap());
        apply(s, Op::SubmitAfter { spec, request_id: None, run_as, after: Vec::new() });
    }
}

/// The jobs `submit_backlog` submits, in order.
pub fn backlog_specs(jobs: usize, seed: u64) -> Vec<JobSpec> {
    let mut rng = Lcg(seed);
    (0..jobs).map(|i| backlog_job(&mut rng, i)).collect()
}

/// The `i`th job of a backlog drawn from `rng`.
fn backlog_job(rng: &mut Lcg, i: usize) -> JobSpec {
    let queue = format!("q{}", rng.next(200));
    let class = if rng.next(2) == 0 { "train" } else { "interactive" };
    if rng.next(10) < 2 {
        job(format!("job-{i}"), queue, class, 2 + rng.next(7) as u32, 8)
    } else {
        job(format!("job-{i}"), queue, class, 1, [1, 2, 4, 8][rng.next(4) as usize])
    }
}

/// `submit_backlog`, its gangs elastic down to one node when `elastic` (decisions.md
/// section 13): the same jobs, drawn the same way.
pub fn submit_backlog_of(s: &mut State, jobs: usize, seed: u64, elastic: bool) {
    let mut rng = Lcg(seed);
    for i in 0..jobs {
        let spec = backlog_job(&mut rng, i);
        let op = if elastic && spec.tasks[0].replicas > 1 {
            let elastic = baton_model::elastic::ElasticSpec { task: 0, min_replicas: 1 };
            Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: Vec::new() }
        } else {
            Op::Submit { spec, request_id: None }
        };
        apply(s, op);
    }
}

pub fn placements(s: &State) -> usize {
    cycle(s, NOW_MS).decisions.iter().filter(|d| matches!(d, Decision::Place { .. })).count()
}

/// The cluster after its backlog was placed and what could not be placed was cancelled.
pub fn full_cluster() -> State {
    full_cluster_of(false)
}

/// `full_cluster`, its gangs elastic (each may shrink to one node) when `elastic`.
pub fn full_cluster_of(elastic: bool) -> State {
    let mut s = cluster(10_000, 40);
    submit_backlog_of(&mut s, 50_000, 7, elastic);
    let plan = cycle(&s, NOW_MS);
    apply(&mut s, Op::ApplyPlan(plan));
    let pending: Vec<_> = s.jobs().values().filter(|j| j.state == JobState::Pending).map(|j| j.id).collect();
    for job in pending {
        apply(&mut s, Op::Cancel { job });
    }
    let gang = job("big-gang".into(), "urgent".into(), "interactive", 8, 8);
    apply(&mut s, Op::Submit { spec: gang, request_id: None });
    s
}

/// The cluster after one cycle placed what it could of a 5-jobs-per-node backlog; the rest
/// still waits (the leader's steady state with a long backlog).
pub fn with_backlog(nodes: usize) -> State {
    let mut s = cluster(nodes, 40);
    submit_backlog(&mut s, nodes * 5, 7);
    let plan = cycle(&s, NOW_MS);
    apply(&mut s, Op::ApplyPlan(plan));
    s
}

/// `baton bench scale`'s cluster: one queue (lower priorities preempted within it) on
/// `nodes` nodes of `gpus` GPUs, full of one-GPU `train` jobs, as many again waiting, then
/// `urgent` one-GPU `interactive` jobs.
pub fn one_queue_full_then_urgent(nodes: usize, gpus: u64, urgent: usize) -> State {
    let mut s = State::new();
    s.set_retain_finished(0);
    let specs: Vec<NodeSpec> = (0..nodes).map(|i| fixture::gpu_node(&format!("n{i}"), gpus)).collect();
    for chunk in specs.chunks(MAX_NODES_PER_COMMAND) {
        apply(&mut s, Op::RegisterNodes(chunk.to_vec()));
    }
    // Lower priorities are preempted within a queue by default.
    apply(&mut s, Op::PutQueue(fixture::gpu_queue("bench", nodes as u64 * gpus * 2)));
    let one = |name: String, class: &str| {
        let mut spec = fixture::gpu_job(&name, "bench", 1);
        spec.priority = PriorityRef::Class(Name::lit(class));
        Op::Submit { spec, request_id: None }
    };
    let running = nodes * gpus as usize;
    for i in 0..running + running / 4 {
        apply(&mut s, one(format!("c{i}"), "train"));
    }
    let plan = cycle(&s, NOW_MS);
    apply(&mut s, Op::ApplyPlan(plan));
    for i in 0..urgent {
        apply(&mut s, one(format!("u{i}"), "interactive"));
    }
    s
}
