//! The plan checker against stale plans: decisions computed before a starving job reserved
//! resources (policy section 9) must not land on them, unless they backfill.

use baton_model::alloc::ReplicaAlloc;
use baton_model::command::{Command, Op, Outcome};
use baton_model::fixture;
use baton_model::job::{JobId, JobSpec, JobState, PreemptionMode};
use baton_model::node::NodeSpec;
use baton_model::plan::{Decision, Plan, Victim};
use baton_model::queue::QueueSpec;
use baton_model::rejection::Rejection;
use baton_model::scheduler::SchedulerSettings;
use baton_model::{Name, State};

fn apply(s: &mut State, op: Op) -> Outcome {
    let now_ms = s.now_ms() + 1_000;
    s.apply(Command { now_ms, op }).expect("command applies").outcome
}

fn node(name: &str) -> NodeSpec {
    fixture::gpu_node(name, 4)
}

fn queue(name: &str) -> QueueSpec {
    fixture::gpu_queue(name, 8)
}

fn spec(name: &str, queue: &str, gpus: u64, time_limit_ms: Option<u64>) -> JobSpec {
    JobSpec { preemption_mode: PreemptionMode::Requeue, time_limit_ms, ..fixture::gpu_job(name, queue, gpus) }
}

fn submit(s: &mut State, spec: JobSpec) -> JobId {
    let name = spec.name.clone();
    apply(s, Op::Submit { spec, request_id: None });
    s.job_by_name(name.as_str()).expect("submitted").id
}

fn on(node: &str, gpus: &[u32]) -> Vec<ReplicaAlloc> {
    vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit(node), gpus: gpus.to_vec() }]
}

/// Applies one decision; `Err` carries the checker's reason.
fn decide(s: &mut State, d: Decision) -> Result<(), String> {
    let based_on = s.applied();
    match apply(s, Op::ApplyPlan(Plan { based_on, decisions: vec![d] })) {
        Outcome::PlanApplied { accepted: 1, rejected, .. } if rejected.is_empty() => Ok(()),
        Outcome::PlanApplied { rejected, .. } => Err(rejected.into_iter().map(|(_, why)| why.to_string()).collect()),
        other => panic!("a plan gave {other:?}"),
    }
}

fn place(s: &mut State, job: JobId, node: &str, gpus: &[u32]) -> Result<(), String> {
    decide(s, Decision::Place { job, attempt: 1, replicas: on(node, gpus) })
}

/// Nodes n1 and n2 (4 GPUs each), queues `q` and `other`. `busy` runs on n1's GPUs 0-1
/// with `busy_limit_ms`; `big` (queue q, 4 GPUs) reserves all of n1 and waits for it.
fn reserved_cluster(busy_limit_ms: Option<u64>) -> (State, JobId, JobId) {
    let mut s = State::new();
    apply(&mut s, Op::SetScheduler(SchedulerSettings { reserve_after_ms: Some(0) }));
    apply(&mut s, Op::RegisterNodes(vec![node("n1"), node("n2")]));
    apply(&mut s, Op::PutQueue(queue("q")));
    apply(&mut s, Op::PutQueue(queue("other")));
    let busy = submit(&mut s, spec("busy", "other", 2, busy_limit_ms));
    place(&mut s, busy, "n1", &[0, 1]).expect("busy starts");
    let big = submit(&mut s, spec("big", "q", 4, None));
    let pool = Name::lit("default");
    let reserve = Decision::Reserve { job: big, pool, replicas: on("n1", &[0, 1, 2, 3]), waits_for: vec![busy] };
    decide(&mut s, reserve).expect("big reserves n1");
    (s, busy, big)
}

#[test]
fn a_stale_place_on_gpus_reserved_for_a_starving_job_is_refused() {
    let (mut s, _, _) = reserved_cluster(None);
    let late = submit(&mut s, spec("late", "other", 1, None));
    let why = place(&mut s, late, "n1", &[2]).expect_err("reserved GPU 2 is taken");
    assert!(why.contains("reserved for big"), "{why}");
    assert_eq!(s.job(late).unwrap().state, JobState::Pending);
    // The same job elsewhere is fine.
    place(&mut s, late, "n2", &[0]).expect("n2 holds no reservation");
}

#[test]
fn a_job_that_ends_before_the_reservation_can_start_backfills() {
    let (mut s, _, _) = reserved_cluster(Some(600_000));
    let short = submit(&mut s, spec("short", "other", 1, Some(60_000)));
    place(&mut s, short, "n1", &[2]).expect("ends before busy does: backfill");
    let long = submit(&mut s, spec("long", "other", 1, Some(6_000_000)));
    let why = place(&mut s, long, "n1", &[3]).expect_err("ends after busy does");
    assert!(why.contains("does not end in time"), "{why}");
}

#[test]
fn nothing_backfills_behind_a_job_without_a_time_limit() {
    let (mut s, _, _) = reserved_cluster(None);
    let short = submit(&mut s, spec("short", "other", 1, Some(60_000)));
    let why = place(&mut s, short, "n1", &[2]).expect_err("busy may run for ever");
    assert!(why.contains("reserved for big"), "{why}");
}

#[test]
fn no_other_job_of_the_reserving_queue_starts_anywhere() {
    let (mut s, _, _) = reserved_cluster(None);
    let sibling = submit(&mut s, spec("sibling", "q", 1, None));
    let why = place(&mut s, sibling, "n2", &[0]).expect_err("its queue waits behind big");
    assert!(why.contains("queue q waits behind big"), "{why}");
}

#[test]
fn a_preemption_onto_reserved_gpus_is_refused_even_for_a_short_job() {
    let (mut s, busy, _) = reserved_cluster(Some(600_000));
    let pre = submit(&mut s, spec("pre", "other", 1, Some(1_000)));
    let victims = vec![Victim { job: busy, attempt: 1 }];
    let d = Decision::Preempt { job: pre, victims, replicas: on("n1", &[0]), message: "test".into() };
    let why = decide(&mut s, d).expect_err("a preemption never backfills");
    assert!(why.contains("a preemption never backfills"), "{why}");
}

#[test]
fn a_plan_from_a_state_not_yet_reached_is_refused_whole() {
    let (mut s, _, _) = reserved_cluster(None);
    let late = submit(&mut s, spec("late", "other", 1, None));
    let ahead = s.applied() + 1;
    let plan =
        Plan { based_on: ahead, decisions: vec![Decision::Place { job: late, attempt: 1, replicas: on("n2", &[0]) }] };
    let Outcome::PlanApplied { accepted, rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
    assert_eq!(accepted, 0);
    let why = &rejected[0].1;
    assert!(matches!(why, Rejection::FromTheFuture { .. }), "{rejected:?}");
    assert!(why.to_string().contains("has applied only"), "{why}");
    assert_eq!(s.job(late).unwrap().state, JobState::Pending);
}

#[test]
fn an_applied_plan_reports_how_many_commands_it_is_behind() {
    let (mut s, _, _) = reserved_cluster(None);
    let late = submit(&mut s, spec("late", "other", 1, None));
    let based_on = s.applied();
    apply(&mut s, Op::Tick);
    apply(&mut s, Op::Tick);
    let plan = Plan { based_on, decisions: vec![Decision::Place { job: late, attempt: 1, replicas: on("n2", &[0]) }] };
    let outcome = apply(&mut s, Op::ApplyPlan(plan));
    assert_eq!(outcome, Outcome::PlanApplied { accepted: 1, rejected: Vec::new(), stale_by: 2 });
}
