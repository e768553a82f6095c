//! The node's NVLink domain from NVML's fabric information (decisions.md section 10): on
//! multi-node NVLink systems (GB200 NVL72 and the like) every GPU of one NVLink domain
//! reports the same cluster UUID and clique id once its fabric is set up. The agent names
//! its `nvlink` domain after them, unless `--topology nvlink=...` names it.
//!
//! nvml-wrapper does not wrap `nvmlDeviceGetGpuFabricInfo`; its sys crate binds it, and the
//! call is made here through the library NVML already loaded.

/// One GPU's fabric information, as far as the domain goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fabric {
    pub cluster_uuid: [u8; 16],
    pub clique_id: u32,
    /// The fabric manager has finished setting the GPU up.
    pub completed: bool,
    /// NVML's status of the fabric probe: 0 is success.
    pub status: u32,
}

/// The level whose domain the fabric names.
pub const NVLINK_LEVEL: &str = "nvlink";

/// `nvl-<cluster uuid in hex>-<clique id>`: at most 47 characters, a valid domain name.
pub fn domain_name(f: &Fabric) -> String {
    let hex: String = f.cluster_uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!("nvl-{hex}-{}", f.clique_id)
}

/// The node's NVLink domain from its GPUs' fabric information: `Ok(None)` when no GPU is
/// on a fabric (a PCIe or single-node NVLink system: the call is not supported, or the
/// cluster UUID is all zeros); an error when the GPUs disagree or a fabric is not set up
/// yet, since a wrong domain would let a gang span two.
pub fn domain_of(gpus: &[Option<Fabric>]) -> Result<Option<String>, String> {
    let on_fabric: Vec<&Fabric> = gpus.iter().flatten().filter(|f| f.cluster_uuid != [0; 16]).collect();
    let Some(first) = on_fabric.first() else { return Ok(None) };
    if let Some(f) = on_fabric.iter().find(|f| !f.completed || f.status != 0) {
        return Err(format!("the NVLink fabric is not set up (state completed: {}, status {})", f.completed, f.status));
    }
    if on_fabric.len() != gpus.len()
        || on_fabric.iter().any(|f| (f.cluster_uuid, f.clique_id) != (first.cluster_uuid, first.clique_id))
    {
        return Err("the GPUs report different NVLink domains (or some none)".into());
    }
    Ok(Some(domain_name(first)))
}

/// Reads every GPU's fabric information through NVML; `None` for a GPU where the call is
/// not supported (or not in this driver).
pub fn nvml_fabrics() -> Result<Vec<Option<Fabric>>, String> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| format!("NVML: {e}"))?;
    let count = nvml.device_count().map_err(|e| format!("NVML device count: {e}"))?;
    let mut out = Vec::with_capacity(count as usize);
    for index in 0..count {
        let dev = nvml.device_by_index(index).map_err(|e| format!("NVML GPU {index}: {e}"))?;
        let mut info =
            nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_t { clusterUuid: [0; 16], status: 0, cliqueId: 0, state: 0 };
        // SAFETY: the handle belongs to this NVML instance, alive for the call; `info` is a
        // plain struct NVML fills. A driver without the symbol answers Err, not a call.
        let ret = match nvml.lib().nvmlDeviceGetGpuFabricInfo.as_ref() {
            Ok(f) => unsafe { f(dev.handle(), &mut info) },
            Err(_) => {
                out.push(None);
                continue;
            }
        };
        out.push((ret == nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_SUCCESS).then_some(Fabric {
            cluster_uuid: info.clusterUuid,
            clique_id: info.cliqueId,
            completed: u32::from(info.state) == nvml_wrapper_sys::bindings::NVML_GPU_FABRIC_STATE_COMPLETED,
            status: info.status,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(uuid_byte: u8, clique: u32) -> Option<Fabric> {
        Some(Fabric { cluster_uuid: [uuid_byte; 16], clique_id: clique, completed: true, status: 0 })
    }

    #[test]
    fn gpus_of_one_clique_name_the_domain() {
        let d = domain_of(&[on(0xab, 7), on(0xab, 7)]).unwrap().unwrap();
        assert_eq!(d, format!("nvl-{}-7", "ab".repeat(16)));
        assert!(baton_model::name::Name::new(&d).is_ok(), "a valid domain name: {d}");
    }

    #[test]
    fn no_fabric_names_no_domain() {
        assert_eq!(domain_of(&[None, None]), Ok(None));
        assert_eq!(domain_of(&[on(0, 0)]), Ok(None), "an all-zero cluster UUID is no fabric");
        assert_eq!(domain_of(&[]), Ok(None));
    }

    #[test]
    fn disagreeing_or_unfinished_fabrics_are_an_error() {
        assert!(domain_of(&[on(1, 7), on(1, 8)]).unwrap_err().contains("different"));
        assert!(domain_of(&[on(1, 7), None]).unwrap_err().contains("different"));
        let mut f = on(1, 7).unwrap();
        f.completed = false;
        assert!(domain_of(&[Some(f)]).unwrap_err().contains("not set up"));
    }
}
