//! Backups (`baton snapshot save`, `baton snapshot restore`): the whole replicated state at
//! one applied index, in a file that says what it is.
//!
//! The file: 8 bytes `BATONBAK`, the format version (u32, little-endian), then a checksummed
//! record ([`crate::codec::seal`]: crc32, then bincode) of a [`Backup`]. The version comes
//! before the record so that a file of a newer format is refused by number, not by a
//! decoding error. Version 2 adds the data format the state needs ([`Backup::format`]);
//! a version-1 file, written before, is taken as needing [`UNSTAMPED_FORMAT`]. A backup
//! needing a newer data format than this build reads is refused, naming both.
//!
//! Restoring seeds an empty data directory with the backup as the replica's snapshot, under a
//! NEW cluster id and with a membership of that one replica: the restored cluster never talks
//! to the old one (every RPC carries the cluster id), and grows with `cluster add-replica`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openraft::{BasicNode, CommittedLeaderId, Membership};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_state, seal, unseal};
use crate::datadir;
use crate::error::ReadError;
use crate::identity::DATA_FORMAT;
use crate::replica::Replica;
use crate::store::{StoredSnapshot, UNSTAMPED_FORMAT, stamped};
use crate::types::{LogId, NodeId, SnapshotMeta, StoredMembership};

/// The backup format this build writes, and the newest it reads.
pub const BACKUP_FORMAT: u32 = 2;
/// The backup format before the data format was recorded in it.
const BACKUP_FORMAT_UNSTAMPED: u32 = 1;
const MAGIC: &[u8; 8] = b"BATONBAK";
const HEADER_BYTES: usize = 12;

/// The state at one applied index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The cluster it was taken from.
    pub cluster_id: String,
    /// The log index the state reflects.
    pub index: u64,
    /// bincode of `baton_model::State`.
    pub state: Vec<u8>,
    /// The data format the state needs (the newest the cluster had used).
    pub format: u32,
}

/// A backup as version 1 wrote it, without the data format.
#[derive(Deserialize)]
struct BackupV1 {
    cluster_id: String,
    index: u64,
    state: Vec<u8>,
}

/// Why a backup file cannot be used, or a restore cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackupError {
    #[error("{file}: not a baton snapshot file (it does not start with BATONBAK)")]
    NotABackup { file: PathBuf },
    #[error("{file}: snapshot format {found} is newer than this build reads (up to {BACKUP_FORMAT})")]
    TooNew { file: PathBuf, found: u32 },
    #[error("{file}: damaged or truncated: {reason}")]
    Damaged { file: PathBuf, reason: String },
    #[error(
        "{file}: the snapshot needs data format {needs}, newer than this build reads (formats up to {DATA_FORMAT}); restore it with a build that reads format {needs}"
    )]
    DataTooNew { file: PathBuf, needs: u32 },
    #[error("the restored cluster needs a new cluster id: {id:?} is the id of the cluster the snapshot was taken from")]
    SameClusterId { id: String },
    #[error("{dir}: not empty; restore into a new, empty data directory")]
    NotEmpty { dir: PathBuf },
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error("{0}")]
    Open(String),
}

impl Backup {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, BackupError> {
        let record =
            seal(self).map_err(|e| BackupError::Damaged { file: PathBuf::from("-"), reason: e.to_string() })?;
        let mut out = Vec::with_capacity(HEADER_BYTES + record.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&BACKUP_FORMAT.to_le_bytes());
        out.extend_from_slice(&record);
        Ok(out)
    }

    /// Reads and checks a file's bytes (`file` names it in errors): its kind, its format, its
    /// checksum and that its state decodes.
    pub fn from_bytes(bytes: &[u8], file: &Path) -> Result<Backup, BackupError> {
        let file = file.to_path_buf();
        if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
            return Err(BackupError::NotABackup { file });
        }
        let found = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if found > BACKUP_FORMAT {
            return Err(BackupError::TooNew { file, found });
        }
        let damaged = |reason: String| BackupError::Damaged { file: file.clone(), reason };
        let record = &bytes[HEADER_BYTES..];
        let backup = if found == BACKUP_FORMAT_UNSTAMPED {
            let old: BackupV1 = unseal(record).map_err(|e| damaged(e.to_string()))?;
            Backup { cluster_id: old.cluster_id, index: old.index, state: old.state, format: UNSTAMPED_FORMAT }
        } else {
            unseal::<Backup>(record).map_err(|e| damaged(e.to_string()))?
        };
        // Before decoding: a newer build's state may not decode here at all.
        if backup.format > DATA_FORMAT {
            return Err(BackupError::DataTooNew { file, needs: backup.format });
        }
        decode_state(&backup.state).map_err(|e| damaged(format!("the state does not decode: {e}")))?;
        Ok(backup)
    }
}

impl Replica {
    /// The state as of every write acknowledged before the call (a linearizable read), with
    /// the index it reflects.
    pub async fn backup(&self) -> Result<Backup, ReadError> {
        self.read(|_| ()).await?;
        let (index, format, state) = self.core().sm_snapshot();
        let state = state.map_err(|e| ReadError::Encode(e.to_string()))?;
        Ok(Backup { cluster_id: self.cluster_id().to_string(), index, state, format })
    }
}

/// Seeds the empty (or missing) data directory `dir` of replica `node_id` at `addr`, of the
/// new cluster `cluster_id`, with `backup`. Returns the index it starts from.
pub fn restore(backup: &Backup, dir: &Path, cluster_id: &str, node_id: NodeId, addr: &str) -> Result<u64, BackupError> {
    if cluster_id == backup.cluster_id {
        return Err(BackupError::SameClusterId { id: cluster_id.to_string() });
    }
    let io = |e: std::io::Error| BackupError::Io { path: dir.to_path_buf(), reason: e.to_string() };
    if dir.exists() && std::fs::read_dir(dir).map_err(io)?.next().is_some() {
        return Err(BackupError::NotEmpty { dir: dir.to_path_buf() });
    }
    let kv = datadir::open(dir, cluster_id, node_id).map_err(|e| BackupError::Open(e.to_string()))?;
    // Term 0: the restored replica's first election (term 1) is newer than anything here.
    let log_id = LogId::new(CommittedLeaderId::new(0, node_id), backup.index);
    let membership =
        Membership::new(vec![BTreeSet::from([node_id])], BTreeMap::from([(node_id, BasicNode::new(addr))]));
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
        snapshot_id: stamped(&format!("restored-{}-{}", backup.cluster_id, backup.index), backup.format),
    };
    let saved = StoredSnapshot { meta, data: backup.state.clone() }.save(kv.as_ref());
    let closed = kv.close();
    saved.map_err(|e| BackupError::Open(e.to_string()))?;
    closed.map_err(|e| BackupError::Open(e.to_string()))?;
    Ok(backup.index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode;

    fn backup() -> Backup {
        Backup { cluster_id: "prod".into(), index: 42, state: encode(&baton_model::State::new()).unwrap(), format: 3 }
    }

    #[test]
    fn a_backup_needing_a_newer_data_format_is_refused_naming_both() {
        let newer = Backup { format: DATA_FORMAT + 1, ..backup() };
        let err = Backup::from_bytes(&newer.to_bytes().unwrap(), Path::new("b.snap")).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, BackupError::DataTooNew { .. }), "{text}");
        let both = (format!("data format {}", DATA_FORMAT + 1), format!("formats up to {DATA_FORMAT}"));
        assert!(text.contains("b.snap") && text.contains(&both.0) && text.contains(&both.1), "{text}");
    }

    #[test]
    fn a_version_1_file_reads_as_needing_the_unstamped_format() {
        #[derive(Serialize)]
        struct V1 {
            cluster_id: String,
            index: u64,
            state: Vec<u8>,
        }
        let b = backup();
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(
            &seal(&V1 { cluster_id: b.cluster_id.clone(), index: b.index, state: b.state.clone() }).unwrap(),
        );
        let read = Backup::from_bytes(&bytes, Path::new("old.snap")).unwrap();
        assert_eq!(read, Backup { format: UNSTAMPED_FORMAT, ..b });
    }

    #[test]
    fn a_restored_snapshot_keeps_the_format_its_state_needs() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("r1");
        restore(&Backup { format: 4, ..backup() }, &dir, "new", 1, "h:1").unwrap();
        let kv = datadir::open(&dir, "new", 1).unwrap();
        let stored = StoredSnapshot::load(kv.as_ref()).unwrap().unwrap();
        assert_eq!(crate::store::format_of(&stored.meta.snapshot_id), 4, "{}", stored.meta.snapshot_id);
        kv.close().unwrap();
    }

    #[test]
    fn a_backup_round_trips_through_its_bytes() {
        let b = backup();
        assert_eq!(Backup::from_bytes(&b.to_bytes().unwrap(), Path::new("f")).unwrap(), b);
    }

    #[test]
    fn what_is_wrong_with_a_file_is_named() {
        let f = Path::new("backup.snap");
        let bytes = backup().to_bytes().unwrap();
        let err = Backup::from_bytes(b"hello", f).unwrap_err().to_string();
        assert!(err.contains("backup.snap") && err.contains("not a baton snapshot"), "{err}");
        let err = Backup::from_bytes(&bytes[..bytes.len() - 3], f).unwrap_err().to_string();
        assert!(err.contains("damaged or truncated"), "{err}");
        let mut newer = bytes.clone();
        newer[8..12].copy_from_slice(&(BACKUP_FORMAT + 1).to_le_bytes());
        let err = Backup::from_bytes(&newer, f).unwrap_err().to_string();
        assert!(err.contains(&format!("format {}", BACKUP_FORMAT + 1)), "{err}");
    }

    #[test]
    fn restoring_needs_a_new_cluster_id_and_an_empty_directory() {
        let root = tempfile::tempdir().unwrap();
        let err = restore(&backup(), root.path(), "prod", 1, "h:1").unwrap_err();
        assert!(matches!(err, BackupError::SameClusterId { .. }), "{err}");
        std::fs::write(root.path().join("x"), "x").unwrap();
        let err = restore(&backup(), root.path(), "new", 1, "h:1").unwrap_err();
        assert!(matches!(err, BackupError::NotEmpty { .. }), "{err}");
    }
}
