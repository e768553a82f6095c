//! Jobs that wait for others (decisions.md section 13). A job submitted with dependencies
//! is Pending and held: a cycle never considers it (`State::held`) until every dependency
//! holds; once one can no longer hold, it ends Cancelled with the reason naming it.
//!
//! Only the dependencies that do not hold yet are kept ([`Waits`]), replicated; an index
//! of who waits for whom is derived. The jobs whose start or end may settle a dependency
//! are noted as they change (`note_changed`) and settled once the command's own change is
//! done (`settle_waiting`), so a cancellation that cascades down a chain happens within the
//! command that ended the first job.

use std::collections::{BTreeMap, BTreeSet};

use super::State;
use crate::after::{After, JobRef, Standing, Wait};
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobState};
use crate::limits::MAX_DEPENDENCIES_PER_JOB;

/// The dependencies that do not hold yet, by waiting job. Replicated.
pub type Waits = BTreeMap<JobId, Vec<Wait>>;

/// Who waits for each job (derived from [`Waits`]), and the jobs changed by the command
/// being applied whose waiters must be looked at (never stored).
#[derive(Debug, Clone, Default)]
pub(crate) struct WaitIndex {
    waited_by: BTreeMap<JobId, BTreeSet<JobId>>,
    changed: Vec<JobId>,
}

impl WaitIndex {
    pub(crate) fn of(waits: &Waits) -> WaitIndex {
        let mut ix = WaitIndex::default();
        for (&waiter, list) in waits {
            for w in list {
                ix.waited_by.entry(w.job).or_default().insert(waiter);
            }
        }
        ix
    }

    /// A refused command changed nothing: nothing to settle.
    pub(crate) fn forget_changed(&mut self) {
        self.changed.clear();
    }

    /// Some held job waits for `id` (kept until settled, even past the finished retention).
    pub(crate) fn is_waited_for(&self, id: JobId) -> bool {
        self.waited_by.contains_key(&id)
    }

    fn forget(&mut self, waiter: JobId, list: &[Wait]) {
        for w in list {
            if let Some(set) = self.waited_by.get_mut(&w.job) {
                set.remove(&waiter);
                if set.is_empty() {
                    self.waited_by.remove(&w.job);
                }
            }
        }
    }
}

impl State {
    /// The job waits for others: no cycle considers it and no plan may place it.
    pub fn held(&self, id: JobId) -> bool {
        self.waits.contains_key(&id)
    }

    /// The dependencies of `id` that do not hold yet (empty when it is not held).
    pub fn waits_of(&self, id: JobId) -> &[Wait] {
        self.waits.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Every held job's dependencies, for snapshots and checks.
    pub fn waits(&self) -> &Waits {
        &self.waits
    }

    /// Resolves what a submit names to job ids, refusing what cannot be waited for with
    /// the field named: an unknown job, the job itself, too many.
    pub(crate) fn resolve_after(&self, own_name: &crate::name::Name, after: &[After]) -> Result<Vec<Wait>, ApplyError> {
        if after.len() > MAX_DEPENDENCIES_PER_JOB {
            return Err(ApplyError::invalid(
                "after",
                format!("at most {MAX_DEPENDENCIES_PER_JOB} dependencies per job"),
            ));
        }
        let mut out: Vec<Wait> = Vec::with_capacity(after.len());
        for (i, a) in after.iter().enumerate() {
            let w = Wait { job: self.resolve_one(i, own_name, &a.job)?, when: a.when };
            if !out.contains(&w) {
                out.push(w);
            }
        }
        Ok(out)
    }

    /// The job `after[i]` names: refused, with the field named, when it is the job itself
    /// or not known.
    pub(crate) fn resolve_one(
        &self,
        i: usize,
        own_name: &crate::name::Name,
        job: &JobRef,
    ) -> Result<JobId, ApplyError> {
        let field = format!("after[{i}].job");
        let id = match job {
            JobRef::Name(n) if n == own_name => {
                return Err(ApplyError::invalid(field, format!("job {n} cannot wait for itself")));
            }
            JobRef::Name(n) => self.newest_named(n),
            JobRef::Id(id) => Some(*id).filter(|id| self.d.jobs.contains_key(id) || self.is_array(*id)),
        };
        id.ok_or_else(|| unknown_dependency(i, job))
    }

    /// Holds a just-submitted job until `waits` hold, or cancels it if one never can.
    pub(crate) fn hold(&mut self, id: JobId, waits: Vec<Wait>, ev: &mut Vec<Event>) {
        if waits.is_empty() {
            return;
        }
        for w in &waits {
            self.wait_index.waited_by.entry(w.job).or_default().insert(id);
        }
        self.waits.insert(id, waits);
        self.settle(id, ev);
    }

    /// `id` started or ended: its waiters are looked at once the command is applied.
    pub(crate) fn note_changed(&mut self, id: JobId) {
        if self.wait_index.waited_by.contains_key(&id) {
            self.wait_index.changed.push(id);
        }
    }

    /// A job that ends while it waits waits no more.
    pub(crate) fn forget_waits(&mut self, id: JobId) {
        if let Some(list) = self.waits.remove(&id) {
            self.wait_index.forget(id, &list);
        }
    }

    /// Settles every waiter of the jobs the command changed, and of the jobs that ends.
    pub(crate) fn settle_waiting(&mut self, ev: &mut Vec<Event>) {
        while let Some(changed) = self.wait_index.changed.pop() {
            let waiters: Vec<JobId> =
                self.wait_index.waited_by.get(&changed).map(|s| s.iter().copied().collect()).unwrap_or_default();
            for w in waiters {
                self.settle(w, ev);
            }
        }
    }

    /// Drops the dependencies of `id` that hold; releases it when none is left, cancels it
    /// when one can no longer hold.
    fn settle(&mut self, id: JobId, ev: &mut Vec<Event>) {
        let Some(list) = self.waits.get(&id).cloned() else {
            return;
        };
        let mut left = Vec::with_capacity(list.len());
        for w in &list {
            match self.standing_of(w.job, w.when) {
                Standing::Holds => {}
                Standing::Waits => left.push(*w),
                Standing::Broken(state) => return self.cancel_unmet(id, *w, state, ev),
            }
        }
        self.wait_index.forget(id, &list);
        if left.is_empty() {
            self.waits.remove(&id);
            self.release_held(id, &list, ev);
        } else {
            for w in &left {
                self.wait_index.waited_by.entry(w.job).or_default().insert(id);
            }
            let reason = self.waiting_reason(&left);
            self.set_reason(id, reason);
            self.waits.insert(id, left);
        }
    }

    fn release_held(&mut self, id: JobId, met: &[Wait], ev: &mut Vec<Event>) {
        let what: Vec<String> = met.iter().map(|w| self.spelled(w)).collect();
        let what = format!("dependencies hold: {}", what.join(", "));
        if self.is_array(id) {
            return self.release_array(id, what, ev);
        }
        let now = self.d.now_ms;
        let job = self.d.jobs.get_mut(&id).expect("a held job exists");
        if job.state == JobState::Pending {
            // `reserve_after` counts from the moment its dependencies hold (section 13).
            job.pending_since_ms = now;
            job.reason = "its dependencies hold; waiting for the next scheduling cycle".into();
        }
        self.job_event(id, EventKind::DependenciesMet, what, ev);
    }

    fn cancel_unmet(&mut self, id: JobId, w: Wait, state: JobState, ev: &mut Vec<Event>) {
        let dep = self.name_of(w.job);
        let why = format!(
            "its dependency {} can no longer hold: {dep} ended {} (it waited for {dep} {})",
            self.spelled(&w),
            state.as_str(),
            w.when.describe()
        );
        if self.is_array(id) {
            return self.end_array(id, why, ev);
        }
        // `finish` forgets its waits and notes it for its own waiters.
        self.finish(id, JobState::Cancelled, None);
        self.set_reason(id, why.clone());
        self.job_event(id, EventKind::Cancelled, why, ev);
    }

    /// `ok:prep`, as a user writes it.
    fn spelled(&self, w: &Wait) -> String {
        format!("{}:{}", w.when.as_str(), self.name_of(w.job))
    }

    /// "waiting for prep to succeed, clean to end".
    pub(crate) fn waiting_reason(&self, left: &[Wait]) -> String {
        const NAMED: usize = 4;
        let mut parts: Vec<String> =
            left.iter().take(NAMED).map(|w| format!("{} {}", self.name_of(w.job), w.when.describe())).collect();
        if left.len() > NAMED {
            parts.push(format!("and {} more", left.len() - NAMED));
        }
        format!("waiting for {} (dependencies; not considered until they hold)", parts.join(", "))
    }
}

/// The refusal of a dependency on a job that is not known, or that the submitter may not
/// see: the same words, so a refusal tells nothing of jobs hidden from them.
pub(crate) fn unknown_dependency(i: usize, job: &JobRef) -> ApplyError {
    ApplyError::invalid(format!("after[{i}].job"), format!("no job {job} is known"))
}
