//! Submission: a job is refused here only when no allowed pool could ever hold it
//! (docs/policy.md section 7). A job that only its queue's limits hold back is accepted and
//! waits, since quotas can change.

use std::collections::{BTreeMap, BTreeSet};

use super::State;
use crate::command::Outcome;
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{Job, JobId, JobSpec, JobState, PriorityRef, Topology};
use crate::ledger::{Vector, ZERO, add, fits};
use crate::limits::{
    MAX_DURATION_MS, MAX_GPUS_PER_NODE, MAX_JOBS, MAX_REMEMBERED_REQUEST_IDS, MAX_REPLICAS_PER_JOB, MAX_REQUEST_ID_LEN,
    MAX_TASKS_PER_JOB, MAX_TIME_LIMIT_MS,
};
use crate::name::Name;
use crate::resources::{Resources, validate_resource_name};
use crate::runnable::{validate_command, validate_env};
use crate::tenancy::UnixUser;
use crate::topology::TopologyError;

/// Which submit command is applied.
pub(crate) enum Submitter {
    /// `Op::Submit`: as before tenancy (logs written then, the simulator); the job runs as
    /// its token's user when that is a Unix user name, and no bound on jobs is checked.
    Legacy,
    /// `Op::SubmitRunAs`: the user asked for (or the token's), checked, and the bounds.
    RunAs(Option<UnixUser>),
}

impl State {
    pub(crate) fn submit(
        &mut self,
        spec: JobSpec,
        request_id: Option<String>,
        submitter: Submitter,
        ev: &mut Vec<Event>,
    ) -> Result<Outcome, ApplyError> {
        if let Some(duplicate) = self.repeated_request(request_id.as_deref(), &spec.name)? {
            return Ok(duplicate);
        }
        self.check_room_for_a_job()?;
        let (priority, preemptible) = self.validate_submit(&spec)?;
        let run_as = match submitter {
            Submitter::Legacy => self.actor.as_ref().and_then(|a| UnixUser::new(a.as_str()).ok()),
            Submitter::RunAs(asked) => {
                let user = self.resolve_run_as(asked)?;
                self.check_job_bounds(&spec)?;
                user
            }
        };
        let id = self.next_id();
        let seq = self.next_seq();
        let name = spec.name.clone();
        let owner = self.actor.clone();
        let job = new_job(id, spec, (priority, preemptible), (self.d.now_ms, seq), self.d.now_ms);
        self.insert_job(job, owner, run_as);
        self.remember(request_id, id);
        self.job_event(id, EventKind::Submitted, format!("submitted with priority {priority}"), ev);
        Ok(Outcome::Submitted { job: id, name, duplicate: false })
    }

    /// The job (or array) a retried submit already made, if its request id is known;
    /// refuses a malformed id.
    pub(crate) fn repeated_request(
        &self,
        request_id: Option<&str>,
        name: &crate::name::Name,
    ) -> Result<Option<Outcome>, ApplyError> {
        let Some(rid) = request_id else { return Ok(None) };
        if rid.is_empty() || rid.len() > MAX_REQUEST_ID_LEN {
            return Err(ApplyError::invalid("request_id", format!("must be 1 to {MAX_REQUEST_ID_LEN} characters")));
        }
        Ok(self.known_request(rid).map(|id| {
            let name = self.d.jobs.get(&id).map(|j| j.spec.name.clone()).unwrap_or_else(|| name.clone());
            Outcome::Submitted { job: id, name, duplicate: true }
        }))
    }

    pub(crate) fn check_room_for_a_job(&self) -> Result<(), ApplyError> {
        if self.d.jobs.len() >= MAX_JOBS {
            return Err(ApplyError::Limit(format!("at most {MAX_JOBS} jobs are kept; wait for some to finish")));
        }
        Ok(())
    }

    /// The next job id (arrays take theirs from the same counter).
    pub(crate) fn next_id(&mut self) -> JobId {
        let id = self.d.next_job_id;
        self.d.next_job_id += 1;
        id
    }

    pub(crate) fn next_seq(&mut self) -> u64 {
        let seq = self.d.next_submit_seq;
        self.d.next_submit_seq += 1;
        seq
    }

    /// A new job joins the state, owned by `owner` and run as `run_as`.
    pub(crate) fn insert_job(&mut self, job: Job, owner: Option<Name>, run_as: Option<UnixUser>) {
        let (id, name) = (job.id, job.spec.name.clone());
        self.ledger.unfinished.add(&job.spec.queue, owner.as_ref());
        self.d.jobs.insert(id, job);
        self.d.job_names.insert(name, id);
        if let Some(user) = owner {
            self.access.owners.insert(id, user);
        }
        if let Some(user) = run_as {
            self.tenancy.run_as.insert(id, user);
        }
    }

    /// Remembers a submit's request id, the user's own when it carries a token.
    pub(crate) fn remember(&mut self, request_id: Option<String>, id: JobId) {
        if let Some(rid) = request_id {
            match self.actor.clone() {
                Some(user) => {
                    let per_user = self.behaviour >= crate::behaviour::PER_USER_REQUEST_IDS;
                    self.access.remember_request(user, rid, id, per_user)
                }
                None => self.remember_request(rid, id),
            }
        }
    }

    /// `Op::SubmitAfter`: the dependencies are resolved first (a refusal changes nothing),
    /// then the job is submitted as by `SubmitRunAs` and held until they hold.
    pub(crate) fn submit_after(
        &mut self,
        spec: JobSpec,
        request_id: Option<String>,
        run_as: Option<UnixUser>,
        after: Vec<crate::after::After>,
        ev: &mut Vec<Event>,
    ) -> Result<Outcome, ApplyError> {
        let waits = self.resolve_after(&spec.name, &after)?;
        let outcome = self.submit(spec, request_id, Submitter::RunAs(run_as), ev)?;
        if let Outcome::Submitted { job, duplicate: false, .. } = &outcome {
            self.hold(*job, waits, ev);
        }
        Ok(outcome)
    }

    /// The job a request id already made: the user's own ids when the submit carries a
    /// token, so one user's id never finds another user's job.
    fn known_request(&self, rid: &str) -> Option<u64> {
        match &self.actor {
            Some(user) => self.access.request(user, rid),
            None => self.d.request_ids.get(rid).copied(),
        }
    }

    fn remember_request(&mut self, rid: String, id: u64) {
        self.d.request_ids.insert(rid.clone(), id);
        self.d.request_order.push_back(rid);
        while self.d.request_order.len() > MAX_REMEMBERED_REQUEST_IDS {
            if let Some(old) = self.d.request_order.pop_front() {
                self.d.request_ids.remove(&old);
            }
        }
    }

    /// Checks a job against the cluster; returns its resolved priority and preemptibility.
    pub fn validate_submit(&self, spec: &JobSpec) -> Result<(i32, bool), ApplyError> {
        if let Some(old) = self.d.job_names.get(&spec.name)
            && !self.d.jobs[old].state.is_finished()
        {
            return Err(ApplyError::Exists { kind: "job".into(), name: spec.name.to_string() });
        }
        self.check_name_free_of_arrays(&spec.name)?;
        if !self.d.queues.contains_key(&spec.queue) {
            return Err(ApplyError::unknown("queue", &spec.queue));
        }
        let resolved = match &spec.priority {
            PriorityRef::Class(c) => {
                let class = self.d.classes.get(c).ok_or_else(|| ApplyError::unknown("priority class", c))?;
                (class.value, class.preemptible)
            }
            PriorityRef::Value(v) => (*v, true),
        };
        validate_shape(spec)?;
        self.check_pools(spec)?;
        self.check_feasible(spec)?;
        Ok(resolved)
    }

    fn check_pools(&self, spec: &JobSpec) -> Result<(), ApplyError> {
        for p in spec.pools.iter().flatten() {
            if !self.pool_has_nodes(p) {
                return Err(ApplyError::unknown("pool", p));
            }
        }
        for (i, t) in spec.tasks.iter().enumerate() {
            for p in t.pools.iter().flatten() {
                if !self.pool_has_nodes(p) {
                    return Err(ApplyError::unknown("pool", p));
                }
                if let Some(job_pools) = &spec.pools
                    && !job_pools.contains(p)
                {
                    let field = format!("tasks[{i}].pools");
                    return Err(ApplyError::invalid(field, format!("pool {p} is not among the job's pools")));
                }
            }
        }
        Ok(())
    }

    fn pool_has_nodes(&self, pool: &crate::name::Name) -> bool {
        self.ledger.pool(pool.as_str()).is_some_and(|p| !self.ledger.pools[p].shapes.is_empty())
    }

    /// Pool indices a task may use, in preference order.
    pub fn task_pools(&self, spec: &JobSpec, task: usize) -> Vec<usize> {
        let l = &self.ledger;
        let names = spec.tasks[task].pools.as_ref().or(spec.pools.as_ref());
        match names {
            Some(names) => names.iter().filter_map(|n| l.pool(n.as_str())).collect(),
            None => (0..l.pools.len()).filter(|&p| !l.pools[p].shapes.is_empty()).collect(),
        }
    }

    fn check_feasible(&self, spec: &JobSpec) -> Result<(), ApplyError> {
        let l = &self.ledger;
        let mut gang = ZERO;
        let mut gang_pools = BTreeSet::new();
        for (i, t) in spec.tasks.iter().enumerate() {
            let need = l.kinds.vector(&t.resources).ok_or_else(|| self.missing_resource(i, t))?;
            let pools = self.task_pools(spec, i);
            gang_pools.extend(pools.iter().copied());
            let shapes: Vec<&(Vector, u64)> = pools.iter().flat_map(|&p| &l.pools[p].shapes).collect();
            if !shapes.iter().any(|(c, _)| fits(&need, c)) {
                return Err(ApplyError::Impossible(format!(
                    "task {}: one replica needs {}, more than any node in its pools has",
                    t.name, t.resources
                )));
            }
            let room = shapes
                .iter()
                .map(|(c, n)| replicas_fitting(&need, c).saturating_mul(*n))
                .fold(0u64, u64::saturating_add);
            if room < u64::from(t.replicas) {
                return Err(ApplyError::Impossible(format!(
                    "task {}: {} replicas of {} are more than all nodes in its pools could ever hold ({room})",
                    t.name, t.replicas, t.resources
                )));
            }
            for _ in 0..t.replicas {
                add(&mut gang, &need);
            }
        }
        let mut total = ZERO;
        for &p in &gang_pools {
            add(&mut total, &l.pools[p].total);
        }
        if let Some(k) = (0..l.kinds.len()).find(|&k| gang[k] > total[k]) {
            let h = |v| l.kinds.human(k, v);
            return Err(ApplyError::Impossible(format!(
                "the gang needs {} {} in all, but its pools have {} in all",
                h(gang[k]),
                l.kinds.name(k),
                h(total[k])
            )));
        }
        self.check_topology(spec, &gang, &gang_pools)
    }

    /// Why task `i` asks for a resource no node has. An unknown MIG profile is a mistake in
    /// the request (decisions.md section 11): the error names the field and the profiles the
    /// cluster's nodes offer.
    fn missing_resource(&self, i: usize, t: &crate::job::TaskSpec) -> ApplyError {
        let l = &self.ledger;
        let missing = t.resources.names().find(|n| l.kinds.index(n).is_none()).unwrap_or("?");
        if !crate::resources::is_slice_profile(missing) {
            return ApplyError::Impossible(format!("task {}: no node has resource {missing:?}", t.name));
        }
        let offered: Vec<&str> =
            (0..l.kinds.len()).map(|k| l.kinds.name(k)).filter(|n| crate::resources::is_slice_profile(n)).collect();
        let offered = if offered.is_empty() { "none".to_string() } else { offered.join(", ") };
        ApplyError::invalid(
            format!("tasks[{i}].resources.{missing}"),
            format!("unknown MIG profile {missing}: the cluster's nodes offer {offered}"),
        )
    }

    fn check_topology(&self, spec: &JobSpec, gang: &Vector, pools: &BTreeSet<usize>) -> Result<(), ApplyError> {
        let Some(t) = spec.topology else { return Ok(()) };
        if let Topology::Levels(need) = t {
            self.topology.check_need(&need).map_err(|e| ApplyError::invalid("topology", e))?;
        }
        let Some(required) = t.required() else { return Ok(()) };
        let l = &self.ledger;
        let in_pools = |n: &&crate::ledger::NodeAcct| pools.contains(&n.pool);
        let fits_one = if required.is_node() {
            l.nodes.iter().filter(in_pools).any(|n| fits(gang, &n.capacity))
        } else {
            let level = l.level(&required).ok_or_else(|| {
                let declared = self.topology.levels().iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ");
                ApplyError::invalid("topology", TopologyError::Undeclared { level: required.to_string(), declared })
            })?;
            let mut per_domain: Vec<Vector> = vec![ZERO; l.levels[level].domains.len()];
            for n in l.nodes.iter().filter(in_pools) {
                add(&mut per_domain[n.domains[level] as usize], &n.capacity);
            }
            per_domain.iter().any(|c| fits(gang, c))
        };
        if fits_one {
            return Ok(());
        }
        let on = if required.is_node() { "on" } else { "in" };
        Err(ApplyError::Impossible(format!(
            "topology {required}: the whole gang ({}) fits {on} no single {required}",
            l.kinds.resources(gang)
        )))
    }
}

/// A pending job as submission (or an array's next element) makes it: `rank` is its
/// resolved (priority, preemptible), `submitted` its (time, sequence).
pub(crate) fn new_job(id: JobId, spec: JobSpec, rank: (i32, bool), submitted: (u64, u64), now_ms: u64) -> Job {
    Job {
        id,
        spec,
        priority: rank.0,
        preemptible: rank.1,
        submitted_ms: submitted.0,
        submit_seq: submitted.1,
        state: JobState::Pending,
        attempt: 0,
        replicas: Vec::new(),
        lent_from: Vec::new(),
        started_ms: 0,
        pending_since_ms: now_ms,
        progress_mark_ms: 0,
        stopping: None,
        ended_ranks: BTreeMap::new(),
        preempted_by: None,
        suspended_for: None,
        suspended_victims: Vec::new(),
        reason: crate::job::UNSEEN_REASON.into(),
        has_checkpoint: false,
        exit_code: None,
        finished_ms: None,
        events: Default::default(),
    }
}

/// How many replicas of `need` fit on an empty node of capacity `cap`.
pub fn replicas_fitting(need: &Vector, cap: &Vector) -> u64 {
    need.iter().zip(cap).filter(|(n, _)| **n > 0).map(|(n, c)| c / n).min().unwrap_or(u64::MAX)
}

/// A replica's share of one GPU (decisions.md section 11): less than one GPU, and never
/// with whole GPUs or MIG slices, whose devices it would share.
fn validate_gpu_fraction(i: usize, r: &Resources) -> Result<(), ApplyError> {
    let fraction = r.gpu_fraction();
    if fraction == 0 {
        return Ok(());
    }
    let field = format!("tasks[{i}].resources.gpu");
    if fraction >= 1000 {
        return Err(ApplyError::invalid(field, "a fraction of one shared GPU is less than 1 (0.5 or 500m)"));
    }
    if r.gpus() > 0 {
        return Err(ApplyError::invalid(field, "a replica asks whole GPUs or a fraction of one, never both"));
    }
    if let Some((profile, _)) = r.slices().next() {
        return Err(ApplyError::invalid(
            field,
            format!("a replica asks MIG slices or a fraction of a shared GPU, never both (it asks {profile})"),
        ));
    }
    Ok(())
}

fn validate_shape(spec: &JobSpec) -> Result<(), ApplyError> {
    if spec.tasks.is_empty() {
        return Err(ApplyError::invalid("tasks", "a job needs at least one task"));
    }
    if spec.tasks.len() > MAX_TASKS_PER_JOB {
        return Err(ApplyError::invalid("tasks", format!("at most {MAX_TASKS_PER_JOB} tasks")));
    }
    let mut names = BTreeSet::new();
    let mut replicas: u64 = 0;
    for (i, t) in spec.tasks.iter().enumerate() {
        if !names.insert(&t.name) {
            return Err(ApplyError::invalid(format!("tasks[{i}].name"), format!("task {} appears twice", t.name)));
        }
        if t.replicas == 0 {
            return Err(ApplyError::invalid(format!("tasks[{i}].replicas"), "must be at least 1"));
        }
        replicas += u64::from(t.replicas);
        for n in t.resources.names() {
            validate_resource_name(n).map_err(|e| ApplyError::invalid(format!("tasks[{i}].resources"), e))?;
        }
        validate_gpu_fraction(i, &t.resources)?;
        if t.resources.gpus() > MAX_GPUS_PER_NODE {
            return Err(ApplyError::Impossible(format!(
                "task {}: a replica may use at most {MAX_GPUS_PER_NODE} GPUs",
                t.name
            )));
        }
    }
    if replicas > u64::from(MAX_REPLICAS_PER_JOB) {
        return Err(ApplyError::invalid("replicas", format!("at most {MAX_REPLICAS_PER_JOB} replicas per job")));
    }
    for (field, ms) in [("grace", spec.grace_ms), ("min_runtime", spec.min_runtime_ms)] {
        if ms > MAX_DURATION_MS {
            return Err(ApplyError::invalid(field, "may not exceed a week"));
        }
    }
    if let Some(t) = spec.time_limit_ms
        && !(1..=MAX_TIME_LIMIT_MS).contains(&t)
    {
        return Err(ApplyError::invalid("time_limit", "must be above 0 and at most a year"));
    }
    validate_command(&spec.command)?;
    validate_env(&spec.env)?;
    if spec.checkpoint_signal.as_ref().is_some_and(|s| s.is_empty() || s.len() > 16) {
        return Err(ApplyError::invalid("checkpoint_signal", "a signal name such as SIGTERM or SIGUSR1"));
    }
    Ok(())
}
