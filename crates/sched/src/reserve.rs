//! Starving jobs' reservations and backfill (docs/policy.md section 9).
//!
//! A reservation lives in the replicated state (`State::pool_reservations`): the node set is
//! chosen once, when it is made, and must not move as jobs come and go. Each cycle rebuilds
//! from it what the cycle needs: the reserved resources that are free now are blocked in the
//! view for everyone but the reserving job (a node reservation with no victims), and the
//! latest end of the jobs occupying the rest says which time-limited jobs may backfill.

use baton_model::job::{Job, JobId};
use baton_model::ledger::{
    FxMap, GPU_KIND, NodeReservation, Share, Vector, ZERO, add, clamp_to_mask, gpus_milli, min, whole_gpus,
};
use baton_model::plan::{Decision, Plan};
use baton_model::scheduler::PoolReservation;
use baton_model::state::submit::replicas_fitting;
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
    /// Why the other jobs of its queue wait behind it.
    pub behind: String,
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
            let nodes: Vec<usize> = shares.iter().map(|s| s.node).collect();
            let refused = admitted_without_own(view, q, np, &shares, &nodes).err();
            let why = refused.or_else(|| closed_node(view, &nodes)).or_else(|| window_ahead(view, job, r));
            if let Some(why) = why {
                let reason = format!("its reservation on {} no longer holds: {why}", where_of(r));
                plan.decisions.push(Decision::Unreserve { job: r.job, reason });
                continue;
            }
            let backfill_until_ms = view.state.backfill_until(&view.ledger, r);
            let where_ = where_of(r);
            let behind = format!(
                "waiting behind {}'s reservation on {where_}: no other job of queue {} starts while it holds, except one with a time limit that ends in time",
                job.spec.name, job.spec.queue
            );
            let mut h = Hold { job: r.job, queue: q, shares, backfill_until_ms, where_, behind, blocked: false };
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
            // GPUs shared by fractions count as the plan checker counts them (`takes_reserved`).
            let gpus = |s: &Share| s.gpus | s.fractions.mask();
            h.job != job && shares.iter().any(|s| h.shares.iter().any(|r| r.node == s.node && gpus(s) & gpus(r) != 0))
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

    /// Reservation `i`'s job has started beside its reserved resources. A placement made
    /// while the block stood counts the block as the job's own reservation, which the state,
    /// holding no block, never charges: the block is lifted, the job's charge worked out
    /// again without it, and the block put back, so the rest of the cycle still sees the
    /// reserved resources blocked, as it always has (the next cycle sees them free).
    pub fn recharge_started(&mut self, view: &mut View, i: usize) {
        let h = &mut self.list[i];
        unblock(view, h);
        view.ledger.give_up_reservation(h.job);
        block(view, h);
    }

    /// Are the reserved resources free for the reserving job (quota included)?
    pub fn ready(&self, view: &View, i: usize, job: &Job) -> bool {
        let h = &self.list[i];
        let room = h.shares.iter().all(|s| view.ledger.nodes[s.node].admits(Some(h.job), &[], s));
        let (q, np) = view.queue_np(job);
        room && view.ledger.check_admission(q, &demand_of(&view.ledger, &h.shares), np).is_ok()
    }

    /// How many of the jobs it waits for still occupy the reserved resources.
    pub fn waiting_for(&self, view: &View, i: usize) -> usize {
        occupants_of(view, self.list[i].job, &self.list[i].shares).len()
    }
}

/// A reserved node that takes no new work. Cordons, lost nodes, windows and GPU faults let
/// the reservation go as they happen, but a node taken out by an agent's report (a process
/// that survived SIGKILL, a start its journal could not record) does not, and its job could
/// never start there (`apply` refuses a start on a node that is not schedulable): it is let
/// go here, and the job reserves again elsewhere if it still starves.
fn closed_node(view: &View, nodes: &[usize]) -> Option<String> {
    let n = nodes.iter().find(|&&n| !view.ledger.nodes[n].schedulable)?;
    Some(format!("node {} is no longer schedulable", view.ledger.nodes[*n].name))
}

/// decisions.md section 14: a reservation never takes a node with a window ahead of it. One
/// made before the window was: its job could not start there (`apply` refuses it), so it is
/// let go, and the job reserves again elsewhere if it still starves.
fn window_ahead(view: &View, job: &Job, r: &PoolReservation) -> Option<String> {
    let closes = |w: &&baton_model::maintenance::Window| {
        w.closes_to(job, view.now_ms) && r.replicas.iter().any(|a| w.holds(&a.node))
    };
    let w = view.state.windows().values().find(closes)?;
    let node = r.replicas.iter().find(|a| w.holds(&a.node)).map(|a| a.node.to_string()).unwrap_or_default();
    Some(crate::windows::ahead_note(w.spec.name.as_str(), &node))
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
    for Share { node: n, amount, gpus, fractions } in &h.shares {
        let node = &mut view.ledger.nodes[*n];
        let (free, mask) = (node.free, node.free_gpus);
        // GPUs by index: the count blocked must be the reserved GPUs that are free, or free
        // GPUs the job does not need would count as taken. A GPU it reserves a fraction of
        // is blocked whole, as the plan checker keeps every job off it (`takes_reserved`);
        // its amount counts the fraction (at most what is free).
        let whole = gpus & mask;
        let mut amount = min(amount, &free);
        amount[GPU_KIND] = (gpus_milli(u64::from(whole.count_ones())) + fractions.total()).min(free[GPU_KIND]);
        // A reserved GPU that holds fractions is kept from more of them too: a fraction could
        // otherwise join the jobs the holder waits for on it.
        let shared: u64 = node.occupants.iter().fold(0, |m, o| m | o.fractions.mask());
        let gpus = whole | (gpus & shared) | fractions.mask();
        let r = NodeReservation { job: h.job, amount, gpus, victims: Vec::new(), fractions: Default::default() };
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
    for Share { node: n, .. } in &h.shares {
        let node = &mut view.ledger.nodes[*n];
        node.reservations.retain(|r| !(r.job == h.job && r.victims.is_empty()));
        node.refresh();
        view.refresh(*n);
    }
    h.blocked = false;
}

/// Would the job's queue admit it once its own queue's jobs on `nodes` had ended?
fn admitted_without_own(view: &mut View, q: usize, np: bool, shares: &[Share], nodes: &[usize]) -> Result<(), String> {
    let own = own_on(view, q, nodes);
    admitted_without(view, own, q, np, shares)
}

/// The jobs running in the view (as `running` has them) of queue `q` with a share on
/// `nodes`, in id order. Read from those nodes' occupants: every cycle asks this for each
/// reservation, and gathering every running job for it cost a pass over all of them.
fn own_on(view: &View, q: usize, nodes: &[usize]) -> Vec<JobId> {
    let ledger = &view.ledger;
    let runs = |j: JobId| {
        ledger.charges.get(&j).is_some_and(|ch| {
            ch.queue == q && ch.nodes.iter().any(|&n| ledger.nodes[n].occupant(j).is_some_and(|o| !o.held))
        })
    };
    let mut own: Vec<JobId> =
        nodes.iter().flat_map(|&n| ledger.nodes[n].occupants.iter().map(|o| o.job)).filter(|&j| runs(j)).collect();
    own.sort_unstable();
    own.dedup();
    if cfg!(debug_assertions) {
        let scanned: Vec<JobId> = running(view)
            .into_iter()
            .filter(|&(j, jq)| jq == q && nodes.iter().any(|&n| ledger.nodes[n].occupant(j).is_some()))
            .map(|(j, _)| j)
            .collect();
        assert_eq!(own, scanned, "a reservation's own-queue jobs differ from a scan of every running job");
    }
    own
}

/// Would queue `q` admit `shares` were the jobs of `own` gone?
fn admitted_without(view: &mut View, own: Vec<JobId>, q: usize, np: bool, shares: &[Share]) -> Result<(), String> {
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

/// What the walks of one cycle share: the view does not change between them (a walk that
/// makes a reservation is the cycle's last), so the running jobs and each pool's ranking of
/// them are gathered once, not once per starving job (each is a pass over every running job).
#[derive(Default)]
pub struct Seen {
    running: Option<Vec<(JobId, usize)>>,
    ranked: FxMap<usize, Vec<(RankKey, JobId)>>,
}

impl Seen {
    fn running(&mut self, view: &View) -> &[(JobId, usize)] {
        self.running.get_or_insert_with(|| running(view))
    }

    fn ranked(&mut self, view: &View, pool: usize) -> &[(RankKey, JobId)] {
        if !self.ranked.contains_key(&pool) {
            let r = ranked_in_pool(view, self.running(view), pool);
            self.ranked.insert(pool, r);
        }
        &self.ranked[&pool]
    }
}

/// A reservation for a starving job, if one of its pools without a reservation would hold
/// it were the jobs running there gone, and its queue would admit it.
pub fn make(view: &mut View, holds: &Holds, c: &Candidate, plan: &mut Plan, seen: &mut Seen) -> bool {
    let taken_pools: Vec<usize> =
        holds.list.iter().filter_map(|h| h.shares.first().map(|s| view.ledger.nodes[s.node].pool)).collect();
    let (q, np) = (c.queue, !c.preemptible);
    for a in &c.needs.pool_choices {
        let pool = a[0];
        if a.iter().any(|&p| p != pool) || taken_pools.contains(&pool) {
            continue;
        }
        let Some((packing, gone)) = walk_all(view, c.job, &c.needs, a, pool, seen.ranked(view, pool)) else {
            continue;
        };
        let set = SetNodes::new(view, c.id, &gone, &packing.nodes());
        let names = |n: usize| view.ledger.nodes[n].name.clone();
        let (replicas, shares) = packing.allocate(&set, &c.needs, names);
        let nodes = packing.nodes();
        let own = own_on(view, q, &nodes);
        if admitted_without(view, own, q, np, &shares).is_err() {
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
fn walk_all(
    view: &View,
    job: &Job,
    needs: &Needs,
    a: &[usize],
    pool: usize,
    cands: &[(RankKey, JobId)],
) -> Option<(Packing, Vec<JobId>)> {
    let nodes: Vec<usize> = (0..view.ledger.nodes.len())
        .filter(|&n| view.ledger.nodes[n].pool == pool && view.ledger.nodes[n].schedulable)
        .filter(|&n| !crate::windows::ahead_on(view, n))
        .collect();
    let want_gpus: u64 = needs.tasks.iter().map(|t| whole_gpus(t.need[GPU_KIND]) * u64::from(t.replicas)).sum();
    let mut fit = Fit::new(view, job.id, needs, a, &nodes);
    // Packing is the expensive part: try it only once enough GPUs would be free in the pool
    // (counted as jobs are taken, not recomputed over every node).
    let mut free_gpus: u64 = nodes.iter().map(|&n| u64::from(view.free_for(n, job.id, &[]).1.count_ones())).sum();
    let mut taken: Vec<JobId> = Vec::new();
    let mut next = cands.iter();
    loop {
        if free_gpus >= want_gpus && fit.fits(&taken, None) {
            break;
        }
        let (key, id) = next.next()?;
        free_gpus += key.1;
        taken.push(*id);
        fit.set_gone(*id, true);
    }
    loop {
        let mut returned = false;
        for i in (0..taken.len()).rev() {
            fit.set_gone(taken[i], false);
            if fit.fits(&taken, Some(i)) {
                taken.remove(i);
                returned = true;
                break;
            }
            fit.set_gone(taken[i], true);
        }
        if !returned {
            break;
        }
    }
    let packing = fit.pack(&taken, None)?;
    Some((packing, taken))
}

/// The `running` jobs with a share in `pool`, in the walk's rank order.
fn ranked_in_pool(view: &View, running: &[(JobId, usize)], pool: usize) -> Vec<(RankKey, JobId)> {
    let mut cands: Vec<(RankKey, JobId)> = running
        .iter()
        .filter_map(|&(id, _)| {
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
    cands
}

/// "Would the gang fit were these jobs gone?" during one walk. A walk asks it once per job
/// taken and once per job tried back, with hundreds of jobs taken on a busy pool: packing
/// anew each time (every node's room recomputed against the whole list) made one walk
/// cost seconds. For a gang of one task and no topology, packing (pack.rs) succeeds
/// exactly when the nodes together host all replicas, each node as many as its room holds,
/// so the answer is kept as that sum, and a job taken or given back changes only the terms
/// of its own nodes. Other gangs pack every time. Debug builds check the sum against
/// packing at every question.
/// Debug builds check the sum against packing on pools of at most this many nodes (packing
/// anew at every question is what the sum avoids; on big pools it would make debug runs
/// crawl).
const DEBUG_CHECK_MAX_NODES: usize = 256;

struct Fit<'v, 'a> {
    view: &'v View<'a>,
    job: JobId,
    needs: &'v Needs,
    a: &'v [usize],
    nodes: &'v [usize],
    /// The running sum, for a gang it applies to.
    count: Option<Count>,
}

struct Count {
    need: Vector,
    replicas: u128,
    gone: FxMap<JobId, ()>,
    /// Replicas each node hosts (by node index; 0 for nodes outside the walk's pool).
    hosts: Vec<u64>,
    in_walk: Vec<bool>,
    total: u128,
}

impl<'v, 'a> Fit<'v, 'a> {
    fn new(view: &'v View<'a>, job: JobId, needs: &'v Needs, a: &'v [usize], nodes: &'v [usize]) -> Fit<'v, 'a> {
        let mut fit = Fit { view, job, needs, a, nodes, count: None };
        if let [task] = needs.tasks.as_slice()
            && needs.topology.is_none()
        {
            let n_all = view.ledger.nodes.len();
            let mut count = Count {
                need: task.need,
                replicas: u128::from(task.replicas),
                gone: FxMap::default(),
                hosts: vec![0; n_all],
                in_walk: vec![false; n_all],
                total: 0,
            };
            for &n in nodes {
                count.in_walk[n] = true;
                count.hosts[n] = fit.hosts(&count, n);
                count.total += u128::from(count.hosts[n]);
            }
            fit.count = Some(count);
        }
        fit
    }

    /// Replicas node `n` hosts with `c.gone` gone, as the packer counts them.
    fn hosts(&self, c: &Count, n: usize) -> u64 {
        let gone = |j: JobId| c.gone.contains_key(&j);
        let node = &self.view.ledger.nodes[n];
        let (mut free, mask) = node.free_for_gone(Some(self.job), &gone);
        if crate::pack::is_fraction(&c.need) {
            // Fractions count the room on each GPU, shared ones too (as the packer does).
            let mut rest = c.need;
            rest[GPU_KIND] = 0;
            let room = node.gpu_use_for_gone(Some(self.job), &gone).room_for(c.need[GPU_KIND]);
            return replicas_fitting(&rest, &free).min(room);
        }
        clamp_to_mask(&mut free, mask);
        replicas_fitting(&c.need, &free)
    }

    /// Imagines job `id` gone (or back); `fits` must then be asked with the same jobs gone.
    fn set_gone(&mut self, id: JobId, gone: bool) {
        let Some(mut c) = self.count.take() else { return };
        if gone {
            c.gone.insert(id, ());
        } else {
            c.gone.remove(&id);
        }
        let on: &[usize] = self.view.ledger.charges.get(&id).map_or(&[], |ch| ch.nodes.as_slice());
        for &n in on.iter().filter(|&&n| c.in_walk[n]) {
            let now = self.hosts(&c, n);
            c.total = c.total - u128::from(c.hosts[n]) + u128::from(now);
            c.hosts[n] = now;
        }
        self.count = Some(c);
    }

    /// Would it fit with the jobs of `taken` gone, except `taken[skip]`?
    fn fits(&self, taken: &[JobId], skip: Option<usize>) -> bool {
        match &self.count {
            Some(c) => {
                let fits = c.total >= c.replicas;
                if cfg!(debug_assertions) && self.nodes.len() <= DEBUG_CHECK_MAX_NODES {
                    assert_eq!(fits, self.pack(taken, skip).is_some(), "the walk's sum disagrees with packing");
                }
                fits
            }
            None => self.pack(taken, skip).is_some(),
        }
    }

    fn pack(&self, taken: &[JobId], skip: Option<usize>) -> Option<Packing> {
        let gone: Vec<JobId> =
            taken.iter().copied().enumerate().filter(|&(k, _)| Some(k) != skip).map(|(_, j)| j).collect();
        pack(&SetNodes::new(self.view, self.job, &gone, self.nodes), self.needs, self.a)
    }
}
