//! Schedulable nodes bucketed by free GPU count, per pool and per (pool, domain) of each
//! topology level (the rack, an NVLink domain, a zone), so that
//! "the fullest node that fits" and "the emptiest nodes" are lookups, not scans.
//!
//! A bucket is a two-level bitset over the nodes it may hold (a pool's nodes, or a domain's),
//! by their position in natural order: moving a node between buckets is a few bit
//! operations, and walking a bucket yields nodes in natural order, skipping empty words.

use std::collections::BTreeSet;

use baton_model::ledger::{GPU_KIND, GPU_MILLI, Ledger, whole_gpus};
use baton_model::limits::MAX_GPUS_PER_NODE;

const BUCKETS: usize = MAX_GPUS_PER_NODE as usize + 1;
const WORD_BITS: usize = 64;

/// A set of positions `0..capacity`; a summary word marks the non-empty words. Storage is
/// allocated on the first insert: most free-GPU counts never occur in a real cluster.
#[derive(Debug, Clone, Default)]
struct Bits {
    words: Vec<u64>,
    summary: Vec<u64>,
    len: usize,
}

impl Bits {
    fn insert(&mut self, i: usize, capacity: usize) {
        if self.words.is_empty() {
            let words = capacity.div_ceil(WORD_BITS);
            self.words = vec![0; words];
            self.summary = vec![0; words.div_ceil(WORD_BITS)];
        }
        let (w, bit) = (i / WORD_BITS, 1u64 << (i % WORD_BITS));
        if self.words[w] & bit == 0 {
            self.len += 1;
            self.words[w] |= bit;
            self.summary[w / WORD_BITS] |= 1u64 << (w % WORD_BITS);
        }
    }

    fn remove(&mut self, i: usize) {
        let (w, bit) = (i / WORD_BITS, 1u64 << (i % WORD_BITS));
        if self.words.get(w).is_some_and(|&x| x & bit != 0) {
            self.len -= 1;
            self.words[w] &= !bit;
            if self.words[w] == 0 {
                self.summary[w / WORD_BITS] &= !(1u64 << (w % WORD_BITS));
            }
        }
    }

    fn iter(&self) -> BitsIter<'_> {
        BitsIter { bits: self, next_summary: 0, summary: 0, word: 0, current: 0 }
    }
}

/// Positions in ascending order.
struct BitsIter<'b> {
    bits: &'b Bits,
    /// The summary word to load after `summary` runs out.
    next_summary: usize,
    /// Non-empty words of the current summary word not yet visited.
    summary: u64,
    /// Index of the word `current` came from.
    word: usize,
    /// Bits of that word not yet yielded.
    current: u64,
}

impl Iterator for BitsIter<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        loop {
            if self.current != 0 {
                let b = self.current.trailing_zeros() as usize;
                self.current &= self.current - 1;
                return Some(self.word * WORD_BITS + b);
            }
            if self.summary != 0 {
                let t = self.summary.trailing_zeros() as usize;
                self.summary &= self.summary - 1;
                self.word = (self.next_summary - 1) * WORD_BITS + t;
                self.current = self.bits.words[self.word];
                continue;
            }
            self.summary = *self.bits.summary.get(self.next_summary)?;
            self.next_summary += 1;
        }
    }
}

/// The set bits of a mask, from either end.
struct MaskIter(u128);

impl Iterator for MaskIter {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(b)
    }
}

impl DoubleEndedIterator for MaskIter {
    fn next_back(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let b = 127 - self.0.leading_zeros() as usize;
        self.0 &= !(1u128 << b);
        Some(b)
    }
}

/// Node indices (their natural-order rank) by free GPU count, with a mask of the counts
/// that have any node, so that walks skip empty buckets.
#[derive(Debug, Clone)]
pub struct Buckets {
    /// The node index of each position, ascending; empty when positions are node indices.
    members: Vec<u32>,
    /// How many positions there are.
    capacity: usize,
    by_free: Vec<Bits>,
    occupied: u128,
}

impl Buckets {
    /// `counts`: one more than the most free GPUs a member can have. A pool's largest node
    /// bounds it: most domains (an NVLink domain's nine 8-GPU nodes) need 9 buckets, not
    /// `BUCKETS`, and a cycle's index holds thousands of domains.
    fn new(members: Vec<u32>, capacity: usize, counts: usize) -> Buckets {
        Buckets { members, capacity, by_free: vec![Bits::default(); counts.min(BUCKETS)], occupied: 0 }
    }

    fn insert(&mut self, free: usize, pos: usize) {
        debug_assert!(free < self.by_free.len(), "{free} free GPUs on a node of a pool whose largest has fewer");
        self.by_free[free].insert(pos, self.capacity);
        self.occupied |= 1u128 << free;
    }

    fn remove(&mut self, free: usize, pos: usize) {
        self.by_free[free].remove(pos);
        if self.by_free[free].len == 0 {
            self.occupied &= !(1u128 << free);
        }
    }

    fn node(&self, pos: usize) -> usize {
        if self.members.is_empty() { pos } else { self.members[pos] as usize }
    }

    /// Occupied bucket numbers of at least `min_free`, ascending.
    fn counts_from(&self, min_free: u64) -> MaskIter {
        let at_least = if min_free >= BUCKETS as u64 { 0 } else { !0u128 << min_free };
        MaskIter(self.occupied & at_least)
    }

    /// Nodes with at least `min_free` free GPUs: fullest first, then natural order.
    pub fn fullest_first(&self, min_free: u64) -> impl Iterator<Item = usize> + '_ {
        self.counts_from(min_free).flat_map(|b| self.by_free[b].iter().map(|p| self.node(p)))
    }

    /// Nodes with at least `min_free` free GPUs: emptiest first, then natural order.
    pub fn emptiest_first(&self, min_free: u64) -> impl Iterator<Item = usize> + '_ {
        self.counts_from(min_free).rev().flat_map(|b| self.by_free[b].iter().map(|p| self.node(p)))
    }

    /// Nodes with at least `min_free` free GPUs, with their free GPU count: fullest first,
    /// then natural order.
    pub fn with_free(&self, min_free: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts_from(min_free).flat_map(move |b| self.by_free[b].iter().map(move |p| (self.node(p), b as u64)))
    }

    /// An upper bound on how many replicas of `gpus` GPUs these nodes could host (GPUs only).
    pub fn gpu_room(&self, gpus: u64) -> u64 {
        if gpus == 0 {
            return u64::MAX;
        }
        self.counts_from(gpus).map(|b| self.by_free[b].len as u64 * (b as u64 / gpus)).sum()
    }

    /// Free GPUs on these nodes together.
    pub fn free_gpus(&self) -> u64 {
        MaskIter(self.occupied).map(|b| self.by_free[b].len as u64 * b as u64).sum()
    }

    /// The most free GPUs on any one node (0 when none is schedulable).
    pub fn max_free(&self) -> u64 {
        if self.occupied == 0 { 0 } else { u64::from(127 - self.occupied.leading_zeros()) }
    }
}

/// A domain at one topology level: its position in `Ledger::levels[level].domains`.
pub type DomainKey = u32;

/// Where a search looks: one domain of one level (`(level, domain)`), or the whole pool.
pub type Scope = Option<(usize, DomainKey)>;

/// A GPU that fractions share (decisions.md section 11), ordered as its best fit searches:
/// the least room left first (the most used), then section 3's node order (fewest free
/// whole GPUs, as `fullest_first`, then natural order), then the lowest GPU index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SharedGpu {
    /// Thousandths still free on it: 1 to 999 (a full or an empty GPU is not shared).
    pub room_milli: u16,
    /// Free whole GPUs on its node.
    free: u8,
    pub node: u32,
    pub gpu: u8,
}

#[derive(Debug, Clone)]
pub struct PoolIndex {
    pub all: Buckets,
    /// Per topology level in force, the domains of this pool in domain order.
    pub levels: Vec<Vec<(DomainKey, Buckets)>>,
    /// The GPUs of its schedulable nodes that fractions share, best fit first. At most
    /// `MAX_GPUS_PER_NODE` per node.
    pub shared: BTreeSet<SharedGpu>,
}

impl PoolIndex {
    /// The buckets of domain `d` of `level` in this pool, if any node of the pool is in it.
    pub fn domain(&self, level: usize, d: DomainKey) -> Option<&Buckets> {
        // Domains are sorted; a binary search keeps this cheap for many.
        let ds = self.levels.get(level)?;
        ds.binary_search_by_key(&d, |(k, _)| *k).ok().map(|i| &ds[i].1)
    }

    /// Its shared GPUs with room for `milli`, best fit first.
    pub fn shared_with_room(&self, milli: u64) -> impl Iterator<Item = &SharedGpu> + '_ {
        let room_milli = u16::try_from(milli).unwrap_or(u16::MAX);
        self.shared.range(SharedGpu { room_milli, free: 0, node: 0, gpu: 0 }..)
    }

    /// The buckets of a scope: the pool's, or one domain's.
    pub fn scope(&self, scope: Scope) -> Option<&Buckets> {
        match scope {
            None => Some(&self.all),
            Some((level, d)) => self.domain(level, d),
        }
    }
}

/// Where a node sits in one level's index.
#[derive(Debug, Clone, Copy, Default)]
struct Place {
    /// Its domain's position in its pool's `levels[level]`.
    domain: u32,
    /// Its position within that domain's buckets.
    pos: u32,
}

#[derive(Debug, Clone)]
pub struct Index {
    pub pools: Vec<PoolIndex>,
    /// Each node's current bucket (`u8::MAX`: not indexed, e.g. cordoned).
    buckets: Vec<u8>,
    /// The shared GPUs each node has in its pool's `shared` (empty for most nodes).
    shared_of: Vec<Vec<SharedGpu>>,
    /// Where each node sits at each level: node `n`'s at `n * levels + level`. Flat, so a
    /// cycle's index costs no allocation per node.
    places: Vec<Place>,
    levels: usize,
}

impl Index {
    pub fn build(ledger: &Ledger) -> Index {
        let levels = ledger.levels.len();
        let mut places = vec![Place::default(); ledger.nodes.len() * levels];
        // Free GPUs never exceed a pool's largest node's (a rebuild makes a new index).
        let counts = |p: usize| whole_gpus(ledger.pools[p].largest_node[GPU_KIND]).min(MAX_GPUS_PER_NODE) as usize + 1;
        let mut pools: Vec<PoolIndex> = (0..ledger.pools.len())
            .map(|p| PoolIndex {
                all: Buckets::new(Vec::new(), ledger.nodes.len(), counts(p)),
                levels: Vec::with_capacity(levels),
                shared: BTreeSet::new(),
            })
            .collect();
        for level in 0..levels {
            // Members of each (pool, domain), in node (natural) order; domain keys are dense.
            let mut doms: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); ledger.levels[level].domains.len()]; pools.len()];
            for (i, n) in ledger.nodes.iter().enumerate() {
                doms[n.pool][n.domains[level] as usize].push(i as u32);
            }
            for (p, ds) in doms.into_iter().enumerate() {
                let mut list: Vec<(DomainKey, Buckets)> = Vec::new();
                for (d, members) in ds.into_iter().enumerate().filter(|(_, m)| !m.is_empty()) {
                    for (pos, &n) in members.iter().enumerate() {
                        places[n as usize * levels + level] = Place { domain: list.len() as u32, pos: pos as u32 };
                    }
                    let len = members.len();
                    list.push((d as DomainKey, Buckets::new(members, len, counts(p))));
                }
                pools[p].levels.push(list);
            }
        }
        let n = ledger.nodes.len();
        let mut index = Index { pools, buckets: vec![u8::MAX; n], shared_of: vec![Vec::new(); n], places, levels };
        for i in 0..ledger.nodes.len() {
            index.update(ledger, i);
        }
        index
    }

    /// Re-buckets node `n` after its free resources changed.
    pub fn update(&mut self, ledger: &Ledger, n: usize) {
        let node = &ledger.nodes[n];
        let pool = &mut self.pools[node.pool];
        let places = &self.places[n * self.levels..(n + 1) * self.levels];
        let bucket = self.buckets[n];
        if bucket != u8::MAX {
            pool.all.remove(bucket as usize, n);
            for (level, place) in places.iter().enumerate() {
                pool.levels[level][place.domain as usize].1.remove(bucket as usize, place.pos as usize);
            }
        }
        for k in self.shared_of[n].drain(..) {
            pool.shared.remove(&k);
        }
        if !node.schedulable {
            self.buckets[n] = u8::MAX;
            return;
        }
        let free = node.free_gpu_count().min(MAX_GPUS_PER_NODE as u32) as u8;
        pool.all.insert(free as usize, n);
        for (level, place) in places.iter().enumerate() {
            pool.levels[level][place.domain as usize].1.insert(free as usize, place.pos as usize);
        }
        self.buckets[n] = free;
        self.index_shared(ledger, n, free);
    }

    /// Puts node `n`'s GPUs that fractions share, and that have room left, in its pool's
    /// `shared` (its earlier ones were taken out by `update`).
    fn index_shared(&mut self, ledger: &Ledger, n: usize, free: u8) {
        let node = &ledger.nodes[n];
        let mut mask = node.fraction_mask();
        if mask == 0 {
            return;
        }
        let u = node.gpu_use_for(None, &[]);
        while mask != 0 {
            let g = mask.trailing_zeros();
            mask &= mask - 1;
            let used = u.used(g);
            if used == 0 || used >= GPU_MILLI {
                continue;
            }
            let k = SharedGpu { room_milli: (GPU_MILLI - used) as u16, free, node: n as u32, gpu: g as u8 };
            self.pools[node.pool].shared.insert(k);
            self.shared_of[n].push(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_iterate_from_both_ends() {
        let m = (1u128 << 0) | (1 << 3) | (1 << 64) | (1 << 127);
        assert_eq!(MaskIter(m).collect::<Vec<_>>(), [0, 3, 64, 127]);
        assert_eq!(MaskIter(m).rev().collect::<Vec<_>>(), [127, 64, 3, 0]);
        let b = Buckets { members: Vec::new(), capacity: 0, by_free: Vec::new(), occupied: m };
        assert_eq!(b.counts_from(3).collect::<Vec<_>>(), [3, 64, 127]);
        assert_eq!(b.counts_from(4).rev().collect::<Vec<_>>(), [127, 64]);
        assert_eq!(b.counts_from(BUCKETS as u64).next(), None);
        assert_eq!(b.counts_from(u64::MAX).next(), None);
    }

    #[test]
    fn bits_iterate_in_ascending_order_across_words_and_summaries() {
        let capacity = 64 * 64 * 2 + 5;
        let mut b = Bits::default();
        let want = [0usize, 1, 63, 64, 130, 4095, 4096, 8000, capacity - 1];
        for &i in want.iter().rev() {
            b.insert(i, capacity);
        }
        b.insert(4096, capacity);
        assert_eq!(b.iter().collect::<Vec<_>>(), want);
        assert_eq!(b.len, want.len());
        b.remove(4096);
        b.remove(4096);
        b.remove(63);
        let left: Vec<usize> = want.iter().copied().filter(|&i| i != 4096 && i != 63).collect();
        assert_eq!(b.iter().collect::<Vec<_>>(), left);
        assert_eq!(b.len, left.len());
        for &i in &left {
            b.remove(i);
        }
        assert_eq!(b.iter().next(), None);
        assert!(b.summary.iter().all(|&s| s == 0));
    }
}
