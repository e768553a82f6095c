//! What can go wrong talking to a cluster, each case worded so a person knows what to do next.
//! gRPC statuses become these at the edge (`from_status`); the binary prints them once.

use baton_proto::reason::Reason;
use tonic::Code;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Every replica answered UNAVAILABLE "no leader yet" until the deadline.
    #[error("no leader yet (an election may be under way); retry in a moment")]
    NoLeader,
    /// No address took the call.
    #[error(
        "cannot reach any baton replica (tried {tried}): {last}\n\
         check --server (or BATON_SERVER) and that `baton server` runs there"
    )]
    Unreachable { tried: String, last: String },
    /// The client and the replica disagree about TLS; the text says which way and what to do.
    #[error("{0}")]
    TlsMismatch(String),
    /// The whole call ran past `--timeout`.
    #[error(
        "no answer within {secs}s (tried {tried}); the cluster may be overloaded or partitioned, retry or raise --timeout"
    )]
    Timeout { secs: f64, tried: String },
    #[error("unknown {what} {name:?}; see {see}")]
    NotFound { what: &'static str, name: String, see: &'static str },
    /// The server refused a field (its message names it).
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// A create of a name that is taken (worded as any other status was before).
    #[error("already exists: {0}")]
    Exists(String),
    /// A write that named the revision it read was refused: the object changed since.
    #[error("refused: {0}")]
    Conflict(String),
    /// Any other status the server gave: its code and message.
    #[error("{code}: {message}")]
    Server { code: String, message: String },
    /// `queue update` met another write between its read and its write on every try.
    #[error(
        "queue {name} changed under each of {tries} tries to update it ({last}); see what changes it \
         with baton queue get {name}, then run the update again"
    )]
    KeptChanging { name: String, tries: u32, last: String },
    /// Bad flags or a bad file, found before anything was sent.
    #[error("{0}")]
    Usage(String),
    /// `baton logs`: reading from the job's agent failed.
    #[error("{0}")]
    Logs(String),
    /// A stream (watch, logs) ended in a way the user should know about.
    #[error("{0}")]
    Stream(String),
    /// A backup file that cannot be written, read or restored.
    #[error("{0}")]
    Backup(String),
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

/// What a NOT_FOUND refers to, for the hint it gets.
#[derive(Debug, Clone, Copy)]
pub enum Subject {
    Job,
    Queue,
    Cohort,
    Class,
    Node,
    Token,
    /// A call whose NOT_FOUND is the server's own words (several kinds of name).
    Other,
}

impl Subject {
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Subject::Job => ("job", "baton list"),
            Subject::Queue => ("queue", "baton queue list"),
            Subject::Cohort => ("cohort", "baton cohort list"),
            Subject::Class => ("class", "baton class list"),
            Subject::Node => ("node", "baton nodes"),
            Subject::Token => ("token", "baton token list"),
            Subject::Other => ("name", "the list commands"),
        }
    }
}

impl ClientError {
    /// A status from the server about `name` (a `subject`).
    pub fn from_status(status: &tonic::Status, subject: Subject, name: &str) -> ClientError {
        let message = status.message().to_string();
        match status.code() {
            Code::NotFound if !matches!(subject, Subject::Other) => {
                let (what, see) = subject.words();
                ClientError::NotFound { what, name: name.to_string(), see }
            }
            Code::InvalidArgument => ClientError::InvalidArgument(message),
            Code::AlreadyExists => ClientError::Exists(message),
            _ if Reason::of(status) == Some(Reason::Conflict) => ClientError::Conflict(message),
            code => {
                let code = code_name(code);
                let message = unrepeated(code, &message).to_string();
                ClientError::Server { code: code.to_string(), message }
            }
        }
    }
}

/// The server's message without a leading `"{code}: "`: the model words its refusals
/// ("permission denied: ...") as the status code does, and the two together read
/// "permission denied: permission denied: ...".
fn unrepeated<'a>(code: &str, message: &'a str) -> &'a str {
    message.strip_prefix(code).and_then(|rest| rest.strip_prefix(": ")).unwrap_or(message)
}

/// Status codes as people read them in gRPC docs.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown error",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "refused",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "not supported by this server",
        Code::Internal => "internal server error",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_code_once() {
        let status = tonic::Status::permission_denied("permission denied: queue team-b is not yours");
        let e = ClientError::from_status(&status, Subject::Job, "j");
        assert_eq!(e.to_string(), "permission denied: queue team-b is not yours");
        let status = tonic::Status::unauthenticated("unauthenticated: the token is revoked");
        let e = ClientError::from_status(&status, Subject::Job, "j");
        assert_eq!(e.to_string(), "unauthenticated: the token is revoked");
        // A message that merely starts with the same word keeps it.
        let status = tonic::Status::permission_denied("permission denied by the queue's policy");
        let e = ClientError::from_status(&status, Subject::Job, "j");
        assert_eq!(e.to_string(), "permission denied: permission denied by the queue's policy");
    }
}
