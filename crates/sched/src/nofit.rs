//! Within one cycle, free room only shrinks: placements and reservations take it, and
//! nothing a cycle decides gives any back (victims keep their nodes until they stop). For a
//! job with one task, packing fails exactly when the nodes it may use cannot host all its
//! replicas (see `pack`), which stays true as room shrinks. So once a shape found no room
//! under a pool choice, later jobs of the same shape skip packing there this cycle.
//!
//! One exception: the nodes a job may use also depend on the job, as a maintenance window
//! ahead closes its nodes only to jobs that would not end before it. The cycle clears what
//! it remembers whenever the set of nodes so closed changes from one job to the next
//! (`cycle::decide_all`).
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
    fn shape(needs: &Needs, pool_choice: &[usize]) -> Option<Shape> {
        match (needs.tasks.as_slice(), pool_choice) {
            ([t], &[pool]) => Some((t.need, t.replicas, needs.topology, pool)),
            _ => None,
        }
    }

    /// Packing `needs` under `pool_choice` already failed this cycle.
    pub fn known(&self, needs: &Needs, pool_choice: &[usize]) -> bool {
        !self.shapes.is_empty() && Self::shape(needs, pool_choice).is_some_and(|s| self.shapes.contains_key(&s))
    }

    /// Forgets everything (room may have come back).
    pub fn clear(&mut self) {
        self.shapes.clear();
    }

    /// Packing `needs` under `pool_choice` just failed.
    pub fn record(&mut self, needs: &Needs, pool_choice: &[usize]) {
        if let Some(s) = Self::shape(needs, pool_choice) {
            self.shapes.insert(s, ());
        }
    }
}
