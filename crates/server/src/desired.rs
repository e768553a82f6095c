//! What each node should be running, computed from the replicated state alone: the agent
//! protocol is declarative, so a new leader only has to compute this again and send it.
//!
//! `desired` is a pure function of `&State`, tested without any IO. The leader keeps it in a
//! [`Desired`] across rounds, which rebuilds only the jobs whose entries changed since its
//! last look and names only the nodes whose lists changed: a round after one change costs
//! that change, not a pass over every running job (issue 37). Both give the same lists
//! (`tests::the_kept_lists_equal_the_whole_computation_after_every_command`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use baton_model::State;
use baton_model::alloc::ReplicaAlloc;
use baton_model::cow_tree::CowTree;
use baton_model::job::{Job, JobId, JobState, PreemptionMode, StopWhy};
use baton_model::name::Name;
use baton_model::node::Node;
use baton_model::state::Completing;
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
        for (node, a) in job_assignments(state, job) {
            out.entry(node).or_default().push(a);
        }
    }
    out
}

/// What `job`'s ranks should do, each with its node, in rank order: the ranks of its attempt
/// if any may run, else those of its ended attempt still completing.
fn job_assignments(state: &State, job: &Job) -> Vec<(Name, Assignment)> {
    if let Some(action) = action(job) {
        // The granted grace as a duration: the agent counts it from when it first acts
        // on the stop, so no leader's clock (nor a failover) shortens it.
        let grace_ms = job.stopping.map_or(0, |s| s.deadline_ms.saturating_sub(s.requested_ms));
        // The model's rank order: its gang rules check reports against it.
        let replicas = job.ranked();
        let world_size = replicas.len() as u32;
        let at = |rank: usize| (job.attempt, rank as u32, world_size);
        return replicas
            .into_iter()
            .enumerate()
            .map(|(rank, r)| (r.node.clone(), assignment(state, job, at(rank), r, action, grace_ms)))
            .collect();
    }
    let Some(c) = state.completing(job.id) else { return Vec::new() };
    let world_size = job.spec.replica_count();
    c.ranks
        .iter()
        .map(|(&rank, r)| {
            let at = (c.attempt, rank, world_size);
            (r.node.clone(), assignment(state, job, at, r, Action::Stop, job.spec.grace_ms))
        })
        .collect()
}

/// A node's list as published: `None` once the node is no longer registered.
pub type NodeList = (Name, Option<Vec<Assignment>>);

/// What each node should run, kept across the leader's rounds (see the module's
/// documentation). Its first update names every node; each later one names the nodes whose
/// lists may have changed since, with their whole new lists.
#[derive(Default)]
pub struct Desired {
    /// The state's jobs, completing ranks and nodes at the last update: clones that share
    /// the state's chunks, so the next update finds what changed by the chunks it copied.
    seen: Option<Seen>,
    /// Each node's assignments by job, in (job id, rank) order.
    by_node: BTreeMap<Name, BTreeMap<JobId, Vec<Assignment>>>,
    /// The nodes each job has assignments on.
    nodes_of: HashMap<JobId, Vec<Name>>,
}

struct Seen {
    jobs: CowTree<JobId, Job>,
    completing: Completing,
    nodes: CowTree<Name, Node>,
}

impl Desired {
    /// Brings the lists up to `state` and returns the nodes whose lists may have changed
    /// (all of them the first time), in name order.
    pub fn update(&mut self, state: &State) -> Vec<NodeList> {
        self.refresh(state).into_iter().map(|node| self.list_of(state, node)).collect()
    }

    /// Brings the lists up to `state` and returns every node's list: a new term's first
    /// publish, whose hub knows nothing yet. With lists kept warm while following
    /// (`TermLists::warm`), only what changed since is rebuilt.
    pub fn update_all(&mut self, state: &State) -> Vec<NodeList> {
        let mut nodes = self.refresh(state);
        nodes.extend(state.nodes().keys().cloned());
        nodes.into_iter().map(|node| self.list_of(state, node)).collect()
    }

    /// Brings the lists up to `state`; the nodes whose lists may have changed.
    fn refresh(&mut self, state: &State) -> BTreeSet<Name> {
        let (jobs, mut touched) = match &self.seen {
            Some(seen) => (self.changed_jobs(seen, state), changed_nodes(seen, state)),
            None => (state.jobs().keys().copied().collect(), state.nodes().keys().cloned().collect()),
        };
        for id in jobs {
            self.rebuild_job(state, id, &mut touched);
        }
        self.seen = Some(Seen {
            jobs: state.jobs().clone(),
            completing: state.completing_all().clone(),
            nodes: state.nodes().clone(),
        });
        touched
    }

    /// Jobs whose entry, or whose completing ranks, may differ from what was seen.
    fn changed_jobs(&self, seen: &Seen, state: &State) -> BTreeSet<JobId> {
        let mut ids: BTreeSet<JobId> = state.jobs().changed_keys(&seen.jobs).into_iter().collect();
        let now = state.completing_all();
        // Few ranks are completing at once: comparing them all is cheap.
        for (id, c) in now {
            if seen.completing.get(id) != Some(c) {
                ids.insert(*id);
            }
        }
        ids.extend(seen.completing.keys().filter(|id| !now.contains_key(id)));
        ids
    }

    /// Replaces `id`'s assignments with what `state` says, noting every node whose list
    /// changed by it (a job in a changed chunk whose assignments are the same notes none).
    fn rebuild_job(&mut self, state: &State, id: JobId, touched: &mut BTreeSet<Name>) {
        let mut now: BTreeMap<Name, Vec<Assignment>> = BTreeMap::new();
        if let Some(job) = state.jobs().get(&id) {
            for (node, a) in job_assignments(state, job) {
                now.entry(node).or_default().push(a);
            }
        }
        let before = self.nodes_of.get(&id).map_or(&[][..], Vec::as_slice);
        let same = before.len() == now.len()
            && before.iter().all(|n| self.by_node.get(n).and_then(|jobs| jobs.get(&id)) == now.get(n));
        if same {
            return;
        }
        for node in self.nodes_of.remove(&id).unwrap_or_default() {
            if let Some(jobs) = self.by_node.get_mut(&node) {
                jobs.remove(&id);
                if jobs.is_empty() {
                    self.by_node.remove(&node);
                }
            }
            touched.insert(node);
        }
        if !now.is_empty() {
            self.nodes_of.insert(id, now.keys().cloned().collect());
        }
        for (node, list) in now {
            self.by_node.entry(node.clone()).or_default().insert(id, list);
            touched.insert(node);
        }
    }

    /// `node`'s list as of the last update (empty for a node with nothing to do).
    pub fn list(&self, node: &Name) -> Vec<Assignment> {
        self.by_node.get(node).map(|jobs| jobs.values().flatten().cloned().collect()).unwrap_or_default()
    }

    fn list_of(&self, state: &State, node: Name) -> NodeList {
        let list = state.nodes().contains_key(&node).then(|| self.list(&node));
        (node, list)
    }
}

/// The leader's kept lists, for the term it publishes in: a new term's first publish names
/// every node (`whole`). Between terms, a replica that follows keeps them up to the applied
/// state (`warm`), so that a new leader's first publish rebuilds what changed since, not
/// every job: at 10,000 nodes and 40,000 running jobs the whole build costs 150 ms on a
/// quiet machine (`benches/desired.rs`), and a failover runs on a busy one.
#[derive(Default)]
pub struct TermLists(Mutex<Option<(u64, Desired)>>);

/// The term the lists are marked with while no term publishes them: below every leader's.
const NO_TERM: u64 = 0;

impl TermLists {
    /// The nodes whose lists may have changed since `term`'s last update, as of `state`, and
    /// whether they are every node (this term's first update).
    pub fn update(&self, term: u64, state: &State) -> (Vec<NodeList>, bool) {
        self.with_term(term, |desired, whole| {
            let lists = if whole { desired.update_all(state) } else { desired.update(state) };
            (lists, whole)
        })
    }

    /// `node`'s list as of `state`, the lists brought up to it first (for a caller that
    /// answers one node at a time, as the simulator's leader does).
    pub fn node_list(&self, term: u64, state: &State, node: &Name) -> Vec<Assignment> {
        self.with_term(term, |desired, _| {
            desired.refresh(state);
            desired.list(node)
        })
    }

    /// Brings the kept lists up to `state` for a later term, publishing nothing: marked as
    /// no term's, the next term's first update still names every node.
    pub fn warm(&self, state: &State) {
        self.with_term(NO_TERM, |desired, _| {
            desired.refresh(state);
        })
    }

    /// Runs `f` on `term`'s lists; `whole` if the lists kept were another term's (their
    /// contents are kept: they are the state's, whichever term reads them).
    fn with_term<T>(&self, term: u64, f: impl FnOnce(&mut Desired, bool) -> T) -> T {
        let mut kept = match self.0.lock() {
            Ok(kept) => kept,
            // An update that panicked may have left the lists half rebuilt: start afresh.
            Err(poisoned) => {
                let mut kept = poisoned.into_inner();
                *kept = None;
                self.0.clear_poison();
                kept
            }
        };
        let whole = !matches!(&*kept, Some((t, _)) if *t == term);
        let (t, desired) = kept.get_or_insert_with(|| (term, Desired::default()));
        *t = term;
        f(desired, whole)
    }
}

/// Nodes registered or removed since what was seen: a new node needs its first list (empty
/// until something is placed there), a removed one none. A change to a node's own entry
/// (its status, its labels) changes no list.
fn changed_nodes(seen: &Seen, state: &State) -> BTreeSet<Name> {
    let now = state.nodes();
    let candidates = now.changed_keys(&seen.nodes).into_iter();
    candidates.filter(|n| seen.nodes.contains_key(n) != now.contains_key(n)).collect()
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

    /// What an agent of each node would hold after the kept lists' updates: `lists` applied
    /// to `held` as the hub publishes them.
    fn hold(held: &mut BTreeMap<Name, Vec<Assignment>>, lists: Vec<NodeList>) {
        for (node, list) in lists {
            match list {
                Some(list) => held.insert(node, list),
                None => held.remove(&node),
            };
        }
    }

    /// The whole computation as the hub would hold it: every registered node, with or
    /// without assignments.
    fn whole(s: &State) -> BTreeMap<Name, Vec<Assignment>> {
        let mut all = desired(s);
        all.retain(|node, _| s.nodes().contains_key(node));
        for node in s.nodes().keys() {
            all.entry(node.clone()).or_default();
        }
        all
    }

    /// Every scenario of `examples/scenarios` (placements, preemptions in every mode,
    /// suspensions, gangs, elastic resizes, arrays, lost nodes, completing ranks, ...),
    /// replayed command by command: after each, the lists kept by updates equal the whole
    /// computation's. Recorded under the newest behaviour, as a cluster's leader runs.
    #[test]
    fn the_kept_lists_equal_the_whole_computation_after_every_command() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).expect("the scenarios").map(|e| e.expect("an entry").path()).collect();
        files.retain(|p| p.extension().is_some_and(|x| x == "yaml"));
        files.sort();
        let (mut commands, mut named) = (0usize, 0usize);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("readable");
            let newest = vec![Op::SetBehaviour(baton_model::behaviour::BEHAVIOUR)];
            let log = baton_sim::record(&file.display().to_string(), &text, newest).expect("the scenario runs");
            let (mut s, mut kept, mut held) = (State::new(), Desired::default(), BTreeMap::new());
            for (i, cmd) in log.into_iter().enumerate() {
                let _ = s.apply(cmd);
                let lists = kept.update(&s);
                named += lists.len();
                hold(&mut held, lists);
                assert!(held == whole(&s), "{}: the kept lists differ after command {i}", file.display());
                commands += 1;
            }
        }
        assert!(commands > 1_000, "the scenarios replayed only {commands} commands");
        assert!(named < commands * 4, "updates named {named} lists over {commands} commands");
    }

    /// `nodes` 4-GPU nodes, each running one 4-GPU job (`j0`, `j1`, ...) of queue `q`, whose
    /// quota they fill.
    fn filled(nodes: usize) -> State {
        let mut s = State::new();
        let specs = (0..nodes).map(|i| gpu_node(&format!("n{i:03}"), 4)).collect();
        apply(&mut s, Op::RegisterNodes(specs));
        apply(&mut s, Op::PutQueue(fixture::gpu_queue("q", 4 * nodes as u64)));
        for i in 0..nodes {
            apply(&mut s, Op::Submit { spec: gpu_job(&format!("j{i}"), "q", 4), request_id: None });
        }
        let plan = baton_sched::cycle(&s, s.now_ms());
        apply(&mut s, Op::ApplyPlan(plan));
        s
    }

    /// An update names only the nodes whose lists may have changed: none after a command
    /// that touches no job or node, a job's nodes after a change to that job.
    #[test]
    fn an_update_names_the_nodes_a_change_touched_and_no_others() {
        let mut s = filled(300);
        let mut kept = Desired::default();
        assert_eq!(kept.update(&s).len(), 300, "the first update names every node");
        assert!(kept.update(&s).is_empty(), "nothing changed");
        apply(&mut s, Op::PutQueue(QueueSpec::named("other")));
        assert!(kept.update(&s).is_empty(), "a new queue changes no list");
        let job = s.job_by_name("j7").expect("submitted").id;
        let node = s.jobs()[&job].replicas[0].node.clone();
        apply(&mut s, Op::Cancel { job });
        let named = kept.update(&s);
        let names: Vec<&Name> = named.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&node], "only the cancelled job's node");
        let stop = named[0].1.as_ref().expect("still registered");
        assert!(stop.iter().any(|a| a.job_id == job && a.action == Action::Stop as i32));
    }

    /// A new term's first update names every node, with the lists a build from nothing
    /// gives, also from lists kept warm while the replica followed; the updates after it
    /// name only what changed.
    #[test]
    fn lists_kept_warm_give_a_new_terms_first_update_every_node_as_built_afresh() {
        let mut s = filled(30);
        let lists = TermLists::default();
        let (first, whole) = lists.update(1, &s);
        assert!(whole && first.len() == 30);
        // Term 1 ends; the replica follows and keeps the lists warm while jobs change.
        lists.warm(&s);
        let job = s.job_by_name("j7").expect("submitted").id;
        apply(&mut s, Op::Cancel { job });
        lists.warm(&s);
        apply(&mut s, Op::Submit { spec: gpu_job("late", "q", 4), request_id: None });
        let plan = baton_sched::cycle(&s, s.now_ms());
        apply(&mut s, Op::ApplyPlan(plan));
        let (warm, whole) = lists.update(4, &s);
        assert!(whole, "a new term's first update is whole");
        assert_eq!(warm, TermLists::default().update(4, &s).0, "the warm lists differ from fresh ones");
        assert!(lists.update(4, &s).0.is_empty(), "nothing changed since");
        // Warmed while leading (a warm-up that ended late): the next update is whole again.
        lists.warm(&s);
        let (again, whole) = lists.update(4, &s);
        assert!(whole && again.len() == 30);
    }
}
