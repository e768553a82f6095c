//! One-shot timing of the scheduling cycle on a generated cluster, for profiling:
//! `cargo run --release -p baton-sched --example probe -- 10000` (nodes; 5 jobs per node);
//! a second argument `first` runs only the first cycle, `steady` only the next one (the
//! cluster full, the rest of the backlog waiting), `gang` only the 64-GPU gang's
//! preemption cycle on the full 10,000-node cluster, `urgent` the cycle that plans 100
//! one-GPU preemptions on a full cluster of one-GPU jobs (`baton bench scale`'s preemption
//! phase); a third argument repeats that cycle.
//! `plans` prints the plans of the first two cycles and of the gang's cycle as JSON.
//! The benchmark (`cargo bench -p baton-sched`) gives the figures; this gives a quick look.

#[path = "../benches/cluster.rs"]
mod cluster;

use std::time::Instant;

use baton_model::command::Op;
use baton_model::plan::Decision;
use baton_sched::cycle;
use cluster::*;

/// One cycle, kept out of line so that a profiler can collect exactly this call.
#[inline(never)]
fn measured(s: &baton_model::state::State) -> baton_model::plan::Plan {
    cycle(s, NOW_MS)
}

/// How many times the `first` and `gang` modes run their cycle (third argument, default 1):
/// a profiler needs many cycles to outweigh building the cluster.
fn repeat() -> u32 {
    std::env::args().nth(3).map_or(1, |a| a.parse().expect("a repeat count"))
}

/// Runs `f` `repeat()` times; the fastest and the median run.
fn timed<T>(mut f: impl FnMut() -> T) -> String {
    let mut runs: Vec<std::time::Duration> = (0..repeat())
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect();
    runs.sort();
    format!("min {:?} median {:?} ({} runs)", runs[0], runs[runs.len() / 2], runs.len())
}

/// `baton bench scale`'s preemption phase as one state: `nodes` nodes of 32 GPUs full of
/// one-GPU `train` jobs of one queue, 4,000 more waiting, and 100 one-GPU `interactive`
/// jobs that can run only by preempting (the queue preempts lower priorities).
fn urgent_cluster(nodes: usize) -> baton_model::state::State {
    use baton_model::fixture;
    use baton_model::queue::WithinQueue;
    let mut s = baton_model::state::State::new();
    s.set_retain_finished(0);
    let specs: Vec<_> = (0..nodes).map(|i| fixture::gpu_node(&format!("n{i}"), 32)).collect();
    for chunk in specs.chunks(baton_model::limits::MAX_NODES_PER_COMMAND) {
        apply(&mut s, Op::RegisterNodes(chunk.to_vec()));
    }
    let mut q = fixture::gpu_queue("bench", nodes as u64 * 32);
    q.preemption.within_queue = WithinQueue::LowerPriority;
    apply(&mut s, Op::PutQueue(q));
    let one_gpu = |name: String, class: &str| baton_model::job::JobSpec {
        priority: baton_model::job::PriorityRef::Class(baton_model::Name::lit(class)),
        ..fixture::gpu_job(&name, "bench", 1)
    };
    for i in 0..nodes * 32 + 4_000 {
        apply(&mut s, Op::Submit { spec: one_gpu(format!("c{i}"), "train"), request_id: None });
    }
    let plan = cycle(&s, NOW_MS);
    apply(&mut s, Op::ApplyPlan(plan));
    for i in 0..100 {
        apply(&mut s, Op::Submit { spec: one_gpu(format!("u{i}"), "interactive"), request_id: None });
    }
    s
}

fn main() {
    let nodes: usize = std::env::args().nth(1).map_or(10_000, |a| a.parse().expect("a node count"));
    if std::env::args().nth(2).as_deref() == Some("urgent") {
        // The cycle that plans 100 one-GPU preemptions in a full cluster of one-GPU jobs.
        let s = urgent_cluster(nodes);
        let plan = cycle(&s, NOW_MS);
        let preempts = plan.decisions.iter().filter(|d| matches!(d, Decision::Preempt { .. })).count();
        println!("urgent cycle: {preempts} preemptions, {}", timed(|| measured(&s)));
        let mut after = s.clone();
        let victims: Vec<_> = plan
            .decisions
            .iter()
            .flat_map(|d| match d {
                Decision::Preempt { victims, .. } => victims.clone(),
                _ => Vec::new(),
            })
            .collect();
        apply(&mut after, Op::ApplyPlan(plan));
        println!("the cycle after it (victims leaving) {}", timed(|| measured(&after)));
        // Each victim's agent reports it stopped with a checkpoint: the next cycle places the
        // preemptors on what they freed.
        for v in victims {
            let node = after.job(v.job).expect("a victim").replicas[0].node.clone();
            let stopped =
                baton_model::command::Observed::Stopped { job: v.job, attempt: v.attempt, rank: 0, checkpointed: true };
            apply(&mut after, Op::Report { node, observations: vec![stopped] });
        }
        let plan = cycle(&after, NOW_MS);
        let placed = plan.decisions.iter().filter(|d| matches!(d, Decision::Place { .. })).count();
        println!("once the victims stopped: {placed} placements, {}", timed(|| measured(&after)));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("gang") {
        // Only the cycle that plans the 64-GPU gang's preemption on the full cluster, for
        // profilers (collect `probe::measured`); the cluster is always 10,000 nodes.
        let full = full_cluster();
        println!("gang cycle {}", timed(|| measured(&full)));
        let mut idle = full.clone();
        let gang = idle.job_by_name("big-gang").expect("the gang was submitted").id;
        apply(&mut idle, Op::Cancel { job: gang });
        println!("same cycle, nothing pending {}", timed(|| cycle(&idle, NOW_MS)));
        println!("ledger clone, gang state {}", timed(|| full.ledger().clone()));
        println!("ledger clone, idle state {}", timed(|| idle.ledger().clone()));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("steady") {
        // Only the steady cycle (cluster full, the rest of the backlog waiting), for profilers.
        let full = with_backlog(nodes);
        println!("steady cycle {}", timed(|| measured(&full)));
        return;
    }
    let mut s = cluster(nodes, 40);
    submit_backlog(&mut s, nodes * 5, 7);
    if std::env::args().nth(2).as_deref() == Some("plans") {
        // The plans of the first two cycles and of the gang's cycle as JSON, to compare
        // two versions of the scheduler decision for decision.
        let first = cycle(&s, NOW_MS);
        println!("{}", serde_json::to_string(&first).expect("a plan serializes"));
        apply(&mut s, Op::ApplyPlan(first));
        println!("{}", serde_json::to_string(&cycle(&s, NOW_MS)).expect("a plan serializes"));
        println!("{}", serde_json::to_string(&cycle(&full_cluster(), NOW_MS)).expect("a plan serializes"));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("first") {
        // Only the first cycle, for profilers.
        println!("first cycle {}", timed(|| measured(&s)));
        return;
    }
    let t = Instant::now();
    let plan = cycle(&s, NOW_MS);
    let cold = t.elapsed();
    let placed = plan.decisions.iter().filter(|d| matches!(d, Decision::Place { .. })).count();
    println!("first cycle {cold:?}: {placed} placements ({:.0}/s)", placed as f64 / cold.as_secs_f64());
    apply(&mut s, Op::ApplyPlan(plan));
    let t = Instant::now();
    let plan = cycle(&s, NOW_MS);
    println!("next cycle {:?}: {} decisions", t.elapsed(), plan.decisions.len());
    if nodes == 10_000 {
        let full = full_cluster();
        let mut idle = full.clone();
        let gang = idle.job_by_name("big-gang").expect("the gang was submitted").id;
        apply(&mut idle, Op::Cancel { job: gang });
        let t = Instant::now();
        for _ in 0..10 {
            std::hint::black_box(cycle(&idle, NOW_MS));
        }
        let base = t.elapsed() / 10;
        let t = Instant::now();
        for _ in 0..10 {
            std::hint::black_box(cycle(&full, NOW_MS));
        }
        let with = t.elapsed() / 10;
        println!("full cluster: cycle with nothing pending {base:?}; with the 64-GPU gang {with:?}");
    }
}
