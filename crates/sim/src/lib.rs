//! `baton sim`: runs the real scheduling code (`baton-model` + `baton-sched`) against a
//! scenario file on a virtual clock, and checks the file's expectations.
//!
//! Layout:
//! - `yaml`, `de`: a YAML tree with line numbers, and typed reading with errors that name
//!   file, line and field.
//! - `scenario`, `parse`, `parse_timeline`, `parse_expect`, `hostlist`: the file format
//!   (spec/scenario.md).
//! - `files`: single job and queue files for the `baton` client (`submit -f`, `queue create -f`).
//! - `validate`: cross-references and impossible requests, before anything runs.
//! - `engine`: the virtual clock and the loop around `State::apply` and `cycle`.
//! - `expect`, `output`: expectations, `-o json` and the readable timeline.

pub mod de;
pub mod engine;
pub mod expect;
pub mod files;
pub mod hostlist;
pub mod output;
pub mod parse;
pub mod parse_expect;
pub mod parse_timeline;
pub mod scenario;
pub mod validate;
pub mod yaml;

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
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{0}")]
    Sim(#[from] SimError),
}

/// Parses, validates and simulates a scenario given as text.
pub fn run(file: &str, text: &str) -> Result<Outcome, Error> {
    let scenario = parse::parse(file, text)?;
    let state = validate::configure(&scenario)?;
    validate::check_references(&scenario, &state)?;
    let (report, failures, checked) = engine::Engine::new(&scenario, state).run()?;
    Ok(Outcome { report, failures, checked })
}
