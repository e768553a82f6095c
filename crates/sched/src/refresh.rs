//! How many waiting jobs' reasons one cycle rewrites only because a live amount in them
//! moved.
//!
//! A waiting job's reason names amounts that change with the cluster: "(most free GPUs on
//! one node: 3)", "insufficient unused quota for gpu in pool a: 2 more needed". One job's exit
//! moves such an amount for every job blocked the same way: on a full cluster of 10,000
//! nodes, one exit rewrote the reasons of about 28,000 waiting jobs, a plan of 3.2 MB that
//! every replica logs and applies. A reason whose only change is such an amount is
//! refreshed for at most [`MAX_AMOUNT_REFRESHES_PER_CYCLE`] jobs a cycle; a reason that
//! changes in kind (another blocker, another pool, a reservation) is always written.
//!
//! Which jobs are refreshed rotates with the cycle's second, so that while amounts move
//! every cycle, each job's amount is still refreshed within about `waiting /
//! MAX_AMOUNT_REFRESHES_PER_CYCLE` seconds, and not only the first jobs in order. The choice
//! depends only on the plan and `now_ms`: the cycle stays deterministic.

use baton_model::plan::{Decision, Plan};
use baton_model::state::State;

/// Amount-only reason changes a cycle writes: about 115 KB of plan (a Wait is about 113
/// bytes), where the jobs it rewrote were about 28,000 on the benchmarks' full cluster.
pub const MAX_AMOUNT_REFRESHES_PER_CYCLE: usize = 1_024;

/// The span over which the refreshed jobs rotate.
const ROTATE_MS: u64 = 1_000;

/// The text around a live amount in a reason: it follows ": " and is followed by one of
/// these (reason.rs's no-room reason and the ledger's quota reason).
const AMOUNT_FOLLOWED_BY: [&str; 2] = [")", " more needed"];

/// Whether `new` says what `old` says but for one live amount, a number (with its unit) after
/// ": " and before ")" or " more needed". Equal texts are no change at all: false.
pub fn only_amounts_differ(old: &str, new: &str) -> bool {
    let (o, n) = (old.as_bytes(), new.as_bytes());
    let mut prefix = o.iter().zip(n).take_while(|(a, b)| a == b).count();
    if prefix == o.len() && prefix == n.len() {
        return false;
    }
    let room = o.len().min(n.len()) - prefix;
    let mut suffix = o.iter().rev().zip(n.iter().rev()).take(room).take_while(|(a, b)| a == b).count();
    // Widen the differing span to whole tokens: "13" and "3" share the "3".
    let token = |b: u8| b.is_ascii_alphanumeric() || b == b'.';
    while prefix > 0 && token(o[prefix - 1]) {
        prefix -= 1;
    }
    while suffix > 0 && token(o[o.len() - suffix]) {
        suffix -= 1;
    }
    let amount = |m: &[u8]| m.first().is_some_and(u8::is_ascii_digit) && m.iter().all(|b| token(*b));
    let after = &old[o.len() - suffix..];
    amount(&o[prefix..o.len() - suffix])
        && amount(&n[prefix..n.len() - suffix])
        && old[..prefix].ends_with(": ")
        && AMOUNT_FOLLOWED_BY.iter().any(|f| after.starts_with(f))
}

/// Whether `d` is a Wait that only moves a live amount in its job's reason in `state`.
pub fn is_amount_refresh(state: &State, d: &Decision) -> bool {
    match d {
        Decision::Wait { job, reason } => state.job(*job).is_some_and(|j| only_amounts_differ(&j.reason, reason)),
        _ => false,
    }
}

/// Drops the plan's amount-only Waits beyond [`MAX_AMOUNT_REFRESHES_PER_CYCLE`], keeping a
/// run of that many that starts where the cycle's second points.
pub fn limit_amount_refreshes(state: &State, now_ms: u64, plan: &mut Plan) {
    // Most plans hold fewer Waits than the bound: no job is looked up for them.
    let waits = plan.decisions.iter().filter(|d| matches!(d, Decision::Wait { .. })).count();
    if waits <= MAX_AMOUNT_REFRESHES_PER_CYCLE {
        return;
    }
    let marked: Vec<bool> = plan.decisions.iter().map(|d| is_amount_refresh(state, d)).collect();
    let count = marked.iter().filter(|m| **m).count();
    if count <= MAX_AMOUNT_REFRESHES_PER_CYCLE {
        return;
    }
    let start = ((now_ms / ROTATE_MS) as usize).wrapping_mul(MAX_AMOUNT_REFRESHES_PER_CYCLE) % count;
    let kept = |k: usize| (k + count - start) % count < MAX_AMOUNT_REFRESHES_PER_CYCLE;
    let (mut i, mut k) = (0, 0);
    plan.decisions.retain(|_| {
        let keep = !marked[i] || kept(k);
        k += usize::from(marked[i]);
        i += 1;
        keep
    });
}

#[cfg(test)]
mod tests {
    use baton_model::command::{Command, Op};
    use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};

    use super::*;

    fn apply(s: &mut State, op: Op) {
        s.apply(Command { now_ms: 1_000, op }).unwrap_or_else(|e| panic!("refused: {e}"));
    }

    /// A cycle, its plan applied; the plan's Waits.
    fn waits_of_a_round(s: &mut State) -> usize {
        let plan = crate::cycle(s, 2_000);
        let waits = plan.decisions.iter().filter(|d| matches!(d, Decision::Wait { .. })).count();
        apply(s, Op::ApplyPlan(plan));
        waits
    }

    fn reasons(s: &State) -> Vec<String> {
        let mut r: Vec<String> =
            s.jobs().values().filter(|j| j.spec.name.as_str().starts_with('w')).map(|j| j.reason.clone()).collect();
        r.dedup();
        r
    }

    fn room(most_free: &str) -> String {
        format!(
            "no node in pool default has 6 gpu free (most free GPUs on one node: {most_free}); no running job may be preempted for it"
        )
    }

    #[test]
    fn an_amount_that_moved_for_many_jobs_is_refreshed_over_cycles_and_a_changed_reason_at_once() {
        let mut s = State::new();
        apply(&mut s, Op::RegisterNode(gpu_node("n0", 8)));
        apply(&mut s, Op::PutQueue(gpu_queue("q", 10_000)));
        for name in ["a", "b"] {
            apply(&mut s, Op::Submit { spec: gpu_job(name, "q", 4), request_id: None });
        }
        waits_of_a_round(&mut s);
        let waiting = MAX_AMOUNT_REFRESHES_PER_CYCLE + 476;
        for i in 0..waiting {
            apply(&mut s, Op::Submit { spec: gpu_job(&format!("w{i}"), "q", 6), request_id: None });
        }
        assert_eq!(waits_of_a_round(&mut s), waiting, "a first reason is written for every job");
        assert_eq!(reasons(&s), [room("0")]);

        let (job, attempt) = s.job_by_name("a").map(|a| (a.id, a.attempt)).unwrap();
        apply(&mut s, Op::JobExited { job, attempt, exit_code: 0 });
        assert_eq!(waits_of_a_round(&mut s), MAX_AMOUNT_REFRESHES_PER_CYCLE, "only the amount moved");
        assert_eq!(waits_of_a_round(&mut s), 476, "the rest on the next cycle");
        assert_eq!(waits_of_a_round(&mut s), 0);
        assert_eq!(reasons(&s), [room("4")]);

        // Another blocker is news for every job at once.
        apply(&mut s, Op::PutQueue(gpu_queue("q", 4)));
        assert_eq!(waits_of_a_round(&mut s), waiting);
    }

    #[test]
    fn a_moved_amount_is_told_apart_from_a_changed_reason() {
        let free =
            |n: &str| format!("no node in pool a has 4 gpu free (most free GPUs on one node: {n}); 1 GPU unhealthy");
        assert!(only_amounts_differ(&free("3"), &free("13")));
        assert!(only_amounts_differ(&free("13"), &free("3")));
        assert!(only_amounts_differ(&free("0"), &free("7")));
        let quota = |n: &str| format!("insufficient unused quota for gpu in pool a: {n} more needed");
        assert!(only_amounts_differ(&quota("2"), &quota("1.5")));
        assert!(!only_amounts_differ(&quota("2"), &quota("2")), "no change is no refresh");
        assert!(!only_amounts_differ(&free("3"), &quota("3")), "another blocker");
        assert!(!only_amounts_differ("reserved n1 (pool a)", "reserved n2 (pool a)"), "another node");
        assert!(!only_amounts_differ("waiting for 3 victims to stop", "waiting for 2 victims to stop"));
        assert!(
            !only_amounts_differ(&quota("2"), "insufficient unused quota for gpu in pool b: 2 more needed"),
            "another pool"
        );
        assert!(!only_amounts_differ(&free("3"), &format!("{}; queue is StrictFIFO", free("4"))), "two changes");
    }
}
