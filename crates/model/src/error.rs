//! Why a command was refused. Refused commands change nothing.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    #[error("unknown {kind} {name:?}")]
    Unknown { kind: String, name: String },
    #[error("{kind} {name:?} already exists")]
    Exists { kind: String, name: String },
    #[error("invalid {field}: {message}")]
    Invalid { field: String, message: String },
    #[error("impossible request: {0}")]
    Impossible(String),
    #[error("{0}")]
    InUse(String),
    #[error("job {job:?} is {state}; {action} is not possible")]
    WrongState { job: String, state: String, action: String },
    #[error("stale report for job {job} attempt {attempt}: the current attempt is {current}")]
    StaleAttempt { job: u64, attempt: u32, current: u32 },
    #[error("limit reached: {0}")]
    Limit(String),
    #[error("job {job} attempt {attempt} runs no {what} on node {node:?}")]
    NotPlaced { job: u64, attempt: u32, what: String, node: String },
    /// No valid token (missing, unknown or revoked). Last, with the next, so responses
    /// encoded before them decode.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A valid token without the role or queue grant the command needs.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A compare-and-set write whose object changed since the writer read it. Last, so
    /// responses encoded before it decode.
    #[error(
        "{kind} {name:?} changed since it was read: the write was based on revision {read}, it is now at \
         revision {current}; read it again and redo the change"
    )]
    Conflict { kind: String, name: String, read: u64, current: u64 },
}

impl ApplyError {
    pub fn unknown(kind: &str, name: impl ToString) -> ApplyError {
        ApplyError::Unknown { kind: kind.to_string(), name: name.to_string() }
    }

    pub fn invalid(field: impl ToString, message: impl ToString) -> ApplyError {
        ApplyError::Invalid { field: field.to_string(), message: message.to_string() }
    }
}
