//! Which candidates hold what on each node: a table indexed by node (counting sort into
//! one array), so that building it is two passes and a lookup is two array reads.

use baton_model::job::JobId;
use baton_model::ledger::{FxMap, Vector};

use super::cand::Cand;
use crate::view::View;

/// Reading one candidate's nodes through its charge costs about this many node visits.
const BY_NODE_BREAK_EVEN: usize = 4;

/// Candidates on one node (indices into the candidate list, ascending) with what each
/// holds there.
pub type OnNode = [(usize, Vector)];

#[derive(Debug)]
pub struct OnNodes {
    /// `entries[starts[n]..starts[n + 1]]` are node `n`'s, ascending, then `HOLE`s: a
    /// candidate dropped (`drop`) leaves a hole at the end of each of its nodes' runs, and
    /// nothing else moves.
    starts: Vec<u32>,
    entries: Vec<(usize, Vector)>,
}

/// What a dropped candidate leaves at the end of a run (above every candidate's index).
const HOLE: usize = usize::MAX;

/// Equal when every node holds the same candidates, holes aside.
impl PartialEq for OnNodes {
    fn eq(&self, other: &OnNodes) -> bool {
        self.starts.len() == other.starts.len() && (0..self.starts.len() - 1).all(|n| self.get(n) == other.get(n))
    }
}

impl OnNodes {
    pub fn new(view: &View, cands: &[Cand]) -> OnNodes {
        // Two ways to the same table: through each candidate's charge (a few scattered
        // reads per candidate), or through every node's occupants (one scattered read per
        // node). Whichever reads less wins.
        if cands.len() * BY_NODE_BREAK_EVEN < view.ledger.nodes.len() {
            OnNodes::by_candidate(view, cands)
        } else {
            OnNodes::by_node(view, cands)
        }
    }

    pub(crate) fn by_candidate(view: &View, cands: &[Cand]) -> OnNodes {
        let mut found: Vec<(usize, usize, Vector)> = Vec::new();
        for (i, c) in cands.iter().enumerate() {
            for &n in view.ledger.charges.get(&c.job).map(|ch| ch.nodes.as_slice()).unwrap_or_default() {
                if let Some(o) = view.ledger.nodes[n].occupant(c.job).filter(|o| !o.held) {
                    found.push((n, i, o.amount));
                }
            }
        }
        let nodes = view.ledger.nodes.len();
        let mut starts = vec![0u32; nodes + 1];
        // No candidate holds anything (a steady cycle's preemptors often have none): the
        // zeroed table is the answer, without two passes over every node.
        if found.is_empty() {
            return OnNodes { starts, entries: Vec::new() };
        }
        for &(n, _, _) in &found {
            starts[n + 1] += 1;
        }
        for n in 0..nodes {
            starts[n + 1] += starts[n];
        }
        // Filled in candidate order, so each node's entries stay ascending.
        let mut next: Vec<u32> = starts[..nodes].to_vec();
        let mut entries = vec![(0usize, [0u64; baton_model::limits::MAX_RESOURCE_KINDS]); found.len()];
        for (n, i, amount) in found {
            entries[next[n] as usize] = (i, amount);
            next[n] += 1;
        }
        OnNodes { starts, entries }
    }

    pub(crate) fn by_node(view: &View, cands: &[Cand]) -> OnNodes {
        let mut index: FxMap<JobId, usize> = FxMap::default();
        index.reserve(cands.len());
        for (i, c) in cands.iter().enumerate() {
            index.insert(c.job, i);
        }
        let mut starts = Vec::with_capacity(view.ledger.nodes.len() + 1);
        starts.push(0u32);
        let mut entries: Vec<(usize, Vector)> = Vec::with_capacity(cands.len());
        for node in view.ledger.nodes.iter() {
            let from = entries.len();
            for o in node.occupants.iter().filter(|o| !o.held) {
                if let Some(&i) = index.get(&o.job) {
                    entries.push((i, o.amount));
                }
            }
            entries[from..].sort_unstable_by_key(|e| e.0);
            starts.push(entries.len() as u32);
        }
        OnNodes { starts, entries }
    }

    /// Drops candidate `i` from node `n`'s run; whether it was there.
    pub fn drop(&mut self, i: usize, n: usize) -> bool {
        let (from, len) = (self.starts[n] as usize, self.get(n).len());
        let Some(at) = self.entries[from..from + len].iter().position(|e| e.0 == i) else {
            return false;
        };
        self.entries.copy_within(from + at + 1..from + len, from + at);
        self.entries[from + len - 1] = (HOLE, [0; baton_model::limits::MAX_RESOURCE_KINDS]);
        true
    }

    /// Nodes whose run holds candidate `i` (a pass over every entry: for a candidate whose
    /// nodes are not known otherwise).
    pub fn nodes_of(&self, i: usize) -> Vec<usize> {
        (0..self.starts.len() - 1).filter(|&n| self.get(n).iter().any(|e| e.0 == i)).collect()
    }

    /// The table with candidates renumbered (`positions`, by old position; `None`: left
    /// out): what building it from a list without them gives.
    pub fn renumbered(&self, positions: &[Option<u32>]) -> OnNodes {
        let mut starts = Vec::with_capacity(self.starts.len());
        starts.push(0u32);
        let mut entries = Vec::with_capacity(self.entries.len());
        for n in 0..self.starts.len() - 1 {
            entries.extend(self.get(n).iter().filter_map(|(i, a)| positions[*i].map(|to| (to as usize, *a))));
            starts.push(entries.len() as u32);
        }
        OnNodes { starts, entries }
    }

    /// Node `n`'s candidates (empty if none).
    pub fn get(&self, n: usize) -> &OnNode {
        let run = &self.entries[self.starts[n] as usize..self.starts[n + 1] as usize];
        // Most runs have no hole: one look at the last entry.
        match run.last() {
            Some(e) if e.0 == HOLE => &run[..run.partition_point(|e| e.0 != HOLE)],
            _ => run,
        }
    }

    pub fn contains(&self, n: usize) -> bool {
        let from = self.starts[n] as usize;
        from != self.starts[n + 1] as usize && self.entries[from].0 != HOLE
    }

    /// Nodes with candidates, ascending, with theirs.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &OnNode)> {
        (0..self.starts.len() - 1).filter(|&n| self.contains(n)).map(|n| (n, self.get(n)))
    }
}
