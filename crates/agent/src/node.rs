//! What the agent tells the leader about its node (NodeInfo): name, pool, labels, whole-unit
//! resources (MIG slices by profile among them) and the GPUs.

use baton_proto::v1::{GpuDevice, NodeInfo};

use crate::config::AgentConfig;
use crate::inventory::Inventory;

/// This machine's host name, for `--name`'s default.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Total memory in bytes from /proc/meminfo (0 when unreadable).
pub fn machine_memory_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or(0)
}

/// The label that says how the node's agent holds replicas (`cgroup` or `process-group`):
/// `baton nodes` shows the weaker mode, so an operator sees where a job could escape.
pub const CONTAINMENT_LABEL: &str = "baton.dev/containment";

pub fn node_info(config: &AgentConfig, inventory: &Inventory, agent_addr: &str, containment: &str) -> NodeInfo {
    let cpu = config.cpu.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1));
    let memory = config.memory_bytes.unwrap_or_else(machine_memory_bytes);
    let mut resources = std::collections::HashMap::new();
    resources.insert("gpu".to_string(), inventory.healthy_count());
    resources.insert("cpu".to_string(), cpu);
    resources.insert("memory".to_string(), memory);
    // MIG slices, each profile a resource of its own (decisions.md section 11).
    resources.extend(inventory.slice_counts());
    NodeInfo {
        name: config.name.clone(),
        pool: config.pool.clone(),
        rack: config.rack.clone(),
        domains: config.domains.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        labels: config
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain([(CONTAINMENT_LABEL.to_string(), containment.to_string())])
            .collect(),
        resources,
        // A GPU in MIG mode is offered as its slices (in `resources`), never whole.
        gpus: inventory
            .gpus
            .iter()
            .filter(|g| !g.mig)
            .map(|g| GpuDevice {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_bytes: g.memory_bytes,
                healthy: g.healthy,
            })
            .collect(),
        agent_addr: agent_addr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{add_development_slices, development_inventory};

    /// A GPU in MIG mode is offered as its slices, by profile, and is not among the GPUs.
    #[test]
    fn slices_are_offered_by_profile_and_their_gpu_is_not_offered_whole() {
        let mut inv = development_inventory("m1", 2);
        add_development_slices(&mut inv, "m1", &[("mig-1g.10gb".into(), 7)]);
        let info = node_info(&AgentConfig::new("m1", "/nonexistent"), &inv, "", "cgroup");
        assert_eq!(info.resources.get("gpu"), Some(&2));
        assert_eq!(info.resources.get("mig-1g.10gb"), Some(&7));
        let listed: Vec<u32> = info.gpus.iter().map(|g| g.index).collect();
        assert_eq!(listed, [0, 1]);
    }
}
