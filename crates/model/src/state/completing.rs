//! The completing state (as Slurm's CG): a job's GPUs stay held until its processes are gone.
//!
//! Whatever ends a job's attempt in the model (a cancel, a rank exiting non-zero, rank 0's
//! exit, a time limit cut short, a vanished rank, a lease stop, a lost node) moves the job on
//! at once (its state, its events), but each placed rank whose process has not been reported
//! gone keeps its share of its node, as an occupant that charges no quota (`leaving`), until:
//! - its agent reports it gone: `Stopped`, `Exited`, `LeaseExpired`, `Vanished`,
//!   `NotStarted` or `Unrecorded` for that attempt and rank, from the node it was placed on (the directive
//!   tells the agent to stop it: `server::desired` sends completing ranks as STOP);
//! - its node is declared lost: by then nothing of the node runs (the lease argument in
//!   docs/protocol.md);
//! - its agent reports it `Unkillable`: the node is marked unhealthy and takes no new work,
//!   so nothing is placed on what the stuck process holds; the job is let go.
//!
//! Meanwhile the job is not placed again (two attempts would run at once), a finished job is
//! not pruned, and a preemptor waiting for it as a victim keeps waiting.
//!
//! Replicated, serialized after the tenancy part of the state (snapshots written before it
//! existed read as nothing completing).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::State;
use crate::alloc::{Lend, ReplicaAlloc, gpu_mask, mask_to_gpus};
use crate::command::Observed;
use crate::error::ApplyError;
use crate::event::Event;
use crate::job::{JobId, JobState};
use crate::ledger::{Vector, ZERO, min, sub};
use crate::name::Name;

/// The ranks of one job's last attempt that still hold their share of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletingRanks {
    pub attempt: u32,
    /// When the attempt ended in the model.
    pub since_ms: u64,
    /// Rank to where it was placed.
    pub ranks: BTreeMap<u32, ReplicaAlloc>,
}

/// Every completing job's ranks, by job.
pub type Completing = BTreeMap<JobId, CompletingRanks>;

/// Where a requeued (or paused) job's last attempt ran, and which of its ranks have been
/// reported to have saved their work since it ended (`late_checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastPlaced {
    pub attempt: u32,
    /// Rank to the node it ran on.
    pub ranks: BTreeMap<u32, Name>,
    /// Ranks whose stop saved their work.
    pub saved: BTreeSet<u32>,
}

impl LastPlaced {
    /// Every rank is known to have saved its work: no late report can add to it.
    pub fn complete(&self) -> bool {
        self.saved.len() == self.ranks.len()
    }
}

/// What ended attempts leave behind, replicated: the completing ranks, and the last
/// placement of each job waiting to be placed again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aftermath {
    pub completing: Completing,
    pub last_placed: BTreeMap<JobId, LastPlaced>,
}

impl State {
    /// Every job's completing ranks, by job.
    pub fn completing_all(&self) -> &Completing {
        &self.after.completing
    }

    /// The ranks of `id` that still hold their share of a node, if any.
    pub fn completing(&self, id: JobId) -> Option<&CompletingRanks> {
        self.after.completing.get(&id)
    }

    /// How many ranks of `id` have not been reported gone yet.
    pub fn completing_ranks(&self, id: JobId) -> usize {
        self.after.completing.get(&id).map_or(0, |c| c.ranks.len())
    }

    /// Every completing job, by id.
    pub fn all_completing(&self) -> &Completing {
        &self.after.completing
    }

    /// The job still holds a share of a node: it runs (or stops), or is completing. A
    /// preemptor waits for such a victim.
    pub fn still_holds(&self, id: JobId) -> bool {
        self.after.completing.contains_key(&id) || self.d.jobs.get(&id).is_some_and(|j| j.state.is_active())
    }

    /// What `baton list` and `describe` say of a completing job.
    pub fn completing_reason(&self, id: JobId) -> Option<String> {
        let c = self.after.completing.get(&id)?;
        let n = c.ranks.len();
        let mut nodes: Vec<&str> = c.ranks.values().map(|r| r.node.as_str()).collect();
        nodes.dedup();
        let ranks = if n == 1 { "rank" } else { "ranks" };
        Some(format!("completing: waiting for {n} {ranks} of attempt {} to stop (on {})", c.attempt, nodes.join(", ")))
    }

    /// `JobExited` (a whole-job report of the agent era): every rank is gone.
    pub(super) fn whole_job_exited(
        &mut self,
        id: JobId,
        attempt: u32,
        code: i32,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        self.check_attempt(id, attempt)?;
        self.check_active(id, "exiting")?;
        self.note_all_gone(id);
        self.exited(id, attempt, code, ev)
    }

    /// `JobStopped` (a whole-job report of the agent era): every rank is gone.
    pub(super) fn whole_job_stopped(
        &mut self,
        id: JobId,
        attempt: u32,
        checkpointed: bool,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        self.check_attempt(id, attempt)?;
        self.check_stopping(id)?;
        self.note_all_gone(id);
        self.stopped(id, attempt, checkpointed, ev)
    }

    /// Called as the job's attempt ends in the model, before its shares are vacated: the
    /// ranks not recorded as ended become completing. Returns whether any did.
    pub(super) fn begin_completing(&mut self, id: JobId) -> bool {
        let job = &self.d.jobs[&id];
        let ranks: BTreeMap<u32, ReplicaAlloc> = job
            .ranked()
            .into_iter()
            .enumerate()
            .map(|(rank, r)| (rank as u32, r.clone()))
            .filter(|(rank, _)| !job.ended_ranks.contains_key(rank))
            .collect();
        if ranks.is_empty() {
            return false;
        }
        let c = CompletingRanks { attempt: job.attempt, since_ms: self.d.now_ms, ranks };
        self.after.completing.insert(id, c);
        true
    }

    /// Charges the completing ranks of `id` to their nodes (its other shares are vacated).
    pub(super) fn charge_completing(&mut self, id: JobId) {
        let Some(c) = self.after.completing.get(&id) else { return };
        let job = &self.d.jobs[&id];
        let replicas: Vec<ReplicaAlloc> = c.ranks.values().cloned().collect();
        let shares = self.shares(job, &replicas);
        let (q, np) = self.queue_and_np(job);
        let suspends = self.suspends(job);
        self.ledger.occupy(id, q, np, suspends, &shares);
        self.ledger.set_leaving(id, true);
    }

    /// A job suspended in place lent its share to the job that preempted it, which runs on
    /// it (`lends`, read before its shares were vacated). Its ranks still being stopped (it
    /// was cancelled, or requeued when another of its nodes was lost) are stopped processes
    /// until they are gone: each goes on lending its part, and holds only the rest; counted
    /// whole, the lent part would be charged to its node twice. A lend whose rank is gone
    /// ends, and the borrower's record of it too, so that a rebuild agrees.
    pub(super) fn keep_lends(&mut self, id: JobId, lends: &[(usize, JobId, crate::ledger::Vector, u64)]) {
        for &(n, borrower, amount, gpus) in lends {
            let name = self.ledger.nodes[n].name.clone();
            if self.completing_on(id, &name) {
                self.ledger.keep_lend(n, id, borrower, amount, gpus);
            } else if let Some(b) = self.d.jobs.get_mut(&borrower) {
                b.lent_from.retain(|l| !(l.from == id && l.node == name));
            }
        }
    }

    /// A job that ran on what jobs suspended for it lent it, and has ended: its ranks still
    /// being stopped run on that part until they are gone, so the lenders stay suspended
    /// and go on lending it there (the borrower keeps its record of those lends). Once none
    /// of its ranks is left, the lenders are free to resume in place. Resuming them at once
    /// ran both on the lent part (a property test: a cancelled preemptor's victim resumed
    /// beside the preemptor's ranks still being stopped).
    pub(super) fn keep_borrowed(&mut self, id: JobId) {
        let nodes: Vec<Name> = match self.after.completing.get(&id) {
            Some(c) => c.ranks.values().map(|r| r.node.clone()).collect(),
            None => Vec::new(),
        };
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        job.lent_from.retain(|l| nodes.contains(&l.node));
        if nodes.is_empty() {
            self.release_suspended_for(id);
            return;
        }
        if self.behaviour >= crate::behaviour::LENDS_FOLLOW_RANKS {
            self.cap_borrowed(id);
        }
        for lend in self.d.jobs[&id].lent_from.clone() {
            self.restore_lend(id, &lend);
        }
    }

    /// Behaviour 5: what `id`'s ranks still being stopped borrow on a node is at most what
    /// they hold there, lend by lend in the order they were recorded. A gang's lend kept
    /// whole for the one rank left let the lender count as lent what no rank ran on any
    /// more, and that part was given to another job as well: a node over-allocated once
    /// the rank was gone (simulator seed 2 of 10 minutes, stop 76: a preemptor's rank 0
    /// crashed, its rank 1 on the lent CPUs was being stopped).
    fn cap_borrowed(&mut self, id: JobId) {
        let mut left: BTreeMap<Name, (Vector, u64)> = BTreeMap::new();
        for lend in &self.d.jobs[&id].lent_from {
            let held = self.ledger.node(lend.node.as_str()).and_then(|n| self.ledger.nodes[n].occupant(id));
            left.entry(lend.node.clone()).or_insert_with(|| held.map_or((ZERO, 0), |o| (o.amount, o.gpus)));
        }
        let kinds = &self.ledger.kinds;
        let job = self.d.jobs.get_mut(&id).expect("job exists");
        let mut kept = Vec::new();
        for lend in std::mem::take(&mut job.lent_from) {
            let (amount, gpus) = left.get_mut(&lend.node).expect("every lend's node is counted above");
            let whole = kinds.vector_lossy(&lend.resources);
            let part = min(&whole, amount);
            let part_gpus = gpu_mask(&lend.gpus) & *gpus;
            sub(amount, &part);
            *gpus &= !part_gpus;
            if part == whole && part_gpus == gpu_mask(&lend.gpus) {
                kept.push(lend);
            } else if part != ZERO || part_gpus != 0 {
                kept.push(Lend { resources: kinds.resources(&part), gpus: mask_to_gpus(part_gpus), ..lend });
            }
        }
        job.lent_from = kept;
    }

    /// Behaviour 5, before `id` gives up shares: what it borrowed on a node and lent on,
    /// suspended there, to a borrower (`lends`: its lends, read before its shares were
    /// vacated), as lends of the first lender to that borrower.
    pub(super) fn passed_on(&self, id: JobId, lends: &[(usize, JobId, Vector, u64)]) -> Vec<(JobId, Lend)> {
        if self.behaviour < crate::behaviour::LENDS_FOLLOW_RANKS {
            return Vec::new();
        }
        let Some(job) = self.d.jobs.get(&id) else { return Vec::new() };
        let mut out = Vec::new();
        for &(n, borrower, amount, gpus) in lends {
            let node = &self.ledger.nodes[n].name;
            for l in job.lent_from.iter().filter(|l| l.node == *node) {
                let part = min(&amount, &self.ledger.kinds.vector_lossy(&l.resources));
                let part_gpus = gpus & gpu_mask(&l.gpus);
                if part == ZERO && part_gpus == 0 {
                    continue;
                }
                let resources = self.ledger.kinds.resources(&part);
                let lend = Lend { from: l.from, node: node.clone(), resources, gpus: mask_to_gpus(part_gpus) };
                out.push((borrower, lend));
            }
        }
        out
    }

    /// Behaviour 5, after `id` gave up shares: where it holds nothing any more, what it had
    /// borrowed and lent on (`passed_on`) is lent by the first lender to the borrower
    /// directly, while the borrower still runs there and the lender still holds its share.
    /// Without it the first lender counted its share whole again while the borrower still
    /// ran on it: a node over-allocated (simulator seed 26 of 10 minutes, stop 76: a job
    /// suspended on what another suspended job had lent it, and its preemptor, both
    /// requeued when a node was lost; the middle one's rank stopped first).
    pub(super) fn pass_on(&mut self, id: JobId, passed: Vec<(JobId, Lend)>) {
        for (borrower, lend) in passed {
            let free = self.ledger.node(lend.node.as_str()).is_some_and(|n| {
                self.ledger.nodes[n].occupant(lend.from).is_some_and(|o| o.lent_to.is_none_or(|b| b == borrower))
            });
            let on = |j: JobId| self.holds_on(j, &lend.node);
            if !free || on(id) || !on(borrower) || !on(lend.from) {
                continue;
            }
            let Some(b) = self.d.jobs.get_mut(&borrower) else { continue };
            if b.lent_from.iter().any(|x| x.from == lend.from && x.node == lend.node) {
                continue;
            }
            b.lent_from.push(lend.clone());
            self.restore_lend(borrower, &lend);
            self.suspend_for_borrower(lend.from, borrower);
        }
    }

    /// Behaviour 6: a lender whose lend was passed on (`pass_on`) is suspended for its new
    /// borrower, as it was for the job in the middle, so that it resumes only once the
    /// borrower is gone. Under behaviour 5 the middle job's end released it, and a cycle
    /// resumed it beside the borrower, which still ran on its share (simulator seed 36 of 10
    /// minutes, stop 78: a rebuilt ledger parted from the incremental one).
    fn suspend_for_borrower(&mut self, lender: JobId, borrower: JobId) {
        if self.behaviour < crate::behaviour::PASSED_LENDS_HOLD {
            return;
        }
        let Some(l) = self.d.jobs.get_mut(&lender).filter(|l| l.state == JobState::Suspended) else { return };
        l.suspended_for = Some(borrower);
        let b = self.d.jobs.get_mut(&borrower).expect("the borrower exists");
        if !b.suspended_victims.contains(&lender) {
            b.suspended_victims.push(lender);
        }
    }

    /// `id` holds a share of `node`: it runs or is suspended there, or a rank of it not yet
    /// reported gone is there.
    fn holds_on(&self, id: JobId, node: &Name) -> bool {
        let placed = |j: &crate::job::Job| {
            (j.state.is_active() || j.state == JobState::Suspended) && j.replicas.iter().any(|r| r.node == *node)
        };
        self.completing_on(id, node) || self.d.jobs.get(&id).is_some_and(placed)
    }

    /// Rank `rank` of attempt `attempt` of `id` is completing on `node`.
    pub(super) fn completing_rank_on(&self, node: &Name, id: JobId, attempt: u32, rank: u32) -> bool {
        self.after
            .completing
            .get(&id)
            .is_some_and(|c| c.attempt == attempt && c.ranks.get(&rank).is_some_and(|r| r.node == *node))
    }

    /// A rank of `id` not yet reported gone is on `node`.
    fn completing_on(&self, id: JobId, node: &Name) -> bool {
        self.after.completing.get(&id).is_some_and(|c| c.ranks.values().any(|r| r.node == *node))
    }

    /// Records in the ledger what `lend` lent borrower `id`: a suspended lender's held share
    /// lends it, and so does a lender's share held by its ranks still being stopped
    /// (`keep_lends`). The incremental path and a rebuild both go through here.
    pub(super) fn restore_lend(&mut self, id: JobId, lend: &crate::alloc::Lend) {
        let Some(n) = self.ledger.node(lend.node.as_str()) else { return };
        let amount = self.ledger.kinds.vector_lossy(&lend.resources);
        let gpus = crate::alloc::gpu_mask(&lend.gpus);
        if self.completing_on(lend.from, &lend.node) {
            self.ledger.keep_lend(n, lend.from, id, amount, gpus);
        } else {
            self.ledger.set_lend(n, lend.from, id, amount, gpus);
        }
    }

    /// If `o` reports a completing rank gone (from the node it was placed on, for its
    /// attempt), releases it: `Some(Ok)`. `Some(Err)`: it names a completing job's rank but
    /// not as placed. `None`: not about a completing job; the caller goes on.
    pub(super) fn observe_completing(&mut self, node: &Name, o: &Observed) -> Option<Result<(), ApplyError>> {
        let (job, attempt, rank) = match *o {
            Observed::Exited { job, attempt, rank, .. }
            | Observed::Stopped { job, attempt, rank, .. }
            | Observed::Vanished { job, attempt, rank, .. }
            | Observed::LeaseExpired { job, attempt, rank, .. }
            | Observed::NotStarted { job, attempt, rank, .. }
            | Observed::LeaseStopped { job, attempt, rank, .. }
            | Observed::KilledHere { job, attempt, rank, .. }
            | Observed::Unrecorded { job, attempt, rank, .. }
            | Observed::Unkillable { job, attempt, rank, .. } => (job, attempt, rank),
            // A rank suspended in place is not gone: its STOP's answer releases it.
            Observed::Checkpointed { .. }
            | Observed::RankCheckpointed { .. }
            | Observed::Stray { .. }
            | Observed::Suspended { .. } => return None,
        };
        let c = self.after.completing.get(&job)?;
        if c.attempt != attempt {
            return Some(Err(ApplyError::StaleAttempt { job, attempt, current: c.attempt }));
        }
        if c.ranks.get(&rank).is_none_or(|r| r.node != *node) {
            let what = format!("rank {rank}");
            return Some(Err(ApplyError::NotPlaced { job, attempt, what, node: node.to_string() }));
        }
        self.rank_gone(job, |r, placed| r == rank && placed.node == *node);
        Some(Ok(()))
    }

    /// The node is lost: nothing of it runs any more, its completing ranks are gone.
    pub(super) fn lose_completing_on(&mut self, node: &Name) {
        let jobs: Vec<JobId> = self
            .after
            .completing
            .iter()
            .filter(|(_, c)| c.ranks.values().any(|r| r.node == *node))
            .map(|(id, _)| *id)
            .collect();
        for id in jobs {
            self.rank_gone(id, |_, placed| placed.node == *node);
        }
    }

    /// Drops the ranks of `id` that `gone` picks and charges the rest; once none is left the
    /// job no longer stands in its preemptor's way, and may be pruned if it has finished.
    fn rank_gone(&mut self, id: JobId, gone: impl Fn(u32, &ReplicaAlloc) -> bool) {
        let Some(c) = self.after.completing.get_mut(&id) else { return };
        c.ranks.retain(|&rank, placed| !gone(rank, placed));
        let empty = c.ranks.is_empty();
        let lends = self.ledger.lent_by_to_running(id);
        let passed = self.passed_on(id, &lends);
        self.ledger.vacate(id);
        if !empty {
            self.charge_completing(id);
        }
        self.keep_lends(id, &lends);
        if empty {
            self.after.completing.remove(&id);
        }
        self.keep_borrowed(id);
        self.pass_on(id, passed);
        if !empty {
            return;
        }
        self.forget_victim(id);
        self.prune_finished();
    }
}

impl State {
    /// Remembers where the job's attempt ran as it ends (`release`), for a late report of
    /// the checkpoint its stop wrote; the ranks already known to have saved their work count.
    /// One attempt per job is remembered: this one, unless every rank's end is known (each
    /// reported it, none is completing or was on a lost node) while an older attempt still
    /// waits for a late save (a lost attempt's save reported after the next attempt was
    /// preempted: `tests/suite/completing.rs`,
    /// `an_older_attempts_save_reported_after_a_newer_attempt_stopped_gives_the_next_its_checkpoint`).
    /// A later report can change nothing of this one then.
    pub(super) fn remember_placement(&mut self, id: JobId) {
        let job = &self.d.jobs[&id];
        if job.replicas.is_empty() {
            return;
        }
        let ranks: BTreeMap<u32, Name> =
            job.ranked().into_iter().enumerate().map(|(rank, r)| (rank as u32, r.node.clone())).collect();
        let lost = |node: &Name| self.d.nodes.get(node).is_none_or(|n| n.status == crate::node::NodeStatus::Lost);
        let known = ranks.iter().all(|(rank, node)| job.ended_ranks.contains_key(rank) && !lost(node));
        let older_waits = self.after.last_placed.get(&id).is_some_and(|lp| lp.attempt < job.attempt && !lp.complete());
        if known && older_waits {
            return;
        }
        let saved = job.ended_ranks.iter().filter(|(_, saved)| **saved).map(|(rank, _)| *rank).collect();
        self.after.last_placed.insert(id, LastPlaced { attempt: job.attempt, ranks, saved });
    }

    /// The job has finished: a late report of an older stop changes nothing.
    pub(super) fn forget_placement(&mut self, id: JobId) {
        self.after.last_placed.remove(&id);
    }

    /// The job starts again: the attempt remembered is kept while some of its ranks may
    /// still be reported to have saved their work (the next attempts resume from it).
    pub(super) fn keep_placement_while_waiting(&mut self, id: JobId) {
        if self.after.last_placed.get(&id).is_some_and(LastPlaced::complete) {
            self.forget_placement(id);
        }
    }

    /// Rank 0 of the attempt remembered exited 0, reported late: its agent was stalled or
    /// cut off while it ran to its end, and the job was requeued meanwhile, perhaps placed
    /// again. The job's work is done: it ends Succeeded, as rank 0's exit ends a job, and a
    /// newer attempt's ranks are told to stop and stay completing until reported gone, as
    /// for a cancel (else the job runs again from zero: `tests/suite/completing.rs`,
    /// `a_late_exit_0_of_rank_0_of_the_remembered_attempt_ends_the_job_succeeded`). Only from
    /// the node rank 0 ran on, while the job has not finished. A late failure changes
    /// nothing: the job is being retried. Returns whether the report was such a one.
    pub(super) fn late_exit(&mut self, node: &Name, o: &Observed, ev: &mut Vec<Event>) -> bool {
        let Observed::Exited { job, attempt, rank: 0, exit_code: 0 } = *o else { return false };
        let Some(j) = self.d.jobs.get(&job) else { return false };
        let remembered =
            self.after.last_placed.get(&job).is_some_and(|lp| lp.attempt == attempt && lp.ranks.get(&0) == Some(node));
        if j.state.is_finished() || !remembered {
            return false;
        }
        self.finish(job, crate::job::JobState::Succeeded, Some(0));
        let message = format!("attempt {attempt}'s rank 0 exited 0 (reported late, by node {node}): its work is done");
        self.job_event(job, crate::event::EventKind::Succeeded, message, ev);
        true
    }

    /// A stop that saved its work, reported late: an agent cut off for longer than the
    /// heartbeat timeout reports its lease stop once it is back, after its node was declared
    /// lost and the job requeued, perhaps after a newer attempt started. It counts for the
    /// attempt remembered (`remember_placement`), from the node that rank ran on, while the
    /// job has not finished. Once every rank of that attempt has saved its work, the
    /// attempts after it resume from it (not in mode requeue, which starts over): every rank
    /// holds that checkpoint or a newer one a later attempt wrote, the rule a gang resumes
    /// by. An attempt that runs is not changed (it was started as it was). Returns whether
    /// the report was such a one.
    pub(super) fn late_checkpoint(&mut self, node: &Name, o: &Observed, ev: &mut Vec<Event>) -> bool {
        let (job, attempt, rank) = match *o {
            Observed::Stopped { job, attempt, rank, checkpointed: true }
            | Observed::LeaseExpired { job, attempt, rank, checkpointed: true }
            | Observed::LeaseStopped { job, attempt, rank, rank_saved: true, .. } => (job, attempt, rank),
            _ => return false,
        };
        let Some(j) = self.d.jobs.get(&job) else { return false };
        let remembered = !j.state.is_finished() && j.attempt >= attempt;
        let Some(lp) = self.after.last_placed.get_mut(&job).filter(|lp| remembered && lp.attempt == attempt) else {
            return false;
        };
        if lp.ranks.get(&rank) != Some(node) {
            return false;
        }
        lp.saved.insert(rank);
        let all = lp.complete();
        let resumable = j.spec.preemption_mode != crate::job::PreemptionMode::Requeue;
        if all && resumable && !j.has_checkpoint {
            let now = self.d.now_ms;
            let j = self.d.jobs.get_mut(&job).expect("checked");
            j.has_checkpoint = true;
            j.progress_mark_ms = now;
            let message = format!(
                "attempt {attempt}'s stop saved its work (reported late, by node {node}): the attempts after it resume from it"
            );
            self.job_event(job, crate::event::EventKind::Stopped { checkpointed: true }, message, ev);
        }
        true
    }
}
