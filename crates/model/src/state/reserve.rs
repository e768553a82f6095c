//! The scheduler's settings and starving jobs' reservations (decisions.md section 9). The
//! scheduler decides when a reservation is made or no longer admitted; the state drops it
//! itself when the job starts, is preempted for, cancelled or paused, or a node under it
//! is lost.

use super::State;
use crate::alloc::ReplicaAlloc;
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobState};
use crate::name::Name;
use crate::scheduler::{PoolReservation, SchedulerSettings};

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

    pub(crate) fn check_pool_reserve(&self, id: JobId, pool: &Name, replicas: &[ReplicaAlloc]) -> Result<(), String> {
        let job = self.d.jobs.get(&id).ok_or("unknown job")?;
        if self.d.scheduler.reserve_after_ms.is_none() {
            return Err("reservations are turned off".into());
        }
        if job.state != JobState::Pending {
            return Err(format!("job {} is {}", job.spec.name, job.state.as_str()));
        }
        if let Some(r) = self.d.pool_reservations.get(pool) {
            return Err(format!("pool {pool} already holds a reservation for {}", self.name_of(r.job)));
        }
        if self.pool_reservation_of(id).is_some() || self.d.reservations.contains_key(&id) {
            return Err(format!("job {} already holds a reservation", job.spec.name));
        }
        self.check_replicas(id, replicas)?;
        if let Some(r) = replicas.iter().find(|r| self.d.nodes.get(&r.node).is_none_or(|n| &n.spec.pool != pool)) {
            return Err(format!("node {} is not in pool {pool}", r.node));
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
