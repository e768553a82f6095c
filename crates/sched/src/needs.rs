//! What a job needs, in the ledger's dense terms: per task a vector per replica and the
//! pools it may use, and the pool assignments to try in preference order.

use baton_model::job::{Job, Topology};
use baton_model::ledger::{Vector, ZERO, add};

use crate::view::View;

#[derive(Debug, Clone)]
pub struct TaskNeed {
    pub need: Vector,
    pub replicas: u32,
    /// Pool indices in preference order.
    pub pools: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct Needs {
    pub tasks: Vec<TaskNeed>,
    pub topology: Option<Topology>,
    /// Pool assignments (one pool per task) in the job's preference order.
    pub assignments: Vec<Vec<usize>>,
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
        let mut assignments: Vec<Vec<usize>> = Vec::new();
        for p in preference {
            let a: Option<Vec<usize>> =
                tasks.iter().map(|t| if t.pools.contains(&p) { Some(p) } else { t.pools.first().copied() }).collect();
            if let Some(a) = a
                && !assignments.contains(&a)
            {
                assignments.push(a);
            }
        }
        Needs { tasks, topology: job.spec.topology, assignments }
    }

    /// Per-pool totals for an assignment, as the quota check wants them.
    pub fn demand(&self, assignment: &[usize]) -> Vec<(usize, Vector)> {
        let mut out: Vec<(usize, Vector)> = Vec::new();
        for (t, &p) in self.tasks.iter().zip(assignment) {
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

    /// The pools any assignment touches.
    pub fn all_pools(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.assignments.iter().flatten().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}
