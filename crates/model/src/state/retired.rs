//! Replica ids the cluster removed (behaviour 6): an id once removed is never a member
//! again. A leader of an older configuration may still count a removed id among its voters;
//! an empty replica started under that id takes such a leader for its own and answers its
//! votes and appends with nothing it ever stored, so two quorums can meet only in a replica
//! that remembers neither (found by the simulator's operator, stop 77: a replica's committed
//! leader went back). Membership entries record the ids they remove here, as every replica
//! applies them, and the leader refuses to add one again (the raft crate's `add_learner`).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::State;

/// Removed ids kept, the newest last: a cluster that replaced this many replicas since one
/// left has long forgotten every configuration that held it.
pub const MAX_RETIRED_REPLICAS: usize = 1_024;

/// The replica ids removed, in the order they left (each once).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredReplicas(VecDeque<u64>);

impl RetiredReplicas {
    pub fn contains(&self, id: u64) -> bool {
        self.0.contains(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Oldest first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().copied()
    }

    fn add(&mut self, id: u64) {
        if self.contains(id) {
            return;
        }
        if self.0.len() == MAX_RETIRED_REPLICAS {
            self.0.pop_front();
        }
        self.0.push_back(id);
    }
}

impl State {
    /// A committed membership change removed `removed` (the members of the configuration
    /// before it that are not members of its own). Recorded from behaviour 6 on; below it
    /// nothing changes, as in builds that do not have it, so replicas of two builds keep one
    /// state during a rolling upgrade.
    pub fn replicas_removed(&mut self, removed: impl IntoIterator<Item = u64>) {
        if self.behaviour < crate::behaviour::RETIRED_REPLICAS {
            return;
        }
        for id in removed {
            self.retired.add(id);
        }
    }

    /// The replica ids the cluster removed, which it never takes back (see `retired`).
    pub fn retired_replicas(&self) -> &RetiredReplicas {
        &self.retired
    }

    pub(super) fn restore_retired<E: serde::de::Error>(&mut self, retired: RetiredReplicas) -> Result<(), E> {
        if retired.len() > MAX_RETIRED_REPLICAS {
            return Err(E::custom(format!(
                "inconsistent state: {} retired replica ids, more than the {MAX_RETIRED_REPLICAS} kept",
                retired.len()
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(id) = retired.iter().find(|id| !seen.insert(*id)) {
            return Err(E::custom(format!("inconsistent state: replica {id} is retired twice")));
        }
        self.retired = retired;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Op};

    fn at(behaviour: u32) -> State {
        let mut s = State::new();
        s.apply(Command { now_ms: 1, op: Op::SetBehaviour(behaviour) }).unwrap();
        s
    }

    #[test]
    fn removed_replicas_are_recorded_from_behaviour_6_on() {
        let mut s = at(crate::behaviour::LENDS_FOLLOW_RANKS);
        s.replicas_removed([4]);
        assert!(s.retired_replicas().is_empty(), "behaviour 5 records nothing, as the builds before it");
        let mut s = at(crate::behaviour::RETIRED_REPLICAS);
        s.replicas_removed([4, 2]);
        s.replicas_removed([4]);
        assert_eq!(s.retired_replicas().iter().collect::<Vec<_>>(), vec![4, 2], "each once, in the order they left");
    }

    #[test]
    fn the_oldest_removed_id_goes_once_the_record_is_full() {
        let mut s = at(crate::behaviour::RETIRED_REPLICAS);
        s.replicas_removed(1..=MAX_RETIRED_REPLICAS as u64 + 1);
        assert_eq!(s.retired_replicas().len(), MAX_RETIRED_REPLICAS);
        assert!(!s.retired_replicas().contains(1) && s.retired_replicas().contains(2));
    }

    #[test]
    fn the_retired_ids_round_trip_through_a_snapshot_and_an_empty_record_keeps_the_older_layout() {
        let config = bincode::config::standard();
        let mut s = at(crate::behaviour::RETIRED_REPLICAS);
        let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
        // Nothing else set but the behaviour: the layout of format 10, as before this build.
        let old = bincode::serde::decode_from_slice::<crate::state::PreRankSavesState, _>(&bytes, config);
        assert_eq!(old.unwrap().1, bytes.len(), "an older reader reads all of it while no replica was removed");
        s.replicas_removed([4]);
        let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
        let back: State = bincode::serde::decode_from_slice(&bytes, config).unwrap().0;
        assert_eq!(back, s);
        assert!(back.retired_replicas().contains(4));
        let old = bincode::serde::decode_from_slice::<crate::state::PreRetiredState, _>(&bytes, config);
        assert!(old.is_err() || old.unwrap().1 < bytes.len(), "the older layout does not hold the record");
    }
}
