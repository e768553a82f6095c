//! The integration tests of this crate, one module per concern, in one test binary: one
//! link instead of one per file (linking dozens of binaries against the whole dependency
//! graph was most of CI's build time). Tests that run only in a group of ./test.sh, or
//! that change the process's global state, keep binaries of their own beside this one.

mod accounting;
mod arrays;
mod auth;
mod clock_skew;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod dashboard;
mod dependencies;
mod disk_failure;
mod elastic;
mod fair_share;
mod format_gate;
mod gang;
mod gpu_health;
mod job_ref;
mod leader_side;
mod maintenance;
mod metrics;
mod peer_port;
mod queue_writes;
mod reconcile;
mod registration;
mod report_bounds;
mod reservations;
mod slices;
#[path = "../../../proto/testing/test_ca.rs"]
mod test_ca;
mod tls;
mod topology;
mod visibility;
mod watch_bound;
#[path = "../../../proto/testing/web.rs"]
mod web;
