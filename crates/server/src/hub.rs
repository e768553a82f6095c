//! The leader's side of the agent connections: the latest desired assignments per node
//! (one `watch` channel each, so a slow agent only ever gets the newest state, never a
//! backlog) and the term this replica leads in (streams end when it stops leading).
//!
//! Every list is stamped with the term that published it, and a stream of term T serves
//! only lists published in T: a new leader serves nothing (the agent holds what it runs)
//! until its first publish, never an empty default nor a list of an earlier term.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use baton_model::name::Name;
use baton_proto::v1::Assignment;
use tokio::sync::watch;

pub type Assignments = Arc<Vec<Assignment>>;

/// A node's assignments, the term they were published in, and how new the state of the
/// latest round that published them was (`State::applied`).
#[derive(Clone)]
pub struct Published {
    pub term: u64,
    pub state_index: u64,
    pub assignments: Assignments,
}

type Slot = watch::Sender<Option<Published>>;

pub struct Hub {
    nodes: Mutex<HashMap<Name, Slot>>,
    /// `Some(term)` while this replica leads and may direct agents.
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

    /// Subscribes to `node`'s directives unless `max` streams already follow them here.
    pub fn subscribe_bounded(&self, node: &Name, max: usize) -> Option<watch::Receiver<Option<Published>>> {
        let mut nodes = self.lock();
        let tx = nodes.entry(node.clone()).or_insert_with(|| watch::channel(None).0);
        (tx.receiver_count() < max).then(|| tx.subscribe())
    }

    /// Sets every known node's assignments for `term`, built from a state that had applied
    /// `state_index` commands (`nodes` lists them all; those missing from `desired` get
    /// none). Agents are woken only where something changed; an unchanged list takes the
    /// newer `state_index` quietly, for the next time the list is sent (asked, or rarely).
    pub fn publish(&self, term: u64, state_index: u64, nodes: &[Name], mut desired: BTreeMap<Name, Vec<Assignment>>) {
        let mut map = self.lock();
        let known: HashSet<&Name> = nodes.iter().collect();
        map.retain(|name, tx| known.contains(name) || tx.receiver_count() > 0);
        for name in nodes {
            let next = desired.remove(name).unwrap_or_default();
            let tx = map.entry(name.clone()).or_insert_with(|| watch::channel(None).0);
            tx.send_if_modified(|cur| match cur {
                Some(p) if p.term == term && *p.assignments == next => {
                    p.state_index = p.state_index.max(state_index);
                    false
                }
                _ => {
                    *cur = Some(Published { term, state_index, assignments: Arc::new(next) });
                    true
                }
            });
        }
    }

    /// Wakes `node`'s stream, which sends what it has again (its agent asked for it).
    pub fn nudge(&self, node: &Name) {
        if let Some(tx) = self.lock().get(node) {
            tx.send_modify(|_| {});
        }
    }

    /// What `node` has in `term`; `None` until this term has published it.
    pub fn current(&self, node: &Name, term: u64) -> Option<Published> {
        let map = self.lock();
        let slot = map.get(node)?.borrow();
        slot.as_ref().filter(|p| p.term == term).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Name, Slot>> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job_id: u64) -> Assignment {
        Assignment { job_id, job: format!("j{job_id}"), attempt: 1, ..Default::default() }
    }

    #[test]
    fn a_new_term_serves_nothing_until_it_publishes() {
        let hub = Hub::default();
        let n1 = Name::lit("n1");
        hub.set_leading(Some(1));
        hub.publish(1, 0, std::slice::from_ref(&n1), BTreeMap::from([(n1.clone(), vec![run(7)])]));
        hub.set_leading(None);
        hub.set_leading(Some(3));
        // Neither the list of term 1 nor an empty default ("run nothing") may be served.
        assert!(hub.current(&n1, 3).is_none(), "term 3 serves a list before publishing");
        assert!(hub.current(&Name::lit("n2"), 3).is_none(), "an unpublished node gets no default");
        hub.publish(3, 0, std::slice::from_ref(&n1), BTreeMap::new());
        assert_eq!(hub.current(&n1, 3).map(|p| p.assignments.len()), Some(0), "once published, an empty list is meant");
    }

    #[test]
    fn a_republish_in_a_new_term_wakes_the_stream_even_when_the_list_is_equal() {
        let hub = Hub::default();
        let n1 = Name::lit("n1");
        let mut rx = hub.subscribe_bounded(&n1, 1).unwrap();
        hub.publish(1, 0, std::slice::from_ref(&n1), BTreeMap::from([(n1.clone(), vec![run(7)])]));
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        hub.publish(1, 0, std::slice::from_ref(&n1), BTreeMap::from([(n1.clone(), vec![run(7)])]));
        assert!(!rx.has_changed().unwrap(), "an equal list in the same term wakes nobody");
        hub.publish(2, 0, std::slice::from_ref(&n1), BTreeMap::from([(n1.clone(), vec![run(7)])]));
        assert!(rx.has_changed().unwrap());
    }

    /// Resends carry how new the state of the latest round was, also when the list did not
    /// change: an agent whose lease was renewed from a state that new waits for one.
    #[test]
    fn an_unchanged_list_takes_the_newer_state_index_without_waking_anyone() {
        let hub = Hub::default();
        let n1 = Name::lit("n1");
        let mut rx = hub.subscribe_bounded(&n1, 1).unwrap();
        let list = || BTreeMap::from([(n1.clone(), vec![run(7)])]);
        hub.publish(1, 5, std::slice::from_ref(&n1), list());
        rx.mark_unchanged();
        hub.publish(1, 9, std::slice::from_ref(&n1), list());
        assert!(!rx.has_changed().unwrap());
        assert_eq!(hub.current(&n1, 1).map(|p| p.state_index), Some(9));
        // A round that read an older state (none does, but rounds may overlap a failover)
        // never takes it back.
        hub.publish(1, 7, std::slice::from_ref(&n1), list());
        assert_eq!(hub.current(&n1, 1).map(|p| p.state_index), Some(9));
    }
}
