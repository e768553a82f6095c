//! Who may call which service of a replica under mutual TLS. The certificate's role and
//! name (see `baton_proto::tls`) are the caller's identity: raft traffic needs a replica
//! certificate, the agent gateway an agent certificate naming the node it speaks for, and
//! the client API any certificate of the cluster's CA (user tokens and roles refine it).
//! Under `--insecure` nothing is checked: the operator chose to trust the network.

use std::time::Duration;

use baton_model::name::Name;
use baton_model::node::NodeSpec;
use baton_proto::tls::{NodeShape, PeerId, Role, Transport};
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

/// Holds an attaching node to what its agent's certificate fixes (`shape`: its pool, rack
/// and the most of each resource) and, where the certificate fixes no pool or rack, to the
/// pool and rack the node is registered with (`registered`): a stolen agent certificate can
/// neither move its node into another pool or rack nor make it larger than the operator
/// said. A node may always declare less (a GPU fallen off the bus).
pub fn check_shape(shape: Option<&NodeShape>, spec: &NodeSpec, registered: Option<&NodeSpec>) -> Result<(), Status> {
    let node = spec.name.as_str();
    let refuse = |what: String| Err(Status::permission_denied(format!("node {node:?}: {what}")));
    let pool = Some(spec.pool.as_str());
    let rack = spec.rack.as_ref().map(|r| r.as_str());
    for (what, declared, fixed, was) in [
        ("pool", pool, shape.and_then(|s| s.pool.as_deref()), registered.map(|r| Some(r.pool.as_str()))),
        ("rack", rack, shape.and_then(|s| s.rack.as_deref()), registered.map(|r| r.rack.as_ref().map(|x| x.as_str()))),
    ] {
        match (fixed, was) {
            (Some(f), _) if Some(f) != declared => {
                return refuse(format!("it attached with {what} {declared:?}; its certificate fixes {what} {f:?}"));
            }
            (None, Some(w)) if w != declared => {
                return refuse(format!(
                    "it is registered with {what} {w:?} and attached with {what} {declared:?}; a node's pool and rack \
                     change only with a certificate that names them (`baton tls cert create --agent {node} --pool P --rack R`)"
                ));
            }
            _ => {}
        }
    }
    if let Some(fixed) = shape.and_then(|s| s.labels.as_ref())
        && let Some((k, v)) = spec.labels.iter().find(|(k, v)| fixed.get(*k) != Some(*v))
    {
        let allowed: Vec<String> = fixed.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return refuse(format!(
            "it declared label {k}={v}; its certificate allows only the labels [{}]",
            allowed.join(", ")
        ));
    }
    for (resource, max) in shape.iter().flat_map(|s| s.max.iter()) {
        let declared = spec.resources.get(resource);
        if declared > *max {
            return refuse(format!(
                "it declared {declared} of {resource}; its certificate allows at most {max} (in the resource's smallest unit)"
            ));
        }
    }
    Ok(())
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
