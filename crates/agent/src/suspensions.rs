//! What the leader has recorded of the suspensions this agent reported. A SUSPEND the leader
//! still awaits (`Assignment::awaiting_suspended`) of a replica held suspended here is either
//! one already answered, in a directive built before the report was committed, or a new
//! suspension after a resume in place this agent never saw (`tests/suite/lifecycle.rs`,
//! `a_suspend_the_leader_awaits_of_a_replica_held_suspended_is_reported_again`). Only the
//! second is answered again: a repeat of an old answer, arriving once the job has moved on
//! to a stop, would count as that stop while the replica may run again.
//!
//! The supervisor notes each suspension it reports; the reporter notes the state index of
//! the reply that acknowledged it (read after the report's observations were committed).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use baton_proto::v1::Observation;
use baton_proto::v1::observation::What;

use crate::journal::ReplicaKey;

/// Where the report of a replica's suspension stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Sent or about to be, not yet acknowledged.
    InFlight,
    /// Acknowledged by a reply whose leader state had applied this many commands.
    Recorded { state_index: u64 },
}

/// Shared by the supervisor and the reporter. Bounded by the replicas held suspended: each
/// read (`held`) forgets the others.
#[derive(Debug, Default)]
pub struct Suspensions {
    answers: Mutex<BTreeMap<ReplicaKey, Answer>>,
}

impl Suspensions {
    /// The supervisor reported `key` suspended.
    pub fn reported(&self, key: ReplicaKey) {
        self.lock().insert(key, Answer::InFlight);
    }

    /// A reply acknowledged the stops of `keys` (`stops_in`), the leader's state then at
    /// `state_index`.
    pub fn acknowledged(&self, keys: &[ReplicaKey], state_index: u64) {
        let mut answers = self.lock();
        for key in keys {
            if let Some(a) = answers.get_mut(key) {
                *a = Answer::Recorded { state_index };
            }
        }
    }

    /// The answers of the replicas `suspended` says are still held suspended; the others
    /// (resumed, stopped, gone) are forgotten.
    pub fn held(&self, suspended: impl Fn(&ReplicaKey) -> bool) -> BTreeMap<ReplicaKey, Answer> {
        let mut answers = self.lock();
        answers.retain(|k, _| suspended(k));
        answers.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ReplicaKey, Answer>> {
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The replicas whose stop (a suspension among them) `sent` reports.
pub fn stops_in<'a>(sent: impl Iterator<Item = &'a Observation>) -> Vec<ReplicaKey> {
    sent.filter_map(|o| match &o.what {
        Some(What::Stopped(s)) => Some(ReplicaKey { job_id: s.job_id, attempt: s.attempt, rank: s.rank }),
        _ => None,
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::v1::Stopped;

    fn stopped(job_id: u64) -> Observation {
        Observation { what: Some(What::Stopped(Stopped { job_id, attempt: 1, rank: 0, ..Default::default() })) }
    }

    #[test]
    fn an_acknowledgement_records_only_the_suspensions_reported() {
        let s = Suspensions::default();
        let key = ReplicaKey { job_id: 1, attempt: 1, rank: 0 };
        s.reported(key);
        assert_eq!(s.held(|_| true)[&key], Answer::InFlight);
        s.acknowledged(&stops_in([stopped(1), stopped(2)].iter()), 40);
        assert_eq!(s.held(|_| true).into_iter().collect::<Vec<_>>(), [(key, Answer::Recorded { state_index: 40 })]);
        assert!(s.held(|_| false).is_empty(), "resumed: forgotten");
        assert!(s.held(|_| true).is_empty());
    }
}
