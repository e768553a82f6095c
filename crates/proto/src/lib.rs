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

/// The longest an agent takes, once its lease has run out, to have stopped everything its
/// node runs (`S` of the timing argument, docs/protocol.md): its watchdog's slack and poll
/// and the lease stop's grace. The leader refuses lease settings that leave no room for it;
/// the agent's own bound is checked against it at compile time.
pub const AGENT_STOP_BOUND_MS: u64 = 1_500;

/// The bound on how much faster an agent's clock may run than the leader's over a lease, as
/// a divisor: 1/100 (1 %), far above what any quartz oscillator drifts (100 ppm).
pub const CLOCK_DRIFT_DIVISOR: u64 = 100;

/// Whether a lease of `lease_ms` leaves an agent whose stop takes up to `stop_ms` time to
/// stop its work before the leader's `heartbeat_timeout_ms` declares its node lost:
/// `L + S + D < T`, the timing argument of docs/protocol.md ("Agent lease and watchdog").
/// The leader checks its settings with [`AGENT_STOP_BOUND_MS`], an agent each directive with
/// its own bound. `Err` names the sum and its parts.
pub fn lease_fits(lease_ms: u64, stop_ms: u64, heartbeat_timeout_ms: u64) -> Result<(), String> {
    let drift_ms = lease_ms.saturating_add(stop_ms) / CLOCK_DRIFT_DIVISOR;
    let total = lease_ms.saturating_add(stop_ms).saturating_add(drift_ms);
    if total < heartbeat_timeout_ms {
        return Ok(());
    }
    Err(format!(
        "lease_ms ({lease_ms}) + the agents' stop bound ({stop_ms} ms) + clock drift ({drift_ms} ms) = {total} ms \
         must be below heartbeat_timeout_ms ({heartbeat_timeout_ms}): an agent whose lease ran out must have \
         stopped its work before its node is declared lost and its jobs placed elsewhere"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_names_every_part() {
        assert!(lease_fits(2_000, 1_000, 5_000).is_ok());
        // 2000 + 3000 + 1 % of their sum = 5050.
        let e = lease_fits(2_000, 3_000, 5_000).unwrap_err();
        assert!(e.contains("lease_ms (2000)") && e.contains("heartbeat_timeout_ms (5000)"), "{e}");
        assert!(
            e.contains("stop bound (3000 ms)") && e.contains("clock drift (50 ms)") && e.contains("5050 ms"),
            "{e}"
        );
        assert!(lease_fits(u64::MAX, 1, u64::MAX).is_err());
    }
}

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
pub mod http;
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
