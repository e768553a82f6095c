//! The integration tests of this crate, one module per concern, in one test binary: one
//! link instead of one per file (linking dozens of binaries against the whole dependency
//! graph was most of CI's build time). Tests that run only in a group of ./test.sh, or
//! that change the process's global state, keep binaries of their own beside this one.

#[path = "../common/mod.rs"]
mod common;
mod fencing;
mod gpu_health;
mod inventory;
mod journal_faults;
mod journal_power_loss;
mod lease;
mod lifecycle;
mod logs;
mod metrics;
mod reports;
mod tls;
