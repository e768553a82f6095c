//! What usage over time (decisions.md section 12) costs a cycle (numbers in BENCHMARKS.md):
//! the 10,000-node cluster of `cycle.rs`, its 50,000-job backlog run as 500 users, after
//! the first cycle's placements ran for an hour (so every queue and user has usage), the
//! next cycle with `usage_half_life` on and off. `fair/limits-loose` adds a `max_per_user`
//! to every queue that binds nobody (checked for every job decided: its cost alone);
//! `fair/limits-64` one of 64 GPUs, which holds jobs back (other jobs are placed in their
//! stead: the cost of other decisions too). Throughput is jobs decided per second.
//! Reservations are off: after an hour the backlog would be starving (docs/policy.md
//! section 9), and `cycle/10k-nodes-full-42k-waiting` is the anchor without them.

mod cluster;

use std::hint::black_box;
use std::time::Duration;

use baton_model::command::{Command, Op};
use baton_model::job::JobState;
use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_model::usage::UsageSettings;
use baton_sched::cycle;
use cluster::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const HOUR_MS: u64 = 3_600_000;

fn ran_an_hour() -> State {
    let mut s = cluster(10_000, 40);
    // Without reservations: jobs pending for the hour would be starving (section 9), and their
    // reservation walks would cost more than what is measured here.
    apply(&mut s, Op::SetScheduler(baton_model::scheduler::SchedulerSettings { reserve_after_ms: None }));
    apply(&mut s, Op::SetUsage(UsageSettings { half_life_ms: Some(7 * 24 * HOUR_MS), ..Default::default() }));
    submit_backlog_as(&mut s, 50_000, 7, 500);
    let plan = cycle(&s, NOW_MS);
    apply(&mut s, Op::ApplyPlan(plan));
    s.apply(Command { now_ms: NOW_MS + HOUR_MS, op: Op::Tick }).expect("a tick");
    s
}

fn bench_fair(c: &mut Criterion) {
    let on = ran_an_hour();
    let mut off = on.clone();
    off.apply(Command { now_ms: NOW_MS + HOUR_MS, op: Op::SetUsage(UsageSettings::default()) }).unwrap();
    let limited = |gpus: u64| {
        let mut s = on.clone();
        for q in 0..200 {
            let op = Op::SetUserLimit { queue: Name::lit(&format!("q{q}")), limit: Resources::of(&[("gpu", gpus)]) };
            s.apply(Command { now_ms: NOW_MS + HOUR_MS, op }).unwrap();
        }
        s
    };
    let (loose, limits) = (limited(1_000_000), limited(64));
    let waiting = on.jobs().values().filter(|j| j.state == JobState::Pending).count();
    eprintln!("fair: {waiting} jobs waiting, {} accounts", on.usage().accounts().len());
    let now = NOW_MS + HOUR_MS;
    let mut g = c.benchmark_group("fair");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(waiting as u64));
    let cases = [("usage-off", &off), ("usage-on", &on), ("limits-loose", &loose), ("limits-64", &limits)];
    for (name, s) in cases {
        eprintln!("fair/{name}: {} decisions", cycle(s, now).decisions.len());
        g.bench_function(name, |b| b.iter(|| black_box(cycle(black_box(s), now))));
    }
    g.finish();
}

criterion_group!(benches, bench_fair);
criterion_main!(benches);
