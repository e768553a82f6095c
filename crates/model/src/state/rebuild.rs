//! Builds the ledger from the replicated data: after a configuration change, a snapshot
//! restore, or in tests to check the incremental path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::State;
use crate::job::{JobId, JobState};
use crate::ledger::{Kinds, Ledger, LevelAcct, NodeAcct, PoolAcct, QueueAcct, Share, TreeAcct, Vector, ZERO, add};
use crate::limits::MAX_RESOURCE_KINDS;
use crate::name::Name;
use crate::topology::MAX_TOPOLOGY_LEVELS;

impl State {
    pub(crate) fn rebuild_ledger(&mut self) {
        let mut l = Ledger::default();
        let d = &self.d;
        let names: BTreeSet<String> =
            d.nodes.values().flat_map(|n| n.spec.resources.names().map(String::from)).collect();
        l.kinds = Kinds::new(&names);

        let mut pools: BTreeSet<Name> = d.nodes.values().map(|n| n.spec.pool.clone()).collect();
        pools.extend(d.queues.values().flat_map(|q| q.quotas.keys().cloned()));
        for (i, p) in pools.iter().enumerate() {
            l.pool_ix.insert(p.to_string(), i);
            l.pools.push(PoolAcct {
                name: p.clone(),
                capacity: ZERO,
                total: ZERO,
                largest_node: ZERO,
                guaranteed: ZERO,
                unowned_draw: ZERO,
                shapes: Vec::new(),
                unhealthy_gpus: 0,
            });
        }
        let racks: BTreeSet<Name> = d.nodes.values().filter_map(|n| n.spec.rack.clone()).collect();
        l.racks = racks.into_iter().collect();
        let domains = self.domains_of_nodes(&mut l);

        // Nodes of started maintenance windows, once: a rebuild reads every node.
        let in_window: BTreeSet<&Name> =
            self.windows.values().filter(|w| w.active).flat_map(|w| w.spec.nodes.iter()).collect();
        for node in d.nodes.values() {
            let pool = l.pool_ix[node.spec.pool.as_str()];
            let rack = node.spec.rack.as_ref().and_then(|r| l.racks.iter().position(|x| x == r));
            let cap = l.kinds.vector_lossy(&node.spec.resources);
            let pa = &mut l.pools[pool];
            add(&mut pa.total, &cap);
            match pa.shapes.iter_mut().find(|(s, _)| *s == cap) {
                Some((_, n)) => *n += 1,
                None => pa.shapes.push((cap, 1)),
            }
            for k in 0..MAX_RESOURCE_KINDS {
                pa.largest_node[k] = pa.largest_node[k].max(cap[k]);
            }
            // A node in a started maintenance window is out of the capacity, as a cordoned one.
            let open = node.schedulable() && !in_window.contains(&node.spec.name);
            // Unhealthy GPUs are out of the capacity and of the node's GPUs (section 14).
            let mut acct = NodeAcct::new(node.spec.name.clone(), pool, rack, open, cap);
            acct.domains = domains[l.nodes.len()];
            acct.take_out_gpus(self.unhealthy_gpus(&node.spec.name));
            if open {
                add(&mut pa.capacity, &acct.capacity);
                pa.unhealthy_gpus +=
                    crate::ledger::whole_gpus(cap[crate::ledger::GPU_KIND] - acct.capacity[crate::ledger::GPU_KIND]);
            }
            Arc::make_mut(&mut l.node_ix).insert(node.spec.name.to_string(), l.nodes.len());
            l.nodes.push(acct);
        }
        self.build_queues(&mut l);
        for j in self.d.jobs.values().filter(|j| !j.state.is_finished()) {
            l.unfinished.add(&j.spec.queue, self.access.owner(j.id));
        }
        self.ledger = l;
        self.charge_jobs();
    }

    /// Fills the ledger's levels with their domains and returns each node's domains, in
    /// node order.
    fn domains_of_nodes(&self, l: &mut Ledger) -> Vec<[u32; MAX_TOPOLOGY_LEVELS]> {
        // Natural order, an unnamed part after every named one.
        type Key = Vec<(bool, Option<Name>)>;
        let key = |p: &Vec<Option<Name>>| -> Key { p.iter().map(|n| (n.is_none(), n.clone())).collect() };
        let levels = self.topology.levels();
        let paths: Vec<Vec<Vec<Option<Name>>>> =
            self.d.nodes.values().map(|n| self.topology.paths(&n.spec.name, n.spec.rack.as_ref())).collect();
        l.levels = Arc::new(
            levels
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let set: BTreeMap<Key, Vec<Option<Name>>> =
                        paths.iter().map(|p| (key(&p[i]), p[i].clone())).collect();
                    LevelAcct { name: *name, domains: set.into_values().collect() }
                })
                .collect(),
        );
        paths
            .iter()
            .map(|p| {
                let mut d = [0u32; MAX_TOPOLOGY_LEVELS];
                for (i, level) in l.levels.iter().enumerate() {
                    let k = key(&p[i]);
                    d[i] = level.domains.binary_search_by(|x| key(x).cmp(&k)).expect("every path is a domain") as u32;
                }
                d
            })
            .collect()
    }

    /// The top-level cohort a queue's cohort sits under (its lending tree), and whether any
    /// cohort on the way has fair sharing on.
    pub(crate) fn tree_of(&self, cohort: Option<&Name>) -> (Option<Name>, bool) {
        let mut cur = cohort.and_then(|c| self.d.cohorts.get(c));
        let mut fair = false;
        let mut top = None;
        let mut hops = 0;
        while let Some(c) = cur {
            fair |= c.fair_sharing;
            top = Some(c.name.clone());
            hops += 1;
            if hops > crate::limits::MAX_COHORT_DEPTH {
                break;
            }
            cur = c.parent.as_ref().and_then(|p| self.d.cohorts.get(p));
        }
        (top, fair)
    }

    fn build_queues(&self, l: &mut Ledger) {
        let np = l.pools.len();
        let mut tree_ix: BTreeMap<Option<Name>, usize> = BTreeMap::new();
        tree_ix.insert(None, 0);
        l.trees.push(TreeAcct::new(None, np));
        for q in self.d.queues.values() {
            let (top, fair) = self.tree_of(q.cohort.as_ref());
            let tree = *tree_ix.entry(top.clone()).or_insert_with(|| {
                l.trees.push(TreeAcct::new(top.clone(), np));
                l.trees.len() - 1
            });
            let mut acct = QueueAcct {
                name: q.name.clone(),
                tree,
                fair_sharing: fair,
                weight: q.weight,
                nominal: vec![ZERO; np],
                borrow_limit: vec![[u64::MAX; MAX_RESOURCE_KINDS]; np],
                lend_limit: vec![[u64::MAX; MAX_RESOURCE_KINDS]; np],
                usage: vec![ZERO; np],
                np_usage: vec![ZERO; np],
            };
            for (pool, quota) in &q.quotas {
                let p = l.pool_ix[pool.as_str()];
                acct.nominal[p] = l.kinds.vector_lossy(&quota.nominal);
                acct.borrow_limit[p] = l.kinds.limits(&quota.borrow_limit, u64::MAX);
                acct.lend_limit[p] = l.kinds.limits(&quota.lend_limit, u64::MAX);
                add(&mut l.pools[p].guaranteed, &acct.nominal[p]);
                let t = &mut l.trees[tree];
                for k in 0..MAX_RESOURCE_KINDS {
                    let lendable = acct.lendable_nominal(p, k);
                    t.lendable_nominal[p][k] = t.lendable_nominal[p][k].saturating_add(lendable);
                    t.lendable_unused[p][k] = t.lendable_unused[p][k].saturating_add(lendable);
                }
            }
            l.queue_ix.insert(q.name.to_string(), l.queues.len());
            l.queues.push(acct);
        }
    }

    /// Charges every job that holds something, in an order that makes lends derivable:
    /// occupants (completing ranks included), then held shares, then recorded lends, then
    /// reservations.
    fn charge_jobs(&mut self) {
        let completing: Vec<JobId> = self.after.completing.keys().copied().collect();
        for id in completing {
            self.charge_completing(id);
        }
        let jobs: Vec<_> = self.d.jobs.values().filter(|j| !j.replicas.is_empty()).map(|j| j.id).collect();
        for &id in &jobs {
            let job = &self.d.jobs[&id];
            if job.state.is_active() || job.state == JobState::Suspended {
                let shares = self.shares(job, &job.replicas);
                let (q, np) = self.queue_and_np(job);
                let suspends = self.suspends(job);
                self.ledger.occupy(id, q, np, suspends, &shares);
                if job.is_leaving() {
                    self.ledger.set_leaving(id, true);
                }
                if job.state == JobState::Suspended {
                    self.ledger.hold(id, None);
                }
            }
        }
        // Borrowers that run, and those that ended and whose ranks are still being stopped
        // (`keep_borrowed`).
        let borrowers: Vec<JobId> = self.d.jobs.values().filter(|j| !j.lent_from.is_empty()).map(|j| j.id).collect();
        for id in borrowers {
            for lend in self.d.jobs[&id].lent_from.clone() {
                self.restore_lend(id, &lend);
            }
        }
        let reservations: Vec<_> = self.d.reservations.values().cloned().collect();
        for r in reservations {
            let Some(job) = self.d.jobs.get(&r.job) else {
                continue;
            };
            let shares = self.shares(job, &r.replicas);
            let (q, np) = self.queue_and_np(job);
            self.ledger.reserve(r.job, q, np, &shares, &r.victims);
            let holders: Vec<JobId> = self
                .d
                .jobs
                .values()
                .filter(|j| {
                    // A victim being suspended lends; one requeued meanwhile (a rank of it
                    // was lost) whose suspended ranks are completing does not.
                    let suspending = j.state == JobState::Preempting && self.suspends(j);
                    j.suspended_for == Some(r.job) || r.victims.contains(&j.id) && suspending
                })
                .map(|j| j.id)
                .collect();
            self.ledger.lend_for_reservation(r.job, &holders);
        }
    }

    /// A job's per-node shares for a set of replicas (replicas on one node are summed).
    pub fn shares(&self, job: &crate::job::Job, replicas: &[crate::alloc::ReplicaAlloc]) -> Vec<Share> {
        let mut out: Vec<Share> = Vec::new();
        for r in replicas {
            let Some(n) = self.ledger.node(r.node.as_str()) else {
                continue;
            };
            let task = &job.spec.tasks[r.task as usize];
            let amount: Vector = self.ledger.kinds.vector_lossy(&task.resources);
            let pos = match out.iter().position(|s| s.node == n) {
                Some(pos) => pos,
                None => {
                    out.push(Share::new(n, crate::ledger::ZERO, 0));
                    out.len() - 1
                }
            };
            let s = &mut out[pos];
            add(&mut s.amount, &amount);
            // A fraction names the one GPU it shares (decisions.md section 11).
            match (task.resources.gpu_fraction(), r.gpus.as_slice()) {
                (0, gpus) => s.gpus |= crate::alloc::gpu_mask(gpus),
                (milli, [g, ..]) => s.fractions.add(*g, milli),
                (_, []) => {}
            }
        }
        out
    }

    /// The ledger index of a live job's queue, and whether it is not preemptible: the one
    /// definition the state and the scheduler's view both use. Every unfinished job's
    /// queue exists (`delete_queue` refuses otherwise, a snapshot is checked when decoded).
    pub fn queue_and_np(&self, job: &crate::job::Job) -> (usize, bool) {
        let q = self.ledger.queue(job.spec.queue.as_str());
        (
            q.unwrap_or_else(|| panic!("job {}'s queue {} is not in the ledger", job.id, job.spec.queue)),
            !job.preemptible,
        )
    }

    /// Debug check: the incrementally maintained ledger equals one rebuilt from scratch.
    pub fn ledger_consistent(&self) -> Result<(), String> {
        let mut fresh = self.clone();
        fresh.rebuild_ledger();
        let (a, b) = (self.ledger.digest(), fresh.ledger.digest());
        if a == b {
            return Ok(());
        }
        let diff: Vec<String> = a
            .lines()
            .zip(b.lines())
            .filter(|(x, y)| x != y)
            .take(4)
            .map(|(x, y)| format!("incremental: {x}\nrebuilt:     {y}"))
            .collect();
        Err(diff.join("\n"))
    }
}
