//! Spans of a job's decision path (docs/metrics.md, "Tracing"): `submit` -> `commit` ->
//! `cycle` -> `plan` -> `apply` (in `baton_raft`) -> `directive` -> `agent_start` (in
//! `baton_agent`). Each carries the job's id as `job`, and `attempt` and `term` where the
//! step knows them, so the spans with one job id are that job's trace. They are INFO spans,
//! made only when a step happens (not at every cycle or directive resend): the logs show
//! them as the context of what is logged inside, `BATON_LOG_SPANS=1` logs each as it opens,
//! and a subscriber that records spans (a test, an exporter) sees every step.

use std::collections::BTreeSet;

use baton_model::command::Outcome;
use baton_model::name::Name;
use baton_model::plan::Decision;
use baton_proto::v1::{Action, Assignment};
use tracing::Span;
use tracing::field::Empty;

/// The commit of one command to the log; `job` is recorded when the command made a job.
pub fn commit_span(op: &'static str, term: u64) -> Span {
    tracing::info_span!("commit", op, term, job = Empty)
}

pub fn record_outcome(span: &Span, outcome: &Outcome) {
    if let Outcome::Submitted { job, .. } = outcome {
        span.record("job", job);
    }
}

/// The `cycle` span of a leader's cycle in `term` that decided a step of some job's path,
/// with a `plan` span under it for each decision that places, resumes or preempts for a
/// job; no span for a cycle without one (cycles run every few milliseconds, and a job that
/// keeps waiting is decided again each time: neither is a step of a path).
pub fn cycle_span(term: u64, decisions: &[Decision]) -> Span {
    let traced = |d: &Decision| match d {
        Decision::Place { attempt, .. } | Decision::ResumeInPlace { attempt, .. } => Some(Some(*attempt)),
        Decision::Preempt { .. } | Decision::PreemptShrinking { .. } | Decision::Grow { .. } => Some(None),
        _ => None,
    };
    if !decisions.iter().any(|d| traced(d).is_some()) {
        return Span::none();
    }
    let cycle = tracing::info_span!("cycle", term, decisions = decisions.len());
    for d in decisions {
        if let Some(attempt) = traced(d) {
            let _span = tracing::info_span!(parent: &cycle, "plan", job = d.job(), attempt, term, decision = d.kind());
        }
    }
    cycle
}

/// The RUN assignments a node's directive stream has already traced, so that the resends
/// of the same directive make no new spans. Holds at most what the node's last directive
/// assigns.
#[derive(Default)]
pub struct Directed {
    sent: BTreeSet<(u64, u32, u32)>,
}

impl Directed {
    /// A `directive` span for each RUN in `assignments` not traced before on this stream.
    pub fn note(&mut self, node: &Name, term: u64, assignments: &[Assignment]) {
        let runs: BTreeSet<(u64, u32, u32)> = assignments
            .iter()
            .filter(|a| a.action == Action::Run as i32)
            .map(|a| (a.job_id, a.attempt, a.rank))
            .collect();
        for &(job, attempt, rank) in runs.difference(&self.sent) {
            let _span = tracing::info_span!("directive", job, attempt, rank, term, node = %node);
        }
        self.sent = runs;
    }
}
