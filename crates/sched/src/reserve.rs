//! Starving jobs' reservations and backfill (decisions.md section 9).
//!
//! A reservation lives in the replicated state (`State::pool_reservations`): the node set is
//! chosen once, when it is made, and must not move as jobs come and go. Each cycle rebuilds
//! from it what the cycle needs: the reserved resources that are free now are blocked in the
//! view for everyone but the reserving job (a node reservation with no victims), and the
//! latest end of the jobs occupying the rest says which time-limited jobs may backfill.

use baton_model::job::{Job, JobId};
use baton_model::ledger::{NodeReservation, Share, Vector, ZERO, add, fits, min};
use baton_model::plan::{Decision, Plan};
use baton_model::scheduler::PoolReservation;
use baton_model::state::{backfills, demand_of};

use crate::needs::Needs;
use crate::nodes::SetNodes;
use crate::order::Candidate;
use crate::pack::{Packing, pack};
use crate::view::View;

/// One reservation as this cycle sees it.
pub struct Hold {
    pub job: JobId,
    pub queue: usize,
    pub shares: Vec<Share>,
    /// A job with a time limit may backfill if it ends by then: every occupant has a time
    /// limit and this is the latest of their ends. `None`: nothing backfills.
    pub backfill_until_ms: Option<u64>,
    /// "n1, n2 (pool p)": how reasons name it.
    pub where_: String,
    blocked: bool,
}

/// The cycle's reservations, blocked in the view.
#[derive(Default)]
pub struct Holds {
    pub list: Vec<Hold>,
}

impl Holds {
    /// Reads the state's reservations, drops those whose queue's limits no longer admit
    /// them, and blocks the reserved resources that are free now.
    pub fn load(view: &mut View, plan: &mut Plan) -> Holds {
        let mut holds = Holds::default();
        for r in view.state.pool_reservations().values() {
            let job = view.job(r.job);
            let (q, np) = view.queue_np(job);
            let shares = view.state.shares(job, &r.replicas);
            let nodes: Vec<usize> = shares.iter().map(|s| s.0).collect();
            if let Err(why) = admitted_without_own(view, q, np, &shares, &nodes) {
                let reason = format!("its reservation on {} no longer holds: {why}", where_of(r));
                plan.decisions.push(Decision::Unreserve { job: r.job, reason });
                continue;
            }
            let backfill_until_ms = view.state.backfill_until(&view.ledger, r);
            let where_ = where_of(r);
            let mut h = Hold { job: r.job, queue: q, shares, backfill_until_ms, where_, blocked: false };
            block(view, &mut h);
            holds.list.push(h);
        }
        holds
    }

    pub fn of_job(&self, id: JobId) -> Option<usize> {
        self.list.iter().position(|h| h.job == id)
    }

    /// A reservation made by another job of queue `q`.
    pub fn of_queue(&self, q: usize, not: JobId) -> Option<usize> {
        self.list.iter().position(|h| h.queue == q && h.job != not)
    }

    /// The reservations `job` may backfill: it has a time limit and ends in time.
    pub fn backfills(&self, job: &Job, now_ms: u64) -> Vec<usize> {
        (0..self.list.len()).filter(|&i| backfills(job, now_ms, self.list[i].backfill_until_ms)).collect()
    }

    /// The job whose reserved GPUs `shares` would use, if any other than `job`.
    pub fn overlapping(&self, job: JobId, shares: &[Share]) -> Option<JobId> {
        let hit = |h: &&Hold| {
            h.job != job && shares.iter().any(|(n, _, g)| h.shares.iter().any(|(m, _, r)| m == n && g & r != 0))
        };
        self.list.iter().find(hit).map(|h| h.job)
    }

    pub fn unblock(&mut self, view: &mut View, which: &[usize]) {
        for &i in which {
            unblock(view, &mut self.list[i]);
        }
    }

    /// Blocks again what is free of the reserved resources now.
    pub fn reblock(&mut self, view: &mut View, which: &[usize]) {
        for &i in which {
            block(view, &mut self.list[i]);
        }
    }

    /// Are the reserved resources free for the reserving job (quota included)?
    pub fn ready(&self, view: &View, i: usize, job: &Job) -> bool {
        let h = &self.list[i];
        let room = h.shares.iter().all(|(n, amount, gpus)| {
            let (free, mask) = view.free_for(*n, h.job, &[]);
            fits(amount, &free) && gpus & !mask == 0
        });
        let (q, np) = view.queue_np(job);
        room && view.ledger.check_admission(q, &demand_of(&view.ledger, &h.shares), np).is_ok()
    }

    /// How many of the jobs it waits for still occupy the reserved resources.
    pub fn waiting_for(&self, view: &View, i: usize) -> usize {
        occupants_of(view, self.list[i].job, &self.list[i].shares).len()
    }
}

fn where_of(r: &PoolReservation) -> String {
    let mut nodes: Vec<String> = r.replicas.iter().map(|x| x.node.to_string()).collect();
    nodes.dedup();
    format!("{} (pool {})", nodes.join(", "), r.pool)
}

/// Jobs in the way of the reservation (the same rule the plan checker applies).
fn occupants_of(view: &View, job: JobId, shares: &[Share]) -> Vec<JobId> {
    view.ledger.reservation_occupants(job, shares)
}

fn block(view: &mut View, h: &mut Hold) {
    if h.blocked {
        return;
    }
    for (n, amount, gpus) in &h.shares {
        let node = &mut view.ledger.nodes[*n];
        let (free, mask) = (node.free, node.free_gpus);
        // GPUs by index: the count blocked must be the reserved GPUs that are free, or free
        // GPUs the job does not need would count as taken.
        let gpus = gpus & mask;
        let mut amount = min(amount, &free);
        amount[0] = u64::from(gpus.count_ones());
        let r = NodeReservation { job: h.job, amount, gpus, victims: Vec::new() };
        node.reservations.push(r);
        node.refresh();
        view.refresh(*n);
    }
    h.blocked = true;
}

fn unblock(view: &mut View, h: &mut Hold) {
    if !h.blocked {
        return;
    }
    for (n, _, _) in &h.shares {
        let node = &mut view.ledger.nodes[*n];
        node.reservations.retain(|r| !(r.job == h.job && r.victims.is_empty()));
        node.refresh();
        view.refresh(*n);
    }
    h.blocked = false;
}

/// Would the job's queue admit it once its own queue's jobs on `nodes` had ended?
fn admitted_without_own(view: &mut View, q: usize, np: bool, shares: &[Share], nodes: &[usize]) -> Result<(), String> {
    let own: Vec<JobId> = running(view)
        .into_iter()
        .filter(|&(j, jq)| jq == q && nodes.iter().any(|&n| view.ledger.nodes[n].occupant(j).is_some()))
        .map(|(j, _)| j)
        .collect();
    view.ledger.without(own, |l| {
        let verdict = l.check_admission(q, &demand_of(l, shares), np);
        verdict.map(drop).map_err(|b| b.describe(l, q))
    })
}

/// Jobs running in the view (those placed earlier in this cycle included), with their queue:
/// jobs using a share that is not held in place.
fn running(view: &View) -> Vec<(JobId, usize)> {
    let mut out: Vec<(JobId, usize)> = view
        .ledger
        .charges
        .iter()
        .filter(|(id, ch)| ch.nodes.iter().any(|&n| view.ledger.nodes[n].occupant(**id).is_some_and(|o| !o.held)))
        .map(|(id, ch)| (*id, ch.queue))
        .collect();
    out.sort_unstable();
    out
}

/// When a running job reaches its time limit; one placed this cycle starts now.
fn end_of(view: &View, id: JobId) -> u64 {
    let j = view.job(id);
    match j.spec.time_limit_ms {
        None => u64::MAX,
        Some(limit) if j.state.is_active() => j.started_ms.saturating_add(limit),
        Some(limit) => view.now_ms.saturating_add(limit),
    }
}

/// Starving jobs whose reservation is looked for in one cycle (each is a walk over its
/// pools' running jobs); the rest are looked at in later cycles.
pub const MAX_RESERVATION_WALKS_PER_CYCLE: usize = 8;

/// A reservation for a starving job, if one of its pools without a reservation would hold
/// it were the jobs running there gone, and its queue would admit it.
pub fn make(view: &mut View, holds: &Holds, c: &Candidate, plan: &mut Plan) -> bool {
    let taken_pools: Vec<usize> =
        holds.list.iter().filter_map(|h| h.shares.first().map(|s| view.ledger.nodes[s.0].pool)).collect();
    let (q, np) = (c.queue, !c.preemptible);
    for a in &c.needs.assignments {
        let pool = a[0];
        if a.iter().any(|&p| p != pool) || taken_pools.contains(&pool) {
            continue;
        }
        let Some((packing, gone)) = walk_all(view, c.job, &c.needs, a, pool) else { continue };
        let set = SetNodes::new(view, c.id, &gone, &packing.nodes());
        let names = |n: usize| view.ledger.nodes[n].name.clone();
        let (replicas, shares) = packing.allocate(&set, &c.needs, names);
        let nodes = packing.nodes();
        if admitted_without_own(view, q, np, &shares, &nodes).is_err() {
            continue;
        }
        let waits_for: Vec<JobId> = occupants_of(view, c.id, &shares);
        let pool_name = view.ledger.pools[pool].name.clone();
        let mut names: Vec<String> = nodes.iter().map(|&n| view.ledger.nodes[n].name.to_string()).collect();
        names.dedup();
        let reason = reserved_reason(&format!("{} (pool {pool_name})", names.join(", ")), waits_for.len());
        plan.decisions.push(Decision::Reserve { job: c.id, pool: pool_name, replicas, waits_for });
        plan.decisions.push(Decision::Wait { job: c.id, reason });
        return true;
    }
    false
}

pub fn reserved_reason(where_: &str, waiting: usize) -> String {
    format!("reserved {where_}; waiting for {waiting} running jobs there to end")
}

/// Section 9's rank of a running job as a reservation's victim: its end by time limit
/// (none: last), GPUs and resources held in the pool, its first node, its id.
type RankKey = (u64, u64, Vector, usize, JobId);

/// Section 9's walk: the node set the job would take if any running job in `pool` could
/// be a victim, ranked earliest end by time limit first, then no time limit, then fewer
/// resources held, then node order; taken in rank order until it fits, then every one it
/// can do without is given back, latest rank first, until none can be.
fn walk_all(view: &View, job: &Job, needs: &Needs, a: &[usize], pool: usize) -> Option<(Packing, Vec<JobId>)> {
    let nodes: Vec<usize> = (0..view.ledger.nodes.len())
        .filter(|&n| view.ledger.nodes[n].pool == pool && view.ledger.nodes[n].schedulable)
        .collect();
    let mut cands: Vec<(RankKey, JobId)> = running(view)
        .into_iter()
        .filter_map(|(id, _)| {
            let ch = view.ledger.charges.get(&id)?;
            let first = ch.nodes.iter().copied().filter(|n| view.ledger.nodes[*n].pool == pool).min()?;
            let mut held = ZERO;
            for (p, v) in &ch.usage {
                if *p == pool {
                    add(&mut held, v);
                }
            }
            let gpus = ch
                .nodes
                .iter()
                .filter_map(|&n| view.ledger.nodes[n].occupant(id))
                .map(|o| u64::from(o.gpus.count_ones()))
                .sum();
            Some(((end_of(view, id), gpus, held, first, id), id))
        })
        .collect();
    cands.sort_unstable();
    let want_gpus: u64 = needs.tasks.iter().map(|t| t.need[0] * u64::from(t.replicas)).sum();
    let fits_with = |gone: &[JobId]| pack(&SetNodes::new(view, job.id, gone, &nodes), needs, a);
    // Packing is the expensive part: try it only once enough GPUs would be free in the pool
    // (counted as jobs are taken, not recomputed over every node).
    let mut free_gpus: u64 = nodes.iter().map(|&n| u64::from(view.free_for(n, job.id, &[]).1.count_ones())).sum();
    let mut taken: Vec<JobId> = Vec::new();
    let mut next = cands.iter();
    loop {
        if free_gpus >= want_gpus && fits_with(&taken).is_some() {
            break;
        }
        let (key, id) = next.next()?;
        free_gpus += key.1;
        taken.push(*id);
    }
    loop {
        let mut returned = false;
        for i in (0..taken.len()).rev() {
            let rest: Vec<JobId> = taken.iter().copied().enumerate().filter(|(k, _)| *k != i).map(|(_, j)| j).collect();
            if fits_with(&rest).is_some() {
                taken = rest;
                returned = true;
                break;
            }
        }
        if !returned {
            break;
        }
    }
    let packing = fits_with(&taken)?;
    Some((packing, taken))
}
