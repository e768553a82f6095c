//! Replicas an agent has shown it runs (listed in a report's `running`) and then stops
//! listing, with no exit reported, while the directive still says run: the process is gone
//! without a trace (for example it died while its agent was down). Once that lasts longer
//! than a bound, the leader commits `Observed::Vanished` and the model requeues the job.
//! Only replicas the agent has listed at least once count: a replica it has not started yet
//! (or an agent that lists nothing) is never declared vanished. In the leader's memory only:
//! per node (a report looks at its own node's replicas only, so its cost does not grow
//! with the cluster), at most `MAX_TRACKED_NODES` nodes and, per node, the replicas its
//! directive says run (bounded by the directive's size). Pure: it decides on times it is
//! given (ms on one monotonic clock), so the simulator's leader decides by it too.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use baton_model::command::Observed;
use baton_model::name::Name;
use baton_proto::v1::{Action, Assignment, Running};

/// Nodes tracked at once: as many as a cluster may have. Beyond it (nodes removed and others
/// added) tracking starts over, which only delays a declaration.
pub const MAX_TRACKED_NODES: usize = baton_model::limits::MAX_NODES;

/// (job id, attempt, rank) of a replica on one node.
type Key = (u64, u32, u32);

#[derive(Default)]
pub struct Vanished {
    /// Per node, the replicas seen running; `Some(since_ms)` while they are missing from the
    /// reports.
    seen: Mutex<HashMap<Name, HashMap<Key, Option<u64>>>>,
}

impl Vanished {
    /// The replicas of `node` to declare vanished at `now_ms`: missing for `bound_ms` or more.
    pub fn check(
        &self,
        node: &Name,
        published: &[Assignment],
        running: &[Running],
        bound_ms: u64,
        now_ms: u64,
    ) -> Vec<Observed> {
        // In the directive's order, so that declarations come out in it.
        let in_order: Vec<Key> = published
            .iter()
            .filter(|a| a.action == Action::Run as i32)
            .map(|a| (a.job_id, a.attempt, a.rank))
            .collect();
        let wanted: HashSet<Key> = in_order.iter().copied().collect();
        let mut nodes = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if wanted.is_empty() {
            nodes.remove(node);
            return Vec::new();
        }
        if nodes.len() >= MAX_TRACKED_NODES && !nodes.contains_key(node) {
            nodes.clear();
        }
        let seen = nodes.entry(node.clone()).or_default();
        seen.retain(|k, _| wanted.contains(k));
        let listed: HashSet<Key> = running.iter().map(|r| (r.job_id, r.attempt, r.rank)).collect();
        let mut out = Vec::new();
        for key in in_order {
            if listed.contains(&key) {
                seen.insert(key, None);
                continue;
            }
            let Some(missing) = seen.get_mut(&key) else { continue };
            let since_ms = *missing.get_or_insert(now_ms);
            let missing_ms = now_ms.saturating_sub(since_ms);
            // Kept until the declaration is committed (`committed`): a report whose write
            // fails leaves it to the next report, which declares it again.
            if missing_ms >= bound_ms {
                out.push(Observed::Vanished { job: key.0, attempt: key.1, rank: key.2, missing_ms });
            }
        }
        out
    }

    /// The report that carried these declarations of `node` is committed: they are not
    /// declared again. Before, a declaration was forgotten as it was made; when its report's
    /// write failed (a leader briefly without its quorum), the replica was never declared
    /// again (its agent no longer lists it, and only a listed replica is tracked), and its
    /// job stayed running with nothing running, holding its GPUs for good.
    pub fn committed(&self, node: &Name, declared: &[Observed]) {
        let mut nodes = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(seen) = nodes.get_mut(node) else { return };
        for o in declared {
            if let Observed::Vanished { job, attempt, rank, .. } = o {
                seen.remove(&(*job, *attempt, *rank));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_assignment(job_id: u64) -> Assignment {
        Assignment { job_id, attempt: 1, action: Action::Run as i32, ..Default::default() }
    }

    #[test]
    fn only_a_replica_once_listed_then_missing_past_the_bound_vanishes() {
        let v = Vanished::default();
        let n1 = Name::lit("n1");
        let placed = vec![run_assignment(1), run_assignment(2)];
        let bound = 40;
        let one = Running { job_id: 1, attempt: 1, ..Default::default() };
        assert!(v.check(&n1, &placed, &[one], bound, 1_000).is_empty());
        assert!(v.check(&n1, &placed, &[], bound, 1_010).is_empty(), "missing, not for long yet");
        assert!(v.check(&n1, &placed, &[], bound, 1_049).is_empty(), "missing for 39 ms");
        let out = v.check(&n1, &placed, &[], bound, 1_050);
        assert!(
            matches!(out.as_slice(), [Observed::Vanished { job: 1, attempt: 1, rank: 0, missing_ms: 40 }]),
            "{out:?}"
        );
        // Job 2 was never listed: never declared vanished; job 1's declaration, not known to
        // be committed, is made again.
        let again = v.check(&n1, &placed, &[], bound, 2_000);
        assert!(matches!(again.as_slice(), [Observed::Vanished { job: 1, .. }]), "{again:?}");
        v.committed(&n1, &again);
        assert!(v.check(&n1, &placed, &[], bound, 3_000).is_empty(), "committed: not declared again");
    }

    /// A large cluster runs more replicas than one map of every replica held (65,536): the
    /// map started over and forgot them, so a replica gone from a big cluster never
    /// vanished. Tracking is per node now, bounded by the nodes a cluster may have.
    #[test]
    fn a_replica_vanishes_in_a_cluster_running_more_than_65536_replicas() {
        let v = Vanished::default();
        let bound = 1;
        let (nodes, per_node) = (700u64, 100u64);
        let placed_on =
            |n: u64| -> Vec<Assignment> { (0..per_node).map(|j| run_assignment(n * per_node + j)).collect() };
        let listed = |a: &[Assignment]| -> Vec<Running> {
            a.iter().map(|a| Running { job_id: a.job_id, attempt: 1, ..Default::default() }).collect()
        };
        for n in 0..nodes {
            let placed = placed_on(n);
            assert!(v.check(&Name::lit(&format!("n{n}")), &placed, &listed(&placed), bound, 0).is_empty());
        }
        // Node 0 no longer lists job 0, and still does not once the bound has passed.
        let placed = placed_on(0);
        let first = v.check(&Name::lit("n0"), &placed, &listed(&placed[1..]), bound, 0);
        assert!(first.is_empty(), "missing, not for long yet: {first:?}");
        let out = v.check(&Name::lit("n0"), &placed, &listed(&placed[1..]), bound, 5);
        v.committed(&Name::lit("n0"), &out);
        assert!(matches!(out.as_slice(), [Observed::Vanished { job: 0, .. }]), "{out:?}");
    }
}
