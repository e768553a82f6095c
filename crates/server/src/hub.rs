//! The leader's side of the agent connections: the latest desired assignments per node
//! (one `watch` channel each, so a slow agent only ever gets the newest state, never a
//! backlog) and the term this replica leads in (streams end when it stops leading).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use baton_model::name::Name;
use baton_proto::v1::Assignment;
use tokio::sync::watch;

pub type Assignments = Arc<Vec<Assignment>>;

pub struct Hub {
    nodes: Mutex<HashMap<Name, watch::Sender<Assignments>>>,
    /// `Some(term)` while this replica leads.
    leading: watch::Sender<Option<u64>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub { nodes: Mutex::new(HashMap::new()), leading: watch::channel(None).0 }
    }
}

impl Hub {
    pub fn set_leading(&self, term: Option<u64>) {
        self.leading.send_replace(term);
    }

    pub fn leading(&self) -> watch::Receiver<Option<u64>> {
        self.leading.subscribe()
    }

    pub fn subscribe(&self, node: &Name) -> watch::Receiver<Assignments> {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes.entry(node.clone()).or_insert_with(|| watch::channel(Arc::new(Vec::new())).0).subscribe()
    }

    /// Sets every known node's assignments (`nodes` lists them all; those missing from
    /// `desired` get none). Agents are woken only where something other than the remaining
    /// grace changed.
    pub fn publish(&self, nodes: &[Name], mut desired: BTreeMap<Name, Vec<Assignment>>) {
        let mut map = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|name, tx| nodes.contains(name) || tx.receiver_count() > 0);
        for name in nodes {
            let next = desired.remove(name).unwrap_or_default();
            let tx = map.entry(name.clone()).or_insert_with(|| watch::channel(Arc::new(Vec::new())).0);
            // The value always takes the fresh grace figures; only other changes wake agents.
            tx.send_if_modified(|cur| {
                let changed = !same_but_grace(cur, &next);
                *cur = Arc::new(next);
                changed
            });
        }
    }

    /// The assignments a node has now (with fresh grace figures for resends).
    pub fn current(&self, node: &Name) -> Assignments {
        let map = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(node).map(|tx| tx.borrow().clone()).unwrap_or_default()
    }
}

fn same_but_grace(a: &[Assignment], b: &[Assignment]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Assignment { grace_ms: y.grace_ms, ..x.clone() } == *y)
}
