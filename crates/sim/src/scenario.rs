//! A scenario: the cluster, a timeline of steps and expectations (docs/scenario-format.md).

use baton_model::class::PriorityClass;
use baton_model::job::JobState;
use baton_model::maintenance::WindowSpec;
use baton_model::name::Name;
use baton_model::node::NodeSpec;
use baton_model::queue::{Cohort, QueueSpec};
use baton_model::resources::Resources;
use std::collections::BTreeMap;

pub use baton_spec::job::Submit;

use crate::yaml::Node;

/// A value and where it was written.
#[derive(Debug, Clone)]
pub struct At<T> {
    pub v: T,
    pub line: usize,
    pub path: String,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub file: String,
    pub name: Option<String>,
    /// The `scheduler:` block; absent: the defaults.
    pub scheduler: Option<At<baton_model::scheduler::SchedulerSettings>>,
    /// The `scheduler:` block's `usage_half_life` and `usage_weights` (section 12).
    pub usage: Option<At<baton_model::usage::UsageSettings>>,
    /// Queues' `max_per_user` (section 12).
    pub user_limits: Vec<At<(Name, Resources)>>,
    /// Added to (or replacing) the four defaults.
    pub classes: Vec<At<PriorityClass>>,
    pub nodes: Vec<At<NodeSpec>>,
    /// `topology_levels` (decisions.md section 10), lowest first; absent: `[rack]`.
    pub topology_levels: Option<At<Vec<baton_model::topology::LevelName>>>,
    /// Each node's `topology` domains at the declared levels other than `rack`.
    pub node_domains: Vec<At<(Name, BTreeMap<baton_model::topology::LevelName, Name>)>>,
    pub cohorts: Vec<At<Cohort>>,
    pub queues: Vec<At<QueueSpec>>,
    pub timeline: Vec<Step>,
    pub expect: Vec<Expect>,
}

#[derive(Debug, Clone)]
pub struct Step {
    pub at_ms: u64,
    pub line: usize,
    pub path: String,
    pub action: Action,
}

#[derive(Debug, Clone)]
pub enum Action {
    Submit(Box<Submit>),
    Finish(At<Name>),
    Fail(At<Name>),
    Cancel(At<Name>),
    Pause(At<Name>),
    Resume(At<Name>),
    NodeDown(At<Name>),
    NodeUp(At<Name>),
    Cordon(At<Name>),
    Uncordon(At<Name>),
    /// The queue to update and the fields to change, applied to the queue as it is then.
    UpdateQueue(At<Name>, Node),
    /// A maintenance window (decisions.md section 14), created at this step.
    Maintenance(At<WindowSpec>),
    /// A GPU found unhealthy (`gpu_unhealthy`, with its error) or cleared (`gpu_healthy`),
    /// decisions.md section 14.
    Gpu(At<GpuMark>),
}

#[derive(Debug, Clone)]
pub struct GpuMark {
    pub node: Name,
    pub gpu: u32,
    /// `None`: healthy again.
    pub error: Option<String>,
}

impl Action {
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Submit(_) => "submit",
            Action::Finish(_) => "finish",
            Action::Fail(_) => "fail",
            Action::Cancel(_) => "cancel",
            Action::Pause(_) => "pause",
            Action::Resume(_) => "resume",
            Action::NodeDown(_) => "node_down",
            Action::NodeUp(_) => "node_up",
            Action::Cordon(_) => "cordon",
            Action::Maintenance(_) => "maintenance",
            Action::Gpu(g) if g.v.error.is_some() => "gpu_unhealthy",
            Action::Gpu(_) => "gpu_healthy",
            Action::Uncordon(_) => "uncordon",
            Action::UpdateQueue(..) => "update_queue",
        }
    }
}

/// One job's expected fields; `None` is not checked.
#[derive(Debug, Clone, Default)]
pub struct JobExpect {
    pub state: Option<JobState>,
    /// In thousandths of a GPU (a job on shared GPUs holds fractions).
    pub gpus: Option<u64>,
    pub attempt: Option<u32>,
    /// `Some(None)`: expected to have no preemptor.
    pub preempted_by: Option<Option<Name>>,
    pub pool: Option<Name>,
    pub nodes: Option<NodesExpect>,
    pub queue: Option<Name>,
    /// Text the job's reason must contain.
    pub reason: Option<String>,
}

/// `nodes: [n1, n2]` (the set of nodes) or `nodes: {n1: [0, 1]}` (nodes and GPU indices).
#[derive(Debug, Clone)]
pub enum NodesExpect {
    Names(Vec<Name>),
    Exact(std::collections::BTreeMap<Name, Vec<u32>>),
}

#[derive(Debug, Clone, Default)]
pub struct UsageExpect {
    pub usage: Option<Resources>,
    pub nominal: Option<Resources>,
}

#[derive(Debug, Clone, Default)]
pub struct QueueExpect {
    pub total: UsageExpect,
    pub pools: Vec<(Name, UsageExpect)>,
}

#[derive(Debug, Clone, Default)]
pub struct Expect {
    pub at_ms: u64,
    pub line: usize,
    pub jobs: Vec<At<(Name, JobExpect)>>,
    pub queues: Vec<At<(Name, QueueExpect)>>,
    pub victims_of: Vec<At<(Name, Vec<Name>)>>,
    pub victims_count: Vec<At<(Name, u32)>>,
    pub placed_on: Vec<At<(Name, Vec<Name>)>>,
    pub counts: Vec<At<(JobState, u32)>>,
    /// `users: {alice: {usage: {gpu: 1800.0}}}`: decayed resource-seconds (section 12).
    pub users: Vec<At<(String, std::collections::BTreeMap<String, f64>)>>,
}
