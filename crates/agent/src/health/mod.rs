//! GPU health (decisions.md section 14): what the agent finds wrong with its GPUs goes to
//! the leader as an observation, so that the GPU takes no new work and the job on it is
//! requeued from its checkpoint.
//!
//! Layout: `watch` (the [`GpuWatch`] trait and the loop that reads one), `nvml` (critical
//! XID events, uncorrectable ECC errors, pages pending retirement, a GPU lost, through the
//! driver), `injected` (development GPUs: faults written into a directory, for tests and
//! chaos runs), `check` (the operator's health-check program, run on an interval),
//! `recorder` (into the journal, which the reporter sends at once).

pub mod check;
pub mod injected;
pub mod nvml;
pub mod recorder;
pub mod watch;

pub use check::HealthCheck;
pub use recorder::Recorder;
pub use watch::{Finding, GpuWatch, WatchThread};
