//! The latest snapshot as one checksummed record: its metadata and the serialized `State`.
//!
//! A snapshot says the data format its state needs ([`stamped`], [`format_of`]): the newest
//! format of the commands applied into it, never below the layout's own
//! ([`baton_model::format::STATE_LAYOUT_FORMAT`]). The number rides at the end of the
//! snapshot's id (`...;format=N`), which openraft keeps with the snapshot and sends with
//! every chunk, so a replica can refuse a snapshot it cannot read before taking any of it,
//! and builds without the number still read the id as an opaque name. A snapshot without
//! the number was written by a build from before it: it is taken as needing
//! [`UNSTAMPED_FORMAT`].

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::kv::{KvStore, Space, Write};
use crate::codec::{seal, unseal};
use crate::types::SnapshotMeta;

const KEY: u64 = 0;

/// The format taken for a snapshot whose id carries no format: the builds that wrote none
/// read formats up to 5 at most, and their snapshot may hold anything those formats
/// brought, so the newest of them is assumed (refusing a snapshot that might not decode
/// rather than risking it).
pub const UNSTAMPED_FORMAT: u32 = 5;

/// What separates a snapshot's id from its format; no cluster id or number contains `;`.
const FORMAT_MARK: &str = ";format=";

/// `id` with the data format `format` its snapshot needs.
pub fn stamped(id: &str, format: u32) -> String {
    format!("{id}{FORMAT_MARK}{format}")
}

/// The data format the snapshot with id `id` needs ([`UNSTAMPED_FORMAT`] when it says none).
pub fn format_of(id: &str) -> u32 {
    id.rsplit_once(FORMAT_MARK).and_then(|(_, n)| n.parse().ok()).unwrap_or(UNSTAMPED_FORMAT)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_id_gives_its_format_back() {
        assert_eq!(format_of(&stamped("3-120-0", 4)), 4);
        assert_eq!(format_of(&stamped("restored-prod-f7-9", 3)), 3);
    }

    #[test]
    fn an_id_without_a_format_is_taken_as_the_last_unstamped_builds() {
        assert_eq!(format_of("3-120-0"), UNSTAMPED_FORMAT);
        assert_eq!(format_of("restored-prod-42"), UNSTAMPED_FORMAT);
        assert_eq!(format_of("x;format=junk"), UNSTAMPED_FORMAT);
    }
}
