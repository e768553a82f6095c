//! The one spelling of each closed set's values: what scenario and job files, the CLI's
//! flags and tables, `-o json`, the API's words (`baton_proto::words`) and error messages
//! all use. A value is read case-insensitively; it is always written as here.

use crate::access::Role;
use crate::job::{JobState, PreemptionMode};
use crate::queue::{QueueOrdering, ReclaimWithinCohort, WithinQueue};

/// A closed set whose values are written as words.
pub trait Word: Copy + PartialEq + 'static {
    /// Every value, in the order messages list them.
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
}

impl Word for JobState {
    const ALL: &'static [Self] = &JobState::ALL;
    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Word for Role {
    const ALL: &'static [Self] = &Role::ALL;
    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Word for PreemptionMode {
    const ALL: &'static [Self] =
        &[PreemptionMode::Checkpoint, PreemptionMode::Requeue, PreemptionMode::Cancel, PreemptionMode::Suspend];
    fn word(self) -> &'static str {
        match self {
            PreemptionMode::Checkpoint => "checkpoint",
            PreemptionMode::Requeue => "requeue",
            PreemptionMode::Cancel => "cancel",
            PreemptionMode::Suspend => "suspend",
        }
    }
}

impl Word for QueueOrdering {
    const ALL: &'static [Self] = &[QueueOrdering::BestEffortFIFO, QueueOrdering::StrictFIFO];
    fn word(self) -> &'static str {
        match self {
            QueueOrdering::BestEffortFIFO => "BestEffortFIFO",
            QueueOrdering::StrictFIFO => "StrictFIFO",
        }
    }
}

impl Word for WithinQueue {
    const ALL: &'static [Self] =
        &[WithinQueue::Never, WithinQueue::LowerPriority, WithinQueue::LowerOrNewerEqualPriority];
    fn word(self) -> &'static str {
        match self {
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
            ReclaimWithinCohort::Never => "Never",
            ReclaimWithinCohort::LowerPriority => "LowerPriority",
            ReclaimWithinCohort::Any => "Any",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads_back<T: Word + std::fmt::Debug>() {
        for (i, v) in T::ALL.iter().enumerate() {
            assert!(!v.word().is_empty(), "{v:?} has a word");
            assert_eq!(T::from_word(v.word()), Some(*v));
            assert_eq!(T::from_word(&v.word().to_ascii_uppercase()), Some(*v), "case-insensitive");
            assert!(!T::ALL[..i].contains(v), "{v:?} listed twice");
        }
        assert_eq!(T::from_word(""), None);
        assert_eq!(T::from_word("bogus"), None);
    }

    #[test]
    fn every_word_reads_back_as_its_value() {
        reads_back::<JobState>();
        reads_back::<Role>();
        reads_back::<PreemptionMode>();
        reads_back::<QueueOrdering>();
        reads_back::<WithinQueue>();
        reads_back::<ReclaimWithinCohort>();
    }

    #[test]
    fn messages_list_the_words_in_order() {
        assert_eq!(PreemptionMode::words(), "checkpoint, requeue, cancel, suspend");
        assert_eq!(ReclaimWithinCohort::words(), "Never, LowerPriority, Any");
    }
}
