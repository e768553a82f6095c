//! Maintenance windows ahead (decisions.md section 14) as a cycle sees them. A started
//! window's nodes are out of the ledger already (not schedulable); a window not started yet
//! closes its nodes only to the jobs that would not end before its start, so they are taken
//! out of the view while such a job is decided and put back after.

use baton_model::job::Job;

use crate::view::View;

/// Takes out of the view the nodes of every window ahead that `job`, started now, would
/// not end before; returns them for `reopen`.
pub fn close_for(view: &mut View, job: &Job) -> Vec<usize> {
    let state = view.state;
    if state.windows().is_empty() {
        return Vec::new();
    }
    let now_ms = view.now_ms;
    let mut closed = Vec::new();
    for w in state.windows().values().filter(|w| w.closes_to(job, now_ms)) {
        for node in &w.spec.nodes {
            if let Some(n) = view.ledger.node(node.as_str())
                && view.ledger.nodes[n].schedulable
            {
                view.ledger.nodes[n].schedulable = false;
                view.refresh(n);
                closed.push(n);
            }
        }
    }
    closed
}

/// Puts back what `close_for` took out.
pub fn reopen(view: &mut View, closed: Vec<usize>) {
    for n in closed {
        view.ledger.nodes[n].schedulable = true;
        view.refresh(n);
    }
}

/// Node `n` is in a window ahead: a reservation (section 9) never takes it.
pub fn ahead_on(view: &View, n: usize) -> bool {
    let name = &view.ledger.nodes[n].name;
    view.state.windows().values().any(|w| !w.active && w.holds(name))
}

/// Nodes named in a reason, at most.
const NODES_NAMED: usize = 4;

/// What the windows take from `job`, in words for its reason: the started ones on nodes of
/// its pools, and those ahead that `close_for` closed to it; `None` when none does.
pub fn note(view: &View, job: &Job, closed: &[usize]) -> Option<String> {
    let state = view.state;
    if state.windows().is_empty() {
        return None;
    }
    let closed_names: Vec<&str> = closed.iter().map(|&n| view.ledger.nodes[n].name.as_str()).collect();
    let pools: Vec<usize> = (0..job.spec.tasks.len()).flat_map(|t| state.task_pools(&job.spec, t)).collect();
    let in_pools = |name: &str| view.ledger.node(name).is_some_and(|n| pools.contains(&view.ledger.nodes[n].pool));
    let mut parts = Vec::new();
    for w in state.windows().values() {
        let nodes: Vec<&str> = if w.active {
            w.spec.nodes.iter().map(|n| n.as_str()).filter(|n| in_pools(n)).collect()
        } else {
            w.spec.nodes.iter().map(|n| n.as_str()).filter(|n| closed_names.contains(n)).collect()
        };
        if nodes.is_empty() {
            continue;
        }
        let mut named = nodes.iter().take(NODES_NAMED).copied().collect::<Vec<_>>().join(", ");
        if nodes.len() > NODES_NAMED {
            named.push_str(&format!(" and {} more", nodes.len() - NODES_NAMED));
        }
        parts.push(if w.active {
            format!("maintenance window {} holds {named}", w.spec.name)
        } else {
            ahead_note(w.spec.name.as_str(), &named)
        });
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How a reason names window `window` ahead, closed to the job on `nodes`.
pub fn ahead_note(window: &str, nodes: &str) -> String {
    format!("maintenance window {window} ahead holds {nodes} (it would not end before the window starts)")
}
