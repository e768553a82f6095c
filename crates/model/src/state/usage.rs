//! Usage over time and per-user limits in the state (decisions.md section 12): which user a
//! job counts for, what it holds while it runs, and the commands that set both.
//!
//! A job holds its replicas' resources from the command that starts an attempt (or resumes
//! it in place) to the one that ends the attempt (or suspends it): the times a GPU runs its
//! work. A suspended job keeps its GPUs' memory, but it computes nothing and is charged no
//! quota, so it uses nothing either.

use std::collections::BTreeMap;

use super::State;
use crate::alloc::ReplicaAlloc;
use crate::elastic::Elastic;
use crate::error::ApplyError;
use crate::job::{Job, JobId, JobState};
use crate::name::Name;
use crate::rejection::Rejection;
use crate::resources::Resources;
use crate::usage::{AccountKey, StoredUsage, Usage, UsageSettings};

impl State {
    /// Section 12's accounts, settings and per-user limits.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// The user job `id` counts for: its owner (the token that submitted it), else the Unix
    /// user it runs as, else its queue's name (a job submitted without either, as in
    /// `baton sim` files that name no user).
    pub fn user_of(&self, id: JobId) -> String {
        self.d.jobs.get(&id).map(|j| self.user_name(j).to_string()).unwrap_or_default()
    }

    /// [`State::user_of`] without a copy, for a job the state holds.
    pub fn user_name<'a>(&'a self, job: &'a Job) -> &'a str {
        if let Some(owner) = self.access.owner(job.id) {
            return owner.as_str();
        }
        if let Some(u) = self.tenancy.run_as(job.id) {
            return u.as_str();
        }
        job.spec.queue.as_str()
    }

    pub fn usage_key(&self, job: &Job) -> AccountKey {
        (job.spec.queue.clone(), self.user_name(job).to_string())
    }

    /// What an attempt's replicas hold: each replica its task's resources.
    pub fn holding(job: &Job) -> Resources {
        Self::holding_on(job, &job.replicas)
    }

    /// What `job` would hold on `replicas`.
    pub fn holding_on(job: &Job, replicas: &[ReplicaAlloc]) -> Resources {
        let mut out = Resources::new();
        for r in replicas {
            out.add(&job.spec.tasks[r.task as usize].resources);
        }
        out
    }

    /// Whether a job in this state counts as holding what its replicas name.
    fn uses(state: JobState) -> bool {
        matches!(state, JobState::Running | JobState::Preempting)
    }

    /// Called as job `id` starts (or resumes) running on its replicas.
    pub(super) fn usage_start(&mut self, id: JobId) {
        let job = &self.d.jobs[&id];
        debug_assert!(Self::uses(job.state));
        let (key, res) = (self.usage_key(job), Self::holding(job));
        self.usage.start(key, &res, self.d.now_ms);
    }

    /// Called before job `id`'s attempt ends or is suspended: it stops holding, if it held.
    pub(super) fn usage_stop(&mut self, id: JobId) {
        let job = &self.d.jobs[&id];
        if !Self::uses(job.state) {
            return;
        }
        let (key, res) = (self.usage_key(job), Self::holding(job));
        self.usage.stop(&key, &res, self.d.now_ms);
        self.attempt_ends(id);
    }

    pub(crate) fn set_usage(&mut self, s: UsageSettings) -> Result<(), ApplyError> {
        s.validate().map_err(|e| ApplyError::invalid("usage", e))?;
        self.usage.set_settings(s, self.d.now_ms);
        Ok(())
    }

    /// `max_per_user` of `queue`; an empty limit removes it.
    pub(crate) fn set_user_limit(&mut self, queue: Name, limit: Resources) -> Result<(), ApplyError> {
        if !self.d.queues.contains_key(&queue) {
            return Err(ApplyError::unknown("queue", &queue));
        }
        self.usage.set_limit(queue, limit);
        Ok(())
    }

    /// What `key`'s jobs hold, and the room reserved for its preemptors (other than
    /// `except`) that they will hold once their victims stop: what a limit counts.
    fn held_and_reserved(&self, key: &AccountKey, except: JobId) -> Resources {
        let mut out = self.usage.held_by(key).cloned().unwrap_or_default();
        for r in self.d.reservations.values().filter(|r| r.job != except) {
            let Some(j) = self.d.jobs.get(&r.job) else { continue };
            if j.spec.queue == key.0 && self.user_name(j) == key.1 {
                out.add(&Self::holding_on(j, &r.replicas));
            }
        }
        out
    }

    /// What `job`'s user may still take in its queue under `max_per_user`, per limited
    /// resource (`None`: no limit there): the limit less what its jobs hold or have
    /// reserved (its own reservation aside). A list, not `Resources`: a room of 0 is kept.
    pub fn user_room(&self, job: &Job) -> Option<Vec<(String, u64)>> {
        let limit = self.usage.limit(&job.spec.queue)?;
        let held = self.held_and_reserved(&self.usage_key(job), job.id);
        Some(
            limit
                .iter()
                .map(|(k, max)| (k.to_string(), in_limit_units(k, max).saturating_sub(amount(&held, k))))
                .collect(),
        )
    }

    /// Why `job` may not start holding `demand` more beside what its user's jobs in its
    /// queue hold or have reserved (`extra`: what this cycle placed for them already), if
    /// it may not.
    pub fn user_limit_block(&self, job: &Job, demand: &Resources, extra: Option<&Resources>) -> Option<String> {
        let limit = self.usage.limit(&job.spec.queue)?;
        let key = self.usage_key(job);
        let held = self.held_and_reserved(&key, job.id);
        for (k, max) in limit.iter() {
            let now = amount(&held, k).saturating_add(extra.map_or(0, |e| amount(e, k)));
            let want = amount(demand, k);
            let max = in_limit_units(k, max);
            if want > 0 && now.saturating_add(want) > max {
                let q = |v: u64| match k {
                    crate::resources::GPU => crate::quantity::thousandths(v),
                    _ => crate::quantity::Human { resource: k, value: v }.to_string(),
                };
                return Some(format!(
                    "user {}'s jobs in queue {} hold {} {k} of the {} each user may hold (max_per_user); it asks {}",
                    key.1,
                    key.0,
                    q(now),
                    q(max),
                    q(want)
                ));
            }
        }
        None
    }

    /// The most replicas of its elastic task `job` may run with under its user's limit
    /// (`None`: no limit in its queue). `extra`: what this cycle placed for the user already;
    /// `own`: the gang's current attempt is replaced (growth), so its holding does not count.
    pub fn user_limit_size(&self, job: &Job, e: &Elastic, extra: Option<&Resources>, own: bool) -> Option<u32> {
        let limit = self.usage.limit(&job.spec.queue)?;
        let held = self.held_and_reserved(&self.usage_key(job), job.id);
        let mine = if own { Self::holding(job) } else { Resources::new() };
        let task = e.task as usize;
        let mut size = u32::MAX;
        for (k, max) in limit.iter() {
            let others: u64 = job
                .spec
                .tasks
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != task)
                .map(|(_, t)| amount(&t.resources, k).saturating_mul(u64::from(t.replicas)))
                .sum();
            let used =
                amount(&held, k).saturating_sub(amount(&mine, k)).saturating_add(extra.map_or(0, |x| amount(x, k)));
            let per = amount(&job.spec.tasks[task].resources, k);
            let room = in_limit_units(k, max).saturating_sub(used).saturating_sub(others);
            if let Some(n) = room.checked_div(per) {
                size = size.min(u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
        Some(size)
    }

    /// The plan checker's form of [`State::user_limit_block`]: `replicas` are where the job
    /// would run; `own` what it holds already (a growing gang's current attempt).
    pub(super) fn check_user_limit(&self, id: JobId, replicas: &[ReplicaAlloc], own: bool) -> Result<(), Rejection> {
        let job = &self.d.jobs[&id];
        if !self.usage.limits().contains_key(&job.spec.queue) {
            return Ok(());
        }
        let mut demand = Self::holding_on(job, replicas);
        if own {
            // What it holds already, GPUs with their fractions (never more than it asks).
            let held = Self::holding(job);
            demand = demand.checked_sub(&held).unwrap_or_else(|| {
                let mut d = demand.clone();
                held.iter().for_each(|(k, q)| d.set(k, d.get(k).saturating_sub(q)));
                d
            });
        }
        match self.user_limit_block(job, &demand, None) {
            Some(why) => Err(Rejection::UserLimit(why)),
            None => Ok(()),
        }
    }

    /// From a snapshot: settings, accounts and limits as stored, what runs held again.
    pub(super) fn restore_usage<E: serde::de::Error>(&mut self, stored: StoredUsage) -> Result<(), E> {
        if let Some(q) = stored.2.keys().find(|q| !self.d.queues.contains_key(*q)) {
            return Err(E::custom(format!("inconsistent state: a max_per_user for queue {q}, which does not exist")));
        }
        stored.0.validate().map_err(|e| E::custom(format!("inconsistent state: {e}")))?;
        self.usage = Usage::restore(stored, self.held_from_jobs());
        Ok(())
    }

    /// What each (queue, user) pair's running jobs hold, from the jobs.
    fn held_from_jobs(&self) -> BTreeMap<AccountKey, Resources> {
        let mut held: BTreeMap<AccountKey, Resources> = BTreeMap::new();
        for j in self.d.jobs.values().filter(|j| Self::uses(j.state)) {
            held.entry(self.usage_key(j)).or_default().add(&Self::holding(j));
        }
        held.retain(|_, r| !r.is_empty());
        held
    }

    /// Debug check: `held` kept incrementally equals what the jobs hold (debug builds run it
    /// after every command; release builds never do).
    #[cfg(debug_assertions)]
    pub(super) fn usage_consistent(&self) -> Result<(), String> {
        let rebuilt = self.held_from_jobs();
        if self.usage.held() == &rebuilt {
            return Ok(());
        }
        Err(format!("usage held incrementally {:?}, rebuilt {:?}", self.usage.held(), rebuilt))
    }
}

/// How much of `k` `r` holds as a per-user limit counts it: GPUs in thousandths, with the
/// fractions of shared GPUs (decisions.md section 11); any other resource as held.
fn amount(r: &Resources, k: &str) -> u64 {
    if k == crate::resources::GPU { r.gpus_milli() } else { r.get(k) }
}

/// A limit of `max` of `k` in `amount`'s units.
fn in_limit_units(k: &str, max: u64) -> u64 {
    if k == crate::resources::GPU { max.saturating_mul(1000) } else { max }
}
