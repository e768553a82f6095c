//! The words of the API's closed sets (the proto enums): what the CLI prints and parses,
//! what `-o json` and the dashboard's JSON carry, and what error messages list. One
//! definition per set: where the model has the set (job states, modes, orderings, roles),
//! the word is the model's own (`baton_model::word`); the API's own sets (node status,
//! replica role, the watch's Lagged) are written once here.
//!
//! An unspecified or unknown value (a number a newer replica sent) has the empty word, as
//! the empty string these fields were before they became enums.

use baton_model::word::Word as ModelWord;
use serde::Serializer;

use crate::v1::{
    DependencyCondition, EventKind, JobState, JobVisibility, NodeStatus, PreemptionMode, QueueOrdering,
    ReclaimWithinCohort, ReplicaRole, TokenRole, Topology, WithinQueue,
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
        crate::convert::job_state_from_proto(self).map_or("", ModelWord::word)
    }
}

// The sets the model has: each value's word is the model's (`baton_model::word`), so a
// scenario file, a job file, a flag and the API spell it alike. Unspecified has none.

impl Word for PreemptionMode {
    const ALL: &'static [Self] =
        &[PreemptionMode::Checkpoint, PreemptionMode::Requeue, PreemptionMode::Cancel, PreemptionMode::Suspend];
    fn word(self) -> &'static str {
        match self {
            PreemptionMode::Unspecified => "",
            v => crate::convert::mode_from_proto(v).word(),
        }
    }
}

impl Word for DependencyCondition {
    const ALL: &'static [Self] =
        &[DependencyCondition::Ok, DependencyCondition::Any, DependencyCondition::Notok, DependencyCondition::Started];
    fn word(self) -> &'static str {
        crate::convert::condition_from_proto(self).map_or("", baton_model::after::When::as_str)
    }
}

impl Word for Topology {
    const ALL: &'static [Self] = &[Topology::Node, Topology::Rack];
    fn word(self) -> &'static str {
        // The shorthand's two words; levels travel as `topology_required`/`_preferred`.
        match self {
            Topology::Unspecified => "",
            Topology::Node => baton_model::topology::NODE,
            Topology::Rack => baton_model::topology::RACK,
        }
    }
}

impl Word for QueueOrdering {
    const ALL: &'static [Self] = &[QueueOrdering::BestEffortFifo, QueueOrdering::StrictFifo];
    fn word(self) -> &'static str {
        match self {
            QueueOrdering::Unspecified => "",
            v => crate::convert::ordering_from_proto(v).word(),
        }
    }
}

impl Word for WithinQueue {
    const ALL: &'static [Self] =
        &[WithinQueue::Never, WithinQueue::LowerPriority, WithinQueue::LowerOrNewerEqualPriority];
    fn word(self) -> &'static str {
        match self {
            WithinQueue::Unspecified => "",
            v => crate::convert::within_from_proto(v).word(),
        }
    }
}

impl Word for JobVisibility {
    const ALL: &'static [Self] = &[JobVisibility::All, JobVisibility::Names, JobVisibility::Own];
    fn word(self) -> &'static str {
        crate::convert::visibility_from_proto(self).map_or("", baton_model::queue::Visibility::as_str)
    }
}

impl Word for ReclaimWithinCohort {
    const ALL: &'static [Self] =
        &[ReclaimWithinCohort::Never, ReclaimWithinCohort::LowerPriority, ReclaimWithinCohort::Any];
    fn word(self) -> &'static str {
        match self {
            ReclaimWithinCohort::Unspecified => "",
            v => crate::convert::reclaim_from_proto(v).word(),
        }
    }
}

impl Word for TokenRole {
    const ALL: &'static [Self] = &[TokenRole::Admin, TokenRole::Operator];
    fn word(self) -> &'static str {
        crate::convert::role_from_proto(self).map_or("", ModelWord::word)
    }
}

impl Word for EventKind {
    const ALL: &'static [Self] = &[
        EventKind::Submitted,
        EventKind::Started,
        EventKind::Preempted,
        EventKind::Stopped,
        EventKind::Requeued,
        EventKind::Stray,
        EventKind::Suspended,
        EventKind::Resumed,
        EventKind::Paused,
        EventKind::Unpaused,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::Cancelled,
        EventKind::TimeLimit,
        EventKind::TimedOut,
        EventKind::Reserved,
        EventKind::Unreserved,
        EventKind::NodeRegistered,
        EventKind::NodeLost,
        EventKind::NodeReady,
        EventKind::NodeCordoned,
        EventKind::NodeUncordoned,
        EventKind::NodeUnhealthy,
        EventKind::QueueUpdated,
        EventKind::Lagged,
    ];
    /// The model's `EventKind::type_name`; the API's own Lagged is spelt here.
    fn word(self) -> &'static str {
        match self {
            EventKind::Unspecified => "",
            EventKind::Lagged => "Lagged",
            k => crate::convert::event_kind_for_word(k).map_or("", |m| m.type_name()),
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
        round_trips::<TokenRole>();
        round_trips::<EventKind>();
    }

    /// The API lists a set's values as the model does, each by the model's word.
    fn same_words<P: Word, M: ModelWord>() {
        let api: Vec<&str> = P::ALL.iter().map(|v| v.word()).collect();
        let model: Vec<&str> = M::ALL.iter().map(|v| v.word()).collect();
        assert_eq!(api, model);
    }

    #[test]
    fn the_sets_the_model_has_have_its_words() {
        same_words::<JobState, baton_model::job::JobState>();
        same_words::<PreemptionMode, baton_model::job::PreemptionMode>();
        same_words::<QueueOrdering, baton_model::queue::QueueOrdering>();
        same_words::<WithinQueue, baton_model::queue::WithinQueue>();
        same_words::<ReclaimWithinCohort, baton_model::queue::ReclaimWithinCohort>();
    }

    #[test]
    fn every_event_kind_has_its_models_word_and_every_value_is_listed() {
        let mut listed = EventKind::ALL.to_vec();
        listed.sort_by_key(|k| *k as i32);
        let numbers: Vec<i32> = listed.iter().map(|k| *k as i32).collect();
        assert_eq!(numbers, (1..=EventKind::Lagged as i32).collect::<Vec<_>>(), "every value but unspecified, once");
        let ev = |kind| baton_model::event::Event {
            at_ms: 0,
            job: None,
            job_id: None,
            node: None,
            kind,
            message: String::new(),
        };
        let started = ev(baton_model::event::EventKind::Started { attempt: 2, nodes: Default::default() });
        assert_eq!(EventKind::word_of(crate::convert::event_to_proto(&started).kind), "Started");
        let failed = ev(baton_model::event::EventKind::Failed { exit_code: 3 });
        assert_eq!(EventKind::word_of(crate::convert::event_to_proto(&failed).kind), "Failed");
        for k in EventKind::ALL.iter().filter(|k| **k != EventKind::Lagged) {
            let model = crate::convert::event_kind_for_word(*k).expect("a model kind");
            assert_eq!(crate::convert::event_kind_to_proto(&model), *k, "{k:?} maps back");
        }
        let e = crate::v1::Event { kind: EventKind::NodeLost as i32, ..Default::default() };
        assert_eq!(serde_json::to_value(&e).unwrap()["kind"], "NodeLost");
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
