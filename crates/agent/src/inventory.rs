//! The node's GPUs: from NVML when an NVIDIA driver is present, else development GPUs
//! (`--gpus N`). `nvml_inventory` can run by itself on a GPU machine
//! (`baton agent --inventory-only`).

use serde::Serialize;

use crate::error::InventoryError;

/// One GPU as the agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub memory_bytes: u64,
    pub healthy: bool,
    /// The minor number of its device file (`/dev/nvidia<minor>`, major 195), by which a
    /// replica's cgroup denies it the GPUs it was not given; `None` when unknown
    /// (development GPUs have no device file).
    pub minor: Option<u32>,
}

/// Where the inventory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Nvml,
    Development,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inventory {
    pub source: Source,
    pub gpus: Vec<Gpu>,
}

impl Inventory {
    pub fn healthy_count(&self) -> u64 {
        self.gpus.iter().filter(|g| g.healthy).count() as u64
    }
}

/// Reads every GPU through NVML. `Err(NoDriver)` when the library or driver is missing.
/// A device whose queries fail is listed as unhealthy rather than failing the inventory.
pub fn nvml_inventory() -> Result<Inventory, InventoryError> {
    use nvml_wrapper::Nvml;

    // Any init failure (library missing, driver not loaded, no permission) means this
    // machine cannot use its GPUs through NVML.
    let nvml = Nvml::init().map_err(|e| InventoryError::NoDriver(e.to_string()))?;
    let count = nvml.device_count().map_err(|e| InventoryError::Nvml(format!("device count: {e}")))?;
    let mut gpus = Vec::with_capacity(count as usize);
    for index in 0..count {
        let gpu = match nvml.device_by_index(index) {
            Ok(dev) => {
                let uuid = dev.uuid();
                let model = dev.name();
                let memory = dev.memory_info();
                let healthy = uuid.is_ok() && model.is_ok() && memory.is_ok();
                Gpu {
                    index,
                    uuid: uuid.unwrap_or_else(|e| format!("unknown-{index} ({e})")),
                    model: model.unwrap_or_else(|_| "unknown".to_string()),
                    memory_bytes: memory.map(|m| m.total).unwrap_or(0),
                    healthy,
                    minor: dev.minor_number().ok(),
                }
            }
            Err(e) => {
                tracing::warn!(index, "GPU {index} cannot be queried, reported unhealthy: {e}");
                Gpu {
                    index,
                    uuid: format!("unknown-{index}"),
                    model: "unknown".into(),
                    memory_bytes: 0,
                    healthy: false,
                    minor: None,
                }
            }
        };
        gpus.push(gpu);
    }
    Ok(Inventory { source: Source::Nvml, gpus })
}

/// `count` fake GPUs for development machines, named after the node.
pub fn development_inventory(node: &str, count: u32) -> Inventory {
    let gpus = (0..count)
        .map(|i| Gpu {
            index: i,
            uuid: format!("dev-{node}-{i}"),
            model: "development".into(),
            memory_bytes: 0,
            healthy: true,
            minor: None,
        })
        .collect();
    Inventory { source: Source::Development, gpus }
}

/// NVML when it works (a `--gpus` given as well is ignored with a warning), else
/// `dev_gpus` development GPUs with one line saying so, else a clear error.
pub fn resolve(node: &str, dev_gpus: Option<u32>) -> Result<Inventory, InventoryError> {
    resolve_with(nvml_inventory(), node, dev_gpus)
}

fn resolve_with(
    nvml: Result<Inventory, InventoryError>,
    node: &str,
    dev_gpus: Option<u32>,
) -> Result<Inventory, InventoryError> {
    match (nvml, dev_gpus) {
        (Ok(inv), Some(n)) => {
            eprintln!("warning: NVML found {} GPUs; ignoring --gpus {n}", inv.gpus.len());
            Ok(inv)
        }
        (Ok(inv), None) => Ok(inv),
        (Err(InventoryError::NoDriver(e)), Some(n)) => {
            eprintln!("no NVIDIA driver found (NVML: {e}); using --gpus {n} development GPUs");
            Ok(development_inventory(node, n))
        }
        (Err(InventoryError::NoDriver(e)), None) => Err(InventoryError::NoDriverNoFallback(e)),
        (Err(e), _) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_falls_back_or_explains() {
        let no = || Err(InventoryError::NoDriver("libnvidia-ml.so: not found".into()));
        let inv = resolve_with(no(), "n1", Some(2)).unwrap();
        assert_eq!(inv.source, Source::Development);
        assert_eq!(inv.gpus[1].uuid, "dev-n1-1");
        let err = resolve_with(no(), "n1", None).unwrap_err().to_string();
        assert!(err.contains("no NVIDIA driver found") && err.contains("--gpus N"), "{err}");
    }

    #[test]
    fn nvml_wins_over_development_gpus() {
        let real = Inventory {
            source: Source::Nvml,
            gpus: vec![Gpu {
                index: 0,
                uuid: "GPU-1".into(),
                model: "H100".into(),
                memory_bytes: 1,
                healthy: true,
                minor: Some(0),
            }],
        };
        assert_eq!(resolve_with(Ok(real.clone()), "n1", Some(8)).unwrap(), real);
    }
}
