//! Two views of "where may a gang go": the whole index (no preemption) and an explicit set
//! of nodes with some jobs imagined gone (a preemption walk).

use baton_model::job::JobId;
use baton_model::ledger::Vector;

use crate::index::RackKey;
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

    fn pool(&self, n: usize) -> usize {
        self.view.ledger.nodes[n].pool
    }

    fn rack(&self, n: usize) -> RackKey {
        self.view.ledger.nodes[n].rack
    }

    fn racks(&self, pool: usize) -> Vec<RackKey> {
        self.view.index.pools[pool].racks.iter().map(|(r, _)| *r).collect()
    }

    fn fullest_first(&self, pool: usize, rack: Option<RackKey>, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        let p = &self.view.index.pools[pool];
        match rack {
            None => Box::new(p.all.fullest_first(min_gpus)),
            Some(r) => match p.rack(r) {
                Some(b) => Box::new(b.fullest_first(min_gpus)),
                None => Box::new(std::iter::empty()),
            },
        }
    }

    fn gpu_room(&self, pool: usize, rack: Option<RackKey>, gpus: u64) -> u64 {
        let p = &self.view.index.pools[pool];
        match rack {
            None => p.all.gpu_room(gpus),
            Some(r) => p.rack(r).map_or(0, |b| b.gpu_room(gpus)),
        }
    }

    fn emptiest_first(
        &self,
        pool: usize,
        rack: Option<RackKey>,
        min_gpus: u64,
    ) -> Box<dyn Iterator<Item = usize> + '_> {
        let p = &self.view.index.pools[pool];
        match rack {
            None => Box::new(p.all.emptiest_first(min_gpus)),
            Some(r) => match p.rack(r) {
                Some(b) => Box::new(b.emptiest_first(min_gpus)),
                None => Box::new(std::iter::empty()),
            },
        }
    }
}

/// A few nodes, with what would be free for `job` if `removed` were gone.
pub struct SetNodes {
    /// (node, pool, rack, free, free GPU mask), in natural order.
    entries: Vec<(usize, usize, RackKey, Vector, u64)>,
}

impl SetNodes {
    pub fn new(view: &View, job: JobId, removed: &[JobId], nodes: &[usize]) -> SetNodes {
        let mut entries: Vec<_> = nodes
            .iter()
            .map(|&n| {
                let acct = &view.ledger.nodes[n];
                let (free, mask) = view.free_for(n, job, removed);
                (n, acct.pool, acct.rack, free, mask)
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.0);
        SetNodes { entries }
    }

    fn entry(&self, n: usize) -> &(usize, usize, RackKey, Vector, u64) {
        let i = self.entries.binary_search_by_key(&n, |e| e.0).expect("node in set");
        &self.entries[i]
    }

    fn matching(&self, pool: usize, rack: Option<RackKey>, min_gpus: u64) -> Vec<(u32, usize)> {
        self.entries
            .iter()
            .filter(|e| e.1 == pool && rack.is_none_or(|r| e.2 == r) && u64::from(e.4.count_ones()) >= min_gpus)
            .map(|e| (e.4.count_ones(), e.0))
            .collect()
    }
}

impl Nodes for SetNodes {
    fn free(&self, n: usize) -> (Vector, u64) {
        let e = self.entry(n);
        (e.3, e.4)
    }

    fn pool(&self, n: usize) -> usize {
        self.entry(n).1
    }

    fn rack(&self, n: usize) -> RackKey {
        self.entry(n).2
    }

    fn racks(&self, pool: usize) -> Vec<RackKey> {
        let mut r: Vec<RackKey> = self.entries.iter().filter(|e| e.1 == pool).map(|e| e.2).collect();
        r.sort_by_key(|r| r.map_or(usize::MAX, |x| x));
        r.dedup();
        r
    }

    fn fullest_first(&self, pool: usize, rack: Option<RackKey>, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        let mut v = self.matching(pool, rack, min_gpus);
        v.sort_unstable();
        Box::new(v.into_iter().map(|(_, n)| n))
    }

    fn gpu_room(&self, pool: usize, rack: Option<RackKey>, gpus: u64) -> u64 {
        if gpus == 0 {
            return u64::MAX;
        }
        self.matching(pool, rack, gpus).iter().map(|(free, _)| u64::from(*free) / gpus).sum()
    }

    fn emptiest_first(
        &self,
        pool: usize,
        rack: Option<RackKey>,
        min_gpus: u64,
    ) -> Box<dyn Iterator<Item = usize> + '_> {
        let mut v = self.matching(pool, rack, min_gpus);
        v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        Box::new(v.into_iter().map(|(_, n)| n))
    }
}
