//! Heartbeats, kept in the leader's memory only: the log records transitions (Ready ->
//! Lost), never the beats themselves. Only registered nodes are tracked (the gateway
//! refuses reports from others, and the leader drops nodes the state no longer has), so
//! the map is bounded by the model's node limit.
//!
//! A node found silent is *fenced* until the leader has committed it lost: the gateway
//! grants it no lease meanwhile. Its agent may report again between the finding and the
//! commit (the leader declares many nodes in turn after a stall of its own), and a lease
//! granted then would let it run work the commit puts back in the queue for another node.
//!
//! [`Silences`] decides, on times it is given; [`Liveness`] is it on this process's clock.
//! The simulator's leader uses `Silences` on its simulated clock, and declares the silent
//! nodes lost by [`declare_all`] as the server's leader does: one liveness behaviour.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_model::limits::MAX_NODES;
use baton_model::name::Name;

use crate::clock::{Clock, ProcessClock};

/// The decisions, on times the caller gives (ms on one monotonic clock): which nodes are
/// silent, which are fenced. Pure, so the server's leader (`Liveness`, on its own clock) and
/// the simulator's leader (on a simulated, drifting clock) decide alike.
pub struct Silences {
    last_ms: HashMap<Name, u64>,
    /// Found silent, not yet known lost in the state: no lease (bounded by `last_ms`'s names).
    fenced: HashSet<Name>,
    /// Most names tracked at once.
    capacity: usize,
}

impl Default for Silences {
    fn default() -> Self {
        Silences::with_capacity(MAX_NODES)
    }
}

impl Silences {
    pub fn with_capacity(capacity: usize) -> Silences {
        Silences { last_ms: HashMap::new(), fenced: HashSet::new(), capacity }
    }

    /// Records a heartbeat. Callers touch only registered nodes, which the model bounds by
    /// the same limit; the bound holds here even if a caller did not: a name past it is not
    /// tracked (and is never declared silent here).
    pub fn touch(&mut self, node: &Name, now_ms: u64) {
        if let Some(last) = self.last_ms.get_mut(node) {
            *last = now_ms;
        } else if self.last_ms.len() < self.capacity {
            self.last_ms.insert(node.clone(), now_ms);
        }
    }

    /// A new leader gives every node a full timeout to find it.
    pub fn reset(&mut self, nodes: &[Name], now_ms: u64) {
        // What an earlier term found silent is committed lost or gone by the time a new
        // leader directs (it waits for every earlier commit).
        self.fenced.clear();
        self.last_ms.clear();
        self.last_ms.extend(nodes.iter().take(self.capacity).map(|n| (n.clone(), now_ms)));
    }

    /// Forgets every node not in `known`.
    pub fn retain(&mut self, known: &[Name]) {
        let known: HashSet<&Name> = known.iter().collect();
        self.last_ms.retain(|n, _| known.contains(n));
        self.fenced.retain(|n| known.contains(n));
    }

    /// Nodes among `ready` to declare lost: not heard from for more than `timeout_ms`, or
    /// found so before and not yet committed lost. Each is fenced (no lease) until
    /// [`Silences::declared`]; a fenced node no longer ready was committed lost, and may have
    /// leases again.
    pub fn silent(&mut self, ready: &[Name], now_ms: u64, timeout_ms: u64) -> Vec<Name> {
        if !self.fenced.is_empty() {
            let ready_set: HashSet<&Name> = ready.iter().collect();
            self.fenced.retain(|n| ready_set.contains(n));
        }
        let mut silent = Vec::new();
        for n in ready {
            if self.fenced.contains(n) {
                silent.push(n.clone());
                continue;
            }
            // A node registered since the reset starts its clock now (within the bound).
            let last = match self.last_ms.get(n) {
                Some(t) => *t,
                None if self.last_ms.len() < self.capacity => *self.last_ms.entry(n.clone()).or_insert(now_ms),
                None => now_ms,
            };
            if now_ms.saturating_sub(last) > timeout_ms {
                silent.push(n.clone());
            }
        }
        self.fenced.extend(silent.iter().cloned());
        silent
    }

    /// `node` is committed lost: leases may be granted again (its report makes it ready).
    pub fn declared(&mut self, node: &Name) {
        self.fenced.remove(node);
    }

    /// Whether `node` is being declared lost: it gets no lease.
    pub fn fenced(&self, node: &Name) -> bool {
        self.fenced.contains(node)
    }

    /// When `node` was last heard from, if it is tracked.
    pub fn last_ms(&self, node: &Name) -> Option<u64> {
        self.last_ms.get(node).copied()
    }
}

/// Silent nodes declared lost at once. Their writes share raft entries (the write batcher);
/// one after another, each waited for a commit of its own: half a second each on a loaded
/// machine, minutes for a few hundred nodes, while the round (and the next cycle) waited.
pub const MAX_DECLARATIONS_IN_FLIGHT: usize = 64;

/// Declares the `silent` nodes lost, up to [`MAX_DECLARATIONS_IN_FLIGHT`] at once, each
/// only while `leading()` (the round's term, and not shutting down): a leader deposed during
/// its round stops there, since its agents went to the new leader and every node it knew
/// soon looks silent to it (a 50,000-node run went on for minutes, one refused write per
/// node, and held up the replica's shutdown). `write_lost` commits a node's loss and says
/// whether it is known committed; then, or once the state no longer has it `ready`, the
/// node is `declared` (its fence lifts). A write not known to commit leaves it fenced, and
/// the next round declares it again. The server's leader and the simulator's declare alike.
pub async fn declare_all<W, F>(
    silent: Vec<Name>,
    leading: impl Fn() -> bool,
    write_lost: W,
    ready: impl Fn(&Name) -> bool,
    declared: impl Fn(&Name),
) where
    W: Fn(Name) -> F,
    F: std::future::Future<Output = bool>,
{
    use futures::StreamExt;
    let declare = |node: Name| {
        let (leading, write_lost, ready, declared) = (&leading, &write_lost, &ready, &declared);
        async move {
            if !leading() {
                return;
            }
            if write_lost(node.clone()).await || !ready(&node) {
                declared(&node);
            }
        }
    };
    futures::stream::iter(silent).map(declare).buffer_unordered(MAX_DECLARATIONS_IN_FLIGHT).collect::<()>().await;
}

/// [`Silences`] on this process's monotonic clock, shared by the gateway and the leader loop.
pub struct Liveness {
    silences: Mutex<Silences>,
    clock: ProcessClock,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::with_capacity(MAX_NODES)
    }
}

impl Liveness {
    pub fn with_capacity(capacity: usize) -> Liveness {
        Liveness { silences: Mutex::new(Silences::with_capacity(capacity)), clock: ProcessClock::default() }
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn touch(&self, node: &Name) {
        let now_ms = self.now_ms();
        self.lock().touch(node, now_ms);
    }

    pub fn reset(&self, nodes: &[Name]) {
        let now_ms = self.now_ms();
        self.lock().reset(nodes, now_ms);
    }

    pub fn retain(&self, known: &[Name]) {
        self.lock().retain(known);
    }

    pub fn silent(&self, ready: &[Name], timeout: Duration) -> Vec<Name> {
        let now_ms = self.now_ms();
        self.lock().silent(ready, now_ms, timeout.as_millis() as u64)
    }

    pub fn declared(&self, node: &Name) {
        self.lock().declared(node);
    }

    pub fn fenced(&self, node: &Name) -> bool {
        self.lock().fenced(node)
    }

    pub fn last_seen(&self, node: &Name) -> Option<Duration> {
        let last_ms = self.lock().last_ms(node)?;
        Some(Duration::from_millis(self.now_ms().saturating_sub(last_ms)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Silences> {
        self.silences.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<Name> {
        names.iter().map(|n| Name::lit(n)).collect()
    }

    #[test]
    fn the_map_never_holds_more_names_than_its_bound() {
        let mut l = Silences::with_capacity(3);
        for i in 0..10 {
            l.touch(&Name::lit(&format!("n{i}")), 0);
        }
        assert_eq!(l.last_ms.len(), 3, "names past the bound must not be tracked");
        // A tracked node keeps being tracked; an untracked one is not heard of.
        assert!(l.last_ms(&Name::lit("n0")).is_some());
        assert!(l.last_ms(&Name::lit("n9")).is_none());
        // `silent` may not grow it either.
        let ready: Vec<Name> = (10..20).map(|i| Name::lit(&format!("n{i}"))).collect();
        l.silent(&ready, 0, 60_000);
        assert_eq!(l.last_ms.len(), 3);
    }

    /// A node found silent may report again before the leader has committed it lost (the
    /// leader declares many nodes in turn after a stall of its own): it gets no lease until
    /// the commit, and is declared again if that did not commit. Found by the simulator
    /// (seed 13 of 10 minutes: a node granted a lease with a job 20 ms before the commit
    /// that requeued the job, which then ran twice).
    #[test]
    fn a_node_found_silent_is_fenced_until_it_is_committed_lost() {
        let mut l = Silences::default();
        let ready = names(&["n1", "n2"]);
        let (n1, n2) = (&ready[0], &ready[1]);
        l.reset(&ready, 0);
        l.touch(n2, 20);
        assert_eq!(l.silent(&ready, 20, 10), vec![n1.clone()]);
        // It reports again: still fenced, and still to declare (its commit failed).
        l.touch(n1, 21);
        assert!(l.fenced(n1) && !l.fenced(n2));
        assert_eq!(l.silent(&ready, 21, 60_000), vec![n1.clone()]);
        // Committed lost: leases again.
        l.declared(n1);
        assert!(!l.fenced(n1));
        assert!(l.silent(&ready, 21, 60_000).is_empty());
        // A write that timed out but committed: the node is no longer ready, nor fenced.
        assert_eq!(l.silent(&ready, 41, 10), ready);
        // n1 is committed lost (no longer ready): it is let go; n2 is still to declare.
        assert_eq!(l.silent(std::slice::from_ref(n2), 41, 60_000), vec![n2.clone()]);
        assert!(!l.fenced(n1));
    }

    /// Silent means longer than the timeout, on the caller's clock; a node registered after
    /// the reset starts its silence when first looked at.
    #[test]
    fn a_node_is_silent_only_past_the_timeout_and_a_new_one_starts_when_first_seen() {
        let mut l = Silences::default();
        let ready = names(&["n1", "n2"]);
        l.reset(&ready[..1], 1_000);
        assert!(l.silent(&ready, 6_000, 5_000).is_empty(), "n1 at exactly the timeout, n2 new");
        assert_eq!(l.silent(&ready, 6_001, 5_000), names(&["n1"]));
        assert_eq!(l.silent(&ready, 11_001, 5_000), ready, "n2's clock began at 6,000");
    }

    #[test]
    fn the_shell_counts_on_its_own_clock() {
        let l = Liveness::default();
        let n1 = Name::lit("n1");
        l.reset(std::slice::from_ref(&n1));
        assert!(l.last_seen(&n1).is_some_and(|d| d < Duration::from_secs(60)));
        assert!(l.silent(std::slice::from_ref(&n1), Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn by_default_the_bound_is_the_models_node_limit() {
        assert_eq!(Silences::default().capacity, baton_model::limits::MAX_NODES);
    }
}
