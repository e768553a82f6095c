//! Topology-level benchmarks (decisions.md section 10; numbers in BENCHMARKS.md):
//! - `topology/10k-nodes-3-levels-50k-jobs`: one full cycle placing the `cycle` bench's
//!   50,000-job backlog on the same 10,000 8-GPU nodes, declared in three levels (NVLink
//!   domains of 9 nodes, 40 racks, 4 zones), with every gang requiring `nvlink` and
//!   preferring nothing, or only preferring `rack` (alternately). Throughput is placements
//!   per second.
//! - `topology/64-gpu-nvlink-gang-full-cluster`: the cycle that plans a preemption for an
//!   8x8-GPU gang that requires one NVLink domain, on that cluster once it is full.
//! - `topology/10k-nodes-3-levels-20pct-fractions`: the first bench with one job in five
//!   asking a fraction of a shared GPU instead (a quarter, a half or three quarters per
//!   replica; decisions.md section 11), and CPUs and memory in proportion to that fraction,
//!   as every other job asks them per GPU.
//! - `topology/10k-nodes-3-levels-20pct-fractions-stranded`: the same, the fractional jobs
//!   keeping the CPUs and memory of the whole GPUs they replace (a quarter GPU with 64 CPUs):
//!   they take nodes' memory and leave their GPUs free, and every GPU job then looks at those
//!   nodes (the index buckets nodes by free GPUs) and passes them over.

mod cluster;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use baton_model::command::Op;
use baton_model::job::JobState;
use baton_model::limits::MAX_NODES_PER_COMMAND;
use baton_model::name::Name;
use baton_model::plan::Decision;
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_model::topology::{LevelName, LevelNeed};
use baton_sched::cycle;
use cluster::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const NODES: usize = 10_000;
/// Nodes per NVLink domain: 72 GPUs, as an NVL72's.
const PER_NVLINK: usize = 9;
const ZONES: usize = 4;

fn level(name: &str) -> LevelName {
    LevelName::new(name).expect("valid")
}

/// `cluster(NODES, 40)` with levels `[nvlink, rack, zone]` declared and named per node.
fn leveled_cluster() -> State {
    let mut s = cluster(NODES, 40);
    apply(&mut s, Op::SetTopologyLevels(vec![level("nvlink"), level("rack"), level("zone")]));
    let domains: Vec<_> = (0..NODES)
        .map(|i| {
            let d = BTreeMap::from([
                (level("nvlink"), Name::lit(&format!("nvl{}", i / PER_NVLINK))),
                (level("zone"), Name::lit(&format!("z{}", i * ZONES / NODES))),
            ]);
            (Name::lit(&format!("n{i}")), d)
        })
        .collect();
    for chunk in domains.chunks(MAX_NODES_PER_COMMAND) {
        apply(&mut s, Op::SetNodeDomains(chunk.to_vec()));
    }
    s
}

/// The `cycle` bench's backlog, its gangs given levels: even ones require `nvlink`, odd
/// ones prefer `rack`.
fn submit_leveled_backlog(s: &mut State, fractions: Fractions) {
    let mut gangs = 0;
    for (i, mut spec) in backlog_specs(50_000, 7).into_iter().enumerate() {
        if fractions != Fractions::None && i % 5 == 0 {
            let milli = 250 * (1 + (i as u64 / 5) % 3);
            let r = &mut spec.tasks[0].resources;
            r.set("gpu", 0);
            if fractions == Fractions::Proportional {
                // The backlog's 8 CPUs and 64 GiB per GPU, for the fraction.
                *r = Resources::of(&[("cpu", 8 * milli / 1000), ("memory", (milli << 36) / 1000)]);
            }
            r.set_gpus_milli(milli);
        }
        if spec.tasks[0].replicas > 1 {
            let t = if gangs % 2 == 0 { "required=nvlink" } else { "preferred=rack" };
            spec.topology = LevelNeed::parse(t).expect("valid");
            gangs += 1;
        }
        apply(s, Op::Submit { spec, request_id: None });
    }
}

/// Which of the backlog's jobs ask a fraction of a GPU, and what else they ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fractions {
    None,
    /// One in five, CPUs and memory in proportion to the fraction.
    Proportional,
    /// One in five, CPUs and memory of the whole GPUs they replace.
    Stranded,
}

/// The leveled cluster with its backlog (one job in five a fraction unless `Fractions::None`),
/// and its first cycle measured as `topology/NAME`, in placements per second.
fn first_cycle(c: &mut Criterion, name: &str, fractions: Fractions) -> State {
    let mut s = leveled_cluster();
    submit_leveled_backlog(&mut s, fractions);
    let placed = placements(&s);
    eprintln!("topology/{name} places {placed} of 50000 jobs per cycle");
    let mut g = c.benchmark_group("topology");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(placed as u64));
    g.bench_function(name, |b| b.iter(|| black_box(cycle(black_box(&s), NOW_MS))));
    g.finish();
    s
}

fn bench_fractions(c: &mut Criterion) {
    first_cycle(c, "10k-nodes-3-levels-20pct-fractions", Fractions::Proportional);
    first_cycle(c, "10k-nodes-3-levels-20pct-fractions-stranded", Fractions::Stranded);
}

fn bench_levels(c: &mut Criterion) {
    let mut s = first_cycle(c, "10k-nodes-3-levels-50k-jobs", Fractions::None);
    let mut g = c.benchmark_group("topology");
    g.measurement_time(Duration::from_secs(20));

    // Full: what the backlog placed runs, the rest is cancelled; then the urgent gang.
    let plan = cycle(&s, NOW_MS);
    apply(&mut s, Op::ApplyPlan(plan));
    let pending: Vec<_> = s.jobs().values().filter(|j| j.state == JobState::Pending).map(|j| j.id).collect();
    for job in pending {
        apply(&mut s, Op::Cancel { job });
    }
    let mut gang = job("nvl-gang".into(), "urgent".into(), "interactive", 8, 8);
    gang.topology = LevelNeed::parse("required=nvlink").expect("valid");
    apply(&mut s, Op::Submit { spec: gang, request_id: None });
    let plan = cycle(&s, NOW_MS);
    let victims: usize =
        plan.decisions.iter().map(|d| if let Decision::Preempt { victims, .. } = d { victims.len() } else { 0 }).sum();
    eprintln!("topology/64-gpu-nvlink-gang-full-cluster: the plan preempts {victims} jobs");
    assert!(victims > 0, "the gang must need a preemption: {plan:?}");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    g.bench_function("64-gpu-nvlink-gang-full-cluster", |b| b.iter(|| black_box(cycle(black_box(&s), NOW_MS))));
    g.finish();
}

criterion_group!(benches, bench_levels, bench_fractions);
criterion_main!(benches);
