//! The gRPC edge: every error a replica can meet, as a `tonic::Status` whose message says
//! what to do. Nothing else in this crate builds a `Status` by hand for these errors.

use baton_model::error::ApplyError;
use baton_proto::convert::ConvertError;
use baton_proto::reason::Reason;
use baton_raft::{MembershipError, ReadError, WriteError};
use tonic::{Code, Status};

/// Response metadata key carrying the leader's address when a replica that must be the
/// leader (the agent gateway) is not.
pub use baton_proto::LEADER_METADATA;

pub fn from_write(e: WriteError) -> Status {
    match e {
        WriteError::NoLeader => no_leader(),
        WriteError::NotLeader { leader_addr, .. } => not_leader(&leader_addr),
        WriteError::TooLarge { .. } => Status::invalid_argument(e.to_string()),
        WriteError::LeaderOnly { .. } => Status::permission_denied(e.to_string()),
        WriteError::Overloaded { .. } => Status::resource_exhausted(e.to_string()),
        WriteError::ForwardFailed { .. } | WriteError::Timeout { .. } | WriteError::DiskFailing { .. } => {
            Status::unavailable(e.to_string())
        }
        WriteError::Stopped => Status::unavailable("this replica is shutting down; use another"),
        WriteError::Encode(_) => Status::internal(e.to_string()),
        // Marked as no leader so that clients wait and retry, as during an election.
        WriteError::Transferring { .. } => baton_proto::reason::no_leader_with(&e.to_string()),
        // Not retried by clients on their own: it lasts until an operator upgrades replicas.
        WriteError::FormatBehind(_) => Status::failed_precondition(e.to_string()),
    }
}

/// A client's write (the API forwards it to the leader, wherever it is): a leader that lost
/// its leadership while the write was on its way answers "not the leader", and the client
/// should wait for the election and send it again, as for "no leader". Marked so; an agent's
/// report keeps `from_write`'s redirect.
pub fn from_client_write(e: WriteError) -> Status {
    match e {
        WriteError::NotLeader { .. } => {
            no_leader_with(&format!("{e}; the leader changed while the write was on its way"))
        }
        e => from_write(e),
    }
}

pub fn from_membership(e: MembershipError) -> Status {
    match e {
        MembershipError::NoLeader => no_leader(),
        MembershipError::NotLeader { .. }
        | MembershipError::ForwardFailed { .. }
        | MembershipError::Timeout { .. }
        | MembershipError::Stopped => Status::unavailable(e.to_string()),
        MembershipError::UnknownNode(_) => Status::not_found(e.to_string()),
        MembershipError::NotAllowed(_) => Status::permission_denied(e.to_string()),
        MembershipError::DuplicateId { .. }
        | MembershipError::DuplicateAddr { .. }
        | MembershipError::Retired { .. } => Status::already_exists(e.to_string()),
        MembershipError::ForeignCluster { .. }
        | MembershipError::WrongNode { .. }
        | MembershipError::Unreachable { .. }
        | MembershipError::Refused(_)
        | MembershipError::TooFewVoters { .. }
        | MembershipError::RemoveLeader(_)
        | MembershipError::NotVoter(_)
        | MembershipError::NoOtherVoter
        | MembershipError::TransferFailed { .. }
        | MembershipError::FormatBehind { .. } => Status::failed_precondition(e.to_string()),
    }
}

pub fn from_read(e: ReadError) -> Status {
    match e {
        ReadError::NoLeader => no_leader(),
        ReadError::NotLeader { leader_addr, .. } => not_leader(&leader_addr),
        ReadError::Stopped => Status::unavailable("this replica is shutting down; use another"),
        // Nothing was read or written, and no replica can confirm it leads right now: a
        // client waits and asks again, as while an election runs.
        ReadError::QuorumLost(_) => no_leader_with(&e.to_string()),
        ReadError::ForwardFailed { .. } | ReadError::Timeout { .. } => Status::unavailable(e.to_string()),
        ReadError::Encode(_) => Status::internal(e.to_string()),
    }
}

pub fn from_apply(e: ApplyError) -> Status {
    let code = match &e {
        ApplyError::Unknown { .. } => Code::NotFound,
        ApplyError::Exists { .. } => Code::AlreadyExists,
        ApplyError::Invalid { .. } | ApplyError::Impossible(_) => Code::InvalidArgument,
        ApplyError::InUse(_)
        | ApplyError::WrongState { .. }
        | ApplyError::StaleAttempt { .. }
        | ApplyError::NotPlaced { .. }
        | ApplyError::Conflict { .. } => Code::FailedPrecondition,
        ApplyError::Limit(_) => Code::ResourceExhausted,
        ApplyError::Unauthenticated(_) => Code::Unauthenticated,
        ApplyError::PermissionDenied(_) => Code::PermissionDenied,
    };
    let conflict = matches!(e, ApplyError::Conflict { .. });
    let status = Status::new(code, e.to_string());
    if conflict { Reason::Conflict.mark(status) } else { status }
}

pub fn from_convert(e: ConvertError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// The UNAVAILABLE clients retry, marked with its reason (one definition, shared with them).
pub use baton_proto::reason::{no_leader, no_leader_with};

/// For calls only the leader serves: FAILED_PRECONDITION with the leader's address in
/// the `baton-leader` metadata (empty when none is known).
pub fn not_leader(leader_addr: &str) -> Status {
    let mut s =
        Status::failed_precondition(format!("this replica is not the leader; the leader is at {leader_addr:?}"));
    if let Ok(v) = leader_addr.parse() {
        s.metadata_mut().insert(LEADER_METADATA, v);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under load a leader's check of its quorum misses now and then; clients retry "no
    /// leader" by themselves, so this refusal must say it is one (e2e replays failed on it).
    #[test]
    fn a_read_whose_leadership_check_missed_a_quorum_is_retried_as_no_leader() {
        let s = from_read(ReadError::QuorumLost("timeout".into()));
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(Reason::of(&s), Some(Reason::NoLeader), "{s:?}");
        assert!(s.message().contains("could not confirm"), "{}", s.message());
    }

    /// The smoke test's `queue create` met a leader deposed mid-write and the CLI gave up on
    /// "not the leader" (FAILED_PRECONDITION); clients retry "no leader" by themselves.
    #[test]
    fn a_client_write_whose_leader_moved_on_the_way_is_retried_as_no_leader() {
        let moved = || WriteError::NotLeader { leader_id: 2, leader_addr: "server-2:7070".into() };
        let s = from_client_write(moved());
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(Reason::of(&s), Some(Reason::NoLeader), "{s:?}");
        assert!(s.message().contains("server-2:7070"), "{}", s.message());
        // An agent's report still gets the redirect with the leader's address.
        let s = from_write(moved());
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.metadata().get(LEADER_METADATA).unwrap(), "server-2:7070");
    }
}
