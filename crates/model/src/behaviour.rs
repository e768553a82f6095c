//! Apply semantics, versioned. A fix that changes what an existing command does would make
//! replicas of two builds apply one log differently during a rolling upgrade: their states
//! would part silently. So a change of behaviour is kept behind a number the log commits:
//! `apply` branches on [`crate::State::behaviour`], and the leader raises it
//! ([`Op::SetBehaviour`]) only once every member reads the data format that carries the
//! raise ([`format_of`]), which is a format only builds that have the behaviour read.
//!
//! The versions:
//! 1. everything before versioning (a state that never saw a raise).
//! 2. request ids are bounded per user as well ([`crate::limits::MAX_REMEMBERED_REQUEST_IDS_PER_USER`]):
//!    one user's submissions no longer push another user's ids out of the global window.
//! 3. the state tallies the ranks' checkpoints ([`crate::command::Observed::RankCheckpointed`]):
//!    a lease stop that saved its rank's work completes the gang's checkpoint when every
//!    other rank has saved since the last complete one, by the replicated tally (the
//!    leader's memory decided it before, and a failover forgot it).
//! 4. a job on MIG slices is a job that uses GPUs (decisions.md section 7): preempted in mode
//!    `suspend`, it is checkpointed and requeued, not suspended in place holding its slices.
//! 5. lends follow the ranks that run on them: a job whose attempt ended borrows, on each
//!    node, at most what its ranks still being stopped hold there; and a lend that a
//!    suspended job had passed on (it ran on what another suspended job lent it) is lent by
//!    the first lender to the last borrower directly once the middle one is gone. Both kept
//!    a node's capacity counted free twice (found by the simulator, stop 76).
//! 6. membership changes record the replica ids they remove, and an id once removed is not
//!    added again ([`crate::state::retired`]; found by the simulator, stop 77); and a
//!    suspended job whose lend was passed on to the next borrower (behaviour 5) is suspended
//!    for that borrower, so it does not resume while the borrower runs on its share (found
//!    by the simulator, stop 78).
//! 7. a rank that ended before its job was suspended in place (a gang rank other than 0
//!    that exited 0, done while its gang goes on) stays ended when the suspension completes:
//!    the tally forgot it, so the state held it suspended, and then running, with no process,
//!    and the job's next suspension waited for an answer its agent never sends (found by the
//!    simulator's liveness check, stop 84).
//! 8. the same when the suspension is cut short instead (a rank lost, or its node, while the
//!    job is being suspended: it goes back to the queue): a rank that had ended stays ended,
//!    not completing. Made completing, it waited for good for a stop its agent never
//!    answers (the rank's own exit was its end), and its GPUs with it (found by the
//!    simulator's liveness check, stop 85).

use crate::command::Op;
use crate::state::State;

/// The behaviour a state has until the log raises it.
pub const BASELINE: u32 = 1;
/// The newest behaviour this build applies.
pub const BEHAVIOUR: u32 = 8;
/// The behaviour that bounds request ids per user.
pub const PER_USER_REQUEST_IDS: u32 = 2;
/// The behaviour whose state tallies the ranks' checkpoints.
pub const RANK_SAVES: u32 = 3;
/// The behaviour under which MIG slices count as GPUs when a job is preempted.
pub const SLICES_ARE_GPUS: u32 = 4;
/// The behaviour under which lends follow the ranks that run on them.
pub const LENDS_FOLLOW_RANKS: u32 = 5;
/// The behaviour under which membership changes record the replicas they remove.
pub const RETIRED_REPLICAS: u32 = 6;
/// The behaviour under which a lender whose lend was passed on to another borrower stays
/// suspended for that borrower (the same version as [`RETIRED_REPLICAS`]: one build
/// brought both).
pub const PASSED_LENDS_HOLD: u32 = 6;
/// The behaviour under which a rank that ended before its job was suspended in place stays
/// ended once the suspension completes.
pub const ENDED_RANKS_OUTLAST_SUSPENSION: u32 = 7;
/// The behaviour under which a rank that ended before its job's suspension was cut short
/// (the job requeued) stays ended: it is not completing.
pub const ENDED_RANKS_OUTLAST_LOST_SUSPENSION: u32 = 8;

/// The data format whose builds apply behaviour `v`: the raise to `v` needs it, so the format
/// gate holds the raise back until every member applies `v`. A version this build does not
/// know needs a format no build of it reads.
pub fn format_of(v: u32) -> u32 {
    match v {
        0..=BASELINE => 1,
        2 => 10,
        3 => 11,
        4 => 14,
        5 => 15,
        6 => 16,
        7 => 17,
        8 => 19,
        _ => u32::MAX,
    }
}

/// What a leader writes by itself to bring a state up to what this build does, first
/// what is due first; `None` when nothing is. The behaviour goes as far as every member
/// reads (`oldest_format`, the oldest data format a member reads): a cluster of builds
/// reading formats 10 and 11 gets behaviour 2 now and 3 once the last is upgraded. Each is
/// held back by the format gate while a member cannot read it, so the leader retries it
/// now and then (a rolling upgrade).
pub fn leader_upgrade(s: &State, oldest_format: u32) -> Option<Op> {
    if s.accounting().settings().is_none() {
        return Some(Op::StartAccounting);
    }
    let readable = (s.behaviour() + 1..=BEHAVIOUR).rev().find(|v| format_of(*v) <= oldest_format);
    // The newest behaviour when none is readable yet: the gate says who holds it back.
    let next = readable.unwrap_or(BEHAVIOUR);
    (s.behaviour() < BEHAVIOUR).then_some(Op::SetBehaviour(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_behaviour_is_raised_as_far_as_every_member_reads() {
        let mut s = State::new();
        s.apply(crate::Command { now_ms: 1, op: Op::StartAccounting }).unwrap();
        assert_eq!(leader_upgrade(&s, 9), Some(Op::SetBehaviour(BEHAVIOUR)), "held by the gate, which names who");
        assert_eq!(leader_upgrade(&s, 10), Some(Op::SetBehaviour(PER_USER_REQUEST_IDS)));
        assert_eq!(leader_upgrade(&s, 11), Some(Op::SetBehaviour(RANK_SAVES)));
        assert_eq!(leader_upgrade(&s, 13), Some(Op::SetBehaviour(RANK_SAVES)), "slices wait for format 14");
        assert_eq!(leader_upgrade(&s, 14), Some(Op::SetBehaviour(SLICES_ARE_GPUS)));
        assert_eq!(leader_upgrade(&s, 15), Some(Op::SetBehaviour(LENDS_FOLLOW_RANKS)));
        assert_eq!(leader_upgrade(&s, 16), Some(Op::SetBehaviour(RETIRED_REPLICAS)));
        assert_eq!(leader_upgrade(&s, 17), Some(Op::SetBehaviour(ENDED_RANKS_OUTLAST_SUSPENSION)));
        s.apply(crate::Command { now_ms: 1, op: Op::SetBehaviour(PER_USER_REQUEST_IDS) }).unwrap();
        assert_eq!(leader_upgrade(&s, 10), Some(Op::SetBehaviour(BEHAVIOUR)), "the next is held until format 11");
        s.apply(crate::Command { now_ms: 1, op: Op::SetBehaviour(BEHAVIOUR) }).unwrap();
        assert_eq!(leader_upgrade(&s, 11), None);
    }

    #[test]
    fn each_known_version_has_a_format_and_an_unknown_one_none() {
        assert_eq!(format_of(BASELINE), 1);
        assert_eq!(format_of(PER_USER_REQUEST_IDS), 10);
        assert_eq!(format_of(RANK_SAVES), 11);
        assert_eq!(format_of(SLICES_ARE_GPUS), 14);
        assert_eq!(format_of(LENDS_FOLLOW_RANKS), 15);
        assert_eq!(format_of(RETIRED_REPLICAS), 16);
        assert_eq!(format_of(ENDED_RANKS_OUTLAST_SUSPENSION), 17);
        assert!(
            format_of(BEHAVIOUR) <= crate::format::DATA_FORMAT,
            "this build reads the format its newest behaviour needs"
        );
        assert_eq!(format_of(BEHAVIOUR + 1), u32::MAX);
    }
}
