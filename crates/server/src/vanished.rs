//! Replicas an agent has shown it runs (listed in a report's `running`) and then stops
//! listing, with no exit reported, while the directive still says run: the process is gone
//! without a trace (for example it died while its agent was down). Once that lasts longer
//! than a bound, the leader commits `Observed::Vanished` and the model requeues the job.
//! Only replicas the agent has listed at least once count: a replica it has not started yet
//! (or an agent that lists nothing) is never declared vanished. In the leader's memory only,
//! bounded by `MAX_TRACKED`.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_model::command::Observed;
use baton_model::name::Name;
use baton_proto::v1::{Action, Assignment, Running};

/// Replicas tracked at once; beyond it the map starts over.
pub const MAX_TRACKED: usize = 65_536;

/// (node, job id, attempt, rank).
type Key = (Name, u64, u32, u32);

#[derive(Default)]
pub struct Vanished {
    /// Replicas seen running; `Some(since)` while they are missing from the reports.
    seen: Mutex<HashMap<Key, Option<Instant>>>,
}

impl Vanished {
    /// The replicas of `node` to declare vanished now.
    pub fn check(&self, node: &Name, published: &[Assignment], running: &[Running], bound: Duration) -> Vec<Observed> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_TRACKED {
            seen.clear();
        }
        let listed: HashSet<(u64, u32, u32)> = running.iter().map(|r| (r.job_id, r.attempt, r.rank)).collect();
        let wanted: Vec<Key> = published
            .iter()
            .filter(|a| a.action == Action::Run as i32)
            .map(|a| (node.clone(), a.job_id, a.attempt, a.rank))
            .collect();
        seen.retain(|k, _| k.0 != *node || wanted.contains(k));
        let mut out = Vec::new();
        for key in wanted {
            if listed.contains(&(key.1, key.2, key.3)) {
                seen.insert(key, None);
                continue;
            }
            let Some(missing) = seen.get_mut(&key) else { continue };
            let since = *missing.get_or_insert(now);
            let missing_ms = now.duration_since(since).as_millis() as u64;
            if missing_ms >= bound.as_millis() as u64 {
                seen.remove(&key);
                out.push(Observed::Vanished { job: key.1, attempt: key.2, rank: key.3, missing_ms });
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
}
