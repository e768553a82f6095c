//! Conversions between `baton_model` types and their `baton.v1` messages.
//!
//! Model to message never fails. Message to model validates every name and enum value and
//! names the field that is wrong, so a client's mistake reads like the simulator's errors
//! ("spec.tasks[0].name: ..."). The model's closed sets and the API's enums are mapped here
//! and only here, by exhaustive matches; their words are in `crate::words`.

use std::collections::BTreeMap;

use baton_model::access::Role;
use baton_model::after::{After, JobRef, When};
use baton_model::array::{ArraySpec, JobArray};
use baton_model::class::PriorityClass;
use baton_model::elastic::ElasticSpec;
use baton_model::event::{Event, EventKind};
use baton_model::job::{Job, JobId, JobSpec, JobState, PreemptionMode, PriorityRef, TaskSpec, Topology};
use baton_model::limits::DEFAULT_GRACE_MS;
use baton_model::maintenance::{Window, WindowSpec};
use baton_model::name::Name;
use baton_model::node::{GpuInfo, Node, NodeSpec, NodeStatus};
use baton_model::quantity::{MAX_QUANTITY, units_per_one};
use baton_model::queue::{
    BorrowWithinCohort, Cohort, PoolQuota, PreemptionPolicy, QueueOrdering, QueueSpec, ReclaimWithinCohort, Visibility,
    WithinQueue,
};
use baton_model::resources::{Resources, validate_resource_name};
use baton_model::scheduler::{PoolReservation, SchedulerSettings};
use baton_model::state::State;
use baton_model::tenancy::TenancySettings;
use baton_model::topology::{LevelName, LevelNeed};

use crate::v1;
use crate::words::Word;

/// A message field that does not make a valid model value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConvertError {
    pub field: String,
    pub message: String,
}

type R<T> = Result<T, ConvertError>;

fn bad(field: &str, message: impl ToString) -> ConvertError {
    ConvertError { field: field.to_string(), message: message.to_string() }
}

/// The class a job gets when it names none (the model's definition).
pub use baton_model::class::DEFAULT_CLASS;

pub fn name(text: &str, field: &str) -> R<Name> {
    Name::new(text).map_err(|e| bad(field, e))
}

fn opt_name(text: &str, field: &str) -> R<Option<Name>> {
    if text.is_empty() { Ok(None) } else { name(text, field).map(Some) }
}

fn names(list: &[String], field: &str) -> R<Vec<Name>> {
    list.iter().enumerate().map(|(i, n)| name(n, &format!("{field}[{i}]"))).collect()
}

/// Pools a job or task may name at most: more is no preference order a person writes, and
/// each job keeps its list in the replicated state.
pub const MAX_POOLS_PER_JOB: usize = 64;

/// A job's or task's pool list: valid names, each once, at most `MAX_POOLS_PER_JOB`; empty is
/// any pool.
fn pool_list(list: &[String], field: &str) -> R<Option<Vec<Name>>> {
    if list.is_empty() {
        return Ok(None);
    }
    if list.len() > MAX_POOLS_PER_JOB {
        return Err(bad(field, format!("{} pools; at most {MAX_POOLS_PER_JOB}", list.len())));
    }
    let pools = names(list, field)?;
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in pools.iter().enumerate() {
        if !seen.insert(p) {
            return Err(bad(&format!("{field}[{i}]"), format!("pool {p} appears twice")));
        }
    }
    Ok(Some(pools))
}

fn strs(list: &[Name]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}

/// The enum value of a message's raw field; a number this build does not know (a newer
/// client's) is refused naming the field and the values it knows.
fn closed<T: Word>(raw: i32, field: &str) -> R<T> {
    T::try_from(raw).map_err(|_| bad(field, format!("{raw} is not one of {}", T::words())))
}

pub fn resources_to_proto(r: &Resources) -> v1::Resources {
    v1::Resources { amounts: r.iter().map(|(k, v)| (k.to_string(), v)).collect() }
}

pub fn resources_from_map(map: &std::collections::HashMap<String, u64>, field: &str) -> R<Resources> {
    let mut out = Resources::new();
    for (k, v) in map {
        validate_resource_name(k).map_err(|e| bad(&format!("{field}.{k}"), e))?;
        out.set(k, *v);
    }
    Ok(out)
}

fn resources_from_proto(r: Option<&v1::Resources>, field: &str) -> R<Resources> {
    r.map_or(Ok(Resources::new()), |r| resources_from_map(&r.amounts, field))
}

pub fn job_state_to_proto(s: JobState) -> v1::JobState {
    match s {
        JobState::Pending => v1::JobState::Pending,
        JobState::Running => v1::JobState::Running,
        JobState::Preempting => v1::JobState::Preempting,
        JobState::Suspended => v1::JobState::Suspended,
        JobState::Paused => v1::JobState::Paused,
        JobState::Succeeded => v1::JobState::Succeeded,
        JobState::Failed => v1::JobState::Failed,
        JobState::Cancelled => v1::JobState::Cancelled,
    }
}

/// `None` for the unspecified value, which names no state.
pub fn job_state_from_proto(s: v1::JobState) -> Option<JobState> {
    Some(match s {
        v1::JobState::Unspecified => return None,
        v1::JobState::Pending => JobState::Pending,
        v1::JobState::Running => JobState::Running,
        v1::JobState::Preempting => JobState::Preempting,
        v1::JobState::Suspended => JobState::Suspended,
        v1::JobState::Paused => JobState::Paused,
        v1::JobState::Succeeded => JobState::Succeeded,
        v1::JobState::Failed => JobState::Failed,
        v1::JobState::Cancelled => JobState::Cancelled,
    })
}

/// The states a job list asks for; the unspecified value is refused like an unknown one.
pub fn job_states_from_proto(raw: &[i32], field: &str) -> R<Vec<JobState>> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let state = job_state_from_proto(closed(*r, &field)?)
            .ok_or_else(|| bad(&field, format!("unspecified is not one of {}", v1::JobState::words())))?;
        out.push(state);
    }
    Ok(out)
}

fn topology_to_proto(t: Option<Topology>) -> v1::Topology {
    match t {
        None | Some(Topology::Levels(_)) => v1::Topology::Unspecified,
        Some(Topology::Node) => v1::Topology::Node,
        Some(Topology::Rack) => v1::Topology::Rack,
    }
}

/// A spec's levels (section 10) as the two strings, empty where none.
fn levels_to_proto(t: Option<Topology>) -> (String, String) {
    match t {
        Some(Topology::Levels(n)) => (
            n.required.map(|l| l.to_string()).unwrap_or_default(),
            n.preferred.map(|l| l.to_string()).unwrap_or_default(),
        ),
        _ => (String::new(), String::new()),
    }
}

/// The spec's topology: the shorthand, or the levels (not both).
fn spec_topology_from_proto(s: &v1::JobSpec) -> R<Option<Topology>> {
    let short = topology_from_proto(closed(s.topology, "spec.topology")?);
    if s.topology_required.is_empty() && s.topology_preferred.is_empty() {
        return Ok(short);
    }
    if short.is_some() {
        return Err(bad("spec.topology", "give topology or topology_required/topology_preferred, not both"));
    }
    let level = |text: &str, field: &str| -> R<Option<LevelName>> {
        if text.is_empty() {
            return Ok(None);
        }
        LevelName::new(text).map(Some).map_err(|e| bad(field, e.to_string()))
    };
    let required = level(&s.topology_required, "spec.topology_required")?;
    let preferred = level(&s.topology_preferred, "spec.topology_preferred")?;
    LevelNeed::topology(required, preferred).map_err(|e| bad("spec.topology_preferred", e.to_string()))
}

pub(crate) fn topology_from_proto(t: v1::Topology) -> Option<Topology> {
    match t {
        v1::Topology::Unspecified => None,
        v1::Topology::Node => Some(Topology::Node),
        v1::Topology::Rack => Some(Topology::Rack),
    }
}

fn mode_to_proto(m: PreemptionMode) -> v1::PreemptionMode {
    match m {
        PreemptionMode::Checkpoint => v1::PreemptionMode::Checkpoint,
        PreemptionMode::Requeue => v1::PreemptionMode::Requeue,
        PreemptionMode::Cancel => v1::PreemptionMode::Cancel,
        PreemptionMode::Suspend => v1::PreemptionMode::Suspend,
    }
}

/// Unspecified: the default mode, checkpoint.
pub(crate) fn mode_from_proto(m: v1::PreemptionMode) -> PreemptionMode {
    match m {
        v1::PreemptionMode::Unspecified | v1::PreemptionMode::Checkpoint => PreemptionMode::Checkpoint,
        v1::PreemptionMode::Requeue => PreemptionMode::Requeue,
        v1::PreemptionMode::Cancel => PreemptionMode::Cancel,
        v1::PreemptionMode::Suspend => PreemptionMode::Suspend,
    }
}

pub fn job_spec_to_proto(s: &JobSpec) -> v1::JobSpec {
    let (priority_class, priority_value) = match &s.priority {
        PriorityRef::Class(c) => (c.to_string(), None),
        PriorityRef::Value(v) => (String::new(), Some(*v)),
    };
    let (topology_required, topology_preferred) = levels_to_proto(s.topology);
    v1::JobSpec {
        name: s.name.to_string(),
        queue: s.queue.to_string(),
        priority_class,
        priority_value,
        tasks: s.tasks.iter().map(task_to_proto).collect(),
        pools: s.pools.as_deref().map(strs).unwrap_or_default(),
        topology: topology_to_proto(s.topology).into(),
        topology_required,
        topology_preferred,
        preemption_mode: mode_to_proto(s.preemption_mode).into(),
        grace_ms: Some(s.grace_ms),
        min_runtime_ms: s.min_runtime_ms,
        time_limit_ms: s.time_limit_ms,
        command: s.command.clone(),
        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        checkpoint_signal: s.checkpoint_signal.clone().unwrap_or_default(),
    }
}

fn task_to_proto(t: &TaskSpec) -> v1::TaskSpec {
    v1::TaskSpec {
        name: t.name.to_string(),
        replicas: t.replicas,
        resources: Some(resources_to_proto(&t.resources)),
        pools: t.pools.as_deref().map(strs).unwrap_or_default(),
        min_replicas: None,
    }
}

/// The elastic task of a submitted spec, if one names `min_replicas`; the model checks the
/// range and names the field. More than one such task is refused here.
pub fn elastic_from_proto(s: &v1::JobSpec) -> R<Option<ElasticSpec>> {
    let mut named = s.tasks.iter().enumerate().filter_map(|(i, t)| t.min_replicas.map(|m| (i, m)));
    let first = named.next().map(|(i, m)| ElasticSpec { task: i as u32, min_replicas: m });
    if let Some((i, _)) = named.next() {
        return Err(bad(&format!("spec.tasks[{i}].min_replicas"), "only one task group of a job may be elastic"));
    }
    Ok(first)
}

pub fn job_spec_from_proto(s: &v1::JobSpec) -> R<JobSpec> {
    let priority = match (s.priority_class.is_empty(), s.priority_value) {
        (false, Some(_)) => return Err(bad("spec.priority_value", "give a priority class or a value, not both")),
        (false, None) => PriorityRef::Class(name(&s.priority_class, "spec.priority_class")?),
        (true, Some(v)) => PriorityRef::Value(v),
        (true, None) => PriorityRef::Class(Name::lit(DEFAULT_CLASS)),
    };
    if s.tasks.is_empty() {
        return Err(bad("spec.tasks", "a job needs at least one task"));
    }
    let tasks: R<Vec<TaskSpec>> =
        s.tasks.iter().enumerate().map(|(i, t)| task_from_proto(t, &format!("spec.tasks[{i}]"))).collect();
    let topology = spec_topology_from_proto(s)?;
    let signal = (!s.checkpoint_signal.is_empty()).then(|| s.checkpoint_signal.clone());
    Ok(JobSpec {
        name: name(&s.name, "spec.name")?,
        queue: name(&s.queue, "spec.queue")?,
        priority,
        tasks: tasks?,
        pools: pool_list(&s.pools, "spec.pools")?,
        topology,
        preemption_mode: mode_from_proto(closed(s.preemption_mode, "spec.preemption_mode")?),
        grace_ms: s.grace_ms.unwrap_or(DEFAULT_GRACE_MS),
        min_runtime_ms: s.min_runtime_ms,
        time_limit_ms: s.time_limit_ms,
        command: s.command.clone(),
        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<BTreeMap<_, _>>(),
        checkpoint_signal: signal,
    })
}

fn task_from_proto(t: &v1::TaskSpec, field: &str) -> R<TaskSpec> {
    Ok(TaskSpec {
        name: name(&t.name, &format!("{field}.name"))?,
        replicas: t.replicas,
        resources: resources_from_proto(t.resources.as_ref(), &format!("{field}.resources"))?,
        pools: pool_list(&t.pools, &format!("{field}.pools"))?,
    })
}

pub fn role_to_proto(r: Role) -> v1::TokenRole {
    match r {
        Role::Admin => v1::TokenRole::Admin,
        Role::Operator => v1::TokenRole::Operator,
    }
}

pub fn role_from_proto(r: v1::TokenRole) -> Option<Role> {
    match r {
        v1::TokenRole::Unspecified => None,
        v1::TokenRole::Admin => Some(Role::Admin),
        v1::TokenRole::Operator => Some(Role::Operator),
    }
}

/// A request's roles; an unspecified or unknown one is refused naming its index.
pub fn roles_from_proto(raw: &[i32], field: &str) -> R<std::collections::BTreeSet<Role>> {
    let mut out = std::collections::BTreeSet::new();
    for (i, r) in raw.iter().enumerate() {
        let role: v1::TokenRole = closed(*r, &format!("{field}[{i}]"))?;
        out.insert(role_from_proto(role).ok_or_else(|| bad(&format!("{field}[{i}]"), "a role is needed"))?);
    }
    Ok(out)
}

pub fn event_kind_to_proto(k: &EventKind) -> v1::EventKind {
    match k {
        EventKind::Submitted => v1::EventKind::Submitted,
        EventKind::Started { .. } => v1::EventKind::Started,
        EventKind::Preempted { .. } => v1::EventKind::Preempted,
        EventKind::Stopped { .. } => v1::EventKind::Stopped,
        EventKind::Requeued => v1::EventKind::Requeued,
        EventKind::Stray => v1::EventKind::Stray,
        EventKind::Suspended { .. } => v1::EventKind::Suspended,
        EventKind::Resumed => v1::EventKind::Resumed,
        EventKind::Paused => v1::EventKind::Paused,
        EventKind::Unpaused => v1::EventKind::Unpaused,
        EventKind::Succeeded => v1::EventKind::Succeeded,
        EventKind::Failed { .. } => v1::EventKind::Failed,
        EventKind::Cancelled => v1::EventKind::Cancelled,
        EventKind::TimeLimit => v1::EventKind::TimeLimit,
        EventKind::TimedOut => v1::EventKind::TimedOut,
        EventKind::Reserved => v1::EventKind::Reserved,
        EventKind::Unreserved => v1::EventKind::Unreserved,
        EventKind::NodeRegistered => v1::EventKind::NodeRegistered,
        EventKind::NodeLost => v1::EventKind::NodeLost,
        EventKind::NodeReady => v1::EventKind::NodeReady,
        EventKind::NodeCordoned => v1::EventKind::NodeCordoned,
        EventKind::NodeUncordoned => v1::EventKind::NodeUncordoned,
        EventKind::NodeUnhealthy => v1::EventKind::NodeUnhealthy,
        EventKind::QueueUpdated { .. } => v1::EventKind::QueueUpdated,
        EventKind::DependenciesMet => v1::EventKind::DependenciesMet,
        EventKind::MaintenanceStarted => v1::EventKind::MaintenanceStarted,
        EventKind::MaintenanceEnded => v1::EventKind::MaintenanceEnded,
        EventKind::MaintenanceStop => v1::EventKind::MaintenanceStop,
        EventKind::GpuUnhealthy => v1::EventKind::GpuUnhealthy,
        EventKind::GpuHealthy => v1::EventKind::GpuHealthy,
        EventKind::GpuFaultStop => v1::EventKind::GpuFaultStop,
        EventKind::Resized { .. } => v1::EventKind::Resized,
        EventKind::Growing => v1::EventKind::Growing,
    }
}

/// The model's kind an API kind stands for, with empty details: only to read its word
/// (`EventKind::type_name`, the one spelling). None for the API's own kinds (Lagged).
pub(crate) fn event_kind_for_word(k: v1::EventKind) -> Option<EventKind> {
    let nobody = || Name::lit("nobody");
    Some(match k {
        v1::EventKind::Unspecified | v1::EventKind::Lagged => return None,
        v1::EventKind::Submitted => EventKind::Submitted,
        v1::EventKind::Started => EventKind::Started { attempt: 0, nodes: BTreeMap::new() },
        v1::EventKind::Preempted => EventKind::Preempted { by: nobody() },
        v1::EventKind::Stopped => EventKind::Stopped { checkpointed: false },
        v1::EventKind::Requeued => EventKind::Requeued,
        v1::EventKind::Stray => EventKind::Stray,
        v1::EventKind::Suspended => EventKind::Suspended { by: nobody() },
        v1::EventKind::Resumed => EventKind::Resumed,
        v1::EventKind::Paused => EventKind::Paused,
        v1::EventKind::Unpaused => EventKind::Unpaused,
        v1::EventKind::Succeeded => EventKind::Succeeded,
        v1::EventKind::Failed => EventKind::Failed { exit_code: 0 },
        v1::EventKind::Cancelled => EventKind::Cancelled,
        v1::EventKind::TimeLimit => EventKind::TimeLimit,
        v1::EventKind::TimedOut => EventKind::TimedOut,
        v1::EventKind::Reserved => EventKind::Reserved,
        v1::EventKind::Unreserved => EventKind::Unreserved,
        v1::EventKind::NodeRegistered => EventKind::NodeRegistered,
        v1::EventKind::NodeLost => EventKind::NodeLost,
        v1::EventKind::NodeReady => EventKind::NodeReady,
        v1::EventKind::NodeCordoned => EventKind::NodeCordoned,
        v1::EventKind::NodeUncordoned => EventKind::NodeUncordoned,
        v1::EventKind::NodeUnhealthy => EventKind::NodeUnhealthy,
        v1::EventKind::QueueUpdated => EventKind::QueueUpdated { queue: nobody() },
        v1::EventKind::DependenciesMet => EventKind::DependenciesMet,
        v1::EventKind::MaintenanceStarted => EventKind::MaintenanceStarted,
        v1::EventKind::MaintenanceEnded => EventKind::MaintenanceEnded,
        v1::EventKind::MaintenanceStop => EventKind::MaintenanceStop,
        v1::EventKind::GpuUnhealthy => EventKind::GpuUnhealthy,
        v1::EventKind::GpuHealthy => EventKind::GpuHealthy,
        v1::EventKind::GpuFaultStop => EventKind::GpuFaultStop,
        v1::EventKind::Resized => EventKind::Resized { from: 0, to: 0 },
        v1::EventKind::Growing => EventKind::Growing,
    })
}

pub fn event_to_proto(e: &Event) -> v1::Event {
    let (nodes, attempt) = match &e.kind {
        EventKind::Started { attempt, nodes } => (nodes.keys().map(|n| n.to_string()).collect(), *attempt),
        _ => (Vec::new(), 0),
    };
    v1::Event {
        at_ms: e.at_ms,
        job: e.job.as_ref().map(|n| n.to_string()).unwrap_or_default(),
        node: e.node.as_ref().map(|n| n.to_string()).unwrap_or_default(),
        kind: event_kind_to_proto(&e.kind).into(),
        message: e.message.clone(),
        nodes,
        attempt,
    }
}

/// Where a job runs on one node: its GPUs, each with the share held (0 when whole).
fn placement_to_proto(node: &Name, held: &[(u32, u32)]) -> v1::Placement {
    let gpus = held.iter().map(|&(g, _)| g).collect();
    // Only jobs that share a GPU carry the shares, so whole-GPU placements read as before.
    let gpu_milli = if held.iter().any(|&(_, m)| m > 0) { held.iter().map(|&(_, m)| m).collect() } else { Vec::new() };
    v1::Placement { node: node.to_string(), gpus, gpu_milli }
}

/// A job as the API shows it; `preempted_by` is the preemptor's name, which only the
/// caller (holding the state) can look up.
pub fn job_to_proto(j: &Job, with_events: bool, preempted_by: Option<&Name>) -> v1::Job {
    v1::Job {
        id: j.id,
        spec: Some(job_spec_to_proto(&j.spec)),
        state: job_state_to_proto(j.state).into(),
        priority: j.priority,
        preemptible: j.preemptible,
        attempt: j.attempt,
        placements: j.nodes_with_shares().into_iter().map(|(node, held)| placement_to_proto(&node, &held)).collect(),
        reason: j.reason.clone(),
        has_checkpoint: j.has_checkpoint,
        exit_code: j.exit_code,
        submitted_ms: j.submitted_ms,
        started_ms: j.started_ms,
        finished_ms: j.finished_ms.unwrap_or(0),
        events: if with_events { j.events.iter().map(event_to_proto).collect() } else { Vec::new() },
        preempted_by: preempted_by.map(|n| n.to_string()).unwrap_or_default(),
        reservation: None,
        owner: String::new(),
        env_hidden: false,
        run_as: String::new(),
        waiting_for: Vec::new(),
        array: String::new(),
        array_index: None,
        elastic_max_replicas: None,
    }
}

/// An array request; the model checks the bounds and names the field.
pub fn array_spec_from_proto(a: &v1::ArraySpec) -> ArraySpec {
    ArraySpec { first: a.first, count: a.count, max_running: (a.max_running > 0).then_some(a.max_running) }
}

pub fn array_spec_to_proto(a: &ArraySpec) -> v1::ArraySpec {
    v1::ArraySpec { first: a.first, count: a.count, max_running: a.max_running.unwrap_or(0) }
}

/// An array and where its elements stand (those not created yet are pending).
pub fn job_array_to_proto(state: &State, a: &JobArray) -> v1::JobArray {
    let (mut running, mut pending, mut other) = (0, a.not_created(), 0);
    for j in a.live.values().filter_map(|id| state.job(*id)) {
        match j.state {
            JobState::Running => running += 1,
            JobState::Pending => pending += 1,
            _ => other += 1,
        }
    }
    v1::JobArray {
        id: a.id,
        name: a.spec.name.to_string(),
        queue: a.spec.queue.to_string(),
        array: Some(array_spec_to_proto(&a.array)),
        running,
        pending,
        other,
        succeeded: a.tally.succeeded,
        failed: a.tally.failed,
        cancelled: a.tally.cancelled,
        created: a.created,
        reason: if a.not_created() > 0 { a.reason.clone() } else { String::new() },
        owner: state.access().owner(a.id).map(|o| o.to_string()).unwrap_or_default(),
        submitted_ms: a.submitted_ms,
        finished_ms: a.finished_ms.unwrap_or(0),
        cancelled_whole: a.cancelled,
    }
}

/// A starving job's reservation; `waiting_for` counts the jobs it waited for when it was
/// made that still hold resources (`state` says which).
pub fn pool_reservation_to_proto(r: &PoolReservation, state: &State) -> v1::PoolReservation {
    let mut nodes: Vec<&Name> = r.replicas.iter().map(|x| &x.node).collect();
    nodes.sort();
    nodes.dedup();
    let nodes = nodes.into_iter().map(|n| n.to_string()).collect();
    let active = r.waits_for.iter().filter(|id| state.job(**id).is_some_and(|j| j.state.is_active())).count();
    v1::PoolReservation {
        job: state.job(r.job).map(|j| j.spec.name.to_string()).unwrap_or_default(),
        pool: r.pool.to_string(),
        nodes,
        waiting_for: active as u32,
    }
}

pub fn scheduler_to_proto(s: &SchedulerSettings) -> v1::SchedulerSettings {
    v1::SchedulerSettings { reserve_after_ms: s.reserve_after_ms }
}

pub fn tenancy_to_proto(s: &TenancySettings) -> v1::TenancySettings {
    v1::TenancySettings {
        allow_root_jobs: Some(s.allow_root_jobs),
        max_jobs_per_user: Some(s.max_jobs_per_user),
        max_jobs_per_queue: Some(s.max_jobs_per_queue),
    }
}

/// The settings `s` asks for on top of `current` (an absent field keeps its value).
pub fn tenancy_from_proto(s: &v1::TenancySettings, current: &TenancySettings) -> R<TenancySettings> {
    let settings = TenancySettings {
        allow_root_jobs: s.allow_root_jobs.unwrap_or(current.allow_root_jobs),
        max_jobs_per_user: s.max_jobs_per_user.unwrap_or(current.max_jobs_per_user),
        max_jobs_per_queue: s.max_jobs_per_queue.unwrap_or(current.max_jobs_per_queue),
    };
    settings.validate().map_err(|e| bad("tenancy", e))?;
    Ok(settings)
}

/// The settings in force: a half-life of 0 when off, the weights with their default.
pub fn usage_settings_to_proto(s: &baton_model::usage::UsageSettings) -> v1::UsageSettings {
    v1::UsageSettings {
        half_life_ms: Some(s.half_life_ms.unwrap_or(0)),
        weights_milli: s.weights().into_iter().collect(),
    }
}

/// The settings `s` asks for on top of `current`: an absent half-life keeps it (0 turns it
/// off), empty weights keep them.
pub fn usage_settings_from_proto(
    s: &v1::UsageSettings,
    current: &baton_model::usage::UsageSettings,
) -> R<baton_model::usage::UsageSettings> {
    let half_life_ms = match s.half_life_ms {
        None => current.half_life_ms,
        Some(0) => None,
        Some(ms) => Some(ms),
    };
    let weights_milli = if s.weights_milli.is_empty() {
        current.weights_milli.clone()
    } else {
        s.weights_milli.clone().into_iter().collect()
    };
    let settings = baton_model::usage::UsageSettings { half_life_ms, weights_milli };
    settings.validate().map_err(|e| bad("usage", e))?;
    Ok(settings)
}

/// A queue's `max_per_user`; empty removes it.
pub fn user_limit_from_proto(r: &v1::UserLimitRequest) -> R<(baton_model::name::Name, Resources)> {
    let queue = baton_model::name::Name::new(r.queue.as_str()).map_err(|e| bad("queue", e))?;
    Ok((queue, resources_from_proto(r.limit.as_ref(), "limit")?))
}

pub fn scheduler_from_proto(s: &v1::SchedulerSettings) -> R<SchedulerSettings> {
    let settings = SchedulerSettings { reserve_after_ms: s.reserve_after_ms };
    settings.validate().map_err(|e| bad("reserve_after_ms", e))?;
    Ok(settings)
}

fn ordering_to_proto(o: QueueOrdering) -> v1::QueueOrdering {
    match o {
        QueueOrdering::BestEffortFIFO => v1::QueueOrdering::BestEffortFifo,
        QueueOrdering::StrictFIFO => v1::QueueOrdering::StrictFifo,
    }
}

/// Unspecified: the model's default; so for the two below.
pub(crate) fn ordering_from_proto(o: v1::QueueOrdering) -> QueueOrdering {
    match o {
        v1::QueueOrdering::Unspecified => QueueOrdering::default(),
        v1::QueueOrdering::BestEffortFifo => QueueOrdering::BestEffortFIFO,
        v1::QueueOrdering::StrictFifo => QueueOrdering::StrictFIFO,
    }
}

fn within_to_proto(w: WithinQueue) -> v1::WithinQueue {
    match w {
        WithinQueue::Never => v1::WithinQueue::Never,
        WithinQueue::LowerPriority => v1::WithinQueue::LowerPriority,
        WithinQueue::LowerOrNewerEqualPriority => v1::WithinQueue::LowerOrNewerEqualPriority,
    }
}

pub(crate) fn within_from_proto(w: v1::WithinQueue) -> WithinQueue {
    match w {
        v1::WithinQueue::Unspecified => WithinQueue::default(),
        v1::WithinQueue::Never => WithinQueue::Never,
        v1::WithinQueue::LowerPriority => WithinQueue::LowerPriority,
        v1::WithinQueue::LowerOrNewerEqualPriority => WithinQueue::LowerOrNewerEqualPriority,
    }
}

fn reclaim_to_proto(r: ReclaimWithinCohort) -> v1::ReclaimWithinCohort {
    match r {
        ReclaimWithinCohort::Never => v1::ReclaimWithinCohort::Never,
        ReclaimWithinCohort::LowerPriority => v1::ReclaimWithinCohort::LowerPriority,
        ReclaimWithinCohort::Any => v1::ReclaimWithinCohort::Any,
    }
}

pub(crate) fn reclaim_from_proto(r: v1::ReclaimWithinCohort) -> ReclaimWithinCohort {
    match r {
        v1::ReclaimWithinCohort::Unspecified => ReclaimWithinCohort::default(),
        v1::ReclaimWithinCohort::Never => ReclaimWithinCohort::Never,
        v1::ReclaimWithinCohort::LowerPriority => ReclaimWithinCohort::LowerPriority,
        v1::ReclaimWithinCohort::Any => ReclaimWithinCohort::Any,
    }
}

fn limits_to_proto(m: &BTreeMap<String, u64>) -> std::collections::HashMap<String, u64> {
    m.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

fn limits_from_proto(m: &std::collections::HashMap<String, u64>, field: &str) -> R<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        validate_resource_name(k).map_err(|e| bad(&format!("{field}.{k}"), e))?;
        out.insert(k.clone(), *v);
    }
    Ok(out)
}

pub fn queue_to_proto(q: &QueueSpec) -> v1::Queue {
    let quotas = q
        .quotas
        .iter()
        .map(|(pool, pq)| v1::PoolQuota {
            pool: pool.to_string(),
            nominal: Some(resources_to_proto(&pq.nominal)),
            borrow_limit: limits_to_proto(&pq.borrow_limit),
            lend_limit: limits_to_proto(&pq.lend_limit),
        })
        .collect();
    let borrow = q.preemption.borrow_within_cohort;
    v1::Queue {
        name: q.name.to_string(),
        cohort: q.cohort.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        quotas,
        weight: q.weight,
        ordering: ordering_to_proto(q.ordering).into(),
        within_queue: within_to_proto(q.preemption.within_queue).into(),
        reclaim_within_cohort: reclaim_to_proto(q.preemption.reclaim_within_cohort).into(),
        borrow_within_cohort: borrow.is_some(),
        max_priority_threshold: borrow.and_then(|b| b.max_priority_threshold),
        // Not part of the spec: whoever lists queues sets it from the state.
        visibility: v1::JobVisibility::Unspecified.into(),
    }
}

pub fn condition_to_proto(w: When) -> v1::DependencyCondition {
    match w {
        When::Ok => v1::DependencyCondition::Ok,
        When::Any => v1::DependencyCondition::Any,
        When::NotOk => v1::DependencyCondition::Notok,
        When::Started => v1::DependencyCondition::Started,
    }
}

pub fn condition_from_proto(c: v1::DependencyCondition) -> Option<When> {
    match c {
        v1::DependencyCondition::Unspecified => None,
        v1::DependencyCondition::Ok => Some(When::Ok),
        v1::DependencyCondition::Any => Some(When::Any),
        v1::DependencyCondition::Notok => Some(When::NotOk),
        v1::DependencyCondition::Started => Some(When::Started),
    }
}

pub fn after_to_proto(a: &After) -> v1::Dependency {
    v1::Dependency { job: a.job.to_string(), when: condition_to_proto(a.when).into() }
}

/// A submit's dependencies, each refused naming its index: a job that is all digits is an
/// id, anything else must be a valid name; the condition must be given.
pub fn after_from_proto(deps: &[v1::Dependency]) -> R<Vec<After>> {
    deps.iter()
        .enumerate()
        .map(|(i, d)| {
            let field = format!("after[{i}]");
            let when: v1::DependencyCondition = closed(d.when, &format!("{field}.when"))?;
            let when = condition_from_proto(when)
                .ok_or_else(|| bad(&format!("{field}.when"), "a condition is needed (ok, any, notok, started)"))?;
            let job = JobRef::parse(&d.job).map_err(|e| bad(&format!("{field}.job"), e))?;
            Ok(After { job, when })
        })
        .collect()
}

/// The dependencies of a held job that do not hold yet, by name.
pub fn waits_to_proto(state: &State, id: JobId) -> Vec<v1::Dependency> {
    state
        .waits_of(id)
        .iter()
        .map(|w| v1::Dependency {
            job: state
                .job(w.job)
                .map(|j| j.spec.name.to_string())
                .or_else(|| state.array(w.job).map(|a| a.spec.name.to_string()))
                .unwrap_or_else(|| w.job.to_string()),
            when: condition_to_proto(w.when).into(),
        })
        .collect()
}

pub fn window_to_proto(w: &Window) -> v1::MaintenanceWindow {
    v1::MaintenanceWindow {
        name: w.spec.name.to_string(),
        nodes: w.spec.nodes.iter().map(|n| n.to_string()).collect(),
        start_ms: w.spec.start_ms,
        end_ms: w.spec.end_ms,
        active: w.active,
    }
}

/// A window to create: names checked, each refused naming its field; the times and nodes
/// are the state's to check against the cluster.
pub fn window_from_proto(w: &v1::MaintenanceWindow) -> R<WindowSpec> {
    let name = Name::new(w.name.as_str()).map_err(|e| bad("name", e))?;
    let nodes = w
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| Name::new(n.as_str()).map_err(|e| bad(&format!("nodes[{i}]"), e)))
        .collect::<R<Vec<Name>>>()?;
    Ok(WindowSpec { name, nodes, start_ms: w.start_ms, end_ms: w.end_ms })
}

/// An operator's mark on a GPU: unhealthy with the error given, or healthy again.
pub fn gpu_health_from_proto(r: &v1::SetGpuHealthRequest) -> R<baton_model::command::Op> {
    let node = name(&r.node, "node")?;
    let fault = match (r.healthy, r.error.trim()) {
        (true, "") => None,
        (true, _) => return Err(bad("error", "a GPU marked healthy has no error; leave it empty")),
        (false, "") => return Err(bad("error", "say what is wrong with the GPU (e.g. \"XID 79\")")),
        (false, e) => Some(e.to_string()),
    };
    Ok(baton_model::command::Op::SetGpuHealth { node, gpu: r.gpu, fault })
}

pub fn visibility_to_proto(v: Visibility) -> v1::JobVisibility {
    match v {
        Visibility::All => v1::JobVisibility::All,
        Visibility::Names => v1::JobVisibility::Names,
        Visibility::Own => v1::JobVisibility::Own,
    }
}

/// `None` when unspecified (a write that leaves it as it is).
pub fn visibility_from_proto(v: v1::JobVisibility) -> Option<Visibility> {
    match v {
        v1::JobVisibility::Unspecified => None,
        v1::JobVisibility::All => Some(Visibility::All),
        v1::JobVisibility::Names => Some(Visibility::Names),
        v1::JobVisibility::Own => Some(Visibility::Own),
    }
}

pub fn queue_from_proto(q: &v1::Queue) -> R<QueueSpec> {
    let mut quotas = BTreeMap::new();
    for (i, pq) in q.quotas.iter().enumerate() {
        let f = format!("queue.quotas[{i}]");
        let pool = name(&pq.pool, &format!("{f}.pool"))?;
        let quota = PoolQuota {
            nominal: resources_from_proto(pq.nominal.as_ref(), &format!("{f}.nominal"))?,
            borrow_limit: limits_from_proto(&pq.borrow_limit, &format!("{f}.borrow_limit"))?,
            lend_limit: limits_from_proto(&pq.lend_limit, &format!("{f}.lend_limit"))?,
        };
        if quotas.insert(pool, quota).is_some() {
            return Err(bad(&format!("{f}.pool"), format!("pool {:?} is listed twice", pq.pool)));
        }
    }
    if !(q.weight.is_finite() && q.weight >= 0.0) {
        return Err(bad("queue.weight", "must be a number of at least 0"));
    }
    if q.max_priority_threshold.is_some() && !q.borrow_within_cohort {
        return Err(bad("queue.max_priority_threshold", "only applies with borrow_within_cohort"));
    }
    let preemption = PreemptionPolicy {
        within_queue: within_from_proto(closed(q.within_queue, "queue.within_queue")?),
        reclaim_within_cohort: reclaim_from_proto(closed(q.reclaim_within_cohort, "queue.reclaim_within_cohort")?),
        borrow_within_cohort: q
            .borrow_within_cohort
            .then_some(BorrowWithinCohort { max_priority_threshold: q.max_priority_threshold }),
    };
    Ok(QueueSpec {
        name: name(&q.name, "queue.name")?,
        cohort: opt_name(&q.cohort, "queue.cohort")?,
        quotas,
        weight: if q.weight == 0.0 { 1.0 } else { q.weight },
        ordering: ordering_from_proto(closed(q.ordering, "queue.ordering")?),
        preemption,
    })
}

pub fn cohort_to_proto(c: &Cohort) -> v1::Cohort {
    v1::Cohort {
        name: c.name.to_string(),
        parent: c.parent.as_ref().map(|p| p.to_string()).unwrap_or_default(),
        fair_sharing: c.fair_sharing,
    }
}

pub fn cohort_from_proto(c: &v1::Cohort) -> R<Cohort> {
    Ok(Cohort {
        name: name(&c.name, "cohort.name")?,
        parent: opt_name(&c.parent, "cohort.parent")?,
        fair_sharing: c.fair_sharing,
    })
}

pub fn class_to_proto(c: &PriorityClass) -> v1::PriorityClass {
    v1::PriorityClass { name: c.name.to_string(), value: c.value, preemptible: c.preemptible }
}

pub fn class_from_proto(c: &v1::PriorityClass) -> R<PriorityClass> {
    Ok(PriorityClass { name: name(&c.name, "class.name")?, value: c.value, preemptible: c.preemptible })
}

fn gpu_to_proto(g: &GpuInfo) -> v1::Gpu {
    v1::Gpu {
        index: g.index,
        uuid: g.uuid.clone(),
        model: g.model.clone(),
        memory_bytes: g.memory_bytes,
        healthy: g.healthy,
    }
}

/// The node's registered facts and replicated status; usage, jobs and liveness are the
/// caller's to fill in.
pub fn node_to_proto(n: &Node) -> v1::Node {
    let s = &n.spec;
    v1::Node {
        name: s.name.to_string(),
        pool: s.pool.to_string(),
        rack: s.rack.as_ref().map(|r| r.to_string()).unwrap_or_default(),
        labels: s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        resources: Some(resources_to_proto(&s.resources)),
        gpus: s.gpus.iter().map(gpu_to_proto).collect(),
        status: match (&n.unhealthy, n.status) {
            (Some(_), NodeStatus::Ready) => v1::NodeStatus::Unhealthy,
            (None, NodeStatus::Ready) => v1::NodeStatus::Ready,
            (_, NodeStatus::Lost) => v1::NodeStatus::Lost,
        }
        .into(),
        cordoned: n.cordoned,
        used: None,
        jobs: Vec::new(),
        last_seen_ms_ago: None,
        agent_addr: s.agent_addr.clone(),
        unhealthy: n.unhealthy.clone().unwrap_or_default(),
        maintenance: String::new(),
        unhealthy_gpus: Vec::new(),
        domains: Default::default(),
        shared_gpus: Vec::new(),
    }
}

/// A node's unhealthy GPUs, by index.
pub fn gpu_faults_to_proto(faults: Option<&BTreeMap<u32, baton_model::gpu_health::GpuFault>>) -> Vec<v1::GpuFault> {
    let Some(faults) = faults else { return Vec::new() };
    faults
        .iter()
        .map(|(gpu, f)| v1::GpuFault { gpu: *gpu, error: f.error.clone(), since_ms: f.since_ms, by_check: f.by_check })
        .collect()
}

/// An agent reports whole units (its CPU count, say); the state holds each resource in its
/// smallest unit (CPUs in thousandths, see `baton_model::quantity`).
fn node_resources(map: &std::collections::HashMap<String, u64>) -> R<Resources> {
    let mut out = resources_from_map(map, "node.resources")?;
    for (k, whole) in map {
        let per_one = units_per_one(k);
        let amount = whole
            .checked_mul(per_one)
            .filter(|&a| a <= MAX_QUANTITY)
            .ok_or_else(|| bad(&format!("node.resources.{k}"), format!("{whole} is too large")))?;
        out.set(k, amount);
    }
    Ok(out)
}

/// What an agent reports of its node, as the node spec the state machine registers.
pub fn node_from_agent(n: &v1::NodeInfo) -> R<NodeSpec> {
    let gpus = n
        .gpus
        .iter()
        .map(|g| GpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            memory_bytes: g.memory_bytes,
            healthy: g.healthy,
        })
        .collect();
    Ok(NodeSpec {
        name: name(&n.name, "node.name")?,
        pool: if n.pool.is_empty() { Name::lit(baton_model::node::DEFAULT_POOL) } else { name(&n.pool, "node.pool")? },
        rack: opt_name(&n.rack, "node.rack")?,
        labels: n.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        resources: node_resources(&n.resources)?,
        gpus,
        agent_addr: n.agent_addr.clone(),
    })
}

/// What an agent reports of its node's topology domains (decisions.md section 10).
pub fn node_domains_from_agent(n: &v1::NodeInfo) -> R<BTreeMap<LevelName, Name>> {
    if n.domains.len() > baton_model::topology::MAX_TOPOLOGY_LEVELS {
        return Err(bad(
            "node.domains",
            format!("at most {} topology levels", baton_model::topology::MAX_TOPOLOGY_LEVELS),
        ));
    }
    n.domains
        .iter()
        .map(|(level, domain)| {
            let field = format!("node.domains.{level}");
            let l = LevelName::new(level).map_err(|e| bad(&field, e.to_string()))?;
            Ok((l, name(domain, &field)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec {
            name: Name::lit("train-1"),
            queue: Name::lit("team-a"),
            priority: PriorityRef::Value(7),
            tasks: vec![TaskSpec {
                name: Name::lit("worker"),
                replicas: 2,
                resources: Resources::of(&[("gpu", 4), ("cpu", 8)]),
                pools: Some(vec![Name::lit("a100")]),
            }],
            pools: None,
            topology: Some(Topology::Rack),
            preemption_mode: PreemptionMode::Suspend,
            grace_ms: 0,
            min_runtime_ms: 5_000,
            time_limit_ms: None,
            command: vec!["python".into(), "train.py".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            checkpoint_signal: Some("SIGUSR1".into()),
        }
    }

    #[test]
    fn job_spec_round_trips() {
        let s = spec();
        assert_eq!(job_spec_from_proto(&job_spec_to_proto(&s)).unwrap(), s);
    }

    #[test]
    fn an_agents_cpu_count_is_held_in_thousandths() {
        let info = v1::NodeInfo {
            name: "n1".into(),
            resources: [("gpu".to_string(), 8), ("cpu".to_string(), 64), ("memory".to_string(), 1 << 40)].into(),
            ..Default::default()
        };
        let spec = node_from_agent(&info).unwrap();
        assert_eq!(spec.resources, Resources::of(&[("gpu", 8), ("cpu", 64_000), ("memory", 1 << 40)]));
        let huge = v1::NodeInfo { resources: [("cpu".to_string(), u64::MAX / 10)].into(), ..info };
        let err = node_from_agent(&huge).unwrap_err().to_string();
        assert!(err.contains("node.resources.cpu"), "{err}");
    }

    #[test]
    fn bad_fields_are_named() {
        let mut p = job_spec_to_proto(&spec());
        p.tasks[0].name = "bad name".into();
        assert_eq!(job_spec_from_proto(&p).unwrap_err().field, "spec.tasks[0].name");
        let mut p = job_spec_to_proto(&spec());
        p.preemption_mode = 99;
        let e = job_spec_from_proto(&p).unwrap_err();
        assert_eq!(e.field, "spec.preemption_mode");
        assert_eq!(e.message, "99 is not one of checkpoint, requeue, cancel, suspend");
        let mut p = job_spec_to_proto(&spec());
        p.priority_class = "train".into();
        assert_eq!(job_spec_from_proto(&p).unwrap_err().field, "spec.priority_value");
    }

    #[test]
    fn defaults_fill_what_a_client_leaves_out() {
        let mut p = job_spec_to_proto(&spec());
        p.priority_value = None;
        p.grace_ms = None;
        p.preemption_mode = v1::PreemptionMode::Unspecified.into();
        p.topology = v1::Topology::Unspecified.into();
        let s = job_spec_from_proto(&p).unwrap();
        assert_eq!(s.priority, PriorityRef::Class(Name::lit(DEFAULT_CLASS)));
        assert_eq!(s.grace_ms, DEFAULT_GRACE_MS);
        assert_eq!(s.preemption_mode, PreemptionMode::Checkpoint);
        assert_eq!(s.topology, None);
    }

    #[test]
    fn every_job_state_maps_both_ways_and_unknown_states_are_named() {
        for s in JobState::ALL {
            assert_eq!(job_state_from_proto(job_state_to_proto(s)), Some(s));
        }
        let raw = [v1::JobState::Running as i32, v1::JobState::Paused as i32];
        assert_eq!(job_states_from_proto(&raw, "states"), Ok(vec![JobState::Running, JobState::Paused]));
        let e = job_states_from_proto(&[v1::JobState::Running as i32, 42], "states").unwrap_err();
        assert_eq!(e.field, "states[1]");
        let e = job_states_from_proto(&[0], "states").unwrap_err();
        assert!(e.message.starts_with("unspecified is not one of Pending, Running"), "{e}");
    }

    #[test]
    fn queue_defaults_fill_unspecified_policies_and_unknown_ones_are_named() {
        let q = queue_from_proto(&v1::Queue { name: "q".into(), ..Default::default() }).unwrap();
        assert_eq!(q, QueueSpec::named("q"));
        let bad = v1::Queue { name: "q".into(), reclaim_within_cohort: 7, ..Default::default() };
        let e = queue_from_proto(&bad).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("queue.reclaim_within_cohort", "7 is not one of Never, LowerPriority, Any")
        );
    }

    #[test]
    fn queue_round_trips() {
        let mut q = QueueSpec::named("team-a");
        q.cohort = Some(Name::lit("org"));
        q.weight = 2.0;
        q.ordering = QueueOrdering::StrictFIFO;
        q.quotas.insert(
            Name::lit("default"),
            PoolQuota {
                nominal: Resources::of(&[("gpu", 8)]),
                borrow_limit: BTreeMap::from([("gpu".into(), 4)]),
                lend_limit: BTreeMap::new(),
            },
        );
        q.preemption.borrow_within_cohort = Some(BorrowWithinCohort { max_priority_threshold: Some(50) });
        assert_eq!(queue_from_proto(&queue_to_proto(&q)).unwrap(), q);
    }

    #[test]
    fn a_pool_list_with_a_pool_twice_or_too_many_pools_is_refused_naming_the_field() {
        let twice: Vec<String> = vec!["a100".into(), "h100".into(), "a100".into()];
        let err = pool_list(&twice, "spec.pools").unwrap_err();
        assert_eq!(err.field, "spec.pools[2]");
        assert!(err.message.contains("appears twice"), "{err}");
        let many: Vec<String> = (0..=MAX_POOLS_PER_JOB).map(|i| format!("p{i}")).collect();
        let err = pool_list(&many, "tasks[0].pools").unwrap_err();
        assert_eq!(err.field, "tasks[0].pools");
        assert_eq!(pool_list(&[], "spec.pools").unwrap(), None);
        assert_eq!(pool_list(&twice[..2], "spec.pools").unwrap().map(|p| p.len()), Some(2));
    }
}
