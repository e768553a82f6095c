//! Jobs that wait for others (decisions.md section 13), through `State::apply`: what is
//! refused at submission, that a held job cannot be placed, and how each condition
//! releases or cancels it.

use baton_model::after::{After, JobRef, When};
use baton_model::alloc::ReplicaAlloc;
use baton_model::command::Command;
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::plan::{Decision, Plan};
use baton_model::rejection::Rejection;
use baton_model::{ApplyError, JobId, JobState, Name, Op, Outcome, State};

fn apply(s: &mut State, now_ms: u64, op: Op) -> Result<Outcome, ApplyError> {
    s.apply(Command { now_ms, op }).map(|a| a.outcome)
}

fn cluster() -> State {
    let mut s = State::default();
    apply(&mut s, 0, Op::RegisterNodes(vec![gpu_node("n1", 8)])).unwrap();
    apply(&mut s, 0, Op::PutQueue(gpu_queue("q", 8))).unwrap();
    s
}

fn after(job: &str, when: When) -> After {
    After { job: JobRef::Name(Name::lit(job)), when }
}

fn submit(s: &mut State, name: &str, deps: Vec<After>) -> Result<JobId, ApplyError> {
    let op = if deps.is_empty() {
        Op::SubmitRunAs { spec: gpu_job(name, "q", 1), request_id: None, run_as: None }
    } else {
        Op::SubmitAfter { spec: gpu_job(name, "q", 1), request_id: None, run_as: None, after: deps }
    };
    match apply(s, 1_000, op)? {
        Outcome::Submitted { job, .. } => Ok(job),
        other => panic!("{other:?}"),
    }
}

fn place(s: &mut State, job: JobId) -> Vec<(u32, Rejection)> {
    let attempt = s.job(job).unwrap().attempt + 1;
    let gpu = job as u32 % 8;
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![gpu] }];
    let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt, replicas }] };
    match apply(s, 2_000, Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => rejected,
        other => panic!("{other:?}"),
    }
}

fn exit(s: &mut State, job: JobId, code: i32, now_ms: u64) {
    let attempt = s.job(job).unwrap().attempt;
    apply(s, now_ms, Op::JobExited { job, attempt, exit_code: code }).unwrap();
}

fn state(s: &State, job: JobId) -> JobState {
    s.job(job).unwrap().state
}

#[test]
fn a_dependency_on_an_unknown_job_or_on_itself_is_refused_by_field_and_changes_nothing() {
    let mut s = cluster();
    submit(&mut s, "prep", vec![]).unwrap();
    let before = s.jobs().len();
    let e = submit(&mut s, "train", vec![after("prep", When::Ok), after("nope", When::Ok)]).unwrap_err();
    assert!(e.to_string().contains("after[1].job") && e.to_string().contains("nope"), "{e}");
    let by_id = Op::SubmitAfter {
        spec: gpu_job("train", "q", 1),
        request_id: None,
        run_as: None,
        after: vec![After { job: JobRef::Id(999), when: When::Any }],
    };
    let e = apply(&mut s, 1_000, by_id).unwrap_err();
    assert!(e.to_string().contains("after[0].job") && e.to_string().contains("999"), "{e}");
    let e = submit(&mut s, "train", vec![after("train", When::Ok)]).unwrap_err();
    assert!(e.to_string().contains("cannot wait for itself"), "{e}");
    let many = (0..65).map(|_| after("prep", When::Ok)).collect();
    let e = submit(&mut s, "train", many).unwrap_err();
    assert!(e.to_string().contains("after") && e.to_string().contains("64"), "{e}");
    assert_eq!(s.jobs().len(), before, "a refused submit adds no job");
}

#[test]
fn a_held_job_cannot_be_placed_until_its_dependency_succeeds() {
    let mut s = cluster();
    let prep = submit(&mut s, "prep", vec![]).unwrap();
    let train = submit(&mut s, "train", vec![after("prep", When::Ok)]).unwrap();
    assert!(s.held(train));
    assert!(s.job(train).unwrap().reason.contains("waiting for prep to succeed"), "{}", s.job(train).unwrap().reason);
    let rejected = place(&mut s, train);
    assert!(matches!(rejected.as_slice(), [(0, Rejection::NotWaiting { .. })]), "{rejected:?}");

    assert!(place(&mut s, prep).is_empty());
    assert!(s.held(train), "a start is not a success");
    exit(&mut s, prep, 0, 50_000);
    assert!(!s.held(train));
    let j = s.job(train).unwrap();
    assert_eq!((j.state, j.pending_since_ms), (JobState::Pending, 50_000), "reserve_after counts from here");
    assert!(j.events.iter().any(|e| e.message.contains("dependencies hold: ok:prep")), "{:?}", j.events);
    assert!(place(&mut s, train).is_empty());
}

#[test]
fn a_dependency_that_can_no_longer_hold_cancels_the_chain_in_one_command() {
    let mut s = cluster();
    let prep = submit(&mut s, "prep", vec![]).unwrap();
    let train = submit(&mut s, "train", vec![after("prep", When::Ok)]).unwrap();
    let eval = submit(&mut s, "eval", vec![after("train", When::Any)]).unwrap();
    let cleanup = submit(&mut s, "cleanup", vec![after("train", When::NotOk)]).unwrap();
    place(&mut s, prep);
    exit(&mut s, prep, 3, 9_000);
    assert_eq!(state(&s, prep), JobState::Failed);
    assert_eq!(state(&s, train), JobState::Cancelled);
    let reason = &s.job(train).unwrap().reason;
    assert!(reason.contains("ok:prep") && reason.contains("Failed"), "{reason}");
    // train's cancellation settles its own waiters in the same command.
    assert_eq!((state(&s, eval), s.held(eval)), (JobState::Pending, false), "any: train ended");
    assert_eq!((state(&s, cleanup), s.held(cleanup)), (JobState::Pending, false), "notok: train was cancelled");
    assert!(s.waits().is_empty());
}

#[test]
fn started_holds_once_the_job_has_run_and_notok_breaks_on_success() {
    let mut s = cluster();
    let server = submit(&mut s, "server", vec![]).unwrap();
    let client = submit(&mut s, "client", vec![after("server", When::Started)]).unwrap();
    let on_failure = submit(&mut s, "on-failure", vec![after("server", When::NotOk)]).unwrap();
    place(&mut s, server);
    assert!(!s.held(client));
    assert!(s.held(on_failure));
    exit(&mut s, server, 0, 5_000);
    assert_eq!(state(&s, on_failure), JobState::Cancelled);
    // A dependency already met at submission releases the job at once.
    let late = submit(&mut s, "late", vec![after("server", When::Ok)]).unwrap();
    assert!(!s.held(late));
    // One already broken cancels it at once, with the reason.
    let never = submit(&mut s, "never", vec![after("server", When::NotOk)]).unwrap();
    assert_eq!(state(&s, never), JobState::Cancelled);
    assert!(s.job(never).unwrap().reason.contains("notok:server"));
}

#[test]
fn a_job_cancelled_while_held_waits_no_more_and_a_dependency_outlives_the_retention() {
    let mut s = cluster();
    s.set_retain_finished(0);
    let prep = submit(&mut s, "prep", vec![]).unwrap();
    let train = submit(&mut s, "train", vec![after("prep", When::Ok)]).unwrap();
    let other = submit(&mut s, "other", vec![after("prep", When::Ok)]).unwrap();
    apply(&mut s, 3_000, Op::Cancel { job: other }).unwrap();
    assert!(!s.held(other));
    place(&mut s, prep);
    exit(&mut s, prep, 0, 4_000);
    assert_eq!(
        (state(&s, train), s.held(train)),
        (JobState::Pending, false),
        "prep succeeded, even kept 0 finished jobs"
    );
}

#[test]
fn snapshots_keep_the_waiting_jobs_and_use_format_6s_layout_while_none_waits() {
    let config = bincode::config::standard();
    let mut s = cluster();
    let prep = submit(&mut s, "prep", vec![]).unwrap();
    let plain = bincode::serde::encode_to_vec(&s, config).unwrap();
    submit(&mut s, "train", vec![after("prep", When::Ok)]).unwrap();
    let waiting = bincode::serde::encode_to_vec(&s, config).unwrap();
    assert!(waiting.len() > plain.len());
    // Without a maintenance window: the layout before windows, which decode_state tries.
    let (back, _): (baton_model::state::PreWindowsState, usize) =
        bincode::serde::decode_from_slice(&waiting, config).unwrap();
    let back = back.0;
    assert_eq!(back, s);
    let train = s.job_by_name("train").unwrap().id;
    assert!(back.held(train));
    // The derived index came back too: prep's success releases train in the copy.
    let mut back = back;
    place(&mut back, prep);
    exit(&mut back, prep, 0, 6_000);
    assert!(!back.held(train));
    assert!(back.waits().is_empty());
    let after_release = bincode::serde::encode_to_vec(&back, config).unwrap();
    let (old, _): (baton_model::state::PreVisibilityState, usize) =
        bincode::serde::decode_from_slice(&after_release, config).unwrap();
    assert_eq!(old.0, back, "nothing waits: format 6's layout (no visibility set either)");
}
