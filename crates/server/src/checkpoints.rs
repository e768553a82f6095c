//! Which ranks of each attempt have reported a checkpoint since the job's last complete one.
//! A job has a checkpoint to resume from (and its progress mark moves) only once every rank
//! has saved its work: one rank's checkpoint does not make the gang resumable, and its next
//! attempt would resume every rank with `BATON_RESUME` set. The gateway commits the model's
//! `Observed::Checkpointed` when the last rank of the attempt reports one, and counts a lease
//! stop as checkpointed only if every other rank has one too.
//!
//! In the leader's memory only, bounded by `MAX_TRACKED`: a new leader starts from nothing,
//! so every rank reports again before the job counts as checkpointed; that only delays the
//! mark, never claims a checkpoint that is not there. Used only until the state's behaviour
//! is 3 (a rolling upgrade from a build of format 10): from then on the replicated state
//! keeps the tally (`Observed::RankCheckpointed`), and a failover forgets nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

/// Attempts tracked at once; beyond it the oldest jobs' tallies go (their ranks report again).
pub const MAX_TRACKED: usize = 65_536;

/// (job id, attempt).
type Key = (u64, u32);

#[derive(Default)]
pub struct Checkpoints {
    saved: Mutex<BTreeMap<Key, BTreeSet<u32>>>,
}

impl Checkpoints {
    /// Records that `rank` of a `world`-rank attempt saved its work. True when every rank
    /// has, since the last time it said so: the job has a checkpoint now (the tally starts over).
    pub fn saved(&self, job_id: u64, attempt: u32, rank: u32, world: u32) -> bool {
        let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        // Older attempts of the job are over.
        let older: Vec<Key> = saved.range((job_id, 0)..(job_id, attempt)).map(|(k, _)| *k).collect();
        for k in older {
            saved.remove(&k);
        }
        if rank >= world {
            return false;
        }
        let ranks = saved.entry((job_id, attempt)).or_default();
        ranks.insert(rank);
        if ranks.len() < world as usize {
            bound(&mut saved);
            return false;
        }
        saved.remove(&(job_id, attempt));
        true
    }

    /// Records that `rank` saved its work without completing the tally (a lease stop: the
    /// job goes back to the queue either way).
    pub fn note(&self, job_id: u64, attempt: u32, rank: u32, world: u32) {
        if rank >= world {
            return;
        }
        let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        saved.entry((job_id, attempt)).or_default().insert(rank);
        bound(&mut saved);
    }

    /// Whether every rank of the attempt other than `rank` has saved its work since the last
    /// complete checkpoint.
    pub fn others_saved(&self, job_id: u64, attempt: u32, rank: u32, world: u32) -> bool {
        let saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
        let ranks = saved.get(&(job_id, attempt));
        (0..world).filter(|r| *r != rank).all(|r| ranks.is_some_and(|s| s.contains(&r)))
    }
}

fn bound(saved: &mut BTreeMap<Key, BTreeSet<u32>>) {
    while saved.len() > MAX_TRACKED {
        saved.pop_first();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_counts_once_every_rank_saved() {
        let c = Checkpoints::default();
        assert!(c.saved(1, 1, 0, 1), "a single rank is the whole job");
        assert!(!c.saved(2, 1, 0, 3));
        assert!(!c.saved(2, 1, 0, 3), "the same rank twice is still one");
        assert!(!c.saved(2, 1, 2, 3));
        assert!(c.others_saved(2, 1, 1, 3) && !c.others_saved(2, 1, 0, 3));
        assert!(c.saved(2, 1, 1, 3));
        // The tally starts over: the next checkpoint needs every rank again.
        assert!(!c.saved(2, 1, 1, 3));
        assert!(!c.others_saved(2, 1, 0, 3));
        // A rank beyond the attempt's ranks counts for nothing.
        assert!(!c.saved(3, 1, 5, 2) && !c.saved(3, 1, 0, 2));
    }

    #[test]
    fn lease_stops_are_noted_without_completing_the_tally() {
        let c = Checkpoints::default();
        c.note(1, 1, 0, 2);
        c.note(1, 1, 1, 2);
        c.note(1, 1, 7, 2);
        assert!(c.others_saved(1, 1, 0, 2) && c.others_saved(1, 1, 1, 2), "both ranks' stops saved their work");
    }

    #[test]
    fn a_new_attempt_forgets_the_old_one() {
        let c = Checkpoints::default();
        assert!(!c.saved(1, 1, 0, 2));
        assert!(!c.saved(1, 2, 1, 2), "rank 0 saved attempt 1, not 2");
        assert!(!c.others_saved(1, 2, 1, 2));
    }

    #[test]
    fn the_tally_is_bounded() {
        let c = Checkpoints::default();
        for job in 0..MAX_TRACKED as u64 + 10 {
            c.saved(job, 1, 0, 2);
        }
        assert_eq!(c.saved.lock().unwrap().len(), MAX_TRACKED);
        assert!(!c.others_saved(0, 1, 1, 2), "the oldest went");
        assert!(c.others_saved(MAX_TRACKED as u64 + 9, 1, 1, 2));
    }
}
