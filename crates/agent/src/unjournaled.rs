//! Observations made while the journal takes no writes (a full disk, an I/O error): a
//! replica's exit, its checkpoint, its end after a stop. They wait here, in memory, and the
//! reporter sends them after the journaled observations until a leader takes them, so the
//! leader learns of an exit while the disk fails. Before, they were sent only once
//! journaled: the leader saw the replica gone from the running list, declared it vanished
//! after the heartbeat timeout and ran its job again, also one that had succeeded.
//!
//! Once the journal takes writes again the supervisor journals those no leader took yet
//! (`drain`). What a leader took is committed, so it is not journaled again. An
//! agent restarted meanwhile loses this memory, but not the exit: the wrapper's exit file
//! stays, and the restarted agent reads and reports it again (the leader takes a repeated
//! observation as the same one).
//!
//! Bounded by `MAX_PENDING_OBSERVATIONS`: past it the oldest goes, as a full journal would
//! lose it (the leader then learns of that replica as vanished).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_proto::v1::Observation;

use crate::limits::MAX_PENDING_OBSERVATIONS;

#[derive(Default)]
pub struct Outbox(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    /// Oldest first, with their ids.
    waiting: VecDeque<(u64, Observation)>,
    next_id: u64,
}

impl Outbox {
    /// Keeps `obs` until a leader takes it or the journal does. Whether an older one went
    /// to make room.
    pub fn keep(&self, obs: Observation) -> bool {
        let mut inner = self.lock();
        let dropped = inner.waiting.len() >= MAX_PENDING_OBSERVATIONS;
        if dropped {
            inner.waiting.pop_front();
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.waiting.push_back((id, obs));
        dropped
    }

    /// Up to `max` observations no leader took yet, oldest first, with their ids.
    pub fn outbox(&self, max: usize) -> Vec<(u64, Observation)> {
        self.lock().waiting.iter().take(max).cloned().collect()
    }

    /// A leader took the report that carried these (committed what they say): forgotten.
    pub fn taken(&self, ids: &[u64]) {
        self.lock().waiting.retain(|(id, _)| !ids.contains(id));
    }

    /// Whether anything waits.
    pub fn is_empty(&self) -> bool {
        self.lock().waiting.is_empty()
    }

    /// Hands each observation no leader took yet to `journal`, oldest first, and forgets it
    /// once journaled; stops at the first the journal refuses (it stays, with the rest).
    pub fn drain<E>(&self, mut journal: impl FnMut(&Observation) -> Result<(), E>) -> Result<(), E> {
        loop {
            // The lock is not held while journaling: the reporter may read meanwhile.
            let Some((id, obs)) = self.lock().waiting.front().cloned() else { return Ok(()) };
            journal(&obs)?;
            self.taken(&[id]);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::v1::observation::What;
    use baton_proto::v1::{Exited, Observation};

    fn exit(job_id: u64) -> Observation {
        Observation {
            what: Some(What::Exited(Exited { job_id, attempt: 1, rank: 0, exit_code: 0, ..Default::default() })),
        }
    }

    fn jobs(obs: &[(u64, Observation)]) -> Vec<u64> {
        obs.iter()
            .map(|(_, o)| match &o.what {
                Some(What::Exited(e)) => e.job_id,
                other => panic!("not an exit: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_observation_is_sent_until_taken_and_only_the_untaken_are_journaled() {
        let u = Outbox::default();
        u.keep(exit(1));
        u.keep(exit(2));
        u.keep(exit(3));
        // A report that was not taken carries them again, oldest first.
        assert_eq!(jobs(&u.outbox(10)), vec![1, 2, 3]);
        assert_eq!(jobs(&u.outbox(2)), vec![1, 2]);
        let sent = u.outbox(2);
        u.taken(&sent.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        assert_eq!(jobs(&u.outbox(10)), vec![3], "what a leader took is not sent again");
        let mut journaled = Vec::new();
        u.drain(|o| {
            journaled.push(o.clone());
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(journaled, vec![exit(3)], "only what no leader took goes into the journal");
        assert!(u.is_empty());
    }

    #[test]
    fn a_journal_that_fails_again_keeps_the_rest_in_order() {
        let u = Outbox::default();
        for job in 1..=3 {
            u.keep(exit(job));
        }
        let mut calls = 0;
        let r = u.drain(|_| {
            calls += 1;
            if calls == 2 { Err("disk full") } else { Ok(()) }
        });
        assert_eq!(r, Err("disk full"));
        assert_eq!(jobs(&u.outbox(10)), vec![2, 3]);
    }

    #[test]
    fn at_most_the_bound_waits_and_the_oldest_goes_first() {
        let u = Outbox::default();
        for job in 0..MAX_PENDING_OBSERVATIONS as u64 {
            assert!(!u.keep(exit(job)));
        }
        assert!(u.keep(exit(u64::MAX)), "past the bound the oldest goes");
        let all = u.outbox(usize::MAX);
        assert_eq!(all.len(), MAX_PENDING_OBSERVATIONS);
        assert_eq!(jobs(&all[..1]), vec![1]);
        assert_eq!(jobs(&all[all.len() - 1..]), vec![u64::MAX]);
    }
}
