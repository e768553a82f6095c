//! Usage over time and per-user limits (decisions.md section 12), through `State::apply`:
//! what a running, suspended and finished job adds to its user's account, the plan
//! checker's refusal of a placement over `max_per_user`, a snapshot round trip, what a
//! deleted queue and a half-life turned off forget, and settings refused by name.

use crate::common;

use baton_model::alloc::ReplicaAlloc;
use baton_model::plan::{Decision, Plan};
use baton_model::rejection::Rejection;
use baton_model::resources::Resources;
use baton_model::usage::UsageSettings;
use baton_model::{Name, Op, Outcome, State};
use common::{apply, submit_as, two_nodes_one_queue};

const HOUR_MS: u64 = 3_600_000;

fn on_n1(gpus: &[u32]) -> Vec<ReplicaAlloc> {
    vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: gpus.to_vec() }]
}

fn decide(s: &mut State, now_ms: u64, d: Decision) -> Result<(), Rejection> {
    let plan = Plan { based_on: s.applied(), decisions: vec![d] };
    match apply(s, now_ms, Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => rejected.into_iter().next().map_or(Ok(()), |(_, why)| Err(why)),
        other => panic!("{other:?}"),
    }
}

fn gpu_seconds(s: &State, user: &str, now_ms: u64) -> f64 {
    let key = (Name::lit("q"), user.to_string());
    s.usage().usage_at(&key, now_ms).get("gpu").copied().unwrap_or(0.0)
}

fn with_usage() -> State {
    let mut s = two_nodes_one_queue();
    let settings = UsageSettings { half_life_ms: Some(HOUR_MS), ..Default::default() };
    apply(&mut s, 0, Op::SetUsage(settings)).unwrap();
    s
}

#[test]
fn a_job_adds_what_it_holds_while_it_runs_and_nothing_once_it_ended() {
    let mut s = with_usage();
    let a = submit_as(&mut s, "a", "alice", 2);
    decide(&mut s, 0, Decision::Place { job: a, attempt: 1, replicas: on_n1(&[0, 1]) }).unwrap();
    let ran = gpu_seconds(&s, "alice", HOUR_MS);
    let want = 2.0 * 3600.0 / std::f64::consts::LN_2 * 0.5;
    assert!((ran - want).abs() < 1e-6, "{ran} vs {want}");
    apply(&mut s, HOUR_MS, Op::JobExited { job: a, attempt: 1, exit_code: 0 }).unwrap();
    assert!((gpu_seconds(&s, "alice", 2 * HOUR_MS) - want / 2.0).abs() < 1e-6, "it only decays after its end");
    assert!(s.usage().held().is_empty());
    assert_eq!(gpu_seconds(&s, "bob", 2 * HOUR_MS), 0.0);
}

#[test]
fn the_plan_checker_refuses_a_placement_over_the_users_limit_and_takes_another_users() {
    let mut s = with_usage();
    apply(&mut s, 0, Op::SetUserLimit { queue: Name::lit("q"), limit: Resources::of(&[("gpu", 3)]) }).unwrap();
    let (a1, a2, b1) =
        (submit_as(&mut s, "a1", "alice", 2), submit_as(&mut s, "a2", "alice", 2), submit_as(&mut s, "b1", "bob", 2));
    decide(&mut s, 0, Decision::Place { job: a1, attempt: 1, replicas: on_n1(&[0, 1]) }).unwrap();
    let why = decide(&mut s, 0, Decision::Place { job: a2, attempt: 1, replicas: on_n1(&[2, 3]) }).unwrap_err();
    assert_eq!(
        why,
        Rejection::UserLimit(
            "user alice's jobs in queue q hold 2 gpu of the 3 each user may hold (max_per_user); it asks 2".into()
        )
    );
    decide(&mut s, 0, Decision::Place { job: b1, attempt: 1, replicas: on_n1(&[2, 3]) }).unwrap();
    // Removing the limit lets alice's second job start.
    apply(&mut s, 0, Op::SetUserLimit { queue: Name::lit("q"), limit: Resources::new() }).unwrap();
    decide(&mut s, 0, Decision::Place { job: a2, attempt: 1, replicas: on_n1(&[4, 5]) }).unwrap();
}

#[test]
fn usage_survives_a_snapshot_bit_for_bit_and_goes_on_alike() {
    let mut s = with_usage();
    apply(&mut s, 0, Op::SetUserLimit { queue: Name::lit("q"), limit: Resources::of(&[("gpu", 8)]) }).unwrap();
    let a = submit_as(&mut s, "a", "alice", 2);
    decide(&mut s, 1_000, Decision::Place { job: a, attempt: 1, replicas: on_n1(&[0, 1]) }).unwrap();
    apply(&mut s, 777_777, Op::Tick).unwrap();
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
    let (mut back, _): (State, usize) = common::decode_state(&bytes);
    assert_eq!(back.usage(), s.usage(), "accounts, settings, limits and what runs held");
    for st in [&mut s, &mut back] {
        apply(st, 5_555_555, Op::JobExited { job: a, attempt: 1, exit_code: 0 }).unwrap();
    }
    assert_eq!(back.usage(), s.usage());
    assert_eq!(gpu_seconds(&back, "alice", 9 * HOUR_MS).to_bits(), gpu_seconds(&s, "alice", 9 * HOUR_MS).to_bits());
}

#[test]
fn a_deleted_queue_and_a_half_life_turned_off_forget_their_usage() {
    let mut s = with_usage();
    let a = submit_as(&mut s, "a", "alice", 1);
    decide(&mut s, 0, Decision::Place { job: a, attempt: 1, replicas: on_n1(&[0]) }).unwrap();
    apply(&mut s, HOUR_MS, Op::JobExited { job: a, attempt: 1, exit_code: 0 }).unwrap();
    assert!(gpu_seconds(&s, "alice", HOUR_MS) > 0.0);
    apply(&mut s, HOUR_MS, Op::SetUsage(UsageSettings::default())).unwrap();
    assert!(s.usage().accounts().is_empty(), "off forgets");
    apply(&mut s, HOUR_MS, Op::SetUsage(UsageSettings { half_life_ms: Some(HOUR_MS), ..Default::default() })).unwrap();
    assert_eq!(gpu_seconds(&s, "alice", 2 * HOUR_MS), 0.0, "on again starts from zero");
    apply(&mut s, HOUR_MS, Op::SetUserLimit { queue: Name::lit("q"), limit: Resources::of(&[("gpu", 1)]) }).unwrap();
    apply(&mut s, HOUR_MS, Op::DeleteQueue { name: Name::lit("q") }).unwrap();
    assert!(s.usage().limits().is_empty() && s.usage().accounts().is_empty());
}

#[test]
fn bad_settings_and_limits_are_refused_by_name() {
    let mut s = with_usage();
    let short = UsageSettings { half_life_ms: Some(10), ..Default::default() };
    let e = apply(&mut s, 0, Op::SetUsage(short)).unwrap_err().to_string();
    assert!(e.contains("usage_half_life must be from 60 s"), "{e}");
    let weights = UsageSettings { half_life_ms: None, weights_milli: [("gpu!".to_string(), 1000)].into() };
    let e = apply(&mut s, 0, Op::SetUsage(weights)).unwrap_err().to_string();
    assert!(e.contains("usage_weights"), "{e}");
    let e = apply(&mut s, 0, Op::SetUserLimit { queue: Name::lit("nope"), limit: Resources::new() }).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    assert_eq!(s.usage().settings().half_life_ms, Some(HOUR_MS), "a refused command changes nothing");
}
