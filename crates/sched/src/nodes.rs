//! Two views of "where may a gang go": the whole index (no preemption) and an explicit set
//! of nodes with some jobs imagined gone (a preemption walk).

use baton_model::job::JobId;
use baton_model::ledger::{GPU_KIND, GPU_MILLI, GpuUse, Vector, ZERO};
use baton_model::topology::MAX_TOPOLOGY_LEVELS;

use crate::index::{Buckets, DomainKey, Scope};
use crate::pack::Nodes;
use crate::view::View;

/// Every schedulable node, free as the ledger says (for a job holding no reservation).
pub struct IndexNodes<'v, 'a> {
    pub view: &'v View<'a>,
}

impl Nodes for IndexNodes<'_, '_> {
    fn free(&self, n: usize) -> (Vector, u64) {
        let node = &self.view.ledger.nodes[n];
        (node.free, node.free_gpus)
    }

    fn gpu_use(&self, n: usize) -> GpuUse {
        self.view.ledger.nodes[n].gpu_use_for(None, &[])
    }

    fn pool(&self, n: usize) -> usize {
        self.view.ledger.nodes[n].pool
    }

    fn domain(&self, n: usize, level: usize) -> DomainKey {
        self.view.ledger.nodes[n].domains[level]
    }

    fn domains(&self, pool: usize, level: usize) -> Vec<DomainKey> {
        self.view.index.pools[pool].levels.get(level).map_or(Vec::new(), |ds| ds.iter().map(|(d, _)| *d).collect())
    }

    fn fullest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        match self.view.index.pools[pool].scope(scope) {
            Some(b) => Box::new(b.fullest_first(min_gpus)),
            None => Box::new(std::iter::empty()),
        }
    }

    fn gpu_room(&self, pool: usize, scope: Scope, gpus: u64) -> u64 {
        self.view.index.pools[pool].scope(scope).map_or(0, |b| b.gpu_room(gpus))
    }

    fn free_of(&self, pool: usize, scope: Scope, kind: usize) -> u64 {
        if kind == GPU_KIND {
            return self.view.index.pools[pool].scope(scope).map_or(0, |b| b.free_gpus());
        }
        // Other kinds are not bucketed: a gang without GPUs counts its domains' nodes.
        self.fullest_first(pool, scope, 0).map(|n| self.view.ledger.nodes[n].free[kind]).sum()
    }

    fn emptiest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        match self.view.index.pools[pool].scope(scope) {
            Some(b) => Box::new(b.emptiest_first(min_gpus)),
            None => Box::new(std::iter::empty()),
        }
    }

    fn domain_buckets(&self, pool: usize, level: usize) -> Option<&[(DomainKey, Buckets)]> {
        Some(self.view.index.pools[pool].levels.get(level).map_or(&[], Vec::as_slice))
    }

    fn shared_gpus(&self, pool: usize, milli: u64) -> Option<Box<dyn Iterator<Item = (u64, usize)> + '_>> {
        let shared = self.view.index.pools[pool].shared_with_room(milli);
        Some(Box::new(shared.map(|s| (GPU_MILLI - u64::from(s.room_milli), s.node as usize))))
    }
}

/// One node of a [`SetNodes`].
struct Entry {
    node: usize,
    pool: usize,
    domains: [DomainKey; MAX_TOPOLOGY_LEVELS],
    free: Vector,
    mask: u64,
    gpu_use: GpuUse,
}

/// A few nodes, with what would be free for `job` if `removed` were gone. A node that takes
/// no new work now (lost, cordoned, unhealthy, in a window, or closed to the job by a window
/// ahead: `schedulable` in the view's ledger) offers nothing, as in the view's index: `apply`
/// refuses any placement there. An elastic gang's growth packed over such nodes and was
/// refused at every cycle (`examples/scenarios/elastic-grow-closed-nodes.yaml`).
pub struct SetNodes {
    /// In natural order.
    entries: Vec<Entry>,
}

impl SetNodes {
    pub fn new(view: &View, job: JobId, removed: &[JobId], nodes: &[usize]) -> SetNodes {
        let mut entries: Vec<Entry> = nodes
            .iter()
            .map(|&n| {
                let acct = &view.ledger.nodes[n];
                let (free, mask, gpu_use) = if acct.schedulable {
                    let (free, mask) = view.free_for(n, job, removed);
                    (free, mask, acct.gpu_use_for(Some(job), removed))
                } else {
                    (ZERO, 0, GpuUse::new(0))
                };
                Entry { node: n, pool: acct.pool, domains: acct.domains, free, mask, gpu_use }
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.node);
        SetNodes { entries }
    }

    fn entry(&self, n: usize) -> &Entry {
        let i = self.entries.binary_search_by_key(&n, |e| e.node).expect("node in set");
        &self.entries[i]
    }

    /// (free GPUs, node) of the nodes of `pool` in `scope` with at least `min_gpus` free.
    fn matching(&self, pool: usize, scope: Scope, min_gpus: u64) -> Vec<(u32, usize)> {
        self.entries
            .iter()
            .filter(|e| e.pool == pool && scope.is_none_or(|(l, d)| e.domains[l] == d))
            .filter(|e| u64::from(e.mask.count_ones()) >= min_gpus)
            .map(|e| (e.mask.count_ones(), e.node))
            .collect()
    }
}

impl Nodes for SetNodes {
    fn free(&self, n: usize) -> (Vector, u64) {
        let e = self.entry(n);
        (e.free, e.mask)
    }

    fn gpu_use(&self, n: usize) -> GpuUse {
        self.entry(n).gpu_use
    }

    fn pool(&self, n: usize) -> usize {
        self.entry(n).pool
    }

    fn domain(&self, n: usize, level: usize) -> DomainKey {
        self.entry(n).domains[level]
    }

    fn domains(&self, pool: usize, level: usize) -> Vec<DomainKey> {
        let mut r: Vec<DomainKey> = self.entries.iter().filter(|e| e.pool == pool).map(|e| e.domains[level]).collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    fn fullest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        let mut v = self.matching(pool, scope, min_gpus);
        v.sort_unstable();
        Box::new(v.into_iter().map(|(_, n)| n))
    }

    fn gpu_room(&self, pool: usize, scope: Scope, gpus: u64) -> u64 {
        if gpus == 0 {
            return u64::MAX;
        }
        self.matching(pool, scope, gpus).iter().map(|(free, _)| u64::from(*free) / gpus).sum()
    }

    fn free_of(&self, pool: usize, scope: Scope, kind: usize) -> u64 {
        if kind == GPU_KIND {
            return self.matching(pool, scope, 0).iter().map(|(free, _)| u64::from(*free)).sum();
        }
        self.matching(pool, scope, 0).iter().map(|(_, n)| self.entry(*n).free[kind]).sum()
    }

    fn emptiest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        let mut v = self.matching(pool, scope, min_gpus);
        v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        Box::new(v.into_iter().map(|(_, n)| n))
    }
}
