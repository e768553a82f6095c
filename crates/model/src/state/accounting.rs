//! Accounting in the state (issue 34): an attempt's record is begun where it stops holding
//! its resources (`usage_stop`, the one place every ending passes) and finished once the
//! command that ended it is applied, when how it ended is known (the job's new state).

use super::State;
use crate::accounting::{Accounting, AccountingSettings, AttemptRecord, Ending, MAX_RECORD_NODES, clip_detail};
use crate::error::ApplyError;
use crate::event::EventKind;
use crate::job::{Job, JobId, JobState, PreemptionMode, StopWhy};

/// An attempt that ended during the command being applied.
#[derive(Debug, Clone)]
pub(super) struct Ended {
    id: JobId,
    record: AttemptRecord,
    /// The stop it was ended by, if one was asked for.
    stopping: Option<StopWhy>,
    /// Its last start or checkpoint, as it ended.
    progress_mark_ms: u64,
}

impl State {
    pub fn accounting(&self) -> &Accounting {
        &self.accounting
    }

    /// The pools of the nodes `job` runs on, joined with `,` when more than one: what
    /// accounting counts it under by pool.
    pub fn pools_of(&self, job: &Job) -> String {
        let mut pools: Vec<&str> =
            job.replicas.iter().filter_map(|r| self.d.nodes.get(&r.node)).map(|n| n.spec.pool.as_str()).collect();
        pools.sort_unstable();
        pools.dedup();
        pools.join(",")
    }

    pub(crate) fn set_accounting(&mut self, s: AccountingSettings) -> Result<(), ApplyError> {
        s.validate().map_err(|e| ApplyError::invalid("accounting", e))?;
        self.accounting.set(s);
        Ok(())
    }

    /// The leader's own command: accounting on with its defaults, unless it is on already
    /// (a person may have set its retention).
    pub(crate) fn start_accounting(&mut self) {
        if self.accounting.settings().is_none() {
            self.accounting.set(AccountingSettings::default());
        }
    }

    /// Called as job `id`'s attempt stops holding its resources (it ends or is suspended).
    pub(super) fn attempt_ends(&mut self, id: JobId) {
        if self.accounting.settings().is_none() {
            return;
        }
        let job = &self.d.jobs[&id];
        let nodes = job.nodes();
        let record = AttemptRecord {
            seq: 0,
            job: id,
            name: job.spec.name.to_string(),
            attempt: job.attempt,
            user: self.user_name(job).to_string(),
            queue: job.spec.queue.to_string(),
            pool: self.pools_of(job),
            nodes: nodes.keys().take(MAX_RECORD_NODES).map(|n| n.to_string()).collect(),
            gpus: job.gpus(),
            resources: Self::holding(job),
            start_ms: job.started_ms,
            end_ms: self.d.now_ms,
            ending: Ending::Requeued,
            detail: String::new(),
            lost_ms: 0,
        };
        let stopping = job.stopping.map(|s| s.why);
        self.ended.push(Ended { id, record, stopping, progress_mark_ms: job.progress_mark_ms });
    }

    /// Finishes the records of the attempts the command just applied ended, now that the
    /// jobs' states say how.
    pub(super) fn close_records(&mut self) {
        for e in std::mem::take(&mut self.ended) {
            let r = self.finished_record(e);
            self.accounting.push(r);
        }
    }

    fn finished_record(&self, e: Ended) -> AttemptRecord {
        let mut r = e.record;
        let job = self.d.jobs.get(&e.id);
        let state = job.map(|j| j.state);
        r.ending = match e.stopping {
            Some(StopWhy::Preempted { by, mode }) => {
                let by = self.name_of(by).to_string();
                if mode == PreemptionMode::Suspend { Ending::Suspended { by } } else { Ending::Preempted { by, mode } }
            }
            Some(StopWhy::Paused) => Ending::Paused,
            Some(StopWhy::TimeLimit) => Ending::TimedOut,
            Some(StopWhy::Maintenance) => Ending::Maintenance,
            Some(StopWhy::GpuFault) => Ending::GpuFault,
            Some(StopWhy::Grow) => Ending::Resized,
            None => match state {
                Some(JobState::Succeeded) => Ending::Succeeded,
                Some(JobState::Failed) => Ending::Failed { exit_code: job.and_then(|j| j.exit_code) },
                Some(JobState::Cancelled) | None => Ending::Cancelled,
                Some(JobState::Paused) => Ending::Paused,
                Some(_) => Ending::Requeued,
            },
        };
        if r.ending.runs_again() {
            // Without a checkpoint to resume from, the next attempt starts over.
            let from =
                if job.is_some_and(|j| j.has_checkpoint) { e.progress_mark_ms.max(r.start_ms) } else { r.start_ms };
            r.lost_ms = r.end_ms.saturating_sub(from);
        }
        r.detail = job.map(|j| self.ending_words(j, r.end_ms)).unwrap_or_default();
        r
    }

    /// What the job's events said of the ending: the newest at that instant, a new
    /// attempt's start aside.
    fn ending_words(&self, job: &crate::job::Job, at_ms: u64) -> String {
        let said = job
            .events
            .iter()
            .rev()
            .take_while(|e| e.at_ms == at_ms)
            .find(|e| !matches!(e.kind, EventKind::Started { .. }))
            .map(|e| e.message.clone());
        clip_detail(said.unwrap_or_default())
    }

    /// Restores accounting from a snapshot, checking it.
    pub(super) fn restore_accounting<E: serde::de::Error>(&mut self, a: Accounting) -> Result<(), E> {
        a.check().map_err(E::custom)?;
        self.accounting = a;
        Ok(())
    }
}
