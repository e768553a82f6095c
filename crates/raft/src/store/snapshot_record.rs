//! The latest snapshot as one checksummed record: its metadata and the serialized `State`.

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::kv::{KvStore, Space, Write};
use crate::codec::{seal, unseal};
use crate::types::SnapshotMeta;

const KEY: u64 = 0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta,
    /// bincode of `baton_model::State`.
    pub data: Vec<u8>,
}

impl StoredSnapshot {
    pub fn load(kv: &dyn KvStore) -> Result<Option<StoredSnapshot>, StoreError> {
        match kv.get(Space::Snapshot, KEY)? {
            None => Ok(None),
            Some(rec) => unseal(&rec).map(Some).map_err(|e| StoreError::Corrupt {
                location: kv.location(Space::Snapshot),
                record: "snapshot".into(),
                reason: e.to_string(),
            }),
        }
    }

    /// Replaces the stored snapshot; durable when this returns.
    pub fn save(&self, kv: &dyn KvStore) -> Result<(), StoreError> {
        let rec = seal(self).map_err(|e| StoreError::Corrupt {
            location: kv.location(Space::Snapshot),
            record: "snapshot".into(),
            reason: e.to_string(),
        })?;
        kv.write(&[Write::Put(Space::Snapshot, KEY, rec)])?;
        kv.flush()?;
        Ok(())
    }
}
