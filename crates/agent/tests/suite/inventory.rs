//! The inventory path this machine takes: with an NVIDIA driver, NVML lists real GPUs;
//! without one, a clear message (and development GPUs only when asked for).

use baton_agent::InventoryError;
use baton_agent::inventory::{DevDevices, Source, nvml_inventory, resolve};

fn dev(gpus: Option<u32>) -> DevDevices {
    DevDevices { gpus, mig: Vec::new() }
}

#[test]
fn inventory_uses_nvml_or_says_clearly_that_there_is_no_driver() {
    match nvml_inventory() {
        Err(InventoryError::NoDriver(detail)) => {
            let err = resolve("n1", &dev(None)).unwrap_err().to_string();
            assert!(err.starts_with("no NVIDIA driver found (NVML: "), "{err}");
            assert!(err.contains("--gpus N"), "{err}");
            assert!(err.contains(&detail));
            let inv = resolve("n1", &dev(Some(2))).unwrap();
            assert_eq!(inv.source, Source::Development);
            assert_eq!(inv.gpus.len(), 2);
            assert_eq!(inv.gpus[0].uuid, "dev-n1-0");
        }
        Ok(inv) => {
            assert_eq!(inv.source, Source::Nvml);
            for (i, g) in inv.gpus.iter().enumerate() {
                assert_eq!(g.index as usize, i);
                if g.healthy {
                    assert!(g.uuid.starts_with("GPU-") || g.uuid.starts_with("MIG-"), "{g:?}");
                    assert!(g.memory_bytes > 0, "{g:?}");
                }
            }
            for s in &inv.slices {
                assert!(s.uuid.starts_with("MIG-") && s.profile.starts_with("mig-"), "{s:?}");
                assert!(inv.gpus[s.gpu as usize].mig, "a slice's GPU is in MIG mode: {s:?}");
            }
            assert_eq!(resolve("n1", &dev(Some(2))).unwrap().source, Source::Nvml, "NVML wins over --gpus");
        }
        Err(e) => panic!("unexpected inventory error: {e}"),
    }
}
