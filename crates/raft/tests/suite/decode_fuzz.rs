//! Bytes from the network or the disk never panic the decoder: arbitrary bytes, and valid
//! encodings with bytes changed, decode to a value or to an error, within bounded memory.

use std::collections::BTreeMap;

use baton_model::command::{Command, Op};
use baton_model::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec};
use baton_model::node::NodeSpec;
use baton_model::resources::Resources;
use baton_model::{Name, State};
use baton_raft::campaign::PreVote;
use baton_raft::codec::{decode, encode, unseal};
use baton_raft::types::{CommandBatch, TypeConfig};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use proptest::prelude::*;

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: Name::lit(name),
        pool: Name::lit("default"),
        rack: None,
        labels: BTreeMap::from([("zone".into(), "a".into())]),
        resources: Resources::of(&[("gpu", 8)]),
        gpus: Vec::new(),
        agent_addr: "10.0.0.1:7001".into(),
    }
}

fn job(name: &str) -> JobSpec {
    JobSpec {
        name: Name::lit(name),
        queue: Name::lit("q"),
        priority: PriorityRef::Value(5),
        tasks: vec![TaskSpec {
            name: Name::lit("main"),
            replicas: 2,
            resources: Resources::of(&[("gpu", 2)]),
            pools: None,
        }],
        pools: None,
        topology: None,
        preemption_mode: PreemptionMode::Checkpoint,
        grace_ms: 1_000,
        min_runtime_ms: 0,
        command: vec!["python".into(), "train.py".into()],
        env: BTreeMap::from([("A".into(), "1".into())]),
        checkpoint_signal: None,
        time_limit_ms: None,
    }
}

fn commands() -> Vec<Command> {
    let q = baton_model::fixture::gpu_queue("q", 8);
    [Op::RegisterNodes(vec![node("n1"), node("n2")]), Op::PutQueue(q), Op::Submit { spec: job("j"), request_id: None }]
        .into_iter()
        .map(|op| Command { now_ms: 1_000, op })
        .collect()
}

/// A state with nodes, a queue and a running job, as a snapshot would carry it.
fn state_bytes() -> Vec<u8> {
    let mut s = State::default();
    for c in commands() {
        s.apply(c).unwrap();
    }
    let plan = baton_sched::cycle(&s, 2_000);
    s.apply(Command { now_ms: 2_000, op: Op::ApplyPlan(plan) }).unwrap();
    encode(&s).unwrap()
}

fn append_bytes() -> Vec<u8> {
    let log_id = LogId::new(CommittedLeaderId::new(3, 1), 7);
    let entry = Entry::<TypeConfig> { log_id, payload: EntryPayload::Normal(CommandBatch::new(commands())) };
    let rpc = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(3, 1),
        prev_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), 6)),
        entries: vec![entry],
        leader_commit: Some(log_id),
    };
    encode(&rpc).unwrap()
}

/// Every kind of message the transport or the log store decodes.
fn decode_all(bytes: &[u8]) {
    let _ = decode::<AppendEntriesRequest<TypeConfig>>(bytes);
    let _ = decode::<InstallSnapshotRequest<TypeConfig>>(bytes);
    let _ = decode::<VoteRequest<u64>>(bytes);
    let _ = decode::<PreVote>(bytes);
    let _ = decode::<Command>(bytes);
    let _ = decode::<Entry<TypeConfig>>(bytes);
    let _ = unseal::<Entry<TypeConfig>>(bytes);
}

/// `base` with up to eight bytes replaced: deep enough to reach the inner fields that
/// random bytes never get past the first length prefix to.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    proptest::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |edits| {
        let mut b = base.clone();
        for (i, v) in edits {
            b[i] = v;
        }
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
        let _ = decode::<State>(&bytes);
    }

    #[test]
    fn a_changed_append_entries_never_panics(bytes in mutated(append_bytes())) {
        decode_all(&bytes);
    }

    #[test]
    fn a_changed_snapshot_never_panics(bytes in mutated(state_bytes())) {
        let _ = decode::<State>(&bytes);
    }
}

/// Regression: the append-entries fuzzer found a changed length prefix that made the
/// unlimited decoder allocate 2^57 bytes and abort the process.
#[test]
fn a_length_prefix_past_the_input_is_an_error_not_an_allocation() {
    // A command batch claiming 2^62 commands in a few bytes.
    let mut bytes = vec![0xff];
    bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(decode::<CommandBatch>(&bytes).is_err());
    let mut bytes = vec![0xfd];
    bytes.extend_from_slice(&(1u64 << 57).to_le_bytes());
    assert!(decode::<Vec<u8>>(&bytes).is_err());
    assert!(decode::<String>(&bytes).is_err());
}
