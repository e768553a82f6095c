//! What publishing the agents' directives costs the leader at 10,000 nodes with 40,000 jobs
//! running: the whole computation (every round before issue 37) against the kept lists'
//! update after one change and after none; and a new leader's first publish (every node's
//! list), from nothing and from lists kept warm while it followed.

use std::time::{Duration, Instant};

mod running;

use baton_model::command::Op;
use baton_model::job::JobId;
use baton_model::state::State;
use baton_server::desired::{Desired, desired};
use criterion::{Criterion, criterion_group, criterion_main};
use running::{NODES, apply, running_cluster};

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
