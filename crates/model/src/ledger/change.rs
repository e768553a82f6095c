//! What a scheduling decision does to the ledger, written once. `State::apply` performs
//! these when it applies a plan, and the scheduler performs the same on its working copy
//! (`sched`'s `View`) while it decides, so the cycle's picture of the cluster and the
//! state it will meet cannot drift apart. The lower-level operations (`ops.rs`) are what
//! these are made of; a caller that means "a job starts" or "a job preempts" calls these.
//!
//! Also here: the scoped "as if these jobs had stopped" that preemption and the plan
//! checker ask, which puts the ledger back exactly when the question is answered.

use super::{JobCharge, Ledger, Occupant, Share, Vector, ZERO, fits, min, sub};

/// Adds `amount` to pool `pool`'s entry of a per-pool list.
fn add_to_pool(list: &mut Vec<(usize, Vector)>, pool: usize, amount: &Vector) {
    match list.iter_mut().find(|(p, _)| *p == pool) {
        Some((_, v)) => super::add(v, amount),
        None => list.push((pool, *amount)),
    }
}
use crate::job::JobId;

impl Ledger {
    /// Job `job` of queue `queue` starts on `shares` (one per node). A preemptor that had
    /// resources reserved gives the reservation up first, keeping what its suspended victims
    /// lend it: it runs on those shares now.
    ///
    /// Never over-allocates: the caller has made sure the job fits, and the ledger's
    /// arithmetic saturates at zero, so a start that did not fit would go unseen. Checked in
    /// every build: a replica that acted on it would run two jobs on one GPU.
    /// `suspends`: a preemption suspends it in place, and it would keep all but its CPUs.
    pub fn place(&mut self, job: JobId, queue: usize, not_preemptible: bool, suspends: bool, shares: &[Share]) {
        self.give_up_reservation(job);
        self.assert_room(job, shares);
        self.occupy(job, queue, not_preemptible, suspends, shares);
    }

    /// A preemptor that starts gives up the reservation held for it, keeping what its
    /// suspended victims lend it (it is about to run on those shares). Nothing when it holds
    /// none. The first step of `place`; the scheduler also takes it alone when a job starts
    /// beside a reservation the cycle still blocks.
    pub fn give_up_reservation(&mut self, job: JobId) {
        if self.charges.get(&job).is_some_and(|c| c.reserved) {
            self.unreserve(job, true);
        }
    }

    /// The scheduler's view only: the part `part` of running job `job`'s occupancy (within
    /// what it occupies) is held by `to` from now on, as a job of its own of the same queue:
    /// an elastic gang's replicas above its minimum, a preemption candidate apart from the
    /// rest of the gang (decisions.md section 13). No queue's usage and no node's free
    /// resources change. `job`'s own charge is left as it was (a preemption plan splits
    /// every candidate gang, thousands on a busy cluster, and unsharing their charges cost
    /// more than the plan): what it stands for alone is its charge less `to`'s
    /// (`charged_usage`). Undone by `merge_into`, before anything but taking it out of the
    /// usage for a while (`remove`) is done to either part.
    pub fn split_off(&mut self, job: JobId, to: JobId, part: &[Share]) {
        let Some(ch) = self.charges.get(&job) else { return };
        debug_assert!(!ch.leaving && !ch.reserved, "only a running job's occupancy is split");
        let (queue, not_preemptible) = (ch.queue, ch.not_preemptible);
        let mut moved: Vec<(usize, Vector)> = Vec::new();
        for Share { node: n, amount, gpus, fractions } in part {
            let (n, amount, gpus) = (*n, *amount, *gpus);
            let node = &mut self.nodes[n];
            let Some(o) = node.occupants.iter_mut().find(|o| o.job == job) else { continue };
            debug_assert!(fits(&amount, &o.amount) && gpus & !o.gpus == 0, "a split takes only what the job holds");
            sub(&mut o.amount, &amount);
            o.gpus &= !gpus;
            o.fractions.remove(fractions);
            // The part keeps what the whole keeps of it: all but CPUs for a job that
            // suspends, nothing otherwise.
            let keeps = if o.keeps == ZERO { ZERO } else { min(&o.keeps, &amount) };
            sub(&mut o.keeps, &keeps);
            if o.amount == ZERO && o.gpus == 0 && o.fractions.is_empty() {
                node.occupants.retain(|o| o.job != job);
            }
            let (held, lent_to, lent_amount, lent_gpus) = (false, None, ZERO, 0);
            let fractions = fractions.clone();
            let o = Occupant { job: to, amount, gpus, keeps, held, lent_to, lent_amount, lent_gpus, fractions };
            node.occupants.push(o);
            add_to_pool(&mut moved, node.pool, &amount);
        }
        let nodes = part.iter().map(|s| s.node).collect();
        let mut charge =
            Some(JobCharge { queue, not_preemptible, usage: moved, nodes, reserved: false, leaving: false });
        let slot = self.charges.get_or_insert_with(to, || charge.take().expect("made once"));
        if let Some(c) = charge {
            *slot = c;
        }
        self.split_parts.insert(job, to);
    }

    /// Undoes `split_off`: what `from` holds is `into`'s again.
    pub fn merge_into(&mut self, from: JobId, into: JobId) {
        let Some(ch) = self.charges.remove(&from) else { return };
        debug_assert!(!ch.leaving, "a split part merges back before either part leaves");
        self.split_parts.remove(&into);
        for &n in &ch.nodes {
            let node = &mut self.nodes[n];
            let Some(pos) = node.occupants.iter().position(|o| o.job == from) else { continue };
            let o = node.occupants.remove(pos);
            match node.occupants.iter_mut().find(|x| x.job == into) {
                Some(x) => {
                    super::add(&mut x.amount, &o.amount);
                    super::add(&mut x.keeps, &o.keeps);
                    x.gpus |= o.gpus;
                    // Without them the gang's fractions of a shared GPU that the part held
                    // were lost: the scheduler saw room there that was not, and `apply`
                    // refused its placements (`tests::a_split_part_merged_back_gives_its_fractions_back`).
                    x.fractions.merge(&o.fractions);
                }
                None => node.occupants.push(Occupant { job: into, ..o }),
            }
        }
    }

    /// The usage job `job` stands for alone, per pool: its charge's, less a part split off
    /// it (`split_off`).
    pub fn charged_usage(&self, job: JobId) -> Vec<(usize, Vector)> {
        let Some(ch) = self.charges.get(&job) else { return Vec::new() };
        let mut usage = ch.usage.clone();
        if let Some(part) = self.split_parts.get(&job) {
            for (p, v) in self.charges.get(part).map(|c| c.usage.as_slice()).unwrap_or_default() {
                if let Some((_, u)) = usage.iter_mut().find(|(up, _)| up == p) {
                    sub(u, v);
                }
            }
        }
        usage
    }

    /// A running job begins to stop (its time limit, a pause, a node's drain): it leaves its
    /// queue's usage at once, while its nodes stay taken until it has really stopped.
    ///
    /// Outside `model` these changes are the only way to change the ledger:
    ///
    /// ```
    /// let mut ledger = baton_model::ledger::Ledger::default();
    /// ledger.begin_stop(7);
    /// ledger.resume_in_place(7);
    /// ledger.give_up_reservation(7);
    /// ```
    ///
    /// and the steps they are made of cannot be called from there:
    ///
    /// ```compile_fail
    /// let mut ledger = baton_model::ledger::Ledger::default();
    /// ledger.set_leaving(7, true);
    /// ```
    pub fn begin_stop(&mut self, job: JobId) {
        self.set_leaving(job, true);
    }

    /// A job suspended in place runs again on its own shares (its preemptor is gone).
    pub fn resume_in_place(&mut self, job: JobId) {
        self.unhold(job);
    }

    /// Job `job` of queue `queue` preempts `victims` for `shares`: the shares are reserved
    /// for it (charged to its queue) while the victims stop; the victims stop being charged
    /// (their nodes stay blocked until they have really stopped); a victim that `suspends`
    /// in place lends its reserved part to the preemptor at once.
    pub fn preempt(
        &mut self,
        job: JobId,
        queue: usize,
        not_preemptible: bool,
        shares: &[Share],
        victims: &[JobId],
        suspends: impl Fn(JobId) -> bool,
    ) {
        for &v in victims {
            self.set_leaving(v, true);
        }
        self.reserve(job, queue, not_preemptible, shares, victims);
        let suspending: Vec<JobId> = victims.iter().copied().filter(|&v| suspends(v)).collect();
        self.lend_for_reservation(job, &suspending);
    }

    /// The first of `shares` that job `job` could not start on now (its own reservation and
    /// what is lent to it count as its own), by index into `shares`: what `place` asserts
    /// never happens. The scheduler asks it of a preemptor whose victims have all stopped,
    /// since something other than its victims can still hold the reserved room (a suspended
    /// victim's rank left completing when its job was requeued).
    pub fn lacks_room(&self, job: JobId, shares: &[Share]) -> Option<usize> {
        shares.iter().position(|s| !self.nodes[s.node].admits(Some(job), &[], s))
    }

    fn assert_room(&self, job: JobId, shares: &[Share]) {
        if let Some(i) = self.lacks_room(job, shares) {
            let Share { node: n, amount, gpus, fractions } = &shares[i];
            let node = &self.nodes[*n];
            let (free, free_gpus) = node.free_for(Some(job), &[]);
            panic!(
                "job {job} would over-allocate node {}: needs {amount:?} GPUs {gpus:#x} fractions {fractions:?}, free \
                 {free:?} GPUs {free_gpus:#x}",
                node.name
            );
        }
    }
}

/// Jobs whose queue usage is out of the ledger for a hypothetical ("as if they had
/// stopped"), each able to go back on its own: for a search that takes victims and gives
/// some back. Only usage moves: the jobs' nodes are untouched (a caller asks the nodes with
/// the jobs named as removed). Every removal must be put back (`Ledger::put_back_all`);
/// debug builds check that none is dropped.
#[derive(Debug, Default)]
pub struct Removed {
    /// Per job, in the order taken: what came out of its queue's usage, per pool.
    taken: Vec<(JobId, Vec<Taken>)>,
}

/// One pool's usage taken out of a queue.
#[derive(Debug, Clone, Copy)]
struct Taken {
    queue: usize,
    pool: usize,
    amount: Vector,
    not_preemptible: bool,
}

impl Removed {
    pub fn contains(&self, job: JobId) -> bool {
        self.taken.iter().any(|(j, _)| *j == job)
    }
}

impl Drop for Removed {
    fn drop(&mut self) {
        debug_assert!(
            self.taken.is_empty() || std::thread::panicking(),
            "{} jobs' queue usage was taken out of the ledger and never put back",
            self.taken.len()
        );
    }
}

impl Ledger {
    /// Takes `job`'s queue usage out of the ledger, as if it had stopped, into `removed`.
    pub fn remove(&mut self, removed: &mut Removed, job: JobId) {
        debug_assert!(!removed.contains(job), "job {job} removed twice: its usage would be taken out twice");
        let mut entries = Vec::new();
        if let Some(ch) = self.charges.get(&job) {
            let (queue, np) = (ch.queue, ch.not_preemptible);
            for (p, v) in self.charged_usage(job) {
                self.adjust_usage(queue, p, &v, np, false);
                entries.push(Taken { queue, pool: p, amount: v, not_preemptible: np });
            }
        }
        removed.taken.push((job, entries));
    }

    /// Takes part of job `job`'s usage (`usage`, per pool, within what it is charged) out of
    /// its queue's, as if that part had stopped: a gang shrinking to its minimum. Put back
    /// like a whole job's (`put_back`, `put_back_all`).
    pub fn remove_part(&mut self, removed: &mut Removed, job: JobId, usage: &[(usize, Vector)]) {
        debug_assert!(!removed.contains(job), "job {job} removed twice: its usage would be taken out twice");
        let mut entries = Vec::new();
        if let Some(ch) = self.charges.get(&job).cloned() {
            for (p, v) in usage {
                debug_assert!(ch.usage.iter().any(|(cp, cv)| cp == p && fits(v, cv)), "a part within the charge");
                self.adjust_usage(ch.queue, *p, v, ch.not_preemptible, false);
                entries.push(Taken { queue: ch.queue, pool: *p, amount: *v, not_preemptible: ch.not_preemptible });
            }
        }
        removed.taken.push((job, entries));
    }

    /// Puts one removed job's usage back. Nothing happens if it was not removed.
    pub fn put_back(&mut self, removed: &mut Removed, job: JobId) {
        if let Some(i) = removed.taken.iter().position(|(j, _)| *j == job) {
            let (_, entries) = removed.taken.remove(i);
            self.add_back(entries);
        }
    }

    /// Puts every removed job's usage back, the last removed first.
    pub fn put_back_all(&mut self, mut removed: Removed) {
        for (_, entries) in std::mem::take(&mut removed.taken).into_iter().rev() {
            self.add_back(entries);
        }
    }

    fn add_back(&mut self, entries: Vec<Taken>) {
        for t in entries.into_iter().rev() {
            self.adjust_usage(t.queue, t.pool, &t.amount, t.not_preemptible, true);
        }
    }

    /// Runs `f` on the ledger as if `jobs` had stopped (their queue usage gone), then puts
    /// their usage back exactly: the scoped form of "remove, check, put back", so no caller
    /// can forget to put back. Debug builds check that the usage is as it was.
    pub fn without<R>(&mut self, jobs: impl IntoIterator<Item = JobId>, f: impl FnOnce(&mut Ledger) -> R) -> R {
        #[cfg(debug_assertions)]
        let before = self.usage_parts();
        let mut removed = Removed::default();
        for job in jobs {
            self.remove(&mut removed, job);
        }
        let r = f(self);
        self.put_back_all(removed);
        #[cfg(debug_assertions)]
        debug_assert!(self.usage_parts() == before, "usage not put back exactly after a scoped removal");
        r
    }

    /// Everything queue usage feeds: per queue, per tree, and each pool's unowned draw.
    /// The queue table is copy-on-write, so the copy shares it until it changes.
    pub fn usage_parts(&self) -> (super::CowVec<super::QueueAcct>, Vec<super::TreeAcct>, Vec<Vector>) {
        (self.queues.clone(), self.trees.clone(), self.pools.iter().map(|p| p.unowned_draw).collect())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::alloc::ReplicaAlloc;
    use crate::command::{Command, Op, Outcome};
    use crate::fixture::{gpu_job, gpu_node};
    use crate::ledger::{GPU_KIND, gpus_milli};
    use crate::name::Name;
    use crate::plan::{Decision, Plan};
    use crate::queue::{Cohort, QueueSpec};
    use crate::state::State;

    fn apply(s: &mut State, op: Op) -> Outcome {
        s.apply(Command { now_ms: 1_000, op }).unwrap_or_else(|e| panic!("refused: {e}")).outcome
    }

    /// Queues `q0..` in one cohort with the given nominal GPUs, on `nodes` nodes of 8 GPUs;
    /// each job (queue, GPUs) is submitted and placed on the first node with room, unless
    /// its queue may not take it (then it stays pending). Returns the running jobs.
    fn cluster(nominal: &[u64], nodes: usize, jobs: &[(usize, u64)]) -> (State, Vec<JobId>) {
        let mut s = State::default();
        apply(&mut s, Op::RegisterNodes((0..nodes).map(|i| gpu_node(&format!("n{i}"), 8)).collect()));
        apply(&mut s, Op::PutCohort(Cohort { name: Name::lit("c"), parent: None, fair_sharing: false }));
        for (i, &gpus) in nominal.iter().enumerate() {
            let q = QueueSpec { cohort: Some(Name::lit("c")), ..crate::fixture::gpu_queue(&format!("q{i}"), gpus) };
            apply(&mut s, Op::PutQueue(q));
        }
        let mut running = Vec::new();
        for (i, &(queue, gpus)) in jobs.iter().enumerate() {
            let spec = gpu_job(&format!("j{i}"), &format!("q{}", queue % nominal.len()), gpus);
            let Outcome::Submitted { job, .. } = apply(&mut s, Op::Submit { spec, request_id: None }) else {
                panic!("not submitted")
            };
            let l = s.ledger();
            let Some(n) = (0..l.nodes.len()).find(|&n| l.nodes[n].free_gpu_count() as u64 >= gpus) else {
                continue;
            };
            let mask = l.nodes[n].free_gpus;
            let free: Vec<u32> = (0..64).filter(|g| mask & (1 << g) != 0).take(gpus as usize).collect();
            let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: l.nodes[n].name.clone(), gpus: free }];
            let place = Decision::Place { job, attempt: 1, replicas };
            let plan = Plan { based_on: s.applied(), decisions: vec![place] };
            if let Outcome::PlanApplied { accepted: 1, .. } = apply(&mut s, Op::ApplyPlan(plan)) {
                running.push(job);
            }
        }
        (s, running)
    }

    /// The ledger as it would be if `jobs` were stopping: no longer charged to their queues.
    fn leaving(l: &Ledger, jobs: &[JobId]) -> Ledger {
        let mut l = l.clone();
        for &j in jobs {
            l.set_leaving(j, true);
        }
        l
    }

    #[test]
    fn a_preemptor_is_charged_its_reservation_and_its_victims_are_not_until_it_is_placed() {
        let (s, running) = cluster(&[8, 8], 1, &[(0, 8)]);
        let mut l = s.ledger().clone();
        let (victim, preemptor) = (running[0], 99);
        let (q0, q1) = (l.queue("q0").unwrap(), l.queue("q1").unwrap());
        let shares: Vec<Share> = vec![Share::new(0, l.nodes[0].capacity, 0xff)];
        l.preempt(preemptor, q1, false, &shares, &[victim], |_| false);
        assert_eq!((l.queues[q0].usage[0][GPU_KIND], l.queues[q1].usage[0][GPU_KIND]), (0, gpus_milli(8)));
        assert_eq!(l.nodes[0].free_for(Some(preemptor), &[]).1, 0, "the victim still runs there");
        l.vacate(victim);
        assert_eq!(
            l.nodes[0].free_for(Some(preemptor), &[]).1,
            0xff,
            "reserved for the preemptor once the victim is gone"
        );
        assert_eq!(l.nodes[0].free_for(Some(7), &[]).1, 0, "and for nobody else");
        l.place(preemptor, q1, false, false, &shares);
        assert!(l.nodes[0].reservations.is_empty(), "the reservation became its occupancy");
        assert!(!l.charges.get(&preemptor).unwrap().reserved);
        assert_eq!((l.queues[q0].usage[0][GPU_KIND], l.queues[q1].usage[0][GPU_KIND]), (0, gpus_milli(8)));
    }

    /// An elastic gang's replicas above its minimum are split off while a preemption is
    /// planned (`split_off`) and merged back after (`merge_into`). A gang of two quarter-GPU
    /// replicas on GPU 0 got only one quarter back: the scheduler then saw half of GPU 0 free
    /// where a quarter was, placed a fraction there, and `apply` refused it at every cycle
    /// (the simulator's check of plans applied to their own state, seed 10 of 10 minutes:
    /// `it no longer fits on node n9`).
    #[test]
    fn a_split_part_merged_back_gives_its_fractions_back() {
        let (s, _) = cluster(&[8], 1, &[]);
        let mut l = s.ledger().clone();
        let quarter = |n: u64| {
            let mut amount = ZERO;
            amount[GPU_KIND] = 250 * n;
            let mut fractions = crate::ledger::Fractions::default();
            fractions.add(0, 250 * n);
            Share { node: 0, amount, gpus: 0, fractions }
        };
        let (gang, part) = (7, 8);
        l.place(gang, 0, false, false, &[quarter(2)]);
        let used = |l: &Ledger| l.nodes[0].gpu_use_for(None, &[]).used(0);
        assert_eq!(used(&l), 500);
        l.split_off(gang, part, &[quarter(1)]);
        assert_eq!(used(&l), 500, "split: the part holds one quarter, the gang the other");
        l.merge_into(part, gang);
        assert_eq!(used(&l), 500, "merged back: the gang holds both quarters again");
        assert_eq!(l.nodes[0].occupant(gang).map(|o| o.fractions.total()), Some(500));
    }

    #[test]
    #[should_panic(expected = "would over-allocate node n0")]
    fn placing_on_gpus_in_use_panics_in_every_build() {
        let (s, running) = cluster(&[8], 1, &[(0, 4)]);
        assert_eq!(running.len(), 1);
        let mut l = s.ledger().clone();
        let mut amount = l.nodes[0].capacity;
        amount[GPU_KIND] = gpus_milli(1);
        // GPU 0 is the running job's.
        l.place(99, 0, false, false, &[Share::new(0, amount, 0b1)]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "never put back")]
    fn a_removal_dropped_without_being_put_back_is_caught_in_debug_builds() {
        let (s, running) = cluster(&[8], 1, &[(0, 4)]);
        let mut l = s.ledger().clone();
        let mut removed = Removed::default();
        l.remove(&mut removed, running[0]);
    }

    /// A random cluster: queue nominal quotas, nodes, jobs (queue, GPUs).
    fn world() -> impl Strategy<Value = (Vec<u64>, usize, Vec<(usize, u64)>)> {
        (prop::collection::vec(0u64..24, 1..4), 1usize..4, prop::collection::vec((0usize..4, 1u64..9), 0..12))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Inside `without`, usage is exactly what it would be with the jobs stopping; after
        /// it, the ledger is exactly as before.
        #[test]
        fn without_sees_the_jobs_stopped_and_restores_the_ledger_exactly(
            (nominal, nodes, jobs) in world(),
            pick in prop::collection::vec(any::<bool>(), 12),
        ) {
            let (s, running) = cluster(&nominal, nodes, &jobs);
            let gone: Vec<JobId> = running.iter().zip(&pick).filter(|(_, p)| **p).map(|(j, _)| *j).collect();
            let mut l = s.ledger().clone();
            let before = l.digest();
            let inside = l.without(gone.iter().copied(), |l| l.usage_parts());
            prop_assert!(inside == leaving(&l, &gone).usage_parts(), "usage inside `without`");
            prop_assert_eq!(l.digest(), before);
        }

        /// Taking jobs out and putting them back one at a time, in any order, always leaves
        /// the usage of the jobs still out; putting all back restores the ledger exactly.
        #[test]
        fn removals_put_back_in_any_order_restore_the_ledger_exactly(
            (nominal, nodes, jobs) in world(),
            steps in prop::collection::vec((any::<bool>(), 0usize..12), 0..24),
        ) {
            let (s, running) = cluster(&nominal, nodes, &jobs);
            prop_assume!(!running.is_empty());
            let mut l = s.ledger().clone();
            let before = l.digest();
            let mut removed = Removed::default();
            let mut out: Vec<JobId> = Vec::new();
            for (take, i) in steps {
                let job = running[i % running.len()];
                if take && !out.contains(&job) {
                    l.remove(&mut removed, job);
                    out.push(job);
                } else if !take {
                    l.put_back(&mut removed, job);
                    out.retain(|&j| j != job);
                }
                prop_assert!(l.usage_parts() == leaving(s.ledger(), &out).usage_parts(), "usage with {:?} out", out);
            }
            l.put_back_all(removed);
            prop_assert_eq!(l.digest(), before);
        }
    }
}
