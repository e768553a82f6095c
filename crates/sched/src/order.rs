//! The order in which a cycle considers pending jobs (decisions.md section 2).
//!
//! Within a queue, jobs go by priority, then submission (a requeued job keeps its original
//! submission time), then name. Across queues, the head job of each queue competes: heads
//! that fit within their queue's nominal quota go before heads that must borrow; among
//! borrowers in fair-sharing cohorts, the queue with the lowest share goes first; then
//! priority, submission and name. After a queue's head is decided the queue's next job
//! competes with a fresh key, since its queue's usage (and so its tier and share) changed.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use baton_model::job::{Job, JobId, JobState};
use baton_model::name::natural_key;
use baton_model::queue::QueueOrdering;

use std::rc::Rc;

use crate::needs::{Needs, NeedsCache};
use crate::view::View;

#[derive(Debug, Clone, PartialEq)]
struct HeadKey {
    tier: u8,
    share: f64,
    /// Position in (priority, submission, name) order among all pending jobs.
    rank: u32,
    queue: usize,
}

impl Eq for HeadKey {}

impl Ord for HeadKey {
    fn cmp(&self, o: &Self) -> Ordering {
        self.tier
            .cmp(&o.tier)
            .then_with(|| self.share.total_cmp(&o.share))
            .then_with(|| self.rank.cmp(&o.rank))
            .then_with(|| self.queue.cmp(&o.queue))
    }
}

impl PartialOrd for HeadKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

struct Line {
    /// Jobs in order, with their rank among all pending jobs.
    jobs: Vec<(JobId, u32)>,
    next: usize,
    strict: bool,
    /// StrictFIFO: the job that could not be placed and holds back the rest.
    blocked_by: Option<JobId>,
    /// What the head job needs, computed once when it became the head.
    head_needs: Option<Rc<Needs>>,
}

pub struct Order {
    lines: Vec<Line>,
    heap: BinaryHeap<Reverse<HeadKey>>,
    shapes: NeedsCache,
}

/// Sorts by (priority, submission, name). Names become natural-order byte keys, packed
/// into integers when they fit, so the sort compares numbers rather than re-parsing digits.
fn sort_pending(pending: &mut Vec<(&Job, usize)>) {
    let keys: Option<Vec<Vec<u8>>> = pending.iter().map(|(j, _)| natural_key(j.spec.name.as_str())).collect();
    let Some(keys) = keys else {
        pending.sort_unstable_by(|(a, _), (b, _)| {
            b.priority
                .cmp(&a.priority)
                .then(a.submitted_ms.cmp(&b.submitted_ms))
                .then_with(|| a.spec.name.cmp(&b.spec.name))
        });
        return;
    };
    let time = |j: &Job| (Reverse(j.priority), j.submitted_ms);
    if keys.iter().all(|k| k.len() <= 16) {
        // Zero padding after the key's end byte keeps byte order.
        let pack = |k: &[u8]| {
            let mut b = [0u8; 16];
            b[..k.len()].copy_from_slice(k);
            u128::from_be_bytes(b)
        };
        let mut keyed: Vec<_> =
            keys.iter().zip(pending.iter()).map(|(k, &(j, q))| ((time(j), pack(k)), (j, q))).collect();
        keyed.sort_unstable_by_key(|e| e.0);
        *pending = keyed.into_iter().map(|(_, p)| p).collect();
    } else {
        let mut keyed: Vec<_> =
            keys.into_iter().zip(pending.iter()).map(|(k, &(j, q))| ((time(j), k), (j, q))).collect();
        keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        *pending = keyed.into_iter().map(|(_, p)| p).collect();
    }
}

impl Order {
    pub fn new(view: &View) -> Order {
        // One sort of all pending jobs by (priority, submission, name) gives each a rank;
        // after that, ordering compares integers.
        let mut pending: Vec<(&Job, usize)> = view
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
            lines[q].jobs.push((job.id, rank as u32));
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
        let Some(&(id, rank)) = line.jobs.get(line.next) else { return };
        let job = view.job(id);
        let needs = self.shapes.of(view, job);
        let within = needs.demands.iter().any(|d| view.ledger.within_nominal(q, d));
        line.head_needs = Some(needs);
        let acct = &view.ledger.queues[q];
        let share = if !within && acct.fair_sharing { view.ledger.share(q, &[], &[]) } else { 0.0 };
        let key = HeadKey { tier: if within { 0 } else { 1 }, share, rank, queue: q };
        self.heap.push(Reverse(key));
    }

    /// The next job to decide, its queue, and what it needs.
    pub fn next(&mut self) -> Option<(usize, JobId, Rc<Needs>)> {
        let Reverse(key) = self.heap.pop()?;
        let line = &mut self.lines[key.queue];
        let (id, _) = line.jobs[line.next];
        line.next += 1;
        let needs = line.head_needs.take().expect("a head has its needs");
        Some((key.queue, id, needs))
    }

    /// After deciding a queue's head: with StrictFIFO, an unplaced head holds back the
    /// rest of its queue; otherwise the next job competes.
    pub fn after(&mut self, view: &View, q: usize, job: JobId, placed: bool) {
        if !placed && self.lines[q].strict {
            self.lines[q].blocked_by = Some(job);
            return;
        }
        self.push_head(view, q);
    }

    /// Jobs held back by a StrictFIFO head, with that head.
    pub fn held_back(&self) -> Vec<(JobId, JobId)> {
        let mut out = Vec::new();
        for line in &self.lines {
            if let Some(head) = line.blocked_by {
                out.extend(line.jobs[line.next..].iter().map(|&(j, _)| (j, head)));
            }
        }
        out
    }
}
