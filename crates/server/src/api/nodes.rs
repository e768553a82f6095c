//! Nodes as the cluster sees them: registered facts, status, what runs there, and (on the
//! leader) how long ago its agent was heard from.

use std::collections::BTreeMap;

use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_proto::convert::{gpu_faults_to_proto, node_to_proto, resources_to_proto};
use baton_proto::v1::ListNodesReply;
use tonic::{Response, Status};

use super::Api;

pub async fn list(api: &Api) -> Result<Response<ListNodesReply>, Status> {
    let mut nodes = api
        .read(|s| {
            let mut used: BTreeMap<Name, (Resources, Vec<String>)> = BTreeMap::new();
            for job in s.jobs().values().filter(|j| !j.replicas.is_empty()) {
                for r in &job.replicas {
                    let entry = used.entry(r.node.clone()).or_default();
                    if let Some(task) = job.spec.tasks.get(r.task as usize) {
                        entry.0.add(&task.resources);
                    }
                    if entry.1.last() != Some(&job.spec.name.to_string()) {
                        entry.1.push(job.spec.name.to_string());
                    }
                }
            }
            s.nodes()
                .values()
                .map(|n| {
                    let mut p = node_to_proto(n);
                    let (u, jobs) = used.remove(&n.spec.name).unwrap_or_default();
                    p.used = Some(resources_to_proto(&u));
                    p.jobs = jobs;
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
