//! Elastic gangs (decisions.md section 13), through `State::apply`: what a submit may ask,
//! placements of any size of the range, growth (the gang starts again on its larger
//! placement in the command that completes its stop), shrinking as a victim (it keeps its
//! lowest ranks and starts again on them at once), and what is refused.

use crate::common;

use baton_model::alloc::ReplicaAlloc;
use baton_model::elastic::ElasticSpec;
use baton_model::event::EventKind;
use baton_model::fixture::gpu_job;
use baton_model::job::{PreemptionMode, PriorityRef};
use baton_model::plan::{Decision, Plan, Victim};
use baton_model::rejection::Rejection;
use baton_model::{ApplyError, JobId, JobState, Name, Op, Outcome, State};
use common::{apply, two_nodes_one_queue};

/// A gang of `replicas` one-GPU replicas that accepts `min`.
fn submit_gang(s: &mut State, name: &str, replicas: u32, min: u32) -> Result<JobId, ApplyError> {
    let mut spec = gpu_job(name, "q", 1);
    spec.tasks[0].replicas = replicas;
    let elastic = ElasticSpec { task: 0, min_replicas: min };
    match apply(s, 1_000, Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: vec![] })? {
        Outcome::Submitted { job, .. } => Ok(job),
        other => panic!("{other:?}"),
    }
}

/// One replica per GPU of `node`, ranks from 0.
fn on(node: &str, gpus: std::ops::Range<u32>) -> Vec<ReplicaAlloc> {
    gpus.enumerate()
        .map(|(i, g)| ReplicaAlloc { task: 0, index: i as u32, node: Name::lit(node), gpus: vec![g] })
        .collect()
}

/// Applies one decision; `Err` with why it was refused.
fn decide(s: &mut State, now_ms: u64, d: Decision) -> Result<(), Rejection> {
    let plan = Plan { based_on: s.applied(), decisions: vec![d] };
    match apply(s, now_ms, Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => rejected.into_iter().next().map_or(Ok(()), |(_, why)| Err(why)),
        other => panic!("{other:?}"),
    }
}

fn place(s: &mut State, job: JobId, replicas: Vec<ReplicaAlloc>) -> Result<(), Rejection> {
    let attempt = s.job(job).unwrap().attempt + 1;
    decide(s, 2_000, Decision::Place { job, attempt, replicas })
}

fn stopped(s: &mut State, now_ms: u64, job: JobId) {
    let attempt = s.job(job).unwrap().attempt;
    apply(s, now_ms, Op::JobStopped { job, attempt, checkpointed: true }).unwrap();
}

fn size(s: &State, job: JobId) -> (JobState, u32, usize) {
    let j = s.job(job).unwrap();
    (j.state, j.attempt, j.replicas.len())
}

#[test]
fn a_range_the_job_cannot_have_is_refused_naming_min_replicas() {
    let mut s = two_nodes_one_queue();
    for (replicas, min, words) in [(4, 5, "5 is above replicas (4) of task main"), (4, 0, "at least 1")] {
        match submit_gang(&mut s, "g", replicas, min) {
            Err(ApplyError::Invalid { field, message }) => {
                assert_eq!(field, "min_replicas");
                assert!(message.contains(words), "{message}");
            }
            other => panic!("{replicas}/{min}: {other:?}"),
        }
    }
    let spec = gpu_job("g", "q", 1);
    let elastic = ElasticSpec { task: 1, min_replicas: 1 };
    let err = apply(&mut s, 1_000, Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: vec![] });
    assert!(matches!(err, Err(ApplyError::Invalid { ref field, .. }) if field == "min_replicas"), "{err:?}");
    assert!(s.jobs().is_empty(), "a refusal changes nothing");
}

#[test]
fn a_gang_too_big_for_one_node_at_its_top_may_still_run_at_its_minimum() {
    let mut s = two_nodes_one_queue();
    let mut spec = gpu_job("g", "q", 1);
    spec.tasks[0].replicas = 12;
    spec.topology = Some(baton_model::job::Topology::Node);
    let elastic = ElasticSpec { task: 0, min_replicas: 8 };
    let op = Op::SubmitElastic { spec: spec.clone(), elastic, request_id: None, run_as: None, after: vec![] };
    let Outcome::Submitted { job, .. } = apply(&mut s, 1_000, op).unwrap() else { panic!() };
    assert_eq!(s.job(job).unwrap().spec.tasks[0].replicas, 12, "the spec keeps the size asked for");
    spec.name = Name::lit("g2");
    let op = Op::SubmitElastic {
        spec,
        elastic: ElasticSpec { task: 0, min_replicas: 9 },
        request_id: None,
        run_as: None,
        after: vec![],
    };
    assert!(matches!(apply(&mut s, 1_000, op), Err(ApplyError::Impossible(_))), "9 fit on no node");
}

#[test]
fn a_placement_of_any_size_in_the_range_is_accepted_and_the_spec_takes_that_size() {
    let mut s = two_nodes_one_queue();
    let g = submit_gang(&mut s, "g", 8, 2).unwrap();
    assert!(matches!(place(&mut s, g, on("n1", 0..1)), Err(Rejection::ElasticSize { got: 1, min: 2, max: 8 })));
    let nine: Vec<ReplicaAlloc> = on("n1", 0..8)
        .into_iter()
        .chain(on("n2", 0..1).into_iter().map(|mut r| {
            r.index = 8;
            r
        }))
        .collect();
    assert!(matches!(place(&mut s, g, nine), Err(Rejection::ElasticSize { got: 9, .. })));
    place(&mut s, g, on("n1", 0..4)).unwrap();
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.spec.tasks[0].replicas, j.replicas.len()), (JobState::Running, 4, 4));
    let resized = j.events.iter().find(|e| matches!(e.kind, EventKind::Resized { from: 8, to: 4 })).unwrap();
    assert_eq!(resized.message, "started with 4 of 8 replicas (minimum 2)");
}

#[test]
fn a_gang_grows_onto_its_larger_placement_as_its_stop_completes() {
    let mut s = two_nodes_one_queue();
    let g = submit_gang(&mut s, "g", 8, 2).unwrap();
    place(&mut s, g, on("n1", 0..4)).unwrap();
    // Not larger than what it runs with: refused.
    let same = Decision::Grow { job: g, attempt: 1, replicas: on("n1", 0..4) };
    assert!(matches!(decide(&mut s, 3_000, same), Err(Rejection::ElasticSize { got: 4, min: 5, max: 8 })));
    decide(&mut s, 3_000, Decision::Grow { job: g, attempt: 1, replicas: on("n1", 0..8) }).unwrap();
    assert_eq!(size(&s, g), (JobState::Preempting, 1, 4));
    assert!(s.job(g).unwrap().reason.starts_with("growing"), "{}", s.job(g).unwrap().reason);
    stopped(&mut s, 4_000, g);
    assert_eq!(size(&s, g), (JobState::Running, 2, 8), "started again in the same command");
    let j = s.job(g).unwrap();
    assert!(j.has_checkpoint && j.events.iter().any(|e| e.kind == EventKind::Growing));
    assert!(s.restart_of(g).is_none());
}

#[test]
fn a_gang_grows_only_past_its_min_runtime_and_never_in_mode_cancel() {
    let mut s = two_nodes_one_queue();
    let mut spec = gpu_job("g", "q", 1);
    spec.tasks[0].replicas = 8;
    spec.min_runtime_ms = 60_000;
    let elastic = ElasticSpec { task: 0, min_replicas: 2 };
    apply(&mut s, 1_000, Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: vec![] }).unwrap();
    let g = s.job_by_name("g").unwrap().id;
    place(&mut s, g, on("n1", 0..4)).unwrap();
    let grow = || Decision::Grow { job: g, attempt: 1, replicas: on("n1", 0..8) };
    assert!(matches!(decide(&mut s, 3_000, grow()), Err(Rejection::VictimInMinRuntime { .. })));
    decide(&mut s, 62_000, grow()).unwrap();

    let mut s = two_nodes_one_queue();
    let mut spec = gpu_job("c", "q", 1);
    spec.tasks[0].replicas = 8;
    spec.preemption_mode = PreemptionMode::Cancel;
    let elastic = ElasticSpec { task: 0, min_replicas: 2 };
    apply(&mut s, 1_000, Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: vec![] }).unwrap();
    let c = s.job_by_name("c").unwrap().id;
    place(&mut s, c, on("n1", 0..4)).unwrap();
    let grow = Decision::Grow { job: c, attempt: 1, replicas: on("n1", 0..8) };
    assert!(matches!(decide(&mut s, 3_000, grow), Err(Rejection::NotElastic { .. })), "a stop would cancel it");
}

#[test]
fn a_grown_gang_whose_larger_placement_was_taken_meanwhile_waits_in_the_queue() {
    let mut s = two_nodes_one_queue();
    let g = submit_gang(&mut s, "g", 8, 2).unwrap();
    place(&mut s, g, on("n1", 0..4)).unwrap();
    decide(&mut s, 3_000, Decision::Grow { job: g, attempt: 1, replicas: on("n1", 0..8) }).unwrap();
    let other = match apply(&mut s, 3_000, Op::Submit { spec: gpu_job("o", "q", 4), request_id: None }).unwrap() {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    };
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![4, 5, 6, 7] }];
    place(&mut s, other, replicas).unwrap();
    stopped(&mut s, 4_000, g);
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.attempt), (JobState::Pending, 1));
    assert!(j.reason.contains("stopped to grow, but where it was to start again no longer holds"), "{}", j.reason);
}

/// A gang of 8 on n1 (priority 1) and a preemptor of priority 5 wanting 6 GPUs of n1.
fn gang_and_preemptor(mode: PreemptionMode) -> (State, JobId, JobId) {
    let mut s = two_nodes_one_queue();
    let mut spec = gpu_job("g", "q", 1);
    spec.tasks[0].replicas = 8;
    spec.preemption_mode = mode;
    let elastic = ElasticSpec { task: 0, min_replicas: 2 };
    apply(&mut s, 1_000, Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: vec![] }).unwrap();
    let g = s.job_by_name("g").unwrap().id;
    place(&mut s, g, on("n1", 0..8)).unwrap();
    let hi = submit_preemptor(&mut s);
    (s, g, hi)
}

/// A job of priority 5 wanting 6 GPUs.
fn submit_preemptor(s: &mut State) -> JobId {
    let mut spec = gpu_job("hi", "q", 6);
    spec.priority = PriorityRef::Value(5);
    match apply(s, 2_000, Op::Submit { spec, request_id: None }).unwrap() {
        Outcome::Submitted { job, .. } => job,
        other => panic!("{other:?}"),
    }
}

fn shrink_for(hi: JobId, g: JobId, gpus: Vec<u32>) -> Decision {
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus }];
    let shrunk = vec![Victim { job: g, attempt: 1 }];
    Decision::PreemptShrinking { job: hi, victims: vec![], shrunk, replicas, message: "test".into() }
}

#[test]
fn a_shrunk_gang_keeps_its_lowest_ranks_and_starts_again_on_them_at_once() {
    let (mut s, g, hi) = gang_and_preemptor(PreemptionMode::Checkpoint);
    // GPUs 0 and 1 stay the gang's (ranks 0 and 1): the preemptor may not have them.
    assert!(matches!(
        decide(&mut s, 3_000, shrink_for(hi, g, vec![0, 2, 3, 4, 5, 6])),
        Err(Rejection::NoLongerFits { .. })
    ));
    decide(&mut s, 3_000, shrink_for(hi, g, (2..8).collect())).unwrap();
    let j = s.job(g).unwrap();
    assert_eq!(j.state, JobState::Preempting);
    assert!(j.reason.ends_with("shrinking to 2 of 8 replicas (minimum 2)"), "{}", j.reason);
    stopped(&mut s, 4_000, g);
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.attempt, j.spec.tasks[0].replicas), (JobState::Running, 2, 2));
    let gpus: Vec<u32> = j.replicas.iter().flat_map(|r| r.gpus.clone()).collect();
    assert_eq!(gpus, vec![0, 1], "on the GPUs its ranks 0 and 1 had");
    // The preemptor's room is free: it is placed where it was reserved.
    let r = s.reservations()[&hi].replicas.clone();
    decide(&mut s, 5_000, Decision::Place { job: hi, attempt: 1, replicas: r }).unwrap();
    assert_eq!(s.job(hi).unwrap().state, JobState::Running);
}

#[test]
fn a_gang_at_its_minimum_or_in_mode_cancel_is_never_shrunk() {
    let (mut s, g, hi) = gang_and_preemptor(PreemptionMode::Cancel);
    assert!(matches!(decide(&mut s, 3_000, shrink_for(hi, g, (2..8).collect())), Err(Rejection::NotElastic { .. })));

    let mut s = two_nodes_one_queue();
    let g = submit_gang(&mut s, "g", 8, 2).unwrap();
    place(&mut s, g, on("n1", 0..2)).unwrap();
    let hi = submit_preemptor(&mut s);
    let d = shrink_for(hi, g, (2..8).collect());
    assert!(matches!(decide(&mut s, 3_000, d), Err(Rejection::NotElastic { .. })), "at its minimum");
}

#[test]
fn a_state_with_gangs_growing_and_shrinking_round_trips_through_a_snapshot() {
    let (mut s, g, hi) = gang_and_preemptor(PreemptionMode::Checkpoint);
    decide(&mut s, 3_000, shrink_for(hi, g, (2..8).collect())).unwrap();
    let other = submit_gang(&mut s, "grower", 8, 1).unwrap();
    place(&mut s, other, on("n2", 0..4)).unwrap();
    decide(&mut s, 3_000, Decision::Grow { job: other, attempt: 1, replicas: on("n2", 0..8) }).unwrap();
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
    let (mut back, _): (State, _) = common::decode_state(&bytes);
    assert_eq!(back, s);
    assert_eq!(back.elastic(g).map(|e| (e.min, e.max)), Some((2, 8)));
    stopped(&mut back, 4_000, g);
    stopped(&mut back, 4_000, other);
    assert_eq!(size(&back, g), (JobState::Running, 2, 2), "the restored state shrinks it");
    assert_eq!(size(&back, other), (JobState::Running, 2, 8), "and grows the other");
}
