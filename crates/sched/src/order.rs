//! The order in which a cycle considers pending jobs (decisions.md section 2).
//!
//! Within a queue, jobs go by priority, then submission (a requeued job keeps its original
//! submission time), then name. Across queues, the head job of each queue competes: heads
//! that fit within their queue's nominal quota go before heads that must borrow; among
//! borrowers in fair-sharing cohorts, the queue with the lowest share goes first; then
//! priority, submission and name. After a queue's head is decided the queue's next job
//! competes with a fresh key, since its queue's usage (and so its tier and share) changed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;

use baton_model::job::{Job, JobState};
use baton_model::name::natural_key_into;
use baton_model::queue::QueueOrdering;

use crate::needs::{Needs, NeedsCache};
use crate::view::View;

/// A head's place among the heads, as integers compared in order: (tier, share), then
/// (rank, queue). Ranks are unique, so the queue only keeps the key total.
type HeadKey = (u128, u64);

fn head_key(tier: u8, share: f64, rank: u32, queue: usize) -> HeadKey {
    ((u128::from(tier) << 64) | u128::from(total_order_bits(share)), (u64::from(rank) << 32) | queue as u64)
}

/// Bits of `x` whose unsigned order is `f64::total_cmp`'s order.
fn total_order_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

struct Line<'a> {
    /// Jobs in order, with their rank among all pending jobs.
    jobs: Vec<(&'a Job, u32)>,
    next: usize,
    strict: bool,
    /// StrictFIFO: the job that could not be placed and holds back the rest.
    blocked_by: Option<&'a Job>,
    /// What the head job needs, computed once when it became the head.
    head_needs: Option<Rc<Needs>>,
}

pub struct Order<'a> {
    lines: Vec<Line<'a>>,
    heap: BinaryHeap<Reverse<HeadKey>>,
    shapes: NeedsCache,
}

/// (priority, submission) as one integer: higher priority first, then earlier submission.
fn time_key(j: &Job) -> u128 {
    let priority = !((j.priority as u32) ^ (1 << 31));
    (u128::from(priority) << 64) | u128::from(j.submitted_ms)
}

/// Sorts by (priority, submission, name). Names become natural-order byte keys, packed
/// into integers when they fit, so the sort compares numbers rather than re-parsing digits;
/// one buffer serves every key.
fn sort_pending(pending: &mut Vec<(&Job, usize)>) {
    let mut buf = Vec::with_capacity(32);
    let mut packed: Vec<(u128, u128, u32)> = Vec::with_capacity(pending.len());
    for (i, (j, _)) in pending.iter().enumerate() {
        if !natural_key_into(j.spec.name.as_str(), &mut buf) || buf.len() > 16 {
            return sort_pending_slow(pending);
        }
        // Zero padding after the key's end byte keeps byte order.
        let mut b = [0u8; 16];
        b[..buf.len()].copy_from_slice(&buf);
        packed.push((time_key(j), u128::from_be_bytes(b), i as u32));
    }
    // Names are unique, so no two keys are equal and an unstable sort is deterministic.
    packed.sort_unstable();
    *pending = packed.into_iter().map(|(_, _, i)| pending[i as usize]).collect();
}

/// Names too long to pack, or text without a natural key: compare whole keys.
fn sort_pending_slow(pending: &mut [(&Job, usize)]) {
    let mut buf = Vec::new();
    let keys: Option<Vec<Vec<u8>>> =
        pending.iter().map(|(j, _)| natural_key_into(j.spec.name.as_str(), &mut buf).then(|| buf.clone())).collect();
    let Some(keys) = keys else {
        pending.sort_unstable_by(|(a, _), (b, _)| {
            b.priority
                .cmp(&a.priority)
                .then(a.submitted_ms.cmp(&b.submitted_ms))
                .then_with(|| a.spec.name.cmp(&b.spec.name))
        });
        return;
    };
    let mut keyed: Vec<_> =
        keys.into_iter().zip(pending.iter()).map(|(k, &(j, q))| ((time_key(j), k), (j, q))).collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (slot, (_, p)) in pending.iter_mut().zip(keyed) {
        *slot = p;
    }
}

impl<'a> Order<'a> {
    pub fn new(view: &View<'a>) -> Order<'a> {
        // One sort of all pending jobs by (priority, submission, name) gives each a rank;
        // after that, ordering compares integers.
        let mut pending: Vec<(&'a Job, usize)> = view
            .state
            .jobs()
            .values()
            .filter(|j| j.state == JobState::Pending)
            .map(|j| (j, view.ledger.queue(j.spec.queue.as_str()).expect("queue of a job exists")))
            .collect();
        sort_pending(&mut pending);
        let mut lines: Vec<Line> = (0..view.ledger.queues.len())
            .map(|q| {
                let spec = &view.state.queues()[&view.ledger.queues[q].name];
                let strict = spec.ordering == QueueOrdering::StrictFIFO;
                Line { jobs: Vec::new(), next: 0, strict, blocked_by: None, head_needs: None }
            })
            .collect();
        for (rank, (job, q)) in pending.into_iter().enumerate() {
            lines[q].jobs.push((job, rank as u32));
        }
        let mut order = Order { lines, heap: BinaryHeap::new(), shapes: NeedsCache::default() };
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
        let Some(&(job, rank)) = line.jobs.get(line.next) else { return };
        let needs = self.shapes.of(view, job);
        let within = needs.demands.iter().any(|d| view.ledger.within_nominal(q, d));
        line.head_needs = Some(needs);
        let acct = &view.ledger.queues[q];
        let share = if !within && acct.fair_sharing { view.ledger.share(q, &[], &[]) } else { 0.0 };
        self.heap.push(Reverse(head_key(if within { 0 } else { 1 }, share, rank, q)));
    }

    /// The next job to decide, its queue, and what it needs.
    pub fn next(&mut self) -> Option<(usize, &'a Job, Rc<Needs>)> {
        let Reverse((_, low)) = self.heap.pop()?;
        let q = (low & u64::from(u32::MAX)) as usize;
        let line = &mut self.lines[q];
        let (job, _) = line.jobs[line.next];
        line.next += 1;
        let needs = line.head_needs.take().expect("a head has its needs");
        Some((q, job, needs))
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
                out.extend(line.jobs[line.next..].iter().map(|&(j, _)| (j, head)));
            }
        }
        out
    }
}
