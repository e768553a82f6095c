//! What a job needs, in the ledger's dense terms: per task a vector per replica and the
//! pools it may use, and the pool choices to try in preference order.

use baton_model::ledger::FxMap;
use std::rc::Rc;

use baton_model::job::{Job, Topology};
use baton_model::ledger::{GPU_KIND, Vector, ZERO, add};
use baton_model::topology::{LevelName, RACK};

use crate::view::View;

#[derive(Debug, Clone)]
pub struct TaskNeed {
    pub need: Vector,
    pub replicas: u32,
    /// Pool indices in preference order.
    pub pools: Vec<usize>,
}

/// A job's topology in the ledger's terms (decisions.md section 10): levels by their
/// position among the levels in force.
/// Small (levels are few: `MAX_TOPOLOGY_LEVELS`), since `Needs` travels by value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Levels {
    /// The whole gang on one node.
    pub one_node: bool,
    /// It requires a level the cluster no longer declares: no placement satisfies it.
    pub unplaceable: bool,
    required: Option<u8>,
    preferred: Option<u8>,
    rack: Option<u8>,
    /// The resource kind a domain's free capacity is counted in: GPUs, or CPUs for a gang
    /// without GPUs (decisions.md section 10).
    measure: u8,
}

impl Levels {
    pub fn of(ledger: &baton_model::ledger::Ledger, topology: Option<Topology>) -> Levels {
        let level = |name: &LevelName| ledger.level(name).map(|l| l as u8);
        let mut l = Levels { rack: level(&LevelName::new(RACK).expect("valid")), ..Levels::default() };
        let Some(t) = topology else { return l };
        if let Some(r) = t.required() {
            if r.is_node() {
                l.one_node = true;
            } else {
                l.required = level(&r);
                l.unplaceable = l.required.is_none();
            }
        }
        l.preferred = t.preferred().and_then(|p| level(&p));
        l
    }

    /// Every replica in one domain of this level.
    pub fn required(&self) -> Option<usize> {
        self.required.map(usize::from)
    }

    /// The level whose domains the gang should span as few of as it can.
    pub fn preferred(&self) -> Option<usize> {
        self.preferred.map(usize::from)
    }

    /// The rack level, if the cluster has one: section 3's "fewest racks".
    pub fn rack(&self) -> Option<usize> {
        self.rack.map(usize::from)
    }

    /// The resource kind best fit counts (see `measure`).
    pub fn measure(&self) -> usize {
        usize::from(self.measure)
    }

    /// Counts domains in CPUs when no task needs a GPU and the cluster has CPUs.
    fn measured_for(mut self, ledger: &baton_model::ledger::Ledger, tasks: &[TaskNeed]) -> Levels {
        let gpus = tasks.iter().any(|t| t.need[GPU_KIND] > 0);
        let cpu = ledger.kinds.index(baton_model::quantity::CPU);
        self.measure = match cpu {
            Some(k) if !gpus => k as u8,
            _ => GPU_KIND as u8,
        };
        self
    }
}

#[derive(Debug, Clone)]
pub struct Needs {
    pub tasks: Vec<TaskNeed>,
    pub topology: Option<Topology>,
    pub levels: Levels,
    /// Pool choices (one pool per task) in the job's preference order.
    pub pool_choices: Vec<Vec<usize>>,
    /// Each pool choice's demand per pool, computed once.
    pub demands: Vec<Vec<(usize, Vector)>>,
}

impl Needs {
    pub fn of(view: &View, job: &Job) -> Needs {
        let kinds = &view.ledger.kinds;
        let tasks: Vec<TaskNeed> = job
            .spec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| TaskNeed {
                need: kinds.vector_lossy(&t.resources),
                replicas: t.replicas,
                pools: view.state.task_pools(&job.spec, i),
            })
            .collect();
        let preference: Vec<usize> = match &job.spec.pools {
            Some(names) => names.iter().filter_map(|n| view.ledger.pool(n.as_str())).collect(),
            None => {
                let mut all: Vec<usize> = tasks.iter().flat_map(|t| t.pools.iter().copied()).collect();
                all.sort_unstable();
                all.dedup();
                all
            }
        };
        let mut pool_choices: Vec<Vec<usize>> = Vec::new();
        for p in preference {
            let a: Option<Vec<usize>> =
                tasks.iter().map(|t| if t.pools.contains(&p) { Some(p) } else { t.pools.first().copied() }).collect();
            if let Some(a) = a
                && !pool_choices.contains(&a)
            {
                pool_choices.push(a);
            }
        }
        let levels = Levels::of(&view.ledger, job.spec.topology).measured_for(&view.ledger, &tasks);
        let mut needs = Needs { tasks, topology: job.spec.topology, levels, pool_choices, demands: Vec::new() };
        needs.demands = needs.pool_choices.iter().map(|a| needs.demand(a)).collect();
        needs
    }

    /// Per-pool totals for a pool choice, as the quota check wants them.
    pub fn demand(&self, pool_choice: &[usize]) -> Vec<(usize, Vector)> {
        let mut out: Vec<(usize, Vector)> = Vec::new();
        for (t, &p) in self.tasks.iter().zip(pool_choice) {
            let mut total = ZERO;
            for _ in 0..t.replicas {
                add(&mut total, &t.need);
            }
            match out.iter_mut().find(|(pp, _)| *pp == p) {
                Some((_, v)) => add(v, &total),
                None => out.push((p, total)),
            }
        }
        out
    }

    /// The pools any pool choice touches.
    pub fn all_pools(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.pool_choices.iter().flatten().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Most jobs of a backlog share a handful of shapes (one task, any pool, so many GPUs):
/// within a cycle their `Needs` are computed once and shared.
#[derive(Default)]
pub struct NeedsCache {
    shapes: FxMap<(Vector, u32, Option<Topology>), Rc<Needs>>,
}

impl NeedsCache {
    pub fn of(&mut self, view: &View, job: &Job) -> Rc<Needs> {
        // An elastic gang is decided at its top size first (its spec holds its last size).
        if let Some(e) = view.state.elastic(job.id) {
            return Rc::new(crate::elastic::sized(&Needs::of(view, job), e, e.max));
        }
        let spec = &job.spec;
        let simple = spec.tasks.len() == 1 && spec.pools.is_none() && spec.tasks[0].pools.is_none();
        if !simple {
            return Rc::new(Needs::of(view, job));
        }
        let t = &spec.tasks[0];
        let key = (view.ledger.kinds.vector_lossy(&t.resources), t.replicas, spec.topology);
        self.shapes.entry(key).or_insert_with(|| Rc::new(Needs::of(view, job))).clone()
    }
}
