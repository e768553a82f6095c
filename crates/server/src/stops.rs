//! A gang stops when every one of its replicas has: the leader tallies the agents' `Stopped`
//! reports per (job, attempt) and commits `JobStopped` once all ranks are in. The tally is
//! in memory; after a failover the new leader re-sends STOP and agents re-report.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use baton_model::job::JobId;

/// Attempts being tallied at once; the oldest entries go first beyond it.
pub const MAX_TALLIES: usize = 65_536;

#[derive(Default)]
pub struct StopTally {
    by_attempt: Mutex<HashMap<(JobId, u32), BTreeMap<u32, bool>>>,
}

impl StopTally {
    /// Records rank `rank` of `world_size` as stopped; returns `Some(all_checkpointed)` once
    /// every rank has reported.
    pub fn record(&self, job: JobId, attempt: u32, rank: u32, world_size: u32, checkpointed: bool) -> Option<bool> {
        let mut map = self.by_attempt.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_TALLIES {
            // A stuck gang cannot grow this without bound; it is re-reported after a resend.
            map.clear();
        }
        let ranks = map.entry((job, attempt)).or_default();
        ranks.insert(rank, checkpointed);
        if (ranks.len() as u32) < world_size.max(1) {
            return None;
        }
        let all = ranks.values().all(|c| *c);
        map.remove(&(job, attempt));
        Some(all)
    }
}
