//! baton's gRPC contracts, generated from the top-level `proto/` directory (package
//! `baton.v1`). Today it holds the raft transport (`proto/raft.proto`); the client API and
//! the agent protocol join it as their crates arrive.

/// Package `baton.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("baton.v1");
}
