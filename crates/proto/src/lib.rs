//! baton's gRPC contracts, generated from the top-level `proto/` directory (package
//! `baton.v1`): the client API (`baton.proto`, service `Baton`), the agent protocol
//! (`agent.proto`, service `AgentGateway`) and the raft transport (`raft.proto`).

pub mod convert;
pub mod make;

/// Package `baton.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("baton.v1");
}
