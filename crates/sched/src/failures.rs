//! Within one cycle, a job that found no victims speaks for the jobs after it: things only
//! get harder as a cycle goes on (placements use up room and quota, victims are taken), so
//! a later job of the same queue and pools that needs no less, ranks no higher and was
//! submitted no earlier will not find victims either. Remembering such failures spares the
//! expensive planning for a long backlog behind a full cluster.

use baton_model::ledger::FxMap;

use baton_model::job::{Job, Topology};
use baton_model::ledger::Vector;

use crate::needs::Needs;

/// Failures remembered per (queue, pools, kind of job); the oldest is forgotten first.
const MAX_FAILURES_PER_KEY: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    queue: usize,
    not_preemptible: bool,
    topology: Option<Topology>,
    assignments: Vec<Vec<usize>>,
}

struct Failure {
    priority: i32,
    need: Vector,
    submitted: (u64, u64),
    why: String,
}

#[derive(Default)]
pub struct Failures {
    by_key: FxMap<Key, Vec<Failure>>,
}

impl Failures {
    /// Only single-replica jobs are compared (a gang's shape is more than one vector).
    pub fn key(needs: &Needs, queue: usize, np: bool) -> Option<Key> {
        let single = needs.tasks.len() == 1 && needs.tasks[0].replicas == 1;
        single.then(|| Key {
            queue,
            not_preemptible: np,
            topology: needs.topology,
            assignments: needs.assignments.clone(),
        })
    }

    /// Why a dominating job found no victims, if one did.
    pub fn lookup(&self, key: &Key, job: &Job, needs: &Needs) -> Option<&str> {
        let need = &needs.tasks[0].need;
        self.by_key
            .get(key)?
            .iter()
            .find(|f| {
                f.priority >= job.priority
                    && job.submitted_key() >= f.submitted
                    && need.iter().zip(&f.need).all(|(n, m)| n >= m)
            })
            .map(|f| f.why.as_str())
    }

    pub fn record(&mut self, key: Key, job: &Job, needs: &Needs, why: &str) {
        let list = self.by_key.entry(key).or_default();
        if list.len() >= MAX_FAILURES_PER_KEY {
            list.remove(0);
        }
        list.push(Failure {
            priority: job.priority,
            need: needs.tasks[0].need,
            submitted: job.submitted_key(),
            why: why.to_string(),
        });
    }
}
