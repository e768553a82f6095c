//! Replicas an agent says it runs that the leader's published directive does not place on
//! its node. The directive is declarative, so the agent is already told to stop them; this
//! records each one once as an event on the job. A replica is a stray only if it is still
//! reported `resend_ms` after first seen (a report may cross the directive that drops it).
//! In the leader's memory only, bounded by `MAX_TRACKED`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_model::command::Observed;
use baton_model::name::Name;
use baton_proto::v1::{Assignment, ReplicaPhase, Running};

/// Replicas tracked at once; beyond it the map starts over (a stray is seen again).
pub const MAX_TRACKED: usize = 65_536;

/// (node, job id, attempt, rank).
type Key = (Name, u64, u32, u32);

#[derive(Default)]
pub struct Strays {
    /// When each stray was first seen, and whether it has been recorded.
    seen: Mutex<HashMap<Key, (Instant, bool)>>,
}

impl Strays {
    /// The strays of `node` to record now, given what it was last sent and what it reports.
    pub fn check(&self, node: &Name, published: &[Assignment], running: &[Running], settle: Duration) -> Vec<Observed> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= MAX_TRACKED {
            seen.clear();
        }
        let stray: Vec<Key> = running
            .iter()
            .filter(|r| r.phase != ReplicaPhase::Stopping as i32)
            .filter(|r| !published.iter().any(|a| (a.job_id, a.attempt, a.rank) == (r.job_id, r.attempt, r.rank)))
            .map(|r| (node.clone(), r.job_id, r.attempt, r.rank))
            .collect();
        seen.retain(|k, _| k.0 != *node || stray.contains(k));
        let mut out = Vec::new();
        for key in stray {
            let (first, recorded) = seen.entry(key.clone()).or_insert((now, false));
            if !*recorded && now.duration_since(*first) >= settle {
                *recorded = true;
                out.push(Observed::Stray { job: key.1, attempt: key.2, rank: key.3 });
            }
        }
        out
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
        assert!(s.check(&n1, &placed, &running, Duration::from_millis(50)).is_empty(), "not settled yet");
        std::thread::sleep(Duration::from_millis(60));
        let out = s.check(&n1, &placed, &running, Duration::from_millis(50));
        assert_eq!(out, vec![Observed::Stray { job: 2, attempt: 1, rank: 0 }]);
        assert!(s.check(&n1, &placed, &running, Duration::from_millis(50)).is_empty(), "recorded once");
    }
}
