//! The `baton` binary's commands as a library, so tests can call them directly.
//!
//! Layout: `sim` (`baton sim`, the what-if simulator), `server` (`baton server`, one
//! replica), `client` (the commands that talk to a replica's gRPC client API: submit, list,
//! describe, logs, watch, queue, ...; see its doc), `tls` (`baton tls`, the CA and certificates), and `logging` (log setup and shutdown
//! signals for the long-running commands). `main.rs` only wires clap.

pub mod agent;
pub mod bench;
pub mod client;
pub mod dev;
pub mod init;
pub mod logging;
pub mod otel;
pub mod replica_id;
pub mod server;
pub mod sim;
pub mod tls;
