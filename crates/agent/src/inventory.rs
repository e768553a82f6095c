//! The node's GPUs and MIG slices: from NVML when an NVIDIA driver is present, else
//! development GPUs (`--gpus N`) and slices (`--mig PROFILE=N`). `nvml_inventory` can run by
//! itself on a GPU machine (`baton agent --inventory-only`).
//!
//! A GPU in MIG mode is not offered whole: its slices are offered instead, each profile as a
//! resource of its own (decisions.md section 11). The leader numbers the whole GPUs it may
//! hand out from 0 (`Inventory::whole_gpus` maps them to the device indices).

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
    /// MIG mode is on: the GPU is offered as its slices, never whole.
    #[serde(default)]
    pub mig: bool,
}

/// One MIG slice (a GPU instance with its compute instance), offered by its profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slice {
    /// `mig-1g.10gb`: the resource it counts as (`baton_model::resources::SLICE_PREFIX`).
    pub profile: String,
    /// What `CUDA_VISIBLE_DEVICES` names it by (`MIG-...`).
    pub uuid: String,
    /// The index of the GPU it is part of: a replica given the slice may open that GPU's
    /// device file.
    pub gpu: u32,
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
    pub slices: Vec<Slice>,
}

impl Inventory {
    /// The GPUs offered whole: healthy and not in MIG mode.
    pub fn healthy_count(&self) -> u64 {
        self.gpus.iter().filter(|g| g.healthy && !g.mig).count() as u64
    }

    /// The device index of each GPU the leader may hand out whole, by the leader's number
    /// (its position here): GPUs in MIG mode are skipped. Without MIG the identity.
    pub fn whole_gpus(&self) -> Vec<u32> {
        self.gpus.iter().filter(|g| !g.mig).map(|g| g.index).collect()
    }

    /// Slices by profile, as the resources the node offers.
    pub fn slice_counts(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for s in &self.slices {
            *counts.entry(s.profile.clone()).or_insert(0) += 1;
        }
        counts
    }
}

/// The profile a MIG device's name gives: `NVIDIA A100-SXM4-40GB MIG 1g.5gb` is
/// `mig-1g.5gb`; a `+` (`1g.5gb+me`, with media engines) becomes `-`, since resource names
/// have no `+`. `None` when the name says no profile.
pub fn profile_of(device_name: &str) -> Option<String> {
    let (_, profile) = device_name.rsplit_once(" MIG ")?;
    let profile = profile.trim().replace('+', "-");
    let name = format!("{}{profile}", baton_model::resources::SLICE_PREFIX);
    baton_model::resources::validate_resource_name(&name).ok()?;
    baton_model::resources::is_slice_profile(&name).then_some(name)
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
    let mut slices = Vec::new();
    for index in 0..count {
        let gpu = match nvml.device_by_index(index) {
            Ok(dev) => {
                let uuid = dev.uuid();
                let model = dev.name();
                let memory = dev.memory_info();
                let healthy = uuid.is_ok() && model.is_ok() && memory.is_ok();
                // NotSupported on GPUs without MIG: those are whole.
                let mig = dev.mig_mode().is_ok_and(|m| m.current == MIG_ENABLED);
                if mig {
                    slices.extend(nvml_slices(&dev, index));
                }
                Gpu {
                    index,
                    uuid: uuid.unwrap_or_else(|e| format!("unknown-{index} ({e})")),
                    model: model.unwrap_or_else(|_| "unknown".to_string()),
                    memory_bytes: memory.map(|m| m.total).unwrap_or(0),
                    healthy,
                    minor: dev.minor_number().ok(),
                    mig,
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
                    mig: false,
                }
            }
        };
        gpus.push(gpu);
    }
    Ok(Inventory { source: Source::Nvml, gpus, slices })
}

/// The MIG devices of GPU `index` (in MIG mode), each with its profile and UUID. A slot
/// with no device, or one whose name or UUID cannot be read, is left out with a warning.
fn nvml_slices(dev: &nvml_wrapper::Device<'_>, index: u32) -> Vec<Slice> {
    let slots = dev.mig_device_count().unwrap_or(0).min(MAX_SLICES_PER_GPU);
    let mut out = Vec::new();
    for slot in 0..slots {
        // NotFound: no instance in this slot.
        let Ok(mig) = dev.mig_device_by_index(slot) else { continue };
        let (name, uuid) = (mig.name(), mig.uuid());
        match (name.as_deref().ok().and_then(profile_of), uuid) {
            (Some(profile), Ok(uuid)) => out.push(Slice { profile, uuid, gpu: index }),
            (_, uuid) => {
                tracing::warn!(gpu = index, slot, ?name, ?uuid, "a MIG device without a profile or UUID is not offered")
            }
        }
    }
    out
}

/// NVML's `NVML_DEVICE_MIG_ENABLE`: a GPU's MIG mode is on.
const MIG_ENABLED: u32 = 1;

/// NVML's MIG devices per GPU are at most 7 today; anything beyond this is not a GPU's.
const MAX_SLICES_PER_GPU: u32 = 16;

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
            mig: false,
        })
        .collect();
    Inventory { source: Source::Development, gpus, slices: Vec::new() }
}

/// Development MIG slices (`--mig mig-1g.10gb=7`): each profile on a development GPU of its
/// own in MIG mode, after the whole ones, so the slices of one profile share a GPU.
pub fn add_development_slices(inv: &mut Inventory, node: &str, profiles: &[(String, u32)]) {
    for (profile, count) in profiles {
        let index = inv.gpus.len() as u32;
        inv.gpus.push(Gpu {
            index,
            uuid: format!("dev-{node}-{index}"),
            model: "development (MIG)".into(),
            memory_bytes: 0,
            healthy: true,
            minor: None,
            mig: true,
        });
        inv.slices.extend((0..*count).map(|i| Slice {
            profile: profile.clone(),
            uuid: format!("MIG-dev-{node}-{index}-{i}"),
            gpu: index,
        }));
    }
}

/// What development devices to fall back on without a driver: `--gpus N` whole GPUs and
/// `--mig PROFILE=N` slices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevDevices {
    pub gpus: Option<u32>,
    pub mig: Vec<(String, u32)>,
}

impl DevDevices {
    fn any(&self) -> bool {
        self.gpus.is_some() || !self.mig.is_empty()
    }
}

/// NVML when it works (development devices given as well are ignored with a warning), else
/// the development devices with one line saying so, else a clear error.
pub fn resolve(node: &str, dev: &DevDevices) -> Result<Inventory, InventoryError> {
    resolve_with(nvml_inventory(), node, dev)
}

fn resolve_with(
    nvml: Result<Inventory, InventoryError>,
    node: &str,
    dev: &DevDevices,
) -> Result<Inventory, InventoryError> {
    match nvml {
        Ok(inv) => {
            if dev.any() {
                let (g, s) = (inv.gpus.len(), inv.slices.len());
                eprintln!("warning: NVML found {g} GPUs and {s} MIG slices; ignoring --gpus and --mig");
            }
            Ok(inv)
        }
        Err(InventoryError::NoDriver(e)) if dev.any() => {
            let n = dev.gpus.unwrap_or(0);
            let slices: u32 = dev.mig.iter().map(|(_, c)| c).sum();
            eprintln!(
                "no NVIDIA driver found (NVML: {e}); using {n} development GPUs and {slices} development MIG slices"
            );
            let mut inv = development_inventory(node, n);
            add_development_slices(&mut inv, node, &dev.mig);
            Ok(inv)
        }
        Err(InventoryError::NoDriver(e)) => Err(InventoryError::NoDriverNoFallback(e)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn gpus(n: u32) -> DevDevices {
        DevDevices { gpus: Some(n), mig: Vec::new() }
    }

    #[test]
    fn no_driver_falls_back_or_explains() {
        let no = || Err(InventoryError::NoDriver("libnvidia-ml.so: not found".into()));
        let inv = resolve_with(no(), "n1", &gpus(2)).unwrap();
        assert_eq!(inv.source, Source::Development);
        assert_eq!(inv.gpus[1].uuid, "dev-n1-1");
        let err = resolve_with(no(), "n1", &DevDevices::default()).unwrap_err().to_string();
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
                mig: false,
            }],
            slices: Vec::new(),
        };
        assert_eq!(resolve_with(Ok(real.clone()), "n1", &gpus(8)).unwrap(), real);
    }

    /// Development slices sit on GPUs of their own in MIG mode, after the whole ones: the
    /// node offers 2 whole GPUs (numbered 0 and 1 by the leader) and the slices by profile.
    #[test]
    fn development_slices_are_offered_by_profile_and_their_gpus_never_whole() {
        let no = || Err(InventoryError::NoDriver("no driver".into()));
        let dev = DevDevices { gpus: Some(2), mig: vec![("mig-1g.10gb".into(), 7), ("mig-3g.40gb".into(), 2)] };
        let inv = resolve_with(no(), "n1", &dev).unwrap();
        assert_eq!(inv.healthy_count(), 2);
        assert_eq!(inv.whole_gpus(), [0, 1]);
        assert_eq!(inv.slice_counts(), BTreeMap::from([("mig-1g.10gb".into(), 7), ("mig-3g.40gb".into(), 2)]));
        assert_eq!(inv.slices[0], Slice { profile: "mig-1g.10gb".into(), uuid: "MIG-dev-n1-2-0".into(), gpu: 2 });
        assert_eq!(inv.slices[8].gpu, 3);
        let only_slices = DevDevices { gpus: None, mig: vec![("mig-1g.10gb".into(), 1)] };
        assert_eq!(resolve_with(no(), "n1", &only_slices).unwrap().healthy_count(), 0);
    }

    #[test]
    fn a_mig_devices_name_gives_its_profile() {
        assert_eq!(profile_of("NVIDIA A100-SXM4-40GB MIG 1g.5gb").as_deref(), Some("mig-1g.5gb"));
        assert_eq!(profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me").as_deref(), Some("mig-1g.10gb-me"));
        assert_eq!(profile_of("NVIDIA H100 80GB HBM3"), None);
        assert_eq!(profile_of("NVIDIA H100 MIG "), None);
    }
}
