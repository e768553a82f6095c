//! Elastic gangs (decisions.md section 13): one task group of a job runs with as many
//! replicas as fit, from its `min_replicas` up to its `replicas`.
//!
//! The job's spec always holds the size of its current (or last) attempt, so every rule
//! that reads a spec (the gang checks, ranks, `BATON_WORLD_SIZE`) sees the attempt as it
//! runs; the [`Elastic`] record keeps the range.

use serde::{Deserialize, Serialize};

use crate::alloc::ReplicaAlloc;
use crate::error::ApplyError;
use crate::job::{JobId, JobSpec, PreemptionMode};

/// The scheduler sees a gang's replicas above its minimum as a job of their own while it
/// plans preemptions (section 13: "one candidate of their own"): that job's id is the
/// gang's with this bit set. Job ids are counters far below it; nothing with this bit is
/// ever stored.
pub const EXCESS_BIT: JobId = 1 << 63;

/// The id the scheduler gives gang `id`'s replicas above its minimum.
pub fn excess_of(id: JobId) -> JobId {
    debug_assert!(id & EXCESS_BIT == 0, "job ids stay below the excess bit");
    id | EXCESS_BIT
}

/// The gang whose excess `id` is, if it is one.
pub fn gang_of_excess(id: JobId) -> Option<JobId> {
    (id & EXCESS_BIT != 0).then_some(id & !EXCESS_BIT)
}

/// What a submit asks: task group `task` may run with `min_replicas` up to its `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElasticSpec {
    pub task: u32,
    pub min_replicas: u32,
}

/// An elastic job's range, kept beside the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elastic {
    pub task: u32,
    pub min: u32,
    /// The `replicas` it was submitted with: the size it grows back to.
    pub max: u32,
}

impl ElasticSpec {
    /// Checks the request against the job it is for; the error names the field.
    pub fn check(&self, spec: &JobSpec) -> Result<Elastic, ApplyError> {
        let Some(task) = spec.tasks.get(self.task as usize) else {
            let n = spec.tasks.len();
            return Err(ApplyError::invalid("min_replicas", format!("names task {} of a job of {n} tasks", self.task)));
        };
        if self.min_replicas == 0 {
            return Err(ApplyError::invalid("min_replicas", "must be at least 1"));
        }
        if self.min_replicas > task.replicas {
            return Err(ApplyError::invalid(
                "min_replicas",
                format!("{} is above replicas ({}) of task {}", self.min_replicas, task.replicas, task.name),
            ));
        }
        Ok(Elastic { task: self.task, min: self.min_replicas, max: task.replicas })
    }
}

impl Elastic {
    /// The replicas of the elastic task the spec holds now.
    pub fn size(&self, spec: &JobSpec) -> u32 {
        spec.tasks[self.task as usize].replicas
    }

    /// Whether `n` replicas of the elastic task is a size this job may run with.
    pub fn allows(&self, n: u32) -> bool {
        (self.min..=self.max).contains(&n)
    }

    /// The spec with the elastic task at `n` replicas.
    pub fn resized(&self, spec: &JobSpec, n: u32) -> JobSpec {
        debug_assert!(self.allows(n), "an elastic job of {}..={} resized to {n}", self.min, self.max);
        let mut s = spec.clone();
        s.tasks[self.task as usize].replicas = n;
        s
    }

    /// A placement split into what a shrink keeps (every replica of other tasks, and ranks
    /// below the minimum of the elastic task) and what it gives up (the rest).
    pub fn kept_and_excess(&self, replicas: &[ReplicaAlloc]) -> (Vec<ReplicaAlloc>, Vec<ReplicaAlloc>) {
        replicas.iter().cloned().partition(|r| r.task != self.task || r.index < self.min)
    }

    /// A gang whose replicas above its minimum may be taken alone: it runs above its
    /// minimum, and a preemption in its mode stops it and leaves it able to start again.
    /// Mode cancel ends it, and mode suspend (CPU jobs) keeps it in place, so such gangs
    /// are only ever victims whole.
    /// `behaviour`: the state's apply behaviour (`JobSpec::preemption_mode_when_preempted`).
    pub fn may_shrink(&self, spec: &JobSpec, behaviour: u32) -> bool {
        let mode = spec.preemption_mode_when_preempted(behaviour);
        self.size(spec) > self.min && !matches!(mode, PreemptionMode::Cancel | PreemptionMode::Suspend)
    }

    /// "4 of 8 replicas (minimum 2)": what `describe` and events say of a size.
    pub fn describe(&self, n: u32) -> String {
        format!("{n} of {} replicas (minimum {})", self.max, self.min)
    }
}
