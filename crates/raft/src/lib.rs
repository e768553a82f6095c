//! placeholder
// openraft's error types are large and fixed by its traits; boxing them here would only
// move the allocation.
#![allow(clippy::result_large_err)]

mod batcher;
pub mod codec;
pub mod datadir;
pub mod error;
pub mod identity;
pub mod metrics;
pub mod net;
pub mod replica;
pub mod settings;
pub mod store;
pub mod types;
