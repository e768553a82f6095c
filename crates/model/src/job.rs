//! Jobs: what a user submits (`JobSpec`) and what the cluster knows of it (`Job`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alloc::{Lend, ReplicaAlloc};
use crate::event::Event;
use crate::name::Name;
use crate::resources::Resources;

/// Assigned by the state machine in submission order; never reused.
pub type JobId = u64;

/// A job's priority: a class name, or an integer (then the job is preemptible).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PriorityRef {
    Class(Name),
    Value(i32),
}

/// A group of identical replicas. A replica never spans nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub name: Name,
    pub replicas: u32,
    pub resources: Resources,
    /// Narrows the job's pools for this task; `None`: the job's pools.
    pub pools: Option<Vec<Name>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Topology {
    /// The whole gang on one node.
    Node,
    /// The whole gang in one rack.
    Rack,
    /// Levels of the cluster's topology (decisions.md section 10) beyond the two above;
    /// `LevelNeed::new` keeps `required: node|rack` alone as `Node` or `Rack`, so a job
    /// written with the shorthand encodes as before.
    Levels(crate::topology::LevelNeed),
}

/// What happens to a job when it is preempted (docs/policy.md section 7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreemptionMode {
    /// Checkpoint, stop, and go back to the queue; resume from the checkpoint.
    #[default]
    Checkpoint,
    /// Stop and go back to the queue; start over.
    Requeue,
    /// Stop for good.
    Cancel,
    /// SIGSTOP in place; SIGCONT on the same resources when the preemptor is gone.
    Suspend,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: Name,
    pub queue: Name,
    pub priority: PriorityRef,
    pub tasks: Vec<TaskSpec>,
    /// Allowed pools in preference order; `None`: any pool.
    pub pools: Option<Vec<Name>>,
    pub topology: Option<Topology>,
    pub preemption_mode: PreemptionMode,
    /// Time a victim gets to checkpoint after its signal before it is killed.
    pub grace_ms: u64,
    /// After each start, the job cannot be preempted for this long (anti-thrash).
    pub min_runtime_ms: u64,
    /// Longest one attempt may run (docs/policy.md section 9): counted from its last start or
    /// resume in place, then it is stopped like a victim and ends Failed. `None`: no limit.
    pub time_limit_ms: Option<u64>,
    /// What an agent runs; empty in the simulator.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Signal asking the job to checkpoint and exit (default [`DEFAULT_CHECKPOINT_SIGNAL`]).
    pub checkpoint_signal: Option<String>,
}

/// The signal that asks a job to checkpoint when its spec names none.
pub const DEFAULT_CHECKPOINT_SIGNAL: &str = "SIGTERM";

impl JobSpec {
    /// What a preemption does to this job: its mode, except that a job using GPUs is never
    /// suspended in place. A SIGSTOPped CUDA process keeps its GPU memory, so its GPUs could
    /// not go to the preemptor; such a job is checkpointed and stopped instead (it resumes
    /// from its checkpoint when placed again). See docs/protocol.md, "Suspend on GPU nodes".
    /// `behaviour`: the state's apply behaviour; MIG slices count as GPUs from behaviour 4
    /// (`behaviour::SLICES_ARE_GPUS`), and before it a job on slices alone is suspended in
    /// place, as builds before it did.
    pub fn preemption_mode_when_preempted(&self, behaviour: u32) -> PreemptionMode {
        let slices_count = behaviour >= crate::behaviour::SLICES_ARE_GPUS;
        let uses_gpus = self
            .tasks
            .iter()
            .any(|t| t.resources.gpus_milli() > 0 || (slices_count && t.resources.slices().next().is_some()));
        match self.preemption_mode {
            PreemptionMode::Suspend if uses_gpus => PreemptionMode::Checkpoint,
            mode => mode,
        }
    }

    /// Preempted, it is suspended in place: it keeps its shares, and lends the part its
    /// preemptor reserved to that preemptor.
    pub fn suspends_when_preempted(&self, behaviour: u32) -> bool {
        self.preemption_mode_when_preempted(behaviour) == PreemptionMode::Suspend
    }
}

impl JobSpec {
    /// Every replica's resources added up.
    pub fn total(&self) -> Resources {
        let mut r = Resources::new();
        for t in &self.tasks {
            r.add(&t.resources.times(u64::from(t.replicas)));
        }
        r
    }

    pub fn replica_count(&self) -> u32 {
        self.tasks.iter().map(|t| t.replicas).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobState {
    Pending,
    Running,
    /// A victim checkpointing (or being paused) before it stops.
    Preempting,
    /// Stopped in place by a preemptor (mode suspend); holds its resources.
    Suspended,
    /// Checkpointed and held by a person until resumed.
    Paused,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        JobState::Pending,
        JobState::Running,
        JobState::Preempting,
        JobState::Suspended,
        JobState::Paused,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Cancelled)
    }

    /// Holds an allocation that is in use (counts against nodes and quota).
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Running | JobState::Preempting)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "Pending",
            JobState::Running => "Running",
            JobState::Preempting => "Preempting",
            JobState::Suspended => "Suspended",
            JobState::Paused => "Paused",
            JobState::Succeeded => "Succeeded",
            JobState::Failed => "Failed",
            JobState::Cancelled => "Cancelled",
        }
    }

    /// Case-insensitive, as every word (`crate::word`).
    pub fn parse(s: &str) -> Option<JobState> {
        <JobState as crate::word::Word>::from_word(s)
    }
}

/// Why a running job is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopWhy {
    Preempted {
        by: JobId,
        mode: PreemptionMode,
    },
    Paused,
    /// It ran past its `time_limit`; it ends Failed once stopped (a checkpoint is kept).
    TimeLimit,
    /// A maintenance window started on one of its nodes (decisions.md section 14): it goes
    /// back to the queue once stopped, from its checkpoint.
    Maintenance,
    /// A GPU it runs on was found unhealthy (decisions.md section 14): it goes back to the
    /// queue once stopped, from its checkpoint.
    GpuFault,
    /// More replicas of the elastic gang fit (decisions.md section 13): it goes back to the
    /// queue once stopped, from its checkpoint, to be placed with as many as then fit.
    Grow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopping {
    pub why: StopWhy,
    pub requested_ms: u64,
    /// After this, the agent kills the process group (grace is over).
    pub deadline_ms: u64,
}

/// The reason a job is submitted with, until a scheduling cycle says why it waits.
pub const UNSEEN_REASON: &str = "waiting for the next scheduling cycle";

/// How the reason of a job suspended in place ends until its preemptor is gone; after, a
/// cycle resumes the job or says why it may not resume yet.
pub const UNTIL_PREEMPTOR_GONE: &str = "; resumes when it is gone";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    /// Resolved from the class at submission, so a later class change does not move running work.
    pub priority: i32,
    pub preemptible: bool,
    pub submitted_ms: u64,
    /// Global submission counter: breaks ties between submissions at the same instant.
    pub submit_seq: u64,
    pub state: JobState,
    /// Starts so far (1 after the first start); agents fence commands by it.
    pub attempt: u32,
    /// Where the current attempt runs (Running, Preempting, Suspended).
    pub replicas: Vec<ReplicaAlloc>,
    /// Parts of suspended jobs' resources this job runs on.
    pub lent_from: Vec<Lend>,
    /// Last start or resume.
    pub started_ms: u64,
    /// Since when it has been Pending without interruption (submission, requeue or resume
    /// by a person): docs/policy.md section 9's `reserve_after` counts from here.
    pub pending_since_ms: u64,
    /// Last start, resume or checkpoint: work after it is lost if the job is killed.
    pub progress_mark_ms: u64,
    pub stopping: Option<Stopping>,
    /// Ranks of the current attempt that have ended without ending the job (stopped, or
    /// exited 0 while rank 0 runs on), and whether each left a checkpoint. A stop completes
    /// once every rank is here; replicated, so the tally survives a failover. Also the ranks
    /// whose end ends the attempt (an exit, a lost node): the rest become completing.
    pub ended_ranks: BTreeMap<u32, bool>,
    /// The job that last preempted this one, until it starts again.
    pub preempted_by: Option<JobId>,
    /// While Suspended: the preemptor its resources are lent to.
    pub suspended_for: Option<JobId>,
    /// Jobs suspended in place for this one (their `suspended_for` may since have moved on).
    pub suspended_victims: Vec<JobId>,
    /// Why the job waits, in words a person can act on.
    pub reason: String,
    /// A checkpoint exists to resume from.
    pub has_checkpoint: bool,
    pub exit_code: Option<i32>,
    pub finished_ms: Option<u64>,
    /// Shared by the state's clones until one of them adds an event: the first change to a
    /// job after the leader's snapshot for a round copies the 64 jobs of its chunk
    /// (`cow_tree`), and their events were most of that copy (stop 83).
    pub events: Arc<VecDeque<Event>>,
}

impl Job {
    /// The replica of the current attempt at `rank`: ranks number the replicas in
    /// (task, replica) order, as agents see them.
    pub fn replica_at(&self, rank: u32) -> Option<&ReplicaAlloc> {
        self.ranked().into_iter().nth(rank as usize)
    }

    /// The current attempt's replicas in rank order.
    pub fn ranked(&self) -> Vec<&ReplicaAlloc> {
        let mut replicas: Vec<&ReplicaAlloc> = self.replicas.iter().collect();
        replicas.sort_by_key(|r| (r.task, r.index));
        replicas
    }

    /// GPUs held by the current attempt.
    pub fn gpus(&self) -> u64 {
        self.replicas.iter().map(|r| r.gpus.len() as u64).sum()
    }

    /// The GPUs its replicas hold, in thousandths: a replica on a shared GPU holds its
    /// fraction, any other its GPUs whole (decisions.md section 11).
    pub fn gpus_milli(&self) -> u64 {
        let of = |r: &crate::alloc::ReplicaAlloc| match self.spec.tasks.get(r.task as usize) {
            Some(t) if t.resources.gpu_fraction() > 0 => t.resources.gpu_fraction(),
            _ => r.gpus.len() as u64 * 1000,
        };
        self.replicas.iter().map(of).sum()
    }

    /// Node name to the GPU indices used there, each with the thousandths of it held when
    /// shared (0 when whole), in index order: for output.
    pub fn nodes_with_shares(&self) -> BTreeMap<Name, Vec<(u32, u32)>> {
        let mut out: BTreeMap<Name, Vec<(u32, u32)>> = BTreeMap::new();
        for r in &self.replicas {
            let share = self.spec.tasks.get(r.task as usize).map_or(0, |t| t.resources.gpu_fraction());
            // A fraction is at most 999 thousandths (submit refuses more), so it fits a u32.
            let share = u32::try_from(share).unwrap_or(u32::MAX);
            out.entry(r.node.clone()).or_default().extend(r.gpus.iter().map(|&g| (g, share)));
        }
        for gpus in out.values_mut() {
            gpus.sort_unstable();
        }
        out
    }

    /// Node name to the GPU indices used there, for output and agents.
    pub fn nodes(&self) -> BTreeMap<Name, Vec<u32>> {
        let held = self.nodes_with_shares().into_iter();
        held.map(|(node, gpus)| (node, gpus.into_iter().map(|(g, _)| g).collect())).collect()
    }

    /// Stopping (being preempted or paused). Its queue is no longer charged for it: what it
    /// frees is reserved for its preemptor or about to be free, and a suspended job charges
    /// no quota (it is not running).
    pub fn is_leaving(&self) -> bool {
        self.stopping.is_some()
    }

    /// When the current attempt reaches its time limit, if it has one.
    pub fn time_limit_at(&self) -> Option<u64> {
        self.spec.time_limit_ms.map(|t| self.started_ms.saturating_add(t))
    }

    /// Rank key for submission order: earlier first.
    pub fn submitted_key(&self) -> (u64, u64) {
        (self.submitted_ms, self.submit_seq)
    }
}
