//! Gang placement: all replicas or none, a replica never spanning nodes. Within a pool it
//! keeps a gang on the fewest nodes, then the fewest racks, fuller nodes first, and between
//! equal nodes the one whose name sorts first (docs/policy.md section 3).
//!
//! Replicas of a task are identical, so taking the nodes that can host the most replicas
//! first gives the fewest nodes; the last part of a task goes to the fullest node that can
//! still host it, so big empty nodes stay free for big gangs.

use baton_model::alloc::ReplicaAlloc;
use baton_model::ledger::{
    FxMap, GPU_KIND, GPU_MILLI, GpuUse, Share, Vector, ZERO, add, clamp_to_mask, sub, whole_gpus,
};
use baton_model::name::Name;
use baton_model::state::submit::replicas_fitting;

use crate::index::{Buckets, DomainKey, Scope};
use crate::needs::Needs;

/// Where packing may look and what is free there.
pub trait Nodes {
    fn free(&self, n: usize) -> (Vector, u64);
    /// What is used of each GPU of node `n` (for fractions of shared GPUs).
    fn gpu_use(&self, n: usize) -> GpuUse;
    fn pool(&self, n: usize) -> usize;
    /// Node `n`'s domain at topology level `level`.
    fn domain(&self, n: usize, level: usize) -> DomainKey;
    /// The domains of `level` that nodes of `pool` are in, in domain order.
    fn domains(&self, pool: usize, level: usize) -> Vec<DomainKey>;
    /// Nodes of `pool` (in `scope` if given) with at least `min_gpus` free, fullest first.
    fn fullest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_>;
    /// Same, emptiest first.
    fn emptiest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_>;
    /// An upper bound on the replicas of `gpus` GPUs that nodes of `pool` (in `scope`) could
    /// host, counting GPUs only: a cheap way to skip domains that cannot hold a gang.
    fn gpu_room(&self, pool: usize, scope: Scope, gpus: u64) -> u64;
    /// Free units of resource `kind` on the nodes of `pool` in `scope`: a domain's free
    /// capacity (section 10 counts GPUs, CPUs for a gang without GPUs).
    fn free_of(&self, pool: usize, scope: Scope, kind: usize) -> u64;
    /// The index's buckets of each domain of `level` in `pool`, in domain order, where the
    /// nodes are the index's: one pass over them answers for every domain what `gpu_room`
    /// and `free_of` answer for one (each of which searches for the domain first).
    fn domain_buckets(&self, _pool: usize, _level: usize) -> Option<&[(DomainKey, Buckets)]> {
        None
    }
    /// Section 11's candidates, where these nodes are the index's: the GPUs of `pool` that
    /// fractions share with room for `milli`, as (thousandths used, node), best fit first
    /// (the most used, then section 3's node order, then the lowest GPU). `None`: not
    /// indexed, callers look at each node.
    fn shared_gpus(&self, _pool: usize, _milli: u64) -> Option<Box<dyn Iterator<Item = (u64, usize)> + '_>> {
        None
    }
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

    /// How many domains of `level` it spans.
    fn domains<N: Nodes>(&self, nodes: &N, level: usize) -> usize {
        let mut r: Vec<DomainKey> = self.nodes().into_iter().map(|n| nodes.domain(n, level)).collect();
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
        // Whole GPUs first, lowest free index first; then each fraction by section 11's best
        // fit in the order the packer counted them, on what the whole ones left.
        let whole = ordered.iter().filter(|r| !is_fraction(&needs.tasks[r.0 as usize].need));
        let fraction = self.replicas.iter().filter(|r| is_fraction(&needs.tasks[r.0 as usize].need));
        let mut shared: Vec<(usize, GpuUse)> = Vec::new();
        for &(task, index, n) in whole.chain(fraction) {
            let need = &needs.tasks[task as usize].need;
            let pos = match shares.iter().position(|s| s.node == n) {
                Some(p) => p,
                None => {
                    shares.push(Share::new(n, ZERO, 0));
                    shares.len() - 1
                }
            };
            let gpus = if is_fraction(need) {
                let used = gang_use(&mut shared, nodes, n, shares[pos].gpus);
                let g = used.best_fit(need[GPU_KIND]).expect("the packer counted room for every fraction");
                used.add(g, need[GPU_KIND]);
                shares[pos].fractions.add(g, need[GPU_KIND]);
                vec![g]
            } else {
                let (_, free_mask) = nodes.free(n);
                let mut avail = free_mask & !shares[pos].gpus;
                let count = whole_gpus(need[GPU_KIND]);
                let mut gpus = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let g = avail.trailing_zeros();
                    avail &= !(1u64 << g);
                    gpus.push(g);
                }
                shares[pos].gpus |= baton_model::alloc::gpu_mask(&gpus);
                gpus
            };
            add(&mut shares[pos].amount, need);
            out.push(ReplicaAlloc { task, index, node: node_name(n), gpus });
        }
        out.sort_unstable_by_key(|r| (r.task, r.index));
        (out, shares)
    }
}

/// Places the whole gang under `pool_choice` (a pool per task), or says it cannot.
pub fn pack<N: Nodes>(nodes: &N, needs: &Needs, pool_choice: &[usize]) -> Option<Packing> {
    let l = &needs.levels;
    if l.unplaceable {
        return None;
    }
    if l.one_node {
        return pack_one_node(nodes, needs, pool_choice);
    }
    if let Some(level) = l.required() {
        // Section 10: the required level first, by best fit; the preferred one within it.
        return best_fit(nodes, needs, pool_choice, level, None, |scope| prefer(nodes, needs, pool_choice, scope));
    }
    if l.preferred().is_some() {
        return prefer(nodes, needs, pool_choice, None);
    }
    // Section 3: the fewest nodes, then the fewest racks.
    let global = Packer::new(nodes).run(needs, pool_choice, None)?;
    let Some(rack) = l.rack() else { return Some(global) };
    if global.domains(nodes, rack) <= 1 {
        return Some(global);
    }
    Some(first_domain_within(nodes, needs, pool_choice, rack, global.nodes().len()).unwrap_or(global))
}

/// The domains of `level` under `pool_choice` (within `scope`, a domain of a level above),
/// with their free capacity (GPUs; CPUs for a gang without GPUs): (free, domain), in domain
/// order. With `room_only`, only those whose free GPUs could hold the gang; that check
/// comes first: on a full cluster few domains pass it, and only those are counted.
fn domains_free<N: Nodes>(
    nodes: &N,
    needs: &Needs,
    pool_choice: &[usize],
    (level, scope): (usize, Scope),
    room_only: bool,
) -> Vec<(u64, DomainKey)> {
    if let Some(ds) = domains_free_in_one_pool(nodes, needs, pool_choice, (level, scope), room_only) {
        return ds;
    }
    let keep = |d: DomainKey| !room_only || has_room(nodes, needs, pool_choice, Some((level, d)));
    domains_where(nodes, pool_choice, (level, scope, needs.levels.measure()), keep)
}

/// `domains_free` in the common case, every task in one pool and no enclosing domain, in one
/// pass over the index's domains (`None` in any other case). Every gang that requires a
/// level asks this, of every domain of the level: a thousand NVLink domains at 10,000 nodes.
fn domains_free_in_one_pool<N: Nodes>(
    nodes: &N,
    needs: &Needs,
    pool_choice: &[usize],
    (level, scope): (usize, Scope),
    room_only: bool,
) -> Option<Vec<(u64, DomainKey)>> {
    let pool = *pool_choice.first()?;
    if scope.is_some() || pool_choice.iter().any(|&p| p != pool) {
        return None;
    }
    let ds = nodes.domain_buckets(pool, level)?;
    let kind = needs.levels.measure();
    // Per fraction task, the room of each domain's shared GPUs (section 11).
    let mut shared: Vec<Option<FxMap<DomainKey, u64>>> = Vec::with_capacity(needs.tasks.len());
    for t in &needs.tasks {
        let fraction = room_only && is_fraction(&t.need);
        shared.push(if fraction { Some(shared_room_by_domain(nodes, pool, level, t.need[GPU_KIND])?) } else { None });
    }
    let room = |d: DomainKey, b: &Buckets| {
        needs.tasks.iter().zip(&shared).all(|(t, on_shared)| {
            let room = match on_shared {
                Some(by_domain) => {
                    fractions_bound(b.gpu_room(1), t.need[GPU_KIND], by_domain.get(&d).copied().unwrap_or(0))
                }
                None => b.gpu_room(whole_gpus(t.need[GPU_KIND])),
            };
            room >= u64::from(t.replicas)
        })
    };
    let free = |d: DomainKey, b: &Buckets| {
        if kind == GPU_KIND { b.free_gpus() } else { nodes.free_of(pool, Some((level, d)), kind) }
    };
    Some(ds.iter().filter(|(d, b)| !room_only || room(*d, b)).map(|(d, b)| (free(*d, b), *d)).collect())
}

/// The domains of `level` under `pool_choice` within `scope` that `keep` keeps (asked
/// first, as it is the cheaper test), with their free capacity in `kind`, in domain order.
fn domains_where<N: Nodes>(
    nodes: &N,
    pool_choice: &[usize],
    (level, scope, kind): (usize, Scope, usize),
    keep: impl Fn(DomainKey) -> bool,
) -> Vec<(u64, DomainKey)> {
    let mut pools: Vec<usize> = pool_choice.to_vec();
    pools.sort_unstable();
    pools.dedup();
    let mut ds: Vec<DomainKey> = pools.iter().flat_map(|&p| nodes.domains(p, level)).collect();
    ds.sort_unstable();
    ds.dedup();
    // A domain of a lower level lies in one domain of each level above (a domain is its
    // path): one of its nodes says which.
    let inside = |d: DomainKey| {
        scope.is_none_or(|(up, within)| {
            pools
                .iter()
                .find_map(|&p| nodes.fullest_first(p, Some((level, d)), 0).next())
                .is_some_and(|n| nodes.domain(n, up) == within)
        })
    };
    ds.into_iter()
        .filter(|&d| keep(d) && inside(d))
        .map(|d| (pools.iter().map(|&p| nodes.free_of(p, Some((level, d)), kind)).sum(), d))
        .collect()
}

/// Whether the GPUs free in `scope` could hold every task (a quick bound before packing).
fn has_room<N: Nodes>(nodes: &N, needs: &Needs, pool_choice: &[usize], scope: Scope) -> bool {
    needs.tasks.iter().zip(pool_choice).all(|(t, &p)| {
        let room = if is_fraction(&t.need) {
            fraction_room(nodes, p, scope, t.need[GPU_KIND])
        } else {
            nodes.gpu_room(p, scope, whole_gpus(t.need[GPU_KIND]))
        };
        room >= u64::from(t.replicas)
    })
}

/// An upper bound on the fractions of `milli` the GPUs of `pool` in `scope` could hold
/// (section 11): each free GPU as many as fit in a whole one, each shared GPU as many as fit
/// in its room. Unbounded where the shared GPUs are not indexed.
fn fraction_room<N: Nodes>(nodes: &N, pool: usize, scope: Scope, milli: u64) -> u64 {
    let Some(shared) = nodes.shared_gpus(pool, milli) else { return u64::MAX };
    let in_scope = |n: usize| scope.is_none_or(|(level, d)| nodes.domain(n, level) == d);
    let on_shared: u64 = shared.filter(|&(_, n)| in_scope(n)).map(|(used, _)| (GPU_MILLI - used) / milli).sum();
    fractions_bound(nodes.gpu_room(pool, scope, 1), milli, on_shared)
}

/// Fractions of `milli` that `free_gpus` empty GPUs and shared GPUs holding `on_shared` of
/// them could take.
fn fractions_bound(free_gpus: u64, milli: u64, on_shared: u64) -> u64 {
    free_gpus.saturating_mul(GPU_MILLI / milli).saturating_add(on_shared)
}

/// `fraction_room`'s shared part for every domain of `level` in `pool` at once (one pass
/// over the shared GPUs): the fractions of `milli` their room holds, per domain that has any.
fn shared_room_by_domain<N: Nodes>(nodes: &N, pool: usize, level: usize, milli: u64) -> Option<FxMap<DomainKey, u64>> {
    let mut out: FxMap<DomainKey, u64> = FxMap::default();
    for (used, n) in nodes.shared_gpus(pool, milli)? {
        *out.entry(nodes.domain(n, level)).or_default() += (GPU_MILLI - used) / milli;
    }
    Some(out)
}

/// Section 10's best fit: of the domains of `level` (within `scope`) where `place` packs the
/// gang, the one with the least free capacity (GPUs; CPUs for a gang without GPUs); equal
/// ones in domain (natural) order.
fn best_fit<N: Nodes>(
    nodes: &N,
    needs: &Needs,
    pool_choice: &[usize],
    level: usize,
    scope: Scope,
    place: impl Fn(Scope) -> Option<Packing>,
) -> Option<Packing> {
    let mut ds = domains_free(nodes, needs, pool_choice, (level, scope), true);
    ds.sort_unstable();
    ds.into_iter().find_map(|(_, d)| place(Some((level, d))))
}

/// Within `scope`: a domain of the preferred level that holds the whole gang (best fit), or
/// else the fewest such domains, the ones with the most free GPUs first. Without a
/// preferred level, the gang packed in `scope` by section 3.
fn prefer<N: Nodes>(nodes: &N, needs: &Needs, pool_choice: &[usize], scope: Scope) -> Option<Packing> {
    let Some(level) = needs.levels.preferred() else {
        return Packer::new(nodes).run(needs, pool_choice, scope);
    };
    let one = best_fit(nodes, needs, pool_choice, level, scope, |s| Packer::new(nodes).run(needs, pool_choice, s));
    if one.is_some() {
        return one;
    }
    let mut ds = domains_free(nodes, needs, pool_choice, (level, scope), false);
    ds.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let ds: Vec<DomainKey> = ds.into_iter().map(|(_, d)| d).collect();
    (2..=ds.len()).find_map(|k| {
        let union = Union { inner: nodes, level, domains: &ds[..k] };
        if !has_room(&union, needs, pool_choice, None) {
            return None;
        }
        Packer::new(&union).run(needs, pool_choice, None)
    })
}

/// The first domain of `level` (in domain order) that holds the gang on at most `enough`
/// nodes. Domains whose free GPUs cannot hold the gang are skipped without packing.
fn first_domain_within<N: Nodes>(
    nodes: &N,
    needs: &Needs,
    pool_choice: &[usize],
    level: usize,
    enough: usize,
) -> Option<Packing> {
    domains_free(nodes, needs, pool_choice, (level, None), true)
        .into_iter()
        .filter_map(|(_, d)| Packer::new(nodes).run(needs, pool_choice, Some((level, d))))
        .find(|p| p.nodes().len() <= enough)
}

/// The nodes of a few domains of one level, as one place to pack in.
struct Union<'n, N: Nodes> {
    inner: &'n N,
    level: usize,
    domains: &'n [DomainKey],
}

impl<N: Nodes> Union<'_, N> {
    /// (free GPUs, node) of the nodes of `pool` in these domains with `min_gpus` free.
    fn matching(&self, pool: usize, min_gpus: u64) -> Vec<(u32, usize)> {
        self.domains
            .iter()
            .flat_map(|&d| self.inner.fullest_first(pool, Some((self.level, d)), min_gpus))
            .map(|n| (self.inner.free(n).1.count_ones(), n))
            .collect()
    }
}

impl<N: Nodes> Nodes for Union<'_, N> {
    fn free(&self, n: usize) -> (Vector, u64) {
        self.inner.free(n)
    }

    fn gpu_use(&self, n: usize) -> GpuUse {
        self.inner.gpu_use(n)
    }

    fn pool(&self, n: usize) -> usize {
        self.inner.pool(n)
    }

    fn domain(&self, n: usize, level: usize) -> DomainKey {
        self.inner.domain(n, level)
    }

    fn domains(&self, pool: usize, level: usize) -> Vec<DomainKey> {
        self.inner.domains(pool, level)
    }

    fn fullest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        debug_assert!(scope.is_none(), "a union is packed as a whole");
        let mut v = self.matching(pool, min_gpus);
        v.sort_unstable();
        Box::new(v.into_iter().map(|(_, n)| n))
    }

    fn emptiest_first(&self, pool: usize, scope: Scope, min_gpus: u64) -> Box<dyn Iterator<Item = usize> + '_> {
        debug_assert!(scope.is_none(), "a union is packed as a whole");
        let mut v = self.matching(pool, min_gpus);
        v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        Box::new(v.into_iter().map(|(_, n)| n))
    }

    fn shared_gpus(&self, pool: usize, milli: u64) -> Option<Box<dyn Iterator<Item = (u64, usize)> + '_>> {
        let mine = |n: usize| self.domains.contains(&self.inner.domain(n, self.level));
        Some(Box::new(self.inner.shared_gpus(pool, milli)?.filter(move |&(_, n)| mine(n))))
    }

    fn gpu_room(&self, pool: usize, _scope: Scope, gpus: u64) -> u64 {
        self.domains
            .iter()
            .map(|&d| self.inner.gpu_room(pool, Some((self.level, d)), gpus))
            .fold(0, u64::saturating_add)
    }

    fn free_of(&self, pool: usize, _scope: Scope, kind: usize) -> u64 {
        self.domains.iter().map(|&d| self.inner.free_of(pool, Some((self.level, d)), kind)).sum()
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
    let n =
        nodes.fullest_first(pool, None, whole_gpus(total[GPU_KIND])).find(|&n| fits_free(&nodes.free(n), &total))?;
    let replicas = needs
        .tasks
        .iter()
        .enumerate()
        .flat_map(|(t, task)| (0..task.replicas).map(move |i| (t as u32, i, n)))
        .collect();
    Some(Packing { replicas })
}

fn fits_free(free: &(Vector, u64), need: &Vector) -> bool {
    let mut f = free.0;
    clamp_to_mask(&mut f, free.1);
    need.iter().zip(&f).all(|(n, f)| n <= f)
}

/// A replica's need is a fraction of one shared GPU (decisions.md section 11).
pub fn is_fraction(need: &Vector) -> bool {
    need[GPU_KIND] % GPU_MILLI != 0
}

/// What is used of node `n`'s GPUs once this gang holds `whole` there whole, and the
/// fractions it was given so far (kept per node in `shared`).
fn gang_use<'s, N: Nodes>(shared: &'s mut Vec<(usize, GpuUse)>, nodes: &N, n: usize, whole: u64) -> &'s mut GpuUse {
    let pos = match shared.iter().position(|(m, _)| *m == n) {
        Some(p) => p,
        None => {
            let mut u = nodes.gpu_use(n);
            u.take_whole(whole);
            shared.push((n, u));
            shared.len() - 1
        }
    };
    &mut shared[pos].1
}

/// The `count` lowest GPUs of `mask`: what `allocate` gives a gang's whole replicas.
fn lowest(mut mask: u64, count: u64) -> u64 {
    let mut out = 0;
    for _ in 0..count {
        let g = mask.trailing_zeros();
        if g >= 64 {
            break;
        }
        out |= 1u64 << g;
        mask &= !(1u64 << g);
    }
    out
}

/// Packs task by task, remembering what this gang already took on each node.
struct Packer<'n, N: Nodes> {
    nodes: &'n N,
    used: Vec<(usize, Vector)>,
    /// Per node where the gang has fractions: what is used of each GPU.
    shared: Vec<(usize, GpuUse)>,
    out: Vec<(u32, u32, usize)>,
}

impl<'n, N: Nodes> Packer<'n, N> {
    fn new(nodes: &'n N) -> Self {
        Packer { nodes, used: Vec::new(), shared: Vec::new(), out: Vec::new() }
    }

    /// What is free on node `n` less what this gang took there, GPUs in thousandths.
    fn left(&self, n: usize) -> Vector {
        let (mut free, _) = self.nodes.free(n);
        if let Some((_, u)) = self.used.iter().find(|(m, _)| *m == n) {
            sub(&mut free, u);
        }
        free
    }

    /// The GPUs this gang holds whole on node `n` (whole replicas are packed first).
    fn whole_taken(&self, n: usize) -> u64 {
        let taken = self.used.iter().find(|(m, _)| *m == n).map_or(0, |(_, u)| whole_gpus(u[GPU_KIND]));
        lowest(self.nodes.free(n).1, taken)
    }

    fn gang_use_now(&self, n: usize) -> GpuUse {
        match self.shared.iter().find(|(m, _)| *m == n) {
            Some((_, u)) => *u,
            None => {
                let mut u = self.nodes.gpu_use(n);
                u.take_whole(self.whole_taken(n));
                u
            }
        }
    }

    /// Section 11: each fraction on the GPU it fits best, the most used one that still
    /// holds it, across the nodes where its other resources fit; among equals, section 3's
    /// node order, then the lowest GPU index.
    fn place_fractions(&mut self, t: usize, need: &Vector, replicas: u64, pool: usize, scope: Scope) -> Option<()> {
        let mut next = 0u32;
        for _ in 0..replicas {
            let n = self.best_fraction_node(pool, scope, need)?;
            self.take(n, t, 1, need, &mut next);
        }
        Some(())
    }

    /// `scan_fraction_node`'s answer from the index of shared GPUs, without looking at every
    /// node: the best shared GPU whose node holds the rest (or a node this gang uses, looked
    /// at as the scan does), else the first node in section 3's order with an empty GPU.
    fn best_fraction_node(&self, pool: usize, scope: Scope, need: &Vector) -> Option<usize> {
        let found = self.indexed_fraction_node(pool, scope, need);
        // The scheduler's own tests (its property tests among them) check the index against
        // the scan it replaces, at every fraction they place.
        #[cfg(test)]
        assert_eq!(found, self.scan_fraction_node(pool, scope, need), "the index and the scan disagree");
        found
    }

    fn indexed_fraction_node(&self, pool: usize, scope: Scope, need: &Vector) -> Option<usize> {
        let milli = need[GPU_KIND];
        let Some(shared) = self.nodes.shared_gpus(pool, milli) else {
            return self.scan_fraction_node(pool, scope, need);
        };
        let mut rest = *need;
        rest[GPU_KIND] = 0;
        let in_scope = |n: usize| scope.is_none_or(|(level, d)| self.nodes.domain(n, level) == d);
        let order = |n: usize| (self.nodes.free(n).1.count_ones(), n);
        // (thousandths used on the GPU it would go on, section 3's order of its node)
        let mut best: Option<(u64, (u32, usize))> = None;
        let mut consider = |used: u64, n: usize| {
            if best.is_none_or(|(b, o)| used > b || (used == b && order(n) < o)) {
                best = Some((used, order(n)));
            }
        };
        let mut mine: Vec<usize> =
            self.used.iter().map(|(n, _)| *n).chain(self.shared.iter().map(|(n, _)| *n)).collect();
        mine.sort_unstable();
        mine.dedup();
        for &n in mine.iter().filter(|&&n| self.nodes.pool(n) == pool && in_scope(n)) {
            if let Some(used) = self.fraction_fit(n, &rest, milli) {
                consider(used, n);
            }
        }
        // Shared GPUs come best first: the first on a node that holds the rest is the best
        // of those this gang has not touched. The index lists a shared GPU by the fractions on
        // it alone; a reservation may hold its room for another job (`reserve::block` keeps
        // fractions off a reserved GPU), so the node is asked as the scan asks it.
        let untouched = |n: &usize| mine.binary_search(n).is_err() && in_scope(*n);
        if let Some((used, n)) =
            shared.filter(|(_, n)| untouched(n)).find_map(|(_, n)| self.fraction_fit(n, &rest, milli).map(|u| (u, n)))
        {
            consider(used, n);
        }
        if let Some((used, (_, n))) = best.filter(|(used, _)| *used > 0) {
            debug_assert!(used + milli <= GPU_MILLI);
            return Some(n);
        }
        // No shared GPU holds it: an empty one, on the first node in section 3's order.
        self.nodes.fullest_first(pool, scope, 1).find(|&n| self.fraction_fit(n, &rest, milli).is_some())
    }

    /// The thousandths used on the GPU of node `n` a fraction of `milli` would go on, if it
    /// fits there with `rest` beside what this gang took.
    fn fraction_fit(&self, n: usize, rest: &Vector, milli: u64) -> Option<u64> {
        let left = self.left(n);
        if left[GPU_KIND] < milli || replicas_fitting(rest, &left) == 0 {
            return None;
        }
        let u = self.gang_use_now(n);
        u.best_fit(milli).map(|g| u.used(g))
    }

    /// Section 11's node for one fraction, looking at every node of the pool in `scope`.
    fn scan_fraction_node(&self, pool: usize, scope: Scope, need: &Vector) -> Option<usize> {
        let milli = need[GPU_KIND];
        let mut rest = *need;
        rest[GPU_KIND] = 0;
        let mut best: Option<(u64, usize)> = None;
        for n in self.nodes.fullest_first(pool, scope, 0) {
            let left = self.left(n);
            if left[GPU_KIND] < milli || replicas_fitting(&rest, &left) == 0 {
                continue;
            }
            // Without fractions here the free milli are whole free GPUs: only an empty
            // GPU could take it, and an earlier node's empty GPU ties with it.
            let (_, mask) = self.nodes.free(n);
            let empty = mask & !self.whole_taken(n);
            let no_shared = !self.shared.iter().any(|(m, _)| *m == n)
                && left[GPU_KIND] <= GPU_MILLI * u64::from(empty.count_ones());
            if no_shared {
                best = best.or(Some((0, n)));
                continue;
            }
            let u = self.gang_use_now(n);
            let Some(g) = u.best_fit(milli) else { continue };
            let used = u.used(g);
            if best.is_none_or(|(b, _)| used > b) {
                best = Some((used, n));
                if used + milli == GPU_MILLI {
                    break;
                }
            }
        }
        best.map(|(_, n)| n)
    }

    fn avail(&self, n: usize) -> Vector {
        let (mut free, mask) = self.nodes.free(n);
        clamp_to_mask(&mut free, mask);
        if let Some((_, u)) = self.used.iter().find(|(m, _)| *m == n) {
            sub(&mut free, u);
        }
        free
    }

    fn hosts(&self, n: usize, need: &Vector) -> u64 {
        if !is_fraction(need) {
            return replicas_fitting(need, &self.avail(n));
        }
        let mut rest = *need;
        rest[GPU_KIND] = 0;
        replicas_fitting(&rest, &self.left(n)).min(self.gang_use_now(n).room_for(need[GPU_KIND]))
    }

    fn is_used(&self, n: usize) -> bool {
        self.used.iter().any(|(m, _)| *m == n)
    }

    fn take(&mut self, n: usize, task: usize, count: u64, need: &Vector, next_index: &mut u32) {
        if is_fraction(need) && count > 0 {
            let whole = self.whole_taken(n);
            let u = gang_use(&mut self.shared, self.nodes, n, whole);
            for _ in 0..count {
                let g = u.best_fit(need[GPU_KIND]).expect("hosts counted room for it");
                u.add(g, need[GPU_KIND]);
            }
        }
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

    fn run(mut self, needs: &Needs, pool_choice: &[usize], scope: Scope) -> Option<Packing> {
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
            self.place_task(t, &needs.tasks[t].need, u64::from(needs.tasks[t].replicas), pool_choice[t], scope)?;
        }
        Some(Packing { replicas: self.out })
    }

    fn place_task(&mut self, t: usize, need: &Vector, replicas: u64, pool: usize, scope: Scope) -> Option<()> {
        if is_fraction(need) {
            return self.place_fractions(t, need, replicas, pool, scope);
        }
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
            if let Some(n) = self.fullest_hosting(pool, scope, need, remaining) {
                self.take(n, t, remaining, need, &mut next);
                return Some(());
            }
            let (n, c) = self.emptiest(pool, scope, need)?;
            self.take(n, t, c, need, &mut next);
            remaining -= c;
        }
        Some(())
    }

    /// The fullest unused node that can host `count` replicas.
    fn fullest_hosting(&self, pool: usize, scope: Scope, need: &Vector, count: u64) -> Option<usize> {
        let min_gpus = whole_gpus(need[GPU_KIND]).saturating_mul(count);
        self.nodes.fullest_first(pool, scope, min_gpus).find(|&n| !self.is_used(n) && self.hosts(n, need) >= count)
    }

    /// The unused node that can host the most replicas (the emptiest), and how many.
    fn emptiest(&self, pool: usize, scope: Scope, need: &Vector) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for n in self.nodes.emptiest_first(pool, scope, whole_gpus(need[GPU_KIND])) {
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
