//! Within one cycle, a job that found no victims speaks for the jobs after it: things only
//! get harder as a cycle goes on (placements use up room and quota, victims are taken), so
//! a later job of the same queue and pools that needs no less, ranks no higher and was
//! submitted no earlier will not find victims either. Remembering such failures spares the
//! expensive planning for a long backlog behind a full cluster.

use baton_model::ledger::FxMap;

use baton_model::job::Topology;
use baton_model::ledger::Vector;

use crate::needs::Needs;
use crate::order::Candidate;

/// Failures remembered per (queue, pools, kind of job); the oldest is forgotten first.
const MAX_FAILURES_PER_KEY: usize = 64;

/// What a failure may speak for: the same queue, kind of job and pool choices. It
/// borrows the pool choices, so that a lookup (once per waiting job) allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Key<'n> {
    queue: usize,
    not_preemptible: bool,
    topology: Option<Topology>,
    pool_choices: &'n [Vec<usize>],
}

struct Failure {
    priority: i32,
    need: Vector,
    submitted: (u64, u64),
    why: String,
}

/// Failures of jobs with these pool choices.
type ByPoolChoices = (Vec<Vec<usize>>, Vec<Failure>);

#[derive(Default)]
pub struct Failures {
    /// By (queue, not preemptible, topology), then by pool choices.
    by_key: FxMap<(usize, bool, Option<Topology>), Vec<ByPoolChoices>>,
}

impl Failures {
    /// Only single-replica jobs are compared (a gang's shape is more than one vector).
    pub fn key(needs: &Needs, queue: usize, np: bool) -> Option<Key<'_>> {
        let single = needs.tasks.len() == 1 && needs.tasks[0].replicas == 1;
        single.then_some(Key {
            queue,
            not_preemptible: np,
            topology: needs.topology,
            pool_choices: &needs.pool_choices,
        })
    }

    fn list(&self, key: &Key) -> Option<&Vec<Failure>> {
        let lists = self.by_key.get(&(key.queue, key.not_preemptible, key.topology))?;
        lists.iter().find(|(a, _)| a.as_slice() == key.pool_choices).map(|(_, l)| l)
    }

    /// Why a dominating job found no victims, if one did.
    pub fn lookup(&self, key: &Key, c: &Candidate) -> Option<&str> {
        let need = &c.needs.tasks[0].need;
        self.list(key)?
            .iter()
            .find(|f| {
                f.priority >= c.priority && c.submitted >= f.submitted && need.iter().zip(&f.need).all(|(n, m)| n >= m)
            })
            .map(|f| f.why.as_str())
    }

    pub fn record(&mut self, key: Key, c: &Candidate, why: &str) {
        let lists = self.by_key.entry((key.queue, key.not_preemptible, key.topology)).or_default();
        let at = match lists.iter().position(|(a, _)| a.as_slice() == key.pool_choices) {
            Some(i) => i,
            None => {
                lists.push((key.pool_choices.to_vec(), Vec::new()));
                lists.len() - 1
            }
        };
        let list = &mut lists[at].1;
        if list.len() >= MAX_FAILURES_PER_KEY {
            list.remove(0);
        }
        list.push(Failure {
            priority: c.priority,
            need: c.needs.tasks[0].need,
            submitted: c.submitted,
            why: why.to_string(),
        });
    }
}
