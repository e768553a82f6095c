//! Job arrays at scale (issue: a 100,000-element array is one submit; numbers in
//! BENCHMARKS.md):
//! - `array/submit-100k`: applying the one command that submits a 100,000-element array
//!   on the 10,000-node cluster (what every replica does for it; the rest of a submit is
//!   one log entry).
//! - the leader's memory per pending element: the heap the state holds after that submit
//!   beyond what it held before, divided by the elements (printed; a counting allocator).
//! - `array/full-cluster-{without,with}-100k-pending`: a cycle on the full 10,000-node
//!   cluster with nothing pending, without and with the array pending (and with one job of
//!   an element's shape pending instead: `full-cluster-with-1-job-pending`); and
//!   `array/full-cluster-42k-waiting-{without,with}-100k-pending`, the same with a backlog.

mod cluster;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use baton_model::array::ArraySpec;
use baton_model::command::Op;
use baton_model::plan::Decision;
use baton_model::state::State;
use baton_sched::cycle;
use cluster::*;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

/// Bytes allocated and not yet freed, by every thread.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE_BYTES.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const ELEMENTS: u32 = 100_000;

fn submit_op() -> Op {
    let spec = job("sweep".into(), "q7".into(), "train", 1, 1);
    let array = ArraySpec { first: 0, count: ELEMENTS, max_running: None };
    Op::SubmitArray { spec, array, request_id: None, run_as: None, after: Vec::new() }
}

fn with_array(s: &State) -> State {
    let mut s = s.clone();
    apply(&mut s, submit_op());
    s
}

fn bench_submit(c: &mut Criterion) {
    let s = full_cluster();
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut held = s.clone();
    apply(&mut held, submit_op());
    let grown = LIVE_BYTES.load(Ordering::Relaxed) - before;
    let jobs = held.jobs().len() - s.jobs().len();
    eprintln!(
        "array/memory: {grown} bytes held for a {ELEMENTS}-element array ({jobs} elements created as jobs): {:.1} bytes per element",
        grown as f64 / f64::from(ELEMENTS)
    );
    drop(held);
    let mut g = c.benchmark_group("array");
    g.sample_size(20);
    g.bench_function("submit-100k", |b| {
        b.iter_batched(|| s.clone(), |mut s| apply(black_box(&mut s), submit_op()), BatchSize::LargeInput)
    });
    g.finish();
}

/// What a cycle decides, by kind: the array's elements wait, they do not preempt.
fn describe(what: &str, s: &State) {
    let plan = cycle(s, NOW_MS);
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for d in &plan.decisions {
        let k = match d {
            Decision::Place { .. } => "place",
            Decision::Preempt { .. } => "preempt",
            Decision::Wait { .. } => "wait",
            _ => "other",
        };
        *kinds.entry(k).or_default() += 1;
    }
    eprintln!("array/{what}: {} pending jobs, decisions {kinds:?}", pending(s));
}

fn pending(s: &State) -> usize {
    s.jobs().values().filter(|j| j.state == baton_model::job::JobState::Pending).count()
}

fn bench_cycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("array");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    // The cluster full, the urgent gang cancelled: nothing pending.
    let mut idle = full_cluster();
    let gang = idle.job_by_name("big-gang").expect("the gang was submitted").id;
    apply(&mut idle, Op::Cancel { job: gang });
    let idle_with = with_array(&idle);
    // One job of an element's shape pending: what the first pending job costs (it plans a
    // preemption and finds none), which the array's elements pay once between them.
    let mut idle_one = idle.clone();
    let one = job("one".into(), "q7".into(), "train", 1, 1);
    apply(&mut idle_one, Op::Submit { spec: one, request_id: None });
    describe("full-cluster-without-100k-pending", &idle);
    describe("full-cluster-with-1-job-pending", &idle_one);
    describe("full-cluster-with-100k-pending", &idle_with);
    g.bench_function("full-cluster-without-100k-pending", |b| b.iter(|| black_box(cycle(black_box(&idle), NOW_MS))));
    g.bench_function("full-cluster-with-1-job-pending", |b| b.iter(|| black_box(cycle(black_box(&idle_one), NOW_MS))));
    g.bench_function("full-cluster-with-100k-pending", |b| b.iter(|| black_box(cycle(black_box(&idle_with), NOW_MS))));
    let busy = with_backlog(10_000);
    let busy_with = with_array(&busy);
    g.bench_function("full-cluster-42k-waiting-without-100k-pending", |b| {
        b.iter(|| black_box(cycle(black_box(&busy), NOW_MS)))
    });
    g.bench_function("full-cluster-42k-waiting-with-100k-pending", |b| {
        b.iter(|| black_box(cycle(black_box(&busy_with), NOW_MS)))
    });
    g.finish();
}

criterion_group!(benches, bench_submit, bench_cycle);
criterion_main!(benches);
