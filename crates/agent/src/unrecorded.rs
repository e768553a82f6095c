//! Starts refused because the journal takes no writes (`reconcile::Act::Unrecorded`), told
//! to the leader without being journaled: nothing ran, so there is nothing to recover, and a
//! restarted agent refuses the same RUN again and tells it again. The supervisor queues one
//! observation per replica; the reporter sends what is queued with its reports until a
//! leader takes one, and the replica is then told: not queued again while the directive
//! still names it (the leader requeues the job, and its next directive drops it).
//!
//! Bounded: only replicas the newest directive names are kept (`retain`), and a directive
//! names at most `MAX_ASSIGNMENTS_PER_DIRECTIVE`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_proto::v1::{Observation, observation::What};

use crate::journal::ReplicaKey;
use crate::limits::MAX_ASSIGNMENTS_PER_DIRECTIVE;

#[derive(Default)]
pub struct Unrecorded(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    /// Queued, not taken by a leader yet.
    outbox: BTreeMap<ReplicaKey, Observation>,
    /// Taken by a leader.
    told: BTreeSet<ReplicaKey>,
}

impl Unrecorded {
    /// `key`'s start was refused, the journal failing with `why`: queued unless queued or
    /// told already. Whether it was queued now.
    pub fn refused(&self, key: ReplicaKey, why: &str) -> bool {
        let mut inner = self.lock();
        if inner.told.contains(&key) || inner.outbox.contains_key(&key) {
            return false;
        }
        if inner.outbox.len() >= MAX_ASSIGNMENTS_PER_DIRECTIVE {
            return false;
        }
        let what = What::Unrecorded(baton_proto::v1::Unrecorded {
            job_id: key.job_id,
            attempt: key.attempt,
            rank: key.rank,
            reason: why.to_string(),
        });
        inner.outbox.insert(key, Observation { what: Some(what) });
        true
    }

    /// Up to `max` queued observations, for a report.
    pub fn outbox(&self, max: usize) -> Vec<(ReplicaKey, Observation)> {
        self.lock().outbox.iter().take(max).map(|(k, o)| (*k, o.clone())).collect()
    }

    /// A leader took the report that carried these.
    pub fn taken(&self, keys: &[ReplicaKey]) {
        let mut inner = self.lock();
        for key in keys {
            if inner.outbox.remove(key).is_some() {
                inner.told.insert(*key);
            }
        }
    }

    /// Forgets the replicas the newest directive (`wanted`) no longer names.
    pub fn retain(&self, wanted: &BTreeSet<ReplicaKey>) {
        let mut inner = self.lock();
        inner.outbox.retain(|k, _| wanted.contains(k));
        inner.told.retain(|k| wanted.contains(k));
    }

    /// The journal takes writes again: a start refused from now on is a new refusal.
    pub fn clear(&self) {
        *self.lock() = Inner::default();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(job_id: u64) -> ReplicaKey {
        ReplicaKey { job_id, attempt: 1, rank: 0 }
    }

    #[test]
    fn a_refused_start_is_sent_until_taken_then_told_once_while_the_directive_names_it() {
        let u = Unrecorded::default();
        assert!(u.refused(key(1), "disk full"));
        assert!(!u.refused(key(1), "disk full"), "queued once");
        // A report that was not taken carries it again.
        assert_eq!(u.outbox(10).len(), 1);
        assert_eq!(u.outbox(10).len(), 1);
        u.taken(&[key(1)]);
        assert!(u.outbox(10).is_empty());
        assert!(!u.refused(key(1), "disk full"), "told: the directive that still names it was sent before");
        // Dropped by the directive: a later refusal of the same replica is told again.
        u.retain(&BTreeSet::new());
        assert!(u.refused(key(1), "disk full"));
        u.clear();
        assert!(u.outbox(10).is_empty());
    }

    #[test]
    fn at_most_a_directives_worth_is_queued() {
        let u = Unrecorded::default();
        for job in 0..(MAX_ASSIGNMENTS_PER_DIRECTIVE as u64 + 5) {
            u.refused(key(job), "disk full");
        }
        assert_eq!(u.outbox(usize::MAX).len(), MAX_ASSIGNMENTS_PER_DIRECTIVE);
        let Some(What::Unrecorded(o)) = &u.outbox(1)[0].1.what else { panic!("an Unrecorded observation") };
        assert_eq!((o.job_id, o.attempt, o.rank, o.reason.as_str()), (0, 1, 0, "disk full"));
    }
}
