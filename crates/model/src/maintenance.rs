//! Maintenance windows (decisions.md section 14): nodes reserved from a start to an end
//! for work on them (firmware, drivers, cabling). Before the start a job goes there only if
//! its time limit ends it by the start; at the start what still runs there is stopped as in
//! mode `checkpoint` and requeued; until the end the nodes are out of the pool's capacity.

use serde::{Deserialize, Serialize};

use crate::job::Job;
use crate::name::Name;

/// A window as an operator writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSpec {
    pub name: Name,
    pub nodes: Vec<Name>,
    pub start_ms: u64,
    pub end_ms: u64,
}

/// A window as the state holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub spec: WindowSpec,
    /// Started: its nodes are out of the pool's capacity until its end.
    pub active: bool,
}

impl Window {
    pub fn holds(&self, node: &Name) -> bool {
        self.spec.nodes.iter().any(|n| n == node)
    }

    /// Not started yet, and `job` started at `now_ms` would not be done by its start: the
    /// job may not be placed on the window's nodes (a job without a time limit never is).
    pub fn closes_to(&self, job: &Job, now_ms: u64) -> bool {
        !self.active && !ends_by(job, now_ms, self.spec.start_ms)
    }
}

/// A job started at `now_ms` ends, by its time limit, no later than `at_ms`.
pub fn ends_by(job: &Job, now_ms: u64, at_ms: u64) -> bool {
    job.spec.time_limit_ms.is_some_and(|limit| now_ms.saturating_add(limit) <= at_ms)
}
