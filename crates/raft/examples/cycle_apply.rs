//! Apply latency while the leader runs scheduling cycles, and rounds per second on an idle
//! leader (numbers and machine in BENCHMARKS.md).
//!
//! ```text
//! cargo build --release -p baton-raft --example cycle_apply
//! target/release/examples/cycle_apply [--nodes 50000] [--jobs 100000] [--seconds 10] [--locked]
//! ```
//!
//! The state sits behind a `std::sync::RwLock`, as in the state machine (`SmShared`): applies
//! take the write lock, the leader's round takes the read lock. One thread runs rounds back
//! to back; another applies a command every `--every-ms` (a submit, then its cancel), and
//! times each from asking for the write lock to the end of `apply`.
//!
//! A round is what the leader does: by default it takes a snapshot under the read lock and
//! runs the cycle on it after the lock is dropped; `--locked` runs the cycle under the read
//! lock instead (the leader before snapshots).
//!
//! First the rounds run alone for `--seconds` (rounds/s on an idle leader), then with the
//! applies for as long again.

#[path = "../../sched/benches/cluster.rs"]
mod cluster;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use baton_model::command::{Command, Op, Outcome};
use baton_model::state::State;
use baton_sched::cycle;

/// Applies measured at most, so a long run stays bounded in memory.
const MAX_SAMPLES: usize = 1_000_000;

fn flag(args: &[String], name: &str, default: u64) -> u64 {
    args.windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].parse().unwrap_or_else(|e| panic!("{name} {:?}: {e}", w[1])))
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A cluster with `nodes` 8-GPU nodes and `jobs` submitted, after the first plan placed what
/// fits: the rest waits, so every cycle looks at the whole backlog.
fn setup(nodes: usize, jobs: usize) -> State {
    let mut s = cluster::cluster(nodes, 40);
    cluster::submit_backlog(&mut s, jobs, 7);
    let plan = cycle(&s, cluster::NOW_MS);
    cluster::apply(&mut s, Op::ApplyPlan(plan));
    s
}

/// One leader round; returns how long it held the read lock and how long it took.
fn round(state: &RwLock<State>, locked: bool) -> (Duration, Duration) {
    let began = Instant::now();
    if locked {
        let s = state.read().expect("no panics");
        std::hint::black_box(cycle(&s, cluster::NOW_MS));
        let held = began.elapsed();
        return (held, held);
    }
    let snapshot = state.read().expect("no panics").clone();
    let held = began.elapsed();
    std::hint::black_box(cycle(&snapshot, cluster::NOW_MS));
    (held, began.elapsed())
}

struct Rounds {
    count: u64,
    held: Vec<Duration>,
    took: Vec<Duration>,
}

fn run_rounds(state: &RwLock<State>, locked: bool, stop: &AtomicBool) -> Rounds {
    let mut r = Rounds { count: 0, held: Vec::new(), took: Vec::new() };
    while !stop.load(Ordering::Relaxed) {
        let (held, took) = round(state, locked);
        r.count += 1;
        r.held.push(held);
        r.took.push(took);
    }
    r
}

/// Submits a one-GPU job, then cancels it, one command every `every`; times each apply.
fn run_applies(state: &RwLock<State>, every: Duration, stop: &AtomicBool) -> Vec<Duration> {
    let seq = AtomicU64::new(0);
    let mut samples = Vec::new();
    let mut pending = None;
    while !stop.load(Ordering::Relaxed) && samples.len() < MAX_SAMPLES {
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let op = match pending.take() {
            Some(job) => Op::Cancel { job },
            None => {
                let spec = cluster::job(format!("probe-{n}"), "q0".into(), "train", 1, 1);
                Op::Submit { spec, request_id: None }
            }
        };
        let began = Instant::now();
        let response = state.write().expect("no panics").apply(Command { now_ms: cluster::NOW_MS, op });
        samples.push(began.elapsed());
        if let Ok(applied) = response
            && let Outcome::Submitted { job, .. } = applied.outcome
        {
            pending = Some(job);
        }
        std::thread::sleep(every);
    }
    samples
}

fn print_rounds(what: &str, r: &mut Rounds, seconds: f64) {
    r.held.sort();
    r.took.sort();
    println!(
        "{what}: {} rounds in {seconds:.1} s = {:.2} rounds/s; round p50 {:.1} ms; read lock held p50 {:.3} ms, max {:.3} ms",
        r.count,
        r.count as f64 / seconds,
        ms(percentile(&r.took, 0.5)),
        ms(percentile(&r.held, 0.5)),
        ms(*r.held.last().expect("at least one round")),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nodes = flag(&args, "--nodes", 50_000) as usize;
    let jobs = flag(&args, "--jobs", 100_000) as usize;
    let seconds = flag(&args, "--seconds", 10);
    let every = Duration::from_millis(flag(&args, "--every-ms", 2));
    let locked = args.iter().any(|a| a == "--locked");
    let mode = if locked { "cycle under the read lock" } else { "cycle on a snapshot" };

    let built = Instant::now();
    let state = Arc::new(RwLock::new(setup(nodes, jobs)));
    let pending = state
        .read()
        .expect("no panics")
        .jobs()
        .values()
        .filter(|j| j.state == baton_model::job::JobState::Pending)
        .count();
    println!("{nodes} nodes, {jobs} jobs ({pending} waiting), built in {:.1} s; {mode}", built.elapsed().as_secs_f64());

    let stop = AtomicBool::new(false);
    let mut idle = std::thread::scope(|sc| {
        let rounds = sc.spawn(|| run_rounds(&state, locked, &stop));
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        rounds.join().expect("rounds thread")
    });
    print_rounds("idle leader", &mut idle, seconds as f64);

    stop.store(false, Ordering::Relaxed);
    let (mut busy, mut applies) = std::thread::scope(|sc| {
        let rounds = sc.spawn(|| run_rounds(&state, locked, &stop));
        let applies = sc.spawn(|| run_applies(&state, every, &stop));
        std::thread::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        (rounds.join().expect("rounds thread"), applies.join().expect("applies thread"))
    });
    print_rounds("with applies", &mut busy, seconds as f64);
    applies.sort();
    println!(
        "apply latency during cycles: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        applies.len(),
        ms(percentile(&applies, 0.5)),
        ms(percentile(&applies, 0.99)),
        ms(*applies.last().expect("at least one apply")),
    );
}
