//! Unhealthy GPUs (decisions.md section 14): a GPU its node reports failed (a critical XID
//! error, uncorrectable ECC errors, fallen off the bus, a failed health check) or that an
//! operator marks takes no new work and leaves the pool's capacity until it is cleared.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::name::Name;

/// Why a GPU is out of service, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFault {
    /// What the node or the operator said ("XID 79", "uncorrectable ECC errors: 3", ...).
    pub error: String,
    pub since_ms: u64,
    /// Found by the operator's health-check program: a later passing check may clear it
    /// when the node's agent is allowed to (`--health-check-clears`). A fault seen through
    /// NVML, or marked by a person, only a person clears.
    pub by_check: bool,
}

/// Faulted GPUs per node, by GPU index.
pub type GpuFaults = BTreeMap<Name, BTreeMap<u32, GpuFault>>;

/// The GPU indices of `faults` as a mask (index `i` is bit `i`), as the ledger tracks GPUs.
pub fn mask_of(faults: Option<&BTreeMap<u32, GpuFault>>) -> u64 {
    faults.map_or(0, |f| f.keys().filter(|&&i| i < 64).fold(0u64, |m, &i| m | (1u64 << i)))
}

/// Where a GPU health change comes from: it decides what it may clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthSource {
    /// The node's agent, from NVML or the health check (`Op::ReportGpu`).
    Agent { by_check: bool },
    /// An operator (`baton gpu healthy|unhealthy`).
    Operator,
}
