//! Replicas an agent says it runs that the leader's published directive does not place on
//! its node. The directive is declarative, so the agent is already told to stop them; this
//! records each one once as an event on the job. A replica is a stray only if it is still
//! reported `resend_ms` after first seen (a report may cross the directive that drops it).
//! In the leader's memory only, bounded by `MAX_TRACKED`. Pure: it decides on times it is
//! given (ms on one monotonic clock), so the simulator's leader decides by it too.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use baton_model::command::Observed;
use baton_model::name::Name;
use baton_proto::v1::{Assignment, ReplicaPhase, Running};

/// Replicas tracked at once, all nodes together; beyond it the map starts over (a stray is
/// seen again).
pub const MAX_TRACKED: usize = 65_536;

/// (job id, attempt, rank) on one node.
type Key = (u64, u32, u32);

/// When each stray of one node was first seen (ms), and whether its record is committed.
type Seen = HashMap<Key, (u64, bool)>;

#[derive(Default)]
pub struct Strays {
    /// Per node: a report touches only its own node's entries. Under a std mutex held for
    /// one report's work, which is linear in what the report and the directive list (a
    /// report of an agent listing 65,536 replicas must not stall every other report).
    seen: Mutex<HashMap<Name, Seen>>,
}

impl Strays {
    /// The strays of `node` to record at `now_ms`, given what it was last sent and what it
    /// reports: those reported for at least `settle_ms`.
    pub fn check(
        &self,
        node: &Name,
        published: &[Assignment],
        running: &[Running],
        settle_ms: u64,
        now_ms: u64,
    ) -> Vec<Observed> {
        let placed: HashSet<Key> = published.iter().map(|a| (a.job_id, a.attempt, a.rank)).collect();
        let stray: HashSet<Key> = running
            .iter()
            .filter(|r| r.phase != ReplicaPhase::Stopping as i32)
            .map(|r| (r.job_id, r.attempt, r.rank))
            .filter(|k| !placed.contains(k))
            .collect();
        let mut all = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if all.values().map(HashMap::len).sum::<usize>() + stray.len() > MAX_TRACKED {
            all.clear();
        }
        let seen = all.entry(node.clone()).or_default();
        seen.retain(|k, _| stray.contains(k));
        // In the report's order of keys, so the observations recorded do not depend on hashing.
        let mut stray: Vec<Key> = stray.into_iter().collect();
        stray.sort_unstable();
        let mut out = Vec::new();
        for key in stray {
            let (first, recorded) = seen.entry(key).or_insert((now_ms, false));
            // Made again until its report is committed (`committed`).
            if !*recorded && now_ms.saturating_sub(*first) >= settle_ms {
                out.push(Observed::Stray { job: key.0, attempt: key.1, rank: key.2 });
            }
        }
        if seen.is_empty() {
            all.remove(node);
        }
        out
    }

    /// The report that carried these records of `node`'s strays is committed: they are not
    /// made again while the replicas stay strays. Marked as they were made, a record whose
    /// report's write failed was lost.
    pub fn committed(&self, node: &Name, recorded: &[Observed]) {
        let mut all = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(seen) = all.get_mut(node) else { return };
        for o in recorded {
            if let Observed::Stray { job, attempt, rank } = o
                && let Some((_, committed)) = seen.get_mut(&(*job, *attempt, *rank))
            {
                *committed = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job_id: u64, phase: ReplicaPhase) -> Running {
        Running { job_id, attempt: 1, phase: phase as i32, ..Default::default() }
    }

    #[test]
    fn a_stray_is_recorded_once_after_it_settles_and_stopping_ones_are_not_strays() {
        let s = Strays::default();
        let n1 = Name::lit("n1");
        let placed = vec![Assignment { job_id: 1, attempt: 1, ..Default::default() }];
        let running =
            vec![run(1, ReplicaPhase::Running), run(2, ReplicaPhase::Running), run(3, ReplicaPhase::Stopping)];
        assert!(s.check(&n1, &placed, &running, 50, 1_000).is_empty(), "not settled yet");
        assert!(s.check(&n1, &placed, &running, 50, 1_049).is_empty(), "not settled yet");
        let out = s.check(&n1, &placed, &running, 50, 1_050);
        assert_eq!(out, vec![Observed::Stray { job: 2, attempt: 1, rank: 0 }]);
        // Its report did not commit: it is made again.
        assert_eq!(s.check(&n1, &placed, &running, 50, 1_055), out);
        s.committed(&n1, &out);
        assert!(s.check(&n1, &placed, &running, 50, 1_060).is_empty(), "recorded once");
    }

    #[test]
    fn a_report_touches_only_its_own_nodes_strays() {
        let s = Strays::default();
        let (n1, n2) = (Name::lit("n1"), Name::lit("n2"));
        let running = vec![run(2, ReplicaPhase::Running)];
        let out = s.check(&n1, &[], &running, 0, 0);
        assert!(out.len() == 1);
        s.committed(&n1, &out);
        // n2's report without the replica does not forget n1's (already recorded) stray.
        assert!(s.check(&n2, &[], &[], 0, 0).is_empty());
        assert!(s.check(&n1, &[], &running, 0, 0).is_empty(), "n1's stray is still recorded");
        // n1's report without it forgets it: seen again later, it is recorded again.
        assert!(s.check(&n1, &[], &[], 0, 0).is_empty());
        assert_eq!(s.check(&n1, &[], &running, 0, 0).len(), 1);
    }

    /// The largest report an agent may send against the largest directive: linear work (the
    /// old check compared every reported replica with every placed one, and every tracked
    /// stray with every reported one: 2^32 comparisons here).
    #[test]
    fn a_maximal_report_is_checked_in_linear_work() {
        let s = Strays::default();
        let n1 = Name::lit("n1");
        let n = 65_536u64;
        let placed: Vec<Assignment> =
            (0..n).map(|j| Assignment { job_id: j, attempt: 1, ..Default::default() }).collect();
        let running: Vec<Running> = (n / 2..n + n / 2).map(|j| run(j, ReplicaPhase::Running)).collect();
        let out = s.check(&n1, &placed, &running, 0, 0);
        assert_eq!(out.len(), (n / 2) as usize, "the replicas reported but not placed");
    }
}
