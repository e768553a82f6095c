//! Job arrays (decisions.md section 13), through `State::apply`: one record whose elements
//! are created only as they come within reach of running, `max_running`, the array's end,
//! dependencies on it, its cancellation, and what is refused.

use crate::common;

use baton_model::after::{After, JobRef, When};
use baton_model::alloc::ReplicaAlloc;
use baton_model::array::{ARRAY_INDEX_ENV, ArraySpec};
use baton_model::fixture::gpu_job;
use baton_model::limits::ARRAY_PENDING_WINDOW;
use baton_model::plan::{Decision, Plan};
use baton_model::{ApplyError, JobId, JobState, Name, Op, Outcome, State};
use common::{apply, two_nodes_one_queue};

fn array(first: u32, count: u32, max_running: Option<u32>) -> ArraySpec {
    ArraySpec { first, count, max_running }
}

fn submit_array(s: &mut State, name: &str, a: ArraySpec, after: Vec<After>) -> Result<JobId, ApplyError> {
    let op = Op::SubmitArray { spec: gpu_job(name, "q", 1), array: a, request_id: None, run_as: None, after };
    match apply(s, 1_000, op)? {
        Outcome::Submitted { job, .. } => Ok(job),
        other => panic!("{other:?}"),
    }
}

fn submit(s: &mut State, name: &str) -> JobId {
    match apply(s, 1_000, Op::SubmitRunAs { spec: gpu_job(name, "q", 1), request_id: None, run_as: None }).unwrap() {
        Outcome::Submitted { job, .. } => job,
        other => panic!("{other:?}"),
    }
}

/// Places `job` on a free GPU of n1 or n2.
fn place(s: &mut State, job: JobId) {
    let used: Vec<(Name, u32)> = s
        .jobs()
        .values()
        .filter(|j| j.state.is_active())
        .flat_map(|j| j.replicas.iter().flat_map(|r| r.gpus.iter().map(|g| (r.node.clone(), *g))))
        .collect();
    let (node, gpu) = ["n1", "n2"]
        .iter()
        .flat_map(|n| (0..8).map(move |g| (Name::lit(n), g)))
        .find(|slot| !used.contains(slot))
        .expect("a free GPU");
    let attempt = s.job(job).unwrap().attempt + 1;
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node, gpus: vec![gpu] }];
    let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt, replicas }] };
    match apply(s, 2_000, Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => assert!(rejected.is_empty(), "{rejected:?}"),
        other => panic!("{other:?}"),
    }
}

fn exit(s: &mut State, job: JobId, code: i32) {
    let attempt = s.job(job).unwrap().attempt;
    apply(s, 3_000, Op::JobExited { job, attempt, exit_code: code }).unwrap();
}

fn exit_named(s: &mut State, name: &str, code: i32) {
    let j = element(s, name);
    exit(s, j, code);
}

fn place_named(s: &mut State, name: &str) {
    let j = element(s, name);
    place(s, j);
}

fn element(s: &State, name: &str) -> JobId {
    s.job_by_name(name).unwrap_or_else(|| panic!("{name} is not created")).id
}

fn unfinished_elements(s: &State) -> Vec<String> {
    s.jobs().values().filter(|j| !j.state.is_finished()).map(|j| j.spec.name.to_string()).collect()
}

#[test]
fn an_array_creates_only_the_elements_max_running_allows_each_with_its_index() {
    let mut s = two_nodes_one_queue();
    let id = submit_array(&mut s, "train", array(0, 1000, Some(3)), vec![]).unwrap();
    assert_eq!(unfinished_elements(&s), ["train-0", "train-1", "train-2"]);
    let t1 = s.job_by_name("train-1").unwrap();
    assert_eq!(t1.spec.env.get(ARRAY_INDEX_ENV).map(String::as_str), Some("1"));
    assert_eq!(s.element_of(t1.id).map(|(a, i)| (a.id, i)), Some((id, 1)));
    for name in ["train-0", "train-1", "train-2"] {
        let j = element(&s, name);
        place(&mut s, j);
    }
    assert!(s.job_by_name("train-3").is_none(), "three run: no fourth is created");
    exit_named(&mut s, "train-1", 0);
    assert_eq!(unfinished_elements(&s), ["train-0", "train-2", "train-3"], "an end makes room for the next");
    let a = s.array(id).unwrap();
    assert_eq!((a.created, a.tally.succeeded, a.tally.started, a.not_created()), (4, 1, 3, 996));
}

#[test]
fn without_max_running_only_a_window_of_elements_waits_and_each_start_makes_room() {
    let mut s = two_nodes_one_queue();
    let id = submit_array(&mut s, "sweep", array(0, 100_000, None), vec![]).unwrap();
    assert_eq!(s.jobs().len(), ARRAY_PENDING_WINDOW as usize, "100,000 elements, one record and a window of jobs");
    place_named(&mut s, "sweep-0");
    assert_eq!(s.jobs().len(), ARRAY_PENDING_WINDOW as usize + 1, "the start made room for one more");
    assert!(s.job_by_name(&format!("sweep-{}", ARRAY_PENDING_WINDOW)).is_some());
    assert_eq!(s.array(id).unwrap().not_created(), 100_000 - ARRAY_PENDING_WINDOW - 1);
}

#[test]
fn a_range_names_its_elements_from_its_first_index() {
    let mut s = two_nodes_one_queue();
    submit_array(&mut s, "r", array(5, 2, None), vec![]).unwrap();
    assert_eq!(unfinished_elements(&s), ["r-5", "r-6"]);
    assert_eq!(s.job_by_name("r-6").unwrap().spec.env[ARRAY_INDEX_ENV], "6");
}

#[test]
fn a_dependency_on_an_array_holds_once_every_element_succeeded() {
    let mut s = two_nodes_one_queue();
    submit_array(&mut s, "a", array(0, 2, None), vec![]).unwrap();
    let after = vec![After { job: JobRef::Name(Name::lit("a")), when: When::Ok }];
    let op = Op::SubmitAfter { spec: gpu_job("report", "q", 1), request_id: None, run_as: None, after };
    let Outcome::Submitted { job: report, .. } = apply(&mut s, 1_500, op).unwrap() else { panic!() };
    assert!(s.held(report));
    for name in ["a-0", "a-1"] {
        let j = element(&s, name);
        place(&mut s, j);
    }
    exit_named(&mut s, "a-0", 0);
    assert!(s.held(report), "one element of two succeeded");
    exit_named(&mut s, "a-1", 0);
    assert!(!s.held(report), "every element succeeded");
    assert_eq!(s.job(report).unwrap().state, JobState::Pending);
}

#[test]
fn a_failed_element_cancels_what_waits_for_the_array_to_succeed() {
    let mut s = two_nodes_one_queue();
    submit_array(&mut s, "a", array(0, 3, Some(1)), vec![]).unwrap();
    let after = vec![After { job: JobRef::Name(Name::lit("a")), when: When::Ok }];
    let op = Op::SubmitAfter { spec: gpu_job("report", "q", 1), request_id: None, run_as: None, after };
    let Outcome::Submitted { job: report, .. } = apply(&mut s, 1_500, op).unwrap() else { panic!() };
    let a0 = element(&s, "a-0");
    place(&mut s, a0);
    exit(&mut s, a0, 3);
    let r = s.job(report).unwrap();
    assert_eq!(r.state, JobState::Cancelled);
    let reason = r.events.back().unwrap().message.clone();
    assert!(reason.contains("ok:a") && reason.contains("Failed"), "{reason}");
}

#[test]
fn an_array_waits_for_its_own_dependencies_before_any_element_is_created() {
    let mut s = two_nodes_one_queue();
    let prep = submit(&mut s, "prep");
    let after = vec![After { job: JobRef::Name(Name::lit("prep")), when: When::Ok }];
    let id = submit_array(&mut s, "a", array(0, 10, Some(2)), after).unwrap();
    assert!(s.job_by_name("a-0").is_none());
    assert!(s.array(id).unwrap().reason.contains("waiting for prep"), "{}", s.array(id).unwrap().reason);
    place(&mut s, prep);
    exit(&mut s, prep, 0);
    assert_eq!(unfinished_elements(&s), ["a-0", "a-1"]);
}

#[test]
fn an_array_whose_dependency_breaks_is_cancelled_whole() {
    let mut s = two_nodes_one_queue();
    let prep = submit(&mut s, "prep");
    let after = vec![After { job: JobRef::Name(Name::lit("prep")), when: When::Ok }];
    let id = submit_array(&mut s, "a", array(0, 10, None), after).unwrap();
    apply(&mut s, 2_000, Op::Cancel { job: prep }).unwrap();
    let a = s.array(id).unwrap();
    assert!(a.cancelled && a.is_finished());
    assert_eq!(a.tally.cancelled, 10);
    assert!(a.reason.contains("can no longer hold"), "{}", a.reason);
}

#[test]
fn cancelling_an_array_cancels_its_elements_and_creates_no_more() {
    let mut s = two_nodes_one_queue();
    let id = submit_array(&mut s, "a", array(0, 100, Some(4)), vec![]).unwrap();
    let a1 = element(&s, "a-1");
    place(&mut s, a1);
    exit(&mut s, a1, 0);
    let a0 = element(&s, "a-0");
    place(&mut s, a0);
    apply(&mut s, 4_000, Op::CancelArray { array: id }).unwrap();
    assert!(unfinished_elements(&s).is_empty());
    assert_eq!(s.job(a0).unwrap().state, JobState::Cancelled);
    let a = s.array(id).unwrap();
    assert_eq!((a.tally.succeeded, a.tally.cancelled), (1, 99));
    assert!(a.is_finished());
    apply(&mut s, 5_000, Op::CancelArray { array: id }).unwrap();
    assert!(s.job_by_name("a-5").is_none());
    // Its name is free again.
    submit_array(&mut s, "a", array(0, 1, None), vec![]).unwrap();
}

#[test]
fn bad_arrays_are_refused_naming_the_field() {
    let mut s = two_nodes_one_queue();
    let field = |e: ApplyError| match e {
        ApplyError::Invalid { field, .. } => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(field(submit_array(&mut s, "a", array(0, 0, None), vec![]).unwrap_err()), "array.count");
    assert_eq!(field(submit_array(&mut s, "a", array(0, 5, Some(0)), vec![]).unwrap_err()), "array.max_running");
    let long = "x".repeat(60);
    assert_eq!(field(submit_array(&mut s, &long, array(0, 10_000, None), vec![]).unwrap_err()), "name");
    let itself = vec![After { job: JobRef::Name(Name::lit("a")), when: When::Ok }];
    assert_eq!(field(submit_array(&mut s, "a", array(0, 5, None), itself).unwrap_err()), "after[0].job");
    assert!(s.arrays().is_empty() && s.jobs().is_empty(), "a refusal changes nothing");
}

#[test]
fn an_arrays_names_are_its_own_while_it_runs() {
    let mut s = two_nodes_one_queue();
    submit(&mut s, "b-7");
    let exists = |e: ApplyError| matches!(e, ApplyError::Exists { .. });
    assert!(exists(submit_array(&mut s, "b", array(0, 10, None), vec![]).unwrap_err()), "b-7 is taken");
    submit_array(&mut s, "c", array(0, 10, Some(1)), vec![]).unwrap();
    let op = |name: &str| Op::SubmitRunAs { spec: gpu_job(name, "q", 1), request_id: None, run_as: None };
    assert!(exists(apply(&mut s, 1_000, op("c")).unwrap_err()), "the array's own name");
    assert!(exists(apply(&mut s, 1_000, op("c-9")).unwrap_err()), "an element not created yet");
    apply(&mut s, 1_000, op("c-10")).unwrap();
}

#[test]
fn a_state_with_an_array_round_trips_through_a_snapshot() {
    let mut s = two_nodes_one_queue();
    let id = submit_array(&mut s, "a", array(0, 50, Some(2)), vec![]).unwrap();
    let a0 = element(&s, "a-0");
    place(&mut s, a0);
    exit(&mut s, a0, 0);
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
    let (back, _): (State, _) = common::decode_state(&bytes);
    assert_eq!(back, s);
    assert_eq!(back.array_by_name("a").unwrap().id, id);
    let mut back = back;
    let a1 = element(&back, "a-1");
    place(&mut back, a1);
    exit(&mut back, a1, 0);
    assert!(back.job_by_name("a-3").is_some(), "the restored array goes on creating elements");
}
