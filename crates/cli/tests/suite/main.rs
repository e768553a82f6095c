//! The integration tests of this crate, one module per concern, in one test binary: one
//! link instead of one per file (linking dozens of binaries against the whole dependency
//! graph was most of CI's build time). Tests that run only in a group of ./test.sh, or
//! that change the process's global state, keep binaries of their own beside this one.

mod arrays;
mod bench_hostile;
mod binary;
mod commands;
mod deploy_files;
mod dev;
#[path = "../dev_output/mod.rs"]
mod dev_output;
mod elastic;
mod fair_share;
#[path = "../fake/mod.rs"]
mod fake;
mod history;
mod insecure;
mod logging;
mod otlp;
mod pages;
mod sim_trace;
mod tls_cmd;
