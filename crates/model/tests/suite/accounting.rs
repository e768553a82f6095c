//! Accounting's records (issue 34), through `State::apply`: one per attempt, how it ended,
//! the work it lost, nothing while accounting is off, and the newest records carried by a
//! snapshot.

use crate::common;

use baton_model::accounting::{AccountingSettings, Ending};
use baton_model::alloc::ReplicaAlloc;
use baton_model::node::NodeStatus;
use baton_model::plan::{Decision, Plan};
use baton_model::{JobId, Name, Op, Outcome, State};
use common::{apply, submit_as, two_nodes_one_queue};

const MINUTE_MS: u64 = 60_000;

fn on(node: &str, gpus: &[u32]) -> Vec<ReplicaAlloc> {
    vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit(node), gpus: gpus.to_vec() }]
}

fn accounting_on() -> State {
    let mut s = two_nodes_one_queue();
    apply(&mut s, 0, Op::StartAccounting).unwrap();
    s
}

fn place(s: &mut State, now_ms: u64, job: JobId, attempt: u32, replicas: Vec<ReplicaAlloc>) {
    let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt, replicas }] };
    match apply(s, now_ms, Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { accepted: 1, .. } => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_attempt_that_exits_leaves_one_record_with_its_gpu_time() {
    let mut s = accounting_on();
    let a = submit_as(&mut s, "a", "alice", 2);
    place(&mut s, MINUTE_MS, a, 1, on("n1", &[0, 1]));
    assert_eq!(s.accounting().made(), 0, "a running attempt has no record yet");
    apply(&mut s, 61 * MINUTE_MS, Op::JobExited { job: a, attempt: 1, exit_code: 0 }).unwrap();
    let r: Vec<_> = s.accounting().after(0).cloned().collect();
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!((r.seq, r.job, r.attempt, r.user.as_str(), r.queue.as_str()), (1, a, 1, "alice", "q"));
    assert_eq!((r.start_ms, r.end_ms, r.gpus, r.gpu_ms()), (MINUTE_MS, 61 * MINUTE_MS, 2, 2 * 60 * MINUTE_MS));
    assert_eq!(r.nodes, vec!["n1".to_string()]);
    assert_eq!(r.pool, "default");
    assert_eq!(r.ending, Ending::Succeeded);
    assert_eq!((r.lost_ms, r.detail.as_str()), (0, "exited 0"));
}

#[test]
fn a_lost_node_requeues_and_the_record_counts_the_work_since_the_checkpoint() {
    let mut s = accounting_on();
    let a = submit_as(&mut s, "a", "alice", 1);
    place(&mut s, 0, a, 1, on("n2", &[0]));
    apply(&mut s, 10 * MINUTE_MS, Op::JobCheckpointed { job: a, attempt: 1 }).unwrap();
    apply(&mut s, 25 * MINUTE_MS, Op::SetNodeStatus { node: Name::lit("n2"), status: NodeStatus::Lost }).unwrap();
    let r = s.accounting().after(0).next().cloned().expect("a record");
    assert_eq!(r.ending, Ending::Requeued);
    assert_eq!(r.lost_ms, 15 * MINUTE_MS, "from the checkpoint at 10 min to the loss at 25");
    assert!(r.detail.contains("node n2 was lost"), "{}", r.detail);
    // The next attempt is a record of its own.
    place(&mut s, 30 * MINUTE_MS, a, 2, on("n1", &[0]));
    apply(&mut s, 40 * MINUTE_MS, Op::JobExited { job: a, attempt: 2, exit_code: 3 }).unwrap();
    let second = s.accounting().after(1).next().cloned().expect("a second record");
    assert_eq!((second.seq, second.attempt, second.ending), (2, 2, Ending::Failed { exit_code: Some(3) }));
    assert_eq!(second.lost_ms, 0, "a failed job is not run again");
}

#[test]
fn a_paused_job_and_a_cancelled_one_say_so() {
    let mut s = accounting_on();
    let (a, b) = (submit_as(&mut s, "a", "alice", 1), submit_as(&mut s, "b", "bob", 1));
    place(&mut s, 0, a, 1, on("n1", &[0]));
    place(&mut s, 0, b, 1, on("n1", &[1]));
    apply(&mut s, MINUTE_MS, Op::Pause { job: a }).unwrap();
    apply(&mut s, 2 * MINUTE_MS, Op::JobStopped { job: a, attempt: 1, checkpointed: true }).unwrap();
    apply(&mut s, 3 * MINUTE_MS, Op::Cancel { job: b }).unwrap();
    let endings: Vec<_> = s.accounting().after(0).map(|r| (r.name.clone(), r.ending.clone(), r.lost_ms)).collect();
    assert_eq!(endings, vec![("a".into(), Ending::Paused, 0), ("b".into(), Ending::Cancelled, 0)]);
}

#[test]
fn nothing_is_recorded_while_accounting_is_off() {
    let mut s = two_nodes_one_queue();
    let a = submit_as(&mut s, "a", "alice", 1);
    place(&mut s, 0, a, 1, on("n1", &[0]));
    apply(&mut s, MINUTE_MS, Op::JobExited { job: a, attempt: 1, exit_code: 0 }).unwrap();
    assert_eq!((s.accounting().made(), s.accounting().settings()), (0, None));
    // A person's retention is kept when the leader later starts accounting.
    let year = AccountingSettings { retention_ms: 365 * 86_400_000 };
    apply(&mut s, MINUTE_MS, Op::SetAccounting(year)).unwrap();
    apply(&mut s, MINUTE_MS, Op::StartAccounting).unwrap();
    assert_eq!(s.accounting().settings(), Some(year));
    let e = apply(&mut s, MINUTE_MS, Op::SetAccounting(AccountingSettings { retention_ms: 5 })).unwrap_err();
    assert!(e.to_string().contains("accounting_retention"), "{e}");
}

#[test]
fn a_snapshot_carries_the_newest_records_and_numbering_goes_on_alike() {
    let mut s = accounting_on();
    let a = submit_as(&mut s, "a", "alice", 1);
    for attempt in 1..=3 {
        place(&mut s, attempt as u64 * MINUTE_MS, a, attempt, on("n1", &[0]));
        let lost = Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost };
        apply(&mut s, attempt as u64 * MINUTE_MS + 1_000, lost).unwrap();
        apply(
            &mut s,
            attempt as u64 * MINUTE_MS + 2_000,
            Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Ready },
        )
        .unwrap();
    }
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
    let (mut back, _): (State, usize) = common::decode_state(&bytes);
    assert_eq!(back.accounting(), s.accounting());
    assert_eq!(back.accounting().made(), 3);
    for st in [&mut s, &mut back] {
        place(st, 10 * MINUTE_MS, a, 4, on("n2", &[0]));
        apply(st, 11 * MINUTE_MS, Op::JobExited { job: a, attempt: 4, exit_code: 0 }).unwrap();
    }
    assert_eq!(back.accounting(), s.accounting());
    assert_eq!(s.accounting().after(3).map(|r| r.seq).collect::<Vec<_>>(), vec![4]);
}
