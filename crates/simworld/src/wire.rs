//! The datagrams between an agent and the leaders (UDP on the simulated network: they can
//! be lost, delayed, reordered and cut off like the real stream's messages, and while a
//! fault says so, duplicated: `Copies`). An agent sends a beat to every replica; only a
//! leader that a quorum confirms answers, with a grant.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_model::command::Observed;
use baton_rng::SplitMix64;
use serde::{Deserialize, Serialize};
use turmoil::net::UdpSocket;

/// Where a replica's leader listens for beats.
pub const LEADER_PORT: u16 = 9100;
/// Where an agent listens for grants.
pub const AGENT_PORT: u16 = 9200;
/// Bound on one datagram: a grant for a node lists at most its ranks, a beat at most
/// `MAX_OBSERVATIONS` and `MAX_LISTED`.
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;
/// Observations one beat carries; more wait for the next.
pub const MAX_OBSERVATIONS: usize = 64;
/// Ranks one beat lists as running here (a node of 8 GPUs runs far fewer).
pub const MAX_LISTED: usize = 256;

/// A rank a beat lists: it has processes on the node, or waits for its GPUs (the real
/// report's `Running`; `phase` is its `ReplicaPhase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub job: u64,
    pub attempt: u32,
    pub rank: u32,
    pub phase: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Beat {
    pub node: String,
    /// Which start of the agent sent it: sequence numbers restart with it.
    pub boot: u64,
    pub seq: u64,
    pub observations: Vec<Observed>,
    /// What runs here, as the real agent's report lists it: the leader finds strays and
    /// vanished replicas from it, as the server's gateway does.
    pub running: Vec<Listed>,
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

/// The most a duplicate may trail its original: a stale copy arrives after newer datagrams
/// (what a retried request or a second path does to the real stream's messages).
pub const MAX_COPY_DELAY_MS: u64 = 3_000;

/// Whether datagrams are duplicated now, shared by every sender and the fault schedule:
/// 0 for no, else the most a copy trails its original, in milliseconds.
#[derive(Debug, Clone, Default)]
pub struct Copies(Arc<AtomicU64>);

impl Copies {
    /// Copies from now on trail their originals by up to `max_delay_ms` (0: no copies).
    pub fn set(&self, max_delay_ms: u64) {
        self.0.store(max_delay_ms.min(MAX_COPY_DELAY_MS), Ordering::SeqCst);
    }

    /// Sends `bytes` to `to`; while copies are on, sends it again after a delay drawn from
    /// `salt` (which says which datagram this is, so that a seed replays). A send that
    /// finds no route is a lost datagram, as on a real network.
    pub async fn send(&self, sock: &Arc<UdpSocket>, bytes: Vec<u8>, to: SocketAddr, salt: u64) {
        let _ = sock.send_to(&bytes, to).await;
        let max_ms = self.0.load(Ordering::SeqCst);
        if max_ms == 0 {
            return;
        }
        let delay = Duration::from_millis(SplitMix64::new(salt).below(max_ms + 1));
        let sock = sock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = sock.send_to(&bytes, to).await;
        });
    }
}

/// A salt for `Copies::send` from what names one datagram.
pub fn salt(parts: &[u64], name: &str) -> u64 {
    let mut h = crate::history::Hasher::default();
    for p in parts {
        std::io::Write::write_all(&mut h, &p.to_le_bytes()).expect("hashing never fails");
    }
    std::io::Write::write_all(&mut h, name.as_bytes()).expect("hashing never fails");
    h.finish()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Datagrams `to` receives from `sends` sends, with copies trailing by up to `max_ms`,
    /// each with the simulated millisecond it arrived.
    fn received(max_ms: u64, sends: u64) -> Vec<(u64, u64)> {
        let mut sim = turmoil::Builder::new().rng_seed(1).simulation_duration(Duration::from_secs(20)).build();
        let got: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
        let seen = got.clone();
        sim.host("to", move || {
            let seen = seen.clone();
            async move {
                let sock = UdpSocket::bind(("0.0.0.0", AGENT_PORT)).await?;
                let mut buf = [0u8; 8];
                loop {
                    let (n, _) = sock.recv_from(&mut buf).await?;
                    let at = crate::now_ms();
                    seen.lock().unwrap().push((u64::from_le_bytes(buf[..n].try_into().unwrap()), at));
                }
            }
        });
        sim.client("from", async move {
            let copies = Copies::default();
            copies.set(max_ms);
            let sock = Arc::new(UdpSocket::bind(("0.0.0.0", LEADER_PORT)).await?);
            let to = SocketAddr::new(turmoil::lookup("to"), AGENT_PORT);
            for i in 0..sends {
                copies.send(&sock, i.to_le_bytes().to_vec(), to, salt(&[i], "from")).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(MAX_COPY_DELAY_MS + 500)).await;
            Ok(())
        });
        sim.run().unwrap();
        got.lock().unwrap().clone()
    }

    #[test]
    fn while_copies_are_on_every_datagram_arrives_twice_some_after_newer_ones() {
        assert_eq!(received(0, 10).len(), 10, "no copies when they are off");
        let got = received(2_000, 10);
        assert_eq!(got.len(), 20, "{got:?}");
        for i in 0..10 {
            assert_eq!(got.iter().filter(|(d, _)| *d == i).count(), 2, "{got:?}");
        }
        let order: Vec<u64> = got.iter().map(|(d, _)| *d).collect();
        assert!(order.windows(2).any(|w| w[1] < w[0]), "a copy arrives after a newer datagram: {order:?}");
        assert_eq!(received(2_000, 10), got, "one salt, one delay: the copies replay");
    }
}
