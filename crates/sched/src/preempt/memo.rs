//! Quick estimates kept per node between the preemptors of one cycle (issue 37: a hundred
//! urgent jobs estimated every node a hundred times).
//!
//! A node's estimate (`estimate.rs`) reads the node (its free resources, pool, whether it
//! is schedulable), the candidates on it with their rank positions, and the preemptor's
//! need. Between preemptors that share their kept candidates (`kept.rs`) and their need it
//! changes only where the node changed (`View::changes_of`: a placement, a reservation, a
//! block) or lost a candidate (taken by an earlier preemptor). Candidates taken are marked
//! dropped, not removed (`kept.rs`), so the rank positions an estimate holds stay valid.
//! Debug builds compare every kept estimate with a fresh one.

use baton_model::ledger::Vector;

use crate::view::View;

/// A node as the estimate sees it: what decides whether it is estimated, and the estimate
/// once made (`None` inside: the node could not host the need even with every candidate
/// gone).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Facts<E> {
    pub pool: usize,
    pub schedulable: bool,
    pub free_gpus: u32,
    pub est: Option<Option<E>>,
}

/// What is kept of one node, as of its count of changes.
#[derive(Debug, Clone, Copy)]
struct Entry<E> {
    changes: u32,
    facts: Facts<E>,
}

/// Estimates of type `E` for one need, by node.
pub struct Memo<E> {
    need: Option<Vector>,
    entries: Vec<Option<Entry<E>>>,
}

impl<E> Default for Memo<E> {
    fn default() -> Memo<E> {
        Memo { need: None, entries: Vec::new() }
    }
}

impl<E: Copy + PartialEq + std::fmt::Debug> Memo<E> {
    /// Keeps estimates for `need` from now on: those for another need are forgotten.
    pub fn for_need(&mut self, view: &View, need: &Vector) {
        if self.need.as_ref() != Some(need) {
            self.need = Some(*need);
            self.entries.clear();
        }
        self.entries.resize(view.ledger.nodes.len(), None);
    }

    /// Node `n`'s facts, kept if it has not changed since they were.
    pub fn facts(&mut self, view: &View, n: usize) -> &mut Facts<E> {
        let changes = view.changes_of(n);
        let node = &view.ledger.nodes[n];
        let fresh =
            || Facts { pool: node.pool, schedulable: node.schedulable, free_gpus: node.free_gpu_count(), est: None };
        let slot = &mut self.entries[n];
        match slot {
            Some(e) if e.changes == changes => {
                debug_assert_eq!(Facts { est: None, ..e.facts }, fresh(), "the facts kept for node {n} and fresh ones");
            }
            _ => *slot = Some(Entry { changes, facts: fresh() }),
        }
        &mut slot.as_mut().expect("filled above").facts
    }

    /// Forgets the nodes that lost a candidate.
    pub fn forget(&mut self, nodes: &[usize]) {
        for &n in nodes {
            if let Some(slot) = self.entries.get_mut(n) {
                *slot = None;
            }
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Kept estimates used on this thread (a cycle runs on its caller's thread).
    static REUSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts a kept estimate used: tests check that the kept path ran, so that the debug
/// comparison with a fresh estimate ran too.
pub fn count_reuse() {
    #[cfg(test)]
    REUSED.with(|c| c.set(c.get() + 1));
}

#[cfg(test)]
mod tests {
    use baton_model::command::{Command, Op};
    use baton_model::fixture;
    use baton_model::job::PriorityRef;
    use baton_model::name::Name;
    use baton_model::plan::Decision;
    use baton_model::state::State;

    use super::REUSED;
    use crate::cycle;

    fn apply(s: &mut State, op: Op) {
        s.apply(Command { now_ms: 1_000, op }).expect("a valid setup");
    }

    /// `baton bench scale`'s preemption, small: one queue on 30 4-GPU nodes full of one-GPU
    /// `train` jobs, then 12 urgent one-GPU `interactive` jobs, each planned in one cycle.
    /// The later ones use the estimates the first made of nodes nothing changed since (debug
    /// builds compare each with a fresh one), and each takes a victim of its own.
    #[test]
    fn urgent_jobs_of_one_shape_reuse_estimates_of_unchanged_nodes() {
        let mut s = State::new();
        let nodes: Vec<_> = (0..30).map(|i| fixture::gpu_node(&format!("n{i}"), 4)).collect();
        apply(&mut s, Op::RegisterNodes(nodes));
        apply(&mut s, Op::PutQueue(fixture::gpu_queue("lab", 240)));
        let one = |name: String, class: &str| {
            let mut spec = fixture::gpu_job(&name, "lab", 1);
            spec.priority = PriorityRef::Class(Name::lit(class));
            Op::Submit { spec, request_id: None }
        };
        for i in 0..150 {
            apply(&mut s, one(format!("c{i}"), "train"));
        }
        let plan = cycle(&s, 1_000);
        apply(&mut s, Op::ApplyPlan(plan));
        for i in 0..12 {
            apply(&mut s, one(format!("u{i}"), "interactive"));
        }
        let before = REUSED.with(|c| c.get());
        let plan = cycle(&s, 2_000);
        let victims: Vec<_> = plan
            .decisions
            .iter()
            .filter_map(|d| if let Decision::Preempt { victims, .. } = d { Some(victims.clone()) } else { None })
            .collect();
        assert_eq!(victims.len(), 12, "each urgent job preempts: {:?}", plan.decisions);
        let mut all: Vec<_> = victims.iter().flatten().map(|v| v.job).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 12, "one victim each, none twice: {victims:?}");
        let reused = REUSED.with(|c| c.get()) - before;
        // 11 later preemptors, each on about 28 nodes nothing changed since.
        assert!(reused >= 11 * 20, "kept estimates used {reused} times");
    }
}
