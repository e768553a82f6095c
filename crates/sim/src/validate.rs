//! Cross-references and impossible requests, checked before anything is simulated: the
//! configured cluster is built here through the same commands a live cluster takes.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::after::JobRef;
use baton_model::command::{Command, Op};
use baton_model::error::ApplyError;
use baton_model::job::PriorityRef;
use baton_model::limits::MAX_DEPENDENCIES_PER_JOB;
use baton_model::name::Name;
use baton_model::state::State;

use crate::de::{Cx, InputError, R};
use crate::scenario::{Action, At, Scenario, Submit};

/// The cluster as the file configures it, ready for the timeline.
pub fn configure(s: &Scenario) -> Result<State, InputError> {
    let mut state = configure_logged(s, None)?.state;
    // A cluster's leader raises the apply behaviour to its build's newest once every member
    // reads it (`behaviour::leader_upgrade`): the simulator runs as such a cluster does.
    state
        .apply(Command { now_ms: 0, op: Op::SetBehaviour(baton_model::behaviour::BEHAVIOUR) })
        .expect("a behaviour raise is never refused");
    Ok(state)
}

/// The state being configured, and the commands that configured it when they are kept
/// (a recorded log: `crate::record`).
pub struct Setup {
    pub state: State,
    pub log: Option<Vec<Command>>,
}

impl Setup {
    fn apply(&mut self, op: Op) -> Result<(), ApplyError> {
        let cmd = Command { now_ms: 0, op };
        if let Some(log) = &mut self.log {
            log.push(cmd.clone());
        }
        self.state.apply(cmd).map(drop)
    }
}

/// As [`configure`], after the commands of `prelude` when one is given, keeping every command
/// in the setup's log (`None`: no log).
pub fn configure_logged(s: &Scenario, prelude: Option<Vec<Op>>) -> Result<Setup, InputError> {
    let cx = Cx { file: &s.file };
    let mut state = Setup { state: State::new(), log: prelude.as_ref().map(|_| Vec::new()) };
    let apply = |state: &mut Setup, op: Op, line: usize, path: &str| -> R<()> {
        state.apply(op).map_err(|e| cx.err(line, path, e.to_string()))
    };
    for op in prelude.into_iter().flatten() {
        apply(&mut state, op, 0, "(the recording's prelude)")?;
    }
    if let Some(sc) = &s.scheduler {
        apply(&mut state, Op::SetScheduler(sc.v), sc.line, &sc.path)?;
    }
    if let Some(u) = &s.usage {
        apply(&mut state, Op::SetUsage(u.v.clone()), u.line, &u.path)?;
    }
    unique(&cx, s.classes.iter().map(|c| (&c.v.name, c.line, &c.path)), "priority class")?;
    for c in &s.classes {
        apply(&mut state, Op::PutClass(c.v.clone()), c.line, &c.path)?;
    }
    unique(&cx, s.nodes.iter().map(|n| (&n.v.name, n.line, &n.path)), "node")?;
    register_nodes(&cx, s, &mut state)?;
    if let Some(l) = &s.topology_levels {
        apply(&mut state, Op::SetTopologyLevels(l.v.clone()), l.line, &l.path)?;
    }
    for chunk in s.node_domains.chunks(baton_model::limits::MAX_NODES_PER_COMMAND) {
        let op = Op::SetNodeDomains(chunk.iter().map(|d| d.v.clone()).collect());
        apply(&mut state, op, chunk[0].line, &chunk[0].path)?;
    }
    unique(&cx, s.cohorts.iter().map(|c| (&c.v.name, c.line, &c.path)), "cohort")?;
    configure_cohorts(&cx, s, &mut state)?;
    unique(&cx, s.queues.iter().map(|q| (&q.v.name, q.line, &q.path)), "queue")?;
    let pools: BTreeSet<&Name> = s.nodes.iter().map(|n| &n.v.pool).collect();
    for q in &s.queues {
        if let Some(c) = &q.v.cohort
            && !s.cohorts.iter().any(|x| &x.v.name == c)
        {
            return Err(cx.err(q.line, &format!("{}.cohort", q.path), format!("cohort {c} is not defined")));
        }
        if let Some(p) = q.v.quotas.keys().find(|p| !pools.contains(p)) {
            return Err(cx.err(
                q.line,
                &format!("{}.quotas", q.path),
                format!("pool {p} has no nodes (pools are named by nodes' `pool`)"),
            ));
        }
        apply(&mut state, Op::PutQueue(q.v.clone()), q.line, &q.path)?;
    }
    for l in &s.user_limits {
        let (queue, limit) = l.v.clone();
        apply(&mut state, Op::SetUserLimit { queue, limit }, l.line, &l.path)?;
    }
    Ok(state)
}

/// Nodes go in bulk (one ledger rebuild per chunk); if a chunk is refused, the nodes are
/// tried one by one on a scratch copy to name the line at fault.
fn register_nodes(cx: &Cx, s: &Scenario, state: &mut Setup) -> R<()> {
    for chunk in s.nodes.chunks(baton_model::limits::MAX_NODES_PER_COMMAND) {
        let specs = chunk.iter().map(|n| n.v.clone()).collect();
        let Err(bulk) = state.apply(Op::RegisterNodes(specs)) else { continue };
        let mut scratch = state.state.clone();
        for n in chunk {
            if let Err(e) = scratch.apply(Command { now_ms: 0, op: Op::RegisterNode(n.v.clone()) }) {
                return Err(cx.err(n.line, &n.path, e.to_string()));
            }
        }
        return Err(cx.err(chunk[0].line, "nodes", bulk.to_string()));
    }
    Ok(())
}

fn unique<'a>(cx: &Cx, items: impl Iterator<Item = (&'a Name, usize, &'a String)>, kind: &str) -> R<()> {
    let mut seen = BTreeSet::new();
    for (name, line, path) in items {
        if !seen.insert(name) {
            return Err(cx.err(line, &format!("{path}.name"), format!("{kind} {name} is defined twice")));
        }
    }
    Ok(())
}

/// Parents before children, whatever the file order; a parent that never comes is an error.
fn configure_cohorts(cx: &Cx, s: &Scenario, state: &mut Setup) -> R<()> {
    let mut left: Vec<&At<baton_model::queue::Cohort>> = s.cohorts.iter().collect();
    while !left.is_empty() {
        let before = left.len();
        let mut rest = Vec::new();
        for c in left {
            let ready = c.v.parent.as_ref().is_none_or(|p| state.state.cohorts().contains_key(p));
            if ready {
                state.apply(Op::PutCohort(c.v.clone())).map_err(|e| cx.err(c.line, &c.path, e.to_string()))?;
            } else {
                rest.push(c);
            }
        }
        if rest.len() == before {
            let c = rest[0];
            let parent = c.v.parent.as_ref().map(Name::to_string).unwrap_or_default();
            let defined = s.cohorts.iter().any(|x| x.v.name.as_str() == parent);
            let msg = if defined {
                format!("cohort {} and its parents form a cycle", c.v.name)
            } else {
                format!("cohort {parent} is not defined")
            };
            return Err(cx.err(c.line, &format!("{}.parent", c.path), msg));
        }
        left = rest;
    }
    Ok(())
}

/// Every name the timeline and the expectations use is defined, and every submitted job
/// could run somewhere.
pub fn check_references(s: &Scenario, state: &State) -> R<()> {
    let cx = Cx { file: &s.file };
    let mut submitted: BTreeMap<Name, usize> = BTreeMap::new();
    for (i, step) in s.timeline.iter().enumerate() {
        match &step.action {
            Action::Submit(sub) => {
                check_submit(&cx, state, sub, step.line, &format!("{}.submit", step.path))?;
                check_after(&cx, sub, &submitted, step.line, &format!("{}.submit.after", step.path))?;
                // An array's elements are named by the array's name and their index; `finish`,
                // `fail` and expectations may name each.
                if let Some(a) = &sub.array {
                    for index in a.first..=a.last() {
                        if let Ok(n) = baton_model::array::element_name(&sub.spec.name, index) {
                            submitted.insert(n, i);
                        }
                    }
                }
                if submitted.insert(sub.spec.name.clone(), i).is_some() {
                    return Err(cx.err(
                        step.line,
                        &format!("{}.submit.name", step.path),
                        format!("job {} is submitted twice", sub.spec.name),
                    ));
                }
            }
            Action::Finish(j) | Action::Fail(j) | Action::Cancel(j) | Action::Pause(j) | Action::Resume(j) => {
                if !submitted.contains_key(&j.v) {
                    return Err(cx.err(j.line, &j.path, format!("job {} is not submitted before this step", j.v)));
                }
            }
            Action::NodeDown(n) | Action::NodeUp(n) | Action::Cordon(n) | Action::Uncordon(n) => {
                if !state.nodes().contains_key(&n.v) {
                    return Err(cx.err(n.line, &n.path, format!("node {} is not defined", n.v)));
                }
            }
            Action::Maintenance(w) => {
                if let Some(n) = w.v.nodes.iter().find(|n| !state.nodes().contains_key(*n)) {
                    return Err(cx.err(w.line, &format!("{}.nodes", w.path), format!("node {n} is not defined")));
                }
            }
            Action::Gpu(g) => {
                let gpus = state.nodes().get(&g.v.node).map(|n| n.spec.resources.gpus());
                let Some(gpus) = gpus else {
                    let msg = format!("node {} is not defined", g.v.node);
                    return Err(cx.err(g.line, &format!("{}.node", g.path), msg));
                };
                if u64::from(g.v.gpu) >= gpus {
                    let msg = format!("node {} has {gpus} GPUs; there is no GPU {}", g.v.node, g.v.gpu);
                    return Err(cx.err(g.line, &format!("{}.gpu", g.path), msg));
                }
            }
            Action::UpdateQueue(q, _) => {
                if !state.queues().contains_key(&q.v) {
                    return Err(cx.err(q.line, &q.path, format!("queue {} is not defined", q.v)));
                }
            }
        }
    }
    check_expectations(&cx, s, state, &submitted)
}

/// Each job a submit waits for is submitted by an earlier step (so a cycle of dependencies
/// cannot be written), by name: ids are not known before the simulation runs.
fn check_after(cx: &Cx, sub: &Submit, submitted: &BTreeMap<Name, usize>, line: usize, path: &str) -> R<()> {
    for (i, a) in sub.after.iter().enumerate() {
        let field = format!("{path}[{i}].job");
        match &a.job {
            JobRef::Id(id) => {
                return Err(cx.err(
                    line,
                    &field,
                    format!("{id}: name the job; ids are not known before the simulation runs"),
                ));
            }
            JobRef::Name(n) if n == &sub.spec.name => {
                return Err(cx.err(line, &field, format!("job {n} cannot wait for itself")));
            }
            JobRef::Name(n) if !submitted.contains_key(n) => {
                return Err(cx.err(line, &field, format!("job {n} is not submitted before this step")));
            }
            JobRef::Name(_) => {}
        }
    }
    if sub.after.len() > MAX_DEPENDENCIES_PER_JOB {
        return Err(cx.err(line, path, format!("at most {MAX_DEPENDENCIES_PER_JOB} dependencies per job")));
    }
    Ok(())
}

fn check_submit(cx: &Cx, state: &State, sub: &Submit, line: usize, path: &str) -> R<()> {
    let spec = &sub.spec;
    if !state.queues().contains_key(&spec.queue) {
        return Err(cx.err(sub.queue_line, &format!("{path}.queue"), format!("queue {} is not defined", spec.queue)));
    }
    if let PriorityRef::Class(c) = &spec.priority
        && !state.classes().contains_key(c)
    {
        return Err(cx.err(
            sub.priority_line,
            &format!("{path}.priority"),
            format!("priority class {c} is not defined"),
        ));
    }
    let pool_ok = |p: &Name| state.nodes().values().any(|n| &n.spec.pool == p);
    if let Some(p) = spec.pools.iter().flatten().find(|p| !pool_ok(p)) {
        return Err(cx.err(line, &format!("{path}.pools"), format!("pool {p} has no nodes")));
    }
    for (i, t) in spec.tasks.iter().enumerate() {
        if let Some(p) = t.pools.iter().flatten().find(|p| !pool_ok(p)) {
            return Err(cx.err(line, &format!("{path}.tasks[{i}].pools"), format!("pool {p} has no nodes")));
        }
    }
    state.validate_submit(spec).map(|_| ()).map_err(|e| match e {
        ApplyError::Invalid { field, message } => cx.err(line, &format!("{path}.{field}"), message),
        other => cx.err(line, path, other.to_string()),
    })
}

fn check_expectations(cx: &Cx, s: &Scenario, state: &State, submitted: &BTreeMap<Name, usize>) -> R<()> {
    let job = |n: &Name, line: usize, path: &str| -> R<()> {
        if submitted.contains_key(n) { Ok(()) } else { Err(cx.err(line, path, format!("job {n} is never submitted"))) }
    };
    for e in &s.expect {
        for j in &e.jobs {
            job(&j.v.0, j.line, &j.path)?;
            if let Some(Some(by)) = &j.v.1.preempted_by {
                job(by, j.line, &format!("{}.preempted_by", j.path))?;
            }
        }
        for q in &e.queues {
            if !state.queues().contains_key(&q.v.0) {
                return Err(cx.err(q.line, &q.path, format!("queue {} is not defined", q.v.0)));
            }
        }
        for v in e.victims_of.iter().chain(&e.placed_on) {
            job(&v.v.0, v.line, &v.path)?;
        }
        for v in &e.victims_of {
            for victim in &v.v.1 {
                job(victim, v.line, &v.path)?;
            }
        }
        for v in &e.victims_count {
            job(&v.v.0, v.line, &v.path)?;
        }
    }
    Ok(())
}
