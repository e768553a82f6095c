//! Usage over time and per-user limits in a cycle (decisions.md section 12).
//!
//! - `max_per_user`: a job whose user's jobs in its queue would hold more than the limit
//!   waits with that reason; it never preempts to get under it. What this cycle placed (or
//!   reserved room for) counts at once, as `State::apply` counts it decision by decision.
//! - Order: with `usage_half_life` set, each user's and each queue's decayed usage at the
//!   cycle's time, weighted by `usage_weights`, breaks ties (`order.rs` reads them here).

use std::collections::{BTreeMap, HashMap};

use baton_model::alloc::ReplicaAlloc;
use baton_model::elastic::Elastic;
use baton_model::job::Job;
use baton_model::ledger::{FxMap, Kinds, Ledger, Vector, ZERO};
use baton_model::limits::MAX_RESOURCE_KINDS;
use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_model::usage::{AccountKey, weighted};

use crate::needs::Needs;

/// What this cycle's decisions made users hold, per (queue, user), for queues with a limit,
/// and the room each user has left per resource kind, computed once a cycle per user asked
/// about (a backlog asks for every job of a limited queue) and kept up to date by `count`.
/// Queues go by their ledger index and users by name in a hash map: names compared in
/// natural order, for every job, cost more than the rest of the check.
#[derive(Debug, Default)]
pub struct UserHeld {
    extra: BTreeMap<AccountKey, Resources>,
    /// By queue index, once asked: each queue's limit per kind (`u64::MAX`: none), `None`
    /// for a queue without one.
    limits: Option<Vec<Option<Vector>>>,
    /// By queue index: each asked user's room per kind.
    room: Vec<FxMap<String, Vector>>,
}

impl UserHeld {
    fn limit_of(&mut self, state: &State, ledger: &Ledger, q: usize) -> Option<&Vector> {
        let limits = self.limits.get_or_insert_with(|| {
            let of = |name: &Name| {
                let limit = state.usage().limit(name)?;
                let mut v = [u64::MAX; MAX_RESOURCE_KINDS];
                for (k, max) in limit.iter() {
                    // A kind no node has: no job placed here can hold it.
                    if let Some(i) = ledger.kinds.index(k) {
                        v[i] = Kinds::in_ledger_units(i, max);
                    }
                }
                Some(v)
            };
            ledger.queues.iter().map(|acct| of(&acct.name)).collect()
        });
        limits.get(q).and_then(Option::as_ref)
    }

    /// Why `job` (of queue index `q`) may not start with `demand` (per kind) under its
    /// user's limit, if it may not: the state's words (`State::user_limit_block`), asked
    /// only for a job that does not fit.
    pub fn block(&mut self, state: &State, ledger: &Ledger, job: &Job, q: usize, demand: &Vector) -> Option<String> {
        self.limit_of(state, ledger, q)?;
        if self.room.len() <= q {
            self.room.resize_with(ledger.queues.len().max(q + 1), FxMap::default);
        }
        let user = state.user_name(job);
        let room = match self.room[q].get(user) {
            Some(room) => *room,
            None => {
                let room = self.room_of(state, ledger, job);
                self.room[q].insert(user.to_string(), room);
                room
            }
        };
        if (0..MAX_RESOURCE_KINDS).all(|k| demand[k] <= room[k]) {
            return None;
        }
        let extra = self.extra.get(&state.usage_key(job));
        let why = state.user_limit_block(job, &ledger.kinds.resources(demand), extra);
        debug_assert!(why.is_some(), "the room and the state's rule disagree about {}", job.spec.name);
        why
    }

    /// The limit less what the user's jobs hold, have reserved, and were given this cycle.
    fn room_of(&self, state: &State, ledger: &Ledger, job: &Job) -> Vector {
        let mut room = [u64::MAX; MAX_RESOURCE_KINDS];
        // In the ledger's units already (GPUs in thousandths).
        for (k, left) in state.user_room(job).unwrap_or_default() {
            if let Some(i) = ledger.kinds.index(&k) {
                room[i] = left;
            }
        }
        if let Some(extra) = self.extra.get(&state.usage_key(job)) {
            let v = ledger.kinds.vector_lossy(extra);
            (0..MAX_RESOURCE_KINDS).for_each(|k| room[k] = room[k].saturating_sub(v[k]));
        }
        room
    }

    /// The most replicas of elastic gang `job`'s task its user's limit allows now.
    pub fn elastic_size(&self, state: &State, job: &Job, e: &Elastic, growing: bool) -> Option<u32> {
        state.usage().limit(&job.spec.queue)?;
        let key = state.usage_key(job);
        state.user_limit_size(job, e, self.extra.get(&key), growing)
    }

    /// `job` (of queue index `q`) was placed on (or had room reserved at) `replicas`.
    pub fn count(&mut self, state: &State, ledger: &Ledger, job: &Job, q: usize, replicas: &[ReplicaAlloc]) {
        if self.limit_of(state, ledger, q).is_none() {
            return;
        }
        let taken = State::holding_on(job, replicas);
        self.extra.entry(state.usage_key(job)).or_default().add(&taken);
        if let Some(room) = self.room.get_mut(q).and_then(|m| m.get_mut(state.user_name(job))) {
            let v = ledger.kinds.vector_lossy(&taken);
            (0..MAX_RESOURCE_KINDS).for_each(|k| room[k] = room[k].saturating_sub(v[k]));
        }
    }
}

/// What a job asks with `needs`, per kind: each task's need times its replicas.
pub fn demand(needs: &Needs) -> Vector {
    let mut out = ZERO;
    for t in &needs.tasks {
        for k in 0..MAX_RESOURCE_KINDS {
            out[k] = out[k].saturating_add(t.need[k].saturating_mul(u64::from(t.replicas)));
        }
    }
    out
}

/// Weighted decayed usage at the cycle's time, per queue and user within it, and per queue;
/// empty while no half-life is set (the order then ignores usage). Keyed by borrowed names:
/// the order looks up every pending job's user, and a key built per job (two strings) cost
/// more than the lookup.
#[derive(Debug, Default)]
pub struct UsageAt {
    pub by_user: BTreeMap<Name, HashMap<String, f64>>,
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
            out.by_user.entry(key.0.clone()).or_default().insert(key.1.clone(), w);
            *out.by_queue.entry(key.0.clone()).or_insert(0.0) += w;
        }
        out
    }

    /// The queue's users' usage, for looking up each of its jobs' users.
    pub fn of_queue(&self, queue: &Name) -> Option<&HashMap<String, f64>> {
        self.by_user.get(queue)
    }

    pub fn queue(&self, queue: &Name) -> f64 {
        self.by_queue.get(queue).copied().unwrap_or(0.0)
    }
}
