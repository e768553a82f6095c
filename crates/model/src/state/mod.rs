//! The replicated state machine: `State::apply(Command) -> Response`.
//!
//! Pure and deterministic: time arrives inside the command, ids are counters, and every
//! collection iterates in a fixed order. A refused command changes nothing.
//!
//! Layout: `config` (classes, cohorts, queues, nodes), `submit` (validation of new jobs),
//! `lifecycle` (every job transition, keeping the ledger in step), `apply_plan` (the plan
//! checker), `reserve` (settings and starving jobs' reservations), `rebuild` (the ledger from scratch), `report` (an agent's report, per rank),
//! `completing` (ranks of an ended attempt that still hold their GPUs until reported gone,
//! and a late report of the checkpoint a requeued job's last attempt wrote).

mod accounting;
mod apply_plan;
mod arrays;
mod completing;
mod config;
mod elastic;
mod gpu_health;
mod identity;
mod integrity;
mod lifecycle;
mod maintenance;
mod rank_saves;
mod rebuild;
mod report;
mod reserve;
pub mod retired;
pub mod submit;
mod tenancy;
mod topology;
mod usage;
mod waits;

pub use apply_plan::demand_of;
use arrays::ArrayIndex;
pub use arrays::Arrays;
pub use completing::{Aftermath, Completing, CompletingRanks, LastPlaced};
pub use elastic::{ElasticGangs, Restarts};
pub use maintenance::MAINTENANCE;
pub use reserve::backfills;
use submit::Submitter;
use waits::WaitIndex;
pub use waits::Waits;

use std::collections::{BTreeMap, VecDeque};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::access::{Access, QueueAdmins};
use crate::accounting::Accounting;
use crate::alloc::ReplicaAlloc;
use crate::class::{PriorityClass, default_classes};
use crate::command::{Applied, Command, Op, Outcome, Response};
use crate::cow_tree::CowTree;
use crate::error::ApplyError;
use crate::event::Event;
use crate::gpu_health::{GpuFaults, HealthSource};
use crate::job::{Job, JobId};
use crate::ledger::Ledger;
use crate::limits::{DEFAULT_RETAINED_FINISHED_JOBS, MAX_CLOCK_MS};
use crate::maintenance::Window;
use crate::name::Name;
use crate::node::Node;
use crate::queue::{Cohort, QueueSpec, Visibility};
use crate::scheduler::{PoolReservation, SchedulerSettings};
use crate::tenancy::Tenancy;
use crate::usage::{StoredUsage, Usage};

/// How long after its victims' grace periods end a reservation is kept before the
/// preemptor re-plans (covers an agent that reports late).
pub const RESERVATION_SLACK_MS: u64 = 60_000;

/// Debug builds check the ledger against a rebuild after every command while the state
/// holds at most this many jobs...
#[cfg(debug_assertions)]
const DEBUG_LEDGER_CHECK_MAX_JOBS: usize = 64;
/// ...and after every this-many commands beyond.
#[cfg(debug_assertions)]
const DEBUG_LEDGER_CHECK_STRIDE: u64 = 64;

/// Resources held for a preemptor while its victims stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub job: JobId,
    pub victims: Vec<JobId>,
    /// Where the preemptor will run; it is placed exactly here.
    pub replicas: Vec<ReplicaAlloc>,
    pub created_ms: u64,
    pub deadline_ms: u64,
}

/// Everything that is replicated. The ledger is derived from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Data {
    classes: BTreeMap<Name, PriorityClass>,
    cohorts: BTreeMap<Name, Cohort>,
    queues: BTreeMap<Name, QueueSpec>,
    // The large collections share their contents with a clone (the leader's snapshot)
    // until they change; they serialize as the `BTreeMap`s they were.
    nodes: CowTree<Name, Node>,
    jobs: CowTree<JobId, Job>,
    job_names: CowTree<Name, JobId>,
    reservations: BTreeMap<JobId, Reservation>,
    /// Starving jobs' reservations (docs/policy.md section 9), at most one per pool.
    pool_reservations: BTreeMap<Name, PoolReservation>,
    scheduler: SchedulerSettings,
    request_ids: CowTree<String, JobId>,
    request_order: VecDeque<String>,
    finished_order: VecDeque<JobId>,
    next_job_id: JobId,
    next_submit_seq: u64,
    applied: u64,
    now_ms: u64,
    retain_finished: usize,
}

#[derive(Debug, Clone)]
pub struct State {
    d: Data,
    /// The apply behaviour the log has raised this state to (see `behaviour`). Serialized
    /// last, and only when above the baseline: a snapshot without it is at the baseline.
    behaviour: u32,
    /// Tokens, owners and per-user request ids: replicated, and serialized after `d` so a
    /// snapshot written before they existed is `d` alone ([`PreAccessState`]).
    access: Access,
    /// Tenancy settings and the user each job runs as: serialized after `access`, so a
    /// snapshot written before them is `(d, access)` ([`PreTenancyState`]).
    tenancy: Tenancy,
    /// What ended attempts leave behind: ranks that still hold their share of a node until
    /// reported gone, and where a requeued job's last attempt ran. Serialized after
    /// `tenancy`, so a snapshot written before it is `(d, access, tenancy)`
    /// ([`PreCompletingState`]).
    after: Aftermath,
    /// Each queue's revision: the count of commands applied when it was last written (so
    /// never reused, not even by a queue deleted and made again). Serialized last; a
    /// snapshot written before it is read as [`PreCompletingState`], its queues at
    /// revision 0.
    queue_revisions: BTreeMap<Name, u64>,
    /// Each queue's visibility, for the queues not at the default (`Visibility::All`).
    /// Serialized after the revisions, and only when it holds any: a snapshot without it
    /// is format 5's layout ([`PreVisibilityState`]), which a format-5 follower still reads.
    queue_visibility: BTreeMap<Name, Visibility>,
    /// The dependencies of held jobs that do not hold yet (decisions.md section 13).
    /// Serialized after the visibility, and only when a job waits: a snapshot without it
    /// is format 6's layout ([`PreWaitsState`]), which a format-6 follower still reads.
    waits: Waits,
    /// Derived from `waits`; never stored.
    wait_index: WaitIndex,
    /// Maintenance windows, started or ahead (decisions.md section 14). Serialized after
    /// the waits, and only when there is one (then the waits too, maybe empty).
    windows: BTreeMap<Name, Window>,
    /// Unhealthy GPUs (decisions.md section 14). Serialized after the windows, and only
    /// when there is one (then the waits and the windows too, maybe empty).
    gpu_faults: GpuFaults,
    /// Job arrays (decisions.md section 13). Serialized after the unhealthy GPUs, and only
    /// when there is one (then every part before, maybe empty).
    arrays: Arrays,
    /// Derived from `arrays`; never stored.
    array_index: ArrayIndex,
    /// Elastic gangs' ranges (decisions.md section 13). Serialized with the arrays, in the
    /// same part, written when either holds one.
    elastic: ElasticGangs,
    /// Gangs stopping to grow or shrink, and where each starts again: serialized with the
    /// arrays.
    restarts: Restarts,
    /// Usage over time, its settings and the per-user limits (decisions.md section 12):
    /// serialized with the arrays, in the same part, written when any of the three holds
    /// something.
    usage: Usage,
    /// Accounting's settings and newest records (issue 34): serialized with the arrays, in
    /// the same part, written when accounting is on.
    accounting: Accounting,
    /// The ranks of running attempts that saved their work since their job's last complete
    /// checkpoint (`rank_saves`). Serialized after the behaviour, and only when it holds
    /// one: a snapshot without it is format 10's layout ([`PreRankSavesState`]).
    rank_saves: rank_saves::RankSaves,
    /// Topology levels and the nodes' domains (decisions.md section 10). Serialized after
    /// the tally, and only when a level is declared or a node names a domain: a snapshot
    /// without it is format 11's layout ([`PreTopologyState`]).
    topology: crate::topology::ClusterTopology,
    /// Replica ids the cluster removed (`retired`, behaviour 6). Serialized after the
    /// topology, and only when it holds one: a snapshot without it is format 15's layout
    /// ([`PreRetiredState`]).
    retired: retired::RetiredReplicas,
    /// Attempts the command being applied ended, their records not finished yet: set only
    /// during `apply`, never stored.
    ended: Vec<accounting::Ended>,
    ledger: Ledger,
    /// The user a command being applied was made by (its `As` token's): set only during
    /// `apply`, for events and ownership, never stored.
    actor: Option<Name>,
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

impl State {
    pub fn new() -> State {
        let classes = default_classes().into_iter().map(|c| (c.name.clone(), c)).collect();
        let d = Data {
            classes,
            cohorts: BTreeMap::new(),
            queues: BTreeMap::new(),
            nodes: CowTree::new(),
            jobs: CowTree::new(),
            job_names: CowTree::new(),
            reservations: BTreeMap::new(),
            pool_reservations: BTreeMap::new(),
            scheduler: SchedulerSettings::default(),
            request_ids: CowTree::new(),
            request_order: VecDeque::new(),
            finished_order: VecDeque::new(),
            next_job_id: 1,
            next_submit_seq: 0,
            applied: 0,
            now_ms: 0,
            retain_finished: DEFAULT_RETAINED_FINISHED_JOBS,
        };
        let mut s = State {
            d,
            behaviour: crate::behaviour::BASELINE,
            access: Access::default(),
            tenancy: Tenancy::default(),
            after: Aftermath::default(),
            queue_revisions: BTreeMap::new(),
            queue_visibility: BTreeMap::new(),
            waits: Waits::new(),
            wait_index: WaitIndex::default(),
            windows: BTreeMap::new(),
            gpu_faults: GpuFaults::new(),
            arrays: Arrays::default(),
            array_index: ArrayIndex::default(),
            elastic: ElasticGangs::new(),
            restarts: Restarts::new(),
            usage: Usage::default(),
            accounting: Accounting::default(),
            rank_saves: rank_saves::RankSaves::new(),
            topology: Default::default(),
            retired: Default::default(),
            ended: Vec::new(),
            ledger: Ledger::default(),
            actor: None,
        };
        s.rebuild_ledger();
        s
    }

    /// How many finished jobs to keep (oldest pruned first).
    pub fn set_retain_finished(&mut self, n: usize) {
        self.d.retain_finished = n;
    }

    pub fn apply(&mut self, cmd: Command) -> Response {
        self.d.applied += 1;
        self.check_clock(&cmd)?;
        self.d.now_ms = self.d.now_ms.max(cmd.now_ms);
        let mut ev = Vec::new();
        let outcome = self.dispatch(cmd.op, &mut ev);
        // Also after a refusal: a command refused part way may have ended an attempt.
        self.close_records();
        // Jobs that started or ended settle who waits for them, and make room for the
        // next elements of their arrays, within the same command.
        match outcome {
            Ok(_) => {
                self.settle_waiting(&mut ev);
                self.fill_arrays(&mut ev);
            }
            Err(_) => {
                self.wait_index.forget_changed();
                self.array_index.forget_changed();
            }
        }
        let outcome = outcome?;
        // The ledger is kept up to date in place, change by change; a rebuild from the
        // replicated data must agree. Too slow for release builds (a clone and a rebuild);
        // in debug builds after every command of a small state, and every
        // `DEBUG_LEDGER_CHECK_STRIDE`th of a large one, so long simulations stay usable.
        #[cfg(debug_assertions)]
        if (self.d.jobs.len() <= DEBUG_LEDGER_CHECK_MAX_JOBS || self.d.applied % DEBUG_LEDGER_CHECK_STRIDE == 0)
            && let Err(diff) = self.ledger_consistent().and_then(|()| self.usage_consistent())
        {
            panic!("the ledger drifted from the state after a command:\n{diff}");
        }
        Ok(Applied { outcome, events: ev })
    }

    /// Refuses a stamp no real clock gives, and a Tick from behind the replicated clock (a
    /// Tick only acts on time, so one stamped earlier is stale: another leader's, delayed).
    /// Other commands from slightly behind are fine: clocks of successive leaders differ a
    /// little, and the state's clock stays where it is.
    fn check_clock(&self, cmd: &Command) -> Result<(), ApplyError> {
        if cmd.now_ms > MAX_CLOCK_MS {
            return Err(ApplyError::invalid(
                "now_ms",
                format!("{} is past the latest time a command may carry ({MAX_CLOCK_MS})", cmd.now_ms),
            ));
        }
        if matches!(cmd.op, Op::Tick) && cmd.now_ms < self.d.now_ms {
            return Err(ApplyError::invalid(
                "now_ms",
                format!(
                    "a Tick at {} is behind the replicated clock ({}); time never moves back",
                    cmd.now_ms, self.d.now_ms
                ),
            ));
        }
        Ok(())
    }

    fn dispatch(&mut self, op: Op, ev: &mut Vec<Event>) -> Result<Outcome, ApplyError> {
        self.check_identity(&op)?;
        let done = |r: Result<(), ApplyError>| r.map(|()| Outcome::Done);
        match op {
            Op::PutClass(c) => done(self.put_class(c)),
            Op::DeleteClass { name } => done(self.delete_class(&name)),
            Op::PutCohort(c) => done(self.put_cohort(c)),
            Op::DeleteCohort { name } => done(self.delete_cohort(&name)),
            Op::PutQueue(q) => done(self.put_queue(q, ev)),
            Op::DeleteQueue { name } => done(self.delete_queue(&name)),
            Op::RegisterNode(spec) => done(self.register_nodes(vec![spec], ev)),
            Op::RegisterNodes(specs) => done(self.register_nodes(specs, ev)),
            Op::SetNodeStatus { node, status } => done(self.set_node_status(&node, status, ev)),
            Op::Cordon { node, cordoned } => done(self.cordon(&node, cordoned, ev)),
            Op::Submit { spec, request_id } => self.submit(spec, request_id, Submitter::Legacy, ev),
            Op::SubmitRunAs { spec, request_id, run_as } => self.submit(spec, request_id, Submitter::RunAs(run_as), ev),
            Op::SubmitAfter { spec, request_id, run_as, after } => {
                self.submit_after(spec, request_id, run_as, after, ev)
            }
            Op::SubmitArray { spec, array, request_id, run_as, after } => {
                self.submit_array(spec, array, request_id, run_as, after, ev)
            }
            Op::CancelArray { array } => done(self.cancel_array(array, ev)),
            Op::SubmitElastic { spec, elastic, request_id, run_as, after } => {
                self.submit_elastic(spec, elastic, request_id, run_as, after, ev)
            }
            Op::CreateMaintenance(spec) => done(self.create_window(spec, ev)),
            Op::DeleteMaintenance { name } => done(self.delete_window(&name, ev)),
            Op::ReportGpu { node, gpu, fault, by_check } => {
                done(self.gpu_health(&node, gpu, fault, HealthSource::Agent { by_check }, ev))
            }
            Op::SetGpuHealth { node, gpu, fault } => {
                done(self.gpu_health(&node, gpu, fault, HealthSource::Operator, ev))
            }
            Op::Cancel { job } => done(self.cancel(job, ev)),
            Op::Pause { job } => done(self.pause(job, ev)),
            Op::Resume { job } => done(self.unpause(job, ev)),
            Op::JobExited { job, attempt, exit_code } => done(self.whole_job_exited(job, attempt, exit_code, ev)),
            Op::JobStopped { job, attempt, checkpointed } => {
                done(self.whole_job_stopped(job, attempt, checkpointed, ev))
            }
            Op::JobCheckpointed { job, attempt } => done(self.checkpointed(job, attempt)),
            Op::Report { node, observations } => self.report(&node, observations, ev),
            Op::ApplyPlan(plan) => Ok(self.apply_plan(plan, ev)),
            Op::SetScheduler(settings) => done(self.set_scheduler(settings, ev)),
            Op::Tick => done(self.tick(ev)),
            Op::As { token, op } => self.apply_as(&token, *op, ev),
            Op::AddToken { hash, spec } => done(self.add_token(hash, spec)),
            Op::RevokeToken { id } => done(self.access.revoke(&id, self.d.now_ms)),
            Op::GrantQueue { id, queue, granted } => done(self.grant_queue(&id, queue, granted)),
            Op::SetTenancy(settings) => done(self.set_tenancy(settings, ev)),
            Op::GrantQueueAdmin { id, queue, granted } => done(self.grant_queue_admin(&id, queue, granted)),
            Op::CreateQueue(q) => done(self.create_queue(q, ev)),
            Op::UpdateQueue { spec, revision } => done(self.update_queue(spec, revision, ev)),
            Op::CreateCohort(c) => done(self.create_cohort(c)),
            Op::CreateClass(c) => done(self.create_class(c)),
            Op::CreateQueueVisible { spec, visibility } => done(self.create_queue_visible(spec, visibility, ev)),
            Op::UpdateQueueVisible { spec, revision, visibility } => {
                done(self.update_queue_visible(spec, revision, visibility, ev))
            }
            Op::SetUsage(settings) => done(self.set_usage(settings)),
            Op::SetUserLimit { queue, limit } => done(self.set_user_limit(queue, limit)),
            Op::SetAccounting(settings) => done(self.set_accounting(settings)),
            Op::StartAccounting => {
                self.start_accounting();
                Ok(Outcome::Done)
            }
            // Never lowered: a raise committed twice (a leader's retry) changes nothing.
            Op::SetBehaviour(v) => {
                let was = self.behaviour;
                self.behaviour = self.behaviour.max(v);
                // The ledger holds what each job's preemption would keep, decided when it
                // was placed; behaviour 4 changes that for jobs on MIG slices, so the ledger
                // is made again as a snapshot's restore would make it.
                if was < crate::behaviour::SLICES_ARE_GPUS && self.behaviour >= crate::behaviour::SLICES_ARE_GPUS {
                    self.rebuild_ledger();
                }
                Ok(Outcome::Done)
            }
            // The raft crate hashes and compares; the state itself is unchanged.
            Op::StateDigest(_) => Ok(Outcome::Done),
            Op::SetTopologyLevels(levels) => done(self.set_topology_levels(levels)),
            Op::SetNodeDomains(nodes) => done(self.set_node_domains(nodes)),
        }
    }

    // Read access for the scheduler, the simulator and the server.

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
    pub fn classes(&self) -> &BTreeMap<Name, PriorityClass> {
        &self.d.classes
    }
    pub fn cohorts(&self) -> &BTreeMap<Name, Cohort> {
        &self.d.cohorts
    }
    pub fn queues(&self) -> &BTreeMap<Name, QueueSpec> {
        &self.d.queues
    }
    pub fn nodes(&self) -> &CowTree<Name, Node> {
        &self.d.nodes
    }
    pub fn jobs(&self) -> &CowTree<JobId, Job> {
        &self.d.jobs
    }
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.d.jobs.get(&id)
    }
    pub fn job_by_name(&self, name: &str) -> Option<&Job> {
        let name = Name::new(name).ok()?;
        self.d.job_names.get(&name).and_then(|id| self.d.jobs.get(id))
    }
    pub fn reservations(&self) -> &BTreeMap<JobId, Reservation> {
        &self.d.reservations
    }
    /// Starving jobs' reservations by pool (docs/policy.md section 9).
    pub fn pool_reservations(&self) -> &BTreeMap<Name, PoolReservation> {
        &self.d.pool_reservations
    }
    /// The pool reservation a job holds, if any.
    pub fn pool_reservation_of(&self, id: JobId) -> Option<&PoolReservation> {
        self.d.pool_reservations.values().find(|r| r.job == id)
    }
    pub fn scheduler(&self) -> &SchedulerSettings {
        &self.d.scheduler
    }
    /// Commands applied so far (a plan's `based_on`).
    pub fn applied(&self) -> u64 {
        self.d.applied
    }
    pub fn now_ms(&self) -> u64 {
        self.d.now_ms
    }
    /// The time a leader whose clock reads `clock_ms` stamps its commands with, and so plans
    /// at: never behind the replicated clock, which never goes back (a new leader's clock
    /// may trail the old one's, or have been stepped back). `apply` checks a plan's time
    /// limits and windows at its stamp, so a plan made for any other time is refused.
    pub fn stamp_ms(&self, clock_ms: u64) -> u64 {
        clock_ms.max(self.d.now_ms)
    }
    /// The apply behaviour the log has raised this state to (see `behaviour`).
    pub fn behaviour(&self) -> u32 {
        self.behaviour
    }
    /// Tokens, job owners and who may do what.
    pub fn access(&self) -> &Access {
        &self.access
    }
    /// Tenancy settings and the Unix user each job runs as.
    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }
    /// The revision of queue `name` (what `UpdateQueue` must name), `None` if there is no
    /// such queue. A queue not written since before revisions existed is at 0.
    pub fn queue_revision(&self, name: &Name) -> Option<u64> {
        self.d.queues.contains_key(name).then(|| self.queue_revisions.get(name).copied().unwrap_or(0))
    }
    /// What queue `name` shows of others' jobs (the default for a queue never set, and for
    /// one that does not exist).
    pub fn queue_visibility(&self, name: &Name) -> Visibility {
        self.queue_visibility.get(name).copied().unwrap_or_default()
    }
}

/// Only the replicated data is written, `d`, `access`, `tenancy`, `after`, the queue admin
/// grants, the queue revisions, then the queues' visibility if any queue has one set or a
/// job waits, then the waiting jobs' dependencies if any; the ledger is rebuilt when read
/// back.
impl Serialize for State {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let admins = self.access.queue_admins();
        let (d, access, tenancy, after, revisions) =
            (&self.d, &self.access, &self.tenancy, &self.after, &self.queue_revisions);
        // Format 5's layout while no queue has a visibility set: a follower of that format
        // still reads the snapshot (a visibility is set only once every member reads format 6).
        // Format 6's layout while no job waits (dependencies are submitted only once every
        // member reads format 7).
        let visibility = &self.queue_visibility;
        let (waits, windows, faults) = (&self.waits, &self.windows, &self.gpu_faults);
        let workflows = (&self.arrays, &self.elastic, &self.restarts, self.usage.stored(), &self.accounting);
        // Format 9's layout while the behaviour is the baseline (it is raised only once every
        // member reads format 10).
        // Format 10's layout while no rank's save is tallied (one is only once every member
        // reads format 11).
        // Format 11's layout while no level is declared and no node names a domain (one is
        // only once every member reads format 12).
        // Format 15's layout while no replica was removed (one is recorded only under
        // behaviour 6, which is raised once every member reads format 16).
        if !self.retired.is_empty() {
            let (behaviour, saves, topology, retired) =
                (self.behaviour, &self.rank_saves, &self.topology, &self.retired);
            (
                d, access, tenancy, after, admins, revisions, visibility, waits, windows, faults, workflows, behaviour,
                saves, topology, retired,
            )
                .serialize(s)
        } else if !self.topology.is_empty() {
            let (behaviour, saves, topology) = (self.behaviour, &self.rank_saves, &self.topology);
            (
                d, access, tenancy, after, admins, revisions, visibility, waits, windows, faults, workflows, behaviour,
                saves, topology,
            )
                .serialize(s)
        } else if !self.rank_saves.is_empty() {
            let (behaviour, saves) = (self.behaviour, &self.rank_saves);
            (
                d, access, tenancy, after, admins, revisions, visibility, waits, windows, faults, workflows, behaviour,
                saves,
            )
                .serialize(s)
        } else if self.behaviour > crate::behaviour::BASELINE {
            let behaviour = self.behaviour;
            (d, access, tenancy, after, admins, revisions, visibility, waits, windows, faults, workflows, behaviour)
                .serialize(s)
        } else if !self.arrays.is_empty()
            || !self.elastic.is_empty()
            || !self.usage.is_empty()
            || !self.accounting.is_empty()
        {
            (d, access, tenancy, after, admins, revisions, visibility, waits, windows, faults, workflows).serialize(s)
        } else if !self.gpu_faults.is_empty() {
            (d, access, tenancy, after, admins, revisions, visibility, waits, windows, &self.gpu_faults).serialize(s)
        } else if !self.windows.is_empty() {
            (d, access, tenancy, after, admins, revisions, visibility, &self.waits, &self.windows).serialize(s)
        } else if !self.waits.is_empty() {
            (d, access, tenancy, after, admins, revisions, visibility, &self.waits).serialize(s)
        } else if visibility.is_empty() {
            (d, access, tenancy, after, admins, revisions).serialize(s)
        } else {
            (d, access, tenancy, after, admins, revisions, visibility).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for State {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_tuple(STATE_PARTS, StateVisitor)
    }
}

/// Parts of a state as this build writes it with a replica removed.
const STATE_PARTS: usize = 15;

/// Reads the parts in order; the last two (the queues' visibility, the waiting jobs) may be
/// missing in a self-describing format (JSON, the simulator's), where a state with none set
/// ends before them. Binary formats ask for every part: one written without them fails
/// here and is read as [`PreWaitsState`] or [`PreVisibilityState`].
struct StateVisitor;

impl<'de> serde::de::Visitor<'de> for StateVisitor {
    type Value = State;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a state of 6 to {STATE_PARTS} parts")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<State, A::Error> {
        fn part<'de, T: Deserialize<'de>, A: serde::de::SeqAccess<'de>>(seq: &mut A, i: usize) -> Result<T, A::Error> {
            seq.next_element()?.ok_or_else(|| A::Error::invalid_length(i, &StateVisitor))
        }
        let d = part(&mut seq, 0)?;
        let access = part(&mut seq, 1)?;
        let tenancy = part(&mut seq, 2)?;
        let after = part(&mut seq, 3)?;
        let admins = part(&mut seq, 4)?;
        let revisions = part(&mut seq, 5)?;
        let visibility: BTreeMap<Name, Visibility> = seq.next_element()?.unwrap_or_default();
        let waits: Waits = seq.next_element()?.unwrap_or_default();
        let windows: BTreeMap<Name, Window> = seq.next_element()?.unwrap_or_default();
        let faults: GpuFaults = seq.next_element()?.unwrap_or_default();
        let (arrays, elastic, restarts, usage, accounting): (Arrays, ElasticGangs, Restarts, StoredUsage, Accounting) =
            seq.next_element()?.unwrap_or_default();
        let behaviour: u32 = seq.next_element()?.unwrap_or(crate::behaviour::BASELINE);
        let saves: rank_saves::RankSaves = seq.next_element()?.unwrap_or_default();
        let topology: crate::topology::ClusterTopology = seq.next_element()?.unwrap_or_default();
        let retired: retired::RetiredReplicas = seq.next_element()?.unwrap_or_default();
        let mut s = State::with_admins(d, access, tenancy, after, admins, revisions)?;
        s.restore_tail(Tail { visibility, waits, windows, faults, arrays, elastic, restarts, usage, accounting })?;
        s.behaviour = behaviour;
        s.restore_rank_saves(saves)?;
        s.restore_topology(topology)?;
        s.restore_retired(retired)?;
        Ok(s)
    }
}

/// The parts after the queue revisions, each written only while it (or a later one) holds
/// something: what an older layout lacks is empty.
#[derive(Default)]
struct Tail {
    visibility: BTreeMap<Name, Visibility>,
    waits: Waits,
    windows: BTreeMap<Name, Window>,
    faults: GpuFaults,
    arrays: Arrays,
    elastic: ElasticGangs,
    restarts: Restarts,
    usage: StoredUsage,
    accounting: Accounting,
}

impl State {
    fn restore_tail<E: serde::de::Error>(&mut self, t: Tail) -> Result<(), E> {
        self.restore_visibility(t.visibility)?;
        // The arrays before the waits: a job may wait for one.
        self.restore_arrays(t.arrays)?;
        self.restore_waits(t.waits)?;
        self.restore_windows(t.windows)?;
        self.restore_gpu_faults(t.faults)?;
        self.restore_elastic(t.elastic)?;
        self.restore_restarts(t.restarts)?;
        self.restore_usage(t.usage)?;
        self.restore_accounting(t.accounting)
    }
}

/// A state as snapshots wrote it before retired replicas (format 15's layout), and as they
/// still write it while no replica was removed. Tried when the current layout fails.
pub struct PreRetiredState(pub State);

impl<'de> Deserialize<'de> for PreRetiredState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_tuple(STATE_PARTS - 1, StateVisitor).map(PreRetiredState)
    }
}

/// A state as snapshots wrote it before topology levels (format 11's layout), and as they
/// still write it while no level is declared and no node names a domain. Tried when the
/// current layout fails.
pub struct PreTopologyState(pub State);

impl<'de> Deserialize<'de> for PreTopologyState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_tuple(STATE_PARTS - 2, StateVisitor).map(PreTopologyState)
    }
}

/// A state as snapshots wrote it before the ranks' saves were tallied (format 10's layout),
/// and as they still write it while none is. Tried when the current layout fails.
pub struct PreRankSavesState(pub State);

impl<'de> Deserialize<'de> for PreRankSavesState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_tuple(STATE_PARTS - 3, StateVisitor).map(PreRankSavesState)
    }
}

/// A state as snapshots wrote it before behaviour versions (format 9's layout), and as they
/// still write it at the baseline behaviour. Tried when the current layout fails.
pub struct PreBehaviourState(pub State);

impl<'de> Deserialize<'de> for PreBehaviourState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_tuple(STATE_PARTS - 4, StateVisitor).map(PreBehaviourState)
    }
}

/// A state as snapshots wrote it before arrays, and as they still write it while there is
/// none (with an unhealthy GPU). Tried when the current layout fails.
pub struct PreArraysState(pub State);

impl<'de> Deserialize<'de> for PreArraysState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        type Parts = (
            Data,
            Access,
            Tenancy,
            Aftermath,
            QueueAdmins,
            BTreeMap<Name, u64>,
            BTreeMap<Name, Visibility>,
            Waits,
            BTreeMap<Name, Window>,
            GpuFaults,
        );
        let (d, access, tenancy, after, admins, revisions, visibility, waits, windows, faults) =
            Parts::deserialize(de)?;
        let mut s = State::with_admins(d, access, tenancy, after, admins, revisions)?;
        s.restore_tail(Tail { visibility, waits, windows, faults, ..Tail::default() })?;
        Ok(PreArraysState(s))
    }
}

/// A state as snapshots wrote it before unhealthy GPUs were recorded, and as they still
/// write it while there is none (with a maintenance window). Tried when the current layout
/// fails.
pub struct PreGpuFaultsState(pub State);

impl<'de> Deserialize<'de> for PreGpuFaultsState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        type Parts = (
            Data,
            Access,
            Tenancy,
            Aftermath,
            QueueAdmins,
            BTreeMap<Name, u64>,
            BTreeMap<Name, Visibility>,
            Waits,
            BTreeMap<Name, Window>,
        );
        let (d, access, tenancy, after, admins, revisions, visibility, waits, windows) = Parts::deserialize(de)?;
        let mut s = State::with_admins(d, access, tenancy, after, admins, revisions)?;
        s.restore_tail(Tail { visibility, waits, windows, ..Tail::default() })?;
        Ok(PreGpuFaultsState(s))
    }
}

/// A state as snapshots wrote it before maintenance windows, and as they still write it
/// while there is none (with a job waiting). Tried when the current layout fails.
pub struct PreWindowsState(pub State);

impl<'de> Deserialize<'de> for PreWindowsState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        type Parts =
            (Data, Access, Tenancy, Aftermath, QueueAdmins, BTreeMap<Name, u64>, BTreeMap<Name, Visibility>, Waits);
        let (d, access, tenancy, after, admins, revisions, visibility, waits) = Parts::deserialize(de)?;
        let mut s = State::with_admins(d, access, tenancy, after, admins, revisions)?;
        s.restore_tail(Tail { visibility, waits, ..Tail::default() })?;
        Ok(PreWindowsState(s))
    }
}

/// A state as snapshots wrote it before jobs could wait for others, and as they still write
/// it while none waits (with a queue's visibility set). Tried when the current layout fails.
pub struct PreWaitsState(pub State);

impl<'de> Deserialize<'de> for PreWaitsState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        type Parts = (Data, Access, Tenancy, Aftermath, QueueAdmins, BTreeMap<Name, u64>, BTreeMap<Name, Visibility>);
        let (d, access, tenancy, after, admins, revisions, visibility) = Parts::deserialize(de)?;
        let mut s = State::with_admins(d, access, tenancy, after, admins, revisions)?;
        s.restore_tail(Tail { visibility, ..Tail::default() })?;
        Ok(PreWaitsState(s))
    }
}

/// A state as snapshots wrote it before queues had a visibility, and as they still write it
/// while no queue has one set: every queue shows others' jobs as before
/// (`Visibility::All`). Tried when the current layout fails.
pub struct PreVisibilityState(pub State);

impl<'de> Deserialize<'de> for PreVisibilityState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let (d, access, tenancy, after, admins, revisions) =
            <(Data, Access, Tenancy, Aftermath, QueueAdmins, BTreeMap<Name, u64>)>::deserialize(de)?;
        State::with_admins(d, access, tenancy, after, admins, revisions).map(PreVisibilityState)
    }
}

impl State {
    fn with_admins<E: serde::de::Error>(
        d: Data,
        mut access: Access,
        tenancy: Tenancy,
        after: Aftermath,
        admins: QueueAdmins,
        revisions: BTreeMap<Name, u64>,
    ) -> Result<State, E> {
        access.restore_queue_admins(admins).map_err(|e| E::custom(format!("inconsistent state: {e}")))?;
        State::from_parts(d, access, tenancy, after, revisions)
    }

    fn restore_visibility<E: serde::de::Error>(&mut self, v: BTreeMap<Name, Visibility>) -> Result<(), E> {
        if let Some(name) = v.keys().find(|q| !self.d.queues.contains_key(*q)) {
            return Err(E::custom(format!("inconsistent state: a visibility for queue {name}, which does not exist")));
        }
        self.queue_visibility = v;
        Ok(())
    }

    /// Every held job (or array) exists and is unfinished, and every job it waits for exists.
    fn restore_waits<E: serde::de::Error>(&mut self, waits: Waits) -> Result<(), E> {
        for (id, list) in &waits {
            let held = self.d.jobs.get(id).is_some_and(|j| !j.state.is_finished())
                || self.array(*id).is_some_and(|a| !a.is_finished());
            if !held || list.is_empty() {
                return Err(E::custom(format!("inconsistent state: job {id} waits, but is not a held job")));
            }
            if let Some(w) = list.iter().find(|w| !self.d.jobs.contains_key(&w.job) && !self.is_array(w.job)) {
                return Err(E::custom(format!(
                    "inconsistent state: job {id} waits for job {}, which is not kept",
                    w.job
                )));
            }
        }
        self.wait_index = WaitIndex::of(&waits);
        self.waits = waits;
        Ok(())
    }

    /// Every window's nodes exist; a started window's nodes leave the capacity (a rebuild).
    fn restore_windows<E: serde::de::Error>(&mut self, windows: BTreeMap<Name, Window>) -> Result<(), E> {
        for w in windows.values() {
            if let Some(n) = w.spec.nodes.iter().find(|n| !self.d.nodes.contains_key(*n)) {
                let name = &w.spec.name;
                return Err(E::custom(format!(
                    "inconsistent state: window {name} holds node {n}, which does not exist"
                )));
            }
        }
        let started = windows.values().any(|w| w.active);
        self.windows = windows;
        if started {
            self.rebuild_ledger();
        }
        Ok(())
    }

    /// Every unhealthy GPU's node exists; they leave the capacity (a rebuild).
    fn restore_gpu_faults<E: serde::de::Error>(&mut self, faults: GpuFaults) -> Result<(), E> {
        if let Some(n) = faults.keys().find(|n| !self.d.nodes.contains_key(*n)) {
            return Err(E::custom(format!("inconsistent state: an unhealthy GPU of node {n}, which does not exist")));
        }
        if faults.is_empty() {
            return Ok(());
        }
        self.gpu_faults = faults;
        self.rebuild_ledger();
        Ok(())
    }
}

/// A state as snapshots before the completing state, queue admins and queue revisions wrote
/// it: `(d, access, tenancy)`. Read like [`PreTenancyState`]: nothing is completing (those
/// builds freed a job's shares as its attempt ended), no token administers a queue, and
/// every queue is at revision 0 (its next write moves it on). (The three parts came in one
/// release, so no snapshot holds some of them without the others.)
pub struct PreCompletingState(pub State);

impl<'de> Deserialize<'de> for PreCompletingState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let (d, access, tenancy) = <(Data, Access, Tenancy)>::deserialize(de)?;
        State::from_parts(d, access, tenancy, Aftermath::default(), BTreeMap::new()).map(PreCompletingState)
    }
}

/// A state as snapshots before tenancy wrote it: the data and the identity part. Read like
/// [`PreAccessState`]: tried when the current layout fails; gives default settings and no
/// job a Unix user (such jobs run only on agents with `--run-as-self`).
pub struct PreTenancyState(pub State);

impl<'de> Deserialize<'de> for PreTenancyState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let (d, access) = <(Data, Access)>::deserialize(de)?;
        State::from_parts(d, access, Tenancy::default(), Aftermath::default(), BTreeMap::new()).map(PreTenancyState)
    }
}

/// A state as snapshots before tokens wrote it: the data alone. Binary formats carry no
/// field names, so a missing trailing part cannot be defaulted while decoding a `State`;
/// a reader that fails to decode a `State` tries this, which gives the same state with no
/// tokens (an open cluster, as it was).
pub struct PreAccessState(pub State);

impl<'de> Deserialize<'de> for PreAccessState {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let d = Data::deserialize(de)?;
        State::from_parts(d, Access::default(), Tenancy::default(), Aftermath::default(), BTreeMap::new())
            .map(PreAccessState)
    }
}

impl State {
    fn from_parts<E: serde::de::Error>(
        d: Data,
        mut access: Access,
        tenancy: Tenancy,
        after: Aftermath,
        queue_revisions: BTreeMap<Name, u64>,
    ) -> Result<State, E> {
        access.rebuild_request_counts();
        d.check().map_err(|e| E::custom(format!("inconsistent state: {e}")))?;
        d.check_completing(&after.completing).map_err(|e| E::custom(format!("inconsistent state: {e}")))?;
        if let Some(name) = queue_revisions.keys().find(|q| !d.queues.contains_key(*q)) {
            return Err(E::custom(format!("inconsistent state: a revision for queue {name}, which does not exist")));
        }
        let mut s = State {
            d,
            behaviour: crate::behaviour::BASELINE,
            access,
            tenancy,
            after,
            queue_revisions,
            queue_visibility: BTreeMap::new(),
            waits: Waits::new(),
            wait_index: WaitIndex::default(),
            windows: BTreeMap::new(),
            gpu_faults: GpuFaults::new(),
            arrays: Arrays::default(),
            array_index: ArrayIndex::default(),
            elastic: ElasticGangs::new(),
            restarts: Restarts::new(),
            usage: Usage::default(),
            accounting: Accounting::default(),
            rank_saves: rank_saves::RankSaves::new(),
            topology: Default::default(),
            retired: Default::default(),
            ended: Vec::new(),
            ledger: Ledger::default(),
            actor: None,
        };
        s.rebuild_ledger();
        Ok(s)
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        // Compare what is replicated; the ledger follows from it.
        self.d == other.d
            && self.behaviour == other.behaviour
            && self.access == other.access
            && self.tenancy == other.tenancy
            && self.after == other.after
            && self.queue_revisions == other.queue_revisions
            && self.queue_visibility == other.queue_visibility
            && self.waits == other.waits
            && self.windows == other.windows
            && self.gpu_faults == other.gpu_faults
            && self.arrays == other.arrays
            && self.elastic == other.elastic
            && self.restarts == other.restarts
            && self.accounting == other.accounting
            && self.rank_saves == other.rank_saves
            && self.topology == other.topology
            && self.retired == other.retired
    }
}
