//! What each node should be running, computed from the replicated state alone: the agent
//! protocol is declarative, so a new leader only has to compute this again and send it.
//!
//! A pure function of `&State`, tested without any IO.

use std::collections::BTreeMap;

use baton_model::State;
use baton_model::alloc::ReplicaAlloc;
use baton_model::job::{Job, JobState, PreemptionMode, StopWhy};
use baton_model::name::Name;
use baton_proto::v1::{Action, Assignment};

/// Every node with something to run, stop or keep suspended, and its assignments ordered
/// by (job id, rank). Nodes without work are absent (their agents get an empty directive).
///
/// The ranks of an ended attempt that are completing (not reported gone yet) are sent as
/// STOP with the job's grace: the agent stops each (or reports one it never ran as stopped),
/// and its report frees the rank's GPUs in the model.
pub fn desired(state: &State) -> BTreeMap<Name, Vec<Assignment>> {
    let mut out: BTreeMap<Name, Vec<Assignment>> = BTreeMap::new();
    for job in state.jobs().values() {
        if let Some(action) = action(job) {
            // The granted grace as a duration: the agent counts it from when it first acts
            // on the stop, so no leader's clock (nor a failover) shortens it.
            let grace_ms = job.stopping.map_or(0, |s| s.deadline_ms.saturating_sub(s.requested_ms));
            // The model's rank order: its gang rules check reports against it.
            let replicas = job.ranked();
            let world_size = replicas.len() as u32;
            for (rank, r) in replicas.into_iter().enumerate() {
                let a = assignment(state, job, (job.attempt, rank as u32, world_size), r, action, grace_ms);
                out.entry(r.node.clone()).or_default().push(a);
            }
        } else if let Some(c) = state.completing(job.id) {
            let world_size = job.spec.replica_count();
            for (&rank, r) in &c.ranks {
                let a = assignment(state, job, (c.attempt, rank, world_size), r, Action::Stop, job.spec.grace_ms);
                out.entry(r.node.clone()).or_default().push(a);
            }
        }
    }
    out
}

/// One rank's assignment; `at` is (attempt, rank, world size).
fn assignment(
    state: &State,
    job: &Job,
    at: (u32, u32, u32),
    r: &ReplicaAlloc,
    action: Action,
    grace_ms: u64,
) -> Assignment {
    let (attempt, rank, world_size) = at;
    let (suspension_by, suspension_ms) = suspension(job, action).unwrap_or_default();
    Assignment {
        job_id: job.id,
        job: job.spec.name.to_string(),
        attempt,
        task: r.task,
        replica: r.index,
        rank,
        world_size,
        action: action as i32,
        gpus: r.gpus.clone(),
        command: job.spec.command.clone(),
        env: job.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        checkpoint_signal: job
            .spec
            .checkpoint_signal
            .clone()
            .unwrap_or_else(|| baton_proto::DEFAULT_CHECKPOINT_SIGNAL.into()),
        grace_ms,
        resume: job.has_checkpoint,
        resume_if_checkpointed: resume_if_checkpointed(job, attempt),
        run_as: state.tenancy().run_as(job.id).map(|u| u.to_string()).unwrap_or_default(),
        awaiting_suspended: awaiting_suspended(job, action, rank),
        memory_bytes: asked(job, r.task, "memory"),
        cpu_millis: asked(job, r.task, baton_model::quantity::CPU),
        suspension_by,
        suspension_ms,
        slices: slices_asked(job, r.task),
        gpu_milli: job.spec.tasks.get(r.task as usize).map_or(0, |t| t.resources.gpu_fraction() as u32),
    }
}

/// The MIG slices one replica of task `task` asked for, by profile.
fn slices_asked(job: &Job, task: u32) -> std::collections::HashMap<String, u32> {
    let Some(t) = job.spec.tasks.get(task as usize) else { return Default::default() };
    // A count is bounded by a node's slices, far below u32::MAX (MAX_QUANTITY clips it).
    t.resources.slices().map(|(p, n)| (p.to_string(), u32::try_from(n).unwrap_or(u32::MAX))).collect()
}

/// The suspension in progress a SUSPEND is part of: its preemptor and when it was decided,
/// which the agent's report of it names (`Observed::Suspended`).
fn suspension(job: &Job, action: Action) -> Option<(u64, u64)> {
    let stopping = job.stopping.filter(|_| action == Action::Suspend && job.state == JobState::Preempting)?;
    match stopping.why {
        StopWhy::Preempted { by, mode: PreemptionMode::Suspend } => Some((by, stopping.requested_ms)),
        _ => None,
    }
}

/// What one replica of task `task` asked for of `resource`, in the resource's smallest unit
/// (bytes of memory, thousandths of a CPU): what its agent limits it to.
fn asked(job: &Job, task: u32, resource: &str) -> u64 {
    job.spec.tasks.get(task as usize).map_or(0, |t| t.resources.get(resource))
}

/// Whether the agent should look for a checkpoint the leader was never told of: docs/policy.md
/// says a job whose node is lost resumes from its newest complete checkpoint, and a node cut
/// off or stalled saves its replicas as its lease runs out, before the node is declared lost,
/// with no report to say so. A first attempt has nothing to resume; a job in mode requeue
/// starts over by choice.
fn resume_if_checkpointed(job: &Job, attempt: u32) -> bool {
    !job.has_checkpoint && attempt > 1 && job.spec.preemption_mode != PreemptionMode::Requeue
}

/// A suspension in progress whose `rank` has not been reported suspended yet. The agent
/// answers such a SUSPEND also when it holds the replica suspended already: it may have
/// missed a resume in place since the suspension it reported
/// (`tests::a_suspend_awaits_the_ranks_report_only_while_the_suspension_is_in_progress`).
fn awaiting_suspended(job: &Job, action: Action, rank: u32) -> bool {
    action == Action::Suspend && job.state == JobState::Preempting && !job.ended_ranks.contains_key(&rank)
}

/// What the agents should do with a job's processes; `None`: nothing may run.
fn action(job: &Job) -> Option<Action> {
    match job.state {
        JobState::Running => Some(Action::Run),
        JobState::Suspended => Some(Action::Suspend),
        JobState::Preempting => match job.stopping.map(|s| s.why) {
            Some(StopWhy::Preempted { mode: PreemptionMode::Suspend, .. }) => Some(Action::Suspend),
            _ => Some(Action::Stop),
        },
        JobState::Pending | JobState::Paused | JobState::Succeeded | JobState::Failed | JobState::Cancelled => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_model::command::{Command, Observed, Op};
    use baton_model::fixture::{self, gpu_job, gpu_node};
    use baton_model::job::TaskSpec;
    use baton_model::job::{JobSpec, PriorityRef};
    use baton_model::node::NodeSpec;
    use baton_model::plan::{Decision, Plan, Victim};
    use baton_model::queue::{PoolQuota, QueueSpec};
    use baton_model::resources::Resources;

    fn apply_at(s: &mut State, now_ms: u64, op: Op) {
        s.apply(Command { now_ms, op }).expect("the command applies");
    }

    fn apply(s: &mut State, op: Op) {
        let now_ms = s.now_ms() + 1_000;
        apply_at(s, now_ms, op);
    }

    /// Two 4-GPU nodes, a queue owning all 8 GPUs, and a two-replica job of 4 GPUs each
    /// placed by a real cycle: one replica per node.
    fn running_gang() -> (State, u64) {
        let mut s = State::default();
        apply_at(&mut s, 1_000, Op::RegisterNodes(vec![gpu_node("n1", 4), gpu_node("n2", 4)]));
        apply_at(&mut s, 1_000, Op::PutQueue(fixture::gpu_queue("q", 8)));
        let mut spec = gpu_job("gang", "q", 4);
        spec.tasks = vec![TaskSpec { replicas: 2, ..spec.tasks[0].clone() }];
        spec.grace_ms = 7_000;
        apply_at(&mut s, 2_000, Op::Submit { spec, request_id: None });
        let plan = baton_sched::cycle(&s, 2_000);
        apply_at(&mut s, 2_000, Op::ApplyPlan(plan));
        let id = s.job_by_name("gang").expect("submitted").id;
        assert_eq!(s.jobs()[&id].state, JobState::Running);
        (s, id)
    }

    #[test]
    fn a_running_gang_is_one_ranked_run_per_replica_on_its_nodes() {
        let (s, id) = running_gang();
        let d = desired(&s);
        assert_eq!(d.keys().map(|n| n.as_str()).collect::<Vec<_>>(), ["n1", "n2"]);
        let all: Vec<&Assignment> = d.values().flatten().collect();
        let mut ranks: Vec<u32> = all.iter().map(|a| a.rank).collect();
        ranks.sort();
        assert_eq!(ranks, [0, 1]);
        for a in all {
            assert_eq!((a.job_id, a.attempt, a.world_size), (id, 1, 2));
            assert_eq!(a.action, Action::Run as i32);
            assert_eq!(a.gpus.len(), 4);
            assert_eq!(a.checkpoint_signal, baton_proto::DEFAULT_CHECKPOINT_SIGNAL);
            assert_eq!((a.grace_ms, a.resume, a.run_as.as_str()), (0, false, ""), "no stop, no checkpoint, no token");
        }
    }

    /// Each rank carries what its own task asked for, so its agent can hold it to that: a
    /// head of 2 CPUs and 1 GiB, workers of 8 CPUs and 64 GiB; a task that names no memory
    /// gets no limit (0).
    #[test]
    fn each_rank_carries_its_tasks_cpu_and_memory() {
        let gib = 1u64 << 30;
        let mut s = State::default();
        let node = |n: &str| NodeSpec {
            resources: Resources::of(&[("cpu", 64_000), ("memory", 512 * gib)]),
            ..gpu_node(n, 0)
        };
        apply(&mut s, Op::RegisterNodes(vec![node("n1"), node("n2")]));
        apply(&mut s, Op::PutQueue(QueueSpec::named("q")));
        let mut spec = gpu_job("hetero", "q", 0);
        let task = |name: &str, replicas: u32, r: &[(&str, u64)]| TaskSpec {
            name: baton_model::name::Name::lit(name),
            replicas,
            resources: Resources::of(r),
            pools: None,
        };
        spec.tasks = vec![
            task("head", 1, &[("cpu", 2_000), ("memory", gib)]),
            task("worker", 2, &[("cpu", 8_000), ("memory", 64 * gib)]),
            task("side", 1, &[("cpu", 500)]),
        ];
        apply(&mut s, Op::Submit { spec, request_id: None });
        let now = s.now_ms();
        let plan = baton_sched::cycle(&s, now);
        apply(&mut s, Op::ApplyPlan(plan));
        let mut asked: Vec<(u32, u64, u64)> =
            desired(&s).values().flatten().map(|a| (a.task, a.cpu_millis, a.memory_bytes)).collect();
        asked.sort();
        assert_eq!(asked, [(0, 2_000, gib), (1, 8_000, 64 * gib), (1, 8_000, 64 * gib), (2, 500, 0)]);
    }

    /// Each rank carries the MIG slices its task asked for, by profile (decisions.md section
    /// 11): its agent picks which slices; nothing else of the task's resources is listed.
    #[test]
    fn each_rank_carries_the_slices_its_task_asked_for() {
        let mut s = State::default();
        let node = NodeSpec { resources: Resources::of(&[("mig-1g.10gb", 7), ("cpu", 8_000)]), ..gpu_node("m1", 0) };
        apply(&mut s, Op::RegisterNodes(vec![node]));
        apply(&mut s, Op::PutQueue(QueueSpec::named("q")));
        let mut spec = gpu_job("infer", "q", 0);
        spec.tasks[0].resources = Resources::of(&[("mig-1g.10gb", 3), ("cpu", 1_000)]);
        spec.tasks[0].replicas = 2;
        apply(&mut s, Op::Submit { spec, request_id: None });
        let now = s.now_ms();
        let plan = baton_sched::cycle(&s, now);
        apply(&mut s, Op::ApplyPlan(plan));
        let all: Vec<Assignment> = desired(&s).into_values().flatten().collect();
        assert_eq!(all.len(), 2);
        for a in all {
            assert_eq!(a.slices, std::collections::HashMap::from([("mig-1g.10gb".to_string(), 3)]));
            assert!(a.gpus.is_empty());
        }
    }

    /// A job whose node was lost resumes from its newest complete checkpoint (docs/policy.md),
    /// also one no report told the leader of: its next attempts ask the agent to look.
    #[test]
    fn a_later_attempt_without_a_known_checkpoint_asks_the_agent_to_look_for_one() {
        let (s, id) = running_gang();
        let mut job = s.jobs()[&id].clone();
        assert!(!resume_if_checkpointed(&job, 1), "a first attempt has nothing to resume");
        assert!(resume_if_checkpointed(&job, 2));
        job.has_checkpoint = true;
        assert!(!resume_if_checkpointed(&job, 2), "resume says it already");
        job.has_checkpoint = false;
        job.spec.preemption_mode = PreemptionMode::Requeue;
        assert!(!resume_if_checkpointed(&job, 2), "mode requeue starts over");
    }

    #[test]
    fn a_pausing_job_is_told_to_stop_with_its_grace_as_a_duration() {
        let (mut s, id) = running_gang();
        apply_at(&mut s, 50_000, Op::Pause { job: id });
        let d = desired(&s);
        let all: Vec<&Assignment> = d.values().flatten().collect();
        assert_eq!(all.len(), 2);
        for a in all {
            assert_eq!(a.action, Action::Stop as i32);
            assert_eq!(a.grace_ms, 7_000, "the grace, not a deadline on the leader's clock");
        }
    }

    /// One CPU on n1, a queue owning it, and job `name` of one replica of one CPU in mode
    /// suspend at `priority`.
    fn cpu_job(s: &mut State, name: &str, priority: i32) -> u64 {
        let spec = JobSpec {
            priority: PriorityRef::Value(priority),
            preemption_mode: PreemptionMode::Suspend,
            tasks: vec![TaskSpec { resources: Resources::of(&[("cpu", 1)]), ..gpu_job(name, "q", 0).tasks[0].clone() }],
            ..gpu_job(name, "q", 0)
        };
        apply(s, Op::Submit { spec, request_id: None });
        s.job_by_name(name).expect("submitted").id
    }

    fn decide(s: &mut State, d: Decision) {
        apply(s, Op::ApplyPlan(Plan { based_on: s.applied(), decisions: vec![d] }));
    }

    fn the_one_on_n1(s: &State) -> Assignment {
        let d = desired(s);
        let [a] = d[&Name::lit("n1")].as_slice() else { panic!("one assignment on n1: {d:?}") };
        a.clone()
    }

    /// Found by a chaos run with leader kills (chaos/README.md, "Found so far"): `low`
    /// suspended in place for `high`, resumed in place once `high` ended, and suspended
    /// again for `urgent` before its agent saw the resume. Each SUSPEND
    /// of a suspension in progress says the leader awaits the rank's report; that of a
    /// suspension recorded does not, so an agent that holds the replica suspended answers
    /// the second suspension and only it.
    #[test]
    fn a_suspend_awaits_the_ranks_report_only_while_the_suspension_is_in_progress() {
        let mut s = State::new();
        let n1 = NodeSpec { resources: Resources::of(&[("cpu", 1)]), ..gpu_node("n1", 0) };
        apply(&mut s, Op::RegisterNodes(vec![n1]));
        let mut q = QueueSpec::named("q");
        q.quotas
            .insert(Name::lit("default"), PoolQuota { nominal: Resources::of(&[("cpu", 1)]), ..Default::default() });
        apply(&mut s, Op::PutQueue(q));
        let on_n1 = || vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![] }];
        let low = cpu_job(&mut s, "low", 1);
        decide(&mut s, Decision::Place { job: low, attempt: 1, replicas: on_n1() });
        let suspended = Op::Report {
            node: Name::lit("n1"),
            observations: vec![Observed::Stopped { job: low, attempt: 1, rank: 0, checkpointed: false }],
        };
        let victims = vec![Victim { job: low, attempt: 1 }];
        for (round, preemptor) in ["high", "urgent"].into_iter().enumerate() {
            let high = cpu_job(&mut s, preemptor, 10);
            let (victims, message) = (victims.clone(), "test".to_string());
            decide(&mut s, Decision::Preempt { job: high, victims, replicas: on_n1(), message });
            let a = the_one_on_n1(&s);
            assert_eq!(
                (a.job_id, a.action, a.awaiting_suspended),
                (low, Action::Suspend as i32, true),
                "round {round}"
            );
            // It names its preemption, for the agent's report to name it back.
            let since = s.jobs()[&low].stopping.expect("being suspended").requested_ms;
            assert_eq!((a.suspension_by, a.suspension_ms), (high, since), "round {round}");
            apply(&mut s, suspended.clone());
            assert_eq!(s.jobs()[&low].state, JobState::Suspended);
            let a = &desired(&s)[&Name::lit("n1")];
            assert!(a.iter().all(|a| !a.awaiting_suspended), "recorded suspended: {a:?}");
            assert!(a.iter().all(|a| a.suspension_by == 0), "no suspension in progress: {a:?}");
            if round == 0 {
                decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1() });
                let done = Observed::Exited { job: high, attempt: 1, rank: 0, exit_code: 0 };
                apply(&mut s, Op::Report { node: Name::lit("n1"), observations: vec![done] });
                decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });
                let a = the_one_on_n1(&s);
                assert_eq!((a.action, a.awaiting_suspended), (Action::Run as i32, false));
            }
        }
    }

    /// A cancelled job's ranks stay in their nodes' directives, as STOP with the job's grace,
    /// until each is reported gone: until then the agent is told to stop them, not to forget
    /// them (and the model keeps their GPUs held).
    #[test]
    fn a_completing_rank_is_sent_as_a_stop_until_it_is_reported_gone() {
        let mut s = State::new();
        apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 4)]));
        apply(&mut s, Op::PutQueue(fixture::gpu_queue("q", 4)));
        apply(&mut s, Op::Submit { spec: fixture::gpu_job("j", "q", 4), request_id: None });
        let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![0, 1, 2, 3] }];
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job: 1, attempt: 1, replicas }] };
        apply(&mut s, Op::ApplyPlan(plan));
        assert_eq!(desired(&s)[&Name::lit("n1")][0].action, Action::Run as i32);

        apply(&mut s, Op::Cancel { job: 1 });
        let a = &desired(&s)[&Name::lit("n1")][0];
        assert_eq!((a.job_id, a.attempt, a.rank, a.action), (1, 1, 0, Action::Stop as i32));
        assert_eq!((a.grace_ms, a.gpus.as_slice()), (1_000, &[0, 1, 2, 3][..]));

        let gone = Observed::Stopped { job: 1, attempt: 1, rank: 0, checkpointed: false };
        apply(&mut s, Op::Report { node: Name::lit("n1"), observations: vec![gone] });
        assert!(!desired(&s).contains_key(&Name::lit("n1")), "nothing left to stop");
    }
}
