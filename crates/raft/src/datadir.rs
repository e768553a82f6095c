//! A replica's data directory: `cluster.id` (who the data belongs to) and `raft.sled` (the
//! log, the vote and the latest snapshot).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::OpenError;
use crate::identity::{IDENTITY_FILE, Identity};
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
        Identity { cluster_id: cluster_id.to_string(), node_id }.write(dir)?;
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
