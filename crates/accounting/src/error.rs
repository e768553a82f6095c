//! Why the accounting store failed, or refused a query.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountingError {
    #[error("accounting store {location}: {message}")]
    Storage { location: String, message: String },
    #[error("accounting store: {0}")]
    Corrupt(String),
    /// A query that cannot be answered as asked (the message names the flag).
    #[error("{0}")]
    Query(String),
}
