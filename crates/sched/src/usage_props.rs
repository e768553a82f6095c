//! Property tests for decisions.md section 12, through the real `State::apply` and `cycle`:
//! jobs of four users in two queues of a fair-sharing cohort (one queue with a
//! `max_per_user`), in modes that stop, requeue and suspend, on two nodes too small for all
//! of them, while jobs exit, are cancelled and lose their node, time passes by random
//! steps, the half-life changes, and replicas join from snapshots taken along the way.
//! After every command:
//! - every replica has the same usage, bit for bit: the leader, and each follower that
//!   restored a snapshot of it and applied the same commands since (what holds on every
//!   replica holds in `baton sim` too: it runs the same `State`);
//! - what each user's jobs hold, with the room reserved for them, stays within their queue's
//!   `max_per_user`;
//! - decayed usage is never below zero, and every other invariant holds.

use baton_model::command::{Command, Op};
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::job::{JobId, PreemptionMode, PriorityRef};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::queue::Cohort;
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_model::tenancy::UnixUser;
use baton_model::usage::UsageSettings;
use proptest::prelude::*;

use crate::cycle;

#[derive(Debug, Clone)]
struct JobGen {
    gpus: u64,
    cpus: u64,
    user: u8,
    in_a: bool,
    priority: i32,
    mode: PreemptionMode,
}

#[derive(Debug, Clone)]
enum Act {
    Submit(JobGen),
    Exit(usize, bool),
    Cancel(usize),
    LoseNode(bool),
    /// Seconds pass.
    Wait(u64),
    /// A follower joins from a snapshot of the leader.
    Snapshot,
    /// The half-life becomes this many minutes (0: off).
    HalfLife(u64),
}

fn job() -> impl Strategy<Value = JobGen> {
    let modes =
        prop_oneof![Just(PreemptionMode::Checkpoint), Just(PreemptionMode::Suspend), Just(PreemptionMode::Requeue)];
    (0u64..=3, 0u64..=2, 0u8..4, any::<bool>(), 1i32..=3, modes)
        .prop_map(|(gpus, cpus, user, in_a, priority, mode)| JobGen { gpus, cpus, user, in_a, priority, mode })
}

fn acts() -> impl Strategy<Value = Vec<Act>> {
    proptest::collection::vec(
        prop_oneof![
            6 => job().prop_map(Act::Submit),
            4 => (any::<usize>(), any::<bool>()).prop_map(|(n, ok)| Act::Exit(n, ok)),
            1 => any::<usize>().prop_map(Act::Cancel),
            1 => any::<bool>().prop_map(Act::LoseNode),
            3 => (1u64..5_000).prop_map(Act::Wait),
            1 => Just(Act::Snapshot),
            1 => prop_oneof![Just(0u64), Just(1), Just(30), Just(10_080)].prop_map(Act::HalfLife),
        ],
        1..60,
    )
}

/// The leader's state and its followers', each fed the same commands.
struct Replicas {
    leader: State,
    followers: Vec<State>,
}

const MAX_FOLLOWERS: usize = 3;

impl Replicas {
    fn apply(&mut self, now_ms: u64, op: Op) -> Result<(), String> {
        let got = self.leader.apply(Command { now_ms, op: op.clone() }).map(|_| ()).map_err(|e| e.to_string());
        for f in &mut self.followers {
            let theirs = f.apply(Command { now_ms, op: op.clone() }).map(|_| ()).map_err(|e| e.to_string());
            if theirs != got {
                return Err(format!("a follower answered {theirs:?} where the leader answered {got:?}"));
            }
            if f.usage() != self.leader.usage() {
                return Err(format!(
                    "usage differs after {}:\nleader   {:?}\nfollower {:?}",
                    op.name(),
                    self.leader.usage(),
                    f.usage()
                ));
            }
        }
        check_not_negative(&self.leader)?;
        check_limits(&self.leader)?;
        crate::invariants::check_state(&self.leader)?;
        got
    }

    fn snapshot(&mut self) -> Result<(), String> {
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&self.leader, config).map_err(|e| e.to_string())?;
        // As a replica reads a snapshot: the current layout, or at the baseline behaviour
        // format 9's (the raft crate's `decode_state` tries the older ones too).
        let back: State = bincode::serde::decode_from_slice::<State, _>(&bytes, config)
            .map(|(s, _)| s)
            .or_else(|_| {
                bincode::serde::decode_from_slice::<baton_model::state::PreBehaviourState, _>(&bytes, config)
                    .map(|(s, _)| s.0)
            })
            .map_err(|e| e.to_string())?;
        if back.usage() != self.leader.usage() {
            return Err(format!("a snapshot changed usage:\n{:?}\n{:?}", self.leader.usage(), back.usage()));
        }
        if self.followers.len() == MAX_FOLLOWERS {
            self.followers.remove(0);
        }
        self.followers.push(back);
        Ok(())
    }

    /// Scheduling cycles until nothing changes, each plan applied on every replica.
    fn settle(&mut self, now_ms: u64) -> Result<(), String> {
        for _ in 0..200 {
            let plan = cycle(&self.leader, now_ms);
            if plan.decisions.is_empty() {
                return Ok(());
            }
            self.apply(now_ms, Op::ApplyPlan(plan))?;
        }
        Err("no steady state after 200 cycles".into())
    }
}

/// Usage at the state's time is never below zero (nor NaN).
fn check_not_negative(s: &State) -> Result<(), String> {
    let now = s.now_ms();
    for key in s.usage().accounts().keys() {
        for (r, v) in s.usage().usage_at(key, now) {
            if v.is_nan() || v < 0.0 {
                return Err(format!("{key:?}'s {r} usage is {v}"));
            }
        }
    }
    Ok(())
}

/// What each user's jobs hold, with what is reserved for them, is within `max_per_user`.
fn check_limits(s: &State) -> Result<(), String> {
    for (queue, limit) in s.usage().limits() {
        let mut per_user: std::collections::BTreeMap<String, Resources> = std::collections::BTreeMap::new();
        let counted = s.jobs().values().filter(|j| &j.spec.queue == queue);
        for j in counted {
            let replicas =
                if matches!(j.state, baton_model::job::JobState::Running | baton_model::job::JobState::Preempting) {
                    j.replicas.clone()
                } else if let Some(r) = s.reservations().get(&j.id) {
                    r.replicas.clone()
                } else {
                    continue;
                };
            per_user.entry(s.user_of(j.id)).or_default().add(&State::holding_on(j, &replicas));
        }
        for (user, held) in per_user {
            if let Some((k, max)) = limit.iter().find(|(k, max)| held.get(k) > *max) {
                return Err(format!(
                    "user {user} holds {} {k} in queue {queue}, over its max_per_user {max}",
                    held.get(k)
                ));
            }
        }
    }
    Ok(())
}

fn submit(r: &mut Replicas, now_ms: u64, i: usize, g: &JobGen) -> Result<(), String> {
    let mut spec = gpu_job(&format!("j{i}"), if g.in_a { "a" } else { "b" }, g.gpus);
    spec.tasks[0].resources = Resources::of(&[("gpu", g.gpus), ("cpu", g.cpus * 1000)]);
    spec.priority = PriorityRef::Value(g.priority);
    spec.preemption_mode = g.mode;
    let run_as = Some(UnixUser::new(format!("u{}", g.user)).expect("a user name"));
    r.apply(now_ms, Op::SubmitAfter { spec, request_id: None, run_as, after: Vec::new() })
}

fn act(r: &mut Replicas, now_ms: &mut u64, i: usize, a: &Act) -> Result<(), String> {
    match a {
        Act::Submit(g) => submit(r, *now_ms, i, g)?,
        Act::Exit(n, ok) => {
            let running: Vec<(JobId, u32)> = r
                .leader
                .jobs()
                .values()
                .filter(|j| j.state == baton_model::job::JobState::Running)
                .map(|j| (j.id, j.attempt))
                .collect();
            if let Some(&(job, attempt)) = running.get(n % running.len().max(1)) {
                r.apply(*now_ms, Op::JobExited { job, attempt, exit_code: if *ok { 0 } else { 1 } })?;
            }
        }
        Act::Cancel(n) => {
            let live: Vec<JobId> = r.leader.jobs().values().filter(|j| !j.state.is_finished()).map(|j| j.id).collect();
            if let Some(&job) = live.get(n % live.len().max(1)) {
                r.apply(*now_ms, Op::Cancel { job })?;
            }
        }
        Act::LoseNode(first) => {
            let node = Name::lit(if *first { "n1" } else { "n2" });
            r.apply(*now_ms, Op::SetNodeStatus { node: node.clone(), status: NodeStatus::Lost })?;
            r.apply(*now_ms, Op::SetNodeStatus { node, status: NodeStatus::Ready })?;
        }
        Act::Wait(s) => {
            *now_ms += s * 1_000;
            r.apply(*now_ms, Op::Tick)?;
        }
        Act::Snapshot => r.snapshot()?,
        Act::HalfLife(minutes) => {
            let half_life_ms = (*minutes > 0).then_some(minutes * 60_000);
            let weights = [("gpu".to_string(), 1_000), ("cpu".to_string(), 500)].into();
            r.apply(*now_ms, Op::SetUsage(UsageSettings { half_life_ms, weights_milli: weights }))?;
        }
    }
    Ok(())
}

fn run(acts: &[Act], limit_gpus: u64) -> Result<(), String> {
    let mut r = Replicas { leader: State::new(), followers: Vec::new() };
    let mut n1 = gpu_node("n1", 8);
    n1.resources = Resources::of(&[("gpu", 8), ("cpu", 8_000)]);
    let mut n2 = gpu_node("n2", 4);
    n2.resources = Resources::of(&[("gpu", 4), ("cpu", 4_000)]);
    r.apply(0, Op::RegisterNodes(vec![n1, n2]))?;
    r.apply(0, Op::PutCohort(Cohort { name: Name::lit("team"), parent: None, fair_sharing: true }))?;
    for q in ["a", "b"] {
        let mut spec = gpu_queue(q, 6);
        spec.cohort = Some(Name::lit("team"));
        r.apply(0, Op::PutQueue(spec))?;
    }
    r.apply(0, Op::SetUserLimit { queue: Name::lit("a"), limit: Resources::of(&[("gpu", limit_gpus)]) })?;
    let settings = UsageSettings { half_life_ms: Some(600_000), ..Default::default() };
    r.apply(0, Op::SetUsage(settings))?;
    let mut now_ms = 1_000;
    for (i, a) in acts.iter().enumerate() {
        act(&mut r, &mut now_ms, i, a)?;
        now_ms += 1_000;
        r.settle(now_ms)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: super::proptests::cases(96), ..ProptestConfig::default() })]

    #[test]
    fn usage_is_the_same_on_every_replica_and_limits_hold(acts in acts(), limit in 1u64..=6) {
        run(&acts, limit).map_err(TestCaseError::fail)?;
    }
}
