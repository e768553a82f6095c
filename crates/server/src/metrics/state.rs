//! State gauges: recomputed from the applied state at each scrape (families are cleared
//! first, so a deleted queue or pool disappears).

use std::collections::BTreeMap;

use baton_model::State;
use baton_model::job::{Job, JobState};
use baton_model::ledger::FxMap;
use baton_model::node::NodeStatus;

use super::{Labels, MAX_QUEUE_POOL_SERIES, Metrics, to_i64};

/// GPUs of one queue in one pool.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct QueuePool {
    pub nominal: u64,
    pub used: u64,
    /// Whole GPUs and fractions of shared ones, in thousandths (decisions.md section 11).
    pub used_milli: u64,
    pub borrowed: u64,
    pub lent: u64,
}

type Key = (String, String);

#[derive(Debug, Default, Clone, Copy)]
struct JobCounts {
    pending: u64,
    held: u64,
    pending_gpus: u64,
    running: u64,
}

impl Metrics {
    pub(super) fn refresh_state(&self, state: &State) {
        self.state_applied_index.set(to_i64(state.applied()));
        let table = queue_pools(state);
        let families = [
            &self.queue_gpus_nominal,
            &self.queue_gpus_used,
            &self.queue_gpu_milli_used,
            &self.queue_gpus_borrowed,
            &self.queue_gpus_lent,
        ];
        families.iter().for_each(|f| f.clear());
        for ((queue, pool), g) in table.iter().take(MAX_QUEUE_POOL_SERIES) {
            let l: Labels = vec![("queue", queue.clone()), ("pool", pool.clone())];
            self.queue_gpus_nominal.get_or_create(&l).set(to_i64(g.nominal));
            self.queue_gpus_used.get_or_create(&l).set(to_i64(g.used));
            self.queue_gpu_milli_used.get_or_create(&l).set(to_i64(g.used_milli));
            self.queue_gpus_borrowed.get_or_create(&l).set(to_i64(g.borrowed));
            self.queue_gpus_lent.get_or_create(&l).set(to_i64(g.lent));
        }
        self.series_dropped.set(to_i64(table.len().saturating_sub(MAX_QUEUE_POOL_SERIES) as u64));
        self.refresh_queues(state);
        self.refresh_nodes(state);
        let started = state.windows().values().filter(|w| w.active).count() as u64;
        for (label, count) in [("ahead", state.windows().len() as u64 - started), ("started", started)] {
            self.maintenance_windows.get_or_create(&vec![("state", label.to_string())]).set(to_i64(count));
        }
        let unhealthy: usize = state.gpu_faults().values().map(|f| f.len()).sum();
        self.gpus_unhealthy.set(to_i64(unhealthy as u64));
        self.refresh_arrays(state);
        self.refresh_elastic(state);
    }

    /// Running (and stopping) elastic gangs' replicas per queue: what they run with and
    /// what they miss of their `replicas`. One pass over the elastic gangs kept.
    fn refresh_elastic(&self, state: &State) {
        self.queue_elastic_replicas.clear();
        // Every queue has its series, 0 without gangs, as the other per-queue gauges do.
        let mut per_queue: BTreeMap<&str, (u64, u64)> = state.queues().keys().map(|q| (q.as_str(), (0, 0))).collect();
        for (&id, e) in state.elastic_gangs() {
            let Some(j) = state.job(id).filter(|j| j.state.is_active()) else { continue };
            let size = e.size(&j.spec);
            let t = per_queue.entry(j.spec.queue.as_str()).or_default();
            t.0 += u64::from(size);
            t.1 += u64::from(e.max - size);
        }
        for (q, (running, missing)) in per_queue {
            for (kind, n) in [("running", running), ("missing", missing)] {
                let labels = vec![("queue", q.to_string()), ("kind", kind.to_string())];
                self.queue_elastic_replicas.get_or_create(&labels).set(to_i64(n));
            }
        }
    }

    /// Arrays are bounded by MAX_ARRAYS; their elements not created yet, per queue.
    fn refresh_arrays(&self, state: &State) {
        self.queue_array_waiting.clear();
        let mut waiting: BTreeMap<&str, u64> = state.queues().keys().map(|q| (q.as_str(), 0)).collect();
        let finished = state.arrays().values().filter(|a| a.is_finished()).count() as u64;
        for a in state.arrays().values() {
            *waiting.entry(a.spec.queue.as_str()).or_default() += u64::from(a.not_created());
        }
        for (q, n) in waiting {
            self.queue_array_waiting.get_or_create(&vec![("queue", q.to_string())]).set(to_i64(n));
        }
        let unfinished = state.arrays().len() as u64 - finished;
        for (label, count) in [("unfinished", unfinished), ("finished", finished)] {
            self.arrays.get_or_create(&vec![("state", label.to_string())]).set(to_i64(count));
        }
    }

    fn refresh_queues(&self, state: &State) {
        for f in [&self.queue_pending_jobs, &self.queue_held_jobs, &self.queue_pending_gpus, &self.queue_running_jobs] {
            f.clear();
        }
        // One pass over the jobs (up to MAX_JOBS), not one per queue.
        let mut counts: FxMap<&str, JobCounts> = FxMap::default();
        for j in state.jobs().values() {
            let c = counts.entry(j.spec.queue.as_str()).or_default();
            match j.state {
                JobState::Pending => {
                    c.pending += 1;
                    c.held += u64::from(state.held(j.id));
                    c.pending_gpus += gpus_asked(j);
                }
                JobState::Running | JobState::Preempting => c.running += 1,
                _ => {}
            }
        }
        // Queues are bounded by MAX_QUEUES; one series each.
        for q in state.queues().keys() {
            let c = counts.get(q.as_str()).copied().unwrap_or_default();
            let l: Labels = vec![("queue", q.to_string())];
            self.queue_pending_jobs.get_or_create(&l).set(to_i64(c.pending));
            self.queue_held_jobs.get_or_create(&l).set(to_i64(c.held));
            self.queue_pending_gpus.get_or_create(&l).set(to_i64(c.pending_gpus));
            self.queue_running_jobs.get_or_create(&l).set(to_i64(c.running));
        }
    }

    fn refresh_nodes(&self, state: &State) {
        self.nodes.clear();
        self.pool_gpus_capacity.clear();
        let mut by_status: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut capacity: BTreeMap<String, u64> = BTreeMap::new();
        for n in state.nodes().values() {
            *by_status.entry(status_name(n.status)).or_default() += 1;
            if n.status == NodeStatus::Ready {
                *capacity.entry(n.spec.pool.to_string()).or_default() += n.spec.resources.gpus();
            }
        }
        for (status, count) in by_status {
            self.nodes.get_or_create(&vec![("status", status.to_string())]).set(to_i64(count));
        }
        for (pool, gpus) in capacity {
            self.pool_gpus_capacity.get_or_create(&vec![("pool", pool)]).set(to_i64(gpus));
        }
        self.refresh_slices(state);
        self.refresh_shared(state);
    }

    /// GPUs shared by fractions per pool (decisions.md section 11), from the ledger: one
    /// pass over the ready nodes, whose fractions are bounded by their GPUs.
    fn refresh_shared(&self, state: &State) {
        self.pool_shared_gpus.clear();
        self.pool_shared_gpu_milli_held.clear();
        let l = state.ledger();
        let mut sums: BTreeMap<&str, (u64, u64)> = l.pools.iter().map(|p| (p.name.as_str(), (0, 0))).collect();
        for n in l.nodes.iter().filter(|n| state.nodes().get(&n.name).is_some_and(|s| s.status == NodeStatus::Ready)) {
            let (gpus, milli) = n.shared_gpus();
            let e = sums.entry(l.pools[n.pool].name.as_str()).or_default();
            (e.0, e.1) = (e.0 + gpus, e.1 + milli);
        }
        for (pool, (gpus, milli)) in sums {
            let l: Labels = vec![("pool", pool.to_string())];
            self.pool_shared_gpus.get_or_create(&l).set(to_i64(gpus));
            self.pool_shared_gpu_milli_held.get_or_create(&l).set(to_i64(milli));
        }
    }

    /// MIG slices per pool and profile (decisions.md section 11): at most 5 profiles (the
    /// cluster's resource names are bounded), two series each.
    fn refresh_slices(&self, state: &State) {
        self.pool_mig_slices.clear();
        let l = state.ledger();
        let profiles: Vec<usize> =
            (0..l.kinds.len()).filter(|&k| baton_model::resources::is_slice_profile(l.kinds.name(k))).collect();
        if profiles.is_empty() {
            return;
        }
        // (pool, profile) -> (offered, held), over the ready nodes, each read once.
        let mut sums: BTreeMap<(&str, usize), (u64, u64)> = BTreeMap::new();
        let ready = |n: &&baton_model::ledger::NodeAcct| {
            state.nodes().get(&n.name).is_some_and(|s| s.status == NodeStatus::Ready)
        };
        for n in l.nodes.iter().filter(ready) {
            for &k in &profiles {
                let held: u64 = n.occupants.iter().map(|o| o.amount[k]).sum();
                let e = sums.entry((l.pools[n.pool].name.as_str(), k)).or_default();
                (e.0, e.1) = (e.0 + n.capacity[k], e.1 + held);
            }
        }
        for ((pool, k), (offered, held)) in sums {
            for (kind, v) in [("offered", offered), ("held", held)] {
                let labels = vec![
                    ("pool", pool.to_string()),
                    ("profile", l.kinds.name(k).to_string()),
                    ("kind", kind.to_string()),
                ];
                self.pool_mig_slices.get_or_create(&labels).set(to_i64(v));
            }
        }
    }
}

fn status_name(s: NodeStatus) -> &'static str {
    match s {
        NodeStatus::Ready => "ready",
        NodeStatus::Lost => "lost",
    }
}

fn gpus_asked(j: &Job) -> u64 {
    j.spec.tasks.iter().map(|t| u64::from(t.replicas) * t.resources.gpus()).sum()
}

/// Nominal, used, borrowed and lent GPUs per (queue, pool), in name order. Used counts
/// running and stopping jobs (a suspended job charges no quota). Borrowed is use beyond
/// nominal. Lent: in each cohort and pool, what its queues borrow is taken from the idle
/// nominal of the others in queue-name order (the model does not record who lent to whom,
/// so this attribution is a convention; the cohort's total lent equals what it borrows
/// from its own members).
pub(super) fn queue_pools(state: &State) -> BTreeMap<Key, QueuePool> {
    let mut table: BTreeMap<Key, QueuePool> = BTreeMap::new();
    for q in state.queues().values() {
        for (pool, quota) in &q.quotas {
            table.entry((q.name.to_string(), pool.to_string())).or_default().nominal = quota.nominal.gpus();
        }
    }
    // Summed by (queue, pool index) first, the pool found through the ledger's node index:
    // one hash lookup a replica, where a name-ordered lookup of the node and two strings
    // for the key cost most of a scrape (40,000 running jobs at each).
    let l = state.ledger();
    let mut used: FxMap<(&str, usize), (u64, u64)> = FxMap::default();
    for j in state.jobs().values().filter(|j| j.state.is_active()) {
        for r in &j.replicas {
            let (Some(pool), Some(task)) = (pool_of(state, &r.node), j.spec.tasks.get(r.task as usize)) else {
                continue;
            };
            let u = used.entry((j.spec.queue.as_str(), pool)).or_default();
            u.0 += task.resources.gpus();
            u.1 += task.resources.gpus_milli();
        }
    }
    for ((queue, pool), (gpus, milli)) in used {
        let g = table.entry((queue.to_string(), l.pools[pool].name.to_string())).or_default();
        g.used += gpus;
        g.used_milli += milli;
    }
    for g in table.values_mut() {
        g.borrowed = g.used.saturating_sub(g.nominal);
    }
    attribute_lending(state, &mut table);
    table
}

/// The ledger's index of `node`'s pool, if the node is registered (the ledger holds every
/// registered node).
fn pool_of(state: &State, node: &baton_model::name::Name) -> Option<usize> {
    let l = state.ledger();
    l.node(node.as_str()).map(|n| l.nodes[n].pool)
}

fn attribute_lending(state: &State, table: &mut BTreeMap<Key, QueuePool>) {
    let cohorts: BTreeMap<String, Option<String>> =
        state.queues().values().map(|q| (q.name.to_string(), q.cohort.as_ref().map(|c| c.to_string()))).collect();
    let cohort_of = |queue: &str| cohorts.get(queue).cloned();
    let mut borrowed: BTreeMap<(Option<String>, String), u64> = BTreeMap::new();
    for ((queue, pool), g) in table.iter() {
        if let Some(cohort) = cohort_of(queue) {
            *borrowed.entry((cohort, pool.clone())).or_default() += g.borrowed;
        }
    }
    for ((queue, pool), g) in table.iter_mut() {
        let Some(cohort) = cohort_of(queue) else { continue };
        let Some(left) = borrowed.get_mut(&(cohort, pool.clone())) else { continue };
        g.lent = g.nominal.saturating_sub(g.used).min(*left);
        *left -= g.lent;
    }
}
