//! Heartbeats, kept in the leader's memory only: the log records transitions (Ready ->
//! Lost), never the beats themselves. Only registered nodes are tracked (the gateway
//! refuses reports from others, and the leader drops nodes the state no longer has), so
//! the map is bounded by the model's node limit.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_model::name::Name;

#[derive(Default)]
pub struct Liveness {
    seen: Mutex<HashMap<Name, Instant>>,
}

impl Liveness {
    pub fn touch(&self, node: &Name) {
        self.lock().insert(node.clone(), Instant::now());
    }

    /// A new leader gives every node a full timeout to find it.
    pub fn reset(&self, nodes: &[Name]) {
        let now = Instant::now();
        let mut seen = self.lock();
        seen.clear();
        seen.extend(nodes.iter().map(|n| (n.clone(), now)));
    }

    /// Forgets every node not in `known`.
    pub fn retain(&self, known: &[Name]) {
        let known: HashSet<&Name> = known.iter().collect();
        self.lock().retain(|n, _| known.contains(n));
    }

    /// Nodes among `ready` not heard from within `timeout`.
    pub fn silent(&self, ready: &[Name], timeout: Duration) -> Vec<Name> {
        let now = Instant::now();
        let mut seen = self.lock();
        ready
            .iter()
            .filter(|n| {
                // A node registered since the reset starts its clock now.
                let last = *seen.entry((*n).clone()).or_insert(now);
                now.duration_since(last) > timeout
            })
            .cloned()
            .collect()
    }

    pub fn last_seen(&self, node: &Name) -> Option<Duration> {
        self.lock().get(node).map(|t| t.elapsed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Name, Instant>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
