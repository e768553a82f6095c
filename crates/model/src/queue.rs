//! Queues (Run:ai projects, Kueue ClusterQueues) and the cohorts they sit in.
//! docs/policy.md sections 1, 4 and 6 give the semantics; this file only holds the data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::name::Name;
use crate::resources::Resources;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cohort {
    pub name: Name,
    /// `None`: a top-level cohort, child of the implicit root.
    pub parent: Option<Name>,
    pub fair_sharing: bool,
}

/// One pool's guarantee for a queue. A resource missing from `borrow_limit` may borrow without
/// limit; one missing from `lend_limit` lends all of its unused nominal quota.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolQuota {
    pub nominal: Resources,
    pub borrow_limit: BTreeMap<String, u64>,
    pub lend_limit: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueOrdering {
    /// A job that cannot be placed does not hold back later jobs of its queue.
    #[default]
    BestEffortFIFO,
    /// The first job of the queue that cannot be placed blocks the rest for the cycle.
    StrictFIFO,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WithinQueue {
    Never,
    #[default]
    LowerPriority,
    LowerOrNewerEqualPriority,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReclaimWithinCohort {
    Never,
    LowerPriority,
    #[default]
    Any,
}

/// `borrow_within_cohort: {policy: LowerPriority, max_priority_threshold: 100}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BorrowWithinCohort {
    /// Victims must also be at or below this priority; `None`: any lower priority.
    pub max_priority_threshold: Option<i32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptionPolicy {
    pub within_queue: WithinQueue,
    pub reclaim_within_cohort: ReclaimWithinCohort,
    /// `None` is the policy `Never`.
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSpec {
    pub name: Name,
    /// `None`: directly under the implicit root cohort.
    pub cohort: Option<Name>,
    pub quotas: BTreeMap<Name, PoolQuota>,
    /// Fair-share weight for borrowing; 0 means infinite share while borrowing.
    pub weight: f64,
    pub ordering: QueueOrdering,
    pub preemption: PreemptionPolicy,
}

impl QueueSpec {
    /// A queue with no guarantees and default policies; for fixtures.
    pub fn named(name: &str) -> QueueSpec {
        QueueSpec {
            name: Name::lit(name),
            cohort: None,
            quotas: BTreeMap::new(),
            weight: 1.0,
            ordering: QueueOrdering::default(),
            preemption: PreemptionPolicy::default(),
        }
    }

    pub fn nominal(&self, pool: &str) -> Resources {
        self.quotas.iter().find(|(k, _)| k.as_str() == pool).map(|(_, q)| q.nominal.clone()).unwrap_or_default()
    }
}

/// What a queue shows of a job to a caller who is neither its owner, nor an admin of the
/// queue, nor an operator or admin (docs/security.md, "Who sees which jobs"). Those always
/// see everything; a job's private data (environment, logs) is never shown to others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Visibility {
    /// Others' jobs are listed in full, without their private data (the behaviour of
    /// clusters from before the setting, so the default).
    #[default]
    All,
    /// Others' jobs are listed with their id, name, queue, state and owner only; their
    /// events carry no message and no nodes.
    Names,
    /// Others' jobs are not shown at all: not listed, not found, no events.
    Own,
}

impl Visibility {
    pub const ALL: [Visibility; 3] = [Visibility::All, Visibility::Names, Visibility::Own];

    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::All => "all",
            Visibility::Names => "names",
            Visibility::Own => "own",
        }
    }

    pub fn parse(s: &str) -> Option<Visibility> {
        Visibility::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// How much of one job a caller sees (`State::job_view`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobView {
    /// Everything, its private data (environment, logs) included.
    Private,
    /// Everything but its private data.
    Public,
    /// Id, name, queue, state and owner.
    Names,
    /// Nothing: as if it did not exist.
    Hidden,
}
