//! Who may call which service of a replica under mutual TLS. The certificate's role and
//! name (see `baton_proto::tls`) are the caller's identity: raft traffic needs a replica
//! certificate, the agent gateway an agent certificate naming the node it speaks for, and
//! the client API any certificate of the cluster's CA (user tokens and roles refine it).
//! Under `--insecure` nothing is checked: the operator chose to trust the network.

use std::time::Duration;

use baton_model::name::Name;
use baton_proto::tls::{PeerId, Role, Transport};
use baton_raft::ReplicaConfig;
use baton_raft::net::Dialer;
use tonic::Status;

/// The raft transport: replicas only.
pub const RAFT_CALLERS: &[Role] = &[Role::Replica];
/// The agent gateway: agents only.
pub const GATEWAY_CALLERS: &[Role] = &[Role::Agent];
/// The client API: any holder of a certificate of this cluster's CA.
pub const API_CALLERS: &[Role] = baton_proto::tls::ANY_ROLE;

/// How this replica reaches its peers: with its own certificate when TLS is on.
pub fn raft_dialer(transport: &Transport, replica: &ReplicaConfig) -> Dialer {
    Dialer::secured(transport.clone(), Duration::from_millis(replica.settings.rpc_timeout_ms))
}

/// Refuses an agent speaking for a node its certificate does not name. `who` is what the
/// gateway's guard found (none under `--insecure`).
pub fn check_node(who: Option<&PeerId>, node: &Name) -> Result<(), Status> {
    match who {
        Some(p) if p.role != Role::Agent || p.name != node.as_str() => Err(Status::permission_denied(format!(
            "node {:?}: the caller's certificate is for {p}; an agent speaks only for the node its certificate names",
            node.as_str()
        ))),
        _ => Ok(()),
    }
}
