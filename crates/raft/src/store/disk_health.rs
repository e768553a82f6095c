//! Whether the log's disk takes writes right now.
//!
//! The log writer marks it failing when a write or a sync fails (a full disk, an I/O error)
//! and healthy again when a retry succeeds; the replica refuses new writes while it is
//! failing, with the storage error in the refusal, so clients learn why at once instead of
//! timing out.

use std::sync::{Arc, Mutex, PoisonError};

use super::kv::KvError;

/// Shared between the log writer thread and the replica. Cheap to clone.
#[derive(Clone, Default)]
pub struct DiskHealth(Arc<Mutex<Option<KvError>>>);

impl DiskHealth {
    /// The error the last write or sync failed with, while no retry has succeeded since.
    pub fn failing(&self) -> Option<KvError> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records a failure; true if the disk was healthy until now.
    pub(crate) fn fail(&self, e: &KvError) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).replace(e.clone()).is_none()
    }

    /// Records a success; true if the disk was failing until now.
    pub(crate) fn recover(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take().is_some()
    }
}
