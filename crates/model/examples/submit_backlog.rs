//! How long `State::apply` takes for a submit as the backlog of waiting jobs grows: the
//! per-submit cost a replica pays when applying, one command at a time.
//!
//! `cargo run --release -p baton-model --example submit_backlog [MAX_BACKLOG]`
//! (default 40,000). One 8-GPU node, one queue with the per-queue bound raised to its most,
//! no tokens (as `baton bench submit`); every job waits. Prints the mean apply time of the
//! 1,000 submits after each backlog size.

use std::time::Instant;

use baton_model::State;
use baton_model::command::{Command, Op};
use baton_model::fixture;
use baton_model::limits::MAX_JOBS;
use baton_model::tenancy::TenancySettings;

const MEASURED_SUBMITS: usize = 1_000;

fn apply(s: &mut State, op: Op) {
    s.apply(Command { now_ms: 1_000, op }).expect("example setup is valid");
}

fn submit(s: &mut State, i: usize) {
    let spec = fixture::gpu_job(&format!("j{i}"), "a", 8);
    apply(s, Op::SubmitRunAs { spec, request_id: None, run_as: None });
}

fn main() {
    let max_backlog: usize = std::env::args().nth(1).map_or(40_000, |a| a.parse().expect("MAX_BACKLOG: a number"));
    let mut s = State::new();
    apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 8)]));
    apply(&mut s, Op::PutQueue(fixture::gpu_queue("a", 8)));
    let most = u32::try_from(MAX_JOBS).unwrap_or(u32::MAX);
    let bounds = TenancySettings { max_jobs_per_queue: most, max_jobs_per_user: most, ..TenancySettings::default() };
    apply(&mut s, Op::SetTenancy(bounds));
    let mut next = 0;
    for backlog in [0, 1_000, 10_000, 20_000, 40_000, 80_000].into_iter().filter(|&b| b <= max_backlog) {
        while next < backlog {
            submit(&mut s, next);
            next += 1;
        }
        let start = Instant::now();
        for _ in 0..MEASURED_SUBMITS {
            submit(&mut s, next);
            next += 1;
        }
        let per_submit_us = start.elapsed().as_secs_f64() * 1e6 / MEASURED_SUBMITS as f64;
        println!("backlog {backlog:>6}: {per_submit_us:8.1} us per submit apply");
    }
}
