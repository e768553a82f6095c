//! placeholder
pub mod codec;
pub mod settings;
pub mod store;
pub mod types;
