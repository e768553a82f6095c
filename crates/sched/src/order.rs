//! The order in which a cycle considers pending jobs (decisions.md section 2).
//!
//! Within a queue, jobs go by priority, then submission (a requeued job keeps its original
//! submission time), then name. Across queues, the head job of each queue competes: heads
//! that fit within their queue's nominal quota go before heads that must borrow; among
//! borrowers in fair-sharing cohorts, the queue with the lowest share goes first; then
//! priority, submission and name. After a queue's head is decided the queue's next job
//! competes with a fresh key, since its queue's usage (and so its tier and share) changed.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use baton_model::job::{JobId, JobState};
use baton_model::name::Name;
use baton_model::queue::QueueOrdering;

use crate::needs::Needs;
use crate::view::View;

#[derive(Debug, Clone, PartialEq)]
struct HeadKey<'a> {
    tier: u8,
    share: f64,
    priority: i32,
    submitted_ms: u64,
    name: &'a Name,
    queue: usize,
}

impl Eq for HeadKey<'_> {}

impl Ord for HeadKey<'_> {
    fn cmp(&self, o: &Self) -> Ordering {
        self.tier
            .cmp(&o.tier)
            .then_with(|| self.share.total_cmp(&o.share))
            .then_with(|| o.priority.cmp(&self.priority))
            .then_with(|| self.submitted_ms.cmp(&o.submitted_ms))
            .then_with(|| self.name.cmp(o.name))
            .then_with(|| self.queue.cmp(&o.queue))
    }
}

impl PartialOrd for HeadKey<'_> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

struct Line {
    jobs: Vec<JobId>,
    next: usize,
    strict: bool,
    /// StrictFIFO: the job that could not be placed and holds back the rest.
    blocked_by: Option<JobId>,
    /// What the head job needs, computed once when it became the head.
    head_needs: Option<Needs>,
}

pub struct Order<'a> {
    lines: Vec<Line>,
    heap: BinaryHeap<Reverse<HeadKey<'a>>>,
}

impl<'a> Order<'a> {
    pub fn new(view: &View<'a>) -> Order<'a> {
        let mut per_queue: BTreeMap<usize, Vec<JobId>> = BTreeMap::new();
        for job in view.state.jobs().values() {
            if job.state == JobState::Pending {
                let q = view.ledger.queue(job.spec.queue.as_str()).expect("queue of a job exists");
                per_queue.entry(q).or_default().push(job.id);
            }
        }
        let mut lines: Vec<Line> = (0..view.ledger.queues.len())
            .map(|_| Line { jobs: Vec::new(), next: 0, strict: false, blocked_by: None, head_needs: None })
            .collect();
        for (q, mut jobs) in per_queue {
            jobs.sort_by_cached_key(|&id| {
                let j = view.job(id);
                (Reverse(j.priority), j.submitted_ms, &j.spec.name)
            });
            let spec = &view.state.queues()[&view.ledger.queues[q].name];
            let strict = spec.ordering == QueueOrdering::StrictFIFO;
            lines[q] = Line { jobs, next: 0, strict, blocked_by: None, head_needs: None };
        }
        let mut order = Order { lines, heap: BinaryHeap::new() };
        for q in 0..order.lines.len() {
            order.push_head(view, q);
        }
        order
    }

    fn push_head(&mut self, view: &View<'a>, q: usize) {
        let line = &mut self.lines[q];
        if line.blocked_by.is_some() {
            return;
        }
        let Some(&id) = line.jobs.get(line.next) else { return };
        let job = view.job(id);
        let needs = Needs::of(view, job);
        let within = needs.assignments.iter().any(|a| view.ledger.within_nominal(q, &needs.demand(a)));
        line.head_needs = Some(needs);
        let acct = &view.ledger.queues[q];
        let share = if !within && acct.fair_sharing { view.ledger.share(q, &[], &[]) } else { 0.0 };
        let key = HeadKey {
            tier: if within { 0 } else { 1 },
            share,
            priority: job.priority,
            submitted_ms: job.submitted_ms,
            name: &job.spec.name,
            queue: q,
        };
        self.heap.push(Reverse(key));
    }

    /// The next job to decide, its queue, and what it needs.
    pub fn next(&mut self) -> Option<(usize, JobId, Needs)> {
        let Reverse(key) = self.heap.pop()?;
        let line = &mut self.lines[key.queue];
        let id = line.jobs[line.next];
        line.next += 1;
        let needs = line.head_needs.take().expect("a head has its needs");
        Some((key.queue, id, needs))
    }

    /// After deciding a queue's head: with StrictFIFO, an unplaced head holds back the
    /// rest of its queue; otherwise the next job competes.
    pub fn after(&mut self, view: &View<'a>, q: usize, job: JobId, placed: bool) {
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
                out.extend(line.jobs[line.next..].iter().map(|&j| (j, head)));
            }
        }
        out
    }
}
