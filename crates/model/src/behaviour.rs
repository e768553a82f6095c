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

use crate::command::Op;
use crate::state::State;

/// The behaviour a state has until the log raises it.
pub const BASELINE: u32 = 1;
/// The newest behaviour this build applies.
pub const BEHAVIOUR: u32 = 2;
/// The behaviour that bounds request ids per user.
pub const PER_USER_REQUEST_IDS: u32 = 2;

/// The data format whose builds apply behaviour `v`: the raise to `v` needs it, so the format
/// gate holds the raise back until every member applies `v`. A version this build does not
/// know needs a format no build of it reads.
pub fn format_of(v: u32) -> u32 {
    match v {
        0..=BASELINE => 1,
        2 => 10,
        _ => u32::MAX,
    }
}

/// What a leader writes by itself to bring a state up to what this build does, first
/// what is due first; `None` when nothing is. Each is held back by the format gate while a
/// member cannot read it, so the leader retries it now and then (a rolling upgrade).
pub fn leader_upgrade(s: &State) -> Option<Op> {
    if s.accounting().settings().is_none() {
        return Some(Op::StartAccounting);
    }
    (s.behaviour() < BEHAVIOUR).then_some(Op::SetBehaviour(BEHAVIOUR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_known_version_has_a_format_and_an_unknown_one_none() {
        assert_eq!(format_of(BASELINE), 1);
        assert_eq!(format_of(PER_USER_REQUEST_IDS), 10);
        assert!(
            format_of(BEHAVIOUR) <= crate::format::DATA_FORMAT,
            "this build reads the format its newest behaviour needs"
        );
        assert_eq!(format_of(BEHAVIOUR + 1), u32::MAX);
    }
}
