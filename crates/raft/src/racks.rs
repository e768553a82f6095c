//! Each member's rack (`baton server --rack`), as the member itself says in its Identify
//! answer. Asked in the background, so that `cluster info` never waits on a replica that
//! does not answer: it shows what was last heard, or that nothing was.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::net::peers::Peers;
use crate::types::{NodeId, Raft};

/// How often members whose rack is not known yet are asked.
const ASK_EVERY_MS: u64 = 1_000;
/// Every this many rounds, members whose rack is known are asked again (a replica restarted
/// with another `--rack`).
const REFRESH_ROUNDS: u64 = 30;
/// Longest rack name accepted (the CLI refuses longer ones; this bounds what a peer sends).
pub const MAX_RACK_BYTES: usize = 63;

/// What each member said its rack is, with the address it said it at.
#[derive(Default)]
pub(crate) struct Racks {
    heard: Mutex<BTreeMap<NodeId, (String, String)>>,
}

impl Racks {
    /// Member `id`'s rack if it answered at `addr` (its address in the membership now).
    pub(crate) fn get(&self, id: NodeId, addr: &str) -> Option<String> {
        let heard = self.heard.lock().unwrap_or_else(PoisonError::into_inner);
        heard.get(&id).filter(|(at, _)| at == addr).map(|(_, rack)| rack.clone())
    }

    fn set(&self, id: NodeId, addr: &str, rack: String) {
        self.heard.lock().unwrap_or_else(PoisonError::into_inner).insert(id, (addr.to_string(), rack));
    }

    /// Forgets replicas that are no longer members.
    fn keep_only(&self, members: &BTreeMap<NodeId, String>) {
        self.heard.lock().unwrap_or_else(PoisonError::into_inner).retain(|id, _| members.contains_key(id));
    }
}

/// Asks members for their racks until the replica shuts down (its metrics channel closes).
pub(crate) fn start(raft: Raft, racks: Arc<Racks>, peers: Arc<Peers>, self_id: NodeId) {
    let mut metrics = raft.metrics();
    tokio::spawn(async move {
        let every = Duration::from_millis(ASK_EVERY_MS);
        for round in 1u64.. {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
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
            let refresh = round % REFRESH_ROUNDS == 0;
            let asks = members
                .iter()
                .filter(|(id, addr)| **id != self_id && (refresh || racks.get(**id, addr).is_none()))
                .map(|(id, addr)| ask(&racks, &peers, *id, addr, every));
            futures::future::join_all(asks).await;
        }
    });
}

async fn ask(racks: &Racks, peers: &Peers, id: NodeId, addr: &str, timeout: Duration) {
    match peers.identify(addr, timeout).await {
        Ok(who) if who.node_id == id && who.cluster_id == peers.cluster_id && who.rack.len() <= MAX_RACK_BYTES => {
            racks.set(id, addr, who.rack);
        }
        Ok(who) => tracing::debug!(id, addr, found = who.node_id, "member's identity does not match; rack unknown"),
        Err(e) => tracing::debug!(id, addr, error = %e, "member did not say its rack"),
    }
}
