//! A replica's data directory: `cluster.id` (who the data belongs to) and `raft.sled` (the
//! log, the vote and the latest snapshot).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::OpenError;
use crate::identity::{DATA_FORMAT, IDENTITY_FILE, Identity, OLDEST_READABLE_FORMAT};
use crate::store::{KvStore, SledKv, Space};
use crate::types::NodeId;

pub const SLED_DIR: &str = "raft.sled";

/// Opens the data directory for replica `node_id` of `cluster_id`, creating it on first
/// start. A directory of another cluster or replica, or one with a part missing, is refused.
pub fn open(dir: &Path, cluster_id: &str, node_id: NodeId) -> Result<Arc<dyn KvStore>, OpenError> {
    std::fs::create_dir_all(dir).map_err(|e| OpenError::Io {
        path: dir.to_path_buf(),
        reason: format!("cannot create the data directory: {e}"),
    })?;
    let sled_path = dir.join(SLED_DIR);
    let id_file = dir.join(IDENTITY_FILE);
    let existing = Identity::read(dir)?;
    if let Some(found) = &existing {
        if found.cluster_id != cluster_id {
            return Err(OpenError::ClusterMismatch {
                file: id_file,
                found: found.cluster_id.clone(),
                configured: cluster_id.to_string(),
            });
        }
        if found.node_id != node_id {
            return Err(OpenError::NodeMismatch { file: id_file, found: found.node_id, configured: node_id });
        }
        if found.format > DATA_FORMAT {
            return Err(OpenError::FormatTooNew { file: id_file, found: found.format, newest: DATA_FORMAT });
        }
        if found.format < OLDEST_READABLE_FORMAT {
            return Err(OpenError::FormatTooOld { file: id_file, found: found.format, oldest: OLDEST_READABLE_FORMAT });
        }
        if !sled_path.exists() {
            return Err(incomplete(dir, sled_path));
        }
    }
    let kv = SledKv::open(&sled_path).map_err(crate::store::StoreError::from)?;
    if existing.is_none() {
        // The identity is written after the database, so a first start cut short leaves an
        // empty database without identity, which is still a fresh directory. Data without
        // an identity is not.
        if has_records(&kv)? {
            return Err(incomplete(dir, id_file));
        }
        Identity { cluster_id: cluster_id.to_string(), node_id, format: DATA_FORMAT }.write(dir)?;
    } else if let Some(old) = existing.filter(|found| found.format < DATA_FORMAT) {
        // Readable, as checked above: from now on it is this build's format.
        tracing::info!(dir = %dir.display(), from = old.format, to = DATA_FORMAT, "data directory format upgraded");
        Identity { format: DATA_FORMAT, ..old }.write(dir)?;
    }
    Ok(Arc::new(kv))
}

fn incomplete(dir: &Path, missing: PathBuf) -> OpenError {
    OpenError::Incomplete { dir: dir.to_path_buf(), missing }
}

fn has_records(kv: &SledKv) -> Result<bool, OpenError> {
    for space in Space::ALL {
        if kv.last(space).map_err(crate::store::StoreError::from)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}
