//! The datagrams between an agent and the leaders (UDP on the simulated network: they can
//! be lost, delayed and cut off like the real stream's messages). An agent sends a beat to
//! every replica; only a leader that a quorum confirms answers, with a grant.

use baton_model::command::Observed;
use serde::{Deserialize, Serialize};

/// Where a replica's leader listens for beats.
pub const LEADER_PORT: u16 = 9100;
/// Where an agent listens for grants.
pub const AGENT_PORT: u16 = 9200;
/// Bound on one datagram: a grant for a node lists at most its ranks, a beat at most
/// `MAX_OBSERVATIONS`.
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;
/// Observations one beat carries; more wait for the next.
pub const MAX_OBSERVATIONS: usize = 64;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Beat {
    pub node: String,
    /// Which start of the agent sent it: sequence numbers restart with it.
    pub boot: u64,
    pub seq: u64,
    pub observations: Vec<Observed>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Grant {
    pub term: u64,
    pub leader: u64,
    pub boot: u64,
    /// The beat this answers: the lease counts from when it was sent.
    pub seq: u64,
    /// Every observation sent in a beat up to this one is committed.
    pub acked_seq: u64,
    pub lease_ms: u64,
    /// The node's directive (`baton_proto::v1::Directive`, protobuf), as the real leader
    /// sends it: the agent reconciles it with the real agent's rules (`baton_agent::reconcile`).
    pub directive: Vec<u8>,
}

pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    serde_json::to_vec(m).expect("wire messages always encode")
}

pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Option<T> {
    serde_json::from_slice(b).ok()
}
