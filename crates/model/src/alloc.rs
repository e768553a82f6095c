//! Where a job's replicas run: node and GPU indices per replica.

use serde::{Deserialize, Serialize};

use crate::job::JobId;
use crate::name::Name;
use crate::resources::Resources;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaAlloc {
    /// Index into the job's `tasks`.
    pub task: u32,
    /// Replica number within its task, from 0.
    pub index: u32,
    pub node: Name,
    /// GPU indices on that node, ascending; as many as the task asks for.
    pub gpus: Vec<u32>,
}

/// A part of a suspended job's resources that another job runs on. When the borrower stops
/// holding it, it returns to the suspended job (which then resumes in place).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lend {
    pub from: JobId,
    pub node: Name,
    pub resources: Resources,
    pub gpus: Vec<u32>,
}

pub fn gpu_mask(gpus: &[u32]) -> u64 {
    gpus.iter().fold(0u64, |m, &g| m | (1u64 << g))
}

pub fn mask_to_gpus(mask: u64) -> Vec<u32> {
    (0..64).filter(|i| mask & (1u64 << i) != 0).collect()
}
