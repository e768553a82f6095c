//! Job arrays in the state (decisions.md section 13; the record is `crate::array`).
//!
//! An array's elements are created as jobs only as they come within reach of running: at
//! submission, and whenever one of its elements starts or ends, the command that did it
//! creates the next ones (`fill_arrays`, run once the command's own change is done), until
//! `max_running` elements are unfinished or [`ARRAY_PENDING_WINDOW`] are pending. So no
//! element costs a log entry, and the scheduler sees only the elements it may start.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::State;
use super::submit::new_job;
use crate::after::{After, Standing};
use crate::array::{ARRAY_INDEX_ENV, ArraySpec, JobArray, element_name, split_element_name};
use crate::command::Outcome;
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobSpec, JobState};
use crate::limits::{ARRAY_PENDING_WINDOW, MAX_ARRAYS, MAX_ENV_VARS, MAX_JOBS, RETAINED_FINISHED_ARRAYS};
use crate::name::Name;
use crate::tenancy::UnixUser;

/// Every array, and which array each kept element job belongs to. Replicated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrays {
    records: BTreeMap<JobId, JobArray>,
    /// Element job -> (array, index), for every element job the state keeps.
    elements: BTreeMap<JobId, (JobId, u32)>,
}

impl Arrays {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// Derived from [`Arrays`] (never stored): the newest array of each name, and the arrays
/// whose elements changed in the command being applied.
#[derive(Debug, Clone, Default)]
pub(crate) struct ArrayIndex {
    names: BTreeMap<Name, JobId>,
    to_fill: BTreeSet<JobId>,
}

impl ArrayIndex {
    fn of(arrays: &Arrays) -> ArrayIndex {
        let names = arrays.records.values().map(|a| (a.spec.name.clone(), a.id)).collect();
        ArrayIndex { names, to_fill: BTreeSet::new() }
    }

    /// A refused command created nothing.
    pub(crate) fn forget_changed(&mut self) {
        self.to_fill.clear();
    }
}

impl State {
    pub fn arrays(&self) -> &BTreeMap<JobId, JobArray> {
        &self.arrays.records
    }

    pub fn array(&self, id: JobId) -> Option<&JobArray> {
        self.arrays.records.get(&id)
    }

    /// The newest array of that name.
    pub fn array_by_name(&self, name: &str) -> Option<&JobArray> {
        let name = Name::new(name).ok()?;
        self.array_index.names.get(&name).and_then(|id| self.arrays.records.get(id))
    }

    /// The newer of the job and the array called `name` (ids grow with submission, and both
    /// cannot be unfinished at once): what a name in a dependency or a cancel means.
    pub fn newest_named(&self, name: &Name) -> Option<JobId> {
        let array = self.array_index.names.get(name).copied();
        self.d.job_names.get(name).copied().max(array)
    }

    /// The array a job is an element of, and its index.
    pub fn element_of(&self, job: JobId) -> Option<(&JobArray, u32)> {
        let (array, index) = self.arrays.elements.get(&job)?;
        Some((self.arrays.records.get(array)?, *index))
    }

    /// `Op::SubmitArray`: checked whole first (a refusal changes nothing), then one record;
    /// its first elements are created once the command is done.
    pub(crate) fn submit_array(
        &mut self,
        spec: JobSpec,
        array: ArraySpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
        after: Vec<After>,
        ev: &mut Vec<Event>,
    ) -> Result<Outcome, ApplyError> {
        if let Some(duplicate) = self.repeated_request(request_id.as_deref(), &spec.name)? {
            return Ok(duplicate);
        }
        let (priority, preemptible) = self.check_array(&spec, &array)?;
        let run_as = self.resolve_run_as(run_as)?;
        self.check_job_bounds(&spec)?;
        let waits = self.resolve_after(&spec.name, &after)?;
        // At the bound, the oldest finished array nothing waits for makes room (`check_array`
        // refused the submit if there is none).
        if self.arrays.records.len() >= MAX_ARRAYS
            && let Some(old) = self.prunable_array()
        {
            self.forget_array(old);
        }
        let id = self.next_id();
        let seq = self.next_seq();
        let name = spec.name.clone();
        let record = JobArray {
            id,
            spec,
            array,
            priority,
            preemptible,
            submitted_ms: self.d.now_ms,
            submit_seq: seq,
            run_as,
            created: 0,
            live: BTreeMap::new(),
            tally: Default::default(),
            cancelled: false,
            reason: waiting_reason(&array),
            finished_ms: None,
        };
        if let Some(user) = self.actor.clone() {
            self.access.owners.insert(id, user);
        }
        self.arrays.records.insert(id, record);
        self.array_index.names.insert(name.clone(), id);
        self.array_index.to_fill.insert(id);
        self.remember(request_id, id);
        let n = array.count;
        ev.push(self.array_event(
            id,
            EventKind::Submitted,
            format!("array of {n} elements submitted ({})", array.spelled()),
        ));
        self.hold(id, waits, ev);
        Ok(Outcome::Submitted { job: id, name, duplicate: false })
    }

    /// Refuses what could never run as an array, with the field named.
    fn check_array(&self, spec: &JobSpec, array: &ArraySpec) -> Result<(i32, bool), ApplyError> {
        array.validate().map_err(|(field, e)| ApplyError::invalid(field, e))?;
        if self.arrays.records.len() >= MAX_ARRAYS {
            self.prunable_array().ok_or_else(|| {
                ApplyError::Limit(format!("at most {MAX_ARRAYS} arrays are kept; wait for some to finish"))
            })?;
        }
        element_name(&spec.name, array.last()).map_err(|e| ApplyError::invalid("name", e))?;
        if spec.env.len() >= MAX_ENV_VARS {
            let e = format!("at most {} variables: each element also gets {ARRAY_INDEX_ENV}", MAX_ENV_VARS - 1);
            return Err(ApplyError::invalid("env", e));
        }
        let ranked = self.validate_submit(spec)?;
        self.check_elements_free(&spec.name, array)?;
        Ok(ranked)
    }

    /// No unfinished job has an element's name already.
    fn check_elements_free(&self, name: &Name, array: &ArraySpec) -> Result<(), ApplyError> {
        let taken = |id: &JobId| self.d.jobs.get(id).is_some_and(|j| !j.state.is_finished());
        let clash = if (array.count as usize) <= self.d.job_names.len() {
            (array.first..=array.last())
                .filter_map(|i| element_name(name, i).ok())
                .find(|n| self.d.job_names.get(n).is_some_and(taken))
        } else {
            let in_range = |n: &Name| {
                split_element_name(n).is_some_and(|(b, i)| &b == name && (array.first..=array.last()).contains(&i))
            };
            self.d.job_names.iter().find(|(n, id)| in_range(n) && taken(id)).map(|(n, _)| n.clone())
        };
        match clash {
            Some(n) => Err(ApplyError::Exists { kind: "job".into(), name: format!("{n} (an element's name)") }),
            None => Ok(()),
        }
    }

    /// A job (or an array) may not take the name of an unfinished array or of one of its
    /// elements to come.
    pub(crate) fn check_name_free_of_arrays(&self, name: &Name) -> Result<(), ApplyError> {
        if let Some(a) = self.array_index.names.get(name).and_then(|id| self.arrays.records.get(id))
            && !a.is_finished()
        {
            return Err(ApplyError::Exists { kind: "array".into(), name: name.to_string() });
        }
        if let Some((base, index)) = split_element_name(name)
            && let Some(a) = self.array_index.names.get(&base).and_then(|id| self.arrays.records.get(id))
            && !a.is_finished()
            && (a.array.first..=a.array.last()).contains(&index)
        {
            return Err(ApplyError::Exists { kind: "array element".into(), name: name.to_string() });
        }
        Ok(())
    }

    /// `Op::CancelArray`: every unfinished element is cancelled and no other is created.
    pub(crate) fn cancel_array(&mut self, id: JobId, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        let a = self.arrays.records.get(&id).ok_or_else(|| ApplyError::unknown("array", id))?;
        if a.cancelled || a.is_finished() {
            return Ok(());
        }
        self.end_array(id, "cancelled by a person".into(), ev);
        Ok(())
    }

    /// Cancels what is left of an array: its unfinished elements, and the ones not created.
    pub(crate) fn end_array(&mut self, id: JobId, why: String, ev: &mut Vec<Event>) {
        let Some(a) = self.arrays.records.get_mut(&id) else { return };
        let never = a.array.count - a.created;
        a.cancelled = true;
        a.tally.cancelled += never;
        a.tally.ended_unstarted += never;
        a.reason = why.clone();
        let live: Vec<JobId> = a.live.values().copied().collect();
        ev.push(self.array_event(id, EventKind::Cancelled, why.clone()));
        self.forget_waits(id);
        for job in live {
            // `finish` tallies the element.
            self.finish(job, JobState::Cancelled, None);
            self.job_event(job, EventKind::Cancelled, format!("its array was cancelled: {why}"), ev);
        }
        self.array_changed(id);
    }

    /// An element started: the first start of one makes room for the next.
    pub(crate) fn array_element_started(&mut self, job: JobId, first: bool) {
        let Some(&(id, _)) = self.arrays.elements.get(&job) else { return };
        if first && let Some(a) = self.arrays.records.get_mut(&id) {
            a.tally.started += 1;
        }
        self.array_changed(id);
    }

    /// An element ended `state`; `started`: it had started at least once.
    pub(crate) fn array_element_ended(&mut self, job: JobId, state: JobState, started: bool) {
        let Some(&(id, index)) = self.arrays.elements.get(&job) else { return };
        let now = self.d.now_ms;
        let Some(a) = self.arrays.records.get_mut(&id) else { return };
        if a.live.remove(&index).is_none() {
            return;
        }
        match state {
            JobState::Succeeded => a.tally.succeeded += 1,
            JobState::Failed => a.tally.failed += 1,
            _ => a.tally.cancelled += 1,
        }
        if !started {
            a.tally.ended_unstarted += 1;
        }
        if a.is_finished() {
            a.finished_ms = Some(now);
        }
        self.array_changed(id);
    }

    /// An element kept no more (pruned with the finished jobs).
    pub(crate) fn forget_element(&mut self, job: JobId) {
        self.arrays.elements.remove(&job);
    }

    fn array_changed(&mut self, id: JobId) {
        self.array_index.to_fill.insert(id);
        self.note_changed(id);
    }

    /// Creates the elements the command made room for, once its own change is done.
    pub(crate) fn fill_arrays(&mut self, ev: &mut Vec<Event>) {
        let ids = std::mem::take(&mut self.array_index.to_fill);
        for id in ids {
            while self.may_create(id) {
                self.create_element(id, ev);
            }
            self.prune_arrays(id);
        }
    }

    /// Room for the next element of `id`: not held, not cancelled, under its
    /// `max_running`, under the window of elements that never started, under the bound on jobs.
    fn may_create(&self, id: JobId) -> bool {
        let Some(a) = self.arrays.records.get(&id) else { return false };
        // Created, never started, not ended (while it is not cancelled, every element that
        // ended unstarted was created).
        let never_started = a.created.saturating_sub(a.tally.started + a.tally.ended_unstarted);
        a.not_created() > 0
            && !self.held(id)
            && a.array.max_running.is_none_or(|m| a.live.len() < m as usize)
            && never_started < ARRAY_PENDING_WINDOW
            && self.d.jobs.len() < MAX_JOBS
    }

    fn create_element(&mut self, id: JobId, ev: &mut Vec<Event>) {
        let a = &self.arrays.records[&id];
        let index = a.array.first + a.created;
        let mut spec = a.spec.clone();
        spec.name = element_name(&a.spec.name, index).expect("checked at submission for the last index");
        spec.env.insert(ARRAY_INDEX_ENV.into(), index.to_string());
        let (rank, submitted) = ((a.priority, a.preemptible), (a.submitted_ms, a.submit_seq));
        let (owner, run_as) = (self.access.owner(id).cloned(), a.run_as.clone());
        let array_name = a.spec.name.clone();
        let job = self.next_id();
        self.insert_job(new_job(job, spec, rank, submitted, self.d.now_ms), owner, run_as);
        let a = self.arrays.records.get_mut(&id).expect("the array exists");
        a.created += 1;
        a.live.insert(index, job);
        self.arrays.elements.insert(job, (id, index));
        self.job_event(job, EventKind::Submitted, format!("created as element {index} of array {array_name}"), ev);
    }

    /// Forgets the oldest finished arrays beyond the retention, except those waited for.
    fn prune_arrays(&mut self, id: JobId) {
        if !self.arrays.records.get(&id).is_some_and(JobArray::is_finished) {
            return;
        }
        let finished = self.arrays.records.values().filter(|a| a.is_finished()).count();
        for _ in RETAINED_FINISHED_ARRAYS..finished {
            let Some(old) = self.prunable_array() else { return };
            self.forget_array(old);
        }
    }

    /// The oldest finished array nothing waits for.
    fn prunable_array(&self) -> Option<JobId> {
        self.arrays.records.values().find(|a| a.is_finished() && !self.wait_index.is_waited_for(a.id)).map(|a| a.id)
    }

    fn forget_array(&mut self, id: JobId) {
        self.access.owners.remove(&id);
        if let Some(a) = self.arrays.records.remove(&id)
            && self.array_index.names.get(&a.spec.name) == Some(&id)
        {
            self.array_index.names.remove(&a.spec.name);
        }
        self.arrays.elements.retain(|_, (array, _)| *array != id);
    }

    /// Where a dependency on job or array `id` stands.
    pub(crate) fn standing_of(&self, id: JobId, when: crate::after::When) -> Standing {
        if let Some(j) = self.d.jobs.get(&id) {
            return crate::after::standing(when, j);
        }
        match self.arrays.records.get(&id) {
            Some(a) => a.standing(when),
            None => Standing::Broken(JobState::Cancelled),
        }
    }

    /// A held array's dependencies hold: its elements may be created.
    pub(crate) fn release_array(&mut self, id: JobId, what: String, ev: &mut Vec<Event>) {
        if let Some(a) = self.arrays.records.get_mut(&id) {
            a.reason = waiting_reason(&a.array);
        }
        self.array_index.to_fill.insert(id);
        ev.push(self.array_event(id, EventKind::DependenciesMet, what));
    }

    pub(crate) fn set_array_reason(&mut self, id: JobId, reason: String) {
        if let Some(a) = self.arrays.records.get_mut(&id) {
            a.reason = super::lifecycle::clip(reason);
        }
    }

    pub(crate) fn is_array(&self, id: JobId) -> bool {
        self.arrays.records.contains_key(&id)
    }

    /// An event of the array itself (it has no history of its own: each element has one).
    fn array_event(&self, id: JobId, kind: EventKind, message: String) -> Event {
        let name = self.arrays.records.get(&id).map(|a| a.spec.name.clone());
        Event { at_ms: self.d.now_ms, job: name, job_id: None, node: None, kind, message: self.by_actor(message) }
    }

    /// Snapshots: every element kept is a job, every live element is unfinished and its
    /// array's, and every element an array lists as live is recorded as its.
    pub(super) fn restore_arrays<E: serde::de::Error>(&mut self, arrays: Arrays) -> Result<(), E> {
        for a in arrays.records.values() {
            if let Some((index, job)) = a.live.iter().find(|(i, j)| arrays.elements.get(j) != Some(&(a.id, **i))) {
                return Err(E::custom(format!(
                    "inconsistent state: element {index} of array {} (job {job}) is not recorded as its",
                    a.id
                )));
            }
        }
        for (job, (array, index)) in &arrays.elements {
            let a = arrays.records.get(array).ok_or_else(|| {
                E::custom(format!("inconsistent state: job {job} is an element of array {array}, which is not kept"))
            })?;
            let live = a.live.get(index) == Some(job);
            let unfinished = self.d.jobs.get(job).is_some_and(|j| !j.state.is_finished());
            if !self.d.jobs.contains_key(job) || live != unfinished {
                return Err(E::custom(format!("inconsistent state: element {index} of array {array} (job {job})")));
            }
        }
        self.array_index = ArrayIndex::of(&arrays);
        self.arrays = arrays;
        Ok(())
    }
}

/// Why elements not created yet wait: the array's bound, or (without one) the window.
fn waiting_reason(a: &ArraySpec) -> String {
    match a.max_running {
        Some(m) => format!("at most {m} elements run at once (max_running); the next is created as one ends"),
        None => format!("created as earlier elements start ({ARRAY_PENDING_WINDOW} wait as jobs at a time)"),
    }
}
