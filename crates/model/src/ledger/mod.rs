//! The ledger: derived, dense accounting of what every node and queue holds.
//!
//! It is rebuilt from the replicated state after a configuration change or a snapshot
//! restore, and kept up to date incrementally as jobs start, stop, suspend and resume. Both
//! the plan applier (in `State::apply`) and the scheduler (on its own clone) ask it the same
//! two questions: what is free on a node for a given job, and may a queue take a demand.
//! What a decision changes (a job placed, a job preempting) and the scoped "as if these
//! jobs had stopped" are written once, in `change.rs`: `State::apply` and the scheduler's
//! working copy both call them.
//! The scheduler clones the ledger every cycle, so its large tables are copy-on-write
//! (`cow.rs`): a clone shares them, and a change copies one chunk of 64 entries.
//! It also counts each queue's and each owner's unfinished jobs (`UnfinishedJobs`), so that
//! a submit checks the per-queue and per-user bounds without walking every job. Those
//! maps are cloned whole with the ledger: one entry per queue and per user with jobs.
//!
//! Vocabulary:
//! - *kind*: a resource name interned to an index; `gpu` is always kind 0.
//! - *occupant*: a job's share of a node, active (Running/Preempting) or held (Suspended).
//!   A held share may be partly *lent* to the job that preempted it.
//! - *reservation*: resources held for a preemptor while its victims checkpoint.
//! - *tree*: the lending group of a queue, its top-level cohort (or the queues directly
//!   under the root). The root's *unowned* capacity is shared by all trees.

mod change;
mod cow;
mod fractions;
mod fxhash;
mod node;
mod ops;
mod quota;

pub use change::Removed;
pub use cow::{CowMap, CowVec};
pub use fractions::{Fractions, GpuUse};
pub use fxhash::FxMap;
pub use node::{NodeAcct, NodeReservation, Occupant};
pub use ops::Share;
pub use quota::{Admission, QueueAcct, QuotaBlock, TreeAcct};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::job::JobId;
use crate::limits::MAX_RESOURCE_KINDS;
use crate::name::Name;
use crate::quantity::Human;
use crate::resources::{GPU, Resources, is_gpu_key};

/// Quantities indexed by kind.
pub type Vector = [u64; MAX_RESOURCE_KINDS];

/// The kind of `gpu`: always the first (`Kinds::new`), so a vector's GPUs are
/// `v[GPU_KIND]`, in thousandths (`GPU_MILLI` per GPU) so that a shared GPU's fraction
/// counts exactly against a quota (decisions.md section 11). GPUs are also tracked by index
/// (a mask per node), which no other kind is.
pub const GPU_KIND: usize = 0;

/// Thousandths of a GPU in one GPU: the ledger's unit for kind `GPU_KIND`.
pub const GPU_MILLI: u64 = 1000;

/// Whole GPUs in an amount of the GPU kind (a fraction left over is not counted).
pub fn whole_gpus(milli: u64) -> u64 {
    milli / GPU_MILLI
}

/// An amount of whole GPUs in the ledger's unit, at most `MAX_QUANTITY` as any amount (so
/// sums of a few stay within `u64`, as they did in whole GPUs).
pub fn gpus_milli(gpus: u64) -> u64 {
    gpus.saturating_mul(GPU_MILLI).min(crate::quantity::MAX_QUANTITY)
}

pub const ZERO: Vector = [0; MAX_RESOURCE_KINDS];

/// Resource names in index order: `gpu` first, then by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kinds {
    names: Vec<String>,
}

impl Kinds {
    pub fn new(all: &BTreeSet<String>) -> Kinds {
        let mut names = vec![GPU.to_string()];
        names.extend(all.iter().filter(|n| n.as_str() != GPU).cloned());
        Kinds { names }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, k: usize) -> &str {
        &self.names[k]
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        // Compared byte by byte: kind names are a few bytes long, and `==` calls memcmp for
        // each, which costs more than the comparison (this runs for every resource of
        // every pending job in every cycle).
        let same = |n: &String| n.len() == name.len() && n.bytes().zip(name.bytes()).all(|(a, b)| a == b);
        self.names.iter().position(same)
    }

    /// `None` when `r` names a resource no node has.
    pub fn vector(&self, r: &Resources) -> Option<Vector> {
        let mut v = ZERO;
        for (name, q) in r.iter().filter(|(name, _)| !is_gpu_key(name)) {
            v[self.index(name)?] = q;
        }
        v[GPU_KIND] = r.gpus_milli();
        Some(v)
    }

    /// Like `vector`, but drops resources no node has (quotas may name future resources).
    pub fn vector_lossy(&self, r: &Resources) -> Vector {
        let mut v = ZERO;
        for (name, q) in r.iter().filter(|(name, _)| !is_gpu_key(name)) {
            if let Some(k) = self.index(name) {
                v[k] = q;
            }
        }
        v[GPU_KIND] = r.gpus_milli();
        v
    }

    /// A per-kind limit map; kinds it does not name get `absent`.
    pub fn limits(&self, m: &BTreeMap<String, u64>, absent: u64) -> Vector {
        let mut v = [absent; MAX_RESOURCE_KINDS];
        for (name, q) in m {
            if let Some(k) = self.index(name) {
                v[k] = Self::in_ledger_units(k, *q);
            }
        }
        v
    }

    /// A quantity of kind `k` as `Resources` hold it, in the ledger's unit (GPUs in
    /// thousandths; see `GPU_KIND`).
    pub fn in_ledger_units(k: usize, q: u64) -> u64 {
        if k == GPU_KIND { gpus_milli(q) } else { q }
    }

    pub fn resources(&self, v: &Vector) -> Resources {
        let mut r = Resources::new();
        for (k, name) in self.names.iter().enumerate().skip(1) {
            r.set(name, v[k]);
        }
        r.set_gpus_milli(v[GPU_KIND]);
        r
    }

    /// An amount of kind `k` as a person reads it (`8`, `0.5` GPUs, `500m` CPUs, `1Gi`).
    pub fn human(&self, k: usize, v: u64) -> String {
        if k == GPU_KIND {
            return crate::quantity::thousandths(v);
        }
        Human { resource: self.name(k), value: v }.to_string()
    }
}

/// Caps the GPUs of `free` at the whole GPUs of `mask`: a share of a GPU left over on a
/// GPU that holds fractions is no room for a whole GPU.
pub fn clamp_to_mask(free: &mut Vector, mask: u64) {
    free[GPU_KIND] = free[GPU_KIND].min(gpus_milli(u64::from(mask.count_ones())));
}

pub fn add(a: &mut Vector, b: &Vector) {
    for k in 0..MAX_RESOURCE_KINDS {
        a[k] = a[k].saturating_add(b[k]);
    }
}

pub fn sub(a: &mut Vector, b: &Vector) {
    for k in 0..MAX_RESOURCE_KINDS {
        a[k] = a[k].saturating_sub(b[k]);
    }
}

pub fn fits(need: &Vector, free: &Vector) -> bool {
    need.iter().zip(free).all(|(n, f)| n <= f)
}

pub fn max(a: &Vector, b: &Vector) -> Vector {
    let mut m = ZERO;
    for k in 0..MAX_RESOURCE_KINDS {
        m[k] = a[k].max(b[k]);
    }
    m
}

pub fn min(a: &Vector, b: &Vector) -> Vector {
    let mut m = ZERO;
    for k in 0..MAX_RESOURCE_KINDS {
        m[k] = a[k].min(b[k]);
    }
    m
}

pub fn is_zero(v: &Vector) -> bool {
    v.iter().all(|&x| x == 0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolAcct {
    pub name: Name,
    /// Ready, uncordoned nodes only (docs/policy.md section 1).
    pub capacity: Vector,
    /// Every registered node, whatever its status: what the pool could ever hold.
    pub total: Vector,
    /// The largest amount of each kind on any one registered node.
    pub largest_node: Vector,
    /// Sum of the queues' nominal quotas here.
    pub guaranteed: Vector,
    /// What all trees together draw from the unowned capacity.
    pub unowned_draw: Vector,
    /// Distinct capacities of the pool's registered nodes, with how many nodes have each:
    /// "could this ever fit" questions cost O(shapes), not O(nodes).
    pub shapes: Vec<(Vector, u64)>,
    /// GPUs of the pool's schedulable nodes out of service (decisions.md section 14), for
    /// the reasons of jobs that wait for room.
    pub unhealthy_gpus: u64,
}

impl PoolAcct {
    /// Capacity no queue is guaranteed; it belongs to the implicit root cohort.
    pub fn unowned(&self) -> Vector {
        let mut u = self.capacity;
        sub(&mut u, &self.guaranteed);
        u
    }

    pub fn oversubscribed(&self) -> Vec<usize> {
        (0..MAX_RESOURCE_KINDS).filter(|&k| self.guaranteed[k] > self.capacity[k]).collect()
    }
}

/// One job's charges, kept so they can be taken back exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCharge {
    pub queue: usize,
    pub not_preemptible: bool,
    /// (pool, amount) charged to the queue's usage.
    pub usage: Vec<(usize, Vector)>,
    /// Nodes where the job has an occupant or a reservation.
    pub nodes: Vec<usize>,
    /// Reserved for this job rather than in use.
    pub reserved: bool,
    /// The job is stopping (Preempting): its queue is no longer charged for it, since what
    /// it frees is reserved for its preemptor (or about to be free); its nodes stay
    /// blocked until it has really stopped.
    pub leaving: bool,
}

/// One topology level and its domains, each its path of names from this level up, in
/// natural order with unnamed parts last (nodes that name no domain at a level share its
/// unnamed one, as nodes without a rack always did).
#[derive(Debug, Clone)]
pub struct LevelAcct {
    pub name: crate::topology::LevelName,
    pub domains: Vec<Vec<Option<Name>>>,
}

impl LevelAcct {
    /// `nvl-1/r1/z1`: a domain's path, `-` for an unnamed part.
    pub fn domain_text(&self, d: u32) -> String {
        let path = &self.domains[d as usize];
        path.iter().map(|p| p.as_ref().map_or("-", Name::as_str)).collect::<Vec<_>>().join("/")
    }
}

impl Ledger {
    /// Position of level `name` among the levels in force (`None`: not declared; the node
    /// level is not among them).
    pub fn level(&self, name: &crate::topology::LevelName) -> Option<usize> {
        self.levels.iter().position(|l| l.name == *name)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub kinds: Kinds,
    pub pools: Vec<PoolAcct>,
    pub pool_ix: FxMap<String, usize>,
    /// In natural name order: a node's index is its tie-break rank.
    pub nodes: CowVec<NodeAcct>,
    /// Shared by clones: only a rebuild changes it.
    pub node_ix: Arc<FxMap<String, usize>>,
    pub racks: Vec<Name>,
    /// The topology levels in force, lowest first (decisions.md section 10), with their
    /// domains; a node's `domains[i]` is its domain's position at level `i`. Shared by
    /// clones (every cycle's view is one): only a rebuild changes it.
    pub levels: Arc<Vec<LevelAcct>>,
    pub queues: CowVec<QueueAcct>,
    pub queue_ix: FxMap<String, usize>,
    pub trees: Vec<TreeAcct>,
    pub charges: CowMap<JobCharge>,
    /// The scheduler's view only: parts split off jobs (`split_off`), by the job they were
    /// split off; empty everywhere else.
    pub split_parts: FxMap<JobId, JobId>,
    /// Unfinished jobs per queue and per owner, for the per-queue and per-user bounds a
    /// submit checks: kept up to date by submit and finish so a submit does not scan
    /// every job (with a backlog of tens of thousands that scan was most of an apply).
    pub unfinished: UnfinishedJobs,
}

/// How many unfinished (not succeeded, failed or cancelled) jobs each queue and each
/// owner holds; a name with none is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnfinishedJobs {
    pub per_queue: BTreeMap<Name, u32>,
    pub per_user: BTreeMap<Name, u32>,
}

impl UnfinishedJobs {
    pub fn of_queue(&self, queue: &Name) -> u32 {
        self.per_queue.get(queue).copied().unwrap_or(0)
    }

    pub fn of_user(&self, user: &Name) -> u32 {
        self.per_user.get(user).copied().unwrap_or(0)
    }

    /// A job that is not finished now exists (submitted, or found by a rebuild).
    pub fn add(&mut self, queue: &Name, owner: Option<&Name>) {
        *self.per_queue.entry(queue.clone()).or_insert(0) += 1;
        if let Some(user) = owner {
            *self.per_user.entry(user.clone()).or_insert(0) += 1;
        }
    }

    /// An unfinished job has finished.
    pub fn remove(&mut self, queue: &Name, owner: Option<&Name>) {
        decrement(&mut self.per_queue, queue);
        if let Some(user) = owner {
            decrement(&mut self.per_user, user);
        }
    }
}

/// Counts one fewer under `key`, dropping the entry at zero (so a rebuild, which never
/// makes a zero entry, compares equal).
fn decrement(map: &mut BTreeMap<Name, u32>, key: &Name) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Ledger {
    pub fn pool(&self, name: &str) -> Option<usize> {
        self.pool_ix.get(name).copied()
    }

    pub fn node(&self, name: &str) -> Option<usize> {
        self.node_ix.get(name).copied()
    }

    pub fn queue(&self, name: &str) -> Option<usize> {
        self.queue_ix.get(name).copied()
    }

    /// A canonical, comparable digest of everything derived: used to check that incremental
    /// updates agree with a rebuild from scratch.
    pub fn digest(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let mut occ: Vec<String> = n.occupants.iter().map(|o| format!("{o:?}")).collect();
            occ.sort();
            let mut res: Vec<String> = n.reservations.iter().map(|r| format!("{r:?}")).collect();
            res.sort();
            out += &format!("node {} free={:?} gpus={:x} occ={occ:?} res={res:?}\n", n.name, n.free, n.free_gpus);
        }
        for q in &self.queues {
            out += &format!("queue {} usage={:?} np={:?}\n", q.name, q.usage, q.np_usage);
        }
        for (i, t) in self.trees.iter().enumerate() {
            out += &format!("tree {i} {t:?}\n");
        }
        for p in &self.pools {
            out += &format!("pool {p:?}\n");
        }
        out += &format!("unfinished {:?}\n", self.unfinished);
        out
    }
}

impl Ledger {
    /// Queue `q`'s usage and nominal quota per pool, as admission counts them (a
    /// preemptor's reservation is charged, a stopping or suspended job is not): (pool,
    /// usage, nominal), pools where both are zero left out. What `queue list`, `cluster
    /// info` and the simulator show, so they show what the scheduler decides by.
    pub fn queue_usage(&self, q: usize) -> Vec<(usize, Vector, Vector)> {
        let acct = &self.queues[q];
        (0..self.pools.len())
            .filter(|&p| !is_zero(&acct.usage[p]) || !is_zero(&acct.nominal[p]))
            .map(|p| (p, acct.usage[p], acct.nominal[p]))
            .collect()
    }

    /// What stands between a reservation for `job` on `shares` and its start (policy
    /// section 9): running jobs holding any of the reserved GPUs, or on a reserved node where
    /// the other reserved resources are not all free for `job`. Sorted by id. The plan
    /// checker and the scheduler both ask this, so they agree on who may backfill.
    pub fn reservation_occupants(&self, job: JobId, shares: &[Share]) -> Vec<JobId> {
        let mut out = Vec::new();
        for Share { node: n, amount, gpus, fractions } in shares {
            let gpus = gpus | fractions.mask();
            let mut others = *amount;
            others[GPU_KIND] = 0;
            let node = &self.nodes[*n];
            let short = !fits(&others, &node.free_for(Some(job), &[]).0);
            for o in node.occupants.iter().filter(|o| !o.held) {
                let on_gpus = (o.gpus | o.fractions.mask()) & gpus != 0;
                let on_rest = short && o.amount.iter().enumerate().any(|(k, &x)| k != GPU_KIND && x > 0);
                if (on_gpus || on_rest) && !out.contains(&o.job) {
                    out.push(o.job);
                }
            }
        }
        out.sort_unstable();
        out
    }
}
