//! Counters of what the log did, from the events this replica's applies produce, and the
//! term changes it sees.

use std::sync::Arc;

use baton_model::State;
use baton_model::event::{Event, EventKind};
use baton_raft::Replica;
use tokio::sync::broadcast::error::RecvError;

use super::Metrics;

/// Counts until `closing` turns true or the replica stops.
pub async fn count_events(metrics: Arc<Metrics>, replica: Replica, mut closing: tokio::sync::watch::Receiver<bool>) {
    let mut events = replica.subscribe_events();
    let mut raft = replica.watch();
    let mut term = raft.borrow().current_term;
    loop {
        tokio::select! {
            got = events.recv() => match got {
                Ok(batch) => replica.read_local(|s| batch.iter().for_each(|e| metrics.count(s, e))),
                Err(RecvError::Lagged(n)) => { metrics.events_missed.inc_by(n); }
                Err(RecvError::Closed) => return,
            },
            changed = raft.changed() => {
                if changed.is_err() { return }
                let now = raft.borrow().current_term;
                if now != term {
                    term = now;
                    metrics.raft_term_changes.inc();
                }
            }
            _ = closing.changed() => return,
        }
    }
}

impl Metrics {
    /// Counts one applied event. `state` is this replica's state when the event is counted,
    /// which may be a little past the entry that produced it. Facts that do not change (a
    /// job's queue, its submit time) are exact; the victim's progress mark moves only if
    /// it reports a checkpoint or starts again in between, in which case the GPU-seconds
    /// at risk read low. A job already dropped from the retained finished jobs is
    /// not counted in admissions or wait time, and counts as reason `unknown` when preempted.
    pub(super) fn count(&self, state: &State, e: &Event) {
        let job = e.job.as_ref().and_then(|n| state.job_by_name(n.as_str()));
        match &e.kind {
            EventKind::Started { attempt, .. } => {
                let Some(job) = job else { return };
                self.admissions.get_or_create(&vec![("queue", job.spec.queue.to_string())]).inc();
                if *attempt == 1 {
                    self.job_wait_seconds.observe(ms_to_s(e.at_ms.saturating_sub(job.submitted_ms)));
                }
            }
            EventKind::Resumed => {
                if let Some(job) = job {
                    self.admissions.get_or_create(&vec![("queue", job.spec.queue.to_string())]).inc();
                }
            }
            EventKind::Preempted { by } => self.preempted(state, job, by.as_str(), "checkpoint", e.at_ms),
            EventKind::Suspended { by } => self.preempted(state, job, by.as_str(), "suspend", e.at_ms),
            EventKind::Stopped { checkpointed: true } => {
                self.checkpoints_written.inc();
            }
            EventKind::NodeLost => {
                self.nodes_lost.inc();
            }
            _ => {}
        }
    }

    fn preempted(&self, state: &State, victim: Option<&baton_model::job::Job>, by: &str, mode: &str, at_ms: u64) {
        let preemptor = state.job_by_name(by);
        let reason = match (victim, preemptor) {
            (Some(v), Some(p)) if v.spec.queue == p.spec.queue => "priority",
            (Some(_), Some(_)) => "reclaim",
            _ => "unknown",
        };
        self.preemptions.get_or_create(&vec![("reason", reason.to_string()), ("mode", mode.to_string())]).inc();
        if let Some(v) = victim {
            let gpus: u64 =
                v.replicas.iter().filter_map(|r| v.spec.tasks.get(r.task as usize)).map(|t| t.resources.gpus()).sum();
            let since_ms = at_ms.saturating_sub(v.progress_mark_ms);
            self.preemption_uncheckpointed_gpu_seconds.inc_by(gpus as f64 * ms_to_s(since_ms));
        }
    }
}

fn ms_to_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}
