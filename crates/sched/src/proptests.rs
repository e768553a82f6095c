//! Property tests over random clusters and timelines, driven through the real
//! `State::apply` and `cycle`. After every change they check the invariants the design
//! promises; see `check_state` and `apply_checked`.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::class::default_classes;
use baton_model::command::{Command, Op, Outcome};
use baton_model::elastic::ElasticSpec;
use baton_model::event::EventKind;
use baton_model::job::{JobId, JobSpec, JobState, PreemptionMode, PriorityRef, TaskSpec};
use baton_model::ledger::{QuotaBlock, ZERO, add};
use baton_model::limits::MAX_RESOURCE_KINDS;
use baton_model::name::Name;
use baton_model::node::{NodeSpec, NodeStatus};
use baton_model::plan::{Decision, Plan};
use baton_model::queue::{BorrowWithinCohort, Cohort, PoolQuota, QueueSpec, ReclaimWithinCohort, WithinQueue};
use baton_model::resources::Resources;
use baton_model::scheduler::SchedulerSettings;
use baton_model::state::{State, demand_of};
use baton_model::topology::{LevelName, LevelNeed};
use baton_model::word::Word;
use proptest::prelude::*;

use crate::cycle;
use crate::invariants::check_state;
use crate::needs::Needs;
use crate::nodes::SetNodes;
use crate::pack::pack;
use crate::view::View;

#[derive(Debug, Clone)]
pub(crate) struct NodeGen {
    pool: u8,
    rack: u8,
    gpus: u8,
    cpus: u8,
}

#[derive(Debug, Clone)]
pub(crate) struct QueueGen {
    cohort: u8,
    nominal_gpu: u8,
    borrow_limit: Option<u8>,
    lend_limit: Option<u8>,
    within: u8,
    reclaim: u8,
    bwc: Option<i32>,
    weight: u8,
    /// `max_per_user` in GPUs (decisions.md section 12): every job of a queue has one user.
    max_per_user_gpu: Option<u8>,
}

#[derive(Debug, Clone)]
pub(crate) enum OpGen {
    Submit {
        queue: u8,
        class: u8,
        replicas: u8,
        gpus: u8,
        cpus: u8,
        mode: u8,
        topology: u8,
        min_runtime: bool,
        /// Tens of seconds (docs/policy.md section 9).
        time_limit: Option<u8>,
        /// An elastic gang (decisions.md section 13) of at least this many replicas (taken
        /// modulo its size, at least one); a single replica stays rigid.
        elastic_min: Option<u8>,
    },
    Finish(u8),
    Cancel(u8),
    Pause(u8),
    Resume(u8),
    NodeDown(u8),
    NodeUp(u8),
    /// A GPU found unhealthy, or cleared (decisions.md section 14): node, GPU.
    GpuFault(u8, u8),
    GpuHealthy(u8, u8),
    /// A job's rank 0 could not be recorded by its node's agent (its journal takes no
    /// writes): the job goes back to the queue and the node is taken out.
    Unrecorded(u8),
    /// A process of a job's rank survived SIGKILL (a rank being stopped, else rank 0 of a
    /// running one): its node is taken out.
    Unkillable(u8),
    /// A node cordoned, or uncordoned (which also clears an unhealthy mark).
    Cordon(u8, bool),
    /// A maintenance window on a node (decisions.md section 14): it starts this many tens
    /// of seconds after the operation and lasts this many (at least one).
    Window {
        node: u8,
        start_in: u8,
        lasts: u8,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct World {
    pub(crate) nodes: Vec<NodeGen>,
    pub(crate) fair_sharing: bool,
    /// `reserve_after` in tens of seconds; `None`: never.
    pub(crate) reserve_after: Option<u8>,
    pub(crate) queues: Vec<QueueGen>,
    pub(crate) ops: Vec<OpGen>,
    /// Victims that stopped are left so until after the next operation, as when their
    /// stops are reported and a node is lost before the next cycle: a preemptor may then
    /// find its reserved room held by a victim's ranks left completing (`cycle.rs`:
    /// `tests::a_preemptor_waits_for_a_suspended_victims_rank_left_completing_by_a_lost_node`).
    pub(crate) linger: bool,
}

pub(crate) fn world() -> impl Strategy<Value = World> {
    let node =
        (0u8..2, 0u8..2, 0u8..=8, 1u8..=8).prop_map(|(pool, rack, gpus, cpus)| NodeGen { pool, rack, gpus, cpus });
    let queue = (
        0u8..3,
        0u8..=8,
        proptest::option::of(0u8..=4),
        proptest::option::of(0u8..=4),
        0u8..3,
        0u8..3,
        proptest::option::of(40i32..=80),
        0u8..3,
        proptest::option::weighted(0.3, 0u8..=8),
    )
        .prop_map(
            |(cohort, nominal_gpu, borrow_limit, lend_limit, within, reclaim, bwc, weight, max_per_user_gpu)| {
                QueueGen {
                    cohort,
                    nominal_gpu,
                    borrow_limit,
                    lend_limit,
                    within,
                    reclaim,
                    bwc,
                    weight,
                    max_per_user_gpu,
                }
            },
        );
    let op = op_gen();
    (
        proptest::collection::vec(node, 1..7),
        any::<bool>(),
        proptest::option::of(0u8..=3),
        proptest::collection::vec(queue, 2..5),
        proptest::collection::vec(op, 1..40),
        any::<bool>(),
    )
        .prop_map(|(nodes, fair_sharing, reserve_after, queues, ops, linger)| World {
            nodes,
            fair_sharing,
            reserve_after,
            queues,
            ops,
            linger,
        })
}

/// One operation on the cluster: a submission, an exit, a user action or a node change.
pub(crate) fn op_gen() -> impl Strategy<Value = OpGen> {
    prop_oneof![
        6 => ((0u8..4, 0u8..5, 1u8..=3, 0u8..=FRACTION_GPUS, 0u8..=4, 0u8..4, 0u8..7, any::<bool>(), proptest::option::of(1u8..=6)), proptest::option::weighted(0.25, any::<u8>())).prop_map(
            |((queue, class, replicas, gpus, cpus, mode, topology, min_runtime, time_limit), elastic_min)| OpGen::Submit { queue, class, replicas, gpus, cpus, mode, topology, min_runtime, time_limit, elastic_min }
        ),
        2 => any::<u8>().prop_map(OpGen::Finish),
        1 => any::<u8>().prop_map(OpGen::Cancel),
        1 => any::<u8>().prop_map(OpGen::Pause),
        1 => any::<u8>().prop_map(OpGen::Resume),
        1 => any::<u8>().prop_map(OpGen::NodeDown),
        1 => any::<u8>().prop_map(OpGen::NodeUp),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(n, g)| OpGen::GpuFault(n, g)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(n, g)| OpGen::GpuHealthy(n, g)),
        1 => any::<u8>().prop_map(OpGen::Unrecorded),
        1 => any::<u8>().prop_map(OpGen::Unkillable),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(n, c)| OpGen::Cordon(n, c)),
        1 => (any::<u8>(), 0u8..=6, 1u8..=6).prop_map(|(node, start_in, lasts)| OpGen::Window { node, start_in, lasts }),
    ]
}

/// The node and GPU index a generated GPU step names (a GPU the node has, when it has one).
fn gpu_of(w: &World, n: u8, g: u8) -> (String, u32) {
    let i = n as usize % w.nodes.len();
    (format!("n{i}"), u32::from(g) % u32::from(w.nodes[i].gpus.max(1)))
}

/// The `n`th running job (by id, modulo how many run) exits, 0 when `ok`; nothing if none runs.
pub(crate) fn exit_nth_running(s: &mut State, now_ms: u64, n: usize, ok: bool) -> Result<(), String> {
    let running: Vec<(JobId, u32)> =
        s.jobs().values().filter(|j| j.state == JobState::Running).map(|j| (j.id, j.attempt)).collect();
    if let Some(&(job, attempt)) = running.get(n % running.len().max(1)) {
        let exit_code = if ok { 0 } else { 1 };
        cmd(s, now_ms, Op::JobExited { job, attempt, exit_code }).map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(crate) fn cmd(
    state: &mut State,
    now_ms: u64,
    op: Op,
) -> Result<baton_model::command::Applied, baton_model::ApplyError> {
    state.apply(Command { now_ms, op })
}

/// What a generated job asks of the topology (decisions.md sections 3 and 10); the worlds
/// declare `[nvlink, rack]`, two NVLink domains per rack (`NVLINK_OF`).
const TOPOLOGIES: [Option<&str>; 7] = [
    None,
    None,
    Some("node"),
    Some("rack"),
    Some("required=nvlink"),
    Some("preferred=rack"),
    Some("required=rack,preferred=nvlink"),
];

/// Node `i`'s NVLink domain within its rack.
fn nvlink_of(i: usize) -> String {
    format!("x{}", i % 2)
}

pub(crate) fn configure(w: &World) -> State {
    let mut s = State::new();
    let settings = SchedulerSettings { reserve_after_ms: w.reserve_after.map(|t| u64::from(t) * 10_000) };
    cmd(&mut s, 0, Op::SetScheduler(settings)).expect("settings apply");
    for (i, n) in w.nodes.iter().enumerate() {
        let spec = NodeSpec {
            name: Name::lit(&format!("n{i}")),
            pool: Name::lit(&format!("p{}", n.pool)),
            rack: Some(Name::lit(&format!("r{}", n.rack))),
            labels: BTreeMap::new(),
            // CPUs in thousandths, as the state holds them (`to_yaml` writes them as `m`).
            resources: Resources::of(&[("gpu", u64::from(n.gpus)), ("cpu", u64::from(n.cpus) * 4)]),
            gpus: Vec::new(),
            agent_addr: String::new(),
        };
        cmd(&mut s, 0, Op::RegisterNode(spec)).expect("node registers");
    }
    let level = |l: &str| LevelName::new(l).expect("valid");
    cmd(&mut s, 0, Op::SetTopologyLevels(vec![level("nvlink"), level("rack")])).expect("levels apply");
    let domains = (0..w.nodes.len())
        .map(|i| (Name::lit(&format!("n{i}")), BTreeMap::from([(level("nvlink"), Name::lit(&nvlink_of(i)))])))
        .collect();
    cmd(&mut s, 0, Op::SetNodeDomains(domains)).expect("domains apply");
    cmd(&mut s, 0, Op::PutCohort(Cohort { name: Name::lit("org"), parent: None, fair_sharing: w.fair_sharing }))
        .unwrap();
    cmd(
        &mut s,
        0,
        Op::PutCohort(Cohort { name: Name::lit("team"), parent: Some(Name::lit("org")), fair_sharing: false }),
    )
    .unwrap();
    let pools: BTreeSet<u8> = w.nodes.iter().map(|n| n.pool).collect();
    for (i, q) in w.queues.iter().enumerate() {
        let mut spec = QueueSpec::named(&format!("q{i}"));
        spec.cohort = match q.cohort {
            0 => None,
            1 => Some(Name::lit("org")),
            _ => Some(Name::lit("team")),
        };
        for &p in &pools {
            let mut quota =
                PoolQuota { nominal: Resources::of(&[("gpu", u64::from(q.nominal_gpu))]), ..Default::default() };
            if let Some(b) = q.borrow_limit {
                quota.borrow_limit.insert("gpu".into(), u64::from(b));
            }
            if let Some(l) = q.lend_limit {
                quota.lend_limit.insert("gpu".into(), u64::from(l));
            }
            spec.quotas.insert(Name::lit(&format!("p{p}")), quota);
        }
        spec.weight = f64::from(q.weight);
        spec.preemption.within_queue = WithinQueue::ALL[q.within as usize];
        spec.preemption.reclaim_within_cohort = ReclaimWithinCohort::ALL[q.reclaim as usize];
        spec.preemption.borrow_within_cohort = q.bwc.map(|t| BorrowWithinCohort { max_priority_threshold: Some(t) });
        let name = spec.name.clone();
        cmd(&mut s, 0, Op::PutQueue(spec)).unwrap();
        if let Some(max) = q.max_per_user_gpu {
            let limit = Resources::of(&[("gpu", u64::from(max))]);
            cmd(&mut s, 0, Op::SetUserLimit { queue: name, limit }).expect("user limit applies");
        }
    }
    s
}

/// The `gpus` drawn that stands for a fraction of one shared GPU (decisions.md section 11).
const FRACTION_GPUS: u8 = 5;

/// A replica's request: `gpus` whole GPUs, or for `FRACTION_GPUS` a quarter, a half or three
/// quarters of one shared GPU (by `cpus`).
fn request(gpus: u8, cpus: u8) -> Resources {
    let mut r = Resources::of(&[("cpu", u64::from(cpus))]);
    let milli = if gpus == FRACTION_GPUS { 250 * (1 + u64::from(cpus) % 3) } else { u64::from(gpus) * 1000 };
    r.set_gpus_milli(milli);
    r
}

/// The minimum of a generated elastic gang: below its size, at least one.
fn elastic_min(op: &OpGen) -> Option<u32> {
    match *op {
        OpGen::Submit { replicas, elastic_min: Some(m), .. } if replicas > 1 => {
            Some(1 + u32::from(m) % u32::from(replicas - 1))
        }
        _ => None,
    }
}

/// The command that submits a generated job.
fn submit_op(spec: JobSpec, op: &OpGen) -> Op {
    match elastic_min(op) {
        Some(min_replicas) => Op::SubmitElastic {
            spec,
            elastic: ElasticSpec { task: 0, min_replicas },
            request_id: None,
            run_as: None,
            after: Vec::new(),
        },
        None => Op::Submit { spec, request_id: None },
    }
}

fn submit_spec(n: usize, w: &World, op: &OpGen) -> Option<JobSpec> {
    let OpGen::Submit { queue, class, replicas, gpus, cpus, mode, topology, min_runtime, time_limit, .. } = *op else {
        return None;
    };
    let classes = default_classes();
    let priority = if (class as usize) < classes.len() {
        PriorityRef::Class(classes[class as usize].name.clone())
    } else {
        PriorityRef::Value(60)
    };
    Some(JobSpec {
        name: Name::lit(&format!("j{n}")),
        queue: Name::lit(&format!("q{}", queue as usize % w.queues.len())),
        priority,
        tasks: vec![TaskSpec {
            name: Name::lit("main"),
            replicas: u32::from(replicas),
            resources: request(gpus, cpus),
            pools: None,
        }],
        pools: None,
        topology: TOPOLOGIES[topology as usize].and_then(|t| LevelNeed::parse(t).expect("valid")),
        preemption_mode: [
            PreemptionMode::Checkpoint,
            PreemptionMode::Requeue,
            PreemptionMode::Cancel,
            PreemptionMode::Suspend,
        ][mode as usize],
        grace_ms: 30_000,
        min_runtime_ms: if min_runtime { 15_000 } else { 0 },
        time_limit_ms: time_limit.map(|t| u64::from(t) * 10_000),
        command: Vec::new(),
        env: BTreeMap::new(),
        checkpoint_signal: None,
    })
}

/// Per (pool, kind): capacity, usage plus what lenders keep for themselves (a lend limit
/// below nominal), and what non-preemptible work uses above nominal.
fn sums(s: &State, p: usize, k: usize) -> (u64, u64, u64) {
    let l = s.ledger();
    let mut with_kept = 0u64;
    let mut np_excess = 0u64;
    for q in &l.queues {
        let unused = q.nominal[p][k].saturating_sub(q.usage[p][k]);
        let kept = unused.saturating_sub(q.lend_limit[p][k].min(q.nominal[p][k]));
        with_kept += q.usage[p][k] + kept;
        np_excess += q.np_usage[p][k].saturating_sub(q.nominal[p][k]);
    }
    (l.pools[p].capacity[k], with_kept, np_excess)
}

/// A decision that makes its queue borrow never takes what lenders keep, and never lets
/// non-preemptible work use more than the capacity no queue is guaranteed.
fn check_borrowing(before: &State, after: &State, job: JobId) -> Result<(), String> {
    let l = after.ledger();
    let j = after.job(job).unwrap();
    let q = l.queue(j.spec.queue.as_str()).unwrap();
    for p in 0..l.pools.len() {
        if l.pools[p].guaranteed.iter().zip(&l.pools[p].capacity).any(|(g, c)| g > c) {
            continue; // oversubscribed guarantees are honoured in order only
        }
        for k in 0..MAX_RESOURCE_KINDS {
            if !l.queues[q].borrowing_in(p, k) {
                continue;
            }
            let (cap, b_kept, b_np) = sums(before, p, k);
            let (_, a_kept, a_np) = sums(after, p, k);
            if b_kept <= cap && a_kept > cap && a_kept > b_kept {
                return Err(format!("{} borrowed quota a lender keeps: {a_kept} > {cap}", j.spec.name));
            }
            let unowned = cap.saturating_sub(l.pools[p].guaranteed[k]);
            if a_np > b_np && a_np > unowned {
                return Err(format!("non-preemptible {} borrowed guaranteed quota", j.spec.name));
            }
        }
    }
    Ok(())
}

/// Each victim of a preemption is needed: without it the job fits neither the nodes it was
/// planned on nor its quota.
fn check_minimal(before: &State, now_ms: u64, d: &Decision) -> Result<(), String> {
    let Decision::Preempt { job, victims, replicas, .. } = d else {
        return Ok(());
    };
    let j = before.job(*job).unwrap();
    let own = victims.iter().filter(|v| before.job(v.job).unwrap().spec.queue == j.spec.queue).count();
    if own > 0 && own < victims.len() {
        return Ok(()); // returning an own-queue victim can change which others are valid
    }
    let mut view = View::new(before, now_ms);
    // Reserved resources are not free for the preemptor (section 9), as in the cycle.
    let _ = crate::reserve::Holds::load(&mut view, &mut Plan::default());
    let needs = Needs::of(&view, j);
    let nodes: Vec<usize> = replicas
        .iter()
        .map(|r| view.ledger.node(r.node.as_str()).unwrap())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let pool_choice: Vec<usize> = (0..needs.tasks.len())
        .map(|t| {
            let r = replicas.iter().find(|r| r.task as usize == t).unwrap();
            view.ledger.nodes[view.ledger.node(r.node.as_str()).unwrap()].pool
        })
        .collect();
    let (q, np) = view.queue_np(j);
    for skip in victims {
        let removed: Vec<JobId> = victims.iter().map(|v| v.job).filter(|&v| v != skip.job).collect();
        let demand = needs.demand(&pool_choice);
        let quota_ok = view.ledger.without(removed.iter().copied(), |l| l.check_admission(q, &demand, np).is_ok());
        let set = SetNodes::new(&view, *job, &removed, &nodes);
        if quota_ok && pack(&set, &needs, &pool_choice).is_some() {
            return Err(format!(
                "preempting for {} did not need victim {}",
                j.spec.name,
                before.job(skip.job).unwrap().spec.name
            ));
        }
    }
    Ok(())
}

/// docs/policy.md section 4's gate: a job whose own request exceeds its queue's nominal in a
/// (pool, kind) where it lacks room (the pool has less free than it asks, or its queue's
/// limits stop it there) preempts nothing, not even in its own queue, unless borrowing
/// within the cohort or fair sharing lets it borrow.
fn check_gate(before: &State, d: &Decision) -> Result<(), String> {
    let Decision::Preempt { job, replicas, .. } = d else {
        return Ok(());
    };
    let j = before.job(*job).unwrap();
    let l = before.ledger();
    let q = l.queue(j.spec.queue.as_str()).unwrap();
    if l.queues[q].fair_sharing || before.queues()[&j.spec.queue].preemption.borrow_within_cohort.is_some() {
        return Ok(());
    }
    let demand = demand_of(l, &before.shares(j, replicas));
    let mut free = vec![ZERO; l.pools.len()];
    for n in l.nodes.iter().filter(|n| n.schedulable) {
        add(&mut free[n.pool], &n.free);
    }
    let quota_stop = l.check_admission(q, &demand, !j.preemptible).err().map(|b| match b {
        QuotaBlock::BorrowLimit { pool, kind, .. }
        | QuotaBlock::NotPreemptible { pool, kind, .. }
        | QuotaBlock::NoLendable { pool, kind, .. } => (pool, kind),
    });
    for (p, asked) in &demand {
        for k in 0..MAX_RESOURCE_KINDS {
            let lacks = asked[k] > free[*p][k] || quota_stop == Some((*p, k));
            let nominal = l.queues[q].nominal[*p][k];
            if lacks && asked[k] > nominal {
                return Err(format!(
                    "{} preempted though it lacks room in {} of pool {} and asks for {} there, above its queue's nominal {nominal}",
                    j.spec.name,
                    l.kinds.name(k),
                    l.pools[*p].name,
                    asked[k]
                ));
            }
        }
    }
    Ok(())
}

/// Applies a plan one decision at a time, checking each against the state it meets.
fn apply_checked(s: &mut State, now_ms: u64, plan: &Plan) -> Result<(), String> {
    for d in &plan.decisions {
        let before = s.clone();
        check_minimal(&before, now_ms, d)?;
        check_gate(&before, d)?;
        let one = Plan { based_on: plan.based_on, decisions: vec![d.clone()] };
        let applied = cmd(s, now_ms, Op::ApplyPlan(one)).map_err(|e| e.to_string())?;
        if let Outcome::PlanApplied { rejected, .. } = &applied.outcome
            && !rejected.is_empty()
        {
            return Err(format!(
                "apply refused the scheduler's {} of {}: {rejected:?}",
                d.kind(),
                before.job(d.job()).unwrap().spec.name
            ));
        }
        for e in &applied.events {
            if let EventKind::Preempted { .. } = e.kind {
                let v = s.job_by_name(e.job.as_ref().unwrap().as_str()).unwrap();
                if !v.preemptible {
                    return Err(format!("non-preemptible {} was preempted", v.spec.name));
                }
            }
        }
        if matches!(d, Decision::Place { .. } | Decision::Preempt { .. }) {
            check_borrowing(&before, s, d.job())?;
        }

        check_state(s)?;
    }
    Ok(())
}

/// Cycles until nothing changes; victims stop at once (with a checkpoint). With `linger`,
/// it returns right after victims stopped, before the cycle that places their preemptor.
pub(crate) fn settle(s: &mut State, now_ms: u64, linger: bool) -> Result<(), String> {
    for _ in 0..200 {
        crate::preempt::on_nodes_agree(&View::new(s, now_ms))?;
        let (plan, planned) = crate::cycle::decide_all(s, now_ms);
        if plan != cycle(s, now_ms) {
            return Err("the same state gave two different plans".into());
        }
        // Never partial: a preemptor whose victims have all stopped is placed at once,
        // unless a node of its reservation takes no new work now (it waits, saying so).
        for (id, r) in s.reservations() {
            let placed = plan.decisions.iter().any(|d| matches!(d, Decision::Place { job, .. } if job == id));
            if !placed && !held_by_completing(s, &r.replicas) && !on_closed_node(s, now_ms, *id, &r.replicas) {
                let j = s.job(*id).unwrap();
                return Err(format!("{} preempted others and is not placed: {}", j.spec.name, j.reason));
            }
        }
        if plan.decisions.is_empty() {
            return Ok(());
        }
        apply_checked(s, now_ms, &plan)?;
        // The scheduler changed its copy of the ledger as `apply` would: the same usage.
        if planned.usage_parts() != s.ledger().usage_parts() {
            return Err(format!(
                "queue usage as the cycle left it differs from the state's after its plan:\n{:?}\n{:?}",
                planned.queues,
                s.ledger().queues
            ));
        }
        let stopping: Vec<(JobId, u32)> =
            s.jobs().values().filter(|j| j.state == JobState::Preempting).map(|j| (j.id, j.attempt)).collect();
        let stopped = !stopping.is_empty();
        for (job, attempt) in stopping {
            cmd(s, now_ms, Op::JobStopped { job, attempt, checkpointed: true }).map_err(|e| e.to_string())?;
            check_state(s)?;
        }
        if linger && stopped {
            return Ok(());
        }
    }
    Err("no steady state after 200 cycles".into())
}

/// Ranks of an ended attempt, not yet reported gone, hold part of a node the replicas are on:
/// a preemptor reserved there waits for them even once its victims have stopped.
fn held_by_completing(s: &State, replicas: &[baton_model::alloc::ReplicaAlloc]) -> bool {
    let on = |node: &Name| replicas.iter().any(|r| r.node == *node);
    s.all_completing().values().any(|c| c.ranks.values().any(|r| on(&r.node)))
}

/// Job `j{i % submitted}`'s process survived SIGKILL: a rank of it being stopped if it has
/// one, else rank 0 of its running attempt.
fn report_unkillable(s: &mut State, now_ms: u64, submitted: usize, i: u8) -> Result<(), String> {
    let Some(j) = s.job_by_name(&format!("j{}", i as usize % submitted.max(1))) else { return Ok(()) };
    let (job, attempt, active) = (j.id, j.attempt, j.state.is_active());
    let completing =
        s.completing(job).and_then(|c| c.ranks.iter().next().map(|(r, a)| (c.attempt, *r, a.node.clone())));
    let running = || active.then(|| j.ranked().first().map(|a| (attempt, 0, a.node.clone()))).flatten();
    let Some((attempt, rank, node)) = completing.or_else(running) else { return Ok(()) };
    let reason = "still in D state after SIGKILL".to_string();
    let o = baton_model::command::Observed::Unkillable { job, attempt, rank, reason };
    cmd(s, now_ms, Op::Report { node, observations: vec![o] }).map_err(|e| e.to_string())?;
    check_state(s)
}

/// The window a generated `Window` step creates, at `now_ms` (each window is named by its
/// start, so two steps at different times never collide).
fn window_spec(w: &World, now_ms: u64, op: &OpGen) -> baton_model::maintenance::WindowSpec {
    let OpGen::Window { node, start_in, lasts } = *op else { unreachable!("a window step") };
    let start_ms = now_ms + u64::from(start_in) * 10_000;
    baton_model::maintenance::WindowSpec {
        name: Name::lit(&format!("w{}", now_ms / 1_000)),
        nodes: vec![Name::lit(&format!("n{}", node as usize % w.nodes.len()))],
        start_ms,
        end_ms: start_ms + u64::from(lasts.max(1)) * 10_000,
    }
}

/// A node the replicas are on takes no new work for `job` (cordoned, lost, taken out, in a
/// maintenance window, or closed to it by one ahead).
fn on_closed_node(s: &State, now_ms: u64, job: JobId, replicas: &[baton_model::alloc::ReplicaAlloc]) -> bool {
    let job = s.job(job).expect("a preemptor exists");
    let in_window = |node: &Name| s.windows().values().any(|w| w.holds(node) && (w.active || w.closes_to(job, now_ms)));
    replicas.iter().any(|r| s.nodes().get(&r.node).is_none_or(|n| !n.schedulable()) || in_window(&r.node))
}

/// Reports every completing rank stopped, one report per node, as its agent would.
pub(crate) fn complete_all(s: &mut State, now_ms: u64) -> Result<(), String> {
    let mut by_node: BTreeMap<Name, Vec<baton_model::command::Observed>> = BTreeMap::new();
    for (&job, c) in s.all_completing() {
        for (&rank, r) in &c.ranks {
            let o = baton_model::command::Observed::Stopped { job, attempt: c.attempt, rank, checkpointed: false };
            by_node.entry(r.node.clone()).or_default().push(o);
        }
    }
    for (node, observations) in by_node {
        match cmd(s, now_ms, Op::Report { node, observations }).map_err(|e| e.to_string())?.outcome {
            baton_model::command::Outcome::Reported { ignored } if ignored.is_empty() => {}
            other => return Err(format!("completing ranks not released: {other:?}")),
        }
    }
    check_state(s)
}

pub(crate) fn run(w: &World) -> Result<State, String> {
    let mut s = configure(w);
    let mut submitted = 0usize;
    let mut now_ms = 0;
    for op in &w.ops {
        now_ms += 10_000;
        apply_op(&mut s, w, &mut submitted, now_ms, op)?;
        settle(&mut s, now_ms, w.linger)?;
    }
    Ok(s)
}

/// Applies one generated operation (`submitted` counts the jobs so far) and stops at once
/// what it set stopping.
pub(crate) fn apply_op(s: &mut State, w: &World, submitted: &mut usize, now_ms: u64, op: &OpGen) -> Result<(), String> {
    // A rank being stopped may be the one that survives SIGKILL: reported before the others.
    if let OpGen::Unkillable(i) = op {
        report_unkillable(s, now_ms, *submitted, *i)?;
    }
    // The ranks the previous operation left completing have been stopped by now: the
    // cycles in between ran with their GPUs held.
    complete_all(s, now_ms)?;
    // A window that started or ended meanwhile is moved on, as the leader's Tick does.
    if s.window_due(now_ms) {
        cmd(s, now_ms, Op::Tick).map_err(|e| e.to_string())?;
        check_state(s)?;
    }
    {
        let n = *submitted;
        let pick = |i: u8| Name::lit(&format!("j{}", i as usize % n.max(1)));
        let result = match op {
            OpGen::Submit { .. } => {
                let spec = submit_spec(n, w, op).unwrap();
                *submitted += 1;
                cmd(s, now_ms, submit_op(spec, op)).map(drop)
            }
            _ if n == 0 => Ok(()),
            OpGen::Finish(i) => match s.job_by_name(pick(*i).as_str()) {
                Some(j) if j.state.is_active() => {
                    let (job, attempt) = (j.id, j.attempt);
                    cmd(s, now_ms, Op::JobExited { job, attempt, exit_code: 0 }).map(drop)
                }
                _ => Ok(()),
            },
            OpGen::Cancel(i) | OpGen::Pause(i) | OpGen::Resume(i) => match s.job_by_name(pick(*i).as_str()) {
                Some(j) => {
                    let job = j.id;
                    let op = match op {
                        OpGen::Cancel(_) => Op::Cancel { job },
                        OpGen::Pause(_) => Op::Pause { job },
                        _ => Op::Resume { job },
                    };
                    cmd(s, now_ms, op).map(drop)
                }
                None => Ok(()),
            },
            OpGen::NodeDown(i) => {
                let node = Name::lit(&format!("n{}", *i as usize % w.nodes.len()));
                cmd(s, now_ms, Op::SetNodeStatus { node, status: NodeStatus::Lost }).map(drop)
            }
            OpGen::NodeUp(i) => {
                let node = Name::lit(&format!("n{}", *i as usize % w.nodes.len()));
                cmd(s, now_ms, Op::SetNodeStatus { node, status: NodeStatus::Ready }).map(drop)
            }
            OpGen::GpuFault(n, g) | OpGen::GpuHealthy(n, g) => {
                let (node, gpu) = gpu_of(w, *n, *g);
                let fault = matches!(op, OpGen::GpuFault(..)).then(|| "XID 79".to_string());
                cmd(s, now_ms, Op::SetGpuHealth { node: Name::lit(&node), gpu, fault }).map(drop)
            }
            OpGen::Unrecorded(i) => match s.job_by_name(pick(*i).as_str()) {
                Some(j) if j.state.is_active() && !j.replicas.is_empty() => {
                    let node = j.ranked()[0].node.clone();
                    let reason = "no space left on device".to_string();
                    let o =
                        baton_model::command::Observed::Unrecorded { job: j.id, attempt: j.attempt, rank: 0, reason };
                    cmd(s, now_ms, Op::Report { node, observations: vec![o] }).map(drop)
                }
                _ => Ok(()),
            },
            OpGen::Cordon(i, cordoned) => {
                let node = Name::lit(&format!("n{}", *i as usize % w.nodes.len()));
                cmd(s, now_ms, Op::Cordon { node, cordoned: *cordoned }).map(drop)
            }
            OpGen::Window { .. } => cmd(s, now_ms, Op::CreateMaintenance(window_spec(w, now_ms, op))).map(drop),
            OpGen::Unkillable(_) => Ok(()),
        };
        // Refusals (an impossible job, pausing a finished one) are fine; they change nothing.
        let _ = result;
        check_state(s)?;
        // A paused job stops at once too.
        let stopping: Vec<(JobId, u32)> =
            s.jobs().values().filter(|j| j.state == JobState::Preempting).map(|j| (j.id, j.attempt)).collect();
        for (job, attempt) in stopping {
            cmd(s, now_ms, Op::JobStopped { job, attempt, checkpointed: true }).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(96), max_shrink_iters: 4000, ..ProptestConfig::default() })]

    #[test]
    fn scheduling_keeps_every_invariant(w in world()) {
        let first = run(&w);
        prop_assert!(first.is_ok(), "{}\nreplay with `baton sim`:\n{}", first.as_ref().unwrap_err(), to_yaml(&w));

        let first = first.unwrap();
        // Same input, byte-identical result; and the state survives a round trip.
        let again = run(&w).unwrap();
        let (a, b) = (serde_json::to_string(&first).unwrap(), serde_json::to_string(&again).unwrap());
        prop_assert_eq!(&a, &b);
        let restored: State = serde_json::from_str(&a).unwrap();
        prop_assert!(restored == first);
        prop_assert_eq!(restored.ledger().digest(), first.ledger().digest());
    }
}

/// `PROPTEST_CASES` overrides the default number of cases (CI keeps the default).
pub(crate) fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The world as a scenario file, so a failure can be replayed with `baton sim`.
pub(crate) fn to_yaml(w: &World) -> String {
    let reserve_after = w.reserve_after.map_or("never".to_string(), |t| (u32::from(t) * 10).to_string());
    let mut y = format!("scheduler: {{reserve_after: {reserve_after}}}\ntopology_levels: [nvlink, rack]\nnodes:\n");
    if w.linger {
        // A scenario's victims stop and their preemptors start in one step: the replay may
        // not fail where the test did.
        y.insert_str(0, "# linger: each preemptor was placed one operation after its victims stopped\n");
    }
    for (i, n) in w.nodes.iter().enumerate() {
        y += &format!(
            "  - {{name: n{i}, pool: p{}, topology: {{nvlink: {}, rack: r{}}}, resources: {{gpu: {}, cpu: {}m}}}}\n",
            n.pool,
            nvlink_of(i),
            n.rack,
            n.gpus,
            u32::from(n.cpus) * 4
        );
    }
    y += &format!(
        "cohorts:\n  - {{name: org, fair_sharing: {}}}\n  - {{name: team, parent: org}}\nqueues:\n",
        w.fair_sharing
    );
    let pools: BTreeSet<u8> = w.nodes.iter().map(|n| n.pool).collect();
    for (i, q) in w.queues.iter().enumerate() {
        let cohort = ["", "cohort: org, ", "cohort: team, "][q.cohort as usize];
        let quotas: Vec<String> = pools
            .iter()
            .map(|p| {
                let mut s = format!("{{pool: p{p}, nominal: {{gpu: {}}}", q.nominal_gpu);
                if let Some(b) = q.borrow_limit {
                    s += &format!(", borrow_limit: {{gpu: {b}}}");
                }
                if let Some(l) = q.lend_limit {
                    s += &format!(", lend_limit: {{gpu: {l}}}");
                }
                s + "}"
            })
            .collect();
        // The model's words, as a person writes them in a scenario.
        let within = WithinQueue::ALL[q.within as usize].word();
        let reclaim = ReclaimWithinCohort::ALL[q.reclaim as usize].word();
        let bwc =
            q.bwc.map_or("Never".to_string(), |t| format!("{{policy: LowerPriority, max_priority_threshold: {t}}}"));
        let per_user = q.max_per_user_gpu.map_or(String::new(), |m| format!(", max_per_user: {{gpu: {m}}}"));
        y += &format!(
            "  - {{name: q{i}, {cohort}weight: {}, quotas: [{}]{per_user}, preemption: {{within_queue: {within}, reclaim_within_cohort: {reclaim}, borrow_within_cohort: {bwc}}}}}\n",
            q.weight,
            quotas.join(", ")
        );
    }
    y += "timeline:\n";
    // Submissions the cluster refuses are left out, with the steps that name them.
    let cluster = configure(w);
    let mut refused = BTreeSet::new();
    let mut submitted = 0usize;
    for (t, op) in w.ops.iter().enumerate() {
        let at = (t + 1) * 10;
        let pick = |i: u8| format!("j{}", i as usize % submitted.max(1));
        let step = match op {
            OpGen::Submit { .. } => {
                let spec = submit_spec(submitted, w, op).unwrap();
                submitted += 1;
                // An elastic gang is judged at its minimum, as `apply` judges it.
                let mut judged = spec.clone();
                if let Some(m) = elastic_min(op) {
                    judged.tasks[0].replicas = m;
                }
                if cluster.validate_submit(&judged).is_err() {
                    refused.insert(spec.name.to_string());
                    continue;
                }
                let prio = match &spec.priority {
                    PriorityRef::Class(c) => c.to_string(),
                    PriorityRef::Value(v) => v.to_string(),
                };
                let t = &spec.tasks[0];
                let topo = spec.topology.map_or(String::new(), |t| match (t.required(), t.preferred()) {
                    (Some(r), Some(p)) => format!(", topology: {{required: {r}, preferred: {p}}}"),
                    (None, Some(p)) => format!(", topology: {{preferred: {p}}}"),
                    _ => format!(", topology: {}", t.text()),
                });
                let mut limit = spec.time_limit_ms.map_or(String::new(), |t| format!(", time_limit: {}", t / 1000));
                if let Some(m) = elastic_min(op) {
                    limit.push_str(&format!(", min_replicas: {m}"));
                }
                format!(
                    "submit: {{name: {}, queue: {}, priority: {prio}, replicas: {}, resources: {{gpu: {}, cpu: {}m}}, preemption_mode: {}, min_runtime: {}{topo}{limit}}}",
                    spec.name,
                    spec.queue,
                    t.replicas,
                    baton_model::quantity::thousandths(t.resources.gpus_milli()),
                    t.resources.get("cpu"),
                    format!("{:?}", spec.preemption_mode).to_lowercase(),
                    spec.min_runtime_ms / 1000
                )
            }
            _ if submitted == 0 => continue,
            OpGen::Finish(i) | OpGen::Cancel(i) | OpGen::Pause(i) | OpGen::Resume(i) if refused.contains(&pick(*i)) => {
                continue;
            }
            OpGen::Finish(i) => format!("finish: {}", pick(*i)),
            OpGen::Cancel(i) => format!("cancel: {}", pick(*i)),
            OpGen::Pause(i) => format!("pause: {}", pick(*i)),
            OpGen::Resume(i) => format!("resume: {}", pick(*i)),

            OpGen::NodeDown(i) => format!("node_down: n{}", *i as usize % w.nodes.len()),
            OpGen::NodeUp(i) => format!("node_up: n{}", *i as usize % w.nodes.len()),
            // A node without GPUs refuses the step, and a file names only GPUs that exist.
            OpGen::GpuFault(n, _) | OpGen::GpuHealthy(n, _) if w.nodes[*n as usize % w.nodes.len()].gpus == 0 => {
                continue;
            }
            OpGen::GpuFault(n, g) => {
                let (node, gpu) = gpu_of(w, *n, *g);
                format!("gpu_unhealthy: {{node: {node}, gpu: {gpu}, error: XID 79}}")
            }
            OpGen::GpuHealthy(n, g) => {
                let (node, gpu) = gpu_of(w, *n, *g);
                format!("gpu_healthy: {{node: {node}, gpu: {gpu}}}")
            }
            OpGen::Cordon(i, c) => {
                format!("{}: n{}", if *c { "cordon" } else { "uncordon" }, *i as usize % w.nodes.len())
            }
            OpGen::Window { .. } => {
                let spec = window_spec(w, at as u64 * 1_000, op);
                format!(
                    "maintenance: {{name: {}, nodes: \"{}\", start: {}, end: {}}}",
                    spec.name,
                    spec.nodes[0],
                    spec.start_ms / 1_000,
                    spec.end_ms / 1_000
                )
            }
            // A scenario has no step for an agent's report: the replay differs from here on.
            OpGen::Unrecorded(i) => {
                y += &format!("  # at {at}: the agent of {}'s rank 0 could not record its start\n", pick(*i));
                continue;
            }
            OpGen::Unkillable(i) => {
                y += &format!("  # at {at}: a process of {} survived SIGKILL\n", pick(*i));
                continue;
            }
        };
        y += &format!("  - {{at: {at}, {step}}}\n");
    }
    y
}
