//! The `baton` binary's commands as a library, so tests can call them directly.
//!
//! Layout: `sim` (`baton sim`, the what-if simulator) and `client` (the commands that talk to
//! a replica's gRPC client API: submit, list, describe, logs, watch, queue, ...; see its doc).
//! `main.rs` only wires clap.

pub mod client;
pub mod sim;
