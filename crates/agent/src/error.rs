//! Typed errors of the agent. They become `tonic::Status` only in `logs_server`.

use std::path::PathBuf;

/// Why the agent could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("cannot create {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot listen for logs on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error("the logs server failed: {0}")]
    LogsServer(String),
    #[error("TLS for the logs server: {0}")]
    Tls(String),
    #[error("--containment: {0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("an agent task failed: {0}")]
    Task(String),
}

/// Why no GPU inventory could be made.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// NVML could not be loaded or initialised (no NVIDIA driver on this machine).
    #[error("no NVIDIA driver found (NVML: {0})")]
    NoDriver(String),
    #[error("no NVIDIA driver found (NVML: {0}); pass --gpus N (or --mig PROFILE=N) to run with development GPUs")]
    NoDriverNoFallback(String),
    #[error("NVML failed: {0}")]
    Nvml(String),
}

/// The durable journal could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot open the agent journal at {path}: {source}")]
    Open { path: PathBuf, source: crate::journal_store::StoreError },
    #[error("the agent journal at {path} is unreadable ({what}): {detail}")]
    Corrupt { path: PathBuf, what: String, detail: String },
    #[error("cannot write the agent journal at {path}: {source}")]
    Io { path: PathBuf, source: crate::journal_store::StoreError },
}

/// Why `fetch_logs` failed.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("invalid agent address {addr}: {detail}")]
    Address { addr: String, detail: String },
    #[error("cannot connect to the agent at {addr}: {detail}")]
    Connect { addr: String, detail: String },
    #[error("the agent at {addr} refused: {status}")]
    Refused { addr: String, status: tonic::Status },
    #[error("cannot write the log: {0}")]
    Write(#[from] std::io::Error),
}
