//! A leader's round after one change, as `baton server` runs it: clone the state (the
//! snapshot a round plans on), run the cycle, drop the clone that the previous round
//! planned on. The change is one running job's exit on the 10,000-node cluster of the cycle
//! benchmarks with 42,386 jobs waiting: a job or a few are placed, and the waiting jobs'
//! reasons (which name how much is free) change for up to 28,000 of them, whose old
//! versions are freed when the older snapshot goes. `apply-after-one-exit` times the
//! applies of the same rounds' plans, which every replica runs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::cluster::*;
use baton_model::command::Op;
use baton_model::job::JobState;
use baton_sched::cycle;
use criterion::{Criterion, criterion_group};

/// What `rounds` rounds cost: the rounds alone (the clone, the cycle, the older clone
/// dropped), and the plans' applies, which every replica runs; and their decisions.
#[derive(Default)]
struct Spent {
    rounds: Duration,
    applies: Duration,
    decisions: usize,
}

/// Runs `rounds` rounds, each after one more running job's exit (the exits themselves are
/// not timed).
fn rounds(start: &baton_model::state::State, rounds: u64) -> Spent {
    let mut s = start.clone();
    let mut previous = s.clone();
    let running: Vec<_> =
        s.jobs().values().filter(|j| j.state == JobState::Running).map(|j| (j.id, j.attempt)).collect();
    let mut spent = Spent::default();
    for &(job, attempt) in running.iter().cycle().take(rounds as usize) {
        apply(&mut s, Op::JobExited { job, attempt, exit_code: 0 });
        let began = Instant::now();
        let snapshot = s.clone();
        let plan = cycle(&snapshot, NOW_MS);
        drop(std::mem::replace(&mut previous, snapshot));
        spent.rounds += began.elapsed();
        spent.decisions += plan.decisions.len();
        let began = Instant::now();
        apply(&mut s, Op::ApplyPlan(black_box(plan)));
        spent.applies += began.elapsed();
    }
    spent
}

fn bench_rounds(c: &mut Criterion) {
    let mut full = with_backlog(10_000);
    // Settled: the first cycle on this state gives reasons to 1,248 jobs.
    let plan = cycle(&full, NOW_MS);
    apply(&mut full, Op::ApplyPlan(plan));
    let sample = rounds(&full, 20);
    eprintln!("round/10k-nodes-42k-waiting-after-one-exit: {} decisions a round (20 rounds)", sample.decisions / 20);
    let mut g = c.benchmark_group("round");
    g.sample_size(10).measurement_time(Duration::from_secs(30));
    g.bench_function("10k-nodes-42k-waiting-after-one-exit", |b| b.iter_custom(|n| rounds(&full, n).rounds));
    g.bench_function("10k-nodes-42k-waiting-apply-after-one-exit", |b| b.iter_custom(|n| rounds(&full, n).applies));
    g.finish();
}

criterion_group!(benches, bench_rounds);
