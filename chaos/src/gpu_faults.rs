//! GPU faults during the load (decisions.md section 14): every few seconds an XID is
//! injected into a development GPU of a random node (a file its agent reads), the harness
//! waits until the cluster lists the GPU unhealthy (the fault is committed), and some
//! seconds later an operator clears it. The check (`check::placed_on_unhealthy`) then finds
//! any start placed on a GPU after its fault was committed and before its clearing was asked.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_proto::v1::{Empty, SetGpuHealthRequest};

use crate::cluster::{Servers, connect_any};
use crate::history::now_ms;
use crate::rng::Rng;

/// Between two faults, and how long one lasts before it is cleared.
const PAUSE_MS: (u64, u64) = (4_000, 12_000);
const OUTAGE_MS: (u64, u64) = (3_000, 10_000);
/// How long the harness waits for the cluster to list a fault before it gives up on
/// judging that one (the agent may be down, or the cluster without a leader).
const SEEN_WITHIN_MS: u64 = 15_000;
/// Tries at clearing a fault while the cluster has no leader.
const CLEAR_TRIES: u32 = 100;
const RETRY_MS: u64 = 200;

/// One injected fault, as the harness saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub node: String,
    pub gpu: u32,
    /// When the cluster first listed it unhealthy (its commit came before); `None`: never
    /// seen, so not judged.
    pub seen_ms: Option<u64>,
    /// When its clearing was first asked (its commit came after).
    pub clear_asked_ms: u64,
}

pub struct Injector {
    pub servers: Servers,
    /// The run's directory: agents' data directories are `agent-NAME` under it.
    pub dir: PathBuf,
    pub nodes: Vec<String>,
    pub gpus_per_node: u64,
    pub seed: u64,
}

impl Injector {
    /// Injects faults until `stop`, clearing each; every fault is cleared when it returns.
    pub async fn run(self, stop: Arc<AtomicBool>) -> Vec<Span> {
        let mut rng = Rng::new(self.seed ^ 0x6770_7566);
        let mut spans = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(rng.range(PAUSE_MS.0, PAUSE_MS.1))).await;
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let node = self.nodes[rng.below(self.nodes.len() as u64) as usize].clone();
            let gpu = rng.below(self.gpus_per_node) as u32;
            self.inject(&node, gpu);
            let seen_ms = self.seen(&node, gpu).await;
            // Cut short when the load ends, so that the drain does not wait for it.
            let outage_ends = now_ms() + rng.range(OUTAGE_MS.0, OUTAGE_MS.1);
            while now_ms() < outage_ends && !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            }
            let clear_asked_ms = now_ms();
            self.clear(&node, gpu).await;
            spans.push(Span { node, gpu, seen_ms, clear_asked_ms });
        }
        spans
    }

    fn inject(&self, node: &str, gpu: u32) {
        let agent_dir = self.dir.join(format!("agent-{node}"));
        let faults = agent_dir.join("gpu-faults");
        let tmp = agent_dir.join(format!("gpu-fault-{gpu}.tmp"));
        let written = std::fs::create_dir_all(&faults)
            .and_then(|()| std::fs::write(&tmp, "XID 79"))
            .and_then(|()| std::fs::rename(&tmp, faults.join(gpu.to_string())));
        if let Err(e) = written {
            eprintln!("chaos: cannot inject a fault into GPU {gpu} of {node}: {e}");
        }
    }

    /// When the cluster first lists the GPU unhealthy.
    async fn seen(&self, node: &str, gpu: u32) -> Option<u64> {
        let deadline = now_ms() + SEEN_WITHIN_MS;
        while now_ms() < deadline {
            if let Some(mut api) = connect_any(&self.servers).await
                && let Ok(Ok(reply)) =
                    tokio::time::timeout(Duration::from_millis(2_000), api.list_nodes(Empty {})).await
            {
                let listed = reply
                    .into_inner()
                    .nodes
                    .into_iter()
                    .any(|n| n.name == node && n.unhealthy_gpus.iter().any(|f| f.gpu == gpu));
                if listed {
                    return Some(now_ms());
                }
            }
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
        }
        eprintln!("chaos: GPU {gpu} of {node} was not listed unhealthy within {SEEN_WITHIN_MS} ms; not judged");
        None
    }

    async fn clear(&self, node: &str, gpu: u32) {
        let req = SetGpuHealthRequest { node: node.into(), gpu, healthy: true, error: String::new() };
        for _ in 0..CLEAR_TRIES {
            if let Some(mut api) = connect_any(&self.servers).await
                && let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::from_millis(2_000), api.set_gpu_health(req.clone())).await
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
        }
        eprintln!("chaos: GPU {gpu} of {node} could not be cleared; its work waits elsewhere");
    }
}
