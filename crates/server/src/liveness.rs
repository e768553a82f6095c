//! Heartbeats, kept in the leader's memory only: the log records transitions (Ready ->
//! Lost), never the beats themselves. Only registered nodes are tracked (the gateway
//! refuses reports from others, and the leader drops nodes the state no longer has), so
//! the map is bounded by the model's node limit.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_model::limits::MAX_NODES;
use baton_model::name::Name;

pub struct Liveness {
    seen: Mutex<HashMap<Name, Instant>>,
    /// Most names tracked at once.
    capacity: usize,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::with_capacity(MAX_NODES)
    }
}

impl Liveness {
    pub fn with_capacity(capacity: usize) -> Liveness {
        Liveness { seen: Mutex::new(HashMap::new()), capacity }
    }

    /// Records a heartbeat. Callers touch only registered nodes, which the model bounds by
    /// the same limit; the bound holds here even if a caller did not: a name past it is not
    /// tracked (and is never declared silent by this map).
    pub fn touch(&self, node: &Name) {
        let now = Instant::now();
        let mut seen = self.lock();
        if let Some(last) = seen.get_mut(node) {
            *last = now;
        } else if seen.len() < self.capacity {
            seen.insert(node.clone(), now);
        }
    }

    /// A new leader gives every node a full timeout to find it.
    pub fn reset(&self, nodes: &[Name]) {
        let now = Instant::now();
        let mut seen = self.lock();
        seen.clear();
        seen.extend(nodes.iter().take(self.capacity).map(|n| (n.clone(), now)));
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
                // A node registered since the reset starts its clock now (within the bound).
                let last = match seen.get(*n) {
                    Some(t) => *t,
                    None if seen.len() < self.capacity => *seen.entry((*n).clone()).or_insert(now),
                    None => now,
                };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_never_holds_more_names_than_its_bound() {
        let l = Liveness::with_capacity(3);
        for i in 0..10 {
            l.touch(&Name::lit(&format!("n{i}")));
        }
        assert_eq!(l.lock().len(), 3, "names past the bound must not be tracked");
        // A tracked node keeps being tracked; an untracked one is not heard of.
        assert!(l.last_seen(&Name::lit("n0")).is_some());
        assert!(l.last_seen(&Name::lit("n9")).is_none());
        // `silent` may not grow it either.
        let ready: Vec<Name> = (10..20).map(|i| Name::lit(&format!("n{i}"))).collect();
        l.silent(&ready, Duration::from_secs(60));
        assert_eq!(l.lock().len(), 3);
    }

    #[test]
    fn by_default_the_bound_is_the_models_node_limit() {
        assert_eq!(Liveness::default().capacity, baton_model::limits::MAX_NODES);
    }
}
