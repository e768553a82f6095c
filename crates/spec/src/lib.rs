//! The YAML shapes a person writes (docs/scenario-format.md), read once for both readers: the
//! `baton` client (`submit -f job.yaml`, `queue create|update -f queue.yaml`) and the
//! simulator (`baton sim`, whose scenarios hold the same shapes). Depends only on the model,
//! so the client does not depend on the simulator.
//!
//! Layout:
//! - `yaml`, `de`: a YAML tree with line numbers, and typed reading with errors that name
//!   file, line and field (`timeline[3].submit.resources.gpu`).
//! - `queue`: a queue (a scenario's `queues` entry, an `update_queue` step).
//! - `job`: a job (a timeline `submit`), with the fields only the simulator reads.
//! - `files`: whole single-object files for the client, bounded in size.

pub mod de;
pub mod files;
pub mod job;
pub mod queue;
pub mod yaml;

pub use de::InputError;
pub use files::{FileError, JobFile, parse_job, parse_job_file, parse_queue, parse_queue_file, parse_queue_update};
