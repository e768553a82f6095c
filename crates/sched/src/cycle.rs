//! One scheduling cycle: resume what may resume, then decide each pending job in order:
//! place it (first without borrowing, then by borrowing), or plan a preemption for it, or
//! say why it waits.

use baton_model::elastic::{Elastic, gang_of_excess};
use baton_model::job::{Job, JobId};
use baton_model::ledger::{Admission, Ledger, QuotaBlock};
use baton_model::node::NodeStatus;
use baton_model::plan::{Decision, Plan, Victim};
use baton_model::state::{State, demand_of};

use crate::failures::Failures;
use crate::needs::Needs;
use crate::nodes::{IndexNodes, SetNodes};
use crate::nofit::NoFit;
use crate::order::{Candidate, Order};
use crate::pack::{Packing, pack};
use crate::preempt::{self, Planned};
use crate::reason;
use crate::reserve::{self, Holds};
use crate::view::View;

/// Preemption plans (the expensive part of a cycle) per cycle; later jobs wait a cycle.
pub const MAX_PREEMPTION_PLANS_PER_CYCLE: usize = 256;

/// Computes the plan for one cycle over `state` at time `now_ms`. Pure: the same state and
/// time give the same plan.
pub fn cycle(state: &State, now_ms: u64) -> Plan {
    decide_all(state, now_ms).0
}

/// The cycle's plan, and its working copy of the ledger as its decisions left it: what
/// `State::apply` of the plan should charge (the property tests compare the two).
pub(crate) fn decide_all(state: &State, now_ms: u64) -> (Plan, Ledger) {
    let mut view = View::new(state, now_ms);
    let mut plan = Plan { based_on: state.applied(), decisions: Vec::new() };
    let (over, suspended) = (std::mem::take(&mut view.jobs.over_limit), std::mem::take(&mut view.jobs.suspended));
    stop_at_time_limits(&mut view, &over, &mut plan);
    resume_suspended(&mut view, &suspended, &mut plan);
    let mut holds = Holds::load(&mut view, &mut plan);
    let mut order = Order::new(&view);
    // At most one decision per pending job: room for all of them up front.
    plan.decisions.reserve(order.remaining());
    let mut planner = Planner {
        budget: MAX_PREEMPTION_PLANS_PER_CYCLE,
        failures: Failures::default(),
        reasons: Default::default(),
        verdicts: Vec::new(),
        no_fit: NoFit::default(),
        kept: preempt::Kept::default(),
    };
    // Starving jobs (section 9), in cycle order: stuck even by preemption, and Pending for
    // `reserve_after`; only as many as may be looked at this cycle.
    let reserve_after_ms = state.scheduler().reserve_after_ms;
    let starving = |c: &Candidate| reserve_after_ms.is_some_and(|a| now_ms.saturating_sub(c.job.pending_since_ms) >= a);
    let mut stuck: Vec<Candidate> = Vec::new();
    // Lending trees with a job this cycle decided and did not place: no gang grows there.
    let mut unplaced_trees = std::collections::BTreeSet::new();
    // The nodes windows ahead closed to the job decided last. What the cycle learns of room
    // and victims as it goes (`no_fit`, `failures`) holds only while the same nodes are
    // closed: a job that ends before a window has its nodes open where the jobs before it
    // did not (`examples/scenarios/window-nofit-per-job.yaml`).
    let mut last_closed: Vec<usize> = Vec::new();
    while let Some(c) = order.next() {
        let closed = crate::windows::close_for(&mut view, c.job);
        // Most cycles have no window ahead: two empty lists, compared without a call.
        if !(closed.is_empty() && last_closed.is_empty()) && closed != last_closed {
            planner.no_fit.clear();
            planner.failures = Failures::default();
            last_closed.clone_from(&closed);
        }
        let before = plan.decisions.len();
        let outcome = decide_held(&mut view, &c, &mut plan, &mut planner, &mut holds);
        if outcome != Outcome::Placed
            && let Some(note) = crate::windows::note(&view, c.job, &closed)
        {
            name_windows(&mut plan, before, c.job, &note);
        }
        crate::windows::reopen(&mut view, closed);
        order.after(&view, c.queue, c.job, outcome == Outcome::Placed);
        if outcome != Outcome::Placed {
            unplaced_trees.insert(view.ledger.queues[c.queue].tree);
        }
        if outcome == Outcome::Stuck && stuck.len() < reserve::MAX_RESERVATION_WALKS_PER_CYCLE && starving(&c) {
            stuck.push(c);
        }
    }
    reserve_for_first_starving(&mut view, &holds, &stuck, &mut plan);
    crate::elastic::grow_one(&mut view, &mut plan, &unplaced_trees);
    for (job, head) in order.held_back() {
        let why = format!("waiting behind {} (queue {} is StrictFIFO)", head.spec.name, job.spec.queue);
        wait(&mut plan, job, why);
    }
    clip_waits(state, &mut plan);
    crate::refresh::limit_amount_refreshes(state, now_ms, &mut plan);
    (plan, view.ledger)
}

/// The state keeps a reason clipped to `MAX_MESSAGE_LEN` bytes. A longer one, compared whole
/// with the clipped one kept, was decided again at every cycle: a plan, a Raft entry, every
/// round, for nothing (the property tests found it once jobs waited behind three windows,
/// each named in the reason). Long reasons are clipped here as the state clips them, and a
/// Wait that then changes nothing is dropped.
fn clip_waits(state: &State, plan: &mut Plan) {
    use baton_model::limits::MAX_MESSAGE_LEN;
    plan.decisions.retain_mut(|d| match d {
        Decision::Wait { job, reason } if reason.len() > MAX_MESSAGE_LEN => {
            *reason = baton_model::event::clip_message(std::mem::take(reason));
            let kept = match state.job(*job) {
                Some(j) => Some(&j.reason),
                None => state.array(*job).map(|a| &a.reason),
            };
            kept != Some(reason)
        }
        _ => true,
    });
}

/// Running jobs past their time limit (`over`) are stopped (docs/policy.md section 9).
/// What they hold frees only once they have stopped; meanwhile, as `State::apply` will, the
/// view stops charging them and they are no one's victims.
fn stop_at_time_limits(view: &mut View, over: &[&Job], plan: &mut Plan) {
    for &job in over {
        plan.decisions.push(Decision::TimeLimit { job: job.id, attempt: job.attempt });
        view.ledger.begin_stop(job.id);
        view.take(job.id);
        view.time_out(job.id);
    }
}

/// Suspended jobs whose preemptor no longer holds anything run again in place, once their
/// queue may take their resources again (a suspended job charges no quota).
fn resume_suspended(view: &mut View, suspended: &[&Job], plan: &mut Plan) {
    let state = view.state;
    for &job in suspended.iter().filter(|j| state.preemptor_gone(j)) {
        if let Some(r) = job.replicas.iter().find(|r| state.nodes()[&r.node].status != NodeStatus::Ready) {
            wait(plan, job, format!("suspended in place; node {} is not ready", r.node));
            continue;
        }
        if let Some((r, w)) = job.replicas.iter().find_map(|r| state.active_window_on(&r.node).map(|w| (r, w))) {
            let why = format!("suspended in place; node {} is in maintenance window {}", r.node, w.spec.name);
            wait(plan, job, why);
            continue;
        }
        let shares = state.shares(job, &job.replicas);
        let (q, np) = view.queue_np(job);
        // A suspended job holds nothing its user's limit counts (section 12).
        let holds = view.ledger.kinds.vector_lossy(&State::holding(job));
        if let Some(why) = view.user_held.block(state, &view.ledger, job, q, &holds) {
            wait(plan, job, format!("suspended in place; its user may hold no more now: {why}"));
            continue;
        }
        match view.ledger.check_admission(q, &demand_of(&view.ledger, &shares), np) {
            Ok(_) => {
                view.unhold(job.id);
                view.user_held.count(state, &view.ledger, job, q, &job.replicas);
                plan.decisions.push(Decision::ResumeInPlace { job: job.id, attempt: job.attempt });
            }
            Err(b) => {
                let why = format!(
                    "suspended in place; resumes when its queue may use its resources again: {}",
                    b.describe(&view.ledger, q)
                );
                wait(plan, job, why);
            }
        }
    }
}

fn wait(plan: &mut Plan, job: &Job, reason: String) {
    wait_for(plan, job.id, &job.reason, reason);
}

/// A job that waits while maintenance windows take nodes from it says so (decisions.md
/// section 14: reasons name the window): `note` goes after the reason the cycle gave it
/// (its Wait decision from `from` on, or its unchanged reason when it pushed none).
fn name_windows(plan: &mut Plan, from: usize, job: &Job, note: &str) {
    let pushed =
        plan.decisions[from..].iter().rposition(|d| matches!(d, Decision::Wait { job: j, .. } if *j == job.id));
    let base = match pushed {
        Some(i) => match plan.decisions.remove(from + i) {
            Decision::Wait { reason, .. } => reason,
            _ => unreachable!("matched a Wait above"),
        },
        None if job.reason.ends_with(note) => return,
        None => job.reason.clone(),
    };
    let reason = format!("{base}; {note}");
    wait(plan, job, reason);
}

/// The job keeps waiting for `reason`; `old` is its reason so far.
fn wait_for(plan: &mut Plan, job: JobId, old: &str, reason: String) {
    if old != reason {
        plan.decisions.push(Decision::Wait { job, reason });
    }
}

/// `wait_for` with the reason "{base}; {why}", built only if the job's reason changes:
/// most of a long backlog waits for the same reason cycle after cycle.
fn wait_because(plan: &mut Plan, c: &Candidate, base: &str, why: &str) {
    const SEP: &str = "; ";
    let old = c.reason.as_bytes();
    let same = old.len() == base.len() + SEP.len() + why.len()
        && old.starts_with(base.as_bytes())
        && old[base.len()..].starts_with(SEP.as_bytes())
        && old.ends_with(why.as_bytes());
    if !same {
        let mut reason = String::with_capacity(base.len() + SEP.len() + why.len());
        reason.push_str(base);
        reason.push_str(SEP);
        reason.push_str(why);
        plan.decisions.push(Decision::Wait { job: c.id, reason });
    }
}

/// How deciding a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Placed,
    /// It waits (for room, quota, victims, or a reservation).
    Waits,
    /// It cannot be placed even by preemption (section 9: it may be starving).
    Stuck,
}

/// Section 9: the first starving job in cycle order gets a reservation, if any of its pools
/// without one would hold it. One per cycle; the next cycle looks again.
fn reserve_for_first_starving(view: &mut View, holds: &Holds, starving: &[Candidate], plan: &mut Plan) {
    let mut seen = reserve::Seen::default();
    for c in starving {
        if reserve::make(view, holds, c, plan, &mut seen) {
            return;
        }
    }
}

/// Decides one job under this cycle's reservations: the reserving job waits for its
/// reserved resources (or fits elsewhere sooner); no other job of its queue is placed
/// anywhere; a job with a time limit that ends in time may use reserved resources.
fn decide_held(view: &mut View, c: &Candidate, plan: &mut Plan, planner: &mut Planner, holds: &mut Holds) -> Outcome {
    if let Some(i) = holds.of_job(c.id) {
        return decide_reserving(view, c, plan, planner, holds, i);
    }
    // A preemptor already has its resources held for it (section 5): no reservation of
    // another job stands between it and them, as the plan checker has it
    // (`State::check_reservations`). A section-9 reservation made later on a GPU it holds a
    // fraction of blocks that GPU whole for every other job, this preemptor included; with
    // the blocks standing it waited a cycle once its victims had stopped, for the
    // reserving job to start first (found by the property tests).
    if view.state.reservations().contains_key(&c.id) {
        let all: Vec<usize> = (0..holds.list.len()).collect();
        holds.unblock(view, &all);
        let outcome = decide(view, c, plan, planner, holds);
        holds.reblock(view, &all);
        return outcome;
    }
    let backfills = holds.backfills(c.job, view.now_ms);
    let own = holds.of_queue(c.queue, c.id);
    if let Some(i) = own.filter(|i| !backfills.contains(i)) {
        // The reason is the same for every job of the queue: built once per cycle, copied
        // only for a job whose reason changes (most of the queue's backlog keeps it).
        let why = &holds.list[i].behind;
        if c.reason != why {
            plan.decisions.push(Decision::Wait { job: c.id, reason: why.clone() });
        }
        return Outcome::Waits;
    }
    if backfills.is_empty() {
        return decide(view, c, plan, planner, holds);
    }
    // Section 12 holds for a backfill too: a job its user's limit holds back waits (`apply`
    // refuses its start). An elastic gang the limit caps is not backfilled whole.
    let Some(capped) = user_limit_or_wait(view, c, plan) else { return Outcome::Waits };
    // Backfill: the reserved resources are open to this job for placement only.
    holds.unblock(view, &backfills);
    planner.no_fit.clear();
    let placed = capped.is_none() && !c.needs.pool_choices.is_empty() && try_place(view, c, plan, planner);
    holds.reblock(view, &backfills);
    planner.no_fit.clear();
    if placed {
        return Outcome::Placed;
    }
    if own.is_some() {
        let why = "waiting: no room to backfill beside its queue's reservation".to_string();
        wait_for(plan, c.id, c.reason, why);
        return Outcome::Waits;
    }
    match decide(view, c, plan, planner, holds) {
        Outcome::Stuck => Outcome::Waits,
        o => o,
    }
}

/// The job holds a reservation: it starts there once the reserved resources are free, or
/// elsewhere if it fits sooner; it plans no preemption meanwhile.
fn decide_reserving(
    view: &mut View,
    c: &Candidate,
    plan: &mut Plan,
    planner: &mut Planner,
    holds: &mut Holds,
    i: usize,
) -> Outcome {
    // Section 12: a starving job is placed under its user's limit like any other.
    let capped = match user_limit(view, c) {
        Ok(capped) => capped,
        Err(why) => {
            wait_for(plan, c.id, c.reason, why);
            return Outcome::Waits;
        }
    };
    if let Some(most) = capped {
        return start_capped(view, c, plan, planner, holds, i, most);
    }
    if holds.ready(view, i, c.job) {
        holds.unblock(view, &[i]);
        planner.no_fit.clear();
        let replicas = view.state.pool_reservation_of(c.id).map(|r| r.replicas.clone()).unwrap_or_default();
        view.occupy(c.job, c.queue, &holds.list[i].shares);
        view.user_held.count(view.state, &view.ledger, c.job, c.queue, &replicas);
        plan.decisions.push(Decision::Place { job: c.id, attempt: c.job.attempt + 1, replicas });
        return Outcome::Placed;
    }
    // Packed with its block standing (the block does not keep its own job out); its charge
    // must not take the block over.
    if !c.needs.pool_choices.is_empty() && try_place(view, c, plan, planner) {
        holds.recharge_started(view, i);
        return Outcome::Placed;
    }
    let why = reserve::reserved_reason(&holds.list[i].where_, holds.waiting_for(view, i));
    wait_for(plan, c.id, c.reason, why);
    Outcome::Waits
}

/// A starving elastic gang its user's limit caps below the whole size it reserved (section
/// 12; a reservation is for the whole size, section 9): it starts at the largest size the
/// limit allows that fits now, on its reserved resources or beside them, else waits.
/// Started on its whole reservation, `apply` refused it at every cycle: its user may not
/// hold that much (found by the property tests).
fn start_capped(
    view: &mut View,
    c: &Candidate,
    plan: &mut Plan,
    planner: &mut Planner,
    holds: &mut Holds,
    i: usize,
    most: u32,
) -> Outcome {
    let e = view.state.elastic(c.id).expect("only an elastic gang is capped below its size");
    // Its own block lifted, as when it starts on its whole reservation; what the cycle
    // learned of room with the block standing does not hold meanwhile.
    holds.unblock(view, &[i]);
    planner.no_fit.clear();
    if !c.needs.pool_choices.is_empty() && place_smaller(view, c, e, most, plan, planner).is_ok() {
        return Outcome::Placed;
    }
    holds.reblock(view, &[i]);
    planner.no_fit.clear();
    let why = reserve::reserved_reason(&holds.list[i].where_, holds.waiting_for(view, i));
    wait_for(plan, c.id, c.reason, format!("{why}; its user's limit allows {most} of its replicas"));
    Outcome::Waits
}

/// What limits and what speeds up deciding within one cycle.
struct Planner {
    budget: usize,
    failures: Failures,
    reasons: reason::Reasons,
    /// Shapes that found no room this cycle.
    no_fit: NoFit,
    /// Quota verdicts per pool choice of the job being decided (reused).
    verdicts: Vec<Result<Admission, QuotaBlock>>,
    /// Preemption candidates gathered for an earlier preemptor (`preempt::Kept`).
    kept: preempt::Kept,
}

/// Decides one job.
fn decide(view: &mut View, c: &Candidate, plan: &mut Plan, planner: &mut Planner, holds: &Holds) -> Outcome {
    let (job, q, needs) = (c.job, c.queue, &*c.needs);
    if let Some(r) = view.state.reservations().get(&c.id) {
        // A victim whose ranks are still being stopped (completing) holds its GPUs too.
        let waiting = r.victims.iter().filter(|v| view.state.still_holds(**v)).count();
        if waiting == 0 {
            // A node that takes no new work for it since the reservation was made (cordoned,
            // lost, in a window, or closed to it by a window ahead made since): `apply`
            // refuses the start there, so the job waits, saying which node and (the window
            // note the cycle adds) why.
            if let Some(node) = r.replicas.iter().find(|a| !node_open(view, a.node.as_str())) {
                wait(plan, job, reason::reserved_node_closed(node.node.as_str()));
                return Outcome::Waits;
            }
            let shares = view.state.shares(job, &r.replicas);
            // Apply refuses a start that does not fit (`check_fit`), and the view asserts it.
            if let Some(i) = view.ledger.lacks_room(job.id, &shares) {
                let node = &view.ledger.nodes[shares[i].node].name;
                wait(plan, job, reason::reserved_room_held(view.state, node.as_str()));
                return Outcome::Waits;
            }
            // Its user's limit counted its reservation already (`State::user_limit_block`).
            view.occupy(job, q, &shares);
            // Its reservation becomes its occupancy: the same room, but forget what did not
            // fit rather than lean on that.
            planner.no_fit.clear();
            plan.decisions.push(Decision::Place {
                job: job.id,
                attempt: job.attempt + 1,
                replicas: r.replicas.clone(),
            });
            return Outcome::Placed;
        }
        wait(plan, job, reason::victims_stopping(waiting));
        return Outcome::Waits;
    }
    if needs.pool_choices.is_empty() {
        wait_for(plan, c.id, c.reason, "none of its pools has a node".into());
        return Outcome::Waits;
    }
    // Section 12: a job its user's limit holds back waits; it does not preempt.
    let Some(capped) = user_limit_or_wait(view, c, plan) else { return Outcome::Waits };
    if capped.is_none() && try_place(view, c, plan, planner) {
        return Outcome::Placed;
    }
    // An elastic gang takes the largest size that fits, else preempts for its minimum.
    let smaller = match view.state.elastic(c.id) {
        Some(e) => match place_smaller(view, c, e, capped.unwrap_or(e.max - 1), plan, planner) {
            Ok(()) => return Outcome::Placed,
            Err(min) => Some(min),
        },
        None => None,
    };
    let needs = smaller.as_ref().unwrap_or(needs);
    let np = !c.preemptible;
    let quota_block = planner.verdicts.iter().find_map(|v| v.err());
    let base = match quota_block {
        Some(b) => planner.reasons.quota(view, q, b),
        None => planner.reasons.no_room(view, needs),
    };
    let key = Failures::key(needs, q, np);
    if let Some(why) = key.as_ref().and_then(|k| planner.failures.lookup(k, c)) {
        wait_because(plan, c, &base, why);
        return Outcome::Stuck;
    }
    if planner.budget == 0 {
        wait_because(plan, c, &base, "preemption planning continues next cycle");
        return Outcome::Waits;
    }
    planner.budget -= 1;
    // Elastic gangs' replicas above their minimum are candidates of their own while the
    // preemption is planned and reserved (decisions.md section 13): the planner splits them
    // off (`View::split_excess`), and they are merged back here.
    // Owned: the reasons' cache that lends `base` is the planner's, which planning borrows.
    let base = base.to_string();
    let outcome = preempt_for(view, c, needs, plan, planner, holds, &base, key);
    view.merge_excess();
    outcome
}

/// Node `name` takes new work for the job being decided: known to the ledger and
/// schedulable in the view (which `windows::close_for` closed to the job if a window ahead
/// holds it).
fn node_open(view: &View, name: &str) -> bool {
    view.ledger.node(name).is_some_and(|n| view.ledger.nodes[n].schedulable)
}

/// Whether the job's user may hold what it asks under its queue's `max_per_user`: `Err`
/// with the reason when not; `Ok(Some(n))` for an elastic gang the limit allows only `n`
/// replicas of (below its whole size, at least its minimum).
fn user_limit(view: &mut View, c: &Candidate) -> Result<Option<u32>, String> {
    let state = view.state;
    let Some(e) = state.elastic(c.id) else {
        let demand = crate::fair::demand(&c.needs);
        return match view.user_held.block(state, &view.ledger, c.job, c.queue, &demand) {
            Some(why) => Err(why),
            None => Ok(None),
        };
    };
    match view.user_held.elastic_size(state, c.job, e, false) {
        None => Ok(None),
        Some(n) if n >= e.max => Ok(None),
        Some(n) if n >= e.min => Ok(Some(n)),
        Some(_) => {
            let at_min = crate::fair::demand(&crate::elastic::sized(&c.needs, e, e.min));
            let why = view.user_held.block(state, &view.ledger, c.job, c.queue, &at_min);
            Err(why.unwrap_or_else(|| "its user's limit".into()))
        }
    }
}

/// `user_limit`, with a job the limit holds back told why it waits (`None`).
fn user_limit_or_wait(view: &mut View, c: &Candidate, plan: &mut Plan) -> Option<Option<u32>> {
    match user_limit(view, c) {
        Ok(capped) => Some(capped),
        Err(why) => {
            wait_for(plan, c.id, c.reason, why);
            None
        }
    }
}

/// Plans a preemption for the job (with `needs`) and reserves what it takes, or says why it
/// waits.
#[allow(clippy::too_many_arguments)]
fn preempt_for(
    view: &mut View,
    c: &Candidate,
    needs: &Needs,
    plan: &mut Plan,
    planner: &mut Planner,
    holds: &Holds,
    base: &str,
    key: Option<crate::failures::Key>,
) -> Outcome {
    let (job, q) = (c.job, c.queue);
    match preempt::plan(view, job, needs, &mut planner.kept) {
        Ok(Planned::Preempt { victims, packing, message }) => {
            let set = SetNodes::new(view, job.id, &victims, &packing.nodes());
            let names = |n: usize| view.ledger.nodes[n].name.clone();
            let (replicas, shares) = packing.allocate(&set, needs, names);
            // Section 9: no job is placed on reserved resources, a preemptor included.
            if let Some(h) = holds.overlapping(job.id, &shares) {
                let why = format!("it could only preempt its way onto GPUs reserved for {}", view.job(h).spec.name);
                wait_because(plan, c, base, &why);
                return Outcome::Waits;
            }
            let (whole, shrunk) = whole_and_shrunk(&victims);
            let attempts =
                |ids: &[JobId]| ids.iter().map(|&v| Victim { job: v, attempt: view.job(v).attempt }).collect();
            let (victims_named, shrunk_named): (Vec<Victim>, Vec<Victim>) = (attempts(&whole), attempts(&shrunk));
            view.reserve(job, q, &shares, &victims);
            view.user_held.count(view.state, &view.ledger, job, q, &replicas);
            plan.decisions.push(if shrunk_named.is_empty() {
                Decision::Preempt { job: job.id, victims: victims_named, replicas, message }
            } else {
                let (victims, shrunk) = (victims_named, shrunk_named);
                Decision::PreemptShrinking { job: job.id, victims, shrunk, replicas, message }
            });
            Outcome::Waits
        }
        Ok(Planned::WaitForLeaving { leaving }) => {
            wait(plan, job, reason::leaving(leaving));
            Outcome::Waits
        }
        Err(refusal) => {
            // Becomes the job's reason: words from here on, and the failure cache keeps them.
            let why = refusal.to_string();
            if let Some(k) = key {
                planner.failures.record(k, c, &why);
            }
            wait_because(plan, c, base, &why);
            Outcome::Stuck
        }
    }
}

/// A preemption's victims as the state takes them: jobs stopped whole, in the planner's
/// order, and gangs that only give up their replicas above their minimum (their excess part
/// taken, the rest of the gang not).
fn whole_and_shrunk(victims: &[JobId]) -> (Vec<JobId>, Vec<JobId>) {
    let whole: Vec<JobId> = victims.iter().copied().filter(|&v| gang_of_excess(v).is_none()).collect();
    let shrunk = victims.iter().filter_map(|&v| gang_of_excess(v)).filter(|g| !whole.contains(g)).collect();
    (whole, shrunk)
}

/// Places the job without preemption if it fits: quota first (cheap), once per pool choice;
/// then placement, first where the queue stays within nominal, then where it borrows; each
/// pool choice is packed at most once. Leaves the quota verdicts in `planner.verdicts`.
fn try_place(view: &mut View, c: &Candidate, plan: &mut Plan, planner: &mut Planner) -> bool {
    match find_room(view, c, &c.needs, planner) {
        Some(p) => {
            place(view, plan, c.queue, c.job, &c.needs, &p);
            true
        }
        None => false,
    }
}

/// Where the job fits with `needs` without preemption, as `try_place` looks.
fn find_room(view: &View, c: &Candidate, needs: &Needs, planner: &mut Planner) -> Option<Packing> {
    let (q, np) = (c.queue, !c.preemptible);
    let verdicts = &mut planner.verdicts;
    verdicts.clear();
    verdicts.extend(needs.demands.iter().map(|d| view.ledger.check_admission(q, d, np)));
    for borrowing in [false, true] {
        for (a, verdict) in needs.pool_choices.iter().zip(planner.verdicts.iter()) {
            if !verdict.is_ok_and(|adm| adm.borrows == borrowing) || planner.no_fit.known(needs, a) {
                continue;
            }
            match pack(&IndexNodes { view }, needs, a) {
                Some(p) => return Some(p),
                None => planner.no_fit.record(needs, a),
            }
        }
    }
    None
}

/// An elastic gang that does not fit whole starts with the largest size that fits
/// (decisions.md section 13); `Err` gives its needs at its minimum, to preempt for.
fn place_smaller(
    view: &mut View,
    c: &Candidate,
    e: &Elastic,
    most: u32,
    plan: &mut Plan,
    planner: &mut Planner,
) -> Result<(), Needs> {
    let at = |n: u32| crate::elastic::sized(&c.needs, e, n);
    // Bisection only moves up from a size that fits: the last one found is the largest.
    let mut found: Option<(Needs, Packing)> = None;
    crate::elastic::largest_fitting(e.min, most, |n| {
        let needs = at(n);
        let room = find_room(view, c, &needs, planner);
        let fits = room.is_some();
        if let Some(p) = room {
            found = Some((needs, p));
        }
        fits
    });
    match found {
        Some((needs, p)) => {
            place(view, plan, c.queue, c.job, &needs, &p);
            Ok(())
        }
        None => Err(at(e.min)),
    }
}

fn place(view: &mut View, plan: &mut Plan, q: usize, job: &Job, needs: &Needs, p: &Packing) {
    let names = |n: usize| view.ledger.nodes[n].name.clone();
    let (replicas, shares) = p.allocate(&IndexNodes { view }, needs, names);
    view.occupy(job, q, &shares);
    view.user_held.count(view.state, &view.ledger, job, q, &replicas);
    plan.decisions.push(Decision::Place { job: job.id, attempt: job.attempt + 1, replicas });
}

#[cfg(test)]
mod tests {
    use baton_model::alloc::ReplicaAlloc;
    use baton_model::command::{Command, Op, Outcome};
    use baton_model::fixture::{gpu_job, gpu_node};
    use baton_model::job::{JobSpec, JobState};
    use baton_model::name::Name;
    use baton_model::queue::{PoolQuota, QueueSpec};
    use baton_model::resources::Resources;
    use baton_model::scheduler::SchedulerSettings;

    use super::*;

    fn apply(s: &mut State, op: Op) -> Outcome {
        s.apply(Command { now_ms: 1_000, op }).unwrap_or_else(|e| panic!("refused: {e}")).outcome
    }

    fn submit_spec(s: &mut State, spec: JobSpec) -> JobId {
        match apply(s, Op::Submit { spec, request_id: None }) {
            Outcome::Submitted { job, .. } => job,
            other => panic!("not submitted: {other:?}"),
        }
    }

    fn submit(s: &mut State, name: &str, gpus: u64, cpus: u64) -> JobId {
        let mut spec: JobSpec = gpu_job(name, "q", gpus);
        spec.tasks[0].resources = Resources::of(&[("gpu", gpus), ("cpu", cpus)]);
        submit_spec(s, spec)
    }

    /// Rank `index` of task 0 on `node`, holding no GPU.
    fn rank(index: u32, node: &str) -> ReplicaAlloc {
        ReplicaAlloc { task: 0, index, node: Name::lit(node), gpus: Vec::new() }
    }

    fn on_n0(gpus: &[u32]) -> Vec<ReplicaAlloc> {
        vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n0"), gpus: gpus.to_vec() }]
    }

    fn apply_plan(s: &mut State, decisions: Vec<Decision>) {
        let plan = Plan { based_on: s.applied(), decisions };
        match apply(s, Op::ApplyPlan(plan)) {
            Outcome::PlanApplied { rejected, .. } if rejected.is_empty() => {}
            other => panic!("plan not applied: {other:?}"),
        }
    }

    /// Section 9: a job holding a reservation that fits elsewhere without preemption starts
    /// there, which drops its reservation. The cycle blocks the reserved resources in its
    /// working ledger; the job's placement must not take that block over as a charge (the
    /// state charges it only what it occupies).
    #[test]
    fn a_reserving_job_placed_beside_its_reservation_is_charged_only_what_it_occupies() {
        let mut s = State::new();
        let mut node = gpu_node("n0", 4);
        node.resources = Resources::of(&[("gpu", 4), ("cpu", 8)]);
        apply(&mut s, Op::RegisterNode(node));
        let mut q = QueueSpec::named("q");
        let quota = PoolQuota { nominal: Resources::of(&[("gpu", 4), ("cpu", 8)]), ..Default::default() };
        q.quotas.insert(Name::lit("default"), quota);
        apply(&mut s, Op::PutQueue(q));
        apply(&mut s, Op::SetScheduler(SchedulerSettings { reserve_after_ms: Some(3_600_000) }));
        let (a, b) = (submit(&mut s, "a", 2, 1), submit(&mut s, "b", 2, 1));
        let r = submit(&mut s, "r", 2, 1);
        apply_plan(
            &mut s,
            vec![
                Decision::Place { job: a, attempt: 1, replicas: on_n0(&[0, 1]) },
                Decision::Place { job: b, attempt: 1, replicas: on_n0(&[2, 3]) },
                Decision::Reserve { job: r, pool: Name::lit("default"), replicas: on_n0(&[0, 1]), waits_for: vec![a] },
            ],
        );
        apply(&mut s, Op::JobExited { job: b, attempt: 1, exit_code: 0 });

        // `a` still holds the reserved GPUs; GPUs 2 and 3 are free beside them.
        let (plan, planned) = decide_all(&s, 2_000);
        assert!(
            plan.decisions.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == r)),
            "r fits beside its reservation: {plan:?}"
        );
        let mut after = s.clone();
        after.apply(Command { now_ms: 2_000, op: Op::ApplyPlan(plan) }).expect("applied");
        assert_eq!(planned.charges.get(&r), after.ledger().charges.get(&r), "r's charge");
        assert!(planned.usage_parts() == after.ledger().usage_parts(), "queue usage as the cycle left it");
    }

    /// Nodes n0 and n1 of one CPU each, and queue `q` owning both.
    fn two_cpu_nodes() -> State {
        use baton_model::node::NodeSpec;
        let mut s = State::new();
        for n in ["n0", "n1"] {
            apply(&mut s, Op::RegisterNode(NodeSpec { resources: Resources::of(&[("cpu", 1_000)]), ..gpu_node(n, 0) }));
        }
        let mut q = QueueSpec::named("q");
        let nominal = Resources::of(&[("cpu", 2_000)]);
        q.quotas.insert(Name::lit("default"), PoolQuota { nominal, ..Default::default() });
        apply(&mut s, Op::PutQueue(q));
        s
    }

    /// A gang suspended in place for a preemptor (it lends its CPUs), then requeued because
    /// its other node was lost: its rank still suspended on the reserved node is completing,
    /// holding that node's CPU until its agent reports it gone, and lends nothing any more.
    /// It is no longer among the reservation's victims (it stopped), so the preemptor must
    /// still wait for it. Found by a chaos partitions run (chaos/README.md, "Found so far"):
    /// the cycle placed the preemptor and the leader's scheduling task panicked at "would
    /// over-allocate node", on two leaders in turn.
    #[test]
    fn a_preemptor_waits_for_a_suspended_victims_rank_left_completing_by_a_lost_node() {
        use baton_model::command::Observed;
        use baton_model::job::PreemptionMode;
        use baton_model::node::NodeStatus;
        use baton_model::plan::Victim;

        let mut s = two_cpu_nodes();
        let cpu_job = |name: &str, replicas: u32, priority: i32, mode: PreemptionMode| {
            let mut spec = gpu_job(name, "q", 0);
            spec.tasks[0].replicas = replicas;
            spec.tasks[0].resources = Resources::of(&[("cpu", 1_000)]);
            spec.priority = baton_model::job::PriorityRef::Value(priority);
            spec.preemption_mode = mode;
            spec
        };
        let low = submit_spec(&mut s, cpu_job("low", 2, 1, PreemptionMode::Suspend));
        apply_plan(
            &mut s,
            vec![Decision::Place { job: low, attempt: 1, replicas: vec![rank(0, "n0"), rank(1, "n1")] }],
        );
        let high = submit_spec(&mut s, cpu_job("high", 1, 100, PreemptionMode::Checkpoint));
        let victims = vec![Victim { job: low, attempt: 1 }];
        let replicas = vec![rank(0, "n0")];
        apply_plan(&mut s, vec![Decision::Preempt { job: high, victims, replicas, message: "test".into() }]);
        for (index, node) in [(0, "n0"), (1, "n1")] {
            let suspended = Observed::Stopped { job: low, attempt: 1, rank: index, checkpointed: false };
            apply(&mut s, Op::Report { node: Name::lit(node), observations: vec![suspended] });
        }
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);
        apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
        assert_eq!(s.job(low).unwrap().state, JobState::Pending);
        assert!(s.completing(low).is_some(), "rank 0 is still suspended on n0");

        let plan = cycle(&s, 2_000);
        assert!(
            !plan.decisions.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == high)),
            "n0's CPU is still held by low's rank 0: {plan:?}"
        );
        apply_plan(&mut s, plan.decisions);
        let why = &s.job(high).unwrap().reason;
        assert!(why.contains("waiting for ranks of low still being stopped on node n0"), "{why}");
        let gone = Observed::Stopped { job: low, attempt: 1, rank: 0, checkpointed: false };
        apply(&mut s, Op::Report { node: Name::lit("n0"), observations: vec![gone] });
        let plan = cycle(&s, 3_000);
        assert!(
            plan.decisions.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == high)),
            "once it is gone, high is placed: {plan:?}"
        );
    }

    /// A gang suspended in place lends its CPUs to its preemptor, a gang too, on both nodes;
    /// then one node is lost: both jobs go back to the queue, and on the other node the
    /// suspended rank and the preemptor's rank running on its CPU are both being stopped.
    /// The ledger keeps the lend while they complete (the stopped process uses no CPU);
    /// the invariant check counted the lend only for a borrower still running, so it saw the
    /// CPU used twice. Found by the simulator once its load suspended jobs (seed 2 of 3
    /// minutes: `node n13 is over-allocated`).
    #[test]
    fn a_lend_holds_while_lender_and_borrower_are_both_being_stopped() {
        use baton_model::command::Observed;
        use baton_model::job::PreemptionMode;
        use baton_model::node::NodeStatus;
        use baton_model::plan::Victim;

        let mut s = two_cpu_nodes();
        let gang = |s: &mut State, name: &str, priority: i32, mode: PreemptionMode| {
            let mut spec = gpu_job(name, "q", 0);
            spec.tasks[0].replicas = 2;
            spec.tasks[0].resources = Resources::of(&[("cpu", 1_000)]);
            spec.priority = baton_model::job::PriorityRef::Value(priority);
            spec.preemption_mode = mode;
            submit_spec(s, spec)
        };
        let low = gang(&mut s, "low", 1, PreemptionMode::Suspend);
        let both = || vec![rank(0, "n0"), rank(1, "n1")];
        apply_plan(&mut s, vec![Decision::Place { job: low, attempt: 1, replicas: both() }]);
        let high = gang(&mut s, "high", 100, PreemptionMode::Checkpoint);
        let victims = vec![Victim { job: low, attempt: 1 }];
        apply_plan(&mut s, vec![Decision::Preempt { job: high, victims, replicas: both(), message: "test".into() }]);
        for (index, node) in [(0, "n0"), (1, "n1")] {
            let suspended = Observed::Stopped { job: low, attempt: 1, rank: index, checkpointed: false };
            apply(&mut s, Op::Report { node: Name::lit(node), observations: vec![suspended] });
        }
        let placed = cycle(&s, 2_000).decisions;
        apply_plan(&mut s, placed);
        assert_eq!(s.job(high).unwrap().state, JobState::Running, "high runs on low's CPUs");
        crate::invariants::check_state(&s).expect("a lend while both run");

        apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
        assert!(s.completing(low).is_some() && s.completing(high).is_some(), "both are being stopped on n0");
        crate::invariants::check_state(&s).expect("the lend holds while both are being stopped");
    }

    /// Lends in a chain: `low` (a gang on n0 and n1) is suspended for `mid` (n0 alone), which
    /// runs on low's CPU; `mid` is suspended in turn for `high` (a gang), which runs on all
    /// of mid's share, low's CPU included, and `fill` takes n0's last CPU. n1 is lost: low
    /// and high go back to the queue and their ranks on n0 are being stopped, while mid stays
    /// suspended. The ledger keeps low's lend to the suspended mid (the stopped processes use
    /// no CPU); the invariant check counted a lend only to a borrower running or being
    /// stopped, so it saw n0 over-allocated. Found by the simulator (seed 2 of 60 minutes:
    /// `node n16 is over-allocated`, CPU 65 of 64).
    #[test]
    fn a_lend_to_a_borrower_suspended_in_turn_holds_while_the_lender_is_stopped() {
        use baton_model::command::Observed;
        use baton_model::job::PreemptionMode;
        use baton_model::node::{NodeSpec, NodeStatus};
        use baton_model::plan::Victim;

        let mut s = State::new();
        for n in ["n0", "n1"] {
            apply(&mut s, Op::RegisterNode(NodeSpec { resources: Resources::of(&[("cpu", 3_000)]), ..gpu_node(n, 0) }));
        }
        let mut q = QueueSpec::named("q");
        q.quotas.insert(
            Name::lit("default"),
            PoolQuota { nominal: Resources::of(&[("cpu", 6_000)]), ..Default::default() },
        );
        apply(&mut s, Op::PutQueue(q));
        let submit = |s: &mut State, name: &str, replicas: u32, cpu: u64, priority: i32, mode: PreemptionMode| {
            let mut spec = gpu_job(name, "q", 0);
            spec.tasks[0].replicas = replicas;
            spec.tasks[0].resources = Resources::of(&[("cpu", cpu)]);
            spec.priority = baton_model::job::PriorityRef::Value(priority);
            spec.preemption_mode = mode;
            submit_spec(s, spec)
        };
        let place = |s: &mut State, job, replicas| apply_plan(s, vec![Decision::Place { job, attempt: 1, replicas }]);
        let preempt = |s: &mut State, job, victim, replicas: Vec<ReplicaAlloc>, ranks: &[(u32, &str)]| {
            let victims = vec![Victim { job: victim, attempt: 1 }];
            apply_plan(s, vec![Decision::Preempt { job, victims, replicas, message: "t".into() }]);
            for &(index, node) in ranks {
                let stopped = Observed::Stopped { job: victim, attempt: 1, rank: index, checkpointed: false };
                apply(s, Op::Report { node: Name::lit(node), observations: vec![stopped] });
            }
            assert_eq!(s.job(victim).unwrap().state, JobState::Suspended);
            let placed = cycle(s, 5_000).decisions;
            apply_plan(s, placed);
            assert_eq!(s.job(job).unwrap().state, JobState::Running, "it runs on its victim's share");
        };
        let low = submit(&mut s, "low", 2, 1_000, 1, PreemptionMode::Suspend);
        place(&mut s, low, vec![rank(0, "n0"), rank(1, "n1")]);
        let early = submit(&mut s, "early", 1, 1_000, 200, PreemptionMode::Checkpoint);
        place(&mut s, early, vec![rank(0, "n0")]);
        let mid = submit(&mut s, "mid", 1, 2_000, 50, PreemptionMode::Suspend);
        preempt(&mut s, mid, low, vec![rank(0, "n0")], &[(0, "n0"), (1, "n1")]);
        apply(&mut s, Op::JobExited { job: early, attempt: 1, exit_code: 0 });
        let high = submit(&mut s, "high", 2, 2_000, 100, PreemptionMode::Checkpoint);
        preempt(&mut s, high, mid, vec![rank(0, "n0"), rank(1, "n1")], &[(0, "n0")]);
        let fill = submit(&mut s, "fill", 1, 1_000, 200, PreemptionMode::Checkpoint);
        place(&mut s, fill, vec![rank(0, "n0")]);
        crate::invariants::check_state(&s).expect("a chain of lends while high runs");

        apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
        assert!(s.completing(low).is_some() && s.completing(high).is_some(), "both are being stopped on n0");
        assert_eq!(s.job(mid).unwrap().state, JobState::Suspended);
        crate::invariants::check_state(&s).expect("low's lend to the suspended mid holds while low is stopped");
    }

    /// A starving gang reserves n0 and n1, where `a` and `c` run. The agent on n1 cannot
    /// record c's start (its journal takes no writes): c goes back to the queue and n1 is
    /// taken out. A cordon lets a reservation on the node go as it happens; taking a node out
    /// on an agent's report did not, so once `a` ended the cycle placed the gang on its
    /// reservation, n1 included, and the leader refused its own plan ("node n1 is not
    /// schedulable"), cycle after cycle. Found by the simulator (seed 59 of 10 minutes).
    #[test]
    fn a_reservation_on_a_node_taken_out_by_its_agent_is_let_go() {
        use baton_model::command::Observed;

        let mut s = two_cpu_nodes();
        apply(&mut s, Op::SetScheduler(SchedulerSettings { reserve_after_ms: Some(3_600_000) }));
        let submit = |s: &mut State, name: &str, replicas: u32| {
            let mut spec = gpu_job(name, "q", 0);
            spec.tasks[0].replicas = replicas;
            spec.tasks[0].resources = Resources::of(&[("cpu", 1_000)]);
            submit_spec(s, spec)
        };
        let (a, c, r) = (submit(&mut s, "a", 1), submit(&mut s, "c", 1), submit(&mut s, "r", 2));
        apply_plan(
            &mut s,
            vec![
                Decision::Place { job: a, attempt: 1, replicas: vec![rank(0, "n0")] },
                Decision::Place { job: c, attempt: 1, replicas: vec![rank(0, "n1")] },
                Decision::Reserve {
                    job: r,
                    pool: Name::lit("default"),
                    replicas: vec![rank(0, "n0"), rank(1, "n1")],
                    waits_for: vec![a, c],
                },
            ],
        );
        let refused = Observed::Unrecorded { job: c, attempt: 1, rank: 0, reason: "no space left on device".into() };
        apply(&mut s, Op::Report { node: Name::lit("n1"), observations: vec![refused] });
        assert!(s.nodes().get(&Name::lit("n1")).is_some_and(|n| n.unhealthy.is_some()), "n1 is taken out");
        apply(&mut s, Op::JobExited { job: a, attempt: 1, exit_code: 0 });

        let plan = cycle(&s, 2_000);
        assert!(
            !plan.decisions.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == r)),
            "r must not start on n1: {plan:?}"
        );
        let let_go = |d: &Decision| matches!(d, Decision::Unreserve { job, reason } if *job == r && reason.contains("node n1 is no longer schedulable"));
        assert!(plan.decisions.iter().any(let_go), "r's reservation is let go: {plan:?}");
        apply_plan(&mut s, plan.decisions);
        assert!(s.pool_reservation_of(r).is_none(), "r holds no reservation");
    }

    /// A job that waits behind five windows ahead, each named in its reason: past the 512
    /// bytes the state keeps of a reason. The cycle compared its whole reason with the
    /// clipped one kept and decided the same Wait at every cycle, a Raft entry every round
    /// (`baton sim` of this case panicked: "a cycle after a plan of waits decided"). Found
    /// by the property tests once they generated windows.
    #[test]
    fn a_reason_longer_than_the_state_keeps_is_decided_once() {
        use baton_model::maintenance::WindowSpec;

        let mut s = State::new();
        for n in ["n0", "n1", "n2"] {
            apply(&mut s, Op::RegisterNode(gpu_node(n, 2)));
        }
        apply(&mut s, Op::PutQueue(QueueSpec::named("q")));
        for (i, start_s) in [50u64, 60, 70, 80, 90].into_iter().enumerate() {
            let spec = WindowSpec {
                name: Name::lit(&format!("w{i}")),
                nodes: vec![Name::lit("n0")],
                start_ms: start_s * 1_000,
                end_ms: (start_s + 10) * 1_000,
            };
            apply(&mut s, Op::CreateMaintenance(spec));
        }
        let mut spec: JobSpec = gpu_job("j0", "q", 2);
        spec.tasks[0].replicas = 3;
        let job = submit_spec(&mut s, spec);
        let plan = cycle(&s, 2_000);
        let waits = |d: &Decision| matches!(d, Decision::Wait { job: j, reason } if *j == job && reason.contains("w0"));
        assert!(plan.decisions.iter().any(waits), "j0 waits, naming the windows: {plan:?}");
        apply_plan(&mut s, plan.decisions);
        assert!(s.job(job).unwrap().reason.len() <= baton_model::limits::MAX_MESSAGE_LEN);
        let again = cycle(&s, 2_000);
        assert!(again.decisions.is_empty(), "the same wait decided again: {again:?}");
    }

    /// A preemptor `p` holds a quarter of GPU 1 on n0, where its victim `x` ran; in the same
    /// cycle the starving `s` reserved half of that GPU (section 9), waiting for `x` too.
    /// Once `x` stopped, `s`'s reservation blocked GPU 1 whole for every other job, `p`
    /// included, and `p` waited a cycle for `s` to start first, though its room was held for
    /// it (the plan checker lets a preemptor start on its held room whatever reservation is
    /// there). Found by the property tests once they generated windows and unkillable ranks.
    #[test]
    fn a_preemptor_starts_on_its_held_fraction_beside_a_later_reservation() {
        use baton_model::job::PriorityRef;
        use baton_model::plan::Victim;
        use baton_model::queue::WithinQueue;

        let mut s = State::new();
        apply(&mut s, Op::RegisterNode(gpu_node("n0", 2)));
        let mut q = QueueSpec::named("q");
        q.quotas
            .insert(Name::lit("default"), PoolQuota { nominal: Resources::of(&[("gpu", 2)]), ..Default::default() });
        q.preemption.within_queue = WithinQueue::LowerPriority;
        apply(&mut s, Op::PutQueue(q));
        apply(&mut s, Op::SetScheduler(SchedulerSettings { reserve_after_ms: Some(0) }));
        let fraction = |s: &mut State, name: &str, milli: u64, priority: i32| {
            let mut spec: JobSpec = gpu_job(name, "q", 0);
            spec.tasks[0].resources.set_gpus_milli(milli);
            spec.priority = PriorityRef::Value(priority);
            submit_spec(s, spec)
        };
        let x = fraction(&mut s, "x", 500, 10);
        apply_plan(&mut s, vec![Decision::Place { job: x, attempt: 1, replicas: on_n0(&[1]) }]);
        let p = fraction(&mut s, "p", 250, 100);
        let st = fraction(&mut s, "s", 500, 10);
        apply_plan(
            &mut s,
            vec![
                Decision::Preempt {
                    job: p,
                    victims: vec![Victim { job: x, attempt: 1 }],
                    replicas: on_n0(&[1]),
                    message: "test".into(),
                },
                Decision::Reserve { job: st, pool: Name::lit("default"), replicas: on_n0(&[1]), waits_for: vec![x] },
            ],
        );
        apply(&mut s, Op::JobStopped { job: x, attempt: 1, checkpointed: true });

        let plan = cycle(&s, 2_000);
        assert!(
            plan.decisions.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == p)),
            "p's victim stopped: p starts on its held room at once: {plan:?}"
        );
        apply_plan(&mut s, plan.decisions);
        crate::invariants::check_state(&s).expect("p beside s's reservation");
    }
}
