//! baton's accounting store (issue 34): each replica's record of every attempt a job ran,
//! for `baton history` and `baton usage`.
//!
//! The replicated state makes the records (`baton_model::accounting`) and numbers them;
//! the raft crate's state machine writes each into this store as it applies the command
//! that ended the attempt, and writes again the newest ones a snapshot carries. Writing a
//! record again changes nothing, so a replay after a restart and a snapshot's window leave
//! one copy.
//!
//! Layout:
//! - [`store`]: [`RecordStore`]: write, query, totals, prune by age.
//! - [`query`]: what a query asks ([`Query`], [`By`]) and answers ([`Page`], [`Total`]).
//! - `trees`: ordered byte-keyed trees on disk (sled, synced through `baton-durable`) or in
//!   memory (tests, simulations).
//! - [`error`]: why a call failed ([`AccountingError`]).

pub mod error;
pub mod query;
pub mod store;
mod trees;

pub use error::AccountingError;
pub use query::{By, MAX_BUCKETS, MAX_PAGE, Page, Query, Series, SeriesRow, Total, Totals};
pub use store::RecordStore;
