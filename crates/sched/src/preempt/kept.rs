//! Candidates kept between the preemptors of one cycle (issue 37: a preemptor must not scan
//! every running job).
//!
//! Within a cycle, `View::active()` is the running jobs as the cycle began: what a later
//! preemptor may take differs from what an earlier one could only by the jobs taken since
//! (`View::taken`, which only grows), as long as what decides eligibility is the same: the
//! preemptor's queue, priority, policy and pools (and its submission, where the policy
//! compares it), and the other queues that may contribute. A hundred urgent jobs of one
//! queue then gather their candidates and the table of them per node once, and each later
//! one drops the jobs its predecessors took: a pass over the kept list instead of a scan of
//! every running job and node.
//!
//! Elastic gangs split parts off in the working ledger for each plan (`View::split_excess`),
//! so with any of them in the state nothing is kept. Debug builds compare every kept answer
//! with a fresh one.

use std::collections::BTreeSet;

use baton_model::job::{Job, JobId};
use baton_model::queue::{PreemptionPolicy, WithinQueue};

use super::cand::Cand;
use super::estimate::{Est, positions_of, rank_order, renumber_best};
use super::memo::Memo;
use super::onnode::OnNodes;
use crate::view::View;

/// What decides a preemptor's own-queue candidates, besides the view.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    queue: usize,
    priority: i32,
    /// Only where the policy compares submissions (`LowerOrNewerEqualPriority`).
    submitted: Option<(u64, u64)>,
    policy: PreemptionPolicy,
    pools: Vec<usize>,
}

impl Key {
    pub fn of(job: &Job, queue: usize, policy: &PreemptionPolicy, pools: &[usize]) -> Key {
        let compares = policy.within_queue == WithinQueue::LowerOrNewerEqualPriority;
        Key {
            queue,
            priority: job.priority,
            submitted: compares.then(|| job.submitted_key()),
            policy: *policy,
            pools: pools.to_vec(),
        }
    }
}

/// A list of candidates as of the jobs the cycle had taken (`seen`: none of them is in it).
struct List {
    key: Key,
    seen: BTreeSet<JobId>,
    cands: Vec<Cand>,
}

/// Every candidate of a preemptor (other queues', then its own), their table per node, and
/// their rank order (`estimate::rank_order`): dropping candidates keeps it sorted.
struct All {
    list: List,
    useful: Vec<bool>,
    on_node: OnNodes,
    by_rank: Vec<u32>,
    rank: Vec<u32>,
    /// Quick estimates per node for these candidates (`memo.rs`).
    memo: Memo<Est>,
}

/// The kept candidates, their table per node and each one's position in rank order.
pub(super) type Current<'k> = (&'k [Cand], &'k OnNodes, &'k [u32]);

/// The lists kept in one cycle: the latest preemptor's.
#[derive(Default)]
pub struct Kept {
    pub(super) own: KeptOwn,
    pub(super) all: KeptAll,
}

/// A preemptor's own-queue candidates.
#[derive(Default)]
pub struct KeptOwn(Option<List>);

/// Every candidate of a preemptor, with the table of them per node.
#[derive(Default)]
pub struct KeptAll(Option<All>);

impl Kept {
    /// Whether a cycle over this view may reuse lists at all.
    pub fn applies(view: &View) -> bool {
        view.state.elastic_gangs().is_empty()
    }

    /// The candidates of the latest `keep` or `holds`, with their table per node and each
    /// one's position in rank order.
    pub fn current(&self) -> Current<'_> {
        let all = self.all.0.as_ref().expect("candidates are kept before they are read");
        (&all.list.cands, &all.on_node, &all.rank)
    }

    /// `current`, with the estimates kept for these candidates.
    pub(super) fn current_with_memo(&mut self) -> (Current<'_>, &mut Memo<Est>) {
        let all = self.all.0.as_mut().expect("candidates are kept before they are read");
        ((&all.list.cands, &all.on_node, &all.rank), &mut all.memo)
    }
}

impl KeptOwn {
    /// The own-queue candidates kept for `key`, without those taken since; `None` if none
    /// are kept for it.
    pub fn get(&mut self, view: &View, key: &Key) -> Option<&[Cand]> {
        let list = self.0.as_mut().filter(|l| l.key == *key)?;
        list.drop_taken(view);
        Some(&list.cands)
    }

    pub fn keep(&mut self, view: &View, key: Key, cands: Vec<Cand>) -> &[Cand] {
        &self.0.insert(List { key, seen: view.taken.clone(), cands }).cands
    }
}

impl KeptAll {
    /// Whether every candidate is kept for `key` and `useful` (then `Kept::current`
    /// answers, without those taken since).
    pub fn holds(&mut self, view: &View, key: &Key, useful: &[bool]) -> bool {
        let Some(all) = self.0.as_mut().filter(|a| a.list.key == *key && a.useful == useful) else {
            return false;
        };
        if let Some(positions) = all.list.drop_taken(view) {
            let lost = all.on_node.keep_only(&positions);
            // Each old rank position's new one: the kept keep their order.
            let mut next = 0u32;
            let moved: Vec<Option<u32>> = all
                .by_rank
                .iter()
                .map(|&i| {
                    positions[i as usize].map(|_| {
                        next += 1;
                        next - 1
                    })
                })
                .collect();
            all.by_rank.retain_mut(|i| positions[*i as usize].map(|to| *i = to).is_some());
            all.rank = positions_of(&all.by_rank);
            all.memo.forget(&lost);
            renumber_best(&mut all.memo, &moved);
        }
        true
    }

    pub fn keep(&mut self, view: &View, key: Key, useful: Vec<bool>, cands: Vec<Cand>, on_node: OnNodes) {
        let (by_rank, rank) = rank_order(&cands);
        let list = List { key, seen: view.taken.clone(), cands };
        self.0 = Some(All { list, useful, on_node, by_rank, rank, memo: Memo::default() });
    }
}

impl List {
    /// Drops the candidates taken since the list was kept. Returns, when it dropped any,
    /// each old position's new one (`None`: dropped).
    fn drop_taken(&mut self, view: &View) -> Option<Vec<Option<u32>>> {
        if view.taken.len() == self.seen.len() {
            return None;
        }
        // A few jobs since the last look (a preemptor's victims), in id order: looked up by
        // bisection for each of the many candidates.
        let new: Vec<JobId> = view.taken.difference(&self.seen).copied().collect();
        self.seen.extend(new.iter().copied());
        let mut next = 0u32;
        let positions: Vec<Option<u32>> = self
            .cands
            .iter()
            .map(|c| {
                new.binary_search(&c.job).is_err().then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        let mut at = positions.iter();
        self.cands.retain(|_| at.next().is_some_and(Option::is_some));
        Some(positions)
    }
}
