//! Property test of the plan checker against stale plans: a plan is computed, the cluster
//! moves on (submissions, exits, cancels, pauses, lost nodes, quota changes, other plans
//! applied), and the old plan is applied anyway. Whatever it still holds, every invariant
//! holds after it (`check_state`: no GPU used twice, no over-allocation, ledger equal to a
//! rebuild, borrow limits), each decision is either applied or reported refused, and none
//! lands on what a starving job reserved (policy section 9) unless it may backfill.

use baton_model::alloc::gpu_mask;
use baton_model::command::{Op, Outcome};
use baton_model::job::{JobId, JobState};
use baton_model::name::Name;
use baton_model::plan::Decision;
use baton_model::resources::Resources;
use baton_model::state::State;
use proptest::prelude::*;

use crate::cycle;
use crate::invariants::check_state;
use crate::proptests::{OpGen, World, apply_op, cmd, op_gen, run, to_yaml, world};

/// What happens between computing the plan and applying it.
#[derive(Debug, Clone)]
enum Between {
    Op(OpGen),
    /// A newer plan is computed and applied first (it may reserve, place or preempt).
    Cycle,
    /// A queue's GPU nominal quota changes in every pool.
    Quota {
        queue: u8,
        nominal_gpu: u8,
    },
    /// A pending job is paused, a newer plan applied, and the job resumed: the stale plan
    /// still places it, on a cluster that planned without it (another job may have
    /// reserved its room meanwhile).
    Sidestep(u8),
}

fn between() -> impl Strategy<Value = Between> {
    prop_oneof![
        4 => op_gen().prop_map(Between::Op),
        2 => Just(Between::Cycle),
        1 => (any::<u8>(), 0u8..=8).prop_map(|(queue, nominal_gpu)| Between::Quota { queue, nominal_gpu }),
        2 => any::<u8>().prop_map(Between::Sidestep),
    ]
}

#[derive(Debug, Clone)]
struct Stale {
    w: World,
    /// Submitted after the world settles and before the stale plan is computed.
    fresh: Vec<OpGen>,
    between: Vec<Between>,
}

fn stale() -> impl Strategy<Value = Stale> {
    let fresh = proptest::collection::vec(op_gen(), 1..8);
    let between = proptest::collection::vec(between(), 1..10);
    // Reservations made at once: starving jobs are what a stale plan most easily wrongs.
    (world(), fresh, between).prop_map(|(mut w, fresh, between)| {
        w.reserve_after = Some(0);
        Stale { w, fresh, between }
    })
}

fn set_quota(s: &mut State, w: &World, queue: u8, nominal_gpu: u8, now_ms: u64) -> Result<(), String> {
    let name = Name::lit(&format!("q{}", queue as usize % w.queues.len()));
    let mut spec = s.queues()[&name].clone();
    let l = s.ledger();
    let q = l.queue(name.as_str()).expect("the queue exists");
    for (pool, quota) in spec.quotas.iter_mut() {
        // Never below what the queue already uses: what runs may exceed its borrow limit
        // then, an invariant of `check_state` no plan is to blame for.
        let used = l.pool(pool.as_str()).map_or(0, |p| {
            l.queues[q].usage[p][baton_model::ledger::GPU_KIND].div_ceil(baton_model::ledger::GPU_MILLI)
        });
        quota.nominal = Resources::of(&[("gpu", u64::from(nominal_gpu).max(used))]);
    }
    // Refused only when the spec is invalid, which changes nothing.
    let _ = cmd(s, now_ms, Op::PutQueue(spec));
    check_state(s)
}

fn sidestep(s: &mut State, i: u8, now_ms: u64) -> Result<(), String> {
    let pending: Vec<JobId> = s.jobs().values().filter(|j| j.state == JobState::Pending).map(|j| j.id).collect();
    if pending.is_empty() {
        return Ok(());
    }
    let job = pending[i as usize % pending.len()];
    cmd(s, now_ms, Op::Pause { job }).map_err(|e| e.to_string())?;
    apply_fresh(s, now_ms)?;
    cmd(s, now_ms, Op::Resume { job }).map_err(|e| e.to_string())?;
    check_state(s)
}

/// Applies a fresh plan whole and stops what it set stopping.
fn apply_fresh(s: &mut State, now_ms: u64) -> Result<(), String> {
    let plan = cycle(s, now_ms);
    cmd(s, now_ms, Op::ApplyPlan(plan)).map_err(|e| e.to_string())?;
    check_state(s)
}

fn run_stale(t: &Stale) -> Result<(), String> {
    let mut s = run(&t.w)?;
    let mut submitted = s.jobs().len();
    let mut now_ms = 10_000 * t.w.ops.len() as u64 + 10_000;
    for op in &t.fresh {
        apply_op(&mut s, &t.w, &mut submitted, now_ms, op)?;
    }
    let plan = cycle(&s, now_ms);
    for b in &t.between {
        now_ms += 1_000;
        match b {
            Between::Op(op) => apply_op(&mut s, &t.w, &mut submitted, now_ms, op)?,
            Between::Cycle => apply_fresh(&mut s, now_ms)?,
            Between::Quota { queue, nominal_gpu } => set_quota(&mut s, &t.w, *queue, *nominal_gpu, now_ms)?,
            Between::Sidestep(i) => sidestep(&mut s, *i, now_ms)?,
        }
    }
    let before = s.clone();
    let applied = cmd(&mut s, now_ms, Op::ApplyPlan(plan.clone())).map_err(|e| e.to_string())?;
    let Outcome::PlanApplied { accepted, rejected, stale_by } = applied.outcome else {
        return Err(format!("a plan gave {:?}", applied.outcome));
    };
    if stale_by != before.applied() - plan.based_on {
        return Err(format!("{stale_by} commands behind reported; {} were", before.applied() - plan.based_on));
    }
    check_state(&s)?;
    let refused: Vec<usize> = rejected.iter().map(|(i, _)| *i as usize).collect();
    if accepted as usize + refused.len() != plan.decisions.len() || !refused.windows(2).all(|w| w[0] < w[1]) {
        return Err(format!("{accepted} accepted and refused {refused:?} of {} decisions", plan.decisions.len()));
    }
    // Reservations the plan let go before a decision (an unreserve, or its holder started).
    let mut let_go: Vec<JobId> = Vec::new();
    for (i, d) in plan.decisions.iter().enumerate() {
        let taken = !refused.contains(&i);
        check_reported(&before, &s, &let_go, d, taken)?;
        if taken {
            check_not_on_reserved(&before, &let_go, d)?;
            if let Decision::Unreserve { job, .. } | Decision::Place { job, .. } = d {
                let_go.push(*job);
            }
        }
    }
    Ok(())
}

/// A decision reported applied shows in the state; one reported refused does not.
/// `let_go`: jobs whose reservations earlier decisions of the plan let go (a starving job
/// whose reservation no longer holds reserves again in the same plan).
fn check_reported(before: &State, after: &State, let_go: &[JobId], d: &Decision, taken: bool) -> Result<(), String> {
    let job = |s: &State, id: JobId| s.job(id).map(|j| (j.state, j.attempt));
    let shown = match d {
        Decision::Place { job: id, attempt, .. } => {
            job(before, *id).is_some_and(|(_, a)| a != *attempt) && job(after, *id).is_some_and(|(_, a)| a == *attempt)
        }
        Decision::Preempt { job: id, .. } | Decision::PreemptShrinking { job: id, .. } => {
            !before.reservations().contains_key(id) && after.reservations().contains_key(id)
        }
        Decision::Reserve { job: id, .. } => {
            (before.pool_reservation_of(*id).is_none() || let_go.contains(id))
                && after.pool_reservation_of(*id).is_some()
        }
        Decision::TimeLimit { job: id, attempt } | Decision::Grow { job: id, attempt, .. } => {
            job(before, *id) == Some((JobState::Running, *attempt)) && job(after, *id) != job(before, *id)
        }
        Decision::ResumeInPlace { job: id, .. } => {
            job(before, *id).is_some_and(|(st, _)| st == JobState::Suspended)
                && job(after, *id).is_some_and(|(st, _)| st == JobState::Running)
        }
        // Their effect (a reason, a dropped reservation) may also come from another decision.
        Decision::Wait { .. } | Decision::Unreserve { .. } => return Ok(()),
    };
    if shown != taken {
        let name = before.job(d.job()).map_or("?".to_string(), |j| j.spec.name.to_string());
        return Err(format!("the {} of {name} was reported {} but shows {}", d.kind(), taken, shown));
    }
    Ok(())
}

/// An applied Place or Preempt takes no GPU reserved for another job's starving
/// reservation, and starts no other job of that job's queue, unless it is a Place of a job
/// with a time limit (backfill) or of a preemptor whose room was held for it. The
/// reservations of `let_go` were let go by earlier decisions of the plan.
fn check_not_on_reserved(before: &State, let_go: &[JobId], d: &Decision) -> Result<(), String> {
    let (id, replicas, preempt) = match d {
        Decision::Place { job, replicas, .. } => (*job, replicas, false),
        Decision::Preempt { job, replicas, .. } | Decision::PreemptShrinking { job, replicas, .. } => {
            (*job, replicas, true)
        }
        _ => return Ok(()),
    };
    let j = before.job(id).expect("a placed job exists");
    let may_backfill = !preempt && j.spec.time_limit_ms.is_some();
    if before.reservations().contains_key(&id) || may_backfill {
        return Ok(());
    }
    for r in before.pool_reservations().values().filter(|r| r.job != id && !let_go.contains(&r.job)) {
        let holder = before.job(r.job).expect("a reserving job exists");
        let overlap = replicas
            .iter()
            .any(|x| r.replicas.iter().any(|y| x.node == y.node && gpu_mask(&x.gpus) & gpu_mask(&y.gpus) != 0));
        let same_queue = holder.spec.queue == j.spec.queue && before.pool_reservation_of(id).is_none();
        if overlap || same_queue {
            return Err(format!(
                "a stale {} started {} {} {}'s reservation",
                d.kind(),
                j.spec.name,
                if overlap { "on GPUs of" } else { "in the queue of" },
                holder.spec.name
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: crate::proptests::cases(64),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_stale_plan_keeps_every_invariant_and_reports_what_it_refused(t in stale()) {
        let r = run_stale(&t);
        prop_assert!(r.is_ok(), "{}\nworld as a scenario:\n{}\nthen {:?}", r.unwrap_err(), to_yaml(&t.w), (&t.fresh, &t.between));
    }
}
