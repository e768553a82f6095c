//! GPU faults through NVML: critical XID events (those NVIDIA documents as needing a GPU
//! reset or node attention), and, polled, uncorrectable ECC errors, pages pending
//! retirement and a GPU fallen off the bus. Only on a machine with an NVIDIA driver; no test
//! here has one (the injected watch stands in), so this file is kept to the calls.

use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;

use super::{Finding, GpuWatch};

/// XIDs that mean the GPU needs a reset or a person (NVIDIA's XID catalogue): double-bit
/// ECC (48), row remapping failed (63, 64), NVLink (74), fallen off the bus (79),
/// uncontained ECC (94, 95), GSP and firmware errors (119, 120, 140), and others a GPU does
/// not recover from by itself. XIDs an application causes (13, 31, 43, 45) are its own
/// failure, not the GPU's: they are logged only.
pub const CRITICAL_XIDS: [u64; 13] = [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140];

/// How often the polled conditions are read.
const POLL_CONDITIONS_MS: u64 = 5_000;

pub struct NvmlWatch {
    nvml: &'static Nvml,
    events: Option<nvml_wrapper::event::EventSet<'static>>,
    count: u32,
    /// Per GPU, the last uncorrectable ECC count, pending retirement and loss seen: a
    /// condition is reported when it appears or grows, not again at every poll.
    last: Vec<Seen>,
    next_conditions: Instant,
}

#[derive(Default, Clone)]
struct Seen {
    ecc_uncorrected: u64,
    pending_retirement: bool,
    lost: bool,
}

impl NvmlWatch {
    /// Opens NVML and registers for critical XID and double-bit ECC events on every GPU.
    /// A GPU that cannot register still gets the polled checks.
    pub fn open() -> Result<NvmlWatch, NvmlError> {
        // The event set borrows NVML for as long as the agent runs: one NVML, never freed.
        let nvml: &'static Nvml = Box::leak(Box::new(Nvml::init()?));
        let count = nvml.device_count()?;
        let mut set = Some(nvml.create_event_set()?);
        for index in 0..count {
            let Ok(dev) = nvml.device_by_index(index) else { continue };
            let wanted = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
            let supported = dev.supported_event_types().map(|s| s & wanted).unwrap_or(EventTypes::empty());
            let Some(current) = set.take() else { break };
            match dev.register_events(supported, current) {
                Ok(s) => set = Some(s),
                Err(e) => {
                    tracing::warn!(index, "GPU {index}: no XID events ({e}); its ECC and bus state are still polled");
                    set = nvml.create_event_set().ok();
                }
            }
        }
        Ok(NvmlWatch {
            nvml,
            events: set,
            count,
            last: vec![Seen::default(); count as usize],
            next_conditions: Instant::now(),
        })
    }

    fn wait_event(&mut self, wait: Duration) -> Option<Finding> {
        let Some(set) = &self.events else {
            std::thread::sleep(wait);
            return None;
        };
        let data = match set.wait(wait.as_millis().min(u128::from(u32::MAX)) as u32) {
            Ok(d) => d,
            Err(NvmlError::Timeout) => return None,
            Err(e) => {
                tracing::warn!("waiting for GPU events failed: {e}");
                std::thread::sleep(wait);
                return None;
            }
        };
        let gpu = data.device.index().ok()?;
        if data.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
            return Some(Finding { gpu, error: "double-bit ECC error".into() });
        }
        match data.event_data {
            Some(XidError::Value(xid)) if CRITICAL_XIDS.contains(&xid) => {
                Some(Finding { gpu, error: format!("XID {xid}") })
            }
            Some(XidError::Value(xid)) => {
                tracing::warn!(
                    gpu,
                    xid,
                    "XID {xid} on GPU {gpu}: an application error, not the GPU's; it stays in service"
                );
                None
            }
            Some(XidError::Unknown) | None => Some(Finding { gpu, error: "XID (unknown code)".into() }),
        }
    }

    fn conditions(&mut self) -> Vec<Finding> {
        let mut found = Vec::new();
        for index in 0..self.count {
            let seen = &mut self.last[index as usize];
            let dev = match self.nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    if !seen.lost {
                        seen.lost = true;
                        found.push(Finding { gpu: index, error: format!("GPU lost: {e}") });
                    }
                    continue;
                }
            };
            if let Ok(n) = dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                && n > seen.ecc_uncorrected
            {
                seen.ecc_uncorrected = n;
                found.push(Finding { gpu: index, error: format!("uncorrectable ECC errors: {n}") });
            }
            if let Ok(pending) = dev.are_pages_pending_retired() {
                if pending && !seen.pending_retirement {
                    found.push(Finding { gpu: index, error: "memory pages pending retirement (needs a reset)".into() });
                }
                seen.pending_retirement = pending;
            }
        }
        found
    }
}

impl GpuWatch for NvmlWatch {
    fn poll(&mut self, wait: Duration) -> Vec<Finding> {
        let mut found: Vec<Finding> = self.wait_event(wait).into_iter().collect();
        if Instant::now() >= self.next_conditions {
            self.next_conditions = Instant::now() + Duration::from_millis(POLL_CONDITIONS_MS);
            found.extend(self.conditions());
        }
        found
    }

    fn describe(&self) -> String {
        format!(
            "NVML, {} GPUs (critical XID events; ECC, retirement and bus state every {POLL_CONDITIONS_MS} ms)",
            self.count
        )
    }
}
