//! Elastic gangs at scale (decisions.md section 13; numbers in BENCHMARKS.md):
//! - `elastic/64-gpu-gang-full-cluster-{rigid,elastic}`: the cycle that plans a preemption
//!   for an 8x8-GPU gang on the full 10,000-node cluster, its running gangs rigid, and the
//!   same cluster with every gang elastic down to one node (each running gang's replicas
//!   above its minimum are split off as a candidate of their own while the plan is made).
//! - `elastic/admit-smaller-full-cluster`: a cycle that admits a 64-replica gang (one GPU
//!   each, at least 1) on the same cluster at the largest size the free GPUs hold (bisection).

mod cluster;

use std::hint::black_box;

use baton_model::command::Op;
use baton_model::elastic::ElasticSpec;
use baton_model::plan::Decision;
use baton_model::state::State;
use baton_sched::cycle;
use cluster::*;
use criterion::{Criterion, criterion_group, criterion_main};

fn describe(name: &str, s: &State) {
    let plan = cycle(s, NOW_MS);
    let count = |f: fn(&Decision) -> usize| plan.decisions.iter().map(f).sum::<usize>();
    let whole = count(|d| match d {
        Decision::Preempt { victims, .. } | Decision::PreemptShrinking { victims, .. } => victims.len(),
        _ => 0,
    });
    let shrunk = count(|d| if let Decision::PreemptShrinking { shrunk, .. } = d { shrunk.len() } else { 0 });
    let gangs = s.elastic_gangs().len();
    eprintln!("{name}: {gangs} elastic gangs kept; the plan takes {whole} jobs whole and shrinks {shrunk}");
}

fn bench_preempt(c: &mut Criterion) {
    let rigid = full_cluster_of(false);
    let elastic = full_cluster_of(true);
    describe("elastic/64-gpu-gang-full-cluster-rigid", &rigid);
    describe("elastic/64-gpu-gang-full-cluster-elastic", &elastic);
    let mut g = c.benchmark_group("elastic");
    g.sample_size(20);
    g.bench_function("64-gpu-gang-full-cluster-rigid", |b| b.iter(|| black_box(cycle(black_box(&rigid), NOW_MS))));
    g.bench_function("64-gpu-gang-full-cluster-elastic", |b| b.iter(|| black_box(cycle(black_box(&elastic), NOW_MS))));
    // A gang of 64 one-GPU replicas, at least 1, on the cluster with 40 GPUs freed by
    // single-GPU jobs that ended: it fits with 40.
    let mut admit = rigid.clone();
    let big = admit.job_by_name("big-gang").expect("the gang was submitted").id;
    apply(&mut admit, Op::Cancel { job: big });
    let ones: Vec<(u64, u32)> = admit
        .jobs()
        .values()
        .filter(|j| j.state == baton_model::job::JobState::Running && j.gpus() == 1)
        .map(|j| (j.id, j.attempt))
        .collect();
    let free = |s: &State| s.ledger().nodes.iter().map(|n| u64::from(n.free_gpu_count())).sum::<u64>();
    for (job, attempt) in ones {
        if free(&admit) >= 40 {
            break;
        }
        apply(&mut admit, Op::JobExited { job, attempt, exit_code: 0 });
    }
    let spec = job("wide".into(), "urgent".into(), "interactive", 64, 1);
    let elastic_spec = ElasticSpec { task: 0, min_replicas: 1 };
    apply(&mut admit, Op::SubmitElastic { spec, elastic: elastic_spec, request_id: None, run_as: None, after: vec![] });
    let plan = cycle(&admit, NOW_MS);
    let placed: usize =
        plan.decisions.iter().map(|d| if let Decision::Place { replicas, .. } = d { replicas.len() } else { 0 }).sum();
    eprintln!(
        "elastic/admit-smaller-full-cluster: {} GPUs free; the 64-replica gang is admitted with {placed} replicas",
        free(&admit)
    );
    assert!(placed > 0 && placed < 64, "it fits smaller: {plan:?}");
    g.bench_function("admit-smaller-full-cluster", |b| b.iter(|| black_box(cycle(black_box(&admit), NOW_MS))));
    g.finish();
}

criterion_group!(benches, bench_preempt);
criterion_main!(benches);
