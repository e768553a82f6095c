//! The words of the API's closed sets (the proto enums): what the CLI prints and parses,
//! what `-o json` and the dashboard's JSON carry, and what error messages list. One
//! definition per set: a job state's word is the model's own (`JobState::as_str`); the
//! others are written once here.
//!
//! An unspecified or unknown value (a number a newer replica sent) has the empty word, as
//! the empty string these fields were before they became enums.

use serde::Serializer;

use crate::v1::{
    JobState, NodeStatus, PreemptionMode, QueueOrdering, ReclaimWithinCohort, ReplicaRole, Topology, WithinQueue,
};

/// A proto enum shown and read as a word.
pub trait Word: Copy + PartialEq + TryFrom<i32> + 'static {
    /// Every value that has a word, in the order error messages list them.
    const ALL: &'static [Self];

    fn word(self) -> &'static str;

    /// The value `text` names, case-insensitively.
    fn from_word(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.word().eq_ignore_ascii_case(text))
    }

    /// The words, comma-separated, for messages ("one of ...").
    fn words() -> String {
        Self::ALL.iter().map(|v| v.word()).collect::<Vec<_>>().join(", ")
    }

    /// The word of a message's raw field value; empty when unspecified or unknown.
    fn word_of(raw: i32) -> &'static str {
        Self::try_from(raw).map_or("", Self::word)
    }
}

/// Serializes a message's enum field as its word (see `build.rs`: the dashboard answers
/// with the messages as JSON, and its page and scripts read words).
pub fn serialize_word<T: Word, S: Serializer>(raw: &i32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(T::word_of(*raw))
}

/// As `serialize_word`, for a repeated enum field.
pub fn serialize_words<T: Word, S: Serializer>(raw: &[i32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(raw.iter().map(|r| T::word_of(*r)))
}

impl Word for JobState {
    const ALL: &'static [Self] = &[
        JobState::Pending,
        JobState::Running,
        JobState::Preempting,
        JobState::Suspended,
        JobState::Paused,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];
    fn word(self) -> &'static str {
        crate::convert::job_state_from_proto(self).map_or("", baton_model::job::JobState::as_str)
    }
}

impl Word for PreemptionMode {
    const ALL: &'static [Self] =
        &[PreemptionMode::Checkpoint, PreemptionMode::Requeue, PreemptionMode::Cancel, PreemptionMode::Suspend];
    fn word(self) -> &'static str {
        match self {
            PreemptionMode::Unspecified => "",
            PreemptionMode::Checkpoint => "checkpoint",
            PreemptionMode::Requeue => "requeue",
            PreemptionMode::Cancel => "cancel",
            PreemptionMode::Suspend => "suspend",
        }
    }
}

impl Word for Topology {
    const ALL: &'static [Self] = &[Topology::Node, Topology::Rack];
    fn word(self) -> &'static str {
        match self {
            Topology::Unspecified => "",
            Topology::Node => "node",
            Topology::Rack => "rack",
        }
    }
}

impl Word for QueueOrdering {
    const ALL: &'static [Self] = &[QueueOrdering::BestEffortFifo, QueueOrdering::StrictFifo];
    fn word(self) -> &'static str {
        match self {
            QueueOrdering::Unspecified => "",
            QueueOrdering::BestEffortFifo => "BestEffortFIFO",
            QueueOrdering::StrictFifo => "StrictFIFO",
        }
    }
}

impl Word for WithinQueue {
    const ALL: &'static [Self] =
        &[WithinQueue::Never, WithinQueue::LowerPriority, WithinQueue::LowerOrNewerEqualPriority];
    fn word(self) -> &'static str {
        match self {
            WithinQueue::Unspecified => "",
            WithinQueue::Never => "Never",
            WithinQueue::LowerPriority => "LowerPriority",
            WithinQueue::LowerOrNewerEqualPriority => "LowerOrNewerEqualPriority",
        }
    }
}

impl Word for ReclaimWithinCohort {
    const ALL: &'static [Self] =
        &[ReclaimWithinCohort::Never, ReclaimWithinCohort::LowerPriority, ReclaimWithinCohort::Any];
    fn word(self) -> &'static str {
        match self {
            ReclaimWithinCohort::Unspecified => "",
            ReclaimWithinCohort::Never => "Never",
            ReclaimWithinCohort::LowerPriority => "LowerPriority",
            ReclaimWithinCohort::Any => "Any",
        }
    }
}

impl Word for NodeStatus {
    const ALL: &'static [Self] = &[NodeStatus::Ready, NodeStatus::Lost, NodeStatus::Unhealthy];
    fn word(self) -> &'static str {
        match self {
            NodeStatus::Unspecified => "",
            NodeStatus::Ready => "Ready",
            NodeStatus::Lost => "Lost",
            NodeStatus::Unhealthy => "Unhealthy",
        }
    }
}

impl Word for ReplicaRole {
    const ALL: &'static [Self] = &[
        ReplicaRole::Leader,
        ReplicaRole::Follower,
        ReplicaRole::Candidate,
        ReplicaRole::Learner,
        ReplicaRole::Unknown,
    ];
    fn word(self) -> &'static str {
        match self {
            ReplicaRole::Unknown => "Unknown",
            ReplicaRole::Leader => "Leader",
            ReplicaRole::Follower => "Follower",
            ReplicaRole::Candidate => "Candidate",
            ReplicaRole::Learner => "Learner",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T: Word + std::fmt::Debug>() {
        for v in T::ALL {
            assert!(!v.word().is_empty(), "{v:?} has a word");
            assert_eq!(T::from_word(v.word()), Some(*v));
            assert_eq!(T::from_word(&v.word().to_ascii_lowercase()), Some(*v), "case-insensitive");
        }
        assert_eq!(T::from_word(""), None);
        assert_eq!(T::from_word("bogus"), None);
    }

    #[test]
    fn every_word_reads_back_as_its_value() {
        round_trips::<JobState>();
        round_trips::<PreemptionMode>();
        round_trips::<Topology>();
        round_trips::<QueueOrdering>();
        round_trips::<WithinQueue>();
        round_trips::<ReclaimWithinCohort>();
        round_trips::<NodeStatus>();
        round_trips::<ReplicaRole>();
    }

    #[test]
    fn job_states_have_the_models_words_and_unknown_numbers_none() {
        let words: Vec<&str> = JobState::ALL.iter().map(|s| s.word()).collect();
        let model: Vec<&str> = baton_model::job::JobState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(words, model);
        assert_eq!(JobState::word_of(JobState::Running as i32), "Running");
        assert_eq!(JobState::word_of(0), "");
        assert_eq!(JobState::word_of(99), "");
    }

    #[test]
    fn a_message_serializes_its_enums_as_words() {
        let job = crate::v1::Job { state: JobState::Paused as i32, ..Default::default() };
        let json = serde_json::to_value(&job).unwrap();
        assert_eq!(json["state"], "Paused");
        let node = crate::v1::Node { status: NodeStatus::Unhealthy as i32, ..Default::default() };
        assert_eq!(serde_json::to_value(&node).unwrap()["status"], "Unhealthy");
        let q = crate::v1::Queue { ordering: QueueOrdering::StrictFifo as i32, ..Default::default() };
        assert_eq!(serde_json::to_value(&q).unwrap()["ordering"], "StrictFIFO");
        let r = crate::v1::ListJobsRequest { states: vec![JobState::Failed as i32], ..Default::default() };
        assert_eq!(serde_json::to_value(&r).unwrap()["states"], serde_json::json!(["Failed"]));
    }
}
