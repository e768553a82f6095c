//! Conversions between `baton_model` types and their `baton.v1` messages.
//!
//! Model to message never fails. Message to model validates every name and enum word and
//! names the field that is wrong, so a client's mistake reads like the simulator's errors
//! ("spec.tasks[0].name: ...").

use std::collections::BTreeMap;

use baton_model::class::PriorityClass;
use baton_model::event::{Event, EventKind};
use baton_model::job::{Job, JobSpec, PreemptionMode, PriorityRef, TaskSpec, Topology};
use baton_model::limits::DEFAULT_GRACE_MS;
use baton_model::name::Name;
use baton_model::node::{GpuInfo, Node, NodeSpec, NodeStatus};
use baton_model::quantity::{MAX_QUANTITY, units_per_one};
use baton_model::queue::{
    BorrowWithinCohort, Cohort, PoolQuota, PreemptionPolicy, QueueOrdering, QueueSpec, ReclaimWithinCohort, WithinQueue,
};
use baton_model::resources::{Resources, validate_resource_name};
use baton_model::scheduler::{PoolReservation, SchedulerSettings};
use baton_model::state::State;
use baton_model::tenancy::TenancySettings;

use crate::v1;

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

fn strs(list: &[Name]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}

/// Picks the variant a word names, case-insensitively; empty picks `default`.
fn word<T: Copy>(text: &str, field: &str, choices: &[(&str, T)], default: T) -> R<T> {
    if text.is_empty() {
        return Ok(default);
    }
    choices.iter().find(|(w, _)| w.eq_ignore_ascii_case(text)).map(|(_, v)| *v).ok_or_else(|| {
        let words: Vec<&str> = choices.iter().map(|(w, _)| *w).collect();
        bad(field, format!("{text:?} is not one of {}", words.join(", ")))
    })
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

const TOPOLOGIES: [(&str, Topology); 2] = [("node", Topology::Node), ("rack", Topology::Rack)];
const MODES: [(&str, PreemptionMode); 4] = [
    ("checkpoint", PreemptionMode::Checkpoint),
    ("requeue", PreemptionMode::Requeue),
    ("cancel", PreemptionMode::Cancel),
    ("suspend", PreemptionMode::Suspend),
];

fn word_of<T: PartialEq>(choices: &[(&'static str, T)], value: &T) -> String {
    choices.iter().find(|(_, v)| v == value).map_or(String::new(), |(w, _)| w.to_string())
}

pub fn job_spec_to_proto(s: &JobSpec) -> v1::JobSpec {
    let (priority_class, priority_value) = match &s.priority {
        PriorityRef::Class(c) => (c.to_string(), None),
        PriorityRef::Value(v) => (String::new(), Some(*v)),
    };
    v1::JobSpec {
        name: s.name.to_string(),
        queue: s.queue.to_string(),
        priority_class,
        priority_value,
        tasks: s.tasks.iter().map(task_to_proto).collect(),
        pools: s.pools.as_deref().map(strs).unwrap_or_default(),
        topology: s.topology.map(|t| word_of(&TOPOLOGIES, &t)).unwrap_or_default(),
        preemption_mode: word_of(&MODES, &s.preemption_mode),
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
    }
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
    let topology = if s.topology.is_empty() {
        None
    } else {
        Some(word(&s.topology, "spec.topology", &TOPOLOGIES, Topology::Node)?)
    };
    let signal = (!s.checkpoint_signal.is_empty()).then(|| s.checkpoint_signal.clone());
    Ok(JobSpec {
        name: name(&s.name, "spec.name")?,
        queue: name(&s.queue, "spec.queue")?,
        priority,
        tasks: tasks?,
        pools: if s.pools.is_empty() { None } else { Some(names(&s.pools, "spec.pools")?) },
        topology,
        preemption_mode: word(&s.preemption_mode, "spec.preemption_mode", &MODES, PreemptionMode::Checkpoint)?,
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
        pools: if t.pools.is_empty() { None } else { Some(names(&t.pools, &format!("{field}.pools"))?) },
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
        kind: e.kind.type_name().to_string(),
        message: e.message.clone(),
        nodes,
        attempt,
    }
}

/// A job as the API shows it; `preempted_by` is the preemptor's name, which only the
/// caller (holding the state) can look up.
pub fn job_to_proto(j: &Job, with_events: bool, preempted_by: Option<&Name>) -> v1::Job {
    v1::Job {
        id: j.id,
        spec: Some(job_spec_to_proto(&j.spec)),
        state: j.state.as_str().to_string(),
        priority: j.priority,
        preemptible: j.preemptible,
        attempt: j.attempt,
        placements: j.nodes().into_iter().map(|(node, gpus)| v1::Placement { node: node.to_string(), gpus }).collect(),
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

pub fn scheduler_from_proto(s: &v1::SchedulerSettings) -> R<SchedulerSettings> {
    let settings = SchedulerSettings { reserve_after_ms: s.reserve_after_ms };
    settings.validate().map_err(|e| bad("reserve_after_ms", e))?;
    Ok(settings)
}

const ORDERINGS: [(&str, QueueOrdering); 2] =
    [("BestEffortFIFO", QueueOrdering::BestEffortFIFO), ("StrictFIFO", QueueOrdering::StrictFIFO)];
const WITHIN: [(&str, WithinQueue); 3] = [
    ("Never", WithinQueue::Never),
    ("LowerPriority", WithinQueue::LowerPriority),
    ("LowerOrNewerEqualPriority", WithinQueue::LowerOrNewerEqualPriority),
];
const RECLAIM: [(&str, ReclaimWithinCohort); 3] = [
    ("Never", ReclaimWithinCohort::Never),
    ("LowerPriority", ReclaimWithinCohort::LowerPriority),
    ("Any", ReclaimWithinCohort::Any),
];

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
        ordering: word_of(&ORDERINGS, &q.ordering),
        within_queue: word_of(&WITHIN, &q.preemption.within_queue),
        reclaim_within_cohort: word_of(&RECLAIM, &q.preemption.reclaim_within_cohort),
        borrow_within_cohort: borrow.is_some(),
        max_priority_threshold: borrow.and_then(|b| b.max_priority_threshold),
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
        within_queue: word(&q.within_queue, "queue.within_queue", &WITHIN, WithinQueue::default())?,
        reclaim_within_cohort: word(
            &q.reclaim_within_cohort,
            "queue.reclaim_within_cohort",
            &RECLAIM,
            ReclaimWithinCohort::default(),
        )?,
        borrow_within_cohort: q
            .borrow_within_cohort
            .then_some(BorrowWithinCohort { max_priority_threshold: q.max_priority_threshold }),
    };
    Ok(QueueSpec {
        name: name(&q.name, "queue.name")?,
        cohort: opt_name(&q.cohort, "queue.cohort")?,
        quotas,
        weight: if q.weight == 0.0 { 1.0 } else { q.weight },
        ordering: word(&q.ordering, "queue.ordering", &ORDERINGS, QueueOrdering::default())?,
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
            (Some(_), NodeStatus::Ready) => "Unhealthy".into(),
            (_, status) => format!("{status:?}"),
        },
        cordoned: n.cordoned,
        used: None,
        jobs: Vec::new(),
        last_seen_ms_ago: None,
        agent_addr: s.agent_addr.clone(),
        unhealthy: n.unhealthy.clone().unwrap_or_default(),
    }
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
        p.preemption_mode = "pause".into();
        let e = job_spec_from_proto(&p).unwrap_err();
        assert_eq!(e.field, "spec.preemption_mode");
        assert!(e.message.contains("checkpoint, requeue, cancel, suspend"), "{e}");
        let mut p = job_spec_to_proto(&spec());
        p.priority_class = "train".into();
        assert_eq!(job_spec_from_proto(&p).unwrap_err().field, "spec.priority_value");
    }

    #[test]
    fn defaults_fill_what_a_client_leaves_out() {
        let mut p = job_spec_to_proto(&spec());
        p.priority_value = None;
        p.grace_ms = None;
        p.preemption_mode.clear();
        let s = job_spec_from_proto(&p).unwrap();
        assert_eq!(s.priority, PriorityRef::Class(Name::lit(DEFAULT_CLASS)));
        assert_eq!(s.grace_ms, DEFAULT_GRACE_MS);
        assert_eq!(s.preemption_mode, PreemptionMode::Checkpoint);
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
}
