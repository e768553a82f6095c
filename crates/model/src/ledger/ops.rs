//! Incremental updates: a job occupies, vacates, is held (suspended) or unheld (resumed),
//! and preemptors reserve. Each op fixes the affected nodes' caches and queues' usage.
//!
//! These are the steps the ledger's changes (`change.rs`) are made of, and the rebuild's;
//! they are crate-private so that a caller outside `model` (the scheduler's view) can only
//! make the changes `State::apply` makes, through the one API in `change.rs`.

use super::{Fractions, JobCharge, Ledger, NodeReservation, Occupant, Vector, ZERO, min, sub};
use crate::job::JobId;
use crate::quantity::CPU;

/// One job's share of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The node's index in the ledger.
    pub node: usize,
    /// With the GPUs in thousandths: whole ones and fractions together.
    pub amount: Vector,
    /// The GPUs it holds whole there, by index.
    pub gpus: u64,
    /// What it holds of GPUs it shares (decisions.md section 11).
    pub fractions: Fractions,
}

impl Share {
    pub fn new(node: usize, amount: Vector, gpus: u64) -> Share {
        Share { node, amount, gpus, fractions: Fractions::default() }
    }
}

impl Ledger {
    pub(super) fn ensure_charge(&mut self, job: JobId, queue: usize, np: bool, nodes: &[usize]) {
        let ch = self.charges.get_or_insert_with(job, || JobCharge {
            queue,
            not_preemptible: np,
            usage: Vec::new(),
            nodes: Vec::new(),
            reserved: false,
            leaving: false,
        });
        for &n in nodes {
            if !ch.nodes.contains(&n) {
                ch.nodes.push(n);
            }
        }
    }

    /// Re-derives a job's usage and drops nodes where it has nothing left.
    pub(super) fn settle(&mut self, job: JobId) {
        self.recharge(job);
        let accts = &self.nodes;
        let Some(ch) = self.charges.get_mut(&job) else {
            return;
        };
        ch.nodes.retain(|&n| accts[n].occupant(job).is_some() || accts[n].reservation(job).is_some());
        if ch.nodes.is_empty() {
            self.charges.remove(&job);
        } else {
            ch.reserved = ch.nodes.iter().any(|&n| accts[n].reservation(job).is_some());
        }
    }

    /// What of `amount` a job suspended in place keeps taken on its node: all but its CPUs
    /// (decisions.md section 7). Only CPU time is freed by stopping a process.
    pub(crate) fn kept_when_suspended(&self, amount: &Vector) -> Vector {
        let mut kept = *amount;
        if let Some(k) = self.kinds.index(CPU) {
            kept[k] = 0;
        }
        kept
    }

    /// A job starts using these shares (one per node); `suspends`: a preemption suspends it
    /// in place (`JobSpec::suspends_when_preempted`), so it would keep all but its CPUs.
    pub(crate) fn occupy(&mut self, job: JobId, queue: usize, np: bool, suspends: bool, shares: &[Share]) {
        let nodes: Vec<usize> = shares.iter().map(|s| s.node).collect();
        self.ensure_charge(job, queue, np, &nodes);
        for Share { node: n, amount, gpus, fractions } in shares {
            let (n, amount, gpus, fractions) = (*n, *amount, *gpus, fractions.clone());
            let keeps = if suspends { self.kept_when_suspended(&amount) } else { ZERO };
            let (held, lent_to, lent_amount, lent_gpus) = (false, None, ZERO, 0);
            let o = Occupant { job, amount, gpus, keeps, held, lent_to, lent_amount, lent_gpus, fractions };
            self.nodes[n].occupants.push(o);
        }
        self.settle(job);
        for n in nodes {
            self.nodes[n].refresh();
        }
    }

    /// A job stops holding anything on nodes. Shares lent to it go back to their holders.
    pub(crate) fn vacate(&mut self, job: JobId) {
        let Some(ch) = self.charges.get(&job).cloned() else {
            return;
        };
        let mut holders = Vec::new();
        // What it lent goes to the next lender of the same borrower, in job order, as a
        // rebuild computes it (`relend`).
        let mut borrowers = Vec::new();
        let charges = &self.charges;
        for &n in &ch.nodes {
            let node = &mut self.nodes[n];
            if let Some(b) = node.occupant(job).and_then(|o| o.lent_to) {
                borrowers.push((n, b));
            }
            node.occupants.retain(|o| o.job != job);
            for o in node.occupants.iter_mut().filter(|o| o.lent_to == Some(job)) {
                // A lender's ranks being stopped (`keep_lend`) hold their whole share again;
                // a suspended lender stays held.
                if charges.get(&o.job).is_some_and(|c| c.leaving) {
                    o.held = false;
                }
                o.lent_to = None;
                o.lent_amount = ZERO;
                o.lent_gpus = 0;
                holders.push(o.job);
            }
        }
        for (n, b) in borrowers {
            self.relend(n, b);
        }
        self.settle(job);
        for h in holders {
            self.settle(h);
        }
        for n in ch.nodes {
            self.nodes[n].refresh();
        }
    }

    /// A job starts (or stops) leaving: see `JobCharge::leaving`.
    pub(crate) fn set_leaving(&mut self, job: JobId, leaving: bool) {
        if let Some(ch) = self.charges.get_mut(&job) {
            ch.leaving = leaving;
        }
        self.settle(job);
    }

    /// A job's shares are held in place (suspended). If it was preempted for `lend_to`,
    /// the part of its shares that job has reserved is lent to it.
    pub(crate) fn hold(&mut self, job: JobId, lend_to: Option<JobId>) {
        let Some(ch) = self.charges.get(&job).cloned() else {
            return;
        };
        for &n in &ch.nodes {
            // Only a borrower with a reservation on this node borrows here.
            let lend_here = lend_to.filter(|&b| self.nodes[n].reservation(b).is_some());
            if let Some(o) = self.nodes[n].occupants.iter_mut().find(|o| o.job == job) {
                o.held = true;
                o.lent_to = lend_here;
            }
            if let Some(b) = lend_to {
                self.relend(n, b);
            }
        }
        self.settle(job);
        for n in ch.nodes {
            self.nodes[n].refresh();
        }
    }

    /// Recomputes, in job order, how much each held share lent to `borrower` on node `n`
    /// lends: up to what the borrower has reserved there, and never what the holder keeps
    /// (its memory). Order-independent on purpose, so a rebuild from scratch gives the same
    /// numbers as the incremental path.
    pub(crate) fn relend(&mut self, n: usize, borrower: JobId) {
        let node = &mut self.nodes[n];
        let Some(r) = node.reservation(borrower).cloned() else {
            return;
        };
        let mut remaining = r.amount;
        let mut order: Vec<usize> =
            (0..node.occupants.len()).filter(|&i| node.occupants[i].lent_to == Some(borrower)).collect();
        order.sort_by_key(|&i| node.occupants[i].job);
        let mut holders = Vec::new();
        for i in order {
            let o = &mut node.occupants[i];
            let mut lendable = o.amount;
            sub(&mut lendable, &o.keeps);
            o.lent_amount = min(&remaining, &lendable);
            o.lent_gpus = o.gpus & r.gpus;
            sub(&mut remaining, &o.lent_amount);
            holders.push(o.job);
        }
        for h in holders {
            self.settle(h);
        }
    }

    /// A held job runs again on its own shares.
    pub(crate) fn unhold(&mut self, job: JobId) {
        let Some(ch) = self.charges.get(&job).cloned() else {
            return;
        };
        for &n in &ch.nodes {
            if let Some(o) = self.nodes[n].occupants.iter_mut().find(|o| o.job == job) {
                o.held = false;
                o.lent_to = None;
                o.lent_amount = ZERO;
                o.lent_gpus = 0;
            }
        }
        self.settle(job);
        for n in ch.nodes {
            self.nodes[n].refresh();
        }
    }

    /// Holds shares for a preemptor while `victims` stop. Counts in its queue's usage.
    pub(crate) fn reserve(&mut self, job: JobId, queue: usize, np: bool, shares: &[Share], victims: &[JobId]) {
        let nodes: Vec<usize> = shares.iter().map(|s| s.node).collect();
        self.ensure_charge(job, queue, np, &nodes);
        for Share { node: n, amount, gpus, fractions } in shares {
            let (n, amount, gpus, fractions) = (*n, *amount, *gpus, fractions.clone());
            let r = NodeReservation { job, amount, gpus, victims: victims.to_vec(), fractions };
            self.nodes[n].reservations.push(r);
        }
        self.settle(job);
        for n in nodes {
            self.nodes[n].refresh();
        }
    }

    /// Drops a preemptor's reservation. With `keep_lends`, shares lent to it stay lent
    /// (it is about to occupy them); without, they go back to their holders.
    pub(crate) fn unreserve(&mut self, job: JobId, keep_lends: bool) {
        let Some(ch) = self.charges.get(&job).cloned() else {
            return;
        };
        let mut holders = Vec::new();
        for &n in &ch.nodes {
            let node = &mut self.nodes[n];
            node.reservations.retain(|r| r.job != job);
            if !keep_lends {
                for o in node.occupants.iter_mut().filter(|o| o.lent_to == Some(job)) {
                    o.lent_to = None;
                    o.lent_amount = ZERO;
                    o.lent_gpus = 0;
                    holders.push(o.job);
                }
            }
        }
        self.settle(job);
        for h in holders {
            self.settle(h);
        }
        for n in ch.nodes {
            self.nodes[n].refresh();
        }
    }

    /// The parts of held shares lent to `borrower`, per node: (node, holder, amount, gpus).
    pub fn lent_to(&self, borrower: JobId, nodes: &[usize]) -> Vec<(usize, JobId, Vector, u64)> {
        let mut out = Vec::new();
        for &n in nodes {
            for o in &self.nodes[n].occupants {
                if o.lent_to == Some(borrower) {
                    out.push((n, o.job, o.lent_amount, o.lent_gpus));
                }
            }
        }
        out
    }

    /// What `holder`'s held shares lend to jobs that run on them (not to a reservation), per
    /// node: (node, borrower, amount, gpus).
    pub(crate) fn lent_by_to_running(&self, holder: JobId) -> Vec<(usize, JobId, Vector, u64)> {
        let Some(ch) = self.charges.get(&holder) else { return Vec::new() };
        let mut out = Vec::new();
        for &n in &ch.nodes {
            let node = &self.nodes[n];
            if let Some(o) = node.occupant(holder).filter(|o| o.held)
                && let Some(b) = o.lent_to.filter(|&b| node.reservation(b).is_none())
            {
                out.push((n, b, o.lent_amount, o.lent_gpus));
            }
        }
        out
    }

    /// `holder`'s share on node `n`, held by its ranks still being stopped there, goes on
    /// lending `borrower` what it lent while suspended: those processes are stopped until
    /// they are gone, and the borrower runs on the lent part.
    pub(crate) fn keep_lend(&mut self, n: usize, holder: JobId, borrower: JobId, amount: Vector, gpus: u64) {
        if let Some(o) = self.nodes[n].occupants.iter_mut().find(|o| o.job == holder) {
            o.held = true;
            o.lent_to = Some(borrower);
            o.lent_amount = amount;
            o.lent_gpus = gpus;
        }
        self.settle(holder);
        self.nodes[n].refresh();
    }

    /// Sets how much of `holder`'s held share on node `n` is lent to `borrower` (used when
    /// rebuilding from a placed borrower's recorded lends).
    pub(crate) fn set_lend(&mut self, n: usize, holder: JobId, borrower: JobId, amount: Vector, gpus: u64) {
        if let Some(o) = self.nodes[n].occupants.iter_mut().find(|o| o.job == holder && o.held) {
            o.lent_to = Some(borrower);
            o.lent_amount = amount;
            o.lent_gpus = gpus;
        }
        self.settle(holder);
        self.nodes[n].refresh();
    }

    /// Lends to a reserved preemptor the shares of the jobs suspended for it, or being
    /// suspended for it (`holders`), on its reserved nodes. Lent parts are charged to the
    /// preemptor's reservation, not to the holders' queues.
    pub(crate) fn lend_for_reservation(&mut self, job: JobId, holders: &[JobId]) {
        let Some(ch) = self.charges.get(&job).cloned() else {
            return;
        };
        for &n in &ch.nodes {
            if self.nodes[n].reservation(job).is_none() {
                continue;
            }
            let mut touched = false;
            for o in self.nodes[n].occupants.iter_mut() {
                if holders.contains(&o.job) {
                    o.lent_to = Some(job);
                    touched = true;
                }
            }
            if touched {
                self.relend(n, job);
                self.nodes[n].refresh();
            }
        }
    }

    /// A victim has stopped: it no longer covers any part of `preemptor`'s reservation.
    pub(crate) fn forget_victim(&mut self, preemptor: JobId, victim: JobId) {
        let Some(ch) = self.charges.get(&preemptor).cloned() else {
            return;
        };
        for &n in &ch.nodes {
            for r in self.nodes[n].reservations.iter_mut().filter(|r| r.job == preemptor) {
                r.victims.retain(|&v| v != victim);
            }
            self.nodes[n].refresh();
        }
    }
}
