//! The data directory's identity file: which cluster and which replica the data belongs to.
//!
//! `cluster.id` is a short text file with a checksum line:
//!
//! ```text
//! baton-raft identity v1
//! cluster_id=prod-east
//! node_id=2
//! format=4
//! crc32=1a2b3c4d
//! ```
//!
//! It is written when a replica first starts in an empty directory, and checked at every
//! start: data from another cluster or another replica is never served by mistake.
//!
//! `format` is the data directory's format version: how the log entries, the vote and the
//! snapshot in `raft.sled` are encoded. A build reads every format from
//! [`OLDEST_READABLE_FORMAT`] to its own [`DATA_FORMAT`] and refuses a newer one, naming the
//! file and the version; opening an older one marks it with its own (after which only builds
//! that read this format open it). Builds before the field existed wrote no `format` line
//! (their parser ignores it): that is format 1.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::types::NodeId;

pub const IDENTITY_FILE: &str = "cluster.id";
const HEADER: &str = "baton-raft identity v1";
/// The format this build writes and the newest it reads: the model's, which says what each
/// format added and the rule for raising it ([`baton_model::format`]).
pub use baton_model::format::DATA_FORMAT;
/// The oldest format this build reads.
pub const OLDEST_READABLE_FORMAT: u32 = 1;
/// Longest cluster id.
pub const MAX_CLUSTER_ID_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: String,
    pub node_id: NodeId,
    /// The data directory's format version.
    pub format: u32,
}

/// Why the identity file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("{file}: {reason}")]
    Corrupt { file: PathBuf, reason: String },
    #[error("{file}: cannot {action}: {reason}")]
    Io { file: PathBuf, action: &'static str, reason: String },
    #[error("invalid cluster id {0:?}: use 1 to {MAX_CLUSTER_ID_LEN} letters, digits, '.', '_' or '-'")]
    BadClusterId(String),
}

/// Checks that a cluster id is printable and bounded.
pub fn check_cluster_id(id: &str) -> Result<(), IdentityError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_CLUSTER_ID_LEN
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok { Ok(()) } else { Err(IdentityError::BadClusterId(id.to_string())) }
}

fn body(id: &Identity) -> String {
    format!("{HEADER}\ncluster_id={}\nnode_id={}\nformat={}\n", id.cluster_id, id.node_id, id.format)
}

impl Identity {
    /// Writes the file and syncs it and its directory.
    pub fn write(&self, dir: &Path) -> Result<(), IdentityError> {
        check_cluster_id(&self.cluster_id)?;
        let file = dir.join(IDENTITY_FILE);
        let io = |action, e: std::io::Error| IdentityError::Io { file: file.clone(), action, reason: e.to_string() };
        let b = body(self);
        let text = format!("{b}crc32={:08x}\n", crc32fast::hash(b.as_bytes()));
        let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
        let mut f = fs::File::create(&tmp).map_err(|e| io("create", e))?;
        f.write_all(text.as_bytes()).map_err(|e| io("write", e))?;
        f.sync_all().map_err(|e| io("sync", e))?;
        fs::rename(&tmp, &file).map_err(|e| io("rename into place", e))?;
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io("sync its directory", e))?;
        Ok(())
    }

    /// Reads and checks the file; `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Identity>, IdentityError> {
        let file = dir.join(IDENTITY_FILE);
        let text = match fs::read(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(IdentityError::Io { file, action: "read", reason: e.to_string() });
            }
        };
        parse(&text).map(Some).map_err(|reason| IdentityError::Corrupt { file, reason })
    }
}

fn parse(bytes: &[u8]) -> Result<Identity, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let Some(crc_at) = text.rfind("crc32=") else {
        return Err("truncated: no crc32 line".into());
    };
    let (b, crc_line) = text.split_at(crc_at);
    let stored = crc_line
        .trim_end()
        .strip_prefix("crc32=")
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| format!("unreadable checksum line {:?}", crc_line.trim_end()))?;
    let computed = crc32fast::hash(b.as_bytes());
    if stored != computed {
        return Err(format!("checksum mismatch: stored {stored:08x}, computed {computed:08x}"));
    }
    let mut lines = b.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("first line is not {HEADER:?}"));
    }
    let field = |line: Option<&str>, name: &str| -> Result<String, String> {
        line.and_then(|l| l.strip_prefix(name))
            .and_then(|l| l.strip_prefix('='))
            .map(str::to_string)
            .ok_or_else(|| format!("missing {name} line"))
    };
    let cluster_id = field(lines.next(), "cluster_id")?;
    check_cluster_id(&cluster_id).map_err(|e| e.to_string())?;
    let node_id = field(lines.next(), "node_id")?.parse::<NodeId>().map_err(|e| format!("node_id: {e}"))?;
    let format = match lines.next() {
        None => 1,
        line => field(line, "format")?.parse::<u32>().map_err(|e| format!("format: {e}"))?,
    };
    Ok(Identity { cluster_id, node_id, format })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let id = Identity { cluster_id: "prod-east".into(), node_id: 3, format: DATA_FORMAT };
        id.write(dir.path()).unwrap();
        assert_eq!(Identity::read(dir.path()).unwrap(), Some(id));
    }

    #[test]
    fn missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Identity::read(dir.path()).unwrap(), None);
    }

    #[test]
    fn edited_file_fails_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        Identity { cluster_id: "a".into(), node_id: 1, format: DATA_FORMAT }.write(dir.path()).unwrap();
        let f = dir.path().join(IDENTITY_FILE);
        let t = fs::read_to_string(&f).unwrap().replace("node_id=1", "node_id=2");
        fs::write(&f, t).unwrap();
        let err = Identity::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("cluster.id") && err.contains("checksum"), "{err}");
    }

    #[test]
    fn bad_cluster_ids_are_refused() {
        assert!(check_cluster_id("").is_err());
        assert!(check_cluster_id("has space").is_err());
        assert!(check_cluster_id(&"x".repeat(65)).is_err());
        assert!(check_cluster_id("prod_east-1.b").is_ok());
    }
}
