//! The plan checker: every decision is re-checked against the state it meets, in order, and
//! applied or rejected on its own. A plan computed from an older state can only lose
//! decisions here, never break an invariant.

use std::collections::BTreeSet;

use super::{RESERVATION_SLACK_MS, Reservation, State};
use crate::alloc::ReplicaAlloc;
use crate::command::Outcome;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobState, StopWhy, Topology};
use crate::ledger::{Share, Vector, add, fits};
use crate::limits::MAX_DECISIONS_PER_PLAN;
use crate::plan::{Decision, Plan, Victim};
use crate::rejection::Rejection;

impl State {
    pub(crate) fn apply_plan(&mut self, plan: Plan, ev: &mut Vec<Event>) -> Outcome {
        // `applied` already counts this command: the state the plan could have been computed
        // from had applied at most one fewer.
        let Some(stale_by) = (self.d.applied - 1).checked_sub(plan.based_on) else {
            let why = Rejection::FromTheFuture { based_on: plan.based_on, applied: self.d.applied - 1 };
            return Outcome::PlanApplied { accepted: 0, rejected: vec![(0, why)], stale_by: 0 };
        };
        if plan.decisions.len() > MAX_DECISIONS_PER_PLAN {
            let why = Rejection::TooManyDecisions { max: MAX_DECISIONS_PER_PLAN };
            return Outcome::PlanApplied { accepted: 0, rejected: vec![(0, why)], stale_by };
        }
        let mut accepted = 0;
        let mut rejected = Vec::new();
        for (i, d) in plan.decisions.into_iter().enumerate() {
            match self.apply_decision(d, ev) {
                Ok(()) => accepted += 1,
                Err(why) => rejected.push((i as u32, why)),
            }
        }
        Outcome::PlanApplied { accepted, rejected, stale_by }
    }

    fn apply_decision(&mut self, d: Decision, ev: &mut Vec<Event>) -> Result<(), Rejection> {
        match d {
            Decision::ResumeInPlace { job, attempt } => {
                self.check_resume(job, attempt)?;
                self.resume_suspended(job, ev);
            }
            Decision::Place { job, attempt, replicas } => {
                self.check_place(job, attempt, &replicas)?;
                self.start_job(job, attempt, replicas, ev);
            }
            Decision::Preempt { job, victims, replicas, message } => {
                let shares = self.check_preempt(job, &victims, &[], &replicas)?;
                self.preempt(job, &victims, &[], replicas, shares, &message, ev);
            }
            Decision::PreemptShrinking { job, victims, shrunk, replicas, message } => {
                let shares = self.check_preempt(job, &victims, &shrunk, &replicas)?;
                self.preempt(job, &victims, &shrunk, replicas, shares, &message, ev);
            }
            Decision::Wait { job, reason } => {
                let j = self.d.jobs.get(&job).ok_or(Rejection::UnknownJob)?;
                if j.state.is_finished() {
                    return Err(Rejection::Finished { job: j.spec.name.clone() });
                }
                self.set_reason(job, reason);
            }
            Decision::Reserve { job, pool, replicas, waits_for } => {
                self.check_pool_reserve(job, &pool, &replicas)?;
                self.reserve_pool(job, pool, replicas, waits_for, ev);
            }
            Decision::Unreserve { job, reason } => {
                if self.pool_reservation_of(job).is_none() {
                    return Err(Rejection::NoReservation { job: self.name_of(job) });
                }
                self.unreserve_pool(job, &reason, ev);
                self.set_reason(job, reason);
            }
            Decision::TimeLimit { job, attempt } => {
                self.check_time_limit(job, attempt)?;
                self.stop_at_time_limit(job, ev);
            }
            Decision::Grow { job, attempt, replicas } => {
                self.check_grow(job, attempt, &replicas)?;
                self.grow(job, replicas, ev);
            }
        }
        Ok(())
    }

    fn check_time_limit(&self, id: JobId, attempt: u32) -> Result<(), Rejection> {
        let job = self.d.jobs.get(&id).ok_or(Rejection::UnknownJob)?;
        if job.state != JobState::Running || job.attempt != attempt {
            return Err(wrong_attempt(job));
        }
        match job.time_limit_at() {
            Some(at) if at <= self.d.now_ms => Ok(()),
            Some(at_ms) => Err(Rejection::TimeLimitLater { job: job.spec.name.clone(), at_ms }),
            None => Err(Rejection::NoTimeLimit { job: job.spec.name.clone() }),
        }
    }

    fn check_resume(&self, id: JobId, attempt: u32) -> Result<(), Rejection> {
        let job = self.d.jobs.get(&id).ok_or(Rejection::UnknownJob)?;
        if job.state != JobState::Suspended || job.attempt != attempt {
            return Err(wrong_attempt(job));
        }
        if let Some(by) = job.suspended_for
            && self.holds(by)
        {
            return Err(Rejection::StillRunsOnItsResources { job: self.name_of(by) });
        }
        let ready =
            |r: &&ReplicaAlloc| self.d.nodes.get(&r.node).is_some_and(|n| n.status == crate::node::NodeStatus::Ready);
        if let Some(r) = job.replicas.iter().find(|r| !ready(r)) {
            return Err(Rejection::NodeNotReady { node: r.node.clone() });
        }
        // Nothing runs on a node in a started window (decisions.md section 14).
        if let Some((r, w)) = job.replicas.iter().find_map(|r| self.active_window_on(&r.node).map(|w| (r, w))) {
            return Err(Rejection::InMaintenance { node: r.node.clone(), window: w.spec.name.clone() });
        }
        // A suspended job charges no quota; running again is an admission like any other.
        let shares = self.shares(job, &job.replicas);
        let (q, np) = self.queue_and_np(job);
        self.ledger
            .check_admission(q, &demand_of(&self.ledger, &shares), np)
            .map_err(|b| Rejection::Quota(b.describe(&self.ledger, q)))?;
        self.check_user_limit(id, &job.replicas, false)?;
        Ok(())
    }

    /// The job holds resources or has them reserved (its ranks still being stopped hold them).
    pub fn holds(&self, id: JobId) -> bool {
        self.d.reservations.contains_key(&id)
            || self.after.completing.contains_key(&id)
            || self.d.jobs.get(&id).is_some_and(|j| j.state.is_active() || j.state == JobState::Suspended)
    }

    /// Whether the preemptor `job` was suspended in place for holds nothing any more: then
    /// it resumes, or waits for a reason a cycle names (decisions.md section 7).
    pub fn preemptor_gone(&self, job: &crate::job::Job) -> bool {
        job.suspended_for.is_none_or(|by| !self.holds(by))
    }

    pub(super) fn check_place(&self, id: JobId, attempt: u32, replicas: &[ReplicaAlloc]) -> Result<(), Rejection> {
        let job = self.d.jobs.get(&id).ok_or(Rejection::UnknownJob)?;
        if job.state != JobState::Pending {
            return Err(Rejection::WrongState { job: job.spec.name.clone(), state: job.state });
        }
        if self.held(id) {
            return Err(Rejection::NotWaiting { job: job.spec.name.clone() });
        }
        if attempt != job.attempt + 1 {
            let expected = job.attempt + 1;
            return Err(Rejection::NotNextAttempt { job: job.spec.name.clone(), attempt, expected });
        }
        if let Some(why) = self.completing_reason(id) {
            return Err(Rejection::Completing { job: job.spec.name.clone(), why });
        }
        let shares = self.check_replicas(id, replicas)?;
        if let Some(r) = self.d.reservations.get(&id) {
            if r.replicas != replicas {
                return Err(Rejection::NotWhereReserved);
            }
            let waiting = r.victims.iter().filter(|v| self.still_holds(**v)).count();
            if waiting > 0 {
                return Err(Rejection::VictimsStillStopping { waiting });
            }
        }
        self.check_fit(id, &shares, &[])?;
        self.check_reservations(id, &shares, &[])?;
        // A preemptor was admitted, its user's limit included, when its room was reserved.
        if !self.d.reservations.contains_key(&id) {
            let (q, np) = self.queue_and_np(job);
            let demand = demand_of(&self.ledger, &shares);
            self.ledger.check_admission(q, &demand, np).map_err(|b| Rejection::Quota(b.describe(&self.ledger, q)))?;
            self.check_user_limit(id, replicas, false)?;
        }
        Ok(())
    }

    /// A preemption: `victims` stop whole; `shrunk` gangs give up only their replicas above
    /// their minimum, so the preemptor's replicas must fit beside what those keep.
    fn check_preempt(
        &mut self,
        id: JobId,
        victims: &[Victim],
        shrunk: &[Victim],
        replicas: &[ReplicaAlloc],
    ) -> Result<Vec<Share>, Rejection> {
        let job = self.d.jobs.get(&id).ok_or(Rejection::UnknownJob)?;
        if job.state != JobState::Pending || self.d.reservations.contains_key(&id) || self.held(id) {
            return Err(Rejection::NotWaiting { job: job.spec.name.clone() });
        }
        if let Some(why) = self.completing_reason(id) {
            return Err(Rejection::Completing { job: job.spec.name.clone(), why });
        }
        if victims.is_empty() && shrunk.is_empty() {
            return Err(Rejection::NoVictims);
        }
        let mut seen = BTreeSet::new();
        for v in victims.iter().chain(shrunk) {
            if v.job == id || !seen.insert(v.job) {
                return Err(Rejection::VictimsNotDistinct);
            }
            self.check_victim(v)?;
        }
        let kept = self.check_shrunk(shrunk)?;
        let shares = self.check_replicas(id, replicas)?;
        let removed: Vec<JobId> = victims.iter().chain(shrunk).map(|v| v.job).collect();
        self.check_fit_beside(id, &shares, &removed, &kept)?;
        self.check_reservations(id, &shares, &removed)?;
        let job = &self.d.jobs[&id];
        let (q, np) = self.queue_and_np(job);
        let demand = demand_of(&self.ledger, &shares);
        let mut gone = crate::ledger::Removed::default();
        for v in victims {
            self.ledger.remove(&mut gone, v.job);
        }
        for (v, k) in shrunk.iter().zip(&kept) {
            self.ledger.remove_part(&mut gone, v.job, &k.gives_up);
        }
        let verdict = self.ledger.check_admission(q, &demand, np);
        self.ledger.put_back_all(gone);
        verdict.map_err(|b| Rejection::Quota(b.describe(&self.ledger, q)))?;
        // A job never preempts to get under its user's limit (decisions.md section 12):
        // its victims' holdings still count.
        self.check_user_limit(id, replicas, false)?;
        Ok(shares)
    }

    /// Each shrunk victim is an elastic gang that may shrink; what each keeps and gives up.
    fn check_shrunk(&self, shrunk: &[Victim]) -> Result<Vec<Shrinking>, Rejection> {
        let mut out = Vec::new();
        for v in shrunk {
            let j = &self.d.jobs[&v.job];
            let Some(e) = self.elastic(v.job).filter(|e| e.may_shrink(&j.spec, self.behaviour)) else {
                return Err(Rejection::NotElastic { job: j.spec.name.clone() });
            };
            let (kept, excess) = e.kept_and_excess(&j.replicas);
            let gives_up = demand_of(&self.ledger, &self.shares(j, &excess));
            out.push(Shrinking { kept: self.shares(j, &kept), gives_up });
        }
        Ok(out)
    }

    /// `check_fit` with the removed jobs gone, except what shrunk gangs keep (`kept`).
    fn check_fit_beside(
        &self,
        id: JobId,
        shares: &[Share],
        removed: &[JobId],
        kept: &[Shrinking],
    ) -> Result<(), Rejection> {
        for share in shares {
            let node = &self.ledger.nodes[share.node];
            let (mut free, mut free_gpus) = node.free_for(Some(id), removed);
            let mut used = node.gpu_use_for(Some(id), removed);
            for k in kept.iter().flat_map(|k| &k.kept).filter(|k| k.node == share.node) {
                crate::ledger::sub(&mut free, &k.amount);
                free_gpus &= !k.gpus;
                used.take_whole(k.gpus);
                k.fractions.iter().for_each(|(g, m)| used.add(g, m));
            }
            let fractions_fit = share.fractions.iter().all(|(g, m)| used.used(g) + m <= crate::ledger::GPU_MILLI);
            if !fits(&share.amount, &free) || share.gpus & !free_gpus != 0 || !fractions_fit {
                return Err(Rejection::NoLongerFits { node: node.name.clone() });
            }
        }
        Ok(())
    }

    /// A victim runs the named attempt, may be preempted, and is past its minimum runtime.
    fn check_victim(&self, v: &Victim) -> Result<(), Rejection> {
        let j = self.d.jobs.get(&v.job).ok_or(Rejection::UnknownVictim)?;
        let job = j.spec.name.clone();
        if j.state != JobState::Running || j.attempt != v.attempt {
            return Err(Rejection::VictimWrongAttempt { job, state: j.state, attempt: j.attempt });
        }
        if !j.preemptible {
            return Err(Rejection::VictimNotPreemptible { job });
        }
        if self.d.now_ms < j.started_ms.saturating_add(j.spec.min_runtime_ms) {
            return Err(Rejection::VictimInMinRuntime { job });
        }
        Ok(())
    }

    /// Every replica in one domain of the level `t` requires, if it requires one.
    fn check_one_domain(&self, t: Topology, nodes: &BTreeSet<usize>) -> Result<(), Rejection> {
        let Some(required) = t.required() else { return Ok(()) };
        let spans = match self.ledger.level(&required) {
            _ if required.is_node() => nodes.len() > 1,
            Some(level) => {
                let domains: BTreeSet<u32> = nodes.iter().map(|&n| self.ledger.nodes[n].domains[level]).collect();
                domains.len() > 1
            }
            // Undeclared since the submit: no placement can satisfy it.
            None => true,
        };
        if spans { Err(Rejection::SpansDomains { level: required.to_string() }) } else { Ok(()) }
    }

    /// Replicas cover every task exactly once, on schedulable nodes of the task's pools, with
    /// the right GPU count and the job's topology; returns per-node shares.
    pub(crate) fn check_replicas(&self, id: JobId, replicas: &[ReplicaAlloc]) -> Result<Vec<Share>, Rejection> {
        let job = &self.d.jobs[&id];
        let spec = &job.spec;
        // An elastic gang's elastic task may carry any size of its range (section 13).
        let elastic = self.elastic.get(&id).map(|e| e.task);
        let elastic_size = self.elastic_size_of(id, replicas).transpose()?;
        let size = |t: usize, task: &crate::job::TaskSpec| match elastic_size {
            Some(n) if elastic == Some(t as u32) => n,
            _ => task.replicas,
        };
        let mut want: Vec<(u32, u32)> = spec
            .tasks
            .iter()
            .enumerate()
            .flat_map(|(t, task)| (0..size(t, task)).map(move |i| (t as u32, i)))
            .collect();
        let mut got: Vec<(u32, u32)> = replicas.iter().map(|r| (r.task, r.index)).collect();
        want.sort_unstable();
        got.sort_unstable();
        if want != got {
            return Err(Rejection::ReplicasDoNotCover);
        }
        let mut racks = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        // A rack is its path when levels above it are declared (decisions.md section 10).
        let rack_level = self.ledger.level(&crate::topology::LevelName::new(crate::topology::RACK).expect("valid"));
        for r in replicas {
            let n = self.ledger.node(r.node.as_str()).ok_or_else(|| Rejection::UnknownNode { node: r.node.clone() })?;
            let acct = &self.ledger.nodes[n];
            if !acct.schedulable {
                return Err(Rejection::NodeNotSchedulable { node: r.node.clone() });
            }
            if let Some(w) = self.window_closed_to(job, &r.node) {
                return Err(Rejection::MaintenanceAhead { node: r.node.clone(), window: w.spec.name.clone() });
            }
            if !self.task_pools(spec, r.task as usize).contains(&acct.pool) {
                return Err(Rejection::PoolNotAllowed { node: r.node.clone() });
            }
            let task = &spec.tasks[r.task as usize];
            // Against the GPUs the node has, unhealthy ones included: one of those is refused
            // below as not free (the ledger's capacity counts only healthy ones).
            let has = self.d.nodes.get(&r.node).map_or(0, |n| n.spec.resources.gpus());
            // A fraction of a shared GPU names the one GPU it shares.
            let want = if task.resources.gpu_fraction() > 0 { 1 } else { task.resources.gpus() };
            if r.gpus.len() as u64 != want || r.gpus.iter().any(|&g| u64::from(g) >= has) {
                return Err(Rejection::WrongGpus { index: r.index, task: task.name.clone() });
            }
            racks.insert(rack_level.map_or(acct.rack.map(|r| r as u32), |lv| Some(acct.domains[lv])));
            nodes.insert(n);
        }
        match spec.topology {
            Some(Topology::Node) if nodes.len() > 1 => {
                return Err(Rejection::SpansNodes);
            }
            Some(Topology::Rack) if racks.len() > 1 => {
                return Err(Rejection::SpansRacks);
            }
            Some(t @ Topology::Levels(_)) => self.check_one_domain(t, &nodes)?,
            _ => {}
        }
        let shares = self.shares(job, replicas);
        // Whole GPUs are each one replica's; shared ones are checked by what is left of them.
        let whole = |r: &&ReplicaAlloc| spec.tasks[r.task as usize].resources.gpu_fraction() == 0;
        let gpu_total: usize = replicas.iter().filter(whole).map(|r| r.gpus.len()).sum();
        let distinct: u32 = shares.iter().map(|s| s.gpus.count_ones()).sum();
        if distinct as usize != gpu_total {
            return Err(Rejection::SameGpu);
        }
        Ok(shares)
    }

    pub(super) fn check_fit(&self, id: JobId, shares: &[Share], removed: &[JobId]) -> Result<(), Rejection> {
        for share in shares {
            let node = &self.ledger.nodes[share.node];
            if !node.admits(Some(id), removed, share) {
                return Err(Rejection::NoLongerFits { node: node.name.clone() });
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn preempt(
        &mut self,
        id: JobId,
        victims: &[Victim],
        shrunk: &[Victim],
        replicas: Vec<ReplicaAlloc>,
        shares: Vec<Share>,
        message: &str,
        ev: &mut Vec<Event>,
    ) {
        // It now waits for its victims, not for a starving job's reservation.
        self.drop_pool_reservation(id);
        let by = self.name_of(id);
        let mut deadline = self.d.now_ms;
        for v in shrunk {
            self.shrink_to_minimum(v.job);
        }
        let victims: Vec<Victim> = victims.iter().chain(shrunk).cloned().collect();
        for v in &victims {
            let shrinking = self.restart_of(v.job).is_some();
            let mode = self.d.jobs[&v.job].spec.preemption_mode_when_preempted(self.behaviour);
            self.mark_stopping(v.job, StopWhy::Preempted { by: id, mode });
            let victim = self.d.jobs.get_mut(&v.job).expect("victim");
            victim.preempted_by = Some(id);
            deadline = deadline.max(victim.stopping.map_or(0, |s| s.deadline_ms));
            victim.reason = format!("preempted by {by}: {message}");
            let mut said = message.to_string();
            if shrinking {
                let e = self.elastic[&v.job];
                let to = e.describe(e.min);
                victim.reason = format!("preempted by {by}: {message}; shrinking to {to}");
                said = format!("{message}; its replicas above its minimum are taken: it starts again with {to}");
            }
            self.job_event(v.job, EventKind::Preempted { by: by.clone() }, said, ev);
        }
        let job = &self.d.jobs[&id];
        let (q, np) = self.queue_and_np(job);
        let victim_ids: Vec<JobId> = victims.iter().map(|v| v.job).collect();
        let suspending: Vec<JobId> = victim_ids.iter().copied().filter(|&v| self.suspends(&self.d.jobs[&v])).collect();
        self.ledger.preempt(id, q, np, &shares, &victim_ids, |v| suspending.contains(&v));
        let now = self.d.now_ms;

        let r = Reservation {
            job: id,
            victims: victim_ids,
            replicas,
            created_ms: now,
            deadline_ms: deadline + RESERVATION_SLACK_MS,
        };
        self.d.reservations.insert(id, r);
        let n = victims.len();
        let plural = if n == 1 { "" } else { "s" };
        self.set_reason(id, format!("waiting for {n} victim{plural} to stop; their resources are held for it"));
    }
}

/// A gang that gives up its replicas above its minimum to a preemptor: the shares it keeps
/// (where the preemptor may not go) and the usage, per pool, it gives up.
struct Shrinking {
    kept: Vec<Share>,
    gives_up: Vec<(usize, Vector)>,
}

/// A job found in another state or attempt than the decision names.
fn wrong_attempt(job: &crate::job::Job) -> Rejection {
    Rejection::WrongAttempt { job: job.spec.name.clone(), state: job.state, attempt: job.attempt }
}

/// Per-pool totals of a set of shares, as the quota check wants them.
pub fn demand_of(ledger: &crate::ledger::Ledger, shares: &[Share]) -> Vec<(usize, Vector)> {
    let mut out: Vec<(usize, Vector)> = Vec::new();
    for Share { node: n, amount, .. } in shares {
        let pool = ledger.nodes[*n].pool;
        match out.iter_mut().find(|(p, _)| *p == pool) {
            Some((_, v)) => add(v, amount),
            None => out.push((pool, *amount)),
        }
    }
    out
}
