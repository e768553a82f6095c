//! Configuration commands: priority classes, cohorts, queues and nodes. Each one validates
//! fully before it changes anything, then rebuilds the ledger (configuration changes are
//! rare; rebuilding keeps one code path for "what does the cluster look like").

use std::collections::BTreeSet;

use super::State;
use crate::class::PriorityClass;
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::JobState;
use crate::limits::{
    MAX_COHORT_DEPTH, MAX_COHORTS, MAX_GPUS_PER_NODE, MAX_LABEL_LEN, MAX_LABELS_PER_NODE, MAX_NODES,
    MAX_NODES_PER_COMMAND, MAX_QUEUES, MAX_RESOURCE_KINDS,
};
use crate::name::Name;
use crate::node::{Node, NodeSpec, NodeStatus};
use crate::queue::{Cohort, QueueSpec, Visibility};
use crate::resources::validate_resource_name;

impl State {
    pub(crate) fn put_class(&mut self, c: PriorityClass) -> Result<(), ApplyError> {
        self.d.classes.insert(c.name.clone(), c);
        Ok(())
    }

    /// `put_class` unless the name is taken: decided here, in the replicated state, so of
    /// two creates of one name exactly one lands.
    pub(crate) fn create_class(&mut self, c: PriorityClass) -> Result<(), ApplyError> {
        if self.d.classes.contains_key(&c.name) {
            return Err(ApplyError::Exists { kind: "priority class".into(), name: c.name.to_string() });
        }
        self.put_class(c)
    }

    pub(crate) fn delete_class(&mut self, name: &Name) -> Result<(), ApplyError> {
        // Jobs keep the priority resolved at submission, so nothing depends on the class.
        self.d.classes.remove(name).map(|_| ()).ok_or_else(|| ApplyError::unknown("priority class", name))
    }

    pub(crate) fn put_cohort(&mut self, c: Cohort) -> Result<(), ApplyError> {
        if !self.d.cohorts.contains_key(&c.name) && self.d.cohorts.len() >= MAX_COHORTS {
            return Err(ApplyError::Limit(format!("at most {MAX_COHORTS} cohorts")));
        }
        if let Some(parent) = &c.parent {
            let mut cur = Some(parent.clone());
            let mut depth = 0;
            while let Some(p) = cur {
                if p == c.name {
                    return Err(ApplyError::invalid("parent", format!("cohort {} would be its own ancestor", c.name)));
                }
                let pc = self.d.cohorts.get(&p).ok_or_else(|| ApplyError::unknown("cohort", &p))?;
                depth += 1;
                if depth > MAX_COHORT_DEPTH {
                    return Err(ApplyError::Limit(format!("cohorts nest at most {MAX_COHORT_DEPTH} deep")));
                }
                cur = pc.parent.clone();
            }
        }
        self.d.cohorts.insert(c.name.clone(), c);
        self.rebuild_ledger();
        Ok(())
    }

    /// `put_cohort` unless the name is taken (see `create_class`).
    pub(crate) fn create_cohort(&mut self, c: Cohort) -> Result<(), ApplyError> {
        if self.d.cohorts.contains_key(&c.name) {
            return Err(ApplyError::Exists { kind: "cohort".into(), name: c.name.to_string() });
        }
        self.put_cohort(c)
    }

    pub(crate) fn delete_cohort(&mut self, name: &Name) -> Result<(), ApplyError> {
        if !self.d.cohorts.contains_key(name) {
            return Err(ApplyError::unknown("cohort", name));
        }
        if let Some(q) = self.d.queues.values().find(|q| q.cohort.as_ref() == Some(name)) {
            return Err(ApplyError::InUse(format!("cohort {name} still has queue {}", q.name)));
        }
        if let Some(c) = self.d.cohorts.values().find(|c| c.parent.as_ref() == Some(name)) {
            return Err(ApplyError::InUse(format!("cohort {name} is still the parent of cohort {}", c.name)));
        }
        self.d.cohorts.remove(name);
        self.rebuild_ledger();
        Ok(())
    }

    pub(crate) fn put_queue(&mut self, q: QueueSpec, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        let existed = self.d.queues.contains_key(&q.name);
        if !existed && self.d.queues.len() >= MAX_QUEUES {
            return Err(ApplyError::Limit(format!("at most {MAX_QUEUES} queues")));
        }
        if let Some(c) = &q.cohort
            && !self.d.cohorts.contains_key(c)
        {
            return Err(ApplyError::unknown("cohort", c));
        }
        if !q.weight.is_finite() || q.weight < 0.0 {
            return Err(ApplyError::invalid("weight", format!("{} is not a finite number >= 0", q.weight)));
        }
        for (pool, quota) in &q.quotas {
            let field = |f: &str| format!("quotas[{pool}].{f}");
            check_names(quota.nominal.names(), &field("nominal"))?;
            check_names(quota.borrow_limit.keys().map(String::as_str), &field("borrow_limit"))?;
            check_names(quota.lend_limit.keys().map(String::as_str), &field("lend_limit"))?;
        }
        let name = q.name.clone();
        self.queue_revisions.insert(name.clone(), self.d.applied);
        self.d.queues.insert(q.name.clone(), q);
        self.rebuild_ledger();
        if existed {
            let message = format!("queue {name} updated");
            ev.push(Event {
                at_ms: self.d.now_ms,
                job: None,
                job_id: None,
                node: None,
                kind: EventKind::QueueUpdated { queue: name },
                message,
            });
        }
        Ok(())
    }

    pub(crate) fn delete_queue(&mut self, name: &Name) -> Result<(), ApplyError> {
        if !self.d.queues.contains_key(name) {
            return Err(ApplyError::unknown("queue", name));
        }
        if let Some(j) = self.d.jobs.values().find(|j| &j.spec.queue == name && !j.state.is_finished()) {
            return Err(ApplyError::InUse(format!("queue {name} still has unfinished job {}", j.spec.name)));
        }
        // A completing job's ranks are charged to its queue until they are gone.
        if let Some(j) =
            self.d.jobs.values().find(|j| &j.spec.queue == name && self.after.completing.contains_key(&j.id))
        {
            return Err(ApplyError::InUse(format!(
                "queue {name} still has job {} completing (its processes are being stopped)",
                j.spec.name
            )));
        }
        self.d.queues.remove(name);
        self.queue_revisions.remove(name);
        // A queue made again under this name starts at the default, like any new queue.
        self.queue_visibility.remove(name);
        self.usage.forget_queue(name);
        self.rebuild_ledger();
        Ok(())
    }

    pub(crate) fn create_queue(&mut self, q: QueueSpec, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        if self.d.queues.contains_key(&q.name) {
            return Err(ApplyError::Exists { kind: "queue".into(), name: q.name.to_string() });
        }
        self.put_queue(q, ev)
    }

    /// `put_queue` if the queue is still at `read`, the revision its writer read.
    pub(crate) fn update_queue(&mut self, q: QueueSpec, read: u64, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        let current = self.queue_revision(&q.name).ok_or_else(|| ApplyError::unknown("queue", &q.name))?;
        if current != read {
            return Err(ApplyError::Conflict { kind: "queue".into(), name: q.name.to_string(), read, current });
        }
        self.put_queue(q, ev)
    }

    /// `create_queue`, then its visibility (nothing changes if the create is refused).
    pub(crate) fn create_queue_visible(
        &mut self,
        q: QueueSpec,
        visibility: Visibility,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        let name = q.name.clone();
        self.create_queue(q, ev)?;
        self.set_visibility(name, visibility);
        Ok(())
    }

    /// `update_queue`, then its visibility (nothing changes if the update is refused).
    pub(crate) fn update_queue_visible(
        &mut self,
        q: QueueSpec,
        read: u64,
        visibility: Visibility,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        let name = q.name.clone();
        self.update_queue(q, read, ev)?;
        self.set_visibility(name, visibility);
        Ok(())
    }

    /// Only queues off the default are kept, so a state where none is set writes the older
    /// snapshot layout.
    fn set_visibility(&mut self, queue: Name, v: Visibility) {
        if v == Visibility::default() {
            self.queue_visibility.remove(&queue);
        } else {
            self.queue_visibility.insert(queue, v);
        }
    }

    /// Agents register their nodes (or re-register with new facts); many at once when a
    /// cluster is brought up. All are checked before any is added.
    pub(crate) fn register_nodes(&mut self, specs: Vec<NodeSpec>, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        if specs.len() > MAX_NODES_PER_COMMAND {
            return Err(ApplyError::Limit(format!("at most {MAX_NODES_PER_COMMAND} nodes per registration")));
        }
        let mut kinds: BTreeSet<String> =
            self.d.nodes.values().flat_map(|n| n.spec.resources.names().map(String::from)).collect();
        let mut seen = BTreeSet::new();
        let mut new_nodes = 0;
        for spec in &specs {
            validate_node(spec)?;
            if !seen.insert(&spec.name) {
                return Err(ApplyError::invalid("nodes", format!("node {} appears twice", spec.name)));
            }
            kinds.extend(spec.resources.names().map(String::from));
            match self.d.nodes.get(&spec.name) {
                Some(prev) => self.check_reregistration(prev, spec)?,
                None => new_nodes += 1,
            }
        }
        if kinds.len() > MAX_RESOURCE_KINDS {
            return Err(ApplyError::Limit(format!("a cluster may use at most {MAX_RESOURCE_KINDS} resource names")));
        }
        if self.d.nodes.len() + new_nodes > MAX_NODES {
            return Err(ApplyError::Limit(format!("at most {MAX_NODES} nodes")));
        }
        for spec in specs {
            let previous = self.d.nodes.get(&spec.name);
            let (is_new, was_lost) = (previous.is_none(), previous.is_some_and(|p| p.status == NodeStatus::Lost));
            let cordoned = previous.is_some_and(|p| p.cordoned);
            // An agent restart does not make a stuck process go away; only a person clears it.
            let unhealthy = previous.and_then(|p| p.unhealthy.clone());
            let name = spec.name.clone();
            self.d.nodes.insert(name.clone(), Node { spec, status: NodeStatus::Ready, cordoned, unhealthy });
            if is_new || was_lost {
                let kind = if is_new { EventKind::NodeRegistered } else { EventKind::NodeReady };
                let message = format!("node {name} is ready");
                ev.push(Event { at_ms: self.d.now_ms, job: None, job_id: None, node: Some(name), kind, message });
            }
        }
        self.rebuild_ledger();
        Ok(())
    }

    /// A node that comes back may not shrink under work it still has, or change pool while
    /// jobs run there.
    fn check_reregistration(&self, prev: &Node, spec: &NodeSpec) -> Result<(), ApplyError> {
        let Some(n) = self.ledger.node(spec.name.as_str()) else {
            return Ok(());
        };
        let acct = &self.ledger.nodes[n];
        if acct.occupants.is_empty() && acct.reservations.is_empty() {
            return Ok(());
        }
        if prev.spec.pool != spec.pool {
            return Err(ApplyError::InUse(format!(
                "node {} has jobs; it cannot move from pool {} to {}",
                spec.name, prev.spec.pool, spec.pool
            )));
        }
        let used = self.ledger.kinds.resources(&acct.used());
        if !used.fits_in(&spec.resources) {
            return Err(ApplyError::InUse(format!(
                "node {} has jobs using {used}; it cannot shrink to {}",
                spec.name, spec.resources
            )));
        }
        Ok(())
    }

    pub(crate) fn set_node_status(
        &mut self,
        name: &Name,
        status: NodeStatus,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        let node = self.d.nodes.get_mut(name).ok_or_else(|| ApplyError::unknown("node", name))?;
        if node.status == status {
            return Ok(());
        }
        node.status = status;
        let (kind, message) = match status {
            NodeStatus::Lost => (EventKind::NodeLost, format!("node {name} is lost; its jobs go back to the queue")),
            NodeStatus::Ready => (EventKind::NodeReady, format!("node {name} is ready")),
        };
        ev.push(Event { at_ms: self.d.now_ms, job: None, job_id: None, node: Some(name.clone()), kind, message });
        if status == NodeStatus::Lost {
            self.lose_jobs_on(name, ev);
            self.unreserve_pools_on(name, ev);
        }
        self.rebuild_ledger();
        Ok(())
    }

    pub(crate) fn cordon(&mut self, name: &Name, cordoned: bool, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        let node = self.d.nodes.get_mut(name).ok_or_else(|| ApplyError::unknown("node", name))?;
        // Uncordoning is how a person says the node is fixed, an unhealthy mark included.
        let cleared = if cordoned { None } else { node.unhealthy.take() };
        if node.cordoned == cordoned && cleared.is_none() {
            return Ok(());
        }
        node.cordoned = cordoned;
        let (kind, message) = if cordoned {
            (EventKind::NodeCordoned, format!("node {name} is cordoned: no new work is placed there"))
        } else {
            (EventKind::NodeUncordoned, format!("node {name} is uncordoned"))
        };
        ev.push(Event { at_ms: self.d.now_ms, job: None, job_id: None, node: Some(name.clone()), kind, message });
        if cordoned {
            self.unreserve_pools_on(name, ev);
        }
        self.rebuild_ledger();
        Ok(())
    }

    /// Jobs running, stopping or suspended on a node that is gone.
    pub(crate) fn jobs_on(&self, node: &Name) -> Vec<u64> {
        self.d
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Running | JobState::Preempting | JobState::Suspended))
            .filter(|j| j.replicas.iter().any(|r| &r.node == node))
            .map(|j| j.id)
            .collect()
    }
}

fn check_names<'a>(names: impl Iterator<Item = &'a str>, field: &str) -> Result<(), ApplyError> {
    for n in names {
        validate_resource_name(n).map_err(|e| ApplyError::invalid(field, e))?;
    }
    Ok(())
}

fn validate_node(spec: &NodeSpec) -> Result<(), ApplyError> {
    check_names(spec.resources.names(), "resources")?;
    if spec.resources.gpu_fraction() > 0 {
        return Err(ApplyError::invalid(
            format!("resources.{}", crate::resources::GPU_FRACTION),
            "a node offers whole GPUs; jobs share them by asking a fraction",
        ));
    }
    if spec.resources.gpus() > MAX_GPUS_PER_NODE {
        return Err(ApplyError::invalid("resources.gpu", format!("a node may have at most {MAX_GPUS_PER_NODE} GPUs")));
    }
    if spec.labels.len() > MAX_LABELS_PER_NODE {
        return Err(ApplyError::invalid("labels", format!("at most {MAX_LABELS_PER_NODE} labels")));
    }
    for (k, v) in &spec.labels {
        validate_label(k, v)?;
    }
    validate_gpus(spec)?;
    if spec.agent_addr.len() > MAX_LABEL_LEN || spec.agent_addr.chars().any(char::is_control) {
        return Err(ApplyError::invalid(
            "agent_addr",
            format!("a host:port of at most {MAX_LABEL_LEN} bytes, without control characters"),
        ));
    }
    Ok(())
}

fn validate_label(key: &str, value: &str) -> Result<(), ApplyError> {
    let field = || format!("labels[{key:?}]");
    if key.is_empty() || key.len() > MAX_LABEL_LEN || value.len() > MAX_LABEL_LEN {
        return Err(ApplyError::invalid(field(), format!("key and value must be 1 to {MAX_LABEL_LEN} bytes")));
    }
    if key.contains('=') || key.chars().chain(value.chars()).any(char::is_control) {
        return Err(ApplyError::invalid(field(), "keys hold no '=' and neither holds control characters"));
    }
    Ok(())
}

/// The devices an agent lists: no more than a node may have, indices the GPU masks can hold,
/// and identifiers of label size.
fn validate_gpus(spec: &NodeSpec) -> Result<(), ApplyError> {
    if spec.gpus.len() as u64 > MAX_GPUS_PER_NODE {
        return Err(ApplyError::invalid("gpus", format!("at most {MAX_GPUS_PER_NODE} devices")));
    }
    for (i, g) in spec.gpus.iter().enumerate() {
        if u64::from(g.index) >= MAX_GPUS_PER_NODE {
            return Err(ApplyError::invalid(format!("gpus[{i}].index"), format!("below {MAX_GPUS_PER_NODE}")));
        }
        for (what, text) in [("uuid", &g.uuid), ("model", &g.model)] {
            if text.len() > MAX_LABEL_LEN || text.chars().any(char::is_control) {
                return Err(ApplyError::invalid(
                    format!("gpus[{i}].{what}"),
                    format!("at most {MAX_LABEL_LEN} bytes, without control characters"),
                ));
            }
        }
    }
    Ok(())
}
