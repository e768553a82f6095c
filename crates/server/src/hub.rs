//! The leader's side of the agent connections: the latest desired assignments per node
//! (one `watch` channel each, so a slow agent only ever gets the newest state, never a
//! backlog) and the term this replica leads in (streams end when it stops leading).
//!
//! Every list is stamped with the term that published it, and a stream of term T serves
//! only lists published in T: a new leader serves nothing (the agent holds what it runs)
//! until its first publish, never an empty default nor a list of an earlier term.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use baton_model::name::Name;
use baton_proto::v1::Assignment;
use tokio::sync::watch;

use crate::desired::NodeList;

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

#[derive(Default)]
struct Slots {
    nodes: HashMap<Name, Slot>,
    /// The term and `State::applied` of the newest publish: every list of that term is
    /// current as of it, whether the publish named its node or not (a publish names only
    /// the nodes whose lists may have changed).
    newest: (u64, u64),
}

pub struct Hub {
    slots: Mutex<Slots>,
    /// `Some(term)` while this replica leads and may direct agents.
    leading: watch::Sender<Option<u64>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub { slots: Mutex::new(Slots::default()), leading: watch::channel(None).0 }
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
        let mut slots = self.lock();
        let tx = slots.nodes.entry(node.clone()).or_insert_with(|| watch::channel(None).0);
        (tx.receiver_count() < max).then(|| tx.subscribe())
    }

    /// Sets the lists of `lists`' nodes for `term`, built from a state that had applied
    /// `state_index` commands; every other list of `term` stays as it is, current as of that
    /// state too. A node listed with `None` is no longer registered: its slot goes unless a
    /// stream still follows it. `whole`: `lists` names every registered node (a term's first
    /// publish), so the slots of the others go too. Agents are woken only where a list
    /// changed; an unchanged one is sent with the newer `state_index` the next time it is
    /// sent (asked, or rarely).
    pub fn publish(&self, term: u64, state_index: u64, lists: Vec<NodeList>, whole: bool) {
        let mut slots = self.lock();
        if whole {
            let known: HashSet<&Name> = lists.iter().filter(|(_, l)| l.is_some()).map(|(n, _)| n).collect();
            slots.nodes.retain(|name, tx| known.contains(name) || tx.receiver_count() > 0);
        }
        slots.newest = match slots.newest {
            (t, i) if t == term => (t, i.max(state_index)),
            _ => (term, state_index),
        };
        for (name, list) in lists {
            let Some(next) = list else {
                if slots.nodes.get(&name).is_some_and(|tx| tx.receiver_count() == 0) {
                    slots.nodes.remove(&name);
                }
                continue;
            };
            let tx = slots.nodes.entry(name).or_insert_with(|| watch::channel(None).0);
            tx.send_if_modified(|cur| match cur {
                Some(p) if p.term == term && *p.assignments == next => false,
                _ => {
                    *cur = Some(Published { term, state_index, assignments: Arc::new(next) });
                    true
                }
            });
        }
    }

    /// Wakes `node`'s stream, which sends what it has again (its agent asked for it).
    pub fn nudge(&self, node: &Name) {
        if let Some(tx) = self.lock().nodes.get(node) {
            tx.send_modify(|_| {});
        }
    }

    /// What `node` has in `term`; `None` until this term has published it.
    pub fn current(&self, node: &Name, term: u64) -> Option<Published> {
        let slots = self.lock();
        let slot = slots.nodes.get(node)?.borrow();
        let mut p = slot.as_ref().filter(|p| p.term == term).cloned()?;
        if slots.newest.0 == term {
            p.state_index = p.state_index.max(slots.newest.1);
        }
        Some(p)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(node: &Name, list: Vec<Assignment>) -> Vec<NodeList> {
        vec![(node.clone(), Some(list))]
    }

    fn run(job_id: u64) -> Assignment {
        Assignment { job_id, job: format!("j{job_id}"), attempt: 1, ..Default::default() }
    }

    #[test]
    fn a_new_term_serves_nothing_until_it_publishes() {
        let hub = Hub::default();
        let n1 = Name::lit("n1");
        hub.set_leading(Some(1));
        hub.publish(1, 0, one(&n1, vec![run(7)]), true);
        hub.set_leading(None);
        hub.set_leading(Some(3));
        // Neither the list of term 1 nor an empty default ("run nothing") may be served.
        assert!(hub.current(&n1, 3).is_none(), "term 3 serves a list before publishing");
        assert!(hub.current(&Name::lit("n2"), 3).is_none(), "an unpublished node gets no default");
        hub.publish(3, 0, one(&n1, vec![]), true);
        assert_eq!(hub.current(&n1, 3).map(|p| p.assignments.len()), Some(0), "once published, an empty list is meant");
    }

    #[test]
    fn a_republish_in_a_new_term_wakes_the_stream_even_when_the_list_is_equal() {
        let hub = Hub::default();
        let n1 = Name::lit("n1");
        let mut rx = hub.subscribe_bounded(&n1, 1).unwrap();
        hub.publish(1, 0, one(&n1, vec![run(7)]), true);
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        hub.publish(1, 0, one(&n1, vec![run(7)]), true);
        assert!(!rx.has_changed().unwrap(), "an equal list in the same term wakes nobody");
        hub.publish(2, 0, one(&n1, vec![run(7)]), true);
        assert!(rx.has_changed().unwrap());
    }

    /// Resends carry how new the state of the latest round was, also when the list did not
    /// change: an agent whose lease was renewed from a state that new waits for one.
    #[test]
    fn an_unchanged_list_takes_the_newer_state_index_without_waking_anyone() {
        let hub = Hub::default();
        let n1 = Name::lit("n1");
        let mut rx = hub.subscribe_bounded(&n1, 1).unwrap();
        let list = || one(&n1, vec![run(7)]);
        hub.publish(1, 5, list(), false);
        rx.mark_unchanged();
        hub.publish(1, 9, list(), false);
        assert!(!rx.has_changed().unwrap());
        assert_eq!(hub.current(&n1, 1).map(|p| p.state_index), Some(9));
        // A round that read an older state (none does, but rounds may overlap a failover)
        // never takes it back.
        hub.publish(1, 7, list(), false);
        assert_eq!(hub.current(&n1, 1).map(|p| p.state_index), Some(9));
    }

    /// A publish names only the nodes whose lists may have changed: the others keep theirs,
    /// current as of the newest state; a node no longer registered loses its list.
    #[test]
    fn a_publish_of_some_nodes_keeps_the_others_current() {
        let hub = Hub::default();
        let (n1, n2) = (Name::lit("n1"), Name::lit("n2"));
        hub.publish(1, 5, vec![(n1.clone(), Some(vec![run(7)])), (n2.clone(), Some(vec![]))], true);
        hub.publish(1, 8, one(&n2, vec![run(9)]), false);
        let p = hub.current(&n1, 1).expect("n1's list is kept");
        assert_eq!((p.assignments.len(), p.state_index), (1, 8));
        assert_eq!(hub.current(&n2, 1).map(|p| p.assignments[0].job_id), Some(9));
        hub.publish(1, 9, vec![(n2.clone(), None)], false);
        assert!(hub.current(&n2, 1).is_none(), "a removed node has no list");
        assert!(hub.current(&n1, 2).is_none(), "another term has published nothing");
    }
}
