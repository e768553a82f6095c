//! Scheduler settings kept in the replicated state (so that every replica, and `baton sim`,
//! decides alike and an operator can change them at run time), and the reservations of
//! docs/policy.md section 9.

use serde::{Deserialize, Serialize};

use crate::alloc::ReplicaAlloc;
use crate::job::JobId;
use crate::limits::MAX_RESERVE_AFTER_MS;
use crate::name::Name;

/// docs/policy.md section 9's default `reserve_after`: five minutes.
pub const DEFAULT_RESERVE_AFTER_MS: u64 = 300_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerSettings {
    /// A job Pending this long without interruption that cannot be placed, even by
    /// preemption, may get a reservation; `None` (`never`): no reservations.
    pub reserve_after_ms: Option<u64>,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings { reserve_after_ms: Some(DEFAULT_RESERVE_AFTER_MS) }
    }
}

impl SchedulerSettings {
    /// Refuses settings out of bounds, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        match self.reserve_after_ms {
            Some(ms) if ms > MAX_RESERVE_AFTER_MS => Err(format!(
                "reserve_after may be at most {} s (or never), not {} s",
                MAX_RESERVE_AFTER_MS / 1000,
                ms / 1000
            )),
            _ => Ok(()),
        }
    }
}

/// Resources held in one pool for a starving job (docs/policy.md section 9), until it starts
/// there or elsewhere, is cancelled or paused, or its queue's limits no longer admit it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolReservation {
    pub job: JobId,
    pub pool: Name,
    /// Where the job will start once these are free; nobody else is placed on them,
    /// except jobs that end in time (backfill).
    pub replicas: Vec<ReplicaAlloc>,
    /// The running jobs it waited for when it was made (its reason counts those still there).
    pub waits_for: Vec<JobId>,
    pub created_ms: u64,
}
