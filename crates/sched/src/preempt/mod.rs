//! Preemption planning for one job that fits nowhere as things stand.
//!
//! 1. Candidates: jobs the queues' policies could ever allow as victims, plus jobs already
//!    leaving (being preempted or paused).
//! 2. Placements to try: every node is scored by the victims it alone would need for one
//!    replica (a quick estimate); touched node sets are built from the best nodes, over the
//!    whole pool and within each rack. Idle capacity scores best, so it is used first.
//! 3. On each touched set the exact walk (quota and policy rules included) finds a minimal
//!    victim set; the sets are compared by `Score` and the best wins.
//!
//! If the best set includes jobs already leaving, the job waits for them rather than
//! preempting more now: their resources are on their way back.

mod cand;
mod score;
mod walk;

use std::collections::{BTreeMap, BTreeSet};

use baton_model::job::{Job, JobId};
use baton_model::ledger::{Vector, add, fits};
use baton_model::limits::MAX_RESOURCE_KINDS;
use baton_model::quantity::Human;
use baton_model::state::submit::replicas_fitting;

use cand::{Cand, Ctx, eligible};
use score::Score;

use crate::index::RackKey;
use crate::needs::Needs;
use crate::pack::Packing;
use crate::view::View;

/// How many single-node placements get the exact walk after the quick estimate.
const EXACT_SINGLE_NODE_WALKS: usize = 16;
/// Most nodes one touched set may hold.
const MAX_TOUCHED_NODES: usize = 512;

pub enum Planned {
    Preempt {
        victims: Vec<JobId>,
        packing: Packing,
        message: String,
    },
    /// The best set includes jobs already leaving: wait for them.
    WaitForLeaving {
        leaving: usize,
    },
}

struct Best {
    score: Score,
    victims: Vec<usize>,
    packing: Packing,
    weak: bool,
    assignment: Vec<usize>,
}

pub fn plan(view: &mut View, job: &Job, needs: &Needs) -> Result<Planned, String> {
    let jq = view.ledger.queue(job.spec.queue.as_str()).expect("queue exists");
    let spec = &view.state.queues()[&job.spec.queue];
    let policy = spec.preemption;
    let pools = needs.all_pools();
    let cands: Vec<Cand> = view
        .active
        .iter()
        .map(|&id| view.job(id))
        .filter(|v| {
            v.replicas
                .iter()
                .any(|r| view.ledger.node(r.node.as_str()).is_some_and(|n| pools.contains(&view.ledger.nodes[n].pool)))
        })
        .filter_map(|v| eligible(view, job, jq, &policy, v))
        .collect();
    if cands.is_empty() {
        return Err("no running job may be preempted for it".into());
    }
    let mut on_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
        for n in view.ledger.charges.get(&c.job).map(|ch| ch.nodes.clone()).unwrap_or_default() {
            if view.ledger.nodes[n].occupant(c.job).is_some_and(|o| !o.held) {
                on_node.entry(n).or_default().push(i);
            }
        }
    }
    let mut best: Option<Best> = None;
    for weak in [false, true] {
        for a in &needs.assignments {
            let ctx = context(view, job, jq, policy, needs, a, weak);
            for nodes in touched_sets(view, job, needs, a, &cands, &on_node) {
                let on: Vec<usize> = nodes
                    .iter()
                    .flat_map(|n| on_node.get(n).cloned().unwrap_or_default())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let Some(w) = walk::walk(view, &ctx, needs, a, &nodes, &cands, &on) else {
                    continue;
                };
                let vs: Vec<&Cand> = w.victims.iter().map(|&i| &cands[i]).collect();
                let used = w.packing.nodes();
                let racks = used.iter().map(|&n| view.ledger.nodes[n].rack).collect::<BTreeSet<RackKey>>().len() as u32;
                let score = Score::of(&vs, view.now_ms, racks, used);
                if best.as_ref().is_none_or(|b| score < b.score) {
                    best = Some(Best { score, victims: w.victims, packing: w.packing, weak, assignment: a.clone() });
                }
            }
        }
        // S2-b only if S2-a found nothing, and only fair sharing has a weak rule.
        if best.is_some() || !view.ledger.queues[jq].fair_sharing {
            break;
        }
    }
    let Some(best) = best else {
        return Err("preempting the jobs it may preempt would not make room".into());
    };
    let leaving = best.victims.iter().filter(|&&i| cands[i].leaving).count();
    if leaving > 0 {
        return Ok(Planned::WaitForLeaving { leaving });
    }
    let ctx = context(view, job, jq, policy, needs, &best.assignment, best.weak);
    let message = describe(view, &ctx, &best.victims.iter().map(|&i| &cands[i]).collect::<Vec<_>>());
    let victims = best.victims.iter().map(|&i| cands[i].job).collect();
    Ok(Planned::Preempt { victims, packing: best.packing, message })
}

fn context<'j>(
    view: &View,
    job: &'j Job,
    jq: usize,
    policy: baton_model::queue::PreemptionPolicy,
    needs: &Needs,
    a: &[usize],
    weak: bool,
) -> Ctx<'j> {
    let demand = needs.demand(a);
    let lacks = lacks_room(view, jq, &demand, !job.preemptible);
    Ctx {
        job,
        queue: jq,
        np: !job.preemptible,
        policy,
        fair_sharing: view.ledger.queues[jq].fair_sharing,
        weak,
        demand,
        lacks,
    }
}

/// Where the job lacks room: (pool, kind) whose free capacity or whose quota falls short.
/// If it fits everywhere in aggregate (fragmentation), every (pool, kind) it needs counts.
fn lacks_room(view: &View, jq: usize, demand: &[(usize, Vector)], np: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (p, d) in demand {
        let mut free = [0u64; MAX_RESOURCE_KINDS];
        for n in view.ledger.nodes.iter().filter(|n| n.pool == *p && n.schedulable) {
            add(&mut free, &n.free);
        }
        for k in 0..MAX_RESOURCE_KINDS {
            if d[k] > free[k] {
                out.push((*p, k));
            }
        }
    }
    if let Err(b) = view.ledger.check_admission(jq, demand, np) {
        let (p, k) = match b {
            baton_model::ledger::QuotaBlock::BorrowLimit { pool, kind, .. }
            | baton_model::ledger::QuotaBlock::NotPreemptible { pool, kind, .. }
            | baton_model::ledger::QuotaBlock::NoLendable { pool, kind, .. } => (pool, kind),
        };
        if !out.contains(&(p, k)) {
            out.push((p, k));
        }
    }
    if out.is_empty() {
        for (p, d) in demand {
            out.extend((0..MAX_RESOURCE_KINDS).filter(|&k| d[k] > 0).map(|k| (*p, k)));
        }
    }
    out
}

/// A node's quick estimate: the victims it alone would need to host `need` (static rank,
/// no quota), or `None` if it could not even with every candidate gone.
fn estimate(view: &View, job: JobId, n: usize, need: &Vector, cands: &[Cand], on: &[usize]) -> Option<(Score, u64)> {
    let (mut free, mask) = view.free_for(n, job, &[]);
    free[0] = free[0].min(u64::from(mask.count_ones()));
    let amount = |i: usize| view.ledger.nodes[n].occupant(cands[i].job).map(|o| o.amount).unwrap_or_default();
    let mut all = free;
    for &i in on {
        add(&mut all, &amount(i));
    }
    let hosts = replicas_fitting(need, &all);
    if hosts == 0 {
        return None;
    }
    let mut order: Vec<usize> = on.to_vec();
    order.sort_by_key(|&i| cands[i].rank());
    let mut acc = free;
    let mut taken = Vec::new();
    for i in order {
        if fits(need, &acc) {
            break;
        }
        add(&mut acc, &amount(i));
        taken.push(i);
    }
    for idx in (0..taken.len()).rev() {
        let mut without = acc;
        baton_model::ledger::sub(&mut without, &amount(taken[idx]));
        if fits(need, &without) {
            acc = without;
            taken.remove(idx);
        }
    }
    let vs: Vec<&Cand> = taken.iter().map(|&i| &cands[i]).collect();
    Some((Score::of(&vs, view.now_ms, 1, vec![n]), hosts))
}

/// Node sets to walk for an assignment, best estimates first.
fn touched_sets(
    view: &View,
    job: &Job,
    needs: &Needs,
    a: &[usize],
    cands: &[Cand],
    on_node: &BTreeMap<usize, Vec<usize>>,
) -> Vec<Vec<usize>> {
    let single = needs.tasks.iter().map(|t| t.replicas).sum::<u32>() == 1
        || needs.topology.is_some_and(|t| t == baton_model::job::Topology::Node);
    let (primary, need) = primary_need(needs, single);
    let pool = a[primary];
    let mut scored: Vec<(Score, u64, usize)> = Vec::new();
    let mut seen = BTreeSet::new();
    let empty = Vec::new();
    for (&n, on) in on_node {
        if view.ledger.nodes[n].pool == pool && view.ledger.nodes[n].schedulable && seen.insert(n) {
            if let Some((s, h)) = estimate(view, job.id, n, &need, cands, on) {
                scored.push((s, h, n));
            }
        }
    }
    // Idle capacity: nodes that host a replica with no victim at all.
    let replicas: u64 = needs.tasks.iter().map(|t| u64::from(t.replicas)).sum();
    let idle: Vec<usize> = view.index.pools[pool]
        .all
        .emptiest_first(need[0])
        .filter(|n| !seen.contains(n))
        .take(replicas as usize)
        .collect();
    for n in idle {
        if let Some((s, h)) = estimate(view, job.id, n, &need, cands, &empty) {
            scored.push((s, h, n));
        }
    }
    scored.sort_by(|x, y| {
        x.0.cmp(&y.0)
            .then_with(|| view.ledger.nodes[x.2].free_gpu_count().cmp(&view.ledger.nodes[y.2].free_gpu_count()))
            .then(x.2.cmp(&y.2))
    });
    if single {
        return scored.iter().take(EXACT_SINGLE_NODE_WALKS).map(|s| vec![s.2]).collect();
    }
    let mut sets = Vec::new();
    let other_pools: Vec<usize> = a.iter().copied().filter(|&p| p != pool).collect();
    let extra = extra_nodes(view, &other_pools, on_node);
    if let Some(s) = gather(&scored, None, view, replicas_of(needs, primary), &extra) {
        sets.push(s);
    }
    let racks: BTreeSet<RackKey> = scored.iter().map(|s| view.ledger.nodes[s.2].rack).collect();
    if racks.len() > 1 || needs.topology.is_some() {
        for r in racks {
            if let Some(s) = gather(&scored, Some(r), view, replicas_of(needs, primary), &extra) {
                sets.push(s);
            }
        }
    }
    sets.dedup();
    sets
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
            x[0].cmp(&y[0]).then(x.iter().sum::<u64>().cmp(&y.iter().sum::<u64>())).then(b.cmp(&a))
        })
        .unwrap_or(0);
    (i, needs.tasks[i].need)
}

/// Nodes in the assignment's other pools (for gangs whose tasks span pools): all of them,
/// bounded, since the primary task's estimate says nothing about them.
fn extra_nodes(view: &View, pools: &[usize], on_node: &BTreeMap<usize, Vec<usize>>) -> Vec<usize> {
    let mut out: Vec<usize> = view
        .ledger
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| pools.contains(&n.pool) && n.schedulable)
        .map(|(i, _)| i)
        .collect();
    out.sort_by_key(|n| (!on_node.contains_key(n), *n));
    out.truncate(MAX_TOUCHED_NODES);
    out
}

/// Best-estimated nodes (in a rack, if given) until they could host the primary task's
/// replicas with every candidate on them gone.
fn gather(
    scored: &[(Score, u64, usize)],
    rack: Option<RackKey>,
    view: &View,
    replicas: u64,
    extra: &[usize],
) -> Option<Vec<usize>> {
    let mut nodes = Vec::new();
    let mut hosts: u64 = 0;
    for (_, h, n) in scored {
        if rack.is_some_and(|r| view.ledger.nodes[*n].rack != r) {
            continue;
        }
        nodes.push(*n);
        hosts = hosts.saturating_add(*h);
        if hosts >= replicas || nodes.len() >= MAX_TOUCHED_NODES {
            break;
        }
    }
    if hosts < replicas {
        return None;
    }
    nodes.extend(extra.iter().filter(|n| rack.is_none_or(|r| view.ledger.nodes[**n].rack == r)));
    nodes.sort_unstable();
    nodes.dedup();
    Some(nodes)
}

/// The rule that allows the preemption, in words for the victims' events.
fn describe(view: &mut View, ctx: &Ctx, victims: &[&Cand]) -> String {
    let l = &view.ledger;
    let queue = &l.queues[ctx.queue].name;
    let Some(other) = victims.iter().find(|c| !c.own) else {
        let low = victims.iter().map(|c| c.priority).max().unwrap_or(0);
        return format!("higher priority within queue {queue} ({} over {low})", ctx.job.priority);
    };
    let oq = l.queues[other.queue].name.clone();
    let queue = queue.clone();
    let undo: Vec<_> = victims.iter().map(|v| view.ledger.remove_usage(v.job)).collect();
    let reclaiming = ctx.reclaiming(&view.ledger);
    for u in undo.into_iter().rev() {
        view.ledger.undo(u);
    }
    let l = &view.ledger;
    if reclaiming {
        let nominal: Vec<String> = ctx
            .lacks
            .iter()
            .map(|&(p, k)| {
                format!(
                    "{} {}",
                    Human { resource: l.kinds.name(k), value: l.queues[ctx.queue].nominal[p][k] },
                    l.kinds.name(k)
                )
            })
            .collect();
        return format!("reclaimed by {queue} (within its quota of {})", nominal.join(", "));
    }
    if ctx.fair_sharing {
        return format!("fair sharing: queue {queue} borrows less than queue {oq}");
    }
    format!(
        "queue {queue} borrows within its cohort: priority {} takes from lower-priority work of queue {oq}",
        ctx.job.priority
    )
}
