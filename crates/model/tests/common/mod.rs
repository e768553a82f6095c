//! Fixtures shared by the model's integration tests.

#![allow(dead_code)]

use baton_model::command::Command;
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::tenancy::UnixUser;
use baton_model::{ApplyError, JobId, Op, Outcome, State};

/// Applies `op` stamped `now_ms`; its outcome, or why it was refused.
pub fn apply(s: &mut State, now_ms: u64, op: Op) -> Result<Outcome, ApplyError> {
    s.apply(Command { now_ms, op }).map(|a| a.outcome)
}

/// Two 8-GPU nodes, `n1` and `n2`, and queue `q` guaranteed all 16 GPUs.
pub fn two_nodes_one_queue() -> State {
    let mut s = State::default();
    apply(&mut s, 0, Op::RegisterNodes(vec![gpu_node("n1", 8), gpu_node("n2", 8)])).unwrap();
    apply(&mut s, 0, Op::PutQueue(gpu_queue("q", 16))).unwrap();
    s
}

/// Submits job `name` of `gpus` GPUs to queue `q`, run as Unix user `user` (whom usage and
/// accounting count it for); its id.
pub fn submit_as(s: &mut State, name: &str, user: &str, gpus: u64) -> JobId {
    let run_as = Some(UnixUser::new(user).unwrap());
    let op = Op::SubmitAfter { spec: gpu_job(name, "q", gpus), request_id: None, run_as, after: vec![] };
    match apply(s, 0, op).unwrap() {
        Outcome::Submitted { job, .. } => job,
        other => panic!("{other:?}"),
    }
}

/// A state read back from its bincode as a replica reads a snapshot: the current layout, or
/// (at the baseline behaviour, as these states are) format 9's, which the raft crate's
/// `decode_state` tries next.
pub fn decode_state(bytes: &[u8]) -> (State, usize) {
    let config = bincode::config::standard();
    bincode::serde::decode_from_slice::<State, _>(bytes, config)
        .or_else(|_| {
            bincode::serde::decode_from_slice::<baton_model::state::PreBehaviourState, _>(bytes, config)
                .map(|(s, n)| (s.0, n))
        })
        .expect("a state this build wrote reads back")
}
