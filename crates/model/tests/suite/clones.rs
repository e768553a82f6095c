//! What a clone of the state shares with the state until one of them changes it: the leader
//! clones the state for every round, so what a clone copies is paid every round.

use std::sync::Arc;

use baton_model::State;
use baton_model::command::{Command, Op};
use baton_model::fixture;

fn apply(s: &mut State, op: Op) {
    s.apply(Command { now_ms: 2_000, op }).expect("a valid fixture");
}

#[test]
fn a_clone_shares_each_jobs_events_until_one_side_adds_an_event() {
    let mut s = State::default();
    apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 8)]));
    apply(&mut s, Op::PutQueue(fixture::gpu_queue("q", 8)));
    apply(&mut s, Op::Submit { spec: fixture::gpu_job("j", "q", 1), request_id: None });
    let id = s.job_by_name("j").expect("submitted").id;
    let before = s.clone();
    assert!(Arc::ptr_eq(&s.jobs()[&id].events, &before.jobs()[&id].events), "a clone copies no event");
    apply(&mut s, Op::Cancel { job: id });
    let (now, then) = (&s.jobs()[&id].events, &before.jobs()[&id].events);
    assert!(!Arc::ptr_eq(now, then));
    assert_eq!(now.len(), then.len() + 1, "the cancel's event is the changed side's alone");
    assert!(then.iter().all(|e| now.contains(e)));
}
