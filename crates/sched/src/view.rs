//! The scheduler's working copy of the cluster for one cycle: a clone of the ledger that it
//! changes as it decides, by the same calls `apply` makes (`Ledger::place`,
//! `Ledger::preempt`, `Ledger::begin_stop`, `Ledger::resume_in_place`; the ledger's
//! lower-level steps are private to `model`), plus the node index.

use std::cell::OnceCell;
use std::collections::BTreeSet;

use baton_model::elastic::{excess_of, gang_of_excess};
use baton_model::job::{Job, JobId, JobState};
use baton_model::ledger::{Ledger, Removed, Share, Vector, ZERO, add, sub};
use baton_model::state::State;

use crate::fair::UserHeld;
use crate::index::Index;

pub struct View<'a> {
    pub state: &'a State,
    pub ledger: Ledger,
    pub index: Index,
    pub now_ms: u64,
    /// Jobs chosen as victims this cycle (or stopped at their time limit): never chosen
    /// twice (`take`, `is_taken`).
    taken: BTreeSet<JobId>,
    /// `taken` in the order taken: what a kept list of candidates has not seen yet is the
    /// log's tail (`taken_since`).
    taken_log: Vec<JobId>,
    /// Jobs running or stopping when the cycle began: the only possible victims. Built on
    /// first use (`active()`) from `jobs.active`: a cycle that plans no preemption never
    /// needs their queues and ranks.
    active: OnceCell<Vec<ActiveJob>>,
    /// The state's jobs by what the cycle does with them, from one pass (`Jobs::of`).
    pub jobs: Jobs<'a>,
    /// `active`'s positions by queue and its leaving jobs' positions, built on first use.
    groups: OnceCell<Groups>,
    /// Running jobs this cycle stops at their time limit (leaving, as `active` shows them).
    timed_out: Vec<JobId>,
    /// Free resources per pool over schedulable nodes, kept up to date as the cycle decides.
    pub pool_free: Vec<Vector>,
    /// What each node contributes to `pool_free`.
    counted: Vec<Vector>,
    /// How many times each node changed this cycle (`refresh`): what a preemption planner
    /// estimated of a node holds while its count stands (`preempt::memo`).
    changes: Vec<u32>,
    /// Running elastic gangs whose replicas above their minimum may be taken alone
    /// (decisions.md section 13), gathered on first use; split off in the ledger as jobs of
    /// their own only while a preemption is planned (`split_excess`, `merge_excess`).
    excess: OnceCell<Vec<Excess>>,
    split: bool,
    /// What this cycle's decisions made each user hold, for per-user limits.
    pub user_held: UserHeld,
}

/// The state's jobs sorted by what a cycle does with them, each list in id order. One pass
/// over every job (a backlog of tens of thousands, at every cycle) finds them all, where a
/// pass for each list read every job three times.
#[derive(Default)]
pub struct Jobs<'a> {
    /// Pending: the order's candidates, before its own filter.
    pub pending: Vec<&'a Job>,
    /// Running or stopping: the only possible victims (`View::active`).
    pub active: Vec<&'a Job>,
    /// Running past their time limit.
    pub over_limit: Vec<&'a Job>,
    pub suspended: Vec<&'a Job>,
}

impl<'a> Jobs<'a> {
    fn of(state: &'a State, now_ms: u64) -> Jobs<'a> {
        let mut jobs = Jobs { pending: Vec::with_capacity(state.jobs().len()), ..Jobs::default() };
        for j in state.jobs().values() {
            match j.state {
                JobState::Pending => jobs.pending.push(j),
                JobState::Suspended => jobs.suspended.push(j),
                _ => {}
            }
            if j.state.is_active() {
                jobs.active.push(j);
            }
            if j.state == JobState::Running && j.time_limit_at().is_some_and(|at| at <= now_ms) {
                jobs.over_limit.push(j);
            }
        }
        jobs
    }
}

/// A gang's replicas above its minimum, as the preemption planner sees them: a job of
/// their own (`id`, the gang's with `EXCESS_BIT`).
#[derive(Debug, Clone)]
pub struct Excess {
    pub gang: JobId,
    pub id: JobId,
    pub shares: Vec<Share>,
}

/// Positions in `View::active()`, ascending (so in id order): per queue, and of the jobs
/// already leaving. A preemption plan looks at its own queue's jobs and at the queues that
/// could give up some, not at every running job (thousands, on a busy cluster, for each of
/// up to `MAX_PREEMPTION_PLANS_PER_CYCLE` plans a cycle).
#[derive(Debug, Default)]
pub struct Groups {
    pub by_queue: Vec<Vec<u32>>,
    pub leaving: Vec<u32>,
}

impl Groups {
    fn of(active: &[ActiveJob], queues: usize) -> Groups {
        let mut g = Groups { by_queue: vec![Vec::new(); queues], leaving: Vec::new() };
        for (i, r) in active.iter().enumerate() {
            if g.by_queue.len() <= r.queue {
                g.by_queue.resize(r.queue + 1, Vec::new());
            }
            g.by_queue[r.queue].push(i as u32);
            if r.leaving {
                g.leaving.push(i as u32);
            }
        }
        g
    }

    /// Positions of queue `q`'s jobs.
    pub fn of_queue(&self, q: usize) -> &[u32] {
        self.by_queue.get(q).map_or(&[], |v| v.as_slice())
    }
}

/// What preemption planning needs of an active job (Running or Preempting, as
/// `JobState::is_active` says), gathered once a cycle. Named apart from `JobState::Running`:
/// it covers stopping jobs too.
#[derive(Debug, Clone)]
pub struct ActiveJob {
    pub job: JobId,
    pub queue: usize,
    /// Being preempted or paused already.
    pub leaving: bool,
    pub preemptible: bool,
    /// Its minimum runtime protects it until then.
    pub protected_until_ms: u64,
    pub priority: i32,
    pub progress_mark_ms: u64,
    pub submitted: (u64, u64),
    pub gpus: u64,
}

impl<'a> View<'a> {
    pub fn new(state: &'a State, now_ms: u64) -> View<'a> {
        let ledger = state.ledger().clone();
        let index = Index::build(&ledger);
        let counted: Vec<Vector> = ledger.nodes.iter().map(|n| if n.schedulable { n.free } else { ZERO }).collect();
        let mut pool_free = vec![ZERO; ledger.pools.len()];
        for (n, free) in counted.iter().enumerate() {
            add(&mut pool_free[ledger.nodes[n].pool], free);
        }
        let (active, groups, timed_out) = (OnceCell::new(), OnceCell::new(), Vec::new());
        let jobs = Jobs::of(state, now_ms);
        let (excess, split) = (OnceCell::new(), false);
        let changes = vec![0; ledger.nodes.len()];
        View {
            state,
            ledger,
            index,
            now_ms,
            taken: BTreeSet::new(),
            taken_log: Vec::new(),
            active,
            jobs,
            groups,
            timed_out,
            pool_free,
            counted,
            changes,
            excess,
            split,
            user_held: UserHeld::default(),
        }
    }

    /// Jobs running or stopping when the cycle began, in id order. Read from the state, not
    /// the view's ledger: the cycle's changes must not show. A job's queue is found by the
    /// one rule every site uses (`queue_np`): a live job's queue exists.
    pub fn active(&self) -> &[ActiveJob] {
        self.active.get_or_init(|| {
            self.jobs
                .active
                .iter()
                .map(|j| ActiveJob {
                    job: j.id,
                    queue: self.queue_np(j).0,
                    leaving: j.is_leaving() || self.timed_out.contains(&j.id),
                    preemptible: j.preemptible,
                    protected_until_ms: j.started_ms.saturating_add(j.spec.min_runtime_ms),
                    priority: j.priority,
                    progress_mark_ms: j.progress_mark_ms,
                    submitted: j.submitted_key(),
                    gpus: j.gpus(),
                })
                .collect()
        })
    }

    /// `active()` grouped by queue, and its leaving jobs.
    pub fn groups(&self) -> &Groups {
        self.groups.get_or_init(|| Groups::of(self.active(), self.ledger.queues.len()))
    }

    /// Gangs running above their minimum that may shrink, in id order (`Elastic::may_shrink`).
    fn gather_excess(&self) -> Vec<Excess> {
        let state = self.state;
        let mut out = Vec::new();
        for (&gang, e) in state.elastic_gangs() {
            let Some(j) = state.job(gang) else { continue };
            if j.state != baton_model::job::JobState::Running
                || j.is_leaving()
                || !e.may_shrink(&j.spec, state.behaviour())
            {
                continue;
            }
            let (_, excess) = e.kept_and_excess(&j.replicas);
            out.push(Excess { gang, id: excess_of(gang), shares: state.shares(j, &excess) });
        }
        out
    }

    /// The gangs' excess parts split off in the ledger now (empty outside `split_excess`).
    pub fn excess(&self) -> &[Excess] {
        if self.split { self.excess.get().map_or(&[], |v| v.as_slice()) } else { &[] }
    }

    /// Charges the replicas above its minimum of each shrinkable gang among `candidates`
    /// (ascending ids: a preemption's candidates) to a job of their own in the working
    /// ledger, so the preemption planner can take them alone. Gangs already taken or
    /// stopping this cycle stay whole. Undone by `merge_excess`.
    pub fn split_excess(&mut self, candidates: &[JobId]) {
        self.split = true;
        if self.state.elastic_gangs().is_empty() {
            return;
        }
        // Gathered once a cycle; taken out while the ledger changes, then put back.
        let list = self.excess.take().unwrap_or_else(|| self.gather_excess());
        for x in list.iter().filter(|x| candidates.binary_search(&x.gang).is_ok()) {
            let running = self.ledger.charges.get(&x.gang).is_some_and(|c| !c.leaving && !c.reserved);
            if running && !self.is_taken(x.gang) {
                self.ledger.split_off(x.gang, x.id, &x.shares);
            }
        }
        let _ = self.excess.set(list);
    }

    /// Puts the split parts back into their gangs (a part taken as a victim was merged back
    /// as its whole gang began to leave: `reserve`).
    pub fn merge_excess(&mut self) {
        if !std::mem::take(&mut self.split) {
            return;
        }
        let split: Vec<(JobId, JobId)> = self.ledger.split_parts.iter().map(|(&gang, &part)| (part, gang)).collect();
        for (part, gang) in split {
            self.ledger.merge_into(part, gang);
        }
    }

    /// A running job is stopped at its time limit this cycle: it is leaving.
    pub fn time_out(&mut self, id: JobId) {
        match self.active.get_mut() {
            Some(active) => {
                active.iter_mut().filter(|r| r.job == id).for_each(|r| r.leaving = true);
                // Its leaving list is out of date: gather it again on next use.
                self.groups.take();
            }
            None => self.timed_out.push(id),
        }
    }

    pub fn job(&self, id: JobId) -> &'a Job {
        &self.state.jobs()[&id]
    }

    /// A job of queue `q` starts on these shares: the change `State::apply` makes of a Place.
    pub fn occupy(&mut self, job: &Job, q: usize, shares: &[Share]) {
        self.ledger.place(job.id, q, !job.preemptible, self.state.suspends(job), shares);
        self.reindex(shares);
    }

    /// Resources are held for a preemptor of queue `q` while its victims stop: the change
    /// `State::apply` makes of a Preempt. A victim may be a gang's excess part
    /// (`split_excess`): the whole gang stops, as the state stops it.
    pub fn reserve(&mut self, job: &Job, q: usize, shares: &[Share], victims: &[JobId]) {
        let jobs = self.state.jobs();
        // A gang whose part is taken stops whole: its part is merged back first, so that
        // the gang leaves as the state makes it leave.
        let mut leaving: Vec<JobId> = victims.iter().map(|&v| gang_of_excess(v).unwrap_or(v)).collect();
        leaving.sort_unstable();
        leaving.dedup();
        for &gang in &leaving {
            if let Some(part) = self.ledger.split_parts.get(&gang).copied() {
                self.ledger.merge_into(part, gang);
                self.take(part);
            }
        }
        let state = self.state;
        self.ledger.preempt(job.id, q, !job.preemptible, shares, &leaving, |v| state.suspends(&jobs[&v]));
        for &v in &leaving {
            self.take(v);
        }
        self.reindex(shares);
    }

    /// A suspended job runs again in place.
    pub fn unhold(&mut self, job: JobId) {
        let nodes = self.ledger.charges.get(&job).map(|c| c.nodes.clone()).unwrap_or_default();
        self.ledger.resume_in_place(job);
        for n in nodes {
            self.refresh(n);
        }
    }

    fn reindex(&mut self, shares: &[Share]) {
        for s in shares {
            self.refresh(s.node);
        }
    }

    /// Node `n`'s free resources changed: re-bucket it and fix its pool's total.
    pub fn refresh(&mut self, n: usize) {
        self.index.update(&self.ledger, n);
        let node = &self.ledger.nodes[n];
        let now = if node.schedulable { node.free } else { ZERO };
        let total = &mut self.pool_free[node.pool];
        sub(total, &self.counted[n]);
        add(total, &now);
        self.counted[n] = now;
        self.changes[n] = self.changes[n].wrapping_add(1);
    }

    /// Job `job` leaves this cycle: no plan may take it again.
    pub fn take(&mut self, job: JobId) {
        if self.taken.insert(job) {
            self.taken_log.push(job);
        }
    }

    pub fn is_taken(&self, job: JobId) -> bool {
        self.taken.contains(&job)
    }

    /// How many jobs were taken so far: a mark for `taken_since`.
    pub fn taken_count(&self) -> usize {
        self.taken_log.len()
    }

    /// The jobs taken since `mark` (a `taken_count`), in the order taken.
    pub fn taken_since(&self, mark: usize) -> &[JobId] {
        &self.taken_log[mark..]
    }

    /// How many times node `n` changed this cycle (every change goes through `refresh`).
    pub fn changes_of(&self, n: usize) -> u32 {
        self.changes[n]
    }

    /// Node `n`'s free resources if it is schedulable, else nothing (what it adds to its
    /// pool's `pool_free`).
    pub fn free_counted(&self, n: usize) -> &Vector {
        &self.counted[n]
    }

    /// The job's queue index and whether it is not preemptible, by `State::queue_and_np`'s
    /// one rule: a live job's queue exists, and one that does not is a broken invariant
    /// (it panics, naming both). Every sched site that needs a job's queue asks this.
    pub fn queue_np(&self, job: &Job) -> (usize, bool) {
        // The view's ledger is a clone of the state's: the same indices.
        self.state.queue_and_np(job)
    }

    /// Runs `f` on the view as if `jobs` had stopped (their queue usage out of the ledger),
    /// then puts their usage back: `Ledger::without` for a question that needs the view.
    pub fn without<R>(&mut self, jobs: impl IntoIterator<Item = JobId>, f: impl FnOnce(&View) -> R) -> R {
        let mut removed = Removed::default();
        for job in jobs {
            self.ledger.remove(&mut removed, job);
        }
        let r = f(self);
        self.ledger.put_back_all(removed);
        r
    }

    /// Free for `job` on node `n` with the jobs in `removed` gone.
    pub fn free_for(&self, n: usize, job: JobId, removed: &[JobId]) -> (Vector, u64) {
        self.ledger.nodes[n].free_for(Some(job), removed)
    }
}
