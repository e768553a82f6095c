//! Usage over time and per-user limits in a cycle (decisions.md section 12).
//!
//! - `max_per_user`: a job whose user's jobs in its queue would hold more than the limit
//!   waits with that reason; it never preempts to get under it. What this cycle placed (or
//!   reserved room for) counts at once, as `State::apply` counts it decision by decision.
//! - Order: with `usage_half_life` set, each user's and each queue's decayed usage at the
//!   cycle's time, weighted by `usage_weights`, breaks ties (`order.rs` reads them here).

use std::collections::BTreeMap;

use baton_model::alloc::ReplicaAlloc;
use baton_model::elastic::Elastic;
use baton_model::job::Job;
use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_model::usage::{AccountKey, weighted};

/// What this cycle's decisions made users hold, per (queue, user), for queues with a limit.
#[derive(Debug, Default)]
pub struct UserHeld {
    extra: BTreeMap<AccountKey, Resources>,
}

impl UserHeld {
    /// Why `job` may not start with `demand` under its user's limit, if it may not.
    pub fn block(&self, state: &State, job: &Job, demand: &Resources) -> Option<String> {
        state.usage().limit(&job.spec.queue)?;
        let key = state.usage_key(job);
        state.user_limit_block(job, demand, self.extra.get(&key))
    }

    /// The most replicas of elastic gang `job`'s task its user's limit allows now.
    pub fn elastic_size(&self, state: &State, job: &Job, e: &Elastic, growing: bool) -> Option<u32> {
        state.usage().limit(&job.spec.queue)?;
        let key = state.usage_key(job);
        state.user_limit_size(job, e, self.extra.get(&key), growing)
    }

    /// `job` was placed on (or had room reserved at) `replicas` this cycle.
    pub fn count(&mut self, state: &State, job: &Job, replicas: &[ReplicaAlloc]) {
        if state.usage().limit(&job.spec.queue).is_none() {
            return;
        }
        let held = self.extra.entry(state.usage_key(job)).or_default();
        for (k, q) in State::holding_on(job, replicas).iter() {
            held.set(k, held.get(k).saturating_add(q));
        }
    }
}

/// What a job asks at its size: each task's resources times its replicas.
pub fn demand(job: &Job) -> Resources {
    let mut out = Resources::new();
    for t in &job.spec.tasks {
        for (k, q) in t.resources.iter() {
            out.set(k, out.get(k).saturating_add(q.saturating_mul(u64::from(t.replicas))));
        }
    }
    out
}

/// Weighted decayed usage at the cycle's time, per (queue, user) and per queue; empty while
/// no half-life is set (the order then ignores usage).
#[derive(Debug, Default)]
pub struct UsageAt {
    pub by_user: BTreeMap<AccountKey, f64>,
    pub by_queue: BTreeMap<Name, f64>,
}

impl UsageAt {
    pub fn of(state: &State, now_ms: u64) -> UsageAt {
        let usage = state.usage();
        let mut out = UsageAt::default();
        if usage.settings().half_life_ms.is_none() {
            return out;
        }
        let weights = usage.settings().weights();
        for key in usage.accounts().keys() {
            let w = weighted(&usage.usage_at(key, now_ms), &weights);
            out.by_user.insert(key.clone(), w);
            *out.by_queue.entry(key.0.clone()).or_insert(0.0) += w;
        }
        out
    }

    pub fn is_on(state: &State) -> bool {
        state.usage().settings().half_life_ms.is_some()
    }

    pub fn user(&self, key: &AccountKey) -> f64 {
        self.by_user.get(key).copied().unwrap_or(0.0)
    }

    pub fn queue(&self, queue: &Name) -> f64 {
        self.by_queue.get(queue).copied().unwrap_or(0.0)
    }
}
