//! Scheduling-cycle benchmarks (numbers in BENCHMARKS.md):
//! - `cycle/10k-nodes-50k-jobs`: one full cycle placing a 50,000-job backlog
//!   (1/2/4/8-GPU jobs and 2-8-node gangs) on 10,000 8-GPU nodes in 40 racks, 200 queues
//!   in 20 cohorts. Throughput is placements per second.
//! - `cycle/10k-nodes-full-42k-waiting`: the next cycle: the cluster is full and the rest
//!   of the backlog waits (reasons, preemption planning within queues).
//! - `preempt/64-gpu-gang-full-cluster`: the cycle that plans a preemption for an 8x8-GPU
//!   gang on that cluster once it is full (nothing else pending).
//!   `preempt/full-cluster-nothing-pending` is the same cycle without the gang: the
//!   difference is the planning itself.
//! - `preempt/100-urgent-one-queue-40k-running`: `baton bench scale`'s preemption: 100 urgent
//!   one-GPU jobs arrive at once in one queue of 10,000 4-GPU nodes running 40,000 one-GPU
//!   jobs (10,000 more waiting); each plans a preemption in the same cycle.
//! - `scaling/<nodes>`: the full cycle at 1,000, 10,000 and 50,000 nodes (5 jobs per node).

mod cluster;

use std::hint::black_box;
use std::time::Duration;

use baton_model::plan::Decision;
use baton_sched::cycle;
use cluster::*;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn bench_cycle(c: &mut Criterion) {
    let mut s = cluster(10_000, 40);
    submit_backlog(&mut s, 50_000, 7);
    let placed = placements(&s);
    eprintln!("cycle/10k-nodes-50k-jobs places {placed} of 50000 jobs per cycle");
    let mut g = c.benchmark_group("cycle");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(placed as u64));
    g.bench_function("10k-nodes-50k-jobs", |b| b.iter(|| black_box(cycle(black_box(&s), NOW_MS))));
    let full = with_backlog(10_000);
    let waiting = full.jobs().values().filter(|j| j.state == baton_model::job::JobState::Pending).count();
    eprintln!("cycle/10k-nodes-full-{}k-waiting: {} decisions", waiting / 1000, cycle(&full, NOW_MS).decisions.len());
    g.throughput(Throughput::Elements(waiting as u64));
    g.bench_function(format!("10k-nodes-full-{}k-waiting", waiting / 1000), |b| {
        b.iter(|| black_box(cycle(black_box(&full), NOW_MS)))
    });
    g.finish();
}

fn bench_preempt(c: &mut Criterion) {
    let s = full_cluster();
    let plan = cycle(&s, NOW_MS);
    let victims: usize =
        plan.decisions.iter().map(|d| if let Decision::Preempt { victims, .. } = d { victims.len() } else { 0 }).sum();
    let free: u64 = s.ledger().nodes.iter().map(|n| u64::from(n.free_gpu_count())).sum();
    eprintln!(
        "preempt/64-gpu-gang-full-cluster: {free} GPUs free, the plan preempts {victims} jobs ({} decisions)",
        plan.decisions.len()
    );
    assert!(victims > 0, "the gang must need a preemption: {plan:?}");
    let mut g = c.benchmark_group("preempt");
    g.sample_size(20);
    g.bench_function("64-gpu-gang-full-cluster", |b| b.iter(|| black_box(cycle(black_box(&s), NOW_MS))));
    // The same cycle with nothing pending: what every cycle costs before any planning.
    let mut idle = s.clone();
    let gang = idle.job_by_name("big-gang").expect("the gang was submitted").id;
    apply(&mut idle, baton_model::command::Op::Cancel { job: gang });
    g.bench_function("full-cluster-nothing-pending", |b| b.iter(|| black_box(cycle(black_box(&idle), NOW_MS))));
    // `baton bench scale`'s preemption: one queue of 10,000 4-GPU nodes running 40,000
    // one-GPU jobs, 10,000 more waiting, then 100 urgent one-GPU jobs at once; each plans
    // its own preemption in the same cycle.
    let urgent = one_queue_full_then_urgent(10_000, 4, 100);
    let preempts = cycle(&urgent, NOW_MS).decisions.iter().filter(|d| matches!(d, Decision::Preempt { .. })).count();
    eprintln!("preempt/100-urgent-one-queue-40k-running: {preempts} preemptions planned");
    assert_eq!(preempts, 100, "each urgent job preempts");
    g.bench_function("100-urgent-one-queue-40k-running", |b| b.iter(|| black_box(cycle(black_box(&urgent), NOW_MS))));
    g.finish();
}

fn bench_scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("scaling");
    g.sample_size(10).measurement_time(Duration::from_secs(30));
    for nodes in [1_000usize, 10_000, 50_000] {
        let mut s = cluster(nodes, 40);
        submit_backlog(&mut s, nodes * 5, 11);
        let placed = placements(&s);
        eprintln!("scaling/{nodes}: {placed} placements of {} jobs", nodes * 5);
        g.throughput(Throughput::Elements(placed as u64));
        g.bench_with_input(BenchmarkId::from_parameter(nodes), &s, |b, s| {
            b.iter(|| black_box(cycle(black_box(s), NOW_MS)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_cycle, bench_preempt, bench_scaling);
criterion_main!(benches);
