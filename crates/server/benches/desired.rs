//! What publishing the agents' directives costs the leader at 10,000 nodes with 40,000 jobs
//! running: the whole computation (every round before issue 37) against the kept lists'
//! update after one change and after none; and a new leader's first publish (every node's
//! list), from nothing and from lists kept warm while it followed.

use std::time::{Duration, Instant};

use baton_model::command::{Command, Op};
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::job::JobId;
use baton_model::limits::MAX_NODES_PER_COMMAND;
use baton_model::state::State;
use baton_server::desired::{Desired, desired};
use criterion::{Criterion, criterion_group, criterion_main};

const NODES: usize = 10_000;
const JOBS_PER_NODE: usize = 4;

fn apply(s: &mut State, op: Op) {
    let now_ms = s.now_ms() + 1;
    s.apply(Command { now_ms, op }).expect("benchmark setup is valid");
}

/// 10,000 4-GPU nodes, each running four 1-GPU jobs placed by a real cycle.
fn running_cluster() -> (State, Vec<JobId>) {
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

fn bench(c: &mut Criterion) {
    let (base, running) = running_cluster();
    let mut g = c.benchmark_group("desired");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("10k-nodes-40k-running-whole", |b| b.iter(|| desired(&base).len()));

    let mut kept = Desired::default();
    kept.update(&base);
    g.bench_function("10k-nodes-40k-running-kept-nothing-changed", |b| b.iter(|| kept.update(&base).len()));

    // One running job cancelled before each update (untimed); a fresh copy once all are.
    g.bench_function("10k-nodes-40k-running-kept-one-cancel", |b| {
        b.iter_custom(|iters| after_each_cancel(&base, &running, iters, |kept, s| kept.update(s).len(), 1))
    });

    g.bench_function("10k-nodes-40k-running-new-term-cold", |b| b.iter(|| Desired::default().update_all(&base).len()));

    // Lists kept warm, one running job cancelled since (untimed), then every node's list.
    g.bench_function("10k-nodes-40k-running-new-term-warm-one-cancel", |b| {
        b.iter_custom(|iters| after_each_cancel(&base, &running, iters, |kept, s| kept.update_all(s).len(), NODES))
    });
    g.finish();
}

/// The time `update` takes over `iters` calls, each after one more running job of `base` is
/// cancelled (untimed; a fresh copy once all are); each must name `lists` nodes.
fn after_each_cancel(
    base: &State,
    running: &[JobId],
    iters: u64,
    mut update: impl FnMut(&mut Desired, &State) -> usize,
    lists: usize,
) -> Duration {
    let (mut s, mut kept, mut next) = (base.clone(), fresh(base), 0);
    let mut took = Duration::ZERO;
    for _ in 0..iters {
        if next == running.len() {
            (s, kept, next) = (base.clone(), fresh(base), 0);
        }
        apply(&mut s, Op::Cancel { job: running[next] });
        next += 1;
        let began = Instant::now();
        let named = update(&mut kept, &s);
        took += began.elapsed();
        assert_eq!(named, lists, "the lists named after one cancel");
    }
    took
}

fn fresh(s: &State) -> Desired {
    let mut kept = Desired::default();
    kept.update(s);
    kept
}

criterion_group!(benches, bench);
criterion_main!(benches);
