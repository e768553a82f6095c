//! The state machine writes accounting records (issue 34) into the replica's record store:
//! as it applies the commands that make them, once only when the log is applied again
//! after a restart, and from a snapshot a replica installs instead of the commands it
//! covers.

use std::sync::Arc;

use baton_accounting::{Query, RecordStore};
use baton_model::alloc::ReplicaAlloc;
use baton_model::command::{Command, Op};
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::name::Name;
use baton_model::plan::{Decision, Plan};
use baton_raft::store::{MemKv, StateMachineStore};
use baton_raft::types::{CommandBatch, Entry};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftSnapshotBuilder};

const JOBS: u64 = 3;

fn entry(index: u64, ops: Vec<Op>) -> Entry {
    let commands = ops.into_iter().map(|op| Command { now_ms: index * 1_000, op }).collect();
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(CommandBatch::new(commands)),
    }
}

/// A cluster where `JOBS` jobs run one after another and exit: `JOBS` records.
fn entries() -> Vec<Entry> {
    let mut e = vec![entry(
        1,
        vec![Op::RegisterNodes(vec![gpu_node("n1", 8)]), Op::PutQueue(gpu_queue("q", 8)), Op::StartAccounting],
    )];
    for job in 1..=JOBS {
        let index = e.len() as u64 + 1;
        let submit = Op::Submit { spec: gpu_job(&format!("j{job}"), "q", 2), request_id: None };
        let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![0, 1] }];
        // `based_on` is the count of commands applied before: two per job, three to start.
        let plan =
            Plan { based_on: 3 + 2 * (job - 1) + 1, decisions: vec![Decision::Place { job, attempt: 1, replicas }] };
        e.push(entry(index, vec![submit, Op::ApplyPlan(plan)]));
        e.push(entry(index + 1, vec![Op::JobExited { job, attempt: 1, exit_code: 0 }]));
    }
    e
}

fn names(records: &RecordStore) -> Vec<String> {
    records.query(&Query::default(), |_| true).unwrap().records.into_iter().map(|r| r.name).collect()
}

#[tokio::test]
async fn records_are_written_as_applied_and_once_only_when_the_log_is_applied_again() {
    let records = Arc::new(RecordStore::memory());
    let kv = Arc::new(MemKv::new());
    let mut sm = StateMachineStore::open_with(kv.clone(), records.clone()).unwrap();
    sm.apply(entries()).await.unwrap();
    assert_eq!(names(&records), ["j1", "j2", "j3"]);
    // A restart without a snapshot applies the whole log again, into the same store.
    let mut again = StateMachineStore::open_with(kv, records.clone()).unwrap();
    again.apply(entries()).await.unwrap();
    assert_eq!(names(&records), ["j1", "j2", "j3"], "no record twice");
    assert_eq!(records.newest_seq().unwrap(), JOBS);
}

#[tokio::test]
async fn a_replica_that_installs_a_snapshot_gets_the_records_of_the_commands_it_skipped() {
    let mut leader = StateMachineStore::open(Arc::new(MemKv::new())).unwrap();
    leader.apply(entries()).await.unwrap();
    let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.unwrap();

    let records = Arc::new(RecordStore::memory());
    let mut follower = StateMachineStore::open_with(Arc::new(MemKv::new()), records.clone()).unwrap();
    follower.install_snapshot(&snapshot.meta, snapshot.snapshot).await.unwrap();
    assert_eq!(names(&records), ["j1", "j2", "j3"]);

    // A restart from that snapshot writes nothing twice, and goes on numbering.
    let kv = Arc::new(MemKv::new());
    let mut restarted = StateMachineStore::open_with(kv, records.clone()).unwrap();
    restarted
        .install_snapshot(&snapshot.meta, leader.get_current_snapshot().await.unwrap().unwrap().snapshot)
        .await
        .unwrap();
    assert_eq!(records.newest_seq().unwrap(), JOBS);
    assert_eq!(names(&records).len() as u64, JOBS);
}
