//! Schedulable nodes bucketed by free GPU count, per pool and per (pool, rack), so that
//! "the fullest node that fits" and "the emptiest nodes" are lookups, not scans.

use std::collections::BTreeSet;

use baton_model::ledger::Ledger;
use baton_model::limits::MAX_GPUS_PER_NODE;

const BUCKETS: usize = MAX_GPUS_PER_NODE as usize + 1;

/// Node indices (their natural-order rank) by free GPU count, with a mask of the counts
/// that have any node, so that walks skip empty buckets.
#[derive(Debug, Clone)]
pub struct Buckets {
    by_free: Vec<BTreeSet<u32>>,
    occupied: u128,
}

impl Buckets {
    fn new() -> Buckets {
        Buckets { by_free: vec![BTreeSet::new(); BUCKETS], occupied: 0 }
    }

    fn insert(&mut self, free: usize, n: u32) {
        self.by_free[free].insert(n);
        self.occupied |= 1u128 << free;
    }

    fn remove(&mut self, free: usize, n: u32) {
        self.by_free[free].remove(&n);
        if self.by_free[free].is_empty() {
            self.occupied &= !(1u128 << free);
        }
    }

    /// Occupied bucket numbers of at least `min_free`, ascending.
    fn counts_from(&self, min_free: u64) -> impl DoubleEndedIterator<Item = usize> + '_ {
        let start = (min_free as usize).min(BUCKETS);
        (start..BUCKETS).filter(move |&b| self.occupied & (1u128 << b) != 0)
    }

    /// Nodes with at least `min_free` free GPUs: fullest first, then natural order.
    pub fn fullest_first(&self, min_free: u64) -> impl Iterator<Item = usize> + '_ {
        self.counts_from(min_free).flat_map(|b| self.by_free[b].iter().map(|&n| n as usize))
    }

    /// Nodes with at least `min_free` free GPUs: emptiest first, then natural order.
    pub fn emptiest_first(&self, min_free: u64) -> impl Iterator<Item = usize> + '_ {
        self.counts_from(min_free).rev().flat_map(|b| self.by_free[b].iter().map(|&n| n as usize))
    }

    /// An upper bound on how many replicas of `gpus` GPUs these nodes could host (GPUs only).
    pub fn gpu_room(&self, gpus: u64) -> u64 {
        if gpus == 0 {
            return u64::MAX;
        }
        self.counts_from(gpus).map(|b| self.by_free[b].len() as u64 * (b as u64 / gpus)).sum()
    }

    /// The most free GPUs on any one node (0 when none is schedulable).
    pub fn max_free(&self) -> u64 {
        if self.occupied == 0 { 0 } else { u64::from(127 - self.occupied.leading_zeros()) }
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
        let mut pools: Vec<PoolIndex> =
            (0..ledger.pools.len()).map(|_| PoolIndex { all: Buckets::new(), racks: Vec::new() }).collect();
        for n in &ledger.nodes {
            let p = &mut pools[n.pool];
            if !p.racks.iter().any(|(r, _)| *r == n.rack) {
                p.racks.push((n.rack, Buckets::new()));
            }
        }
        for p in &mut pools {
            p.racks.sort_by_key(|(r, _)| r.map_or(usize::MAX, |x| x));
        }
        let mut index = Index { pools, slot: vec![u8::MAX; ledger.nodes.len()] };
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
            pool.all.remove(old as usize, n as u32);
            if let Some((_, b)) = pool.racks.iter_mut().find(|(r, _)| *r == node.rack) {
                b.remove(old as usize, n as u32);
            }
        }
        if !node.schedulable {
            self.slot[n] = u8::MAX;
            return;
        }
        let free = node.free_gpu_count().min(MAX_GPUS_PER_NODE as u32) as u8;
        pool.all.insert(free as usize, n as u32);
        if let Some((_, b)) = pool.racks.iter_mut().find(|(r, _)| *r == node.rack) {
            b.insert(free as usize, n as u32);
        }
        self.slot[n] = free;
    }
}
