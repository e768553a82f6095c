//! Replicas an agent has shown it runs (listed in a report's `running`) and then stops
//! listing, with no exit reported, while the directive still says run: the process is gone
//! without a trace (for example it died while its agent was down). Once that lasts longer
//! than a bound, the leader commits `Observed::Vanished` and the model requeues the job.
//! Only replicas the agent has listed at least once count: a replica it has not started yet
//! (or an agent that lists nothing) is never declared vanished. In the leader's memory only:
//! per node (a report looks at its own node's replicas only, so its cost does not grow
//! with the cluster), at most `MAX_TRACKED_NODES` nodes and, per node, the replicas its
//! directive says run (bounded by the directive's size).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    /// Per node, the replicas seen running; `Some(since)` while they are missing from the
    /// reports.
    seen: Mutex<HashMap<Name, HashMap<Key, Option<Instant>>>>,
}

impl Vanished {
    /// The replicas of `node` to declare vanished now.
    pub fn check(&self, node: &Name, published: &[Assignment], running: &[Running], bound: Duration) -> Vec<Observed> {
        let now = Instant::now();
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
            let since = *missing.get_or_insert(now);
            let missing_ms = now.duration_since(since).as_millis() as u64;
            if missing_ms >= bound.as_millis() as u64 {
                seen.remove(&key);
                out.push(Observed::Vanished { job: key.0, attempt: key.1, rank: key.2, missing_ms });
            }
        }
        out
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
        let bound = Duration::from_millis(40);
        let one = Running { job_id: 1, attempt: 1, ..Default::default() };
        assert!(v.check(&n1, &placed, &[one], bound).is_empty());
        assert!(v.check(&n1, &placed, &[], bound).is_empty(), "missing, not for long yet");
        std::thread::sleep(Duration::from_millis(50));
        let out = v.check(&n1, &placed, &[], bound);
        assert!(matches!(out.as_slice(), [Observed::Vanished { job: 1, attempt: 1, rank: 0, .. }]), "{out:?}");
        // Job 2 was never listed: never declared vanished.
        assert!(v.check(&n1, &placed, &[], bound).is_empty());
    }

    /// A large cluster runs more replicas than one map of every replica held (65,536): the
    /// map started over and forgot them, so a replica gone from a big cluster never
    /// vanished. Tracking is per node now, bounded by the nodes a cluster may have.
    #[test]
    fn a_replica_vanishes_in_a_cluster_running_more_than_65536_replicas() {
        let v = Vanished::default();
        let bound = Duration::from_millis(1);
        let (nodes, per_node) = (700u64, 100u64);
        let placed_on =
            |n: u64| -> Vec<Assignment> { (0..per_node).map(|j| run_assignment(n * per_node + j)).collect() };
        let listed = |a: &[Assignment]| -> Vec<Running> {
            a.iter().map(|a| Running { job_id: a.job_id, attempt: 1, ..Default::default() }).collect()
        };
        for n in 0..nodes {
            let placed = placed_on(n);
            assert!(v.check(&Name::lit(&format!("n{n}")), &placed, &listed(&placed), bound).is_empty());
        }
        // Node 0 no longer lists job 0, and still does not once the bound has passed.
        let placed = placed_on(0);
        let first = v.check(&Name::lit("n0"), &placed, &listed(&placed[1..]), bound);
        assert!(first.is_empty(), "missing, not for long yet: {first:?}");
        std::thread::sleep(Duration::from_millis(5));
        let out = v.check(&Name::lit("n0"), &placed, &listed(&placed[1..]), bound);
        assert!(matches!(out.as_slice(), [Observed::Vanished { job: 0, .. }]), "{out:?}");
    }
}
