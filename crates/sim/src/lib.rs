//! `baton sim`: runs the real scheduling code (`baton-model` + `baton-sched`) against a
//! scenario file on a virtual clock, and checks the file's expectations.
//!
//! Layout:
//! - `yaml`, `de`, `files`: re-exported from `baton-spec`, which also reads the queue and job
//!   shapes that scenarios share with the `baton` client's files.
//! - `scenario`, `parse`, `parse_timeline`, `parse_expect`, `hostlist`: the file format
//!   (docs/scenario-format.md).
//! - `validate`: cross-references and impossible requests, before anything runs.
//! - `engine`: the virtual clock and the loop around `State::apply` and `cycle`.
//! - `expect`, `output`: expectations, `-o json` and the readable timeline.
//! - `trace`, `synth`, `stats`: trace mode (a CSV of jobs against a cluster file), synthetic
//!   traces, and the per-queue figures of a run (docs/trace.md).

pub mod engine;
pub mod expect;
pub mod hostlist;
pub mod output;
pub mod parse;
pub mod parse_expect;
pub mod parse_timeline;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod synth;
pub mod trace;
pub mod validate;

pub use baton_spec::{de, files, yaml};
pub use de::InputError;
pub use engine::SimError;
pub use expect::Failure;
pub use files::{FileError, parse_job, parse_job_file, parse_queue, parse_queue_file, parse_queue_update};
pub use output::Report;

/// The result of simulating one file.
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    pub failures: Vec<Failure>,
    /// How many expected facts were checked.
    pub checked: usize,
    /// Per-queue figures and time series (for `--report`).
    pub stats: stats::Collector,
    pub cap_gpu_ms: u128,
    pub quota_gpus: Vec<u64>,
    /// Scheduling cycles the run took.
    pub cycles: u64,
}

impl Outcome {
    fn of(run: engine::Run) -> Outcome {
        Outcome {
            report: run.report,
            failures: run.failures,
            checked: run.checked,
            stats: run.stats,
            cap_gpu_ms: run.cap_gpu_ms,
            quota_gpus: run.quota_gpus,
            cycles: run.cycles,
        }
    }

    /// The per-queue figures (docs/trace.md).
    pub fn queue_stats(&self) -> Vec<stats::QueueStats> {
        self.stats.summarize(self.report.summary.end.0, self.cap_gpu_ms)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{0}")]
    Sim(#[from] SimError),
    #[error("{0}")]
    Trace(#[from] trace::TraceError),
}

/// Parses, validates and simulates a scenario given as text.
pub fn run(file: &str, text: &str) -> Result<Outcome, Error> {
    let scenario = parse::parse(file, text)?;
    let state = validate::configure(&scenario)?;
    validate::check_references(&scenario, &state)?;
    let run = engine::Engine::new(&scenario, state).run()?;
    Ok(Outcome::of(run))
}

/// Parses, validates and simulates a scenario given as text, and returns every command the
/// run applied, from the empty state on, `prelude` first (a recorded log: replayed by a
/// later build, it must give the same states; the raft crate's `recorded_logs` test).
pub fn record(file: &str, text: &str, prelude: Vec<baton_model::Op>) -> Result<Vec<baton_model::Command>, Error> {
    let scenario = parse::parse(file, text)?;
    let setup = validate::configure_logged(&scenario, Some(prelude))?;
    validate::check_references(&scenario, &setup.state)?;
    let run = engine::Engine::new(&scenario, setup.state).recording(setup.log.unwrap_or_default()).run()?;
    Ok(run.log)
}

/// Parses a cluster file and a trace (both given as text) and simulates the trace on it;
/// the report has the summary but no per-instant steps.
pub fn run_trace(cluster_file: &str, cluster: &str, trace_file: &str, trace_text: &str) -> Result<Outcome, Error> {
    let jobs = trace::parse(trace_file, trace_text)?;
    run_trace_jobs(cluster_file, cluster, trace_file, &jobs, None)
}

/// [`run_trace`] with the trace already read; `scheduler` replaces the file's settings.
pub fn run_trace_jobs(
    cluster_file: &str,
    cluster: &str,
    trace_file: &str,
    jobs: &[trace::TraceJob],
    scheduler: Option<baton_model::scheduler::SchedulerSettings>,
) -> Result<Outcome, Error> {
    let mut scenario = parse::parse(cluster_file, cluster)?;
    if let Some(v) = scheduler {
        // A command-line setting replaces the file's `scheduler:` block.
        scenario.scheduler = Some(scenario::At { v, line: 0, path: "scheduler".into() });
    }
    let state = validate::configure(&scenario)?;
    trace::attach(&mut scenario, &state, trace_file, jobs)?;
    let run = engine::Engine::new(&scenario, state).without_steps().run()?;
    Ok(Outcome::of(run))
}
