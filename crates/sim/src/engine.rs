//! The simulator's loop: a virtual clock that jumps from instant to instant (timeline steps,
//! expectations, jobs finishing, victims stopping), applying each through the real
//! `State::apply` and running real `baton_sched::cycle` until nothing changes.
//!
//! What the agents would do is simulated here: a victim stops `min(checkpoint_time, grace)`
//! after its signal (checkpointed if it made it within grace), a suspended one at once, and
//! a job with a `duration` exits 0 once it has run that long in total (a checkpointed job
//! keeps its work; one that starts over loses it; a suspended one does not advance).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use baton_model::command::{Command, Observed, Op, Outcome};
use baton_model::event::{Event, EventKind};
use baton_model::job::{JobId, JobState, StopWhy};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::plan::Decision;
use baton_model::state::State;

use crate::de::Cx;
use crate::expect::{Failure, check};
use crate::output::{self, EventOut, Report, Secs, StepOut, Summary};
use crate::scenario::{Action, GpuMark, Scenario, Step};
use crate::stats::{Collector, JobRec, Preemption, Sample};

/// Cycles one instant may take before the simulator gives up (a scheduler bug).
pub const MAX_CYCLES_PER_INSTANT: usize = 10_000;
/// Instants one run may visit.
pub const MAX_INSTANTS: usize = 10_000_000;
/// Finished jobs a trace run keeps in the state (a scenario keeps the model's default, as
/// its output lists every job).
pub const TRACE_RETAINED_FINISHED_JOBS: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("internal error at t={at}s: {message}")]
    Internal { at: Secs, message: String },
}

/// What the simulator knows beyond the replicated state: how long jobs take.
#[derive(Debug, Clone, Default)]
struct Work {
    duration_ms: Option<u64>,
    checkpoint_time_ms: u64,
    /// Trace jobs: a checkpoint every this much run; a stop keeps the work up to the last one.
    checkpoint_interval_ms: Option<u64>,
    /// Work kept (checkpointed, or done before a suspension).
    done_ms: u64,
    run_start: Option<u64>,
}

pub struct Engine<'s> {
    s: &'s Scenario,
    state: State,
    now_ms: u64,
    work: BTreeMap<JobId, Work>,
    /// (when, job) -> (attempt, checkpointed).
    stops: BTreeMap<(u64, JobId), (u32, bool)>,
    events: Vec<EventOut>,
    victims: BTreeMap<Name, Vec<Name>>,
    preemptions: u64,
    steps: Vec<StepOut>,
    pub failures: Vec<Failure>,
    pub checked: usize,
    gpu_used_ms: u128,
    gpu_cap_ms: u128,
    start_ms: Option<u64>,
    warnings: Vec<String>,
    /// Scenario mode: a snapshot of every job and queue at each instant (`-o json`). Trace
    /// mode keeps only the statistics.
    record_steps: bool,
    /// Every command applied, after those that configured the state, when recording.
    log: Option<Vec<Command>>,
    /// Every submitted job's id by name (events name jobs; a finished one may be pruned).
    ids: HashMap<Name, JobId>,
    /// Each submitted array's elements' work, by the array's name: an element is created
    /// inside a command (its `Submitted` event) and takes it then.
    array_work: HashMap<Name, Work>,
    queue_ix: BTreeMap<Name, usize>,
    /// Jobs holding GPUs (Running or Preempting) and pending jobs, kept in step with the
    /// state from the events that name them, so that an instant costs no scan of all jobs.
    active: BTreeMap<JobId, Track>,
    pending: BTreeMap<JobId, usize>,
    /// Pending jobs by when they became Pending (`Job::pending_since_ms`, which changes only
    /// on entering Pending), so that the next job to reach `reserve_after` is found without
    /// a scan of the backlog at every instant.
    pending_since: BTreeSet<(u64, JobId)>,
    since_of: HashMap<JobId, u64>,
    /// GPUs held per queue, in thousandths (a shared GPU's fraction counts as itself).
    used_by_queue: Vec<u64>,
    pending_by_queue: Vec<u64>,
    /// GPUs of Ready nodes; recomputed after a node step.
    cap_gpus: Option<u64>,
    /// When each running job with a duration finishes.
    finishes: BTreeSet<(u64, JobId)>,
    /// Running jobs: when each reaches its time limit, and when each preemptible one's
    /// minimum runtime ends; `timers_of` says which entries a job has, to remove them.
    limits: BTreeSet<(u64, JobId)>,
    protections: BTreeSet<(u64, JobId)>,
    timers_of: HashMap<JobId, (Option<u64>, Option<u64>)>,
    /// Something happened at this instant (an event was applied).
    changed: bool,
    /// Scheduling cycles run (debug builds' cross-checks not counted).
    cycles: u64,
    pub stats: Collector,
}

/// A job holding GPUs.
#[derive(Debug, Clone, Copy)]
struct Track {
    queue: usize,
    /// In thousandths of a GPU.
    gpus: u64,
}

/// What a run produced.
pub struct Run {
    pub report: Report,
    pub failures: Vec<Failure>,
    pub checked: usize,
    pub stats: Collector,
    /// GPU time the cluster's Ready nodes had over the run.
    pub cap_gpu_ms: u128,
    /// Each queue's nominal GPUs (all pools) at the end, in `stats.queues` order.
    pub quota_gpus: Vec<u64>,
    /// Scheduling cycles the run took (what a run's speed mostly depends on).
    pub cycles: u64,
    /// Every command the run applied, in order, when it was recording (`Engine::recording`).
    pub log: Vec<Command>,
}

impl<'s> Engine<'s> {
    pub fn new(s: &'s Scenario, state: State) -> Engine<'s> {
        let queues: Vec<Name> = state.queues().keys().cloned().collect();
        let n = queues.len();
        Engine {
            record_steps: true,
            log: None,
            ids: HashMap::new(),
            array_work: HashMap::new(),
            queue_ix: queues.iter().cloned().enumerate().map(|(i, q)| (q, i)).collect(),
            active: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_since: BTreeSet::new(),
            since_of: HashMap::new(),
            used_by_queue: vec![0; n],
            pending_by_queue: vec![0; n],
            cap_gpus: None,
            finishes: BTreeSet::new(),
            limits: BTreeSet::new(),
            protections: BTreeSet::new(),
            timers_of: HashMap::new(),
            changed: false,
            cycles: 0,
            stats: Collector::new(queues),
            s,
            state,
            now_ms: 0,
            work: BTreeMap::new(),
            stops: BTreeMap::new(),
            events: Vec::new(),
            victims: BTreeMap::new(),
            preemptions: 0,
            steps: Vec::new(),
            failures: Vec::new(),
            checked: 0,
            gpu_used_ms: 0,
            gpu_cap_ms: 0,
            start_ms: None,
            warnings: Vec::new(),
        }
    }

    /// Keeps every command the run applies after `setup` (those that configured the state):
    /// a recorded log (`crate::record`).
    pub fn recording(mut self, setup: Vec<Command>) -> Engine<'s> {
        self.log = Some(setup);
        self
    }

    /// Applies `cmd` to the state, keeping it in the log when recording.
    fn apply_command(&mut self, cmd: Command) -> Result<baton_model::Applied, baton_model::ApplyError> {
        if let Some(log) = &mut self.log {
            log.push(cmd.clone());
        }
        self.state.apply(cmd)
    }

    /// Trace mode: statistics only, no snapshot of every job at every instant, and only a
    /// few finished jobs kept in the state (the statistics keep what they need), so that a
    /// cycle does not walk thousands of finished jobs.
    pub fn without_steps(mut self) -> Engine<'s> {
        self.record_steps = false;
        self.state.set_retain_finished(TRACE_RETAINED_FINISHED_JOBS);
        self
    }

    pub fn run(mut self) -> Result<Run, SimError> {
        let mut fixed: BTreeSet<u64> = self.s.timeline.iter().map(|st| st.at_ms).collect();
        fixed.extend(self.s.expect.iter().map(|e| e.at_ms));
        let mut next_step = 0;
        for _ in 0..MAX_INSTANTS {
            let Some(t) = [fixed.first().copied(), self.next_timer()].into_iter().flatten().min() else {
                return Ok(self.finish());
            };
            self.advance_to(t);
            let is_fixed = fixed.remove(&t);
            self.fire_due();
            while let Some(step) = self.s.timeline.get(next_step).filter(|st| st.at_ms == t) {
                self.step(step);
                next_step += 1;
            }
            self.settle()?;
            self.debug_check_tracking();
            if self.changed {
                self.sample();
            }
            if self.record_steps && (is_fixed || !self.events.is_empty()) {
                self.record();
            }
            self.changed = false;
            self.check_expectations(t);
        }
        Err(self.internal(format!("more than {MAX_INSTANTS} instants")))
    }

    fn internal(&self, message: String) -> SimError {
        SimError::Internal { at: Secs(self.now_ms), message }
    }

    fn advance_to(&mut self, t: u64) {
        let start = *self.start_ms.get_or_insert(t);
        let dt = u128::from(t.saturating_sub(self.now_ms.max(start)));
        let used: u64 = self.used_by_queue.iter().sum();
        let cap = match self.cap_gpus {
            Some(c) => c,
            None => {
                let c = self
                    .state
                    .nodes()
                    .values()
                    .filter(|n| n.status == NodeStatus::Ready)
                    .map(|n| n.spec.resources.gpus())
                    .sum();
                *self.cap_gpus.insert(c)
            }
        };
        // In use is counted in thousandths of a GPU (a shared GPU's fractions).
        for (acc, &u) in self.stats.used_gpu_ms.iter_mut().zip(&self.used_by_queue) {
            *acc += dt * u128::from(u) / 1000;
        }
        self.gpu_used_ms += dt * u128::from(used) / 1000;
        self.gpu_cap_ms += dt * u128::from(cap);
        self.now_ms = t;
    }

    /// The next instant a job finishes on its own, a victim stops, a running job reaches its
    /// time limit, or (while jobs wait) a running job's minimum runtime ends and it may
    /// become a victim.
    fn next_timer(&self) -> Option<u64> {
        let stop = self.stops.keys().next().map(|(t, _)| *t);
        let finish = self.finishes.first().map(|(t, _)| *t);
        let waiting = !self.pending.is_empty();
        let after_now = (self.now_ms.saturating_add(1), 0)..;
        let protection = waiting.then(|| self.protections.range(after_now.clone()).next().map(|k| k.0)).flatten();
        let limit = self.limits.range(after_now).next().map(|k| k.0);
        let window = self.state.next_window_change_ms(self.now_ms);
        [stop, finish, protection, limit, self.next_starving(), window].into_iter().flatten().min()
    }

    /// The next instant a pending job without a reservation reaches `reserve_after` (a cycle
    /// runs then, docs/policy.md section 8).
    fn next_starving(&self) -> Option<u64> {
        let after = self.state.scheduler().reserve_after_ms?;
        // Only jobs Pending since after `now - after` reach it after now; the earliest such
        // job without a reservation (there is at most one reservation per pool) is next.
        let from = if self.now_ms >= after { self.now_ms - after + 1 } else { 0 };
        let next = self
            .pending_since
            .range((from, 0)..)
            .find(|(_, id)| self.state.pool_reservation_of(*id).is_none())
            .map(|(since, _)| since.saturating_add(after));
        debug_assert_eq!(next, self.next_starving_by_scan(after), "next starving instant at t={}", self.now_ms);
        next
    }

    /// `next_starving` by a scan of every pending job (debug builds compare the two).
    fn next_starving_by_scan(&self, after: u64) -> Option<u64> {
        self.pending
            .keys()
            .filter_map(|id| self.state.job(*id))
            .filter(|j| j.state == JobState::Pending && self.state.pool_reservation_of(j.id).is_none())
            .map(|j| j.pending_since_ms.saturating_add(after))
            .filter(|&t| t > self.now_ms)
            .min()
    }

    fn apply(&mut self, op: Op) -> Result<Outcome, String> {
        let resp = self.apply_command(Command { now_ms: self.now_ms, op });
        match resp {
            Ok(applied) => {
                for e in &applied.events {
                    self.observe(e);
                }
                self.complete_at_once()?;
                Ok(applied.outcome)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// The simulator's agents stop a process the moment they are told to: the ranks an
    /// ended attempt left completing are reported stopped at once (one report per node),
    /// so their GPUs are free before the next cycle, as before the completing state existed.
    fn complete_at_once(&mut self) -> Result<(), String> {
        let mut by_node: BTreeMap<Name, Vec<Observed>> = BTreeMap::new();
        for (&job, c) in self.state.all_completing() {
            for (&rank, r) in &c.ranks {
                let o = Observed::Stopped { job, attempt: c.attempt, rank, checkpointed: false };
                by_node.entry(r.node.clone()).or_default().push(o);
            }
        }
        for (node, observations) in by_node {
            let op = Op::Report { node, observations };
            let applied = self.apply_command(Command { now_ms: self.now_ms, op }).map_err(|e| e.to_string())?;
            if let Outcome::Reported { ignored } = applied.outcome
                && let Some((_, why)) = ignored.into_iter().next()
            {
                return Err(format!("a completing rank was not released: {why}"));
            }
        }
        Ok(())
    }

    /// Keeps the simulator's work accounting and counters in step with what happened.
    fn observe(&mut self, e: &Event) {
        if self.record_steps {
            self.events.push(EventOut::of(e));
        }
        self.changed = true;
        if matches!(e.kind, EventKind::Submitted) {
            self.adopt_element(e);
        }
        let Some(id) = e.job.as_ref().and_then(|n| self.ids.get(n)).copied() else {
            return;
        };
        if let Some(job) = self.state.job(id) {
            let (has_checkpoint, queue) = (job.has_checkpoint, job.spec.queue.clone());
            self.account(id, e, has_checkpoint, &queue);
        }
        self.track(id);
        // A window started under a running job, its GPU failed, or it stops to grow: it gets
        // its signal as a victim does.
        if matches!(e.kind, EventKind::MaintenanceStop | EventKind::GpuFaultStop | EventKind::Growing) {
            self.schedule_victim(id);
        }
    }

    /// An array element just created takes its array's work, and is counted as submitted.
    fn adopt_element(&mut self, e: &Event) {
        let Some(job) = e.job.as_ref().and_then(|n| self.state.job_by_name(n.as_str())) else { return };
        let Some((array, _)) = self.state.element_of(job.id) else { return };
        let Some(w) = self.array_work.get(&array.spec.name).cloned() else { return };
        let (id, name, queue, gpus) =
            (job.id, job.spec.name.clone(), job.spec.queue.clone(), job.spec.total().gpus_milli());
        self.work.insert(id, w);
        self.ids.insert(name, id);
        let q = self.queue_index(&queue);
        self.stats.jobs.insert(id, JobRec::submitted(q, gpus, self.now_ms));
    }

    /// The simulator's work accounting, counters and statistics for one event of job `id`.
    fn account(&mut self, id: JobId, e: &Event, has_checkpoint: bool, queue: &Name) {
        let now = self.now_ms;
        let gpus = self.active.get(&id).map_or(0, |t| t.gpus);
        let lost = self.with_work(id, |w| match &e.kind {
            EventKind::Started { .. } => {
                if !has_checkpoint && w.checkpoint_interval_ms.is_none() {
                    w.done_ms = 0;
                }
                w.run_start = Some(now);
                0
            }
            EventKind::Resumed => {
                w.run_start = Some(now);
                0
            }
            EventKind::Stopped { checkpointed } => end_run(w, now, *checkpointed),
            EventKind::Suspended { .. } => end_run(w, now, true),
            EventKind::Requeued => end_run(w, now, false),
            EventKind::Paused
            | EventKind::Succeeded
            | EventKind::Failed { .. }
            | EventKind::TimedOut
            | EventKind::Cancelled => {
                w.run_start = None;
                0
            }
            _ => 0,
        });
        let q = self.queue_index(queue);
        self.stats.lost_gpu_ms[q] += u128::from(lost) * u128::from(gpus) / 1000;
        match &e.kind {
            EventKind::Started { .. } => {
                if let Some(r) = self.stats.jobs.get_mut(&id) {
                    r.first_start_ms.get_or_insert(now);
                }
            }
            EventKind::Preempted { by } => {
                self.preemptions += 1;
                self.stats.preemptions[q] += 1;
                let victim = e.job.clone().expect("job event");
                self.victims.entry(by.clone()).or_default().push(victim.clone());
                self.record_preemption(victim, q, by.clone());
            }
            _ => {}
        }
    }

    /// Keeps a preemption for the report, with the preemptor's queue so that a reader sees
    /// which queue took the GPUs.
    fn record_preemption(&mut self, victim: Name, queue: usize, by: Name) {
        let by_queue = self.state.job_by_name(by.as_str()).map(|j| j.spec.queue.clone());
        let by_queue = by_queue.map(|bq| self.queue_index(&bq));
        let at_ms = self.now_ms;
        self.stats.preempted.push(Preemption { at_ms, victim, queue, by, by_queue });
    }

    /// Changes a job's work and keeps its finish time in `finishes`.
    fn with_work<R>(&mut self, id: JobId, f: impl FnOnce(&mut Work) -> R) -> R {
        let w = self.work.entry(id).or_default();
        if let Some(t) = finish_at(w) {
            self.finishes.remove(&(t, id));
        }
        let r = f(w);
        if let Some(t) = finish_at(w) {
            self.finishes.insert((t, id));
        }
        r
    }

    fn queue_index(&mut self, queue: &Name) -> usize {
        if let Some(&i) = self.queue_ix.get(queue) {
            return i;
        }
        let i = self.stats.queues.len();
        self.queue_ix.insert(queue.clone(), i);
        self.stats.queues.push(queue.clone());
        for v in [&mut self.used_by_queue, &mut self.pending_by_queue, &mut self.stats.preemptions] {
            v.push(0);
        }
        self.stats.used_gpu_ms.push(0);
        self.stats.lost_gpu_ms.push(0);
        i
    }

    /// Puts job `id` in `active` or `pending` as its state now says.
    fn track(&mut self, id: JobId) {
        if let Some(t) = self.active.remove(&id) {
            self.used_by_queue[t.queue] -= t.gpus;
        }
        if let Some(q) = self.pending.remove(&id) {
            self.pending_by_queue[q] -= 1;
        }
        if let Some(since) = self.since_of.remove(&id) {
            self.pending_since.remove(&(since, id));
        }
        // Waits count every spell Pending, those after a requeue included.
        let pending_now = self.state.job(id).is_some_and(|j| j.state == JobState::Pending);
        if let Some(r) = self.stats.jobs.get_mut(&id) {
            r.set_pending(pending_now, self.now_ms);
        }
        if let Some((limit, protection)) = self.timers_of.remove(&id) {
            for (set, t) in [(&mut self.limits, limit), (&mut self.protections, protection)] {
                if let Some(t) = t {
                    set.remove(&(t, id));
                }
            }
        }
        let Some(job) = self.state.job(id) else { return };
        if job.state == JobState::Running {
            let limit = job.time_limit_at();
            let protection = job.preemptible.then(|| job.started_ms.saturating_add(job.spec.min_runtime_ms));
            self.limits.extend(limit.map(|t| (t, id)));
            self.protections.extend(protection.map(|t| (t, id)));
            self.timers_of.insert(id, (limit, protection));
        }
        let (state, gpus, queue, since) = (job.state, job.gpus_milli(), job.spec.queue.clone(), job.pending_since_ms);
        if matches!(state, JobState::Succeeded | JobState::Failed)
            && let Some(r) = self.stats.jobs.get_mut(&id)
        {
            r.ended = true;
        }
        let q = self.queue_index(&queue);
        if state.is_active() {
            self.active.insert(id, Track { queue: q, gpus });
            self.used_by_queue[q] += gpus;
        } else if state == JobState::Pending {
            self.pending.insert(id, q);
            self.pending_since.insert((since, id));
            self.since_of.insert(id, since);
            self.pending_by_queue[q] += 1;
        }
    }

    /// Debug builds check the tracked sets against a scan of every job.
    fn debug_check_tracking(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let jobs = self.state.jobs().values();
        let active: BTreeSet<JobId> = jobs.clone().filter(|j| j.state.is_active()).map(|j| j.id).collect();
        let pending: BTreeSet<JobId> = jobs.filter(|j| j.state == JobState::Pending).map(|j| j.id).collect();
        assert_eq!(active, self.active.keys().copied().collect(), "active jobs tracked at t={}", self.now_ms);
        assert_eq!(pending, self.pending.keys().copied().collect(), "pending jobs tracked at t={}", self.now_ms);
        let used: u64 = self.state.jobs().values().filter(|j| j.state.is_active()).map(|j| j.gpus_milli()).sum();
        assert_eq!(used, self.used_by_queue.iter().sum::<u64>(), "GPUs in use tracked at t={}", self.now_ms);
    }

    fn sample(&mut self) {
        let s = Sample {
            at_ms: self.now_ms,
            used_gpus: self.used_by_queue.iter().map(|u| u / 1000).collect(),
            pending: self.pending_by_queue.clone(),
        };
        self.stats.sample(s);
    }

    fn refuse(&mut self, job: Option<Name>, message: String) {
        self.events.push(EventOut::refused(self.now_ms, job, message));
    }

    fn step(&mut self, step: &Step) {
        let result = match &step.action {
            Action::Submit(sub) if sub.array.is_some() => {
                self.array_work.insert(sub.spec.name.clone(), work_of(sub));
                self.apply(submit_op(sub)).map(drop)
            }
            Action::Submit(sub) => self.apply(submit_op(sub)).map(|o| {
                if let Outcome::Submitted { job, .. } = o {
                    self.work.insert(job, work_of(sub));
                    self.ids.insert(sub.spec.name.clone(), job);
                    let queue = self.queue_index(&sub.spec.queue);
                    let rec = JobRec::submitted(queue, sub.spec.total().gpus_milli(), self.now_ms);
                    self.stats.jobs.insert(job, rec);
                    self.track(job);
                }
            }),
            Action::Finish(j) => self.exit(&j.v, 0),
            Action::Fail(j) => self.exit(&j.v, 1),
            Action::Cancel(j) => match self.unfinished_array(&j.v) {
                Some(array) => self.apply(Op::CancelArray { array }).map(drop),
                None => self.job_id(&j.v).and_then(|job| self.apply(Op::Cancel { job })).map(drop),
            },
            Action::Pause(j) => {
                self.job_id(&j.v).and_then(|job| self.apply(Op::Pause { job })).map(|_| self.schedule_pause(&j.v))
            }
            Action::Resume(j) => self.job_id(&j.v).and_then(|job| self.apply(Op::Resume { job })).map(drop),
            Action::NodeDown(n) => {
                self.cap_gpus = None;
                self.apply(Op::SetNodeStatus { node: n.v.clone(), status: NodeStatus::Lost }).map(drop)
            }
            Action::NodeUp(n) => {
                self.cap_gpus = None;
                self.apply(Op::SetNodeStatus { node: n.v.clone(), status: NodeStatus::Ready }).map(drop)
            }
            Action::Cordon(n) => self.apply(Op::Cordon { node: n.v.clone(), cordoned: true }).map(drop),
            Action::Uncordon(n) => self.apply(Op::Cordon { node: n.v.clone(), cordoned: false }).map(drop),
            Action::UpdateQueue(q, patch) => self.update_queue(&q.v, patch),
            Action::Maintenance(w) => {
                self.cap_gpus = None;
                self.apply(Op::CreateMaintenance(w.v.clone())).map(drop)
            }
            Action::Gpu(g) => {
                self.cap_gpus = None;
                let GpuMark { node, gpu, error } = g.v.clone();
                self.apply(Op::SetGpuHealth { node, gpu, fault: error }).map(drop)
            }
        };
        if let Err(why) = result {
            let job = match &step.action {
                Action::Finish(j) | Action::Fail(j) | Action::Cancel(j) | Action::Pause(j) | Action::Resume(j) => {
                    Some(j.v.clone())
                }
                _ => None,
            };
            self.refuse(job, format!("{} refused: {why}", step.action.verb()));
        }
    }

    /// The id of the job a scenario names (commands carry ids, as the live CLI sends them).
    /// A `cancel:` of an array's name cancels the array.
    fn unfinished_array(&self, name: &Name) -> Option<JobId> {
        self.state.array_by_name(name.as_str()).filter(|a| !a.is_finished()).map(|a| a.id)
    }

    fn job_id(&self, name: &Name) -> Result<JobId, String> {
        self.state.job_by_name(name.as_str()).map(|j| j.id).ok_or_else(|| format!("unknown job {:?}", name.as_str()))
    }

    fn exit(&mut self, name: &Name, code: i32) -> Result<(), String> {
        let job = self.state.job_by_name(name.as_str()).ok_or("unknown job")?;
        if !job.state.is_active() {
            return Err(format!("job {name} is {}, not running", job.state.as_str()));
        }
        let (job, attempt) = (job.id, job.attempt);
        self.report_ranks(job, |rank| (rank == 0).then_some(Observed::Exited { job, attempt, rank, exit_code: code }))
    }

    /// Commits what the agents would report for the job's ranks (`observe` says what each
    /// rank reports, if anything): one report per node, as the live cluster commits them, so
    /// the model's gang rules decide and not the simulator. An ignored observation is an error.
    fn report_ranks(&mut self, id: JobId, observe: impl Fn(u32) -> Option<Observed>) -> Result<(), String> {
        let job = self.state.job(id).ok_or_else(|| format!("unknown job {id}"))?;
        let mut by_node: BTreeMap<Name, Vec<Observed>> = BTreeMap::new();
        for (rank, r) in job.ranked().into_iter().enumerate() {
            if let Some(o) = observe(rank as u32) {
                by_node.entry(r.node.clone()).or_default().push(o);
            }
        }
        if by_node.is_empty() {
            return Err(format!("job {} runs nowhere", job.spec.name));
        }
        for (node, observations) in by_node {
            if let Outcome::Reported { ignored } = self.apply(Op::Report { node, observations })?
                && let Some((_, why)) = ignored.into_iter().next()
            {
                return Err(why);
            }
        }
        Ok(())
    }

    fn update_queue(&mut self, name: &Name, patch: &crate::yaml::Node) -> Result<(), String> {
        let base = self.state.queues().get(name).cloned().ok_or("unknown queue")?;
        let cx = Cx { file: &self.s.file };
        let mut f = cx.map(patch, "update_queue").map_err(|e| e.to_string())?;
        let _ = f.opt("name");
        let spec = baton_spec::queue::queue_fields(&cx, &mut f, base).map_err(|e| e.to_string())?;
        self.apply(Op::PutQueue(spec)).map(drop)
    }

    /// A person paused a running job: it checkpoints like a victim would.
    fn schedule_pause(&mut self, name: &Name) {
        let Some(job) = self.state.job_by_name(name.as_str()) else {
            return;
        };
        if job.state != JobState::Preempting {
            return;
        }
        let ct = self.work.get(&job.id).map_or(0, |w| w.checkpoint_time_ms);
        let delay = ct.min(job.spec.grace_ms);
        self.stops.insert((self.now_ms + delay, job.id), (job.attempt, ct <= job.spec.grace_ms));
    }

    /// A victim (or a job at its time limit) gets its signal: it stops after its checkpoint
    /// time, or at the end of grace.
    fn schedule_victim(&mut self, id: JobId) {
        let Some(job) = self.state.job(id) else {
            return;
        };
        let Some(stopping) = job.stopping else { return };
        let suspend = baton_model::job::PreemptionMode::Suspend;
        let mode = match stopping.why {
            StopWhy::Preempted { mode, .. } => mode,
            // Stopped, never suspended: it is to end; it checkpoints as its mode says.
            StopWhy::TimeLimit if job.spec.preemption_mode == suspend => baton_model::job::PreemptionMode::Requeue,
            StopWhy::TimeLimit => job.spec.preemption_mode,
            // decisions.md section 14: as in mode checkpoint, whatever the job's mode.
            StopWhy::Maintenance | StopWhy::GpuFault => baton_model::job::PreemptionMode::Checkpoint,
            // Section 13: a gang stops to grow as in mode checkpoint (requeue: as its mode).
            StopWhy::Grow if job.spec.preemption_mode == baton_model::job::PreemptionMode::Requeue => {
                baton_model::job::PreemptionMode::Requeue
            }
            StopWhy::Grow => baton_model::job::PreemptionMode::Checkpoint,
            StopWhy::Paused => return,
        };
        let ct = self.work.get(&id).map_or(0, |w| w.checkpoint_time_ms);
        let (delay, checkpointed) = match mode {
            baton_model::job::PreemptionMode::Suspend => (0, false),
            baton_model::job::PreemptionMode::Checkpoint => (ct.min(job.spec.grace_ms), ct <= job.spec.grace_ms),
            _ => (ct.min(job.spec.grace_ms), false),
        };
        self.stops.insert((self.now_ms + delay, id), (job.attempt, checkpointed));
    }

    /// Jobs that reach their duration exit; victims whose time has come stop.
    fn fire_due(&mut self) -> bool {
        let mut fired = false;
        // A maintenance window starts or ends: the leader's Tick moves it on.
        if self.state.window_due(self.now_ms) {
            self.cap_gpus = None;
            if let Err(e) = self.apply(Op::Tick) {
                self.refuse(None, format!("tick: {e}"));
            }
            fired = true;
        }
        loop {
            let now = self.now_ms;
            // In id order, as a scan of all jobs would find them.
            let mut done: Vec<JobId> = self.finishes.range(..=(now, JobId::MAX)).map(|(_, id)| *id).collect();
            done.sort_unstable();
            let due: Vec<((u64, JobId), (u32, bool))> =
                self.stops.range(..=(now, JobId::MAX)).map(|(k, v)| (*k, *v)).collect();
            if done.is_empty() && due.is_empty() {
                return fired;
            }
            fired = true;
            for id in done {
                let attempt = self.state.job(id).map_or(0, |j| j.attempt);
                let exited =
                    |rank: u32| (rank == 0).then_some(Observed::Exited { job: id, attempt, rank, exit_code: 0 });
                if self.report_ranks(id, exited).is_err() {
                    self.with_work(id, |w| w.run_start = None);
                }
            }
            for (key, (attempt, checkpointed)) in due {
                self.stops.remove(&key);
                let still =
                    self.state.job(key.1).is_some_and(|j| j.state == JobState::Preempting && j.attempt == attempt);
                if still {
                    let every_rank = |rank| Some(Observed::Stopped { job: key.1, attempt, rank, checkpointed });
                    let _ = self.report_ranks(key.1, every_rank);
                }
            }
        }
    }

    /// Runs cycles until a cycle changes nothing and nothing is due.
    fn settle(&mut self) -> Result<(), SimError> {
        for _ in 0..MAX_CYCLES_PER_INSTANT {
            let fired = self.fire_due();
            let plan = baton_sched::cycle(&self.state, self.now_ms);
            self.cycles += 1;
            if plan.decisions.is_empty() {
                if fired {
                    continue;
                }
                return Ok(());
            }
            let victims: Vec<JobId> = plan
                .decisions
                .iter()
                .flat_map(|d| match d {
                    Decision::Preempt { victims, .. } => victims.iter().map(|v| v.job).collect(),
                    Decision::PreemptShrinking { victims, shrunk, .. } => {
                        victims.iter().chain(shrunk).map(|v| v.job).collect()
                    }
                    Decision::TimeLimit { job, .. } => vec![*job],
                    _ => Vec::new(),
                })
                .collect();
            let only_waits = plan.decisions.iter().all(|d| matches!(d, Decision::Wait { .. }));
            let decisions = plan.decisions.clone();
            if std::env::var("BATON_TRACE").is_ok() {
                for d in &decisions {
                    eprintln!(
                        "TRACE t={} {} {} {:?}",
                        self.now_ms,
                        d.kind(),
                        self.state.job(d.job()).map(|j| j.spec.name.to_string()).unwrap_or_default(),
                        d
                    );
                }
            }
            match self.apply(Op::ApplyPlan(plan)) {
                Ok(Outcome::PlanApplied { rejected, .. }) if rejected.is_empty() => {}
                Ok(Outcome::PlanApplied { rejected, .. }) => {
                    let what: Vec<String> = rejected
                        .iter()
                        .map(|(i, why)| {
                            let d = &decisions[*i as usize];
                            let name = self.state.job(d.job()).map(|j| j.spec.name.to_string()).unwrap_or_default();
                            format!("{} {name}: {why}", d.kind())
                        })
                        .collect();
                    let all: Vec<String> = decisions
                        .iter()
                        .map(|d| {
                            format!(
                                "{} {}",
                                d.kind(),
                                self.state.job(d.job()).map(|j| j.spec.name.to_string()).unwrap_or_default()
                            )
                        })
                        .collect();
                    return Err(self.internal(format!(
                        "the scheduler proposed decisions the state refused: {} (the plan: {})",
                        what.join("; "),
                        all.join(", ")
                    )));
                }
                other => return Err(self.internal(format!("plan not applied: {other:?}"))),
            }
            for v in victims {
                self.schedule_victim(v);
            }
            if only_waits {
                // Waits change only the jobs' reasons, and a cycle reads a job's reason only
                // to tell whether it changed: the next cycle would decide nothing. Skipping
                // it halves the cycles of an instant whose new jobs all wait.
                self.debug_check_settled();
                return Ok(());
            }
        }
        Err(self.internal(format!("no steady state after {MAX_CYCLES_PER_INSTANT} cycles")))
    }

    /// Debug builds check what skipping the cycle after a plan of waits assumes: nothing
    /// falls due, and one more cycle decides nothing.
    fn debug_check_settled(&mut self) {
        if !cfg!(debug_assertions) {
            return;
        }
        assert!(!self.fire_due(), "something fell due after a plan of waits at t={}", self.now_ms);
        let plan = baton_sched::cycle(&self.state, self.now_ms);
        // Reasons whose amounts moved for more jobs than a cycle refreshes wait for later
        // cycles (`baton_sched::MAX_AMOUNT_REFRESHES_PER_CYCLE`); nothing else may be left.
        assert!(
            plan.decisions.iter().all(|d| baton_sched::is_amount_refresh(&self.state, d)),
            "a cycle after a plan of waits decided {:?} at t={}",
            plan.decisions,
            self.now_ms
        );
    }

    /// Guarantees that add up to more than a pool holds are honoured in cycle order only.
    fn warn_oversubscribed(&mut self) {
        let l = self.state.ledger();
        for p in &l.pools {
            for k in p.oversubscribed() {
                let h = |v| l.kinds.human(k, v);
                let w = format!(
                    "pool {}: queues are guaranteed {} {} but the pool has {}; guarantees are honoured in scheduling order",
                    p.name,
                    h(p.guaranteed[k]),
                    l.kinds.name(k),
                    h(p.capacity[k])
                );
                if !self.warnings.contains(&w) {
                    self.warnings.push(w);
                }
            }
        }
    }

    fn record(&mut self) {
        self.warn_oversubscribed();
        let step = StepOut {
            at: Secs(self.now_ms),
            events: std::mem::take(&mut self.events),
            jobs: output::jobs(&self.state),
            queues: output::queues(&self.state),
            users: output::users(&self.state, self.now_ms),
        };
        self.steps.push(step);
    }

    fn check_expectations(&mut self, t: u64) {
        for e in self.s.expect.iter().filter(|e| e.at_ms == t) {
            let (checked, failures) = check(e, &self.state, &self.victims);
            self.checked += checked;
            self.failures.extend(failures);
        }
    }

    fn finish(mut self) -> Run {
        self.warn_oversubscribed();
        // A trace run prunes finished jobs from the state; the statistics remember them.
        let finished = if self.record_steps {
            self.state.jobs().values().filter(|j| matches!(j.state, JobState::Succeeded | JobState::Failed)).count()
                as u64
        } else {
            self.stats.jobs.values().filter(|j| j.ended).count() as u64
        };
        let utilization = if self.gpu_cap_ms == 0 { 0.0 } else { self.gpu_used_ms as f64 / self.gpu_cap_ms as f64 };
        let summary = Summary {
            preemptions: self.preemptions,
            finished,
            gpu_utilization: (utilization * 10_000.0).round() / 10_000.0,
            end: Secs(self.now_ms),
        };
        let name = self.s.name.clone().unwrap_or_else(|| {
            std::path::Path::new(&self.s.file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
        });
        let report = Report { name, warnings: self.warnings, steps: self.steps, summary };
        let quota_gpus = self
            .stats
            .queues
            .iter()
            .map(|q| self.state.queues().get(q).map_or(0, |q| q.quotas.values().map(|p| p.nominal.gpus()).sum()))
            .collect();
        Run {
            report,
            failures: self.failures,
            checked: self.checked,
            stats: self.stats,
            cap_gpu_ms: self.gpu_cap_ms,
            quota_gpus,
            cycles: self.cycles,
            log: self.log.unwrap_or_default(),
        }
    }
}

/// Ends a run; the work kept is the whole run when it was checkpointed, else the run up to
/// its last periodic checkpoint (none without an interval). Returns the run's work lost.
fn end_run(w: &mut Work, now: u64, checkpointed: bool) -> u64 {
    let Some(s) = w.run_start.take() else { return 0 };
    let ran = now.saturating_sub(s);
    let kept = match w.checkpoint_interval_ms {
        _ if checkpointed => ran,
        Some(i) => ran / i * i,
        None => 0,
    };
    w.done_ms += kept;
    ran - kept
}

/// What the simulator knows of a submitted job's work before it runs.
fn work_of(sub: &crate::scenario::Submit) -> Work {
    Work {
        duration_ms: sub.duration_ms,
        checkpoint_time_ms: sub.checkpoint_time_ms,
        checkpoint_interval_ms: sub.checkpoint_interval_ms,
        ..Work::default()
    }
}

fn finish_at(w: &Work) -> Option<u64> {
    let (d, s) = (w.duration_ms?, w.run_start?);
    Some(s + d.saturating_sub(w.done_ms))
}

/// A scenario's submit: as before for a job that waits for none (the decisions of every
/// scenario written before dependencies stay the same), `SubmitAfter` for one that does.
/// A job with a `user` runs as that user (whose usage it counts for, section 12).
fn submit_op(sub: &crate::scenario::Submit) -> Op {
    let spec = sub.spec.clone();
    let run_as = sub.user.clone();
    if let Some(array) = sub.array {
        return Op::SubmitArray { spec, array, request_id: None, run_as, after: sub.after.clone() };
    }
    if let Some(elastic) = sub.elastic {
        return Op::SubmitElastic { spec, elastic, request_id: None, run_as, after: sub.after.clone() };
    }
    if sub.after.is_empty() && run_as.is_none() {
        Op::Submit { spec, request_id: None }
    } else {
        Op::SubmitAfter { spec, request_id: None, run_as, after: sub.after.clone() }
    }
}
