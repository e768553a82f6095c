//! Dialing a replica or an agent by "host:port" (or a full URI).

use std::time::Duration;

use baton_proto::tls::{REPLICA_HOST, Transport};
use tonic::transport::{Channel, Endpoint};

use crate::limits::CONNECT_TIMEOUT_MS;

/// An endpoint for `addr`; "host:port" means plain HTTP/2.
pub fn endpoint(addr: &str) -> Result<Endpoint, String> {
    let addr = addr.trim();
    if addr.is_empty() {
        return Err("empty address".into());
    }
    let uri = if addr.contains("://") { addr.to_string() } else { format!("http://{addr}") };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS)).tcp_nodelay(true))
        .map_err(|e| e.to_string())
}

/// Connects to a replica at once (so a dead replica is noticed here, not on the first
/// call). Under TLS the replica must prove it holds a replica certificate of this cluster's
/// CA, so directives come only from a replica, and this agent presents its own certificate.
pub async fn connect(addr: &str, transport: &Transport) -> Result<Channel, String> {
    let ep = match transport {
        Transport::Insecure => endpoint(addr)?,
        Transport::Tls(_) => transport
            .endpoint(addr, REPLICA_HOST)?
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .tcp_nodelay(true),
    };
    ep.connect().await.map_err(|e| format!("{e}: {}", source_chain(&e)))
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}
