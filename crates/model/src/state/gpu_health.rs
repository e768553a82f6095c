//! Unhealthy GPUs in the state (decisions.md section 14). An agent reports a GPU failed
//! (`ReportGpu`) or an operator marks it (`SetGpuHealth`): the GPU leaves its pool's
//! capacity and takes no new work; jobs running on it are stopped as in mode `checkpoint`
//! (signal, grace, kill; whatever their mode) and go back to the queue once stopped, and a
//! reservation that was to use it is dropped. Jobs on the node's other GPUs keep running.
//! An operator clears the mark; a passing health check clears a fault the check found, when
//! the agent is allowed to.

use super::State;
use crate::error::ApplyError;
use crate::event::{Event, EventKind, clip_message};
use crate::gpu_health::{GpuFault, GpuFaults, HealthSource, mask_of};
use crate::job::{JobId, JobState, StopWhy};
use crate::name::Name;

impl State {
    /// Every unhealthy GPU, per node.
    pub fn gpu_faults(&self) -> &GpuFaults {
        &self.gpu_faults
    }

    pub fn gpu_fault(&self, node: &Name, gpu: u32) -> Option<&GpuFault> {
        self.gpu_faults.get(node).and_then(|f| f.get(&gpu))
    }

    /// The node's unhealthy GPUs as a mask (GPU `i` is bit `i`).
    pub fn unhealthy_gpus(&self, node: &Name) -> u64 {
        mask_of(self.gpu_faults.get(node))
    }

    /// An agent's or an operator's word on `gpu` of `node`: `Some(error)` marks it
    /// unhealthy, `None` clears it (an agent's passing check clears only its own finding).
    pub(crate) fn gpu_health(
        &mut self,
        node: &Name,
        gpu: u32,
        fault: Option<String>,
        source: HealthSource,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        self.check_gpu(node, gpu)?;
        match fault {
            Some(error) => {
                let error = error.trim();
                if error.is_empty() {
                    return Err(ApplyError::invalid("error", "say what is wrong with the GPU (e.g. \"XID 79\")"));
                }
                let by_check = matches!(source, HealthSource::Agent { by_check: true });
                let fault = GpuFault { error: clip_message(error.to_string()), since_ms: self.d.now_ms, by_check };
                self.mark_gpu(node, gpu, fault, ev);
            }
            None => {
                let clears = match (source, self.gpu_fault(node, gpu)) {
                    (_, None) => false,
                    (HealthSource::Operator, Some(_)) => true,
                    // A passing check says nothing of an XID or ECC error it cannot see.
                    (HealthSource::Agent { .. }, Some(f)) => f.by_check,
                };
                if clears {
                    self.clear_gpu(node, gpu, source, ev);
                }
            }
        }
        Ok(())
    }

    /// Refuses an unknown node, or a GPU index the node does not have, naming the field.
    fn check_gpu(&self, node: &Name, gpu: u32) -> Result<(), ApplyError> {
        let n = self.d.nodes.get(node).ok_or_else(|| ApplyError::invalid("node", format!("unknown node {node}")))?;
        let count = n.spec.resources.gpus();
        if u64::from(gpu) >= count {
            let has = match count {
                0 => "no GPUs".to_string(),
                1 => "one GPU, index 0".to_string(),
                n => format!("{n} GPUs, indices 0 to {}", n - 1),
            };
            return Err(ApplyError::invalid("gpu", format!("node {node} has {has}; there is no GPU {gpu}")));
        }
        Ok(())
    }

    fn mark_gpu(&mut self, node: &Name, gpu: u32, fault: GpuFault, ev: &mut Vec<Event>) {
        if self.gpu_fault(node, gpu).is_some_and(|f| f.error == fault.error) {
            return;
        }
        let message = format!("GPU {gpu} of node {node} is unhealthy ({}): it takes no new work", fault.error);
        let error = fault.error.clone();
        self.gpu_faults.entry(node.clone()).or_default().insert(gpu, fault);
        self.node_event(node, EventKind::GpuUnhealthy, message, ev);
        self.stop_on_gpu(node, gpu, &error, ev);
        self.rebuild_ledger();
    }

    fn clear_gpu(&mut self, node: &Name, gpu: u32, source: HealthSource, ev: &mut Vec<Event>) {
        let Some(faults) = self.gpu_faults.get_mut(node) else { return };
        let Some(fault) = faults.remove(&gpu) else { return };
        if faults.is_empty() {
            self.gpu_faults.remove(node);
        }
        let by = match source {
            HealthSource::Operator => "by a person",
            HealthSource::Agent { .. } => "its health check passed",
        };
        let message = format!("GPU {gpu} of node {node} is healthy again ({by}; it had {})", fault.error);
        self.node_event(node, EventKind::GpuHealthy, message, ev);
        self.rebuild_ledger();
    }

    /// What uses `gpu` of `node` lets go of it: running jobs stop as in mode checkpoint,
    /// reservations on it are dropped.
    fn stop_on_gpu(&mut self, node: &Name, gpu: u32, error: &str, ev: &mut Vec<Event>) {
        let on_gpu = |j: &crate::job::Job| j.replicas.iter().any(|r| &r.node == node && r.gpus.contains(&gpu));
        // A job already stopping goes on with its stop as it was asked; a job that uses GPUs
        // is never suspended in place (decisions.md section 7).
        let running: Vec<JobId> =
            self.d.jobs.values().filter(|j| j.state == JobState::Running && on_gpu(j)).map(|j| j.id).collect();
        let why = format!("GPU {gpu} of node {node} is unhealthy ({error})");
        for id in running {
            self.begin_stop(id, StopWhy::GpuFault);
            self.set_reason(id, format!("{why}; checkpointing before it stops"));
            self.job_event(id, EventKind::GpuFaultStop, format!("{why}; stopping"), ev);
        }
        let reserved: Vec<JobId> = self
            .d
            .reservations
            .values()
            .filter(|r| r.replicas.iter().any(|x| &x.node == node && x.gpus.contains(&gpu)))
            .map(|r| r.job)
            .collect();
        for id in reserved {
            self.drop_reservation(id);
            self.set_reason(id, format!("{why}, which it was to run on; re-planning"));
        }
        self.unreserve_pools_on(node, ev);
    }

    /// The reason a job stopped for an unhealthy GPU is requeued with.
    pub(crate) fn gpu_fault_reason(&self, id: JobId) -> String {
        let job = &self.d.jobs[&id];
        let bad = job.replicas.iter().find_map(|r| {
            let faults = self.gpu_faults.get(&r.node)?;
            r.gpus.iter().find_map(|g| faults.get(g).map(|f| (r.node.clone(), *g, f.error.clone())))
        });
        match bad {
            Some((node, gpu, error)) => {
                format!("GPU {gpu} of node {node} is unhealthy ({error}); waiting to be placed on healthy GPUs")
            }
            None => "its GPU was unhealthy; waiting to be placed again".into(),
        }
    }

    pub(crate) fn node_event(&self, node: &Name, kind: EventKind, message: String, ev: &mut Vec<Event>) {
        ev.push(Event {
            at_ms: self.d.now_ms,
            job: None,
            job_id: None,
            node: Some(node.clone()),
            kind,
            message: clip_message(message),
        });
    }
}
