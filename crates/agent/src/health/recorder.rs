//! GPU findings into the journal: the reporter sends them with its next report, at once,
//! and keeps them until the leader acknowledges them (across restarts of the agent).

use std::sync::Arc;

use baton_proto::v1::observation::What;
use baton_proto::v1::{GpuHealth, Observation};
use tokio::sync::Notify;

use crate::journal::Journal;
use crate::metrics::AgentMetrics;

pub struct Recorder {
    journal: Arc<Journal>,
    /// Wakes the reporter.
    observed: Arc<Notify>,
    metrics: Arc<AgentMetrics>,
    /// GPUs on this node: a finding about another index is a bug of its source, dropped.
    gpus: u32,
}

impl Recorder {
    pub fn new(journal: Arc<Journal>, observed: Arc<Notify>, metrics: Arc<AgentMetrics>, gpus: u32) -> Recorder {
        Recorder { journal, observed, metrics, gpus }
    }

    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// `gpu` is unhealthy: `error` says why; `by_check` when the health check found it.
    pub fn fault(&self, gpu: u32, error: &str, by_check: bool) {
        if gpu >= self.gpus {
            tracing::warn!(gpu, error, "a GPU fault on an index this node does not have; ignored");
            return;
        }
        tracing::error!(gpu, error, by_check, "GPU found unhealthy; telling the leader");
        self.metrics.gpu_fault(gpu);
        self.push(GpuHealth { gpu, healthy: false, error: error.to_string(), by_check });
    }

    /// The health check passes again on `gpu`, which it had failed.
    pub fn passed(&self, gpu: u32) {
        tracing::info!(gpu, "the health check passes again on this GPU; telling the leader");
        self.push(GpuHealth { gpu, healthy: true, error: String::new(), by_check: true });
    }

    fn push(&self, g: GpuHealth) {
        let obs = Observation { what: Some(What::Gpu(g)) };
        // A journal that cannot be written now loses this finding, not the agent: the
        // condition (or the next event) is found again; the log says so.
        if let Err(e) = self.journal.push_observation(&obs) {
            tracing::error!("{e}; a GPU health finding is not recorded");
            return;
        }
        self.observed.notify_one();
    }
}
