//! Every job transition, each keeping the ledger in step:
//!
//! ```text
//! Pending --place--> Running --exit--> Succeeded | Failed
//!    ^                  |  \--cancel--> Cancelled
//!    |               preempt / pause
//!    |                  v
//!    +----stopped--- Preempting --stopped--> Suspended --resume--> Running
//!    |  (checkpoint,    |  \--stopped (pause)--> Paused --unpause--> Pending
//!    |   requeue)       \--stopped (cancel)--> Cancelled
//! ```
//!
//! As an attempt ends, its ranks not yet reported gone stay completing, holding their
//! shares, whatever state the job moved to (`completing.rs`).

use std::collections::BTreeMap;

use super::State;
use crate::alloc::{Lend, ReplicaAlloc, mask_to_gpus};
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobState, PreemptionMode, StopWhy, Stopping};
use crate::limits::MAX_EVENTS_PER_JOB;
use crate::name::Name;

/// The reason a job stopped at its time limit gives (docs/policy.md section 9's words).
pub const TIME_LIMIT: &str = "time limit";

pub(crate) fn clip(s: String) -> String {
    crate::event::clip_message(s)
}

impl State {
    /// Records an event in the job's bounded history and in this apply's events.
    pub(crate) fn job_event(&mut self, id: JobId, kind: EventKind, message: String, ev: &mut Vec<Event>) {
        let now = self.d.now_ms;
        let message = self.by_actor(message);
        let Some(job) = self.d.jobs.get_mut(&id) else {
            return;
        };
        let e = Event {
            at_ms: now,
            job: Some(job.spec.name.clone()),
            job_id: None,
            node: None,
            kind,
            message: clip(message),
        };
        let events = std::sync::Arc::make_mut(&mut job.events);
        if events.len() >= MAX_EVENTS_PER_JOB {
            events.pop_front();
        }
        events.push_back(e.clone());
        ev.push(Event { job_id: Some(id), ..e });
    }

    fn known(&self, id: JobId) -> Result<(), ApplyError> {
        if self.d.jobs.contains_key(&id) { Ok(()) } else { Err(ApplyError::unknown("job", id)) }
    }

    pub(super) fn wrong_state(&self, id: JobId, action: &str) -> ApplyError {
        let j = &self.d.jobs[&id];
        ApplyError::WrongState {
            job: j.spec.name.to_string(),
            state: j.state.as_str().to_string(),
            action: action.to_string(),
        }
    }

    pub(super) fn check_attempt(&self, id: JobId, attempt: u32) -> Result<(), ApplyError> {
        let job = self.d.jobs.get(&id).ok_or_else(|| ApplyError::unknown("job", id))?;
        if job.attempt != attempt {
            return Err(ApplyError::StaleAttempt { job: id, attempt, current: job.attempt });
        }
        Ok(())
    }

    /// Starts the next attempt. The caller has checked that it fits.
    pub(crate) fn start_job(&mut self, id: JobId, attempt: u32, replicas: Vec<ReplicaAlloc>, ev: &mut Vec<Event>) {
        // A preemptor's reservation becomes its occupancy (the ledger gives it up in `place`).
        self.d.reservations.remove(&id);
        self.drop_pool_reservation(id);
        self.keep_placement_while_waiting(id);
        let job = &self.d.jobs[&id];
        let shares = self.shares(job, &replicas);
        let (q, np) = self.queue_and_np(job);
        let suspends = self.suspends(job);
        self.ledger.place(id, q, np, suspends, &shares);
        let nodes: Vec<usize> = shares.iter().map(|s| s.node).collect();
        let lent_from = self
            .ledger
            .lent_to(id, &nodes)
            .into_iter()
            .map(|(n, from, amount, gpus)| Lend {
                from,
                node: self.ledger.nodes[n].name.clone(),
                resources: self.ledger.kinds.resources(&amount),
                gpus: mask_to_gpus(gpus),
            })
            .collect();
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        let first = job.attempt == 0;
        job.state = JobState::Running;
        job.attempt = attempt;
        job.replicas = replicas;
        job.lent_from = lent_from;
        job.started_ms = now;
        job.progress_mark_ms = now;
        job.preempted_by = None;
        job.ended_ranks.clear();
        job.reason.clear();
        let nodes = job.nodes();
        let message = if job.has_checkpoint {
            format!("attempt {attempt} started, resuming from its checkpoint")
        } else {
            format!("attempt {attempt} started")
        };
        self.job_event(id, EventKind::Started { attempt, nodes }, message, ev);
        self.take_placed_size(id, ev);
        self.usage_start(id);
        self.note_changed(id);
        self.array_element_started(id, first);
    }

    /// Running -> Preempting: the agent will signal it and report when it stopped.
    pub(crate) fn begin_stop(&mut self, id: JobId, why: StopWhy) {
        self.mark_stopping(id, why);
        self.ledger.begin_stop(id);
    }

    /// `begin_stop` without the ledger's part, for a caller whose ledger change covers it
    /// (a preemption: `Ledger::preempt`).
    pub(crate) fn mark_stopping(&mut self, id: JobId, why: StopWhy) {
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Preempting;
        job.stopping = Some(Stopping { why, requested_ms: now, deadline_ms: now.saturating_add(job.spec.grace_ms) });
    }

    /// The job's attempt has ended: it no longer holds anything, except the share of each
    /// rank not yet reported gone, which stays held until it is (`completing.rs`). A victim
    /// that is completing still stands between its preemptor and the reserved resources.
    fn release(&mut self, id: JobId) {
        self.usage_stop(id);
        self.remember_placement(id);
        // A requeued job may be completing already (and be cancelled now): it keeps that.
        let completing = self.begin_completing(id) || self.completing(id).is_some();
        if !completing {
            self.forget_victim(id);
        }
        let lends = self.ledger.lent_by_to_running(id);
        let passed = self.passed_on(id, &lends);
        self.ledger.vacate(id);
        if completing {
            self.charge_completing(id);
        }
        self.keep_lends(id, &lends);
        // A gang stopping to grow that ends otherwise (a lost node, a cancel) grows no more.
        self.restarts.remove(&id);
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        job.replicas.clear();
        job.stopping = None;
        job.suspended_for = None;
        job.ended_ranks.clear();
        if self.d.reservations.contains_key(&id) {
            self.drop_reservation(id);
        }
        self.keep_borrowed(id);
        self.pass_on(id, passed);
    }

    /// `id` no longer holds what jobs suspended for it lent it: they are free to resume in
    /// place, and will not lend to it again if it is placed later.
    pub(super) fn release_suspended_for(&mut self, id: JobId) {
        let Some(job) = self.d.jobs.get_mut(&id) else { return };
        for v in std::mem::take(&mut job.suspended_victims) {
            if let Some(victim) = self.d.jobs.get_mut(&v).filter(|j| j.suspended_for == Some(id)) {
                victim.suspended_for = None;
            }
        }
    }

    /// A victim has stopped (or gone): it no longer stands between its preemptor and the
    /// resources reserved for it, even if it is placed again later.
    pub(super) fn forget_victim(&mut self, id: JobId) {
        let preemptors: Vec<JobId> =
            self.d.reservations.values().filter(|r| r.victims.contains(&id)).map(|r| r.job).collect();
        for p in preemptors {
            if let Some(r) = self.d.reservations.get_mut(&p) {
                r.victims.retain(|&v| v != id);
            }
            self.ledger.forget_victim(p, id);
        }
    }

    /// Forgets a preemptor's reservation; shares lent to it go back to their holders.
    pub(crate) fn drop_reservation(&mut self, id: JobId) {
        if self.d.reservations.remove(&id).is_some() {
            self.ledger.unreserve(id, false);
            self.release_suspended_for(id);
        }
    }

    pub(super) fn finish(&mut self, id: JobId, state: JobState, exit_code: Option<i32>) {
        self.release(id);
        self.drop_pool_reservation(id);
        let now = self.d.now_ms;
        self.forget_placement(id);
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        let (was_finished, started) = (job.state.is_finished(), job.attempt > 0);
        if !was_finished {
            self.ledger.unfinished.remove(&job.spec.queue, self.access.owners.get(&id));
        }
        job.state = state;
        job.exit_code = exit_code;
        job.finished_ms = Some(now);
        job.reason.clear();
        self.d.finished_order.push_back(id);
        self.forget_waits(id);
        self.note_changed(id);
        if !was_finished {
            self.array_element_ended(id, state, started);
        }
        self.prune_finished();
    }

    /// Forgets the oldest finished jobs beyond the retention, except completing ones (their
    /// ranks still hold a share of a node; they go once done, at the next prune).
    pub(super) fn prune_finished(&mut self) {
        let mut keep = Vec::new();
        while self.d.finished_order.len() > self.d.retain_finished {
            let Some(old) = self.d.finished_order.pop_front() else {
                break;
            };
            // Completing ranks hold a share of a node; a job waited for settles its waiters
            // at the end of the command that ended it.
            if self.after.completing.contains_key(&old) || self.wait_index.is_waited_for(old) {
                keep.push(old);
                continue;
            }
            self.access.owners.remove(&old);
            self.tenancy.run_as.remove(&old);
            self.forget_element(old);
            self.elastic.remove(&old);
            self.rank_saves.remove(&old);
            if let Some(j) = self.d.jobs.remove(&old)
                && self.d.job_names.get(&j.spec.name) == Some(&old)
            {
                self.d.job_names.remove(&j.spec.name);
            }
        }
        for id in keep.into_iter().rev() {
            self.d.finished_order.push_front(id);
        }
    }

    /// Back to the queue. `keep_checkpoint`: resume from the last checkpoint next time.
    pub(super) fn requeue(&mut self, id: JobId, keep_checkpoint: bool, reason: String) {
        self.release(id);
        // The attempt is over: its ranks' saves count for nothing now.
        self.rank_saves.remove(&id);
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        job.state = JobState::Pending;
        job.pending_since_ms = now;
        if !keep_checkpoint {
            job.has_checkpoint = false;
        }
        job.reason = reason;
    }

    /// A running job whose process is gone goes back to the queue, from its last checkpoint.
    pub(crate) fn requeue_running(&mut self, id: JobId, why: String, ev: &mut Vec<Event>) {
        self.requeue(id, true, clip(format!("{why}; waiting to be placed again")));
        self.job_event(id, EventKind::Requeued, clip(format!("{why}; back in the queue")), ev);
    }

    pub(crate) fn exited(&mut self, id: JobId, attempt: u32, code: i32, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        self.check_attempt(id, attempt)?;
        self.check_active(id, "exiting")?;
        if code == 0 {
            self.finish(id, JobState::Succeeded, Some(0));
            self.job_event(id, EventKind::Succeeded, "exited 0".into(), ev);
            Ok(())
        } else {
            self.failed_with(id, attempt, code, format!("exited with code {code}"), ev)
        }
    }

    /// Refuses `action` on a job that is no longer active (pending, running, stopping or
    /// suspended), naming its state.
    pub(super) fn check_active(&self, id: JobId, action: &str) -> Result<(), ApplyError> {
        if self.d.jobs[&id].state.is_active() { Ok(()) } else { Err(self.wrong_state(id, action)) }
    }

    /// The stop a job is being stopped for; refused unless it is Preempting with one.
    pub(super) fn check_stopping(&self, id: JobId) -> Result<Stopping, ApplyError> {
        let job = &self.d.jobs[&id];
        match (job.state, job.stopping) {
            (JobState::Preempting, Some(stopping)) => Ok(stopping),
            _ => Err(self.wrong_state(id, "stopping")),
        }
    }

    /// Ends an active job Failed with `code`, its event saying `why`.
    pub(crate) fn failed_with(
        &mut self,
        id: JobId,
        attempt: u32,
        code: i32,
        why: String,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        self.check_attempt(id, attempt)?;
        self.check_active(id, "failing")?;
        self.finish(id, JobState::Failed, Some(code));
        self.job_event(id, EventKind::Failed { exit_code: code }, why, ev);
        Ok(())
    }

    pub(crate) fn checkpointed(&mut self, id: JobId, attempt: u32) -> Result<(), ApplyError> {
        self.check_attempt(id, attempt)?;
        self.check_active(id, "checkpointing")?;
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        job.has_checkpoint = true;
        job.progress_mark_ms = now;
        Ok(())
    }

    /// An agent stopped a Preempting job (or suspended it, mode suspend).
    pub(crate) fn stopped(
        &mut self,
        id: JobId,
        attempt: u32,
        checkpointed: bool,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        self.check_attempt(id, attempt)?;
        let stopping = self.check_stopping(id)?;
        let saved = if checkpointed { "with a checkpoint" } else { "without a checkpoint" };
        match stopping.why {
            StopWhy::Paused => {
                self.mark_checkpoint(id, checkpointed);
                self.release(id);
                self.d.jobs.get_mut(&id).expect("job").state = JobState::Paused;
                self.set_reason(id, "paused by a person; `baton resume` puts it back in the queue".into());
                self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
                self.job_event(id, EventKind::Paused, "paused".into(), ev);
            }
            StopWhy::Preempted { by, mode } => self.victim_stopped(id, by, mode, checkpointed, ev),
            StopWhy::TimeLimit => {
                self.mark_checkpoint(id, checkpointed);
                self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
                self.time_out(id, ev);
            }
            StopWhy::Maintenance => {
                self.mark_checkpoint(id, checkpointed);
                let reason = self.maintenance_reason(id);
                self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
                self.requeue(id, true, reason);
                self.job_event(id, EventKind::Requeued, "back in the queue after a maintenance stop".into(), ev);
            }
            StopWhy::GpuFault => {
                self.mark_checkpoint(id, checkpointed);
                let reason = self.gpu_fault_reason(id);
                self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
                self.requeue(id, true, reason);
                self.job_event(id, EventKind::Requeued, "back in the queue after its GPU failed".into(), ev);
            }
            StopWhy::Grow => self.grown_stopped(id, checkpointed, ev),
        }
        Ok(())
    }

    /// Running -> Preempting at its time limit: the agents stop it as they stop a victim
    /// (the checkpoint signal, then grace), whatever its mode: a suspended job would keep
    /// its resources, and this one is to end.
    pub(crate) fn stop_at_time_limit(&mut self, id: JobId, ev: &mut Vec<Event>) {
        self.begin_stop(id, StopWhy::TimeLimit);
        self.set_reason(id, TIME_LIMIT.into());
        let limit_s = self.d.jobs[&id].spec.time_limit_ms.unwrap_or(0) / 1000;
        self.job_event(id, EventKind::TimeLimit, format!("{TIME_LIMIT} of {limit_s}s reached; stopping"), ev);
    }

    /// A job stopped at its time limit ends Failed, keeping any checkpoint it wrote.
    fn time_out(&mut self, id: JobId, ev: &mut Vec<Event>) {
        self.finish(id, JobState::Failed, None);
        self.set_reason(id, TIME_LIMIT.into());
        self.job_event(id, EventKind::TimedOut, format!("failed: {TIME_LIMIT}"), ev);
    }

    pub(super) fn mark_checkpoint(&mut self, id: JobId, checkpointed: bool) {
        if checkpointed {
            let now = self.d.now_ms;
            let job = self.d.jobs.get_mut(&id).expect("job");
            job.has_checkpoint = true;
            job.progress_mark_ms = now;
        }
    }

    fn victim_stopped(&mut self, id: JobId, by: JobId, mode: PreemptionMode, checkpointed: bool, ev: &mut Vec<Event>) {
        let by_name = self.name_of(by);
        // A shrinking gang (decisions.md section 13) starts again at once on what it kept.
        let restart = self.restarts.remove(&id);
        let saved = if checkpointed { "with a checkpoint" } else { "without a checkpoint" };
        match mode {
            PreemptionMode::Suspend => {
                let lend_to = self.d.reservations.contains_key(&by).then_some(by);
                self.usage_stop(id);
                self.ledger.set_leaving(id, false);
                self.ledger.hold(id, lend_to);
                self.forget_victim(id);

                // Tied to its preemptor only while that one still has room reserved for it.
                if lend_to.is_some()
                    && let Some(preemptor) = self.d.jobs.get_mut(&by)
                {
                    preemptor.suspended_victims.push(id);
                }
                let behaviour = self.behaviour;
                let job = self.d.jobs.get_mut(&id).expect("job");
                job.state = JobState::Suspended;
                job.stopping = None;
                // Stopped in place, not gone: a later cancel leaves every rank completing.
                // A rank whose process had ended stays ended (behaviour 7): cleared, it was
                // held suspended and then running with no process, and the next suspension
                // waited for it for good.
                let keeps_ended = behaviour >= crate::behaviour::ENDED_RANKS_OUTLAST_SUSPENSION;
                end_suspension_tally(&mut job.ended_ranks, keeps_ended);
                job.suspended_for = lend_to;
                job.reason = format!("suspended in place for {by_name}{}", crate::job::UNTIL_PREEMPTOR_GONE);
                self.job_event(
                    id,
                    EventKind::Suspended { by: by_name.clone() },
                    format!("suspended for {by_name}"),
                    ev,
                );
            }
            PreemptionMode::Cancel => {
                self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
                self.finish(id, JobState::Cancelled, None);
                self.job_event(
                    id,
                    EventKind::Cancelled,
                    format!("cancelled: preempted by {by_name} (mode cancel)"),
                    ev,
                );
            }
            PreemptionMode::Checkpoint | PreemptionMode::Requeue => {
                let keep = mode == PreemptionMode::Checkpoint;
                if keep {
                    self.mark_checkpoint(id, checkpointed);
                }
                let reason = format!("preempted by {by_name}; waiting to be placed again");
                self.requeue(id, keep, reason);
                self.job_event(id, EventKind::Stopped { checkpointed }, format!("stopped {saved}"), ev);
                let how =
                    if keep && self.d.jobs[&id].has_checkpoint { "resumes from its checkpoint" } else { "starts over" };
                match restart {
                    Some(kept) => self.start_again(id, kept, "shrink", ev),
                    None => self.job_event(id, EventKind::Requeued, format!("back in the queue; {how}"), ev),
                }
            }
        }
    }

    /// The name of job or array `id`.
    pub(crate) fn name_of(&self, id: JobId) -> Name {
        let array = || self.array(id).map(|a| a.spec.name.clone());
        self.d.jobs.get(&id).map(|j| j.spec.name.clone()).or_else(array).unwrap_or_else(|| Name::lit("gone"))
    }

    pub(crate) fn set_reason(&mut self, id: JobId, reason: String) {
        match self.d.jobs.get_mut(&id) {
            Some(j) => j.reason = clip(reason),
            None => self.set_array_reason(id, reason),
        }
    }

    pub(crate) fn cancel(&mut self, id: JobId, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        self.known(id)?;
        match self.d.jobs[&id].state {
            JobState::Cancelled => return Ok(()),
            JobState::Succeeded | JobState::Failed => {
                return Err(self.wrong_state(id, "cancelling"));
            }
            _ => {}
        }
        // A running job's ranks are completing: their agents are told to stop them, and
        // their GPUs stay held until each is reported gone (`completing.rs`).
        self.finish(id, JobState::Cancelled, None);
        self.job_event(id, EventKind::Cancelled, "cancelled by a person".into(), ev);
        Ok(())
    }

    pub(crate) fn pause(&mut self, id: JobId, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        self.known(id)?;
        match self.d.jobs[&id].state {
            JobState::Paused => Ok(()),
            JobState::Pending => {
                self.drop_reservation(id);
                self.drop_pool_reservation(id);
                self.d.jobs.get_mut(&id).expect("job").state = JobState::Paused;
                self.set_reason(id, "paused by a person; `baton resume` puts it back in the queue".into());
                self.job_event(id, EventKind::Paused, "paused while pending".into(), ev);
                Ok(())
            }
            JobState::Running => {
                self.begin_stop(id, StopWhy::Paused);
                self.set_reason(id, "pausing: checkpointing before it stops".into());
                Ok(())
            }
            _ => Err(self.wrong_state(id, "pausing")),
        }
    }

    pub(crate) fn unpause(&mut self, id: JobId, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        self.known(id)?;
        if self.d.jobs[&id].state != JobState::Paused {
            return Err(self.wrong_state(id, "resuming"));
        }
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("job");
        job.state = JobState::Pending;
        job.pending_since_ms = now;
        self.set_reason(id, "resumed by a person; waiting to be placed".into());
        self.job_event(id, EventKind::Unpaused, "resumed by a person".into(), ev);
        Ok(())
    }

    /// A suspended job whose preemptor is gone runs again in place. The caller checked it.
    pub(crate) fn resume_suspended(&mut self, id: JobId, ev: &mut Vec<Event>) {
        self.ledger.resume_in_place(id);
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("job");
        job.state = JobState::Running;
        job.suspended_for = None;
        job.started_ms = now;
        job.progress_mark_ms = now;
        job.reason.clear();
        self.usage_start(id);
        self.job_event(id, EventKind::Resumed, "resumed in place".into(), ev);
    }

    /// A preemption of `job` would suspend it in place under the state's behaviour, or one
    /// did or is doing so: its shares keep all but their CPUs (decisions.md section 7). A
    /// job suspended before behaviour 4 made jobs on MIG slices checkpoint stays suspended.
    pub fn suspends(&self, job: &crate::job::Job) -> bool {
        job.state == JobState::Suspended
            || self.being_suspended(job.id)
            || job.spec.suspends_when_preempted(self.behaviour)
    }

    /// `id` is being stopped in place (a preemption in mode suspend).
    pub(super) fn being_suspended(&self, id: JobId) -> bool {
        let stopping = self.d.jobs.get(&id).and_then(|j| j.stopping);
        matches!(stopping, Some(Stopping { why: StopWhy::Preempted { mode: PreemptionMode::Suspend, .. }, .. }))
    }

    /// A suspension's tally counts ranks stopped in place as ended; their processes are
    /// still there. Forgotten when the suspension cannot complete (a rank of it is gone), so
    /// that those ranks are completing, holding their share until reported gone.
    pub(super) fn forget_suspension_tally(&mut self, id: JobId) {
        if !self.being_suspended(id) {
            return;
        }
        // A rank whose process had ended stays ended (behaviour 8): cleared, it was made
        // completing, and waited for good for a stop its agent never answers.
        let keeps_ended = self.behaviour >= crate::behaviour::ENDED_RANKS_OUTLAST_LOST_SUSPENSION;
        end_suspension_tally(&mut self.d.jobs.get_mut(&id).expect("job exists").ended_ranks, keeps_ended);
    }

    /// The node is gone: what ran there goes back to the queue, from its last checkpoint.
    /// Nothing of the node runs any more (docs/protocol.md, the lease argument): its ranks
    /// are gone; a job's ranks on other nodes are completing until their agents stop them.
    pub(crate) fn lose_jobs_on(&mut self, node: &Name, ev: &mut Vec<Event>) {
        self.lose_completing_on(node);
        for id in self.jobs_on(node) {
            self.forget_suspension_tally(id);
            let on_node: Vec<u32> = self.d.jobs[&id]
                .ranked()
                .iter()
                .enumerate()
                .filter(|(_, r)| r.node == *node)
                .map(|(rank, _)| rank as u32)
                .collect();
            for rank in on_node {
                self.note_gone(id, rank);
            }
            let job = &self.d.jobs[&id];
            let cancel = matches!(
                job.stopping,
                Some(Stopping { why: StopWhy::Preempted { mode: PreemptionMode::Cancel, .. }, .. })
            );
            let paused = matches!(job.stopping, Some(Stopping { why: StopWhy::Paused, .. }));
            let timed_out = matches!(job.stopping, Some(Stopping { why: StopWhy::TimeLimit, .. }));
            if timed_out {
                self.time_out(id, ev);
            } else if cancel {
                self.finish(id, JobState::Cancelled, None);
                self.job_event(
                    id,
                    EventKind::Cancelled,
                    format!("node {node} was lost while it was being cancelled"),
                    ev,
                );
            } else if paused {
                self.release(id);
                self.d.jobs.get_mut(&id).expect("job").state = JobState::Paused;
                self.job_event(id, EventKind::Paused, format!("node {node} was lost while it was pausing"), ev);
            } else {
                self.requeue(id, true, format!("node {node} was lost; waiting to be placed again"));
                self.job_event(id, EventKind::Requeued, format!("node {node} was lost; back in the queue"), ev);
            }
        }
        let touching: Vec<JobId> = self
            .d
            .reservations
            .values()
            .filter(|r| r.replicas.iter().any(|x| &x.node == node))
            .map(|r| r.job)
            .collect();
        for id in touching {
            self.drop_reservation(id);
            self.set_reason(id, format!("node {node} it was to run on was lost; re-planning"));
        }
    }

    /// Time passed: maintenance windows start and end, and reservations whose victims
    /// outlived every bound are dropped (the preemptor re-plans).
    pub(crate) fn tick(&mut self, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        self.advance_windows(ev);
        let now = self.d.now_ms;
        self.usage.bound(now);
        let expired: Vec<JobId> = self.d.reservations.values().filter(|r| r.deadline_ms < now).map(|r| r.job).collect();
        for id in expired {
            self.drop_reservation(id);
            self.set_reason(id, "its victims did not stop in time; re-planning".into());
        }
        Ok(())
    }
}

/// A suspension's tally (`Job::ended_ranks`) ends, completed or cut short: its `false` is a
/// rank suspended in place, whose process lives on, and leaves it; its `true` is a rank whose
/// process ended (its own exit 0 while its gang went on), which stays ended when
/// `keeps_ended` (behaviours 7 and 8), else leaves it too (as before them).
fn end_suspension_tally(ended: &mut BTreeMap<u32, bool>, keeps_ended: bool) {
    if keeps_ended {
        ended.retain(|_, saved| *saved);
    } else {
        ended.clear();
    }
}
