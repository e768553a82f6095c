//! Nodes as the cluster sees them: registered facts, status, what runs there, and (on the
//! leader) how long ago its agent was heard from.

use std::collections::BTreeMap;

use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_proto::convert::{gpu_faults_to_proto, node_to_proto, resources_to_proto};
use baton_proto::v1::{ListNodesReply, SharedGpu};
use tonic::{Response, Status};

use super::Api;

/// What the replicas on one node hold.
#[derive(Default)]
struct Held {
    resources: Resources,
    /// Jobs with replicas there, each once.
    jobs: Vec<String>,
    /// GPU index to (thousandths held by fractions, replicas sharing it).
    shares: BTreeMap<u32, (u64, u32)>,
}

impl Held {
    fn share(&mut self, gpus: &[u32], milli: u64) {
        if milli == 0 {
            return;
        }
        for &g in gpus {
            let e = self.shares.entry(g).or_default();
            (e.0, e.1) = (e.0 + milli, e.1 + 1);
        }
    }

    fn shared_gpus(&self) -> Vec<SharedGpu> {
        let milli = |m: u64| u32::try_from(m).unwrap_or(u32::MAX);
        self.shares.iter().map(|(&gpu, &(m, replicas))| SharedGpu { gpu, milli: milli(m), replicas }).collect()
    }
}

pub async fn list(api: &Api) -> Result<Response<ListNodesReply>, Status> {
    let mut nodes = api
        .read_whole(|s| {
            let mut used: BTreeMap<Name, Held> = BTreeMap::new();
            for job in s.jobs().values().filter(|j| !j.replicas.is_empty()) {
                for r in &job.replicas {
                    let entry = used.entry(r.node.clone()).or_default();
                    if let Some(task) = job.spec.tasks.get(r.task as usize) {
                        entry.resources.add(&task.resources);
                        entry.share(&r.gpus, task.resources.gpu_fraction());
                    }
                    if entry.jobs.last() != Some(&job.spec.name.to_string()) {
                        entry.jobs.push(job.spec.name.to_string());
                    }
                }
            }
            s.nodes()
                .values()
                .map(|n| {
                    let mut p = node_to_proto(n);
                    let held = used.remove(&n.spec.name).unwrap_or_default();
                    p.used = Some(resources_to_proto(&held.resources));
                    p.shared_gpus = held.shared_gpus();
                    p.jobs = held.jobs;
                    p.maintenance =
                        s.active_window_on(&n.spec.name).map(|w| w.spec.name.to_string()).unwrap_or_default();
                    p.unhealthy_gpus = gpu_faults_to_proto(s.gpu_faults().get(&n.spec.name));
                    if let Some(d) = s.topology().domains.get(&n.spec.name) {
                        p.domains = d.iter().map(|(l, d)| (l.to_string(), d.to_string())).collect();
                    }
                    p
                })
                .collect::<Vec<_>>()
        })
        .await?;
    if api.ctx.hub.leading().borrow().is_some() {
        for n in &mut nodes {
            if let Ok(name) = Name::new(n.name.clone()) {
                n.last_seen_ms_ago = api.ctx.liveness.last_seen(&name).map(|d| d.as_millis() as u64);
            }
        }
    }
    Ok(Response::new(ListNodesReply { nodes }))
}
