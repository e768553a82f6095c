//! The order in which a cycle considers pending jobs (docs/policy.md section 2).
//!
//! Within a queue, jobs go by priority, then submission (a requeued job keeps its original
//! submission time), then name. Across queues, the head job of each queue competes: heads
//! that fit within their queue's nominal quota go before heads that must borrow; among
//! borrowers in fair-sharing cohorts, the queue with the lowest share goes first; then
//! priority, submission and name. After a queue's head is decided the queue's next job
//! competes with a fresh key, since its queue's usage (and so its tier and share) changed.
//! With `usage_half_life` set (decisions.md section 12), borrowers of equal share go by
//! their queue's decayed usage over its weight, and within a queue jobs of equal priority go
//! by their user's decayed usage in it before submission (`fair.rs`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;

use baton_model::job::{Job, JobId};
use baton_model::name::natural_key_into;
use baton_model::queue::QueueOrdering;

use crate::fair::UsageAt;
use crate::needs::{Needs, NeedsCache};
use crate::view::View;

/// A head's place among the heads, as integers compared in order: (tier, share), then the
/// queue's decayed usage over its weight (0 unless section 12 applies), then (rank, queue).
/// Ranks are unique, so the queue only keeps the key total.
type HeadKey = (u128, u64, u64);

fn head_key(tier: u8, share: f64, usage: f64, rank: u32, queue: usize) -> HeadKey {
    (
        (u128::from(tier) << 64) | u128::from(total_order_bits(share)),
        total_order_bits(usage),
        (u64::from(rank) << 32) | queue as u64,
    )
}

/// Bits of `x` whose unsigned order is `f64::total_cmp`'s order.
fn total_order_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

/// A pending job as a cycle decides it. The fields a decision reads are copied in one pass
/// over the jobs in id order, which is close to the order they sit in memory: reading the
/// jobs themselves in the order they are decided would miss the cache at every job.
#[derive(Clone)]
pub struct Candidate<'a> {
    pub job: &'a Job,
    pub id: JobId,
    pub queue: usize,
    pub preemptible: bool,
    pub priority: i32,
    pub submitted: (u64, u64),
    /// Why it waited after the last cycle.
    pub reason: &'a str,
    pub needs: Rc<Needs>,
}

impl<'a> Candidate<'a> {
    fn of(view: &View, job: &'a Job, shapes: &mut NeedsCache) -> Candidate<'a> {
        Candidate {
            job,
            id: job.id,
            queue: view.queue_np(job).0,
            preemptible: job.preemptible,
            priority: job.priority,
            submitted: job.submitted_key(),
            reason: &job.reason,
            needs: shapes.of(view, job),
        }
    }
}

/// Section 12: within one queue, jobs of equal priority go by their user's decayed usage
/// in it (lower first), then by rank (submission, name). `jobs` is in rank order.
fn by_user_usage(view: &View, usage: &UsageAt, jobs: &mut [Pending]) {
    if jobs.len() < 2 {
        return;
    }
    let users = usage.of_queue(&jobs[0].c.job.spec.queue);
    // Ranks are unique: the keys are too, so the order is total.
    jobs.sort_by_cached_key(|p| {
        let used = users.and_then(|u| u.get(view.state.user_name(p.c.job))).copied().unwrap_or(0.0);
        (-i64::from(p.c.priority), total_order_bits(used), p.rank)
    });
}

/// A candidate with its rank among all pending jobs.
struct Pending<'a> {
    c: Candidate<'a>,
    rank: u32,
}

struct Line<'a> {
    /// Jobs in order.
    jobs: Vec<Pending<'a>>,
    next: usize,
    strict: bool,
    /// StrictFIFO: the job that could not be placed and holds back the rest.
    blocked_by: Option<&'a Job>,
}

pub struct Order<'a> {
    lines: Vec<Line<'a>>,
    heap: BinaryHeap<Reverse<HeadKey>>,
    /// Decayed usage at the cycle's time; empty while section 12 is off.
    usage: UsageAt,
}

/// (priority, submission) as one integer: higher priority first, then earlier submission.
fn time_key(j: &Job) -> u128 {
    let priority = !((j.priority as u32) ^ (1 << 31));
    (u128::from(priority) << 64) | u128::from(j.submitted_ms)
}

/// (priority, submission, name) packed into two integers, or `None` when the name's
/// natural-order key is too long to pack (or the name has none). Zero padding after the
/// key's end byte keeps byte order. `buf` is scratch space, reused for every key.
fn packed_key(j: &Job, buf: &mut Vec<u8>) -> Option<(u128, u128)> {
    if !natural_key_into(j.spec.name.as_str(), buf) || buf.len() > 16 {
        return None;
    }
    let mut b = [0u8; 16];
    b[..buf.len()].copy_from_slice(buf);
    Some((time_key(j), u128::from_be_bytes(b)))
}

/// Sorts jobs by (priority, submission, name) when some name's key does not pack: whole
/// keys are compared.
fn sort_slow(pending: &mut Vec<Candidate>) {
    let mut buf = Vec::new();
    let keys: Option<Vec<Vec<u8>>> =
        pending.iter().map(|c| natural_key_into(c.job.spec.name.as_str(), &mut buf).then(|| buf.clone())).collect();
    let Some(keys) = keys else {
        pending.sort_unstable_by(|a, b| {
            let (a, b) = (a.job, b.job);
            b.priority
                .cmp(&a.priority)
                .then(a.submitted_ms.cmp(&b.submitted_ms))
                .then_with(|| a.spec.name.cmp(&b.spec.name))
        });
        return;
    };
    let mut keyed: Vec<((u128, Vec<u8>), usize)> =
        keys.into_iter().enumerate().map(|(i, k)| ((time_key(pending[i].job), k), i)).collect();
    keyed.sort_unstable();
    *pending = keyed.iter().map(|(_, i)| pending[*i].clone()).collect();
}

impl<'a> Order<'a> {
    pub fn new(view: &View<'a>) -> Order<'a> {
        let mut shapes = NeedsCache::default();
        // Sized for every job up front: growing these by doubling copied and faulted in
        // more memory than the pass itself touched.
        let most = view.jobs.pending.len();
        let mut pending: Vec<Candidate<'a>> = Vec::with_capacity(most);
        let mut keys: Option<Vec<(u128, u128, u32)>> = Some(Vec::with_capacity(most));
        let mut per_queue = vec![0usize; view.ledger.queues.len()];
        let mut buf = Vec::with_capacity(32);
        // A requeued job whose last attempt's ranks are still being stopped (completing)
        // waits: placing it would run two attempts at once. A job held by its dependencies
        // is not considered at all (decisions.md section 13), so it blocks no StrictFIFO
        // queue and never starves.
        let waiting = |j: &&Job| view.state.completing(j.id).is_none() && !view.state.held(j.id);
        for j in view.jobs.pending.iter().copied().filter(waiting) {
            if let Some(k) = keys.as_mut() {
                match packed_key(j, &mut buf) {
                    Some((high, low)) => k.push((high, low, pending.len() as u32)),
                    None => keys = None,
                }
            }
            let c = Candidate::of(view, j, &mut shapes);
            per_queue[c.queue] += 1;
            pending.push(c);
        }
        // One sort by (priority, submission, name) gives each job a rank; after that,
        // ordering compares integers.
        let ranked: Vec<Candidate<'a>> = match keys {
            Some(mut keys) => {
                // Names are unique, so no two keys are equal and an unstable sort is
                // deterministic.
                keys.sort_unstable();
                keys.into_iter().map(|(_, _, i)| pending[i as usize].clone()).collect()
            }
            None => {
                sort_slow(&mut pending);
                pending
            }
        };
        let mut lines: Vec<Line> = (0..view.ledger.queues.len())
            .map(|q| {
                let spec = &view.state.queues()[&view.ledger.queues[q].name];
                let strict = spec.ordering == QueueOrdering::StrictFIFO;
                Line { jobs: Vec::with_capacity(per_queue[q]), next: 0, strict, blocked_by: None }
            })
            .collect();
        for (rank, c) in ranked.into_iter().enumerate() {
            lines[c.queue].jobs.push(Pending { c, rank: rank as u32 });
        }
        // Without accounts (section 12 off, or nobody ran yet) every user's usage is 0 and
        // the rank order stands.
        let usage = UsageAt::of(view.state, view.now_ms);
        if !usage.by_user.is_empty() {
            for line in &mut lines {
                by_user_usage(view, &usage, &mut line.jobs);
            }
        }
        let mut order = Order { lines, heap: BinaryHeap::with_capacity(view.ledger.queues.len()), usage };
        for q in 0..order.lines.len() {
            order.push_head(view, q);
        }
        order
    }

    fn push_head(&mut self, view: &View, q: usize) {
        let line = &mut self.lines[q];
        if line.blocked_by.is_some() {
            return;
        }
        let Some(head) = line.jobs.get(line.next) else { return };
        let within = head.c.needs.demands.iter().any(|d| view.ledger.within_nominal(q, d));
        let rank = head.rank;
        let acct = &view.ledger.queues[q];
        let fair = !within && acct.fair_sharing;
        let share = if fair { view.ledger.share(q, &[], &[]) } else { 0.0 };
        let usage = if fair && !self.usage.by_queue.is_empty() {
            let used = self.usage.queue(&acct.name);
            if acct.weight > 0.0 { used / acct.weight } else { f64::INFINITY }
        } else {
            0.0
        };
        self.heap.push(Reverse(head_key(if within { 0 } else { 1 }, share, usage, rank, q)));
    }

    /// How many jobs are yet to be decided (or held back).
    pub fn remaining(&self) -> usize {
        self.lines.iter().map(|l| l.jobs.len() - l.next).sum()
    }

    /// The next job to decide.
    pub fn next(&mut self) -> Option<Candidate<'a>> {
        let Reverse((_, _, low)) = self.heap.pop()?;
        let q = (low & u64::from(u32::MAX)) as usize;
        let line = &mut self.lines[q];
        let head = &line.jobs[line.next];
        line.next += 1;
        Some(head.c.clone())
    }

    /// After deciding a queue's head: with StrictFIFO, an unplaced head holds back the
    /// rest of its queue; otherwise the next job competes.
    pub fn after(&mut self, view: &View, q: usize, job: &'a Job, placed: bool) {
        if !placed && self.lines[q].strict {
            self.lines[q].blocked_by = Some(job);
            return;
        }
        self.push_head(view, q);
    }

    /// Jobs held back by a StrictFIFO head, with that head.
    pub fn held_back(&self) -> Vec<(&'a Job, &'a Job)> {
        let mut out = Vec::new();
        for line in &self.lines {
            if let Some(head) = line.blocked_by {
                out.extend(line.jobs[line.next..].iter().map(|p| (p.c.job, head)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use baton_model::command::{Command, Op};
    use baton_model::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec};
    use baton_model::name::Name;
    use baton_model::node::NodeSpec;
    use baton_model::resources::Resources;
    use baton_model::state::State;

    use super::Order;
    use crate::view::View;

    fn apply(s: &mut State, op: Op) {
        s.apply(Command { now_ms: 1_000, op }).expect("a valid fixture");
    }

    /// One node, one queue, and one-GPU jobs named `names`, all submitted at the same time.
    fn state(names: &[&str]) -> State {
        let mut s = State::new();
        let node = NodeSpec {
            name: Name::lit("n1"),
            pool: Name::lit("default"),
            rack: None,
            labels: BTreeMap::new(),
            resources: Resources::of(&[("gpu", 8)]),
            gpus: Vec::new(),
            agent_addr: String::new(),
        };
        apply(&mut s, Op::RegisterNodes(vec![node]));
        apply(&mut s, Op::PutQueue(baton_model::fixture::gpu_queue("q", 8)));
        for name in names {
            let spec = JobSpec {
                name: Name::lit(name),
                queue: Name::lit("q"),
                priority: PriorityRef::Class(Name::lit("train")),
                tasks: vec![TaskSpec {
                    name: Name::lit("main"),
                    replicas: 1,
                    resources: Resources::of(&[("gpu", 1)]),
                    pools: None,
                }],
                pools: None,
                topology: None,
                preemption_mode: PreemptionMode::Checkpoint,
                grace_ms: 30_000,
                min_runtime_ms: 0,
                time_limit_ms: None,
                command: Vec::new(),
                env: BTreeMap::new(),
                checkpoint_signal: None,
            };
            apply(&mut s, Op::Submit { spec, request_id: None });
        }
        s
    }

    fn order(s: &State) -> Vec<String> {
        let view = View::new(s, 1_000);
        let mut order = Order::new(&view);
        let mut out = Vec::new();
        while let Some(c) = order.next() {
            out.push(c.job.spec.name.to_string());
            order.after(&view, c.queue, c.job, true);
        }
        out
    }

    #[test]
    fn ties_go_by_natural_name_order_whether_keys_pack_or_not() {
        // Short names: keys pack into integers.
        assert_eq!(order(&state(&["job-10", "job-9", "job-2"])), ["job-2", "job-9", "job-10"]);
        // A name whose key does not pack sends every job down the whole-key path.
        let long = "a-name-far-too-long-to-pack-into-sixteen-bytes-1";
        assert_eq!(order(&state(&["job-10", long, "job-9"])), [long, "job-9", "job-10"]);
    }
}
