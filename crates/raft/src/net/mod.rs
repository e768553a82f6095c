//! The gRPC transport between replicas: dialing, the client side (openraft's network traits
//! and the replica's own calls) and the server side.

pub mod dialer;
pub mod peers;
pub mod raft_network;
pub mod service;
pub mod sim;

pub use dialer::Dialer;
pub use service::RaftService;
