//! Why a job waits, in words a person can act on.

use std::borrow::Cow;

use baton_model::ledger::FxMap;

use baton_model::job::Topology;
use baton_model::ledger::{GPU_KIND, QuotaBlock, Vector, ZERO, add};
use baton_model::limits::MAX_RESOURCE_KINDS;

use baton_model::state::State;

use crate::needs::Needs;
use crate::view::View;

/// Jobs named in one reason at most: a reason is a line a person reads.
const MAX_NAMED: usize = 3;

pub fn victims_stopping(n: usize) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("waiting for {n} victim{s} to stop; their resources are held for it")
}

/// A preemptor whose victims have stopped, whose reserved node `node` takes no new work for
/// it now (cordoned, lost, unhealthy, in a maintenance window or closed to it by one ahead).
pub fn reserved_node_closed(node: &str) -> String {
    format!("its victims have stopped; its reserved node {node} takes no new work for it now")
}

/// A preemptor whose victims have stopped, on a node where something else still holds part
/// of its reserved room: ranks of an ended attempt not yet reported gone (a victim suspended
/// in place there whose job was requeued when another of its nodes was lost).
pub fn reserved_room_held(state: &State, node: &str) -> String {
    let mut held_by: Vec<&str> = state
        .all_completing()
        .iter()
        .filter(|(_, c)| c.ranks.values().any(|r| r.node.as_str() == node))
        .filter_map(|(id, _)| state.job(*id).map(|j| j.spec.name.as_str()))
        .collect();
    held_by.truncate(MAX_NAMED);
    match held_by.as_slice() {
        [] => format!("its victims have stopped; waiting for its reserved room on node {node} to be released"),
        names => format!(
            "its victims have stopped; waiting for ranks of {} still being stopped on node {node}",
            names.join(", ")
        ),
    }
}

pub fn leaving(n: usize) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("waiting for {n} job{s} already being preempted to release resources")
}

fn describe(view: &View, v: &Vector) -> String {
    view.ledger.kinds.resources(v).to_string()
}

/// No room without preemption, for the job's first pool choice.
pub fn no_room(view: &View, needs: &Needs) -> String {
    let a = &needs.pool_choices[0];
    let pool = a[0];
    let pool_name = &view.ledger.pools[pool].name;
    let replicas: u32 = needs.tasks.iter().map(|t| t.replicas).sum();
    if replicas == 1 {
        let need = &needs.tasks[0].need;
        let most = view.index.pools[pool].all.max_free();
        if need[GPU_KIND] > 0 {
            return format!(
                "no node in pool {pool_name} has {} free (most free GPUs on one node: {most}){}",
                describe(view, need),
                unhealthy(view, pool)
            );
        }
        return format!("no node in pool {pool_name} has {} free", describe(view, need));
    }
    let mut total = [0u64; MAX_RESOURCE_KINDS];
    for t in &needs.tasks {
        for _ in 0..t.replicas {
            add(&mut total, &t.need);
        }
    }
    let shape = match needs.topology.and_then(|t| t.required()) {
        Some(l) if l.is_node() => " on one node".to_string(),
        Some(l) => format!(" in one {l}"),
        None => String::new(),
    };
    format!(
        "pool {pool_name} has no room for its gang of {replicas} replicas ({} in all){shape}{}",
        describe(view, &total),
        unhealthy(view, pool)
    )
}

/// Says how many of the pool's GPUs are out of service, if any (decisions.md section 14):
/// an operator reading why a job waits learns that fixing them would make room.
fn unhealthy(view: &View, pool: usize) -> String {
    match view.ledger.pools[pool].unhealthy_gpus {
        0 => String::new(),
        1 => "; 1 GPU of the pool is unhealthy (`baton gpu list`)".into(),
        n => format!("; {n} GPUs of the pool are unhealthy (`baton gpu list`)"),
    }
}

/// Reason texts already written this cycle: a long backlog has few distinct shapes.
#[derive(Default)]
pub struct Reasons {
    no_room: FxMap<(usize, Vector, u32, Option<Topology>, u64), String>,
    quota: FxMap<(usize, QuotaBlock), String>,
}

impl Reasons {
    pub fn quota(&mut self, view: &View, queue: usize, block: QuotaBlock) -> Cow<'_, str> {
        Cow::Borrowed(self.quota.entry((queue, block)).or_insert_with(|| block.describe(&view.ledger, queue)))
    }

    pub fn no_room(&mut self, view: &View, needs: &Needs) -> Cow<'_, str> {
        let pool = needs.pool_choices[0][0];
        let mut total = ZERO;
        for t in &needs.tasks {
            for _ in 0..t.replicas {
                add(&mut total, &t.need);
            }
        }
        let replicas = needs.tasks.iter().map(|t| t.replicas).sum();
        let key = (pool, total, replicas, needs.topology, view.index.pools[pool].all.max_free());
        if needs.tasks.len() > 1 {
            return Cow::Owned(no_room(view, needs));
        }
        Cow::Borrowed(self.no_room.entry(key).or_insert_with(|| no_room(view, needs)))
    }
}
