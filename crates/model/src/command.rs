//! Commands replicated through the log, and what applying one returns.
//!
//! The leader stamps the time into every command: `apply` never reads a clock, so every
//! replica computes the same state from the same log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::access::{TokenHash, TokenSpec};
use crate::after::After;
use crate::array::ArraySpec;
use crate::class::PriorityClass;
use crate::error::ApplyError;
use crate::event::Event;
use crate::job::{JobId, JobSpec};
use crate::maintenance::WindowSpec;
use crate::name::Name;
use crate::node::{NodeSpec, NodeStatus};
use crate::plan::Plan;
use crate::queue::{Cohort, QueueSpec, Visibility};
use crate::rejection::Rejection;
use crate::resources::Resources;
use crate::scheduler::SchedulerSettings;
use crate::tenancy::{TenancySettings, UnixUser};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Wall-clock time the leader stamped, in milliseconds since the Unix epoch (virtual
    /// time in the simulator).
    pub now_ms: u64,
    pub op: Op,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Create or replace a priority class.
    PutClass(PriorityClass),
    DeleteClass {
        name: Name,
    },
    /// Create or replace a cohort.
    PutCohort(Cohort),
    DeleteCohort {
        name: Name,
    },
    /// Create or replace a queue.
    PutQueue(QueueSpec),
    DeleteQueue {
        name: Name,
    },
    /// An agent registers its node (or re-registers with new facts).
    RegisterNode(NodeSpec),
    /// Several nodes at once (bringing a cluster up); all or none.
    RegisterNodes(Vec<NodeSpec>),
    /// Ready -> Lost (its jobs are requeued) or Lost -> Ready.
    SetNodeStatus {
        node: Name,
        status: NodeStatus,
    },
    Cordon {
        node: Name,
        cordoned: bool,
    },
    /// Submit a job; a retried submit with the same request id returns the first job.
    Submit {
        spec: JobSpec,
        request_id: Option<String>,
    },
    /// Cancel, pause and resume name the job by id, resolved once by the client: a retried
    /// command never reaches a newer job that reused the name.
    Cancel {
        job: JobId,
    },
    /// Checkpoint a running job and hold it until `Resume`.
    Pause {
        job: JobId,
    },
    /// A person resumes a paused job (`baton resume`): it goes back to the queue and starts
    /// from its checkpoint when placed (event `Unpaused`). Not a suspended job's resume in
    /// place, which is the scheduler's `Decision::ResumeInPlace` (event `Resumed`).
    Resume {
        job: JobId,
    },
    /// An agent saw the job's process exit on its own.
    JobExited {
        job: JobId,
        attempt: u32,
        exit_code: i32,
    },
    /// An agent stopped the job after its checkpoint signal (or killed it after grace), or
    /// suspended it (mode suspend).
    JobStopped {
        job: JobId,
        attempt: u32,
        checkpointed: bool,
    },
    /// An agent reports a checkpoint written while the job keeps running.
    JobCheckpointed {
        job: JobId,
        attempt: u32,
    },
    /// One agent report: what `node`'s replicas did, per rank, applied as one command. Each
    /// observation is checked against the placement (the attempt runs that rank on that
    /// node); the gang rules (rank 0's exit ends the job, a stop completes when every rank
    /// has stopped or exited 0) are applied here, so they survive a failover.
    Report {
        node: Name,
        observations: Vec<Observed>,
    },
    ApplyPlan(Plan),
    /// Changes the scheduler's settings (docs/policy.md section 9's `reserve_after`).
    SetScheduler(SchedulerSettings),
    /// Time passes: reservations whose victims outlived every bound are dropped.
    Tick,
    // The identity operations come last, so logs written before them decode.
    /// A client command made with a token: applied only if the token is live and allows it
    /// at this point of the log; its events name the token's user. Once a cluster has
    /// tokens, every client command must come wrapped in one.
    As {
        token: TokenHash,
        op: Box<Op>,
    },
    /// A new token (only its hash). Without `As`, only while the cluster has no token yet:
    /// that is how its first admin is bootstrapped.
    AddToken {
        hash: TokenHash,
        spec: TokenSpec,
    },
    /// Revokes a token by its id ([`crate::access::token_id`]); every replica refuses it
    /// from this log index on.
    RevokeToken {
        id: String,
    },
    /// Grants a token's user a queue, or takes the grant back.
    GrantQueue {
        id: String,
        queue: Name,
        granted: bool,
    },
    // The tenancy operations come after the identity ones, so logs written before them decode.
    /// Submit naming the Unix user the job runs as (`None`: the token's user). Checked
    /// against `allow_root_jobs` and the per-user and per-queue bounds. The API submits
    /// only this; `Submit` (logs written before it, the simulator) applies as it always did.
    SubmitRunAs {
        spec: JobSpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
    },
    /// Changes the cluster's tenancy settings (admins only).
    SetTenancy(TenancySettings),
    // After the tenancy operations, so logs written before it decode.
    /// Makes a token's user an admin of a queue (its jobs' private data; cancel, pause and
    /// resume of any of its jobs), or takes that back. Admins only.
    GrantQueueAdmin {
        id: String,
        queue: Name,
        granted: bool,
    },
    // The compare-and-set queue writes come last, so logs written before them decode.
    /// Create a queue; refused (`Exists`) if one of that name is there, so of two creates
    /// of one name exactly one lands.
    CreateQueue(QueueSpec),
    /// Replace a queue only if it is still at `revision`, the one the writer read
    /// ([`crate::State::queue_revision`]); refused (`Conflict`, naming both) otherwise, so a
    /// change made between the read and this write is never silently undone.
    UpdateQueue {
        spec: QueueSpec,
        revision: u64,
    },
    // The create-if-absent writes of cohorts and classes come last, so logs written before
    // them decode.
    /// Create a cohort; refused (`Exists`) if one of that name is there, so of two creates
    /// of one name exactly one lands.
    CreateCohort(Cohort),
    /// Create a priority class; refused (`Exists`) if one of that name is there.
    CreateClass(PriorityClass),
    // The queue writes that set who sees others' jobs come last, so logs written before
    // them decode. `CreateQueue` and `UpdateQueue` leave the visibility as it is (a new
    // queue's is `Visibility::All`); these set it in the same command as the rest.
    /// `CreateQueue`, with the queue's visibility.
    CreateQueueVisible {
        spec: QueueSpec,
        visibility: Visibility,
    },
    /// `UpdateQueue`, with the queue's visibility.
    UpdateQueueVisible {
        spec: QueueSpec,
        revision: u64,
        visibility: Visibility,
    },
    // After the visibility writes, so logs written before it decode.
    /// `SubmitRunAs` of a job that waits for others (decisions.md section 13): each named
    /// job must exist when this applies; the job is held until every dependency holds, and
    /// cancelled once one no longer can.
    SubmitAfter {
        spec: JobSpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
        after: Vec<After>,
    },
    /// A maintenance window (decisions.md section 14); refused (`Exists`) if one of that
    /// name is there. Operators and admins.
    CreateMaintenance(WindowSpec),
    /// Forgets a window; one that started gives its nodes back at once.
    DeleteMaintenance {
        name: Name,
    },
    // After the maintenance writes, so logs written before them decode.
    /// An agent's word on one of its node's GPUs (decisions.md section 14): `fault` names
    /// the error it found (through NVML, or its health check when `by_check`); `None` says
    /// the health check passed, which clears only a fault the check found.
    ReportGpu {
        node: Name,
        gpu: u32,
        fault: Option<String>,
        by_check: bool,
    },
    /// An operator marks a GPU unhealthy (`fault`) or healthy again (`None`).
    SetGpuHealth {
        node: Name,
        gpu: u32,
        fault: Option<String>,
    },
    // After the GPU health writes, so logs written before them decode.
    /// A job array (decisions.md section 13): one record; its elements `NAME-i` are created
    /// as jobs as they come within reach of running. Checked as `SubmitAfter`, and for the
    /// elements' names and environment.
    SubmitArray {
        spec: JobSpec,
        array: ArraySpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
        after: Vec<After>,
    },
    /// Cancels every unfinished element of an array; no other is created.
    CancelArray {
        array: JobId,
    },
    /// Submits an elastic gang (decisions.md section 13): task group `elastic.task` runs
    /// with as many replicas as fit, down to `elastic.min_replicas`. Checked as `SubmitAfter`.
    SubmitElastic {
        spec: JobSpec,
        elastic: crate::elastic::ElasticSpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
        after: Vec<After>,
    },
    /// Usage over time (decisions.md section 12): its half-life and its weights.
    SetUsage(crate::usage::UsageSettings),
    /// `max_per_user` of a queue (decisions.md section 12): resources one user's jobs in it
    /// may hold at once; empty removes the limit.
    SetUserLimit {
        queue: Name,
        limit: Resources,
    },
    /// Accounting's settings (issue 34): how long each replica keeps its records.
    SetAccounting(crate::accounting::AccountingSettings),
    /// Accounting on with its defaults, unless it is on: the leader's own command, written
    /// once every member reads the format that carries records (see `accounting`).
    StartAccounting,
    /// Raises the state's behaviour version to this one (never lowers it): the leader's own
    /// command, written once every member applies it (see `behaviour`).
    SetBehaviour(u32),
    /// A state digest mark (see `digest`): every replica hashes its state right after this
    /// entry; the leader's hash of the previous mark rides along, and a replica whose own
    /// hash of it differs stops. Changes nothing in the state. The leader's own command.
    StateDigest(Option<crate::digest::DigestAt>),
    /// The cluster's topology levels above the node, lowest first (decisions.md section
    /// 10); empty: the default `[rack]`.
    SetTopologyLevels(Vec<crate::topology::LevelName>),
    /// Nodes' domains at each declared level other than the rack (a node's rack is its
    /// registration's); an empty map forgets a node's. At most `MAX_NODES_PER_COMMAND`.
    SetNodeDomains(Vec<(Name, BTreeMap<crate::topology::LevelName, Name>)>),
}

impl Op {
    /// Operations only the leader issues, from its own clock and its own view of the
    /// cluster: plans, time passing, node liveness, the agents' registrations and reports
    /// (its gateway alone takes them), and the agent-era job reports that `Report` replaced. A replica refuses them when they arrive forwarded: no client or
    /// agent request produces one, so a forwarded one is forged.
    pub fn leader_only(&self) -> bool {
        // Every variant named (no wildcard): a new one cannot be added without deciding.
        match self {
            Op::As { op, .. } => op.leader_only(),
            Op::ApplyPlan(_)
            | Op::Tick
            | Op::StartAccounting
            | Op::SetBehaviour(_)
            | Op::StateDigest(_)
            | Op::SetNodeStatus { .. }
            | Op::RegisterNodes(_) => true,
            // What agents say of their nodes and their replicas: the leader's gateway
            // writes these from an agent whose certificate names the node, never another
            // replica; forwarded, one would forge any node's exits or shape.
            Op::RegisterNode(_)
            | Op::Report { .. }
            | Op::ReportGpu { .. }
            | Op::JobExited { .. }
            | Op::JobStopped { .. }
            | Op::JobCheckpointed { .. } => true,
            Op::PutClass(_)
            | Op::DeleteClass { .. }
            | Op::PutCohort(_)
            | Op::DeleteCohort { .. }
            | Op::PutQueue(_)
            | Op::DeleteQueue { .. }
            | Op::Cordon { .. }
            | Op::Submit { .. }
            | Op::Cancel { .. }
            | Op::Pause { .. }
            | Op::Resume { .. }
            | Op::SetScheduler(_)
            | Op::AddToken { .. }
            | Op::RevokeToken { .. }
            | Op::GrantQueue { .. }
            | Op::SubmitRunAs { .. }
            | Op::SubmitAfter { .. }
            | Op::SubmitElastic { .. }
            | Op::SubmitArray { .. }
            | Op::CancelArray { .. }
            | Op::CreateMaintenance(_)
            | Op::DeleteMaintenance { .. }
            | Op::SetGpuHealth { .. }
            | Op::SetTenancy(_)
            | Op::GrantQueueAdmin { .. }
            | Op::CreateQueue(_)
            | Op::UpdateQueue { .. }
            | Op::CreateCohort(_)
            | Op::CreateClass(_)
            | Op::CreateQueueVisible { .. }
            | Op::UpdateQueueVisible { .. }
            | Op::SetUsage(_)
            | Op::SetUserLimit { .. }
            | Op::SetAccounting(_)
            | Op::SetTopologyLevels(_)
            | Op::SetNodeDomains(_) => false,
        }
    }

    /// Commands a client (a person or a script) makes through the API, which need a token
    /// once the cluster has any. The others come from agents (their node's facts and
    /// reports, proven by certificate, not by token) or from the leader itself.
    pub fn from_client(&self) -> bool {
        // Every variant named (no wildcard): a new one cannot be added without deciding.
        match self {
            Op::PutClass(_)
            | Op::DeleteClass { .. }
            | Op::PutCohort(_)
            | Op::DeleteCohort { .. }
            | Op::PutQueue(_)
            | Op::DeleteQueue { .. }
            | Op::Cordon { .. }
            | Op::Submit { .. }
            | Op::Cancel { .. }
            | Op::Pause { .. }
            | Op::Resume { .. }
            | Op::SetScheduler(_)
            | Op::AddToken { .. }
            | Op::RevokeToken { .. }
            | Op::GrantQueue { .. }
            | Op::SubmitRunAs { .. }
            | Op::SubmitAfter { .. }
            | Op::SubmitArray { .. }
            | Op::CancelArray { .. }
            | Op::SubmitElastic { .. }
            | Op::CreateMaintenance(_)
            | Op::DeleteMaintenance { .. }
            | Op::SetGpuHealth { .. }
            | Op::SetTenancy(_)
            | Op::GrantQueueAdmin { .. }
            | Op::CreateQueue(_)
            | Op::UpdateQueue { .. }
            | Op::CreateCohort(_)
            | Op::CreateClass(_)
            | Op::CreateQueueVisible { .. }
            | Op::UpdateQueueVisible { .. }
            | Op::SetUsage(_)
            | Op::SetUserLimit { .. }
            | Op::SetAccounting(_)
            | Op::SetTopologyLevels(_)
            | Op::SetNodeDomains(_) => true,
            Op::RegisterNode(_)
            | Op::RegisterNodes(_)
            | Op::SetNodeStatus { .. }
            | Op::JobExited { .. }
            | Op::JobStopped { .. }
            | Op::JobCheckpointed { .. }
            | Op::Report { .. }
            | Op::ApplyPlan(_)
            | Op::Tick
            | Op::As { .. }
            | Op::ReportGpu { .. }
            | Op::StartAccounting
            | Op::SetBehaviour(_)
            | Op::StateDigest(_) => false,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Op::PutClass(_) => "PutClass",
            Op::DeleteClass { .. } => "DeleteClass",
            Op::PutCohort(_) => "PutCohort",
            Op::DeleteCohort { .. } => "DeleteCohort",
            Op::PutQueue(_) => "PutQueue",
            Op::DeleteQueue { .. } => "DeleteQueue",
            Op::RegisterNode(_) => "RegisterNode",
            Op::RegisterNodes(_) => "RegisterNodes",
            Op::SetNodeStatus { .. } => "SetNodeStatus",
            Op::Cordon { .. } => "Cordon",
            Op::Submit { .. } => "Submit",
            Op::Cancel { .. } => "Cancel",
            Op::Pause { .. } => "Pause",
            Op::Resume { .. } => "Resume",
            Op::JobExited { .. } => "JobExited",
            Op::JobStopped { .. } => "JobStopped",
            Op::JobCheckpointed { .. } => "JobCheckpointed",
            Op::Report { .. } => "Report",
            Op::ApplyPlan(_) => "ApplyPlan",
            Op::SetScheduler(_) => "SetScheduler",
            Op::Tick => "Tick",
            Op::As { .. } => "As",
            Op::AddToken { .. } => "AddToken",
            Op::RevokeToken { .. } => "RevokeToken",
            Op::GrantQueue { .. } => "GrantQueue",
            Op::SubmitRunAs { .. } | Op::SubmitAfter { .. } | Op::SubmitElastic { .. } => "Submit",
            Op::SubmitArray { .. } => "SubmitArray",
            Op::CancelArray { .. } => "CancelArray",
            Op::CreateMaintenance(_) => "CreateMaintenance",
            Op::DeleteMaintenance { .. } => "DeleteMaintenance",
            Op::ReportGpu { .. } => "ReportGpu",
            Op::SetGpuHealth { .. } => "SetGpuHealth",
            Op::SetTenancy(_) => "SetTenancy",
            Op::GrantQueueAdmin { .. } => "GrantQueueAdmin",
            Op::CreateQueue(_) => "CreateQueue",
            Op::UpdateQueue { .. } => "UpdateQueue",
            Op::CreateCohort(_) => "CreateCohort",
            Op::CreateClass(_) => "CreateClass",
            Op::CreateQueueVisible { .. } => "CreateQueueVisible",
            Op::UpdateQueueVisible { .. } => "UpdateQueueVisible",
            Op::SetUsage(_) => "SetUsage",
            Op::SetUserLimit { .. } => "SetUserLimit",
            Op::SetAccounting(_) => "SetAccounting",
            Op::StartAccounting => "StartAccounting",
            Op::SetBehaviour(_) => "SetBehaviour",
            Op::StateDigest(_) => "StateDigest",
            Op::SetTopologyLevels(_) => "SetTopologyLevels",
            Op::SetNodeDomains(_) => "SetNodeDomains",
        }
    }
}

/// What an agent saw one rank of a job attempt do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Observed {
    /// The rank's process exited on its own.
    Exited { job: JobId, attempt: u32, rank: u32, exit_code: i32 },
    /// The rank stopped after a STOP or SUSPEND (or its lease ran out).
    Stopped { job: JobId, attempt: u32, rank: u32, checkpointed: bool },
    /// The job wrote a checkpoint while it keeps running.
    Checkpointed { job: JobId, attempt: u32 },
    /// The rank's processes survived SIGKILL: the node takes no new work until a person
    /// fixes it. Accepted for any attempt of a known job (the process is real either way).
    Unkillable { job: JobId, attempt: u32, rank: u32, reason: String },
    /// The agent runs this rank although the leader's directive does not place it there (it
    /// is told to stop it): recorded as an event on the job, nothing else changes.
    Stray { job: JobId, attempt: u32, rank: u32 },
    /// The agent listed this rank as running, then stopped listing it for `missing_ms`
    /// without reporting an exit: the job goes back to the queue from its last checkpoint.
    Vanished { job: JobId, attempt: u32, rank: u32, missing_ms: u64 },
    /// The rank's agent stopped it because its lease ran out (the agent, or the replica's
    /// watchdog when the agent was stalled): the node was cut off from the leader for a
    /// lease. A running job goes back to the queue from its checkpoint; for a stop in
    /// progress it counts as the rank's stop. (Last, so logs written before it decode.)
    LeaseExpired { job: JobId, attempt: u32, rank: u32, checkpointed: bool },
    /// The rank could not be started (its user is not allowed on the node, its command
    /// could not be run): the job fails as for `Exited`, and its event says why. (Last, so
    /// logs written before it decode.)
    NotStarted { job: JobId, attempt: u32, rank: u32, exit_code: i32, reason: String },
    /// As `LeaseExpired` (which `checkpointed` means the same as: the whole job has a
    /// checkpoint, by what the leader knows), and whether this rank's own stop saved its
    /// work (`rank_saved`). The model remembers each rank's own save, so that the other
    /// ranks' stops, reported later, can complete a checkpoint of the whole gang; with
    /// `LeaseExpired` a rank whose gang was not known to be saved yet was remembered as not
    /// saved, and its next attempt started from zero although every rank had saved its work.
    /// (Last, so logs written before it decode.)
    LeaseStopped { job: JobId, attempt: u32, rank: u32, checkpointed: bool, rank_saved: bool },
    /// The rank ended on its node without its own exit, and its agent was then asked to run
    /// that attempt again, which it never does: it killed the rank as no longer wanted (a
    /// directive, e.g. from a leader whose state lagged, did not place it there), stopped
    /// it, or finished it and forgot how. Killing reports nothing, so without this a leader
    /// that caught up would hold the job Running with no process for good. A running job
    /// goes back to the queue from its checkpoint (not its failure); in a stop in progress
    /// it is that rank's stop, saved as `rank_saved` says. (Last, so older logs decode.)
    KilledHere { job: JobId, attempt: u32, rank: u32, rank_saved: bool },
    /// A SUSPEND took effect: the rank is stopped in place. It names its preemption, as the
    /// directive carried it: the preemptor `by` and the replicated time the preemption was
    /// decided (`Stopping::requested_ms`). An answer to an earlier suspension (resent late,
    /// after the job was resumed in place and is being suspended again) is refused, where
    /// as `Stopped` it counted for the new one while the rank might run. (Last, so older
    /// logs decode.)
    Suspended { job: JobId, attempt: u32, rank: u32, by: JobId, requested_ms: u64 },
    /// This rank of the attempt saved its work while the job keeps running. The job has a
    /// checkpoint once every rank of the attempt has saved since its last complete one:
    /// the state keeps that tally (`State::rank_saves`), so a new leader has it too. Before
    /// format 11 the leader kept it in memory and sent `Checkpointed` when it completed; a
    /// failover lost it. (Last, so older logs decode.)
    RankCheckpointed { job: JobId, attempt: u32, rank: u32 },
    /// Its agent did not start the rank: an agent records a start in its journal before it
    /// starts anything, and the journal takes no writes (a failing or full disk; `reason`
    /// says what). Nothing ran. The job goes back to the queue, from its checkpoint (not its
    /// failure), and the node takes no new work until a person clears it (`uncordon`): every
    /// start there is refused the same way while the journal fails, and a node that takes
    /// placements it never starts draws the queue to it. Before it, the leader held such a
    /// job Running with no process, and kept placing work there. (Last, so older logs
    /// decode.)
    Unrecorded { job: JobId, attempt: u32, rank: u32, reason: String },
}

impl Observed {
    pub fn job(&self) -> JobId {
        match self {
            Observed::Exited { job, .. }
            | Observed::Stopped { job, .. }
            | Observed::Checkpointed { job, .. }
            | Observed::Unkillable { job, .. }
            | Observed::Stray { job, .. }
            | Observed::Vanished { job, .. }
            | Observed::LeaseExpired { job, .. }
            | Observed::NotStarted { job, .. }
            | Observed::LeaseStopped { job, .. }
            | Observed::KilledHere { job, .. }
            | Observed::Suspended { job, .. }
            | Observed::RankCheckpointed { job, .. }
            | Observed::Unrecorded { job, .. } => *job,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    Submitted {
        job: JobId,
        name: Name,
        /// The request id was seen before; nothing new was created.
        duplicate: bool,
    },
    PlanApplied {
        accepted: u32,
        /// Index of each rejected decision and why.
        rejected: Vec<(u32, Rejection)>,
        /// Commands applied between the state the plan was computed from (`based_on`) and
        /// this one: how stale it was, which is why decisions get refused.
        stale_by: u64,
    },
    /// A report was applied; each observation it ignored (stale or not placed on the
    /// reporting node), by index, and why.
    Reported {
        ignored: Vec<(u32, String)>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub outcome: Outcome,
    pub events: Vec<Event>,
}

/// What `State::apply` returns. An error changes nothing.
pub type Response = Result<Applied, ApplyError>;
