//! Property tests for docs/policy.md section 9 on random clusters: a gang submitted behind a
//! stream of one-GPU jobs of the same queue and priority (so it can never preempt them).
//! Checked through the real `State::apply` and `cycle`, a second at a time:
//! - a starving gang that qualifies (Pending for `reserve_after`, no room now, room on an
//!   empty pool) and finds its pool free of reservations gets one in that very cycle;
//! - once it holds one it starts as soon as the jobs it waits for end: at the latest
//!   `reserve_after` plus the longest stream job after its submission, however long the
//!   stream goes on.

use std::collections::BTreeMap;

use baton_model::command::{Command, Op};
use baton_model::job::{JobId, JobSpec, JobState, PreemptionMode, PriorityRef, TaskSpec};
use baton_model::name::Name;
use baton_model::node::NodeSpec;
use baton_model::plan::Decision;
use baton_model::resources::Resources;
use baton_model::scheduler::SchedulerSettings;
use baton_model::state::State;
use proptest::prelude::*;

use crate::cycle;

#[derive(Debug, Clone)]
struct Stream {
    nodes: u8,
    gpus_per_node: u8,
    gang_replicas: u8,
    gang_gpus: u8,
    reserve_after_s: u64,
    every_s: u64,
    duration_s: u64,
    jobs: u32,
}

fn stream() -> impl Strategy<Value = Stream> {
    (1u8..=4, 1u8..=8, 0u64..=60, 1u64..=5, 5u64..=90, 10u32..=120).prop_flat_map(
        |(nodes, gpus_per_node, reserve_after_s, every_s, duration_s, jobs)| {
            (1..=nodes, 1..=gpus_per_node).prop_map(move |(gang_replicas, gang_gpus)| Stream {
                nodes,
                gpus_per_node,
                gang_replicas,
                gang_gpus,
                reserve_after_s,
                every_s,
                duration_s,
                jobs,
            })
        },
    )
}

fn apply(s: &mut State, now_ms: u64, op: Op) -> Result<(), String> {
    s.apply(Command { now_ms, op }).map(drop).map_err(|e| e.to_string())
}

fn job(name: &str, replicas: u32, gpus: u64) -> JobSpec {
    JobSpec {
        name: Name::lit(name),
        queue: Name::lit("q"),
        priority: PriorityRef::Value(10),
        tasks: vec![TaskSpec {
            name: Name::lit("main"),
            replicas,
            resources: Resources::of(&[("gpu", gpus)]),
            pools: None,
        }],
        pools: None,
        topology: None,
        preemption_mode: PreemptionMode::Checkpoint,
        grace_ms: 0,
        min_runtime_ms: 0,
        time_limit_ms: None,
        command: Vec::new(),
        env: BTreeMap::new(),
        checkpoint_signal: None,
    }
}

/// One queue guaranteed the whole pool, so only room (never quota) keeps a job waiting.
fn configure(w: &Stream) -> Result<State, String> {
    let mut s = State::new();
    for i in 0..w.nodes {
        let spec = NodeSpec {
            name: Name::lit(&format!("n{i}")),
            pool: Name::lit("default"),
            rack: None,
            labels: BTreeMap::new(),
            resources: Resources::of(&[("gpu", u64::from(w.gpus_per_node))]),
            gpus: Vec::new(),
            agent_addr: String::new(),
        };
        apply(&mut s, 0, Op::RegisterNode(spec))?;
    }
    let total = u64::from(w.nodes) * u64::from(w.gpus_per_node);
    apply(&mut s, 0, Op::PutQueue(baton_model::fixture::gpu_queue("q", total)))?;
    let settings = SchedulerSettings { reserve_after_ms: Some(w.reserve_after_s * 1000) };
    apply(&mut s, 0, Op::SetScheduler(settings))?;
    Ok(s)
}

/// Could the gang be placed on what is free now (every node's free GPUs)?
fn fits_now(s: &State, w: &Stream) -> bool {
    let mut used: BTreeMap<&Name, u64> = BTreeMap::new();
    for j in s.jobs().values().filter(|j| j.state.is_active()) {
        for r in &j.replicas {
            *used.entry(&r.node).or_default() += r.gpus.len() as u64;
        }
    }
    let per_node = u64::from(w.gpus_per_node);
    let slots: u64 =
        s.nodes().keys().map(|n| (per_node - used.get(n).copied().unwrap_or(0)) / u64::from(w.gang_gpus)).sum();
    slots >= u64::from(w.gang_replicas)
}

/// Cycles until nothing changes, checking that a qualifying gang reserves in its cycle.
fn settle(s: &mut State, now_ms: u64, w: &Stream, gang: JobId) -> Result<(), String> {
    for _ in 0..100 {
        let g = s.job(gang).expect("gang");
        let qualifies = g.state == JobState::Pending
            && now_ms.saturating_sub(g.pending_since_ms) >= w.reserve_after_s * 1000
            && s.pool_reservations().is_empty()
            && !fits_now(s, w);
        let plan = cycle(s, now_ms);
        let reserves = plan.decisions.iter().any(|d| matches!(d, Decision::Reserve { job, .. } if *job == gang));
        if qualifies && !reserves {
            return Err(format!("at {} ms the gang qualifies and got no reservation: {}", now_ms, g.reason));
        }
        if plan.decisions.is_empty() {
            return Ok(());
        }
        apply(s, now_ms, Op::ApplyPlan(plan))?;
    }
    Err("no steady state after 100 cycles".into())
}

/// Runs the stream; returns when the gang started (ms), if it did.
fn run(w: &Stream) -> Result<Option<u64>, String> {
    let mut s = configure(w)?;
    let mut durations: BTreeMap<JobId, u64> = BTreeMap::new();
    let capacity = u32::from(w.nodes) * u32::from(w.gpus_per_node);
    // The cluster starts full, its jobs ending one after another.
    for i in 0..capacity {
        apply(&mut s, 0, Op::Submit { spec: job(&format!("fill{i}"), 1, 1), request_id: None })?;
        durations.insert(s.job_by_name(&format!("fill{i}")).unwrap().id, 1_000 + u64::from(i) * 1_000);
    }
    apply(
        &mut s,
        1_000,
        Op::Submit { spec: job("gang", u32::from(w.gang_replicas), u64::from(w.gang_gpus)), request_id: None },
    )?;
    let gang = s.job_by_name("gang").unwrap().id;
    let end_s = 2 + w.every_s * u64::from(w.jobs);
    for t in 1..=end_s {
        let now = t * 1_000;
        if t >= 2 && (t - 2) % w.every_s == 0 && (t - 2) / w.every_s < u64::from(w.jobs) {
            let name = format!("s{}", (t - 2) / w.every_s);
            apply(&mut s, now, Op::Submit { spec: job(&name, 1, 1), request_id: None })?;
            durations.insert(s.job_by_name(&name).unwrap().id, w.duration_s * 1_000);
        }
        let done: Vec<(JobId, u32)> = s
            .jobs()
            .values()
            .filter(|j| j.state == JobState::Running)
            .filter(|j| durations.get(&j.id).is_some_and(|d| j.started_ms + d <= now))
            .map(|j| (j.id, j.attempt))
            .collect();
        for (job, attempt) in done {
            apply(&mut s, now, Op::JobExited { job, attempt, exit_code: 0 })?;
        }
        settle(&mut s, now, w, gang)?;
        let g = s.job(gang).unwrap();
        if g.state == JobState::Running {
            return Ok(Some(g.started_ms));
        }
    }
    Ok(None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: super::proptests::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn a_starving_gang_reserves_in_its_cycle_and_starts_once_its_resources_free(w in stream()) {
        let started = run(&w);
        prop_assert!(started.is_ok(), "{}", started.unwrap_err());
        // The longest any job the reservation waits for may run: a stream job, or a fill job.
        let fill_ms = u64::from(w.nodes) * u64::from(w.gpus_per_node) * 1_000;
        let longest_ms = (w.duration_s * 1_000).max(fill_ms);
        let bound_ms = 1_000 + w.reserve_after_s * 1_000 + longest_ms;
        let end_ms = (2 + w.every_s * u64::from(w.jobs)) * 1_000;
        match started.unwrap() {
            Some(at) => prop_assert!(at <= bound_ms, "the gang started at {at} ms, later than {bound_ms} ms"),
            None => prop_assert!(end_ms < bound_ms, "the gang never started though the stream ran past {bound_ms} ms"),
        }
    }
}
