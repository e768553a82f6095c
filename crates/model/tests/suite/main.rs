//! The integration tests of this crate, one module per concern, in one test binary: one
//! link instead of one per file (linking dozens of binaries against the whole dependency
//! graph was most of CI's build time). Tests that run only in a group of ./test.sh, or
//! that change the process's global state, keep binaries of their own beside this one.

mod access;
mod accounting;
mod arrays;
mod clones;
#[path = "../common/mod.rs"]
mod common;
mod completing;
mod create_writes;
mod dependencies;
mod elastic;
mod format_gate;
mod fractions;
mod gpu_health;
mod guards;
mod maintenance;
mod plan_checker;
mod queue_writes;
mod slices;
mod usage;
