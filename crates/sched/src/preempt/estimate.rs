//! Which node sets the exact walk tries, best first (step 2 of `preempt`'s plan). Every
//! node is scored by the victims it alone would need for one replica: a quick estimate by
//! static rank, without quota, compared like `Score`. Sets are gathered from the best
//! nodes, over the whole pool, from a gang candidate's nodes onwards, and within each rack.
//! Idle capacity scores best, so it is used first.

use std::collections::BTreeMap;

use baton_model::job::{Job, JobId};
use baton_model::ledger::{GPU_KIND, Vector, add, clamp_to_mask, fits, sub, whole_gpus};
use baton_model::limits::MAX_RESOURCE_KINDS;
use baton_model::state::submit::replicas_fitting;

use super::cand::Cand;
use super::memo::Memo;
use super::onnode::{OnNode, OnNodes};
use crate::index::{DomainKey, Scope};
use crate::needs::Needs;
use crate::view::View;

/// How many single-node placements get the exact walk after the quick estimate.
const EXACT_SINGLE_NODE_WALKS: usize = 16;
/// Most nodes one touched set may hold.
const MAX_TOUCHED_NODES: usize = 512;
/// Most gang candidates whose nodes begin a touched set of their own.
const MAX_GANG_SEEDS: usize = 8;

/// A node's quick estimate, compared like `Score` but without allocating: own-queue
/// victims, highest victim priority and how many at it, victims, lost work, best rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Quick {
    own: u16,
    top: i64,
    at_top: u16,
    count: u16,
    lost: u128,
    /// Position of the best-ranked victim among all candidates (`u32::MAX`: none).
    best: u32,
}

impl Quick {
    /// Adds another node's estimate, as the victims of both together would score.
    fn add(&mut self, o: &Quick) {
        self.own += o.own;
        self.count += o.count;
        self.lost += o.lost;
        match o.top.cmp(&self.top) {
            std::cmp::Ordering::Greater => (self.top, self.at_top) = (o.top, o.at_top),
            std::cmp::Ordering::Equal => self.at_top += o.at_top,
            std::cmp::Ordering::Less => {}
        }
        self.best = self.best.min(o.best);
    }
}

/// A node's quick estimate with how many replicas it could host then (`estimate`).
pub(super) type Est = (Quick, u64);

/// The candidates with each one's position in rank order.
struct Ranked<'c> {
    cands: &'c [Cand],
    rank: &'c [u32],
}

/// Each candidate's position in rank order (`Cand::rank_bits`): the candidates in that order,
/// and each one's position.
pub fn rank_order(cands: &[Cand]) -> (Vec<u32>, Vec<u32>) {
    let mut by_rank: Vec<u32> = (0..cands.len() as u32).collect();
    by_rank.sort_by_cached_key(|&i| cands[i as usize].rank_bits());
    let rank = positions_of(&by_rank);
    (by_rank, rank)
}

/// Each candidate's position in `by_rank`.
fn positions_of(by_rank: &[u32]) -> Vec<u32> {
    let mut rank = vec![0u32; by_rank.len()];
    for (pos, &i) in by_rank.iter().enumerate() {
        rank[i as usize] = pos as u32;
    }
    rank
}

/// A node's quick estimate: the victims it alone would need to host `need` (static rank, no
/// quota), or `None` if it could not even with every candidate gone; with how many replicas
/// it could host then.
fn estimate(
    view: &View,
    job: JobId,
    n: usize,
    need: &Vector,
    ranked: &Ranked,
    on: &OnNode,
    order: &mut Vec<usize>,
) -> Option<(Quick, u64)> {
    let (mut free, mask) = view.free_for(n, job, &[]);
    clamp_to_mask(&mut free, mask);
    // Section 11: free amounts count whole free GPUs only, but a fraction also fits on a
    // shared GPU with room for it; then only its other resources may need victims.
    if crate::pack::is_fraction(need)
        && view.ledger.nodes[n].gpu_use_for(Some(job), &[]).best_fit(need[GPU_KIND]).is_some()
    {
        free[GPU_KIND] = free[GPU_KIND].max(need[GPU_KIND]);
    }
    let mut all = free;
    for (_, amount) in on {
        add(&mut all, amount);
    }
    let hosts = replicas_fitting(need, &all);
    if hosts == 0 {
        return None;
    }
    order.clear();
    order.extend(0..on.len());
    order.sort_unstable_by_key(|&i| ranked.rank[on[i].0]);
    let mut acc = free;
    let mut taken = 0;
    while taken < order.len() && !fits(need, &acc) {
        add(&mut acc, &on[order[taken]].1);
        taken += 1;
    }
    order.truncate(taken);
    for idx in (0..order.len()).rev() {
        let mut without = acc;
        sub(&mut without, &on[order[idx]].1);
        if fits(need, &without) {
            acc = without;
            order.remove(idx);
        }
    }
    let (cands, rank) = (ranked.cands, &ranked.rank);
    let mut q = Quick { own: 0, top: i64::MIN, at_top: 0, count: 0, lost: 0, best: u32::MAX };
    for &i in order.iter() {
        let c = &cands[on[i].0];
        q.best = q.best.min(rank[on[i].0]);
        if c.leaving {
            continue;
        }
        q.own += u16::from(c.own);
        q.count += 1;
        q.lost += c.lost_work(view.now_ms);
        match i64::from(c.priority).cmp(&q.top) {
            std::cmp::Ordering::Greater => (q.top, q.at_top) = (i64::from(c.priority), 1),
            std::cmp::Ordering::Equal => q.at_top += 1,
            std::cmp::Ordering::Less => {}
        }
    }
    Some((q, hosts))
}

/// Node sets to walk for a pool choice, best estimates first: the whole pool's, then those
/// begun by a gang candidate's nodes, then each rack's.
pub struct Touched {
    pub sets: Vec<Vec<usize>>,
    /// How many sets are begun by a gang candidate (they follow the first).
    pub gang_seeded: usize,
}

/// Node sets to walk for a pool choice, best estimates first. Estimates kept in `memo` are
/// used where they hold (`memo.rs`); `None` where they may not (the preemptor holds a
/// reservation, which changes what is free for it).
pub fn touched_sets(
    view: &View,
    job: &Job,
    needs: &Needs,
    a: &[usize],
    (cands, on_node, rank): (&[Cand], &OnNodes, &[u32]),
    mut memo: Option<&mut Memo<Est>>,
) -> Touched {
    let single = needs.tasks.iter().map(|t| t.replicas).sum::<u32>() == 1
        || needs.topology.is_some_and(|t| t == baton_model::job::Topology::Node);
    let (primary, need) = primary_need(needs, single);
    let pool = a[primary];
    let mut scored: Vec<Scored> = Vec::new();
    let mut order = Vec::new();
    // Each candidate's position in rank order (`rank_order`), so estimates compare small
    // integers.
    debug_assert_eq!(rank, rank_order(cands).1, "kept rank positions");
    let ranked = Ranked { cands, rank };
    if let Some(m) = memo.as_deref_mut() {
        m.for_need(view, &need);
    }
    for (n, on) in on_node.iter() {
        let mut fresh = || estimate(view, job.id, n, &need, &ranked, on, &mut order);
        let (free_gpus, est) = match memo.as_deref_mut() {
            Some(m) => {
                let f = m.facts(view, n);
                if f.pool != pool || !f.schedulable {
                    continue;
                }
                let est = match f.est {
                    Some(kept) => {
                        debug_assert_eq!(kept, fresh(), "the estimate kept for node {n} and a fresh one");
                        super::memo::count_reuse();
                        kept
                    }
                    None => *f.est.insert(fresh()),
                };
                (f.free_gpus, est)
            }
            None => {
                let node = &view.ledger.nodes[n];
                if node.pool != pool || !node.schedulable {
                    continue;
                }
                (node.free_gpu_count(), fresh())
            }
        };
        if let Some((q, h)) = est {
            scored.push(Scored { quick: q, free_gpus, node: n, hosts: h });
        }
    }
    // Idle capacity: nodes that host a replica with no victim at all.
    let replicas: u64 = needs.tasks.iter().map(|t| u64::from(t.replicas)).sum();
    let idle: Vec<usize> = view.index.pools[pool]
        .all
        .emptiest_first(whole_gpus(need[GPU_KIND]))
        .filter(|&n| !on_node.contains(n))
        .take(replicas as usize)
        .collect();
    for n in idle {
        if let Some((q, h)) = estimate(view, job.id, n, &need, &ranked, &[], &mut order) {
            scored.push(Scored { quick: q, free_gpus: view.ledger.nodes[n].free_gpu_count(), node: n, hosts: h });
        }
    }
    if single && scored.len() > EXACT_SINGLE_NODE_WALKS {
        scored.select_nth_unstable(EXACT_SINGLE_NODE_WALKS);
        scored.truncate(EXACT_SINGLE_NODE_WALKS);
    }
    if single {
        scored.sort_unstable();
        return Touched { sets: scored.iter().map(|s| vec![s.node]).collect(), gang_seeded: 0 };
    }
    let other_pools: Vec<usize> = a.iter().copied().filter(|&p| p != pool).collect();
    let extra = extra_nodes(view, &other_pools, on_node);
    let want = replicas_of(needs, primary);
    // A gather stops after `want` nodes (each hosts a replica) or MAX_TOUCHED_NODES: only
    // that many best nodes of each rack, and of the whole pool, need to be in order.
    let keep = (want.min(MAX_TOUCHED_NODES as u64) as usize).max(1);
    let seeds = gang_seeds(&scored, &ranked, on_node);
    // Per domain of the required level (section 10: the walk runs per domain), or else per
    // rack (section 3: the fewest racks).
    let group = needs.levels.required().or(needs.levels.rack());
    let mut by_rack: BTreeMap<DomainKey, Vec<Scored>> = BTreeMap::new();
    for s in scored {
        by_rack.entry(group.map_or(0, |l| view.ledger.nodes[s.node].domains[l])).or_default().push(s);
    }
    for best in by_rack.values_mut() {
        best_in_order(best, keep);
    }
    let mut best: Vec<Scored> = by_rack.values().flatten().copied().collect();
    best_in_order(&mut best, keep);
    let mut sets = Vec::new();
    if let Some((s, _)) = gather(&best, None, view, want, &extra) {
        sets.push(s);
    }
    let before_seeds = sets.len();
    for seed in seeds {
        let rest = best.iter().filter(|s| !seed.iter().any(|g| g.node == s.node));
        let begun: Vec<Scored> = seed.iter().chain(rest).copied().collect();
        if let Some((s, _)) = gather(&begun, None, view, want, &extra)
            && !sets.contains(&s)
        {
            sets.push(s);
        }
    }
    let gang_seeded = sets.len() - before_seeds;
    // Within racks: the racks whose best nodes look cheapest, a bounded number of them.
    if by_rack.len() > 1 || needs.topology.is_some() {
        let mut per_rack: Vec<(Quick, Vec<usize>)> = by_rack
            .iter()
            .filter_map(|(&r, best)| gather(best, group.map(|l| (l, r)), view, want, &extra).map(|(s, q)| (q, s)))
            .collect();
        per_rack.sort_unstable();
        sets.extend(per_rack.into_iter().map(|(_, s)| s));
    }
    sets.dedup();
    Touched { sets, gang_seeded }
}

/// The nodes of each gang candidate (on two or more of the scored nodes), best-ranked gangs
/// first and at most `MAX_GANG_SEEDS` of them, each gang's nodes best-estimated first.
///
/// Why: a node's estimate counts the victims that node alone would need, so a gang victim
/// costs one victim on each of its nodes and loses to later-started jobs that rank before
/// it, though taking the gang alone may free a whole placement: one victim where the
/// best nodes one by one need several (decisions.md section 5 compares the sets).
fn gang_seeds(scored: &[Scored], ranked: &Ranked, on_node: &OnNodes) -> Vec<Vec<Scored>> {
    let mut count = vec![0u32; ranked.cands.len()];
    for s in scored {
        for (i, _) in on_node.get(s.node) {
            count[*i] += 1;
        }
    }
    let mut gangs: Vec<usize> = (0..count.len()).filter(|&i| count[i] > 1).collect();
    gangs.sort_unstable_by_key(|&i| ranked.rank[i]);
    gangs.truncate(MAX_GANG_SEEDS);
    let mut seeds = vec![Vec::new(); gangs.len()];
    for s in scored {
        for (i, _) in on_node.get(s.node) {
            if let Some(g) = gangs.iter().position(|g| g == i) {
                seeds[g].push(*s);
            }
        }
    }
    for seed in &mut seeds {
        seed.sort_unstable();
    }
    seeds
}

/// A node's estimate, ordered by its fields in turn (the estimate, then free GPUs, then the
/// node's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Scored {
    quick: Quick,
    free_gpus: u32,
    node: usize,
    /// How many replicas it could host with every candidate on it gone.
    hosts: u64,
}

/// Leaves the `keep` smallest, in order (all of them if fewer).
fn best_in_order(v: &mut Vec<Scored>, keep: usize) {
    if v.len() > keep {
        v.select_nth_unstable(keep - 1);
        v.truncate(keep);
    }
    v.sort_unstable();
}

fn replicas_of(needs: &Needs, task: usize) -> u64 {
    u64::from(needs.tasks[task].replicas)
}

/// The task with the biggest replica, and its need (the whole gang for single-node jobs).
fn primary_need(needs: &Needs, single: bool) -> (usize, Vector) {
    if single {
        let mut total = [0u64; MAX_RESOURCE_KINDS];
        for t in &needs.tasks {
            for _ in 0..t.replicas {
                add(&mut total, &t.need);
            }
        }
        return (0, total);
    }
    let i = (0..needs.tasks.len())
        .max_by(|&a, &b| {
            let (x, y) = (&needs.tasks[a].need, &needs.tasks[b].need);
            x[GPU_KIND].cmp(&y[GPU_KIND]).then(x.iter().sum::<u64>().cmp(&y.iter().sum::<u64>())).then(b.cmp(&a))
        })
        .unwrap_or(0);
    (i, needs.tasks[i].need)
}

/// Nodes in the pool choice's other pools (for gangs whose tasks span pools): all of them,
/// bounded, since the primary task's estimate says nothing about them.
fn extra_nodes(view: &View, pools: &[usize], on_node: &OnNodes) -> Vec<usize> {
    let mut out: Vec<usize> = view
        .ledger
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| pools.contains(&n.pool) && n.schedulable)
        .map(|(i, _)| i)
        .collect();
    out.sort_by_key(|&n| (!on_node.contains(n), n));
    out.truncate(MAX_TOUCHED_NODES);
    out
}

/// Best-estimated nodes (in a domain, if given) until they could host the primary task's
/// replicas with every candidate on them gone; with their estimates added up.
fn gather(scored: &[Scored], scope: Scope, view: &View, replicas: u64, extra: &[usize]) -> Option<(Vec<usize>, Quick)> {
    let mut nodes = Vec::new();
    let mut hosts: u64 = 0;
    let mut total = Quick { own: 0, top: i64::MIN, at_top: 0, count: 0, lost: 0, best: u32::MAX };
    for &Scored { quick: q, node: n, hosts: h, .. } in scored {
        if scope.is_some_and(|(l, d)| view.ledger.nodes[n].domains[l] != d) {
            continue;
        }
        nodes.push(n);
        total.add(&q);
        hosts = hosts.saturating_add(h);
        if hosts >= replicas || nodes.len() >= MAX_TOUCHED_NODES {
            break;
        }
    }
    if hosts < replicas {
        return None;
    }
    nodes.extend(extra.iter().filter(|n| scope.is_none_or(|(l, d)| view.ledger.nodes[**n].domains[l] == d)));
    nodes.sort_unstable();
    nodes.dedup();
    Some((nodes, total))
}
