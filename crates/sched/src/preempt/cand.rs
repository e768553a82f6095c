//! Who may be preempted for a job (docs/policy.md section 4) and in what order victims are
//! preferred (section 5).

use std::cmp::{Ordering, Reverse};

use baton_model::job::{Job, JobId};
use baton_model::ledger::{Ledger, Vector};
use baton_model::queue::{PreemptionPolicy, ReclaimWithinCohort, WithinQueue};

use crate::view::{ActiveJob, View};

/// A running (or already stopping) job that might make room.
#[derive(Debug, Clone, PartialEq)]
pub struct Cand {
    pub job: JobId,
    pub queue: usize,
    /// In the preemptor's own queue.
    pub own: bool,
    /// Already being preempted or paused: its resources are on their way back.
    pub leaving: bool,
    pub priority: i32,
    pub progress_mark_ms: u64,
    pub submitted: (u64, u64),
    pub gpus: u64,
}

/// Static rank: most preferable victim first (section 5, without the fair-share term).
pub type RankKey = (u8, u8, i32, Reverse<u64>, Reverse<(u64, u64)>, Reverse<JobId>);

impl Cand {
    pub fn rank(&self) -> RankKey {
        (
            u8::from(!self.leaving),
            u8::from(self.own),
            self.priority,
            Reverse(self.progress_mark_ms),
            Reverse(self.submitted),
            Reverse(self.job),
        )
    }

    /// `rank` as integers in the same order, cheaper to sort by.
    pub fn rank_bits(&self) -> (u128, u128, u64) {
        let priority = u128::from((self.priority as u32) ^ (1 << 31));
        let first = (u128::from(!self.leaving) << 97)
            | (u128::from(self.own) << 96)
            | (priority << 64)
            | u128::from(!self.progress_mark_ms);
        let submitted = (u128::from(!self.submitted.0) << 64) | u128::from(!self.submitted.1);
        (first, submitted, !self.job)
    }

    /// GPU-milliseconds of work since the last start or checkpoint.
    pub fn lost_work(&self, now_ms: u64) -> u128 {
        u128::from(self.gpus) * u128::from(now_ms.saturating_sub(self.progress_mark_ms))
    }
}

/// The preemptor and what it needs, for one pool choice.
pub struct Ctx<'j> {
    pub job: &'j Job,
    /// The pool of each task.
    pub pool_choice: Vec<usize>,
    pub queue: usize,
    pub np: bool,
    pub policy: PreemptionPolicy,
    pub fair_sharing: bool,
    /// Kueue's S2-b: the weaker fair-sharing rule, tried only if S2-a finds nothing.
    pub weak: bool,
    pub demand: Vec<(usize, Vector)>,
    /// (pool, kind) where the job lacks room: where reclaim is judged.
    pub lacks: Vec<(usize, usize)>,
}

/// A job `v` could ever be a victim of `j` under the queues' policies.
pub fn eligible(view: &View, j: &Job, jq: usize, policy: &PreemptionPolicy, v: &ActiveJob) -> Option<Cand> {
    if v.job == j.id || view.is_taken(v.job) {
        return None;
    }
    let vq = v.queue;
    let cand = |leaving| Cand {
        job: v.job,
        queue: vq,
        own: vq == jq,
        leaving,
        priority: v.priority,
        progress_mark_ms: v.progress_mark_ms,
        submitted: v.submitted,
        gpus: v.gpus,
    };
    if v.leaving {
        return Some(cand(true));
    }
    if !v.preemptible || view.now_ms < v.protected_until_ms {
        return None;
    }
    if vq == jq {
        let ok = match policy.within_queue {
            WithinQueue::Never => false,
            WithinQueue::LowerPriority => v.priority < j.priority,
            WithinQueue::LowerOrNewerEqualPriority => {
                v.priority < j.priority || (v.priority == j.priority && v.submitted > j.submitted_key())
            }
        };
        return ok.then(|| cand(false));
    }
    let l = &view.ledger;
    let reclaim = match policy.reclaim_within_cohort {
        ReclaimWithinCohort::Never => false,
        ReclaimWithinCohort::LowerPriority => v.priority < j.priority,
        ReclaimWithinCohort::Any => true,
    };
    // A guarantee is reclaimed from any borrower (the implicit root is everyone's cohort);
    // borrowing within a cohort and fair sharing stay inside the top-level cohort.
    if l.queues[vq].tree != l.queues[jq].tree {
        return reclaim.then(|| cand(false));
    }
    let fs = l.queues[jq].fair_sharing;
    let borrow =
        !fs && policy.borrow_within_cohort.is_some_and(|b| bwc_allows(b.max_priority_threshold, j, v.priority));
    (reclaim || borrow || fs).then(|| cand(false))
}

/// Not in the contract (docs/policy.md section 6, "Departures not yet settled"): taking `c`
/// leaves its queue at or above its guarantee wherever `c` uses something. Asked only when a
/// preemptor that will be within nominal preempts under fair sharing because its queue's
/// `reclaim_within_cohort` does not allow it: taking the victim's queue below its guarantee
/// there lets that queue's jobs come back by borrowing, and the three preempt in a circle.
fn leaves_guarantee(l: &Ledger, c: &Cand) -> bool {
    if l.charges.get(&c.job).is_none() {
        return true;
    }
    let q = &l.queues[c.queue];
    l.charged_usage(c.job).iter().all(|(p, v)| {
        v.iter()
            .enumerate()
            .all(|(k, &amount)| amount == 0 || q.usage[*p][k].saturating_sub(amount) >= q.nominal[*p][k])
    })
}

fn bwc_allows(threshold: Option<i32>, j: &Job, p: i32) -> bool {
    p < j.priority && threshold.is_none_or(|t| p <= t)
}

impl Ctx<'_> {
    /// The preemptor's queue, with the job admitted, stays within nominal wherever the job
    /// lacks room (counted with the victims taken so far removed).
    pub fn reclaiming(&self, l: &Ledger) -> bool {
        let q = &l.queues[self.queue];
        self.lacks.iter().all(|&(p, k)| q.usage[p][k].saturating_add(self.requested(p, k)) <= q.nominal[p][k])
    }

    /// docs/policy.md section 4's gate on preempting at all, own queue included: where the job
    /// lacks room, its own request (not its queue's usage plus it) must fit within its
    /// queue's nominal, unless borrowing within the cohort or fair sharing lets it borrow.
    /// Returns the first (pool, kind) that forbids it, or `None` when the job may preempt.
    pub fn forbidding(&self, l: &Ledger) -> Option<(usize, usize)> {
        if self.fair_sharing || self.policy.borrow_within_cohort.is_some() {
            return None;
        }
        let q = &l.queues[self.queue];
        self.lacks.iter().copied().find(|&(p, k)| self.requested(p, k) > q.nominal[p][k])
    }

    /// What the job asks for of kind `k` in pool `p`.
    pub fn requested(&self, p: usize, k: usize) -> u64 {
        self.demand.iter().find(|(pp, _)| *pp == p).map_or(0, |(_, v)| v[k])
    }

    /// Is `c` a valid victim now, given the victims already taken (their usage is out of
    /// the ledger)? A cross-queue candidate is valid only while its queue still borrows.
    pub fn valid(&self, l: &Ledger, c: &Cand) -> bool {
        if c.leaving || c.own {
            return true;
        }
        let vq = &l.queues[c.queue];
        // It must borrow where the preemptor lacks room: taking work that is within its
        // guarantee there, because it borrows something else, would let two queues take
        // turns preempting each other.
        let borrows_needed = self.lacks.iter().any(|&(p, k)| vq.borrowing_in(p, k));
        if !borrows_needed {
            return false;
        }
        let same_tree = l.queues[c.queue].tree == l.queues[self.queue].tree;
        if self.reclaiming(l) {
            return match self.policy.reclaim_within_cohort {
                ReclaimWithinCohort::Never => false,
                ReclaimWithinCohort::LowerPriority => c.priority < self.job.priority,
                ReclaimWithinCohort::Any => true,
            } || (same_tree && self.fair_sharing && leaves_guarantee(l, c) && self.fair_share_allows(l, c));
        }
        if !same_tree {
            return false;
        }
        if self.fair_sharing {
            return self.fair_share_allows(l, c);
        }
        // The victim's queue borrows now (checked above), so the whole victim may be taken
        // even if that leaves its queue below nominal (section 4).
        self.policy.borrow_within_cohort.is_some_and(|b| bwc_allows(b.max_priority_threshold, self.job, c.priority))
    }

    fn fair_share_allows(&self, l: &Ledger, c: &Cand) -> bool {
        // Not in the contract (docs/policy.md section 6, "Departures not yet settled"): the
        // victim's queue must have a share strictly above the preemptor queue's share now. Without it,
        // equal shares (two queues of weight 0 that borrow, both infinite) pass section 6's
        // "no higher than" each in turn, and take the same GPUs from each other forever.
        if l.share(self.queue, &[], &[]) >= l.share(c.queue, &[], &[]) {
            return false;
        }
        let mine = l.share(self.queue, &self.demand, &[]);

        let usage = l.charged_usage(c.job);
        if self.weak { mine < l.share(c.queue, &[], &[]) } else { mine <= l.share(c.queue, &[], &usage) }
    }

    /// Dynamic rank: like `Cand::rank`, with victims from the queue with the highest share
    /// first among other queues in a fair-sharing cohort.
    pub fn cmp_rank(&self, l: &Ledger, a: &Cand, b: &Cand) -> Ordering {
        let share = |c: &Cand| {
            if self.fair_sharing && !c.own && !c.leaving { l.share(c.queue, &[], &[]) } else { 0.0 }
        };
        let (ra, rb) = (a.rank(), b.rank());
        (ra.0, ra.1).cmp(&(rb.0, rb.1)).then_with(|| share(b).total_cmp(&share(a))).then_with(|| ra.cmp(&rb))
    }
}
