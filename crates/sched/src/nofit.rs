//! Within one cycle, free room only shrinks: placements and reservations take it, and
//! nothing a cycle decides gives any back (victims keep their nodes until they stop). For a
//! job with one task, packing fails exactly when the nodes it may use cannot host all its
//! replicas (see `pack`), which stays true as room shrinks. So once a shape found no room
//! under a pool assignment, later jobs of the same shape skip packing there this cycle.
//!
//! Gangs of several tasks are not remembered: their greedy packing is not monotone in room.

use baton_model::job::Topology;
use baton_model::ledger::{FxMap, Vector};

use crate::needs::Needs;

/// (need per replica, replicas, topology, pool).
type Shape = (Vector, u32, Option<Topology>, usize);

#[derive(Default)]
pub struct NoFit {
    shapes: FxMap<Shape, ()>,
}

impl NoFit {
    fn shape(needs: &Needs, assignment: &[usize]) -> Option<Shape> {
        match (needs.tasks.as_slice(), assignment) {
            ([t], &[pool]) => Some((t.need, t.replicas, needs.topology, pool)),
            _ => None,
        }
    }

    /// Packing `needs` under `assignment` already failed this cycle.
    pub fn known(&self, needs: &Needs, assignment: &[usize]) -> bool {
        !self.shapes.is_empty() && Self::shape(needs, assignment).is_some_and(|s| self.shapes.contains_key(&s))
    }

    /// Forgets everything (room may have come back).
    pub fn clear(&mut self) {
        self.shapes.clear();
    }

    /// Packing `needs` under `assignment` just failed.
    pub fn record(&mut self, needs: &Needs, assignment: &[usize]) {
        if let Some(s) = Self::shape(needs, assignment) {
            self.shapes.insert(s, ());
        }
    }
}
