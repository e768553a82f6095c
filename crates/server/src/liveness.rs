//! Heartbeats, kept in the leader's memory only: the log records transitions (Ready ->
//! Lost), never the beats themselves. Only registered nodes are tracked (the gateway
//! refuses reports from others, and the leader drops nodes the state no longer has), so
//! the map is bounded by the model's node limit.
//!
//! A node found silent is *fenced* until the leader has committed it lost: the gateway
//! grants it no lease meanwhile. Its agent may report again between the finding and the
//! commit (the leader declares many nodes in turn after a stall of its own), and a lease
//! granted then would let it run work the commit puts back in the queue for another node.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_model::limits::MAX_NODES;
use baton_model::name::Name;

pub struct Liveness {
    seen: Mutex<Seen>,
    /// Most names tracked at once.
    capacity: usize,
}

#[derive(Default)]
struct Seen {
    last: HashMap<Name, Instant>,
    /// Found silent, not yet known lost in the state: no lease (bounded by `last`'s names).
    fenced: HashSet<Name>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::with_capacity(MAX_NODES)
    }
}

impl Liveness {
    pub fn with_capacity(capacity: usize) -> Liveness {
        Liveness { seen: Mutex::new(Seen::default()), capacity }
    }

    /// Records a heartbeat. Callers touch only registered nodes, which the model bounds by
    /// the same limit; the bound holds here even if a caller did not: a name past it is not
    /// tracked (and is never declared silent by this map).
    pub fn touch(&self, node: &Name) {
        let now = Instant::now();
        let seen = &mut self.lock().last;
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
        // What an earlier term found silent is committed lost or gone by the time a new
        // leader directs (it waits for every earlier commit).
        seen.fenced.clear();
        seen.last.clear();
        seen.last.extend(nodes.iter().take(self.capacity).map(|n| (n.clone(), now)));
    }

    /// Forgets every node not in `known`.
    pub fn retain(&self, known: &[Name]) {
        let known: HashSet<&Name> = known.iter().collect();
        let mut seen = self.lock();
        seen.last.retain(|n, _| known.contains(n));
        seen.fenced.retain(|n| known.contains(n));
    }

    /// Nodes among `ready` to declare lost: not heard from within `timeout`, or found so
    /// before and not yet committed lost. Each is fenced (no lease) until [`Liveness::declared`];
    /// a fenced node no longer ready was committed lost, and may have leases again.
    pub fn silent(&self, ready: &[Name], timeout: Duration) -> Vec<Name> {
        let now = Instant::now();
        let mut seen = self.lock();
        if !seen.fenced.is_empty() {
            let ready_set: HashSet<&Name> = ready.iter().collect();
            seen.fenced.retain(|n| ready_set.contains(n));
        }
        let silent: Vec<Name> = ready
            .iter()
            .filter(|n| {
                if seen.fenced.contains(*n) {
                    return true;
                }
                // A node registered since the reset starts its clock now (within the bound).
                let last = match seen.last.get(*n) {
                    Some(t) => *t,
                    None if seen.last.len() < self.capacity => *seen.last.entry((*n).clone()).or_insert(now),
                    None => now,
                };
                now.duration_since(last) > timeout
            })
            .cloned()
            .collect();
        seen.fenced.extend(silent.iter().cloned());
        silent
    }

    /// `node` is committed lost: leases may be granted again (its report makes it ready).
    pub fn declared(&self, node: &Name) {
        self.lock().fenced.remove(node);
    }

    /// Whether `node` is being declared lost: it gets no lease.
    pub fn fenced(&self, node: &Name) -> bool {
        self.lock().fenced.contains(node)
    }

    pub fn last_seen(&self, node: &Name) -> Option<Duration> {
        self.lock().last.get(node).map(|t| t.elapsed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
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
        assert_eq!(l.lock().last.len(), 3, "names past the bound must not be tracked");
        // A tracked node keeps being tracked; an untracked one is not heard of.
        assert!(l.last_seen(&Name::lit("n0")).is_some());
        assert!(l.last_seen(&Name::lit("n9")).is_none());
        // `silent` may not grow it either.
        let ready: Vec<Name> = (10..20).map(|i| Name::lit(&format!("n{i}"))).collect();
        l.silent(&ready, Duration::from_secs(60));
        assert_eq!(l.lock().last.len(), 3);
    }

    /// A node found silent may report again before the leader has committed it lost (the
    /// leader declares many nodes in turn after a stall of its own): it gets no lease until
    /// the commit, and is declared again if that did not commit. Found by the simulator
    /// (seed 13 of 10 minutes: a node granted a lease with a job 20 ms before the commit
    /// that requeued the job, which then ran twice).
    #[test]
    fn a_node_found_silent_is_fenced_until_it_is_committed_lost() {
        let l = Liveness::default();
        let (n1, n2) = (Name::lit("n1"), Name::lit("n2"));
        l.reset(&[n1.clone(), n2.clone()]);
        let ready = [n1.clone(), n2.clone()];
        std::thread::sleep(Duration::from_millis(20));
        l.touch(&n2);
        assert_eq!(l.silent(&ready, Duration::from_millis(10)), vec![n1.clone()]);
        // It reports again: still fenced, and still to declare (its commit failed).
        l.touch(&n1);
        assert!(l.fenced(&n1) && !l.fenced(&n2));
        assert_eq!(l.silent(&ready, Duration::from_secs(60)), vec![n1.clone()]);
        // Committed lost: leases again.
        l.declared(&n1);
        assert!(!l.fenced(&n1));
        assert!(l.silent(&ready, Duration::from_secs(60)).is_empty());
        // A write that timed out but committed: the node is no longer ready, nor fenced.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(l.silent(&ready, Duration::from_millis(10)), ready.to_vec());
        // n1 is committed lost (no longer ready): it is let go; n2 is still to declare.
        assert_eq!(l.silent(std::slice::from_ref(&n2), Duration::from_secs(60)), vec![n2.clone()]);
        assert!(!l.fenced(&n1));
    }

    #[test]
    fn by_default_the_bound_is_the_models_node_limit() {
        assert_eq!(Liveness::default().capacity, baton_model::limits::MAX_NODES);
    }
}
