//! Quota accounting: per queue and pool, usage against nominal, borrow and lend limits; per
//! tree, what is lent and borrowed; per pool, what the trees draw from unowned capacity.
//!
//! The rule (docs/policy.md section 1): a queue may go above nominal by borrowing its tree's
//! unused lendable quota and the root's unowned capacity, up to its borrow limit. Each tree
//! draws from the unowned capacity what its borrowing exceeds its own lendable quota, and at
//! least what its non-preemptible jobs use above nominal (they never use another queue's
//! quota). The draws of all trees together may not exceed the unowned capacity.

use super::{Ledger, Vector, ZERO, add};
use crate::job::JobId;
use crate::limits::MAX_RESOURCE_KINDS;
use crate::name::Name;

#[derive(Debug, Clone, PartialEq)]
pub struct QueueAcct {
    pub name: Name,
    pub tree: usize,
    /// A cohort on the way to the top has `fair_sharing` on.
    pub fair_sharing: bool,
    pub weight: f64,
    /// Per pool.
    pub nominal: Vec<Vector>,
    /// Per pool; `u64::MAX`: unlimited.
    pub borrow_limit: Vec<Vector>,
    /// Per pool; `u64::MAX`: all unused nominal quota is lendable.
    pub lend_limit: Vec<Vector>,
    pub usage: Vec<Vector>,
    /// Usage by non-preemptible jobs (part of `usage`).
    pub np_usage: Vec<Vector>,
}

impl QueueAcct {
    pub fn borrowed(&self, p: usize, k: usize) -> u64 {
        self.usage[p][k].saturating_sub(self.nominal[p][k])
    }

    pub fn borrowing_in(&self, p: usize, k: usize) -> bool {
        self.usage[p][k] > self.nominal[p][k]
    }

    pub fn borrowing_anywhere(&self) -> bool {
        (0..self.usage.len()).any(|p| (0..MAX_RESOURCE_KINDS).any(|k| self.borrowing_in(p, k)))
    }

    fn lendable_unused(&self, p: usize, k: usize) -> u64 {
        self.lend_limit[p][k].min(self.nominal[p][k].saturating_sub(self.usage[p][k]))
    }

    fn np_excess(&self, p: usize, k: usize) -> u64 {
        self.np_usage[p][k].saturating_sub(self.nominal[p][k])
    }

    pub fn lendable_nominal(&self, p: usize, k: usize) -> u64 {
        self.lend_limit[p][k].min(self.nominal[p][k])
    }
}

/// Sums over a tree's queues, per pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeAcct {
    pub name: Option<Name>,
    pub borrowed: Vec<Vector>,
    pub lendable_unused: Vec<Vector>,
    pub np_excess: Vec<Vector>,
    /// Lendable nominal quota (used or not): the denominator of fair-share.
    pub lendable_nominal: Vec<Vector>,
}

impl TreeAcct {
    pub fn new(name: Option<Name>, pools: usize) -> TreeAcct {
        TreeAcct {
            name,
            borrowed: vec![ZERO; pools],
            lendable_unused: vec![ZERO; pools],
            np_excess: vec![ZERO; pools],
            lendable_nominal: vec![ZERO; pools],
        }
    }

    fn draw_of(borrowed: u64, lendable: u64, np_excess: u64) -> u64 {
        np_excess.max(borrowed.saturating_sub(lendable))
    }

    pub fn draw(&self, p: usize, k: usize) -> u64 {
        Self::draw_of(self.borrowed[p][k], self.lendable_unused[p][k], self.np_excess[p][k])
    }
}

/// A demand a queue may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// It takes the queue above nominal somewhere.
    pub borrows: bool,
}

/// Why a queue may not take a demand, with the figures a person needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaBlock {
    BorrowLimit {
        pool: usize,
        kind: usize,
        limit: u64,
        would_borrow: u64,
    },
    /// A non-preemptible job may only borrow the root's unowned capacity.
    NotPreemptible {
        pool: usize,
        kind: usize,
        nominal: u64,
        in_use: u64,
        unowned_left: u64,
    },
    NoLendable {
        pool: usize,
        kind: usize,
        short: u64,
    },
}

impl QuotaBlock {
    pub fn describe(&self, ledger: &Ledger, queue: usize) -> String {
        let q = &ledger.queues[queue].name;
        let pool = |p: usize| &ledger.pools[p].name;
        let kind = |k: usize| ledger.kinds.name(k);
        let h = |k: usize, v: u64| ledger.kinds.human(k, v);
        match *self {
            QuotaBlock::BorrowLimit { pool: p, kind: k, limit, would_borrow } => format!(
                "queue {q} would borrow {} {} in pool {} but its borrow limit is {}",
                h(k, would_borrow),
                kind(k),
                pool(p),
                h(k, limit)
            ),
            QuotaBlock::NotPreemptible { pool: p, kind: k, nominal, in_use, unowned_left } => format!(
                "non-preemptible jobs never borrow other queues' quota: queue {q} uses {} of its {} {} in pool {}, and {} {} of unowned capacity is left",
                h(k, in_use),
                h(k, nominal),
                kind(k),
                pool(p),
                h(k, unowned_left),
                kind(k)
            ),
            QuotaBlock::NoLendable { pool: p, kind: k, short } => {
                format!("insufficient unused quota for {} in pool {}: {} more needed", kind(k), pool(p), h(k, short))
            }
        }
    }
}

impl Ledger {
    /// Adds (`plus`) or removes an amount from a queue's usage in a pool, keeping the tree
    /// sums and the pool's unowned draw consistent.
    pub fn adjust_usage(&mut self, queue: usize, pool: usize, amount: &Vector, np: bool, plus: bool) {
        let tree = self.queues[queue].tree;
        for k in 0..MAX_RESOURCE_KINDS {
            if amount[k] == 0 {
                continue;
            }
            let q = &self.queues[queue];
            let (b0, l0, n0) = (q.borrowed(pool, k), q.lendable_unused(pool, k), q.np_excess(pool, k));
            let draw0 = self.trees[tree].draw(pool, k);
            let q = &mut self.queues[queue];
            if plus {
                q.usage[pool][k] = q.usage[pool][k].saturating_add(amount[k]);
                if np {
                    q.np_usage[pool][k] = q.np_usage[pool][k].saturating_add(amount[k]);
                }
            } else {
                q.usage[pool][k] = q.usage[pool][k].saturating_sub(amount[k]);
                if np {
                    q.np_usage[pool][k] = q.np_usage[pool][k].saturating_sub(amount[k]);
                }
            }
            let q = &self.queues[queue];
            let (b1, l1, n1) = (q.borrowed(pool, k), q.lendable_unused(pool, k), q.np_excess(pool, k));
            let t = &mut self.trees[tree];
            t.borrowed[pool][k] = t.borrowed[pool][k] + b1 - b0;
            t.lendable_unused[pool][k] = t.lendable_unused[pool][k] + l1 - l0;
            t.np_excess[pool][k] = t.np_excess[pool][k] + n1 - n0;
            let draw1 = t.draw(pool, k);
            let pa = &mut self.pools[pool];
            pa.unowned_draw[k] = pa.unowned_draw[k] + draw1 - draw0;
        }
    }

    /// May `queue` take `demand` (per pool, already summed) now? Within nominal always may;
    /// above it, the borrow limit and what the tree and the root can lend decide.
    pub fn check_admission(&self, queue: usize, demand: &[(usize, Vector)], np: bool) -> Result<Admission, QuotaBlock> {
        let q = &self.queues[queue];
        let t = &self.trees[q.tree];
        let mut borrows = false;
        for &(p, ref d) in demand {
            for k in 0..MAX_RESOURCE_KINDS {
                if d[k] == 0 {
                    continue;
                }
                let (u, n) = (q.usage[p][k], q.nominal[p][k]);
                let u1 = u.saturating_add(d[k]);
                if u1 <= n {
                    continue;
                }
                borrows = true;
                let would_borrow = u1 - n;
                if would_borrow > q.borrow_limit[p][k] {
                    return Err(QuotaBlock::BorrowLimit {
                        pool: p,
                        kind: k,
                        limit: q.borrow_limit[p][k],
                        would_borrow,
                    });
                }
                let np1 = if np { q.np_usage[p][k].saturating_add(d[k]) } else { q.np_usage[p][k] };
                let borrowed = t.borrowed[p][k] - q.borrowed(p, k) + would_borrow;
                let lendable = t.lendable_unused[p][k] - q.lendable_unused(p, k);
                let np_excess = t.np_excess[p][k] - q.np_excess(p, k) + np1.saturating_sub(n);
                let draw1 = TreeAcct::draw_of(borrowed, lendable, np_excess);
                let total = self.pools[p].unowned_draw[k] - t.draw(p, k) + draw1;
                let unowned = self.pools[p].unowned()[k];
                if total > unowned {
                    // Would it pass as a preemptible job? Then non-preemptibility is the reason.
                    let np_if_preemptible = t.np_excess[p][k] - q.np_excess(p, k) + q.np_usage[p][k].saturating_sub(n);
                    let others = self.pools[p].unowned_draw[k] - t.draw(p, k);
                    if np && others + TreeAcct::draw_of(borrowed, lendable, np_if_preemptible) <= unowned {
                        let left = unowned.saturating_sub(self.pools[p].unowned_draw[k]);
                        return Err(QuotaBlock::NotPreemptible {
                            pool: p,
                            kind: k,
                            nominal: n,
                            in_use: u,
                            unowned_left: left,
                        });
                    }
                    return Err(QuotaBlock::NoLendable { pool: p, kind: k, short: total - unowned });
                }
            }
        }
        Ok(Admission { borrows })
    }

    /// Would the demand keep `queue` within nominal everywhere?
    pub fn within_nominal(&self, queue: usize, demand: &[(usize, Vector)]) -> bool {
        let q = &self.queues[queue];
        demand
            .iter()
            .all(|(p, d)| (0..MAX_RESOURCE_KINDS).all(|k| q.usage[*p][k].saturating_add(d[k]) <= q.nominal[*p][k]))
    }

    /// Dominant borrowed fraction, divided by weight (docs/policy.md section 6), with `extra`
    /// added to and `less` removed from its usage. Everything above nominal counts, unowned
    /// capacity included; the denominator is the tree's lendable nominal quota only, so
    /// borrowing where the tree lends nothing is an infinite share, as is any borrowing by a
    /// queue of weight 0.
    pub fn share(&self, queue: usize, extra: &[(usize, Vector)], less: &[(usize, Vector)]) -> f64 {
        let q = &self.queues[queue];
        let t = &self.trees[q.tree];
        let mut best: f64 = 0.0;
        for p in 0..q.usage.len() {
            for k in 0..MAX_RESOURCE_KINDS {
                let mut u = q.usage[p][k];
                for (pp, v) in extra {
                    if *pp == p {
                        u = u.saturating_add(v[k]);
                    }
                }
                for (pp, v) in less {
                    if *pp == p {
                        u = u.saturating_sub(v[k]);
                    }
                }
                let borrowed = u.saturating_sub(q.nominal[p][k]);
                if borrowed == 0 {
                    continue;
                }
                let denom = t.lendable_nominal[p][k];
                let frac = if q.weight <= 0.0 || denom == 0 {
                    f64::INFINITY
                } else {
                    borrowed as f64 / denom as f64 / q.weight
                };
                best = best.max(frac);
            }
        }
        best
    }

    /// The usage a job's occupants and reservations amount to, per pool.
    fn usage_of(&self, job: JobId, nodes: &[usize]) -> Vec<(usize, Vector)> {
        let mut out: Vec<(usize, Vector)> = Vec::new();
        if self.charges.get(&job).is_some_and(|c| c.leaving) {
            return out;
        }
        for &n in nodes {
            let node = &self.nodes[n];
            let mut amount = ZERO;
            // A held (suspended) share is not in use: it blocks its node, not quota.
            if let Some(o) = node.occupant(job).filter(|o| !o.held) {
                add(&mut amount, &o.amount);
            }
            if let Some(r) = node.reservation(job) {
                add(&mut amount, &r.amount);
            }
            match out.iter_mut().find(|(p, _)| *p == node.pool) {
                Some((_, v)) => add(v, &amount),
                None => out.push((node.pool, amount)),
            }
        }
        out
    }

    /// Re-derives a job's queue usage from its occupants and reservations.
    pub(crate) fn recharge(&mut self, job: JobId) {
        // The charge's lists are taken out and put back rather than cloned: this runs for
        // every placement the scheduler simulates and every one `apply` performs.
        let Some(ch) = self.charges.get_mut(&job) else {
            return;
        };
        let (queue, np) = (ch.queue, ch.not_preemptible);
        let old = std::mem::take(&mut ch.usage);
        let nodes = std::mem::take(&mut ch.nodes);
        for (p, v) in &old {
            self.adjust_usage(queue, *p, v, np, false);
        }
        let usage = self.usage_of(job, &nodes);
        for (p, v) in &usage {
            self.adjust_usage(queue, *p, v, np, true);
        }
        if let Some(c) = self.charges.get_mut(&job) {
            c.usage = usage;
            c.nodes = nodes;
        }
    }
}
