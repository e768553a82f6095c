//! Candidates kept between the preemptors of one cycle (issue 37: a preemptor must not scan
//! every running job).
//!
//! Within a cycle, `View::active()` is the running jobs as the cycle began: what a later
//! preemptor may take differs from what an earlier one could only by the jobs taken since
//! (`View::taken`, which only grows), as long as what decides eligibility is the same: the
//! preemptor's queue, priority, policy and pools (and its submission, where the policy
//! compares it), and the other queues that may contribute. A hundred urgent jobs of one
//! queue then gather their candidates and the table of them per node once, and each later
//! one drops the jobs its predecessors took: its own queue's list in one pass, and in the list
//! of every candidate each taken job is only marked dropped and taken out of its nodes' runs,
//! so positions (in the list and in rank order) and the estimates that hold them stay as
//! they were (`memo.rs`).
//!
//! Elastic gangs split parts off in the working ledger for each plan (`View::split_excess`),
//! so with any of them in the state nothing is kept. Debug builds compare every kept answer
//! with a fresh one.

use baton_model::job::{Job, JobId};
use baton_model::queue::{PreemptionPolicy, WithinQueue};

use super::cand::Cand;
use super::estimate::{Est, rank_order};
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

/// A list of candidates as of the first `seen` jobs the cycle took (`View::taken_count`).
struct List {
    key: Key,
    seen: usize,
    cands: Vec<Cand>,
}

/// Every candidate of a preemptor (other queues', then its own), their table per node, and
/// their positions in rank order (`estimate::rank_order`). Candidates taken since are marked
/// dropped (`dropped`) and left out of the table; nothing moves.
struct All {
    list: List,
    useful: Vec<bool>,
    on_node: OnNodes,
    rank: Vec<u32>,
    dropped: Vec<bool>,
    live: usize,
    /// Where the preemptor's own queue's candidates begin. Other queues' and its own are
    /// each in id order (as `View::active` is): a taken job is found by bisection.
    own_from: usize,
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

    /// The candidates of the latest `keep` or `holds` (those taken since marked dropped),
    /// with their table per node (without the dropped), each one's position in rank order,
    /// and the estimates kept for them.
    pub(super) fn current_with_memo(&mut self) -> (Current<'_>, &mut Memo<Est>) {
        let all = self.all.0.as_mut().expect("candidates are kept before they are read");
        ((&all.list.cands, &all.on_node, &all.rank), &mut all.memo)
    }

    /// How many of the kept candidates are not dropped.
    pub fn live(&self) -> usize {
        self.all().live
    }

    /// The kept candidates without the dropped, with the table renumbered: what a fresh
    /// gathering gives (debug builds compare).
    pub fn compacted(&self) -> (Vec<Cand>, OnNodes) {
        let all = self.all();
        let mut next = 0u32;
        let positions: Vec<Option<u32>> = all
            .dropped
            .iter()
            .map(|&d| {
                (!d).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        let cands = all.list.cands.iter().zip(&all.dropped).filter(|(_, d)| !**d).map(|(c, _)| c.clone()).collect();
        (cands, all.on_node.renumbered(&positions))
    }

    fn all(&self) -> &All {
        self.all.0.as_ref().expect("candidates are kept before they are read")
    }
}

impl KeptOwn {
    /// The own-queue candidates kept for `key`, without those taken since; `None` if none
    /// are kept for it.
    pub fn get(&mut self, view: &View, key: &Key) -> Option<&[Cand]> {
        let list = self.0.as_mut().filter(|l| l.key == *key)?;
        let taken = list.newly_taken(view);
        if !taken.is_empty() {
            list.cands.retain(|c| taken.binary_search(&c.job).is_err());
        }
        Some(&list.cands)
    }

    pub fn keep(&mut self, view: &View, key: Key, cands: Vec<Cand>) -> &[Cand] {
        &self.0.insert(List { key, seen: view.taken_count(), cands }).cands
    }
}

impl KeptAll {
    /// Whether every candidate is kept for `key` and `useful` (then `Kept::current_with_memo`
    /// answers, with those taken since marked dropped).
    pub fn holds(&mut self, view: &View, key: &Key, useful: &[bool]) -> bool {
        let Some(all) = self.0.as_mut().filter(|a| a.list.key == *key && a.useful == useful) else {
            return false;
        };
        let mut lost = Vec::new();
        for job in all.list.newly_taken(view) {
            let Some(i) = all.position_of(job) else { continue };
            if std::mem::replace(&mut all.dropped[i], true) {
                continue;
            }
            all.live -= 1;
            // Its nodes are its charge's (the table was built from them or from the same
            // occupants); a job without a charge is looked for in every run.
            let nodes = match view.ledger.charges.get(&job) {
                Some(ch) => ch.nodes.clone(),
                None => all.on_node.nodes_of(i),
            };
            lost.extend(nodes.into_iter().filter(|&n| all.on_node.drop(i, n)));
        }
        all.memo.forget(&lost);
        true
    }

    /// Keeps `cands`: other queues' candidates, then from `own_from` the preemptor's own.
    pub fn keep(
        &mut self,
        view: &View,
        key: Key,
        useful: Vec<bool>,
        (cands, own_from): (Vec<Cand>, usize),
        on_node: OnNodes,
    ) {
        // Elastic gangs' parts follow (`with_excess`), but then nothing is reused.
        let sorted = |run: &[Cand]| run.is_sorted_by_key(|c| c.job);
        debug_assert!(!Kept::applies(view) || (sorted(&cands[..own_from]) && sorted(&cands[own_from..])));
        let rank = rank_order(&cands).1;
        let (dropped, live) = (vec![false; cands.len()], cands.len());
        let list = List { key, seen: view.taken_count(), cands };
        self.0 = Some(All { list, useful, on_node, rank, dropped, live, own_from, memo: Memo::default() });
    }
}

impl All {
    /// Job `job`'s position among the candidates, if it is one.
    fn position_of(&self, job: JobId) -> Option<usize> {
        let (others, own) = self.list.cands.split_at(self.own_from);
        let find = |run: &[Cand]| run.binary_search_by_key(&job, |c| c.job).ok();
        find(others).or_else(|| find(own).map(|i| self.own_from + i))
    }
}

impl List {
    /// The jobs taken since the list was last looked at, in id order (a preemptor's victims:
    /// a few).
    fn newly_taken(&mut self, view: &View) -> Vec<JobId> {
        let mut new = view.taken_since(self.seen).to_vec();
        self.seen = view.taken_count();
        new.sort_unstable();
        new
    }
}
