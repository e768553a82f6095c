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

#[derive(Debug, PartialEq)]
pub struct OnNodes {
    /// `entries[starts[n]..starts[n + 1]]` are node `n`'s.
    starts: Vec<u32>,
    entries: Vec<(usize, Vector)>,
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

    /// Drops the candidates whose new position (`positions`, by old position) is `None` and
    /// renumbers the others: what building the table from the shorter list gives, in one
    /// pass over the entries, in place (the table of 40,000 candidates is megabytes: a copy
    /// per preemptor cost more than the rest of its estimate). Returns the nodes that lost a
    /// candidate.
    pub fn keep_only(&mut self, positions: &[Option<u32>]) -> Vec<usize> {
        let mut lost = Vec::new();
        let (mut write, mut from) = (0usize, 0usize);
        for n in 0..self.starts.len() - 1 {
            let (before, end) = (write, self.starts[n + 1] as usize);
            for r in from..end {
                let (i, amount) = self.entries[r];
                if let Some(to) = positions[i] {
                    self.entries[write] = (to as usize, amount);
                    write += 1;
                }
            }
            if write - before != end - from {
                lost.push(n);
            }
            self.starts[n + 1] = write as u32;
            from = end;
        }
        self.entries.truncate(write);
        lost
    }

    /// Node `n`'s candidates (empty if none).
    pub fn get(&self, n: usize) -> &OnNode {
        &self.entries[self.starts[n] as usize..self.starts[n + 1] as usize]
    }

    pub fn contains(&self, n: usize) -> bool {
        self.starts[n] != self.starts[n + 1]
    }

    /// Nodes with candidates, ascending, with theirs.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &OnNode)> {
        (0..self.starts.len() - 1).filter(|&n| self.contains(n)).map(|n| (n, self.get(n)))
    }
}
