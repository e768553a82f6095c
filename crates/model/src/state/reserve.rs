//! The scheduler's settings and starving jobs' reservations (docs/policy.md section 9). The
//! scheduler decides when a reservation is made or no longer admitted; the state drops it
//! itself when the job starts, is preempted for, cancelled or paused, or a node under it
//! is lost.

use super::State;
use crate::alloc::ReplicaAlloc;
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{Job, JobId, JobState};
use crate::ledger::{GPU_KIND, Ledger, Share, fits, min};
use crate::name::Name;
use crate::rejection::Rejection;
use crate::scheduler::{PoolReservation, SchedulerSettings};

/// Whether `job`, started at `now_ms`, may use a reservation's resources open to jobs that
/// end by `until_ms` (backfill): only a job with a time limit that ends in time.
pub fn backfills(job: &Job, now_ms: u64, until_ms: Option<u64>) -> bool {
    let Some(limit) = job.spec.time_limit_ms else { return false };
    until_ms.is_some_and(|u| now_ms.saturating_add(limit) <= u)
}

impl State {
    pub(crate) fn set_scheduler(&mut self, s: SchedulerSettings, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        s.validate().map_err(|e| ApplyError::invalid("reserve_after", e))?;
        self.d.scheduler = s;
        if s.reserve_after_ms.is_none() {
            let all: Vec<JobId> = self.d.pool_reservations.values().map(|r| r.job).collect();
            for id in all {
                self.unreserve_pool(id, "reservations are turned off (reserve_after: never)", ev);
            }
        }
        Ok(())
    }

    pub(crate) fn check_pool_reserve(
        &self,
        id: JobId,
        pool: &Name,
        replicas: &[ReplicaAlloc],
    ) -> Result<(), Rejection> {
        let job = self.d.jobs.get(&id).ok_or(Rejection::UnknownJob)?;
        if self.d.scheduler.reserve_after_ms.is_none() {
            return Err(Rejection::ReservationsOff);
        }
        if job.state != JobState::Pending {
            return Err(Rejection::WrongState { job: job.spec.name.clone(), state: job.state });
        }
        if self.held(id) {
            return Err(Rejection::NotWaiting { job: job.spec.name.clone() });
        }
        if let Some(why) = self.completing_reason(id) {
            return Err(Rejection::Completing { job: job.spec.name.clone(), why });
        }
        if let Some(r) = self.d.pool_reservations.get(pool) {
            return Err(Rejection::PoolAlreadyReserved { pool: pool.clone(), holder: self.name_of(r.job) });
        }
        if self.pool_reservation_of(id).is_some() || self.d.reservations.contains_key(&id) {
            return Err(Rejection::AlreadyReserved { job: job.spec.name.clone() });
        }
        self.check_replicas(id, replicas)?;
        // A reservation holds its nodes until the job starts, however long that takes: never
        // on a node whose window is ahead, whatever the job's time limit.
        for r in replicas {
            if let Some(w) = self.windows().values().find(|w| !w.active && w.holds(&r.node)) {
                return Err(Rejection::MaintenanceAhead { node: r.node.clone(), window: w.spec.name.clone() });
            }
        }
        if let Some(r) = replicas.iter().find(|r| self.d.nodes.get(&r.node).is_none_or(|n| &n.spec.pool != pool)) {
            return Err(Rejection::NodeNotInPool { node: r.node.clone(), pool: pool.clone() });
        }
        Ok(())
    }

    pub(crate) fn reserve_pool(
        &mut self,
        id: JobId,
        pool: Name,
        replicas: Vec<ReplicaAlloc>,
        waits_for: Vec<JobId>,
        ev: &mut Vec<Event>,
    ) {
        let mut nodes: Vec<&Name> = replicas.iter().map(|r| &r.node).collect();
        nodes.dedup();
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.to_string()).collect();
        let message =
            format!("reserved {} in pool {pool}; waits for {} running jobs", nodes.join(", "), waits_for.len());
        let r = PoolReservation { job: id, pool: pool.clone(), replicas, waits_for, created_ms: self.d.now_ms };
        self.d.pool_reservations.insert(pool, r);
        self.job_event(id, EventKind::Reserved, message, ev);
    }

    /// Drops the job's pool reservation, if it has one, saying why in an event.
    pub(crate) fn unreserve_pool(&mut self, id: JobId, why: &str, ev: &mut Vec<Event>) {
        if self.drop_pool_reservation(id) {
            self.job_event(id, EventKind::Unreserved, format!("reservation dropped: {why}"), ev);
        }
    }

    /// Drops the job's pool reservation without an event (it starts, or it ends).
    pub(crate) fn drop_pool_reservation(&mut self, id: JobId) -> bool {
        let before = self.d.pool_reservations.len();
        self.d.pool_reservations.retain(|_, r| r.job != id);
        before != self.d.pool_reservations.len()
    }

    /// Pool reservations on `node` are dropped (their jobs re-plan).
    pub(crate) fn unreserve_pools_on(&mut self, node: &Name, ev: &mut Vec<Event>) {
        let touching: Vec<JobId> = self
            .d
            .pool_reservations
            .values()
            .filter(|r| r.replicas.iter().any(|x| &x.node == node))
            .map(|r| r.job)
            .collect();
        for id in touching {
            self.unreserve_pool(id, &format!("node {node} is no longer schedulable"), ev);
        }
    }
}

impl State {
    /// Until when reservation `r` is open to backfill, judged on `ledger` (the state's, or a
    /// scheduler's working copy): the latest end by time limit of the jobs in its way;
    /// `None` (nothing backfills) when one of them has no time limit or none is in the way.
    pub fn backfill_until(&self, ledger: &Ledger, r: &PoolReservation) -> Option<u64> {
        let holder = self.d.jobs.get(&r.job)?;
        let shares = self.shares(holder, &r.replicas);
        let ends: Option<Vec<u64>> =
            ledger.reservation_occupants(r.job, &shares).iter().map(|o| self.d.jobs[o].time_limit_at()).collect();
        ends?.into_iter().max()
    }

    /// Policy section 9, as the scheduler plans it: while a starving job holds a reservation,
    /// no other job of its queue starts and no job starts on what is reserved (its GPUs, and
    /// the part of its other resources free now), except one that ends in time; a preemption
    /// never does. A preemptor whose room is already held for it is not stopped here: that
    /// room was its own first.
    pub fn check_reservations(&self, id: JobId, shares: &[Share], victims: &[JobId]) -> Result<(), Rejection> {
        let preempting = !victims.is_empty();
        if self.d.reservations.contains_key(&id) {
            return Ok(());
        }
        let job = &self.d.jobs[&id];
        for r in self.d.pool_reservations.values().filter(|r| r.job != id) {
            let Some(holder) = self.d.jobs.get(&r.job) else { continue };
            // A reserving job is held back by no other reservation of its queue: only one is
            // made at a time, and it is not the one waiting.
            let same_queue = holder.spec.queue == job.spec.queue && self.pool_reservation_of(id).is_none();
            if !same_queue && !self.takes_reserved(shares, &self.shares(holder, &r.replicas), victims) {
                continue;
            }
            if !preempting && backfills(job, self.d.now_ms, self.backfill_until(&self.ledger, r)) {
                continue;
            }
            return Err(Rejection::TakesReserved {
                holder: holder.spec.name.clone(),
                pool: r.pool.clone(),
                queue: job.spec.queue.clone(),
                same_queue,
                preempting,
            });
        }
        Ok(())
    }

    /// Would `shares` (once `victims` are gone) use reserved GPUs, or leave a reserved node
    /// without the part of the other reserved resources that is free there now?
    fn takes_reserved(&self, shares: &[Share], reserved: &[Share], victims: &[JobId]) -> bool {
        shares.iter().any(|Share { node: n, amount, gpus, fractions }| {
            let gpus = gpus | fractions.mask();
            reserved.iter().filter(|r| r.node == *n).any(|r| {
                let (want, want_gpus) = (&r.amount, r.gpus | r.fractions.mask());
                let node = &self.ledger.nodes[*n];
                let mut held = min(want, &node.free);
                held[GPU_KIND] = 0;
                let mut left = node.free_for(None, victims).0;
                crate::ledger::sub(&mut left, &held);
                let mut rest = *amount;
                rest[GPU_KIND] = 0;
                gpus & want_gpus != 0 || !fits(&rest, &left)
            })
        })
    }
}
