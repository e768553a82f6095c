//! Preemption planning for one job that fits nowhere as things stand.
//!
//! 1. Candidates: jobs the queues' policies could ever allow as victims, plus jobs already
//!    leaving (being preempted or paused). Kept between the preemptors of a cycle that share
//!    what decides them (`kept.rs`): a later one drops what earlier ones took.
//! 2. Placements to try (`estimate.rs`): every node is scored by the victims it alone
//!    would need for one replica (a quick estimate); touched node sets are built from the
//!    best nodes, over the whole pool, from each of the best-ranked gang candidates' nodes
//!    (a gang may free a whole placement alone), and within each rack. Idle capacity
//!    scores best, so it is used first. A node's estimate is kept for the next preemptor
//!    of the same candidates and need until the node changes (`memo.rs`).
//! 3. On each touched set the exact walk (`walk.rs`; quota and policy rules included)
//!    finds a minimal victim set; the sets are compared by `Score` and the best wins.
//!
//! If the best set includes jobs already leaving, the job waits for them rather than
//! preempting more now: their resources are on their way back.

mod cand;
mod estimate;
mod kept;
mod memo;
mod onnode;
mod refusal;
mod score;
mod walk;

use std::collections::BTreeSet;

use baton_model::job::{Job, JobId};
use baton_model::ledger::{GPU_KIND, Vector, gpus_milli, whole_gpus};
use baton_model::limits::MAX_RESOURCE_KINDS;
use baton_model::queue::{PreemptionPolicy, ReclaimWithinCohort};

use cand::{Cand, Ctx, eligible};
use estimate::touched_sets;
pub use kept::Kept;
use onnode::OnNodes;
pub use refusal::NoPreemption;
use score::Score;

use crate::needs::Needs;
use crate::pack::Packing;
use crate::view::{ActiveJob, View};

/// Node sets (whole pool, then racks by estimate) walked exactly for a gang once one
/// has found victims; before that, every set is tried, so a feasible plan is never missed.
const MAX_RACK_WALKS: usize = 8;

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
    pool_choice: Vec<usize>,
}

pub fn plan(view: &mut View, job: &Job, needs: &Needs, kept: &mut Kept) -> Result<Planned, NoPreemption> {
    let jq = view.queue_np(job).0;
    let spec = &view.state.queues()[&job.spec.queue];
    let policy = spec.preemption;
    // The gate comes first: a job it forbids preempts nothing, whatever runs.
    let mut ctxs: Vec<Ctx> =
        needs.pool_choices.iter().map(|a| context(view, job, jq, policy, needs, a, false)).collect();
    let first_forbidden = ctxs.first().and_then(|c| c.forbidding(&view.ledger).map(|pk| gate_reason(view, c, pk)));
    ctxs.retain(|c| c.forbidding(&view.ledger).is_none());
    if let Some(why) = first_forbidden.filter(|_| ctxs.is_empty()) {
        return Err(why);
    }
    if view.active().is_empty() {
        return Err(NoPreemption::NoCandidates);
    }
    let pools = needs.all_pools();
    gather(view, &Preemptor { job, jq, policy: &policy, pools: &pools }, needs, kept);
    // A reservation of the preemptor's changes what is free for it alone: estimates kept
    // for the others do not hold for it.
    let reserved = view.state.reservations().contains_key(&job.id) || view.state.pool_reservation_of(job.id).is_some();
    if kept.live() == 0 {
        return Err(NoPreemption::NoCandidates);
    }
    // Candidates taken by earlier preemptors stay in the list, marked dropped: none of them
    // is in the table per node, through which alone the walk and the estimates find them.
    let ((cands, on_node, rank), memo) = kept.current_with_memo();
    let mut memo = (!reserved).then_some(memo);
    // Parts exist only where elastic gangs run (`View::split_excess`): without them a scan of
    // every candidate would find none.
    let parts = if Kept::applies(view) { walk::Parts::default() } else { walk::Parts::of(cands) };
    debug_assert!(parts == walk::Parts::of(cands), "elastic parts found without elastic gangs");
    let mut best: Option<Best> = None;
    for weak in [false, true] {
        for ctx in &mut ctxs {
            ctx.weak = weak;
            let ctx = &*ctx;
            let a = &ctx.pool_choice;
            let touched = touched_sets(view, job, needs, a, (cands, on_node, rank), memo.as_deref_mut());
            // Every gang-begun set is walked: the estimate cannot see what such a set saves.
            let always = MAX_RACK_WALKS + touched.gang_seeded;
            for (tried, nodes) in touched.sets.into_iter().enumerate() {
                // Sets come best-estimated first; once one has worked, a few more suffice.
                if tried > always && best.is_some() {
                    break;
                }
                let on: Vec<usize> = nodes
                    .iter()
                    .flat_map(|&n| on_node.get(n).iter().map(|(i, _)| *i))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let Some(w) = walk::walk(view, ctx, needs, a, &nodes, cands, &parts, &on) else {
                    continue;
                };
                let vs: Vec<&Cand> = w.victims.iter().map(|&i| &cands[i]).collect();
                let used = w.packing.nodes();
                let racks = match needs.levels.rack() {
                    Some(l) => {
                        used.iter().map(|&n| view.ledger.nodes[n].domains[l]).collect::<BTreeSet<u32>>().len() as u32
                    }
                    None => 1,
                };
                let score = Score::of(&vs, view.now_ms, racks, used);
                if best.as_ref().is_none_or(|b| score < b.score) {
                    best = Some(Best { score, victims: w.victims, packing: w.packing, weak, pool_choice: a.clone() });
                }
            }
        }
        // S2-b only if S2-a found nothing, and only fair sharing has a weak rule.
        if best.is_some() || !view.ledger.queues[jq].fair_sharing {
            break;
        }
    }
    let Some(best) = best else {
        return Err(NoPreemption::NoRoom);
    };
    let leaving = best.victims.iter().filter(|&&i| cands[i].leaving).count();
    if leaving > 0 {
        return Ok(Planned::WaitForLeaving { leaving });
    }
    let ctx = context(view, job, jq, policy, needs, &best.pool_choice, best.weak);
    let message = describe(view, &ctx, &best.victims.iter().map(|&i| &cands[i]).collect::<Vec<_>>());
    let victims = best.victims.iter().map(|&i| cands[i].job).collect();
    Ok(Planned::Preempt { victims, packing: best.packing, message })
}

/// A preemptor as its candidates are judged: the job, its queue and policy, and the pools
/// its pool choices use.
struct Preemptor<'p> {
    job: &'p Job,
    jq: usize,
    policy: &'p PreemptionPolicy,
    pools: &'p [usize],
}

impl Preemptor<'_> {
    /// Whether active job `r` could ever be its victim.
    fn eligible(&self, view: &View, r: &ActiveJob) -> Option<Cand> {
        if !in_pools(view, r, self.pools) {
            return None;
        }
        eligible(view, self.job, self.jq, self.policy, r)
    }

    /// Its candidates among `view.active()`'s jobs at `positions`, in that order.
    fn eligible_at(&self, view: &View, positions: impl IntoIterator<Item = u32>) -> Vec<Cand> {
        let active = view.active();
        positions.into_iter().filter_map(|i| self.eligible(view, &active[i as usize])).collect()
    }

    /// Its own queue's candidates.
    fn own(&self, view: &View) -> Vec<Cand> {
        self.eligible_at(view, view.groups().of_queue(self.jq).iter().copied())
    }
}

/// Gathers the job's candidates and their table per node into `kept` (`Kept::current_with_memo`),
/// reusing what an earlier preemptor of this cycle gathered where that decides the same.
fn gather(view: &mut View, p: &Preemptor, needs: &Needs, kept: &mut Kept) {
    let reuse = Kept::applies(view);
    let key = kept::Key::of(p.job, p.jq, p.policy, p.pools);
    let kept_own = if reuse { kept.own.get(view, &key) } else { None };
    let own = match kept_own {
        Some(own) => own,
        None => kept.own.keep(view, key.clone(), p.own(view)),
    };
    let useful = contributing_queues(view, p.job, p.jq, p.policy, needs, own);
    if reuse && kept.all.holds(view, &key, &useful) {
        // Without elastic gangs nothing is split off; the flag is set as a fresh plan sets it.
        view.split_excess(&[]);
        debug_assert!(agrees_with_a_fresh_gathering(view, p, &useful, kept));
        return;
    }
    let mut cands = p.eligible_at(view, others(view, p.jq, &useful));
    let own_from = cands.len();
    cands.extend(own.iter().cloned());
    debug_assert_eq!(
        cands.iter().map(|c| c.job).collect::<Vec<_>>(),
        cands_by_scan(view, p, &useful),
        "preemption candidates by queue and by a scan of every running job"
    );
    let cands = if reuse {
        // Nothing to split: spares sorting every candidate's id.
        view.split_excess(&[]);
        cands
    } else {
        let mut ids: Vec<JobId> = cands.iter().map(|c| c.job).collect();
        ids.sort_unstable();
        view.split_excess(&ids);
        with_excess(view, cands)
    };
    let on_node = OnNodes::new(view, &cands);
    kept.all.keep(view, key, useful, (cands, own_from), on_node);
}

/// Debug builds: the kept candidates and table are what a fresh gathering finds.
fn agrees_with_a_fresh_gathering(view: &View, p: &Preemptor, useful: &[bool], kept: &Kept) -> bool {
    let (cands, on_node) = kept.compacted();
    let mut fresh = p.eligible_at(view, others(view, p.jq, useful));
    fresh.extend(p.own(view));
    assert_eq!(cands, fresh, "kept preemption candidates differ from a fresh gathering");
    assert_eq!(on_node, OnNodes::new(view, &fresh), "kept candidates per node differ from a fresh table");
    true
}

/// decisions.md section 13: each candidate gang's replicas above its minimum, split off in
/// the ledger (`View::split_excess`), are a candidate of their own with the gang's own
/// rank: before the rest of the gang (their larger id breaks the tie), losing what the
/// whole gang loses (a shrink restarts every replica from the checkpoint).
fn with_excess(view: &View, mut cands: Vec<Cand>) -> Vec<Cand> {
    let split = |id: JobId| view.ledger.charges.get(&id).is_some();
    let mut by_id: Vec<(JobId, usize)> = cands.iter().enumerate().map(|(i, c)| (c.job, i)).collect();
    by_id.sort_unstable();
    let find = |gang: JobId| by_id.binary_search_by_key(&gang, |e| e.0).ok().map(|at| by_id[at].1);
    let extra: Vec<Cand> = view
        .excess()
        .iter()
        .filter(|x| split(x.id))
        .filter_map(|x| find(x.gang).map(|i| Cand { job: x.id, ..cands[i].clone() }))
        .collect();
    cands.extend(extra);
    cands
}

/// Positions in `view.active()` of other queues' jobs that may be candidates: every job of
/// a `useful` queue, and the jobs already leaving; in id order, as a scan would find them.
fn others(view: &View, jq: usize, useful: &[bool]) -> Vec<u32> {
    let (active, groups) = (view.active(), view.groups());
    let useful_q = |q: usize| q != jq && useful.get(q).copied().unwrap_or(false);
    let mut at: Vec<u32> =
        groups.by_queue.iter().enumerate().filter(|(q, _)| useful_q(*q)).flat_map(|(_, v)| v.iter().copied()).collect();
    at.extend(groups.leaving.iter().copied().filter(|&i| {
        let q = active[i as usize].queue;
        q != jq && !useful_q(q)
    }));
    at.sort_unstable();
    at
}

/// The candidates `plan` gathers, by a scan of every running job (debug builds compare).
fn cands_by_scan(view: &View, p: &Preemptor, useful: &[bool]) -> Vec<JobId> {
    let eligible_in = |r: &&ActiveJob| p.eligible(view, r).is_some();
    let all = view.active().iter();
    let others = all.clone().filter(|r| r.queue != p.jq && (useful[r.queue] || r.leaving)).filter(eligible_in);
    let own = all.filter(|r| r.queue == p.jq).filter(eligible_in);
    others.chain(own).map(|r| r.job).collect()
}

fn in_pools(view: &View, r: &ActiveJob, pools: &[usize]) -> bool {
    // Every node is in some pool: with all of them wanted there is nothing to look up.
    if pools.len() == view.ledger.pools.len() {
        return true;
    }
    let nodes = view.ledger.charges.get(&r.job).map(|c| c.nodes.as_slice()).unwrap_or_default();
    nodes.iter().any(|&n| pools.contains(&view.ledger.nodes[n].pool))
}

/// Other queues whose running jobs could be victims at all: they borrow somewhere the job
/// needs, and either the job could reclaim (its queue, with every own-queue candidate gone,
/// would be within nominal where it lacks room in some pool choice) or the queue is in
/// the job's cohort tree, where borrowing within the cohort or fair sharing may apply.
fn contributing_queues(
    view: &mut View,
    job: &Job,
    jq: usize,
    policy: &PreemptionPolicy,
    needs: &Needs,
    own: &[Cand],
) -> Vec<bool> {
    let demand: Vec<&(usize, Vector)> = needs.demands.iter().flatten().collect();
    let borrowing: Vec<bool> = view
        .ledger
        .queues
        .iter()
        .enumerate()
        .map(|(q, acct)| {
            q != jq && demand.iter().any(|(p, d)| (0..MAX_RESOURCE_KINDS).any(|k| d[k] > 0 && acct.borrowing_in(*p, k)))
        })
        .collect();
    // No other queue borrows where the job needs: none contributes, whatever the rules. The
    // reclaim check below takes every own-queue candidate out of the ledger and puts it back,
    // the cost of the whole plan when the job's queue runs thousands of jobs: skipped then.
    if !borrowing.contains(&true) {
        return borrowing;
    }
    let reclaim_possible = policy.reclaim_within_cohort != ReclaimWithinCohort::Never
        && view.without(own.iter().map(|c| c.job), |view| {
            needs.pool_choices.iter().any(|a| context(view, job, jq, *policy, needs, a, false).reclaiming(&view.ledger))
        });
    let cohort_rules = view.ledger.queues[jq].fair_sharing || policy.borrow_within_cohort.is_some();
    let l = &view.ledger;
    l.queues
        .iter()
        .zip(borrowing)
        .map(|(acct, borrows)| {
            let same_tree = acct.tree == l.queues[jq].tree;
            borrows && (reclaim_possible || (same_tree && cohort_rules))
        })
        .collect()
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
    let lacks = lacks_room(view, jq, needs, a, &demand, !job.preemptible);
    Ctx {
        job,
        pool_choice: a.to_vec(),
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
/// If it fits everywhere in aggregate (fragmentation), the kinds in which its replicas do
/// not fit on the nodes, counting that kind alone; if each kind alone fits, every (pool,
/// kind) it needs counts.
fn lacks_room(
    view: &View,
    jq: usize,
    needs: &Needs,
    a: &[usize],
    demand: &[(usize, Vector)],
    np: bool,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (p, d) in demand {
        let free = &view.pool_free[*p];
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
        out = short_on_nodes(view, needs, a);
    }
    if out.is_empty() {
        for (p, d) in demand {
            out.extend((0..MAX_RESOURCE_KINDS).filter(|&k| d[k] > 0).map(|k| (*p, k)));
        }
    }
    out
}

/// (pool, kind) in which some task's replicas do not fit on the pool's free resources,
/// counting that kind alone. A job short of GPUs on any one node lacks room in GPUs, not in
/// the CPUs it also asks for and that every node has plenty of.
fn short_on_nodes(view: &View, needs: &Needs, a: &[usize]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (t, &p) in needs.tasks.iter().zip(a) {
        for k in (0..MAX_RESOURCE_KINDS).filter(|&k| t.need[k] > 0) {
            let hosts = hosts_of_kind(view, p, k, t.need[k]);
            debug_assert_eq!(hosts, hosts_of_kind_by_scan(view, p, k, t.need[k]), "hosts of kind {k} in pool {p}");
            if hosts < u64::from(t.replicas) && !out.contains(&(p, k)) {
                out.push((p, k));
            }
        }
    }
    out
}

/// How many replicas needing `need` of kind `k` pool `p`'s schedulable nodes could host,
/// counting that kind alone (GPUs: the fewer of free GPU indices and free amount). From the
/// node index: only nodes with enough free GPUs count for GPUs, and the scan of every node
/// (a thousand, for each preemption plan) is left to debug builds' cross-check.
fn hosts_of_kind(view: &View, p: usize, k: usize, need: u64) -> u64 {
    let nodes = &view.index.pools[p].all;
    if k == GPU_KIND {
        let whole = whole_gpus(need);
        nodes.with_free(whole).map(|(n, free)| gpus_milli(free).min(view.free_counted(n)[GPU_KIND]) / need).sum()
    } else {
        nodes.with_free(0).map(|(n, _)| view.free_counted(n)[k] / need).sum()
    }
}

/// `hosts_of_kind` by a scan of every node.
fn hosts_of_kind_by_scan(view: &View, p: usize, k: usize, need: u64) -> u64 {
    let nodes = view.ledger.nodes.iter().filter(|n| n.pool == p && n.schedulable);
    nodes
        .map(|n| if k == GPU_KIND { gpus_milli(u64::from(n.free_gpu_count())).min(n.free[GPU_KIND]) } else { n.free[k] } / need)
        .sum()
}

/// Why the gate forbids preempting at all, naming where the request exceeds nominal.
fn gate_reason(view: &View, ctx: &Ctx, (p, k): (usize, usize)) -> NoPreemption {
    let l = &view.ledger;
    NoPreemption::Forbidden {
        requested: l.kinds.human(k, ctx.requested(p, k)),
        nominal: l.kinds.human(k, l.queues[ctx.queue].nominal[p][k]),
        resource: l.kinds.name(k).to_string(),
        pool: l.pools[p].name.clone(),
        queue: l.queues[ctx.queue].name.clone(),
    }
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
    let reclaiming = view.ledger.without(victims.iter().map(|v| v.job), |l| ctx.reclaiming(l));
    let l = &view.ledger;
    if reclaiming {
        let nominal: Vec<String> = ctx
            .lacks
            .iter()
            .map(|&(p, k)| format!("{} {}", l.kinds.human(k, l.queues[ctx.queue].nominal[p][k]), l.kinds.name(k)))
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

/// Both ways of building the table of candidates per node give the same table, with every
/// running job as a candidate (the property tests check this on every state they reach).
#[cfg(test)]
pub fn on_nodes_agree(view: &View) -> Result<(), String> {
    let cands: Vec<Cand> = view
        .active()
        .iter()
        .map(|r| Cand {
            job: r.job,
            queue: r.queue,
            own: false,
            leaving: r.leaving,
            priority: r.priority,
            progress_mark_ms: r.progress_mark_ms,
            submitted: r.submitted,
            gpus: r.gpus,
        })
        .collect();
    let (a, b) = (OnNodes::by_candidate(view, &cands), OnNodes::by_node(view, &cands));
    if a != b {
        return Err(format!("candidates per node differ: by candidate {a:?}, by node {b:?}"));
    }
    Ok(())
}
