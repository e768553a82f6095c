//! Maintenance windows in the state (decisions.md section 14). A window is written by an
//! operator (`CreateMaintenance`, `DeleteMaintenance`) and moves on with the replicated
//! clock: the command that first sees its start (a `Tick` the leader sends when one falls
//! due, or the write itself) takes its nodes out of the pool's capacity and begins the stop
//! of what runs there; the one that sees its end gives the nodes back and forgets it.

use std::collections::BTreeSet;

use super::State;
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobState, StopWhy};
use crate::limits::{MAX_NODES_PER_COMMAND, MAX_WINDOWS};
use crate::maintenance::{Window, WindowSpec};
use crate::name::Name;

/// The reason a job stopped for a window gives (decisions.md section 14's word).
pub const MAINTENANCE: &str = "maintenance";

impl State {
    pub fn windows(&self) -> &std::collections::BTreeMap<Name, Window> {
        &self.windows
    }

    /// The started window that holds `node`, if any: its nodes take no work.
    pub fn active_window_on(&self, node: &Name) -> Option<&Window> {
        self.windows.values().find(|w| w.active && w.holds(node))
    }

    /// A window ahead on `node` that `job`, started now, would not end before.
    pub fn window_closed_to(&self, job: &crate::job::Job, node: &Name) -> Option<&Window> {
        if self.windows.is_empty() {
            return None;
        }
        let now = self.d.now_ms;
        self.windows.values().find(|w| w.holds(node) && w.closes_to(job, now))
    }

    /// Time alone would change something, so the leader sends a `Tick`: a reservation whose
    /// victims outlived its deadline, or a window whose start or end has come.
    pub fn tick_due(&self, now_ms: u64) -> bool {
        self.reservations().values().any(|r| r.deadline_ms < now_ms) || self.window_due(now_ms)
    }

    /// A window starts or ends at or before `now_ms` and the state has not moved it on yet.
    pub fn window_due(&self, now_ms: u64) -> bool {
        self.windows.values().any(|w| (!w.active && w.spec.start_ms <= now_ms) || w.spec.end_ms <= now_ms)
    }

    /// The next instant after `now_ms` at which a window starts or ends.
    pub fn next_window_change_ms(&self, now_ms: u64) -> Option<u64> {
        let times = self.windows.values().flat_map(|w| [w.spec.start_ms, w.spec.end_ms]);
        times.filter(|&t| t > now_ms).min()
    }

    pub(crate) fn create_window(&mut self, spec: WindowSpec, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        if self.windows.contains_key(&spec.name) {
            return Err(ApplyError::Exists { kind: "maintenance window".into(), name: spec.name.to_string() });
        }
        if self.windows.len() >= MAX_WINDOWS {
            return Err(ApplyError::Limit(format!("at most {MAX_WINDOWS} maintenance windows; delete past ones")));
        }
        self.check_window(&spec)?;
        let name = spec.name.clone();
        self.windows.insert(name, Window { spec, active: false });
        self.advance_windows(ev);
        Ok(())
    }

    pub(crate) fn delete_window(&mut self, name: &Name, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        let w = self.windows.remove(name).ok_or_else(|| ApplyError::unknown("maintenance window", name))?;
        if w.active {
            self.window_event(&w, EventKind::MaintenanceEnded, "ended early (deleted)", ev);
            self.rebuild_ledger();
        }
        Ok(())
    }

    /// Refuses a window that ends before it starts or has ended, names an unknown node, or
    /// overlaps another window on a node, naming the field.
    fn check_window(&self, spec: &WindowSpec) -> Result<(), ApplyError> {
        if spec.end_ms <= spec.start_ms {
            return Err(ApplyError::invalid(
                "end",
                format!("{} ms is not after start ({} ms)", spec.end_ms, spec.start_ms),
            ));
        }
        if spec.end_ms <= self.d.now_ms {
            return Err(ApplyError::invalid(
                "end",
                format!("{} ms has passed (the cluster's clock is at {} ms)", spec.end_ms, self.d.now_ms),
            ));
        }
        if spec.nodes.is_empty() || spec.nodes.len() > MAX_NODES_PER_COMMAND {
            return Err(ApplyError::invalid("nodes", format!("a window holds 1 to {MAX_NODES_PER_COMMAND} nodes")));
        }
        let mut seen = BTreeSet::new();
        for (i, n) in spec.nodes.iter().enumerate() {
            if !self.d.nodes.contains_key(n) {
                return Err(ApplyError::invalid(format!("nodes[{i}]"), format!("unknown node {n}")));
            }
            if !seen.insert(n) {
                return Err(ApplyError::invalid(format!("nodes[{i}]"), format!("node {n} is named twice")));
            }
            let overlap = |w: &&Window| w.holds(n) && w.spec.start_ms < spec.end_ms && spec.start_ms < w.spec.end_ms;
            if let Some(w) = self.windows.values().find(overlap) {
                let msg = format!(
                    "node {n} is in window {} from {} ms to {} ms, which overlaps this one",
                    w.spec.name, w.spec.start_ms, w.spec.end_ms
                );
                return Err(ApplyError::invalid(format!("nodes[{i}]"), msg));
            }
        }
        Ok(())
    }

    /// Starts the windows whose start has come and ends those whose end has: the nodes of a
    /// started window leave the pool's capacity and what runs there begins to stop.
    pub(crate) fn advance_windows(&mut self, ev: &mut Vec<Event>) {
        let now = self.d.now_ms;
        let ended: Vec<Name> =
            self.windows.values().filter(|w| w.spec.end_ms <= now).map(|w| w.spec.name.clone()).collect();
        let started: Vec<Name> = self
            .windows
            .values()
            .filter(|w| !w.active && w.spec.start_ms <= now && now < w.spec.end_ms)
            .map(|w| w.spec.name.clone())
            .collect();
        let mut nodes_changed = !started.is_empty();
        for name in &ended {
            let w = self.windows.remove(name).expect("listed above");
            if w.active {
                self.window_event(&w, EventKind::MaintenanceEnded, "ended", ev);
                nodes_changed = true;
            }
        }
        // A window that ended before it started (the leader was away) changes no node.
        if !nodes_changed {
            return;
        }
        for name in &started {
            let w = self.windows.get_mut(name).expect("listed above");
            w.active = true;
            let w = w.clone();
            self.window_event(&w, EventKind::MaintenanceStarted, "started: its nodes take no work", ev);
            for node in &w.spec.nodes {
                self.unreserve_pools_on(node, ev);
            }
        }
        self.rebuild_ledger();
        for name in &started {
            let nodes = self.windows[name].spec.nodes.clone();
            for node in &nodes {
                self.stop_for_window(node, name, ev);
            }
        }
    }

    /// Running jobs on `node` stop as in mode `checkpoint` (signal, grace, kill), whatever
    /// their mode, and go back to the queue once stopped (`stopped`, `StopWhy::Maintenance`).
    fn stop_for_window(&mut self, node: &Name, window: &Name, ev: &mut Vec<Event>) {
        let running: Vec<JobId> =
            self.jobs_on(node).into_iter().filter(|id| self.d.jobs[id].state == JobState::Running).collect();
        for id in running {
            self.begin_stop(id, StopWhy::Maintenance);
            self.set_reason(
                id,
                format!("{MAINTENANCE}: window {window} started on {node}; checkpointing before it stops"),
            );
            let message = format!("{MAINTENANCE} window {window} started on {node}; stopping");
            self.job_event(id, EventKind::MaintenanceStop, message, ev);
        }
    }

    /// The reason a job stopped for a window is requeued with: the window that holds one of
    /// its nodes, or the word alone once the window is gone.
    pub(crate) fn maintenance_reason(&self, id: JobId) -> String {
        let job = &self.d.jobs[&id];
        let window = job.replicas.iter().find_map(|r| self.active_window_on(&r.node));
        match window {
            Some(w) => format!("{MAINTENANCE}: window {} on its nodes; waiting to be placed elsewhere", w.spec.name),
            None => format!("{MAINTENANCE}; waiting to be placed again"),
        }
    }

    fn window_event(&self, w: &Window, kind: EventKind, what: &str, ev: &mut Vec<Event>) {
        let nodes: Vec<&str> = w.spec.nodes.iter().map(Name::as_str).collect();
        let message = format!("maintenance window {} {what} ({})", w.spec.name, nodes.join(", "));
        ev.push(Event {
            at_ms: self.d.now_ms,
            job: None,
            job_id: None,
            node: None,
            kind,
            message: crate::event::clip_message(message),
        });
    }
}
