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
use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_model::usage::{AccountKey, weighted};

/// What this cycle's decisions made users hold, per (queue, user), for queues with a limit,
/// and the room each user has left, computed once a cycle per user asked about (a backlog
/// asks for every job of a limited queue) and kept up to date by `count`.
#[derive(Debug, Default)]
pub struct UserHeld {
    extra: BTreeMap<AccountKey, Resources>,
    /// Per limited resource, what is left (a list: a room of 0 must stay in it).
    room: BTreeMap<Name, HashMap<String, Vec<(String, u64)>>>,
}

impl UserHeld {
    /// Why `job` may not start with `demand` under its user's limit, if it may not: the
    /// state's words (`State::user_limit_block`), asked only for a job that does not fit.
    pub fn block(&mut self, state: &State, job: &Job, demand: &Resources) -> Option<String> {
        state.usage().limit(&job.spec.queue)?;
        let user = state.user_name(job);
        let fits = |room: &Vec<(String, u64)>| room.iter().all(|(k, left)| demand.get(k) <= *left);
        let known = self.room.get(&job.spec.queue).and_then(|m| m.get(user)).map(fits);
        let fits = match known {
            Some(f) => f,
            None => {
                // Less what this cycle gave the user before anyone asked (a resumed job).
                let mut room = state.user_room(job).unwrap_or_default();
                if let Some(extra) = self.extra.get(&state.usage_key(job)) {
                    for (k, left) in &mut room {
                        *left = left.saturating_sub(extra.get(k));
                    }
                }
                let f = fits(&room);
                self.room.entry(job.spec.queue.clone()).or_default().insert(user.to_string(), room);
                f
            }
        };
        if fits {
            return None;
        }
        let extra = self.extra.get(&state.usage_key(job));
        let why = state.user_limit_block(job, demand, extra);
        debug_assert!(why.is_some(), "the room and the state's rule disagree about {}", job.spec.name);
        why
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
        let taken = State::holding_on(job, replicas);
        let held = self.extra.entry(state.usage_key(job)).or_default();
        for (k, q) in taken.iter() {
            held.set(k, held.get(k).saturating_add(q));
        }
        let room = self.room.get_mut(&job.spec.queue).and_then(|m| m.get_mut(state.user_name(job)));
        if let Some(room) = room {
            for (k, left) in room.iter_mut() {
                *left = left.saturating_sub(taken.get(k));
            }
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

    pub fn is_on(state: &State) -> bool {
        state.usage().settings().half_life_ms.is_some()
    }

    /// The queue's users' usage, for looking up each of its jobs' users.
    pub fn of_queue(&self, queue: &Name) -> Option<&HashMap<String, f64>> {
        self.by_user.get(queue)
    }

    pub fn queue(&self, queue: &Name) -> f64 {
        self.by_queue.get(queue).copied().unwrap_or(0.0)
    }
}
