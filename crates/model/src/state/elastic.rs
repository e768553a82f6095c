//! Elastic gangs in the state (decisions.md section 13): the range of each elastic job, its
//! size set by each placement, and growth (`Decision::Grow`): the job is stopped as in mode
//! checkpoint and, in the command that completes its stop, starts again on the larger
//! placement the decision named (its own resources among them, so no other job can take
//! them meanwhile: they stay its own until it has stopped). If that placement no longer
//! fits then, it waits in the queue like any job.

use std::collections::BTreeMap;

use super::State;
use crate::after::After;
use crate::alloc::ReplicaAlloc;
use crate::command::Outcome;
use crate::elastic::{Elastic, ElasticSpec};
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobSpec, JobState, PreemptionMode, StopWhy};
use crate::rejection::Rejection;
use crate::tenancy::UnixUser;

/// The elastic jobs' ranges, by job.
pub type ElasticGangs = BTreeMap<JobId, Elastic>;

/// Gangs stopping to grow or to shrink: where each starts again as its stop completes.
pub type Restarts = BTreeMap<JobId, Vec<ReplicaAlloc>>;

impl State {
    /// The range of elastic job `id`, if it is one.
    pub fn elastic(&self, id: JobId) -> Option<&Elastic> {
        self.elastic.get(&id)
    }

    /// Where gang `id`, stopping to grow or shrink, starts again once stopped.
    pub fn restart_of(&self, id: JobId) -> Option<&[ReplicaAlloc]> {
        self.restarts.get(&id).map(|r| r.as_slice())
    }

    /// Every elastic job kept, in id order.
    pub fn elastic_gangs(&self) -> &ElasticGangs {
        &self.elastic
    }

    /// `Op::SubmitElastic`: a submit (with dependencies, as `SubmitAfter`) whose task group
    /// `elastic.task` may run with fewer replicas, down to `elastic.min_replicas`.
    pub(crate) fn submit_elastic(
        &mut self,
        spec: JobSpec,
        elastic: ElasticSpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
        after: Vec<After>,
        ev: &mut Vec<Event>,
    ) -> Result<Outcome, ApplyError> {
        let range = elastic.check(&spec)?;
        // Whether the cluster could ever hold it is judged at its minimum: a gang too big for
        // any node at its top size (topology node) may still run smaller. Its spec keeps the
        // size asked for until it starts.
        let outcome = self.submit_after(range.resized(&spec, range.min), request_id, run_as, after, ev)?;
        if let Outcome::Submitted { job, duplicate: false, .. } = &outcome {
            self.elastic.insert(*job, range);
            let j = self.d.jobs.get_mut(job).expect("just submitted");
            j.spec.tasks[range.task as usize].replicas = range.max;
        }
        Ok(outcome)
    }

    /// How many replicas of its elastic task a placement of `id` must cover: as many as it
    /// carries, when that is a size the job may run with. `None`: the job is not elastic.
    pub(super) fn elastic_size_of(&self, id: JobId, replicas: &[ReplicaAlloc]) -> Option<Result<u32, Rejection>> {
        let e = self.elastic.get(&id)?;
        let n = replicas.iter().filter(|r| r.task == e.task).count() as u32;
        Some(if e.allows(n) { Ok(n) } else { Err(Rejection::ElasticSize { got: n, min: e.min, max: e.max }) })
    }

    /// An elastic job starts with the replicas it was placed on: its spec takes that size.
    /// Says so when the size changed since its last attempt.
    pub(super) fn take_placed_size(&mut self, id: JobId, ev: &mut Vec<Event>) {
        let Some(e) = self.elastic.get(&id).copied() else { return };
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        let n = job.replicas.iter().filter(|r| r.task == e.task).count() as u32;
        let (was, first) = (e.size(&job.spec), job.attempt == 1);
        job.spec.tasks[e.task as usize].replicas = n;
        if was != n {
            let message = if first {
                format!("started with {}", e.describe(n))
            } else {
                format!("resized from {was} to {}", e.describe(n))
            };
            self.job_event(id, EventKind::Resized { from: was, to: n }, message, ev);
        }
    }

    /// A running elastic job below its `replicas`, past its minimum runtime, that a stop
    /// would not end, may grow onto `replicas`: more of its elastic task than it runs with,
    /// fitting with its own resources counted free, within its queue's quota.
    pub(super) fn check_grow(&mut self, id: JobId, attempt: u32, replicas: &[ReplicaAlloc]) -> Result<(), Rejection> {
        self.check_may_grow(id, attempt)?;
        let job = &self.d.jobs[&id];
        let e = self.elastic[&id];
        let n = replicas.iter().filter(|r| r.task == e.task).count() as u32;
        if n <= e.size(&job.spec) {
            return Err(Rejection::ElasticSize { got: n, min: e.size(&job.spec) + 1, max: e.max });
        }
        let shares = self.check_replicas(id, replicas)?;
        self.check_fit(id, &shares, &[id])?;
        self.check_reservations(id, &shares, &[])?;
        let (q, np) = self.queue_and_np(job);
        let demand = super::demand_of(&self.ledger, &shares);
        let verdict = self.ledger.without([id], |l| l.check_admission(q, &demand, np));
        verdict.map_err(|b| Rejection::Quota(b.describe(&self.ledger, q)))?;
        self.check_user_limit(id, replicas, true)?;
        Ok(())
    }

    fn check_may_grow(&self, id: JobId, attempt: u32) -> Result<(), Rejection> {
        let job = self.d.jobs.get(&id).ok_or(Rejection::UnknownJob)?;
        let name = job.spec.name.clone();
        if job.state != JobState::Running || job.attempt != attempt {
            return Err(Rejection::WrongAttempt { job: name, state: job.state, attempt: job.attempt });
        }
        let Some(e) = self.elastic.get(&id) else {
            return Err(Rejection::NotElastic { job: name });
        };
        if e.size(&job.spec) >= e.max {
            return Err(Rejection::NotElastic { job: name });
        }
        if job.spec.preemption_mode == PreemptionMode::Cancel {
            return Err(Rejection::NotElastic { job: name });
        }
        if self.d.now_ms < job.started_ms.saturating_add(job.spec.min_runtime_ms) {
            return Err(Rejection::VictimInMinRuntime { job: name });
        }
        Ok(())
    }

    /// Running -> Preempting to grow: stopped as in mode checkpoint (mode requeue: without
    /// keeping a checkpoint), then started on `replicas` (`grown_stopped`).
    pub(super) fn grow(&mut self, id: JobId, replicas: Vec<ReplicaAlloc>, ev: &mut Vec<Event>) {
        self.begin_stop(id, StopWhy::Grow);
        self.restarts.insert(id, replicas);
        let e = self.elastic[&id];
        let size = e.describe(e.size(&self.d.jobs[&id].spec));
        self.set_reason(id, format!("growing: stopping to start again with more than {size}"));
        self.job_event(id, EventKind::Growing, format!("more replicas fit than its {size}: stopping to grow"), ev);
    }

    /// A job stopped to grow starts again at once where its `Grow` named, from its
    /// checkpoint unless its mode is requeue; if that no longer fits, it waits in the queue.
    pub(super) fn grown_stopped(&mut self, id: JobId, checkpointed: bool, ev: &mut Vec<Event>) {
        let target = self.restarts.remove(&id);
        let keep = self.d.jobs[&id].spec.preemption_mode != PreemptionMode::Requeue;
        if keep {
            self.mark_checkpoint(id, checkpointed);
        }
        let saved = if checkpointed { "with a checkpoint" } else { "without a checkpoint" };
        self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
        self.requeue(id, keep, "stopped to grow; waiting to be placed with as many replicas as fit".into());
        if let Some(replicas) = target {
            self.start_again(id, replicas, "grow", ev);
        }
    }

    /// A gang stopped to grow or shrink starts its next attempt at once on `replicas`, if
    /// that placement still holds (`check_place`); else it waits in the queue, saying so.
    pub(super) fn start_again(&mut self, id: JobId, replicas: Vec<ReplicaAlloc>, to: &str, ev: &mut Vec<Event>) {
        let attempt = self.d.jobs[&id].attempt + 1;
        match self.check_place(id, attempt, &replicas) {
            Ok(()) => self.start_job(id, attempt, replicas, ev),
            Err(why) => {
                let reason =
                    format!("stopped to {to}, but where it was to start again no longer holds ({why}); waiting");
                self.job_event(id, EventKind::Requeued, reason.clone(), ev);
                self.set_reason(id, reason);
            }
        }
    }

    /// The replicas a gang keeps when its replicas above its minimum are taken by a
    /// preemption: it starts again on them once stopped (`victim_stopped`).
    pub(super) fn shrink_to_minimum(&mut self, id: JobId) {
        let e = self.elastic[&id];
        let (kept, _) = e.kept_and_excess(&self.d.jobs[&id].replicas);
        self.restarts.insert(id, kept);
    }

    /// Every gang to start again is an elastic job being stopped (to grow, or preempted).
    pub(super) fn restore_restarts<E: serde::de::Error>(&mut self, restarts: Restarts) -> Result<(), E> {
        for id in restarts.keys() {
            let stopping = self.d.jobs.get(id).and_then(|j| j.stopping).map(|s| s.why);
            let why_ok = matches!(stopping, Some(StopWhy::Grow | StopWhy::Preempted { .. }));
            if !why_ok || !self.elastic.contains_key(id) {
                return Err(E::custom(format!("inconsistent state: job {id} is to start again, but is not stopping")));
            }
        }
        self.restarts = restarts;
        Ok(())
    }

    /// Every elastic record is a kept job's, within its range.
    pub(super) fn restore_elastic<E: serde::de::Error>(&mut self, gangs: ElasticGangs) -> Result<(), E> {
        for (id, e) in &gangs {
            let Some(job) = self.d.jobs.get(id) else {
                return Err(E::custom(format!("inconsistent state: elastic job {id}, which is not kept")));
            };
            let fits = job.spec.tasks.get(e.task as usize).is_some_and(|t| e.allows(t.replicas));
            if !fits || e.min == 0 {
                return Err(E::custom(format!("inconsistent state: elastic job {id} outside its range")));
            }
        }
        self.elastic = gangs;
        Ok(())
    }
}
