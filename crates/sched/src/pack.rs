//! Gang placement: all replicas or none, a replica never spanning nodes. Within a pool it
//! keeps a gang on the fewest nodes, then the fewest racks, fuller nodes first, and between
//! equal nodes the one whose name sorts first (docs/policy.md section 3).
//!
//! Replicas of a task are identical, so taking the nodes that can host the most replicas
//! first gives the fewest nodes; the last part of a task goes to the fullest node that can
//! still host it, so big empty nodes stay free for big gangs.

use baton_model::alloc::ReplicaAlloc;
use baton_model::job::Topology;
use baton_model::ledger::{GPU_KIND, Share, Vector, ZERO, add, sub};
use baton_model::name::Name;
use baton_model::state::submit::replicas_fitting;

use crate::index::RackKey;
use crate::needs::Needs;

/// Where packing may look and what is free there.
pub trait Nodes {
    fn free(&self, n: usize) -> (Vector, u64);
    fn pool(&self, n: usize) -> usize;
    fn rack(&self, n: usize) -> RackKey;
    fn racks(&self, pool: usize) -> Vec<RackKey>;
    /// Nodes of `pool` (in `rack` if given) with at least `min_gpus` free, fullest first.
    fn fullest_first(&self, pool: usize, rack: Option<RackKey>, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_>;
    /// Same, emptiest first.
    fn emptiest_first(&self, pool: usize, rack: Option<RackKey>, min_gpus: u64)
    -> Box<dyn Iterator<Item = usize> + '_>;
    /// An upper bound on the replicas of `gpus` GPUs that nodes of `pool` (in `rack`) could
    /// host, counting GPUs only: a cheap way to skip racks that cannot hold a gang.
    fn gpu_room(&self, pool: usize, rack: Option<RackKey>, gpus: u64) -> u64;
}

/// Replicas assigned to nodes: (task, replica index, node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packing {
    pub replicas: Vec<(u32, u32, usize)>,
}

impl Packing {
    pub fn nodes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.replicas.iter().map(|r| r.2).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn racks<N: Nodes>(&self, nodes: &N) -> usize {
        let mut r: Vec<RackKey> = self.nodes().into_iter().map(|n| nodes.rack(n)).collect();
        r.sort_unstable();
        r.dedup();
        r.len()
    }

    /// Gives each replica GPU indices from what is free on its node (lowest first) and
    /// returns the replicas and the per-node shares.
    pub fn allocate<N: Nodes>(
        &self,
        nodes: &N,
        needs: &Needs,
        node_name: impl Fn(usize) -> Name,
    ) -> (Vec<ReplicaAlloc>, Vec<Share>) {
        let mut shares: Vec<Share> = Vec::new();
        let mut out = Vec::with_capacity(self.replicas.len());
        let mut ordered = self.replicas.clone();
        ordered.sort_unstable();
        for (task, index, n) in ordered {
            let need = &needs.tasks[task as usize].need;
            let pos = match shares.iter().position(|s| s.node == n) {
                Some(p) => p,
                None => {
                    shares.push(Share { node: n, amount: ZERO, gpus: 0 });
                    shares.len() - 1
                }
            };
            let (_, free_mask) = nodes.free(n);
            let mut avail = free_mask & !shares[pos].gpus;
            let mut gpus = Vec::with_capacity(need[GPU_KIND] as usize);
            for _ in 0..need[GPU_KIND] {
                let g = avail.trailing_zeros();
                avail &= !(1u64 << g);
                gpus.push(g);
            }
            let s = &mut shares[pos];
            add(&mut s.amount, need);
            s.gpus |= baton_model::alloc::gpu_mask(&gpus);
            out.push(ReplicaAlloc { task, index, node: node_name(n), gpus });
        }
        (out, shares)
    }
}

/// Places the whole gang under `pool_choice` (a pool per task), or says it cannot.
pub fn pack<N: Nodes>(nodes: &N, needs: &Needs, pool_choice: &[usize]) -> Option<Packing> {
    match needs.topology {
        Some(Topology::Node) => pack_one_node(nodes, needs, pool_choice),
        Some(Topology::Rack) => best_rack(nodes, needs, pool_choice, None),
        None => {
            let global = Packer::new(nodes).run(needs, pool_choice, None)?;
            if global.racks(nodes) <= 1 {
                return Some(global);
            }
            Some(best_rack(nodes, needs, pool_choice, Some(global.nodes().len())).unwrap_or(global))
        }
    }
}

fn pack_one_node<N: Nodes>(nodes: &N, needs: &Needs, pool_choice: &[usize]) -> Option<Packing> {
    let pool = *pool_choice.first()?;
    if pool_choice.iter().any(|&p| p != pool) {
        return None;
    }
    let mut total = ZERO;
    for t in &needs.tasks {
        for _ in 0..t.replicas {
            add(&mut total, &t.need);
        }
    }
    let n = nodes.fullest_first(pool, None, total[GPU_KIND]).find(|&n| fits_free(&nodes.free(n), &total))?;
    let replicas = needs
        .tasks
        .iter()
        .enumerate()
        .flat_map(|(t, task)| (0..task.replicas).map(move |i| (t as u32, i, n)))
        .collect();
    Some(Packing { replicas })
}

/// With `enough`, the first rack (in rack order) that holds the gang on at most that many
/// nodes; without, the rack that holds it on the fewest nodes (the first on a tie). Racks
/// whose free GPUs cannot hold the gang are skipped without packing.
fn best_rack<N: Nodes>(nodes: &N, needs: &Needs, pool_choice: &[usize], enough: Option<usize>) -> Option<Packing> {
    let mut racks: Vec<RackKey> = pool_choice.iter().flat_map(|&p| nodes.racks(p)).collect();
    racks.sort_by_key(|r| r.map_or(usize::MAX, |x| x));
    racks.dedup();
    let mut best: Option<Packing> = None;
    for r in racks {
        let room = |(t, &p): (&crate::needs::TaskNeed, &usize)| {
            nodes.gpu_room(p, Some(r), t.need[GPU_KIND]) >= u64::from(t.replicas)
        };
        if !needs.tasks.iter().zip(pool_choice).all(room) {
            continue;
        }
        let Some(p) = Packer::new(nodes).run(needs, pool_choice, Some(r)) else { continue };
        if enough.is_some_and(|n| p.nodes().len() <= n) {
            return Some(p);
        }
        if best.as_ref().is_none_or(|b| p.nodes().len() < b.nodes().len()) {
            best = Some(p);
        }
    }
    best.filter(|b| enough.is_none_or(|n| b.nodes().len() <= n))
}

fn fits_free(free: &(Vector, u64), need: &Vector) -> bool {
    let mut f = free.0;
    f[GPU_KIND] = f[GPU_KIND].min(u64::from(free.1.count_ones()));
    need.iter().zip(&f).all(|(n, f)| n <= f)
}

/// Packs task by task, remembering what this gang already took on each node.
struct Packer<'n, N: Nodes> {
    nodes: &'n N,
    used: Vec<(usize, Vector)>,
    out: Vec<(u32, u32, usize)>,
}

impl<'n, N: Nodes> Packer<'n, N> {
    fn new(nodes: &'n N) -> Self {
        Packer { nodes, used: Vec::new(), out: Vec::new() }
    }

    fn avail(&self, n: usize) -> Vector {
        let (mut free, mask) = self.nodes.free(n);
        free[GPU_KIND] = free[GPU_KIND].min(u64::from(mask.count_ones()));
        if let Some((_, u)) = self.used.iter().find(|(m, _)| *m == n) {
            sub(&mut free, u);
        }
        free
    }

    fn hosts(&self, n: usize, need: &Vector) -> u64 {
        replicas_fitting(need, &self.avail(n))
    }

    fn is_used(&self, n: usize) -> bool {
        self.used.iter().any(|(m, _)| *m == n)
    }

    fn take(&mut self, n: usize, task: usize, count: u64, need: &Vector, next_index: &mut u32) {
        for _ in 0..count {
            self.out.push((task as u32, *next_index, n));
            *next_index += 1;
            match self.used.iter_mut().find(|(m, _)| *m == n) {
                Some((_, u)) => add(u, need),
                None => {
                    let mut u = ZERO;
                    add(&mut u, need);
                    self.used.push((n, u));
                }
            }
        }
    }

    fn run(mut self, needs: &Needs, pool_choice: &[usize], rack: Option<RackKey>) -> Option<Packing> {
        let mut order: Vec<usize> = (0..needs.tasks.len()).collect();
        // Biggest replicas first: they are the hardest to place.
        order.sort_by(|&a, &b| {
            let (x, y) = (&needs.tasks[a].need, &needs.tasks[b].need);
            y[GPU_KIND]
                .cmp(&x[GPU_KIND])
                .then_with(|| y.iter().sum::<u64>().cmp(&x.iter().sum::<u64>()))
                .then(a.cmp(&b))
        });
        for t in order {
            self.place_task(t, &needs.tasks[t].need, u64::from(needs.tasks[t].replicas), pool_choice[t], rack)?;
        }
        Some(Packing { replicas: self.out })
    }

    fn place_task(&mut self, t: usize, need: &Vector, replicas: u64, pool: usize, rack: Option<RackKey>) -> Option<()> {
        let mut remaining = replicas;
        let mut next = 0u32;
        // Nodes this gang already uses first: fewer nodes in all.
        let mut mine: Vec<usize> = self.used.iter().map(|(n, _)| *n).filter(|&n| self.nodes.pool(n) == pool).collect();
        mine.sort_unstable();
        for n in mine {
            let c = self.hosts(n, need).min(remaining);
            self.take(n, t, c, need, &mut next);
            remaining -= c;
        }
        while remaining > 0 {
            if let Some(n) = self.fullest_hosting(pool, rack, need, remaining) {
                self.take(n, t, remaining, need, &mut next);
                return Some(());
            }
            let (n, c) = self.emptiest(pool, rack, need)?;
            self.take(n, t, c, need, &mut next);
            remaining -= c;
        }
        Some(())
    }

    /// The fullest unused node that can host `count` replicas.
    fn fullest_hosting(&self, pool: usize, rack: Option<RackKey>, need: &Vector, count: u64) -> Option<usize> {
        let min_gpus = need[GPU_KIND].saturating_mul(count);
        self.nodes.fullest_first(pool, rack, min_gpus).find(|&n| !self.is_used(n) && self.hosts(n, need) >= count)
    }

    /// The unused node that can host the most replicas (the emptiest), and how many.
    fn emptiest(&self, pool: usize, rack: Option<RackKey>, need: &Vector) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for n in self.nodes.emptiest_first(pool, rack, need[GPU_KIND]) {
            if self.is_used(n) {
                continue;
            }
            let c = self.hosts(n, need);
            if c == 0 {
                continue;
            }
            // GPU-bound replicas: the first node in emptiest order hosts the most.
            if need[GPU_KIND] > 0 {
                return Some((n, c));
            }
            if best.is_none_or(|(_, b)| c > b) {
                best = Some((n, c));
            }
        }
        best
    }
}
