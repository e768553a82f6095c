//! Why a call was refused, as a code a client acts on: carried in the `baton-reason`
//! metadata of the `Status`, so a client never reads the wording of a message (which is for
//! people and may change). The server marks its refusals here and clients read them here.

use tonic::Status;
use tonic::metadata::MetadataValue;

/// The metadata key of a refusal's [`Reason`].
pub const REASON_METADATA: &str = "baton-reason";

/// The refusals a client handles by itself rather than show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// UNAVAILABLE: no replica leads right now (an election, or leadership moving); the
    /// same call succeeds once one does, so wait and retry.
    NoLeader,
    /// FAILED_PRECONDITION: a compare-and-set write named a revision the object has moved
    /// past; read it again and redo the change.
    Conflict,
}

impl Reason {
    const ALL: [Reason; 2] = [Reason::NoLeader, Reason::Conflict];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoLeader => "no-leader",
            Reason::Conflict => "conflict",
        }
    }

    /// `status` with this reason attached.
    pub fn mark(self, mut status: Status) -> Status {
        status.metadata_mut().insert(REASON_METADATA, MetadataValue::from_static(self.as_str()));
        status
    }

    /// The reason `status` carries, if any.
    pub fn of(status: &Status) -> Option<Reason> {
        let value = status.metadata().get(REASON_METADATA)?.to_str().ok()?;
        Reason::ALL.into_iter().find(|r| r.as_str() == value)
    }
}

/// The UNAVAILABLE every replica answers while no leader is known.
pub fn no_leader() -> Status {
    no_leader_with("no leader yet (an election may be under way); retry in a moment")
}

/// An UNAVAILABLE that clients treat as [`no_leader`], worded for its case.
pub fn no_leader_with(message: &str) -> Status {
    Reason::NoLeader.mark(Status::unavailable(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_read_back_from_the_metadata_and_not_from_the_message() {
        assert_eq!(Reason::of(&no_leader()), Some(Reason::NoLeader));
        let conflict = Reason::Conflict.mark(Status::failed_precondition("changed"));
        assert_eq!(Reason::of(&conflict), Some(Reason::Conflict));
        assert_eq!(Reason::of(&Status::unavailable("no leader yet")), None, "words alone are no reason");
        let mut odd = Status::unavailable("x");
        odd.metadata_mut().insert(REASON_METADATA, MetadataValue::from_static("something-else"));
        assert_eq!(Reason::of(&odd), None);
    }
}
