//! baton's gRPC contracts, generated from the top-level `proto/` directory (package
//! `baton.v1`): the client API (`baton.proto`, service `Baton`), the agent protocol
//! (`agent.proto`, service `AgentGateway`) and the raft transport (`raft.proto`); and
//! `scrape`, the plain-HTTP `GET /metrics` endpoint both replicas and agents serve; and
//! `reason`, the typed reason a refusal carries for clients to act on; and `words`, the
//! words the CLI and the dashboard show for the API's enums.

/// Largest gRPC message any baton client or server (API, agent gateway, agent logs) sends
/// or accepts. Clients and servers set both directions from this one constant so that
/// nothing a server may send is refused by the client decoding it.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The metadata key of a refusal that names the leader (`host:port`): a follower's answer to
/// an agent or client that should talk to the leader instead.
pub const LEADER_METADATA: &str = "baton-leader";

/// The metadata key a client's token travels in, as `Bearer TOKEN` (docs/security.md): the
/// CLI writes it, a replica reads it, the dashboard turns its HTTP header into it.
pub const AUTHORIZATION_METADATA: &str = "authorization";

/// What comes before the token in [`AUTHORIZATION_METADATA`].
pub const BEARER_PREFIX: &str = "Bearer ";

/// The signal that asks a job to checkpoint when its spec names none (the model's default).
pub use baton_model::job::DEFAULT_CHECKPOINT_SIGNAL;

pub mod convert;
pub mod make;
pub mod reason;
pub mod scrape;
pub mod tls;
pub mod words;

/// Package `baton.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("baton.v1");
}
