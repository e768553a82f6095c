//! What each member says of itself in its Identify answer: its rack (`baton server --rack`),
//! the newest data format it reads and its build version. Asked in the background, so that
//! `cluster info` never waits on a replica that does not answer: it shows what was last
//! heard, or that nothing was. The leader's format gate ([`baton_model::format`]) reads the
//! formats from here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_model::format::UNREPORTED_FORMAT;
use tokio::sync::Notify;

use crate::net::peers::Peers;
use crate::types::{NodeId, Raft};

/// How often every member is asked: a replica restarted on another build (or with another
/// `--max-format` or `--rack`) is seen within about this long. One small call per member.
const ASK_EVERY_MS: u64 = 1_000;
/// Longest rack name accepted (the CLI refuses longer ones; this bounds what a peer sends).
pub const MAX_RACK_BYTES: usize = 63;
/// Longest build version kept from a peer's answer.
pub const MAX_VERSION_BYTES: usize = 64;

/// What a member said of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heard {
    /// The address it answered at (its address in the membership then).
    addr: String,
    pub(crate) rack: String,
    /// The newest data format it reads; [`UNREPORTED_FORMAT`] for a build that does not say.
    pub(crate) format: u32,
    /// Its build version; empty for a build that does not say.
    pub(crate) version: String,
}

/// What each member said, with the address it said it at.
#[derive(Default)]
pub(crate) struct Racks {
    heard: Mutex<BTreeMap<NodeId, Heard>>,
    /// Woken by a write waiting for a member's format, so the asking does not wait a round.
    wake: Notify,
}

impl Racks {
    /// What member `id` said if it answered at `addr` (its address in the membership now).
    pub(crate) fn get(&self, id: NodeId, addr: &str) -> Option<Heard> {
        let heard = self.heard.lock().unwrap_or_else(PoisonError::into_inner);
        heard.get(&id).filter(|h| h.addr == addr).cloned()
    }

    fn set(&self, id: NodeId, heard: Heard) {
        self.heard.lock().unwrap_or_else(PoisonError::into_inner).insert(id, heard);
    }

    /// Forgets replicas that are no longer members.
    fn keep_only(&self, members: &BTreeMap<NodeId, String>) {
        self.heard.lock().unwrap_or_else(PoisonError::into_inner).retain(|id, _| members.contains_key(id));
    }

    /// Asks the members not heard from now, rather than at the next round.
    pub(crate) fn ask_now(&self) {
        self.wake.notify_one();
    }
}

/// Asks members about themselves until the replica shuts down (its metrics channel closes).
pub(crate) fn start(raft: Raft, racks: Arc<Racks>, peers: Arc<Peers>, self_id: NodeId) {
    let mut metrics = raft.metrics();
    tokio::spawn(async move {
        let every = Duration::from_millis(ASK_EVERY_MS);
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = racks.wake.notified() => {}
                closed = crate::campaign::closed(&mut metrics) => if closed { return },
            }
            let members: BTreeMap<NodeId, String> = {
                let m = raft.metrics();
                let m = m.borrow();
                m.membership_config
                    .membership()
                    .nodes()
                    .map(|(id, n)| (*id, crate::addrs::Addrs::parse(&n.addr).peer))
                    .collect()
            };
            racks.keep_only(&members);
            let asks = members
                .iter()
                .filter(|(id, _)| **id != self_id)
                .map(|(id, addr)| ask(&racks, &peers, *id, addr, every));
            futures::future::join_all(asks).await;
        }
    });
}

async fn ask(racks: &Racks, peers: &Peers, id: NodeId, addr: &str, timeout: Duration) {
    match peers.identify(addr, timeout).await {
        Ok(who) if who.node_id == id && who.cluster_id == peers.cluster_id && who.rack.len() <= MAX_RACK_BYTES => {
            // 0: a build from before replicas said their format.
            let format = if who.max_format == 0 { UNREPORTED_FORMAT } else { who.max_format };
            let mut version = who.version;
            if version.len() > MAX_VERSION_BYTES {
                version = "?".into();
            }
            racks.set(id, Heard { addr: addr.to_string(), rack: who.rack, format, version });
        }
        Ok(who) => tracing::debug!(id, addr, found = who.node_id, "member's identity does not match; rack unknown"),
        Err(e) => {
            tracing::debug!(id, addr, error = %e, "member did not say its rack");
        }
    }
}
