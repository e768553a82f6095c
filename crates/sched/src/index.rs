//! Schedulable nodes bucketed by free GPU count, per pool and per (pool, rack), so that
//! "the fullest node that fits" and "the emptiest nodes" are lookups, not scans.

use std::collections::BTreeSet;

use baton_model::ledger::Ledger;
use baton_model::limits::MAX_GPUS_PER_NODE;

const BUCKETS: usize = MAX_GPUS_PER_NODE as usize + 1;

/// Node indices (their natural-order rank) by free GPU count.
#[derive(Debug, Clone)]
pub struct Buckets {
    by_free: Vec<BTreeSet<u32>>,
}

impl Buckets {
    fn new() -> Buckets {
        Buckets {
            by_free: vec![BTreeSet::new(); BUCKETS],
        }
    }

    /// Nodes with at least `min_free` free GPUs: fullest first, then natural order.
    pub fn fullest_first(&self, min_free: u64) -> impl Iterator<Item = usize> + '_ {
        let start = (min_free as usize).min(BUCKETS);
        self.by_free[start..]
            .iter()
            .flat_map(|b| b.iter().map(|&n| n as usize))
    }

    /// Nodes with at least `min_free` free GPUs: emptiest first, then natural order.
    pub fn emptiest_first(&self, min_free: u64) -> impl Iterator<Item = usize> + '_ {
        let start = (min_free as usize).min(BUCKETS);
        self.by_free[start..]
            .iter()
            .rev()
            .flat_map(|b| b.iter().map(|&n| n as usize))
    }

    /// The most free GPUs on any one node (0 when none is schedulable).
    pub fn max_free(&self) -> u64 {
        self.by_free
            .iter()
            .rposition(|b| !b.is_empty())
            .unwrap_or(0) as u64
    }
}

/// A rack key within a pool: `None` groups nodes that name no rack.
pub type RackKey = Option<usize>;

#[derive(Debug, Clone)]
pub struct PoolIndex {
    pub all: Buckets,
    /// Racks of this pool in rack order (`None` last).
    pub racks: Vec<(RackKey, Buckets)>,
}

#[derive(Debug, Clone)]
pub struct Index {
    pub pools: Vec<PoolIndex>,
    /// Current bucket of each node (`u8::MAX`: not indexed, e.g. cordoned).
    slot: Vec<u8>,
}

impl Index {
    pub fn build(ledger: &Ledger) -> Index {
        let mut pools: Vec<PoolIndex> = (0..ledger.pools.len())
            .map(|_| PoolIndex {
                all: Buckets::new(),
                racks: Vec::new(),
            })
            .collect();
        for n in &ledger.nodes {
            let p = &mut pools[n.pool];
            if !p.racks.iter().any(|(r, _)| *r == n.rack) {
                p.racks.push((n.rack, Buckets::new()));
            }
        }
        for p in &mut pools {
            p.racks.sort_by_key(|(r, _)| r.map_or(usize::MAX, |x| x));
        }
        let mut index = Index {
            pools,
            slot: vec![u8::MAX; ledger.nodes.len()],
        };
        for i in 0..ledger.nodes.len() {
            index.update(ledger, i);
        }
        index
    }

    /// Re-buckets node `n` after its free resources changed.
    pub fn update(&mut self, ledger: &Ledger, n: usize) {
        let node = &ledger.nodes[n];
        let pool = &mut self.pools[node.pool];
        let old = self.slot[n];
        if old != u8::MAX {
            pool.all.by_free[old as usize].remove(&(n as u32));
            if let Some((_, b)) = pool.racks.iter_mut().find(|(r, _)| *r == node.rack) {
                b.by_free[old as usize].remove(&(n as u32));
            }
        }
        if !node.schedulable {
            self.slot[n] = u8::MAX;
            return;
        }
        let free = node.free_gpu_count().min(MAX_GPUS_PER_NODE as u32) as u8;
        pool.all.by_free[free as usize].insert(n as u32);
        if let Some((_, b)) = pool.racks.iter_mut().find(|(r, _)| *r == node.rack) {
            b.by_free[free as usize].insert(n as u32);
        }
        self.slot[n] = free;
    }
}
