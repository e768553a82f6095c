//! Elastic gangs in a cycle (decisions.md section 13).
//!
//! - Admission: a gang that does not fit whole takes the largest size down to its
//!   `min_replicas` that fits without preemption. Fewer replicas fit wherever more do, so
//!   the size is found by bisection: at most about log2(replicas) packs. If none fits, it
//!   plans a preemption for its minimum only.
//! - Growth: a cycle that places nothing else stops one gang below its `replicas` for which
//!   one more replica fits now (beside its own, within its topology and its queue's quota),
//!   once `min_runtime` has passed since its start. The decision names the largest
//!   placement that fits with the gang's own resources counted free; the state starts it
//!   there as its stop completes (`Decision::Grow`).

use baton_model::alloc::ReplicaAlloc;
use baton_model::elastic::Elastic;
use baton_model::job::{Job, JobState, PreemptionMode, Topology};
use baton_model::ledger::Vector;
use baton_model::plan::{Decision, Plan};

use crate::needs::{Needs, TaskNeed};
use crate::nodes::{IndexNodes, SetNodes};
use crate::pack::{Packing, pack};
use crate::view::View;

/// The gang's needs at `n` replicas of its elastic task.
pub fn sized(needs: &Needs, e: &Elastic, n: u32) -> Needs {
    let mut out = needs.clone();
    out.tasks[e.task as usize].replicas = n;
    out.demands = out.pool_choices.iter().map(|a| out.demand(a)).collect();
    out
}

/// The largest size from `hi` down to `lo` for which `fits` holds, by bisection; `None`
/// when not even `lo` does. `fits(lo)` is asked first, so when nothing fits the last answer
/// is the smallest size's (at admission its quota verdicts give the job's reason).
pub fn largest_fitting(lo: u32, hi: u32, mut fits: impl FnMut(u32) -> bool) -> Option<u32> {
    if lo > hi || !fits(lo) {
        return None;
    }
    let (mut best, mut lo) = (lo, lo + 1);
    let mut hi = hi;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    Some(best)
}

/// Section 13's growth: at most one gang a cycle, and only a cycle whose plan places,
/// preempts and resumes nothing. One a cycle keeps two gangs from counting the same free
/// GPUs; the next cycle looks again.
pub fn grow_one(view: &mut View, plan: &mut Plan, unplaced_trees: &std::collections::BTreeSet<usize>) {
    let placing = plan.decisions.iter().any(|d| {
        matches!(
            d,
            Decision::Place { .. }
                | Decision::Preempt { .. }
                | Decision::ResumeInPlace { .. }
                | Decision::Reserve { .. }
        )
    });
    if placing {
        return;
    }
    let state = view.state;
    for (&id, e) in state.elastic_gangs() {
        let Some(job) = state.job(id) else { continue };
        // While a job of its lending tree waits, borrowed room is not idle: the waiting job
        // may reclaim it at once, and with no minimum runtime the two would trade it without
        // end. The gang then grows only within its queue's nominal quota.
        let within_nominal = unplaced_trees.contains(&view.ledger.queues[view.queue_np(job).0].tree);
        // Section 12: never past what its user's limit allows.
        let top = view.user_held.elastic_size(state, job, e, true).map_or(e.max, |n| n.min(e.max));
        if !may_grow(view, job, e) || e.size(&job.spec) >= top || !one_more_fits(view, job, e) {
            continue;
        }
        if let Some(replicas) = larger_placement(view, job, e, top, within_nominal) {
            if held_back_by_reservation(view, job, &replicas) {
                continue;
            }
            plan.decisions.push(Decision::Grow { job: id, attempt: job.attempt, replicas });
            // As `State::apply` of the Grow: the gang leaves its queue's usage. Nothing is
            // decided after growth, so nothing else of the view needs to know.
            view.ledger.begin_stop(id);
            return;
        }
    }
}

/// Section 9, as `apply` holds a growth to it (`State::check_reservations`, the same rule):
/// while a reservation of another job of its queue holds, or where the larger placement
/// would take what a reservation holds (its GPUs, and the part of its other resources free
/// now), the gang grows only as a backfill that ends in time. Its own resources count free
/// for the placement, so a gang a reservation waits for would otherwise start again on them
/// and run on past the time the reservation waits for. A growth is planned only in a cycle
/// that places and reserves nothing, so the state's reservations are the cycle's.
fn held_back_by_reservation(view: &View, job: &Job, replicas: &[ReplicaAlloc]) -> bool {
    let shares = view.state.shares(job, replicas);
    view.state.check_reservations(job.id, &shares, &[]).is_err()
}

/// The largest placement above the gang's size that fits with its own resources counted
/// free, over the nodes of its pools (a pack over a node set: asked only of a gang that
/// one more replica fits, so at most once a cycle that grows).
fn larger_placement(
    view: &mut View,
    job: &Job,
    e: &Elastic,
    top: u32,
    within_nominal: bool,
) -> Option<Vec<ReplicaAlloc>> {
    let base = Needs::of(view, job);
    let pools = base.all_pools();
    let closed = crate::windows::close_for(view, job);
    let nodes: Vec<usize> =
        (0..view.ledger.nodes.len()).filter(|&n| pools.contains(&view.ledger.nodes[n].pool)).collect();
    let set = SetNodes::new(view, job.id, &[job.id], &nodes);
    crate::windows::reopen(view, closed);
    let (q, np) = view.queue_np(job);
    let mut found: Option<(Needs, Packing)> = None;
    largest_fitting(e.size(&job.spec) + 1, top, |n| {
        let needs = sized(&base, e, n);
        let admitted = |view: &mut View, d: &[(usize, Vector)]| {
            let verdict = view.ledger.without([job.id], |l| l.check_admission(q, d, np));
            verdict.is_ok_and(|a| !(within_nominal && a.borrows))
        };
        for (a, d) in needs.pool_choices.iter().zip(&needs.demands) {
            if admitted(view, d)
                && let Some(p) = pack(&set, &needs, a)
            {
                found = Some((needs.clone(), p));
                return true;
            }
        }
        false
    })?;
    let (needs, p) = found?;
    let names = |n: usize| view.ledger.nodes[n].name.clone();
    Some(p.allocate(&set, &needs, names).0)
}

/// Running below its top, past its minimum runtime, not stopping, and a stop would not end
/// it (mode cancel).
fn may_grow(view: &View, job: &Job, e: &Elastic) -> bool {
    job.state == JobState::Running
        && job.stopping.is_none()
        && e.size(&job.spec) < e.max
        && job.spec.preemption_mode != PreemptionMode::Cancel
        && view.now_ms >= job.started_ms.saturating_add(job.spec.min_runtime_ms)
        && !view.is_taken(job.id)
}

/// One more replica of the elastic task fits now without preemption: in the pool its
/// replicas run in, on a node its topology allows (its node, its rack), within its queue's
/// quota, and on no node closed to it by a maintenance window ahead.
fn one_more_fits(view: &mut View, job: &Job, e: &Elastic) -> bool {
    let Some(first) = job.replicas.iter().find(|r| r.task == e.task) else { return false };
    let Some(at) = view.ledger.node(first.node.as_str()) else { return false };
    let pool = view.ledger.nodes[at].pool;
    let task = &job.spec.tasks[e.task as usize];
    let need = view.ledger.kinds.vector_lossy(&task.resources);
    let mut one = Needs {
        tasks: vec![TaskNeed { need, replicas: 1, pools: vec![pool] }],
        topology: None,
        levels: crate::needs::Levels::of(&view.ledger, None),
        pool_choices: vec![vec![pool]],
        demands: Vec::new(),
    };
    one.demands = vec![one.demand(&[pool])];
    let (q, np) = view.queue_np(job);
    if view.ledger.check_admission(q, &one.demands[0], np).is_err() {
        return false;
    }
    let closed = crate::windows::close_for(view, job);
    let fits = match job.spec.topology.filter(|t| t.required().is_some()) {
        None => pack(&IndexNodes { view }, &one, &[pool]).is_some(),
        Some(t) => {
            let near = near_nodes(view, job, t);
            pack(&SetNodes::new(view, job.id, &[], &near), &one, &[pool]).is_some()
        }
    };
    crate::windows::reopen(view, closed);
    fits
}

/// The nodes a gang of topology `t` may add a replica on: its own node, or its required
/// level's domain (its rack, its NVLink domain).
fn near_nodes(view: &View, job: &Job, t: Topology) -> Vec<usize> {
    let own: Vec<usize> = job.replicas.iter().filter_map(|r| view.ledger.node(r.node.as_str())).collect();
    match t {
        Topology::Node => {
            let mut v = own;
            v.sort_unstable();
            v.dedup();
            v
        }
        // Its required level's domain (the rack's, for `Rack`).
        t => {
            let Some(level) = crate::needs::Levels::of(&view.ledger, Some(t)).required() else { return Vec::new() };
            let doms: Vec<u32> = own.iter().map(|&n| view.ledger.nodes[n].domains[level]).collect();
            (0..view.ledger.nodes.len()).filter(|&n| doms.contains(&view.ledger.nodes[n].domains[level])).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisection_finds_the_largest_size_that_fits_and_asks_the_minimum_first() {
        for limit in 2..16 {
            let mut asked = Vec::new();
            let got = largest_fitting(2, 15, |n| {
                asked.push(n);
                n <= limit
            });
            assert_eq!(got, Some(limit), "limit {limit}");
            assert_eq!(asked[0], 2, "the minimum first");
            assert!(asked.len() <= 6, "{asked:?}");
        }
        assert_eq!(largest_fitting(2, 15, |n| n < 2), None);
        let mut asked = Vec::new();
        largest_fitting(2, 15, |n| {
            asked.push(n);
            false
        });
        assert_eq!(asked, vec![2], "nothing fits: only the minimum was asked");
    }
}
