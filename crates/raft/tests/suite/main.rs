//! The integration tests of this crate, one module per concern, in one test binary: one
//! link instead of one per file (linking dozens of binaries against the whole dependency
//! graph was most of CI's build time). Tests that run only in a group of ./test.sh, or
//! that change the process's global state, keep binaries of their own beside this one.

mod accounting;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod data_format;
mod decode_fuzz;
mod disk_faults;
mod durability;
mod format_gate;
mod forward_fallback;
mod log_integrity;
mod partition;
mod power_loss;
mod recorded_logs;
mod refusals;
mod restored_leader;
mod slow_disk;
mod snapshot_compat;
mod snapshot_format;
mod state_digest;
mod storage_suite;
mod write_pipeline;
