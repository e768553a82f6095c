//! Creates of cohorts and priority classes decided in the replicated state: of two creates
//! of one name exactly one lands, and the refused one changes nothing (a client that listed
//! first and then put could not tell, and the second put replaced the first).

use baton_model::class::PriorityClass;
use baton_model::command::{Command, Op};
use baton_model::queue::Cohort;
use baton_model::{ApplyError, Name, State};

fn apply(s: &mut State, op: Op) -> Result<(), ApplyError> {
    s.apply(Command { now_ms: 1_000, op }).map(|_| ())
}

fn cohort(name: &str, fair_sharing: bool) -> Cohort {
    Cohort { name: Name::lit(name), parent: None, fair_sharing }
}

fn class(name: &str, value: i32) -> PriorityClass {
    PriorityClass { name: Name::lit(name), value, preemptible: true }
}

#[test]
fn of_two_cohort_creates_of_one_name_the_second_is_refused_and_changes_nothing() {
    let mut s = State::default();
    apply(&mut s, Op::CreateCohort(cohort("org", true))).unwrap();
    let e = apply(&mut s, Op::CreateCohort(cohort("org", false))).unwrap_err();
    assert_eq!(e, ApplyError::Exists { kind: "cohort".into(), name: "org".into() });
    assert!(s.cohorts()[&Name::lit("org")].fair_sharing, "the first create is kept");
}

#[test]
fn a_cohort_create_checks_what_a_put_checks() {
    let mut s = State::default();
    let orphan = Cohort { parent: Some(Name::lit("nowhere")), ..cohort("org", false) };
    assert_eq!(apply(&mut s, Op::CreateCohort(orphan)).unwrap_err(), ApplyError::unknown("cohort", "nowhere"));
    assert!(s.cohorts().is_empty());
}

#[test]
fn of_two_class_creates_of_one_name_the_second_is_refused_and_changes_nothing() {
    let mut s = State::default();
    let before = s.classes().len();
    apply(&mut s, Op::CreateClass(class("urgent", 900))).unwrap();
    let e = apply(&mut s, Op::CreateClass(class("urgent", 5))).unwrap_err();
    assert_eq!(e, ApplyError::Exists { kind: "priority class".into(), name: "urgent".into() });
    assert_eq!(s.classes()[&Name::lit("urgent")].value, 900, "the first create is kept");
    assert_eq!(s.classes().len(), before + 1);
}

#[test]
fn creates_need_a_token_like_the_puts_they_replace() {
    assert!(Op::CreateCohort(cohort("org", false)).from_client());
    assert!(Op::CreateClass(class("urgent", 1)).from_client());
    assert!(!Op::CreateClass(class("urgent", 1)).leader_only());
}
