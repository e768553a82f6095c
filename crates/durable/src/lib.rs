//! Makes what sled flushed reach stable storage. Both of baton's sled databases need it:
//! the raft log (`baton-raft`) and the agent's journal (`baton-agent`).
//!
//! On Linux sled 0.34 ends a flush with `sync_file_range`, which starts and waits for the
//! page writes of its data file but neither flushes the device's write cache nor persists
//! the file's size and other metadata; a real `fsync` only comes from its background flusher,
//! every 500 ms. Values too large to inline (sled calls them blobs: big log entries and
//! snapshots) go to files of their own under `blobs/` that sled never syncs. A power cut can
//! therefore lose what `Db::flush` returned for. [`DiskSync::sync`] closes the gap after each
//! flush: `fdatasync` on the data file, `fsync` on every blob file written since the last
//! sync and then on the `blobs/` directory that names them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// Why a sync failed, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("cannot sync {path}: {source}")]
pub struct SyncError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn failed(path: &Path) -> impl FnOnce(std::io::Error) -> SyncError + '_ {
    move |source| SyncError { path: path.to_path_buf(), source }
}

/// Syncs one sled database directory.
pub struct DiskSync {
    data_path: PathBuf,
    /// sled's data file, opened a second time: `fdatasync` works on the file, not on the
    /// descriptor that wrote it.
    data: File,
    blobs: PathBuf,
    /// Highest blob id synced so far. sled names blobs by log sequence number, which only
    /// grows, so a blob with a greater name is new.
    synced_blob: Mutex<Option<u64>>,
    counts: Mutex<SyncCounts>,
}

/// How many syncs were issued, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncCounts {
    /// `fdatasync` calls on the data file.
    pub data: u64,
    /// Blob files synced.
    pub blobs: u64,
}

impl DiskSync {
    /// Opens sled's files in `dir` (after sled opened the database) and syncs the directory
    /// entries sled created, so the files themselves survive a power cut.
    pub fn open(dir: &Path) -> Result<DiskSync, SyncError> {
        let data_path = dir.join("db");
        let data = File::open(&data_path).map_err(failed(&data_path))?;
        sync_dir(dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
        let sync = DiskSync {
            data_path,
            data,
            blobs: dir.join("blobs"),
            synced_blob: Mutex::new(None),
            counts: Mutex::default(),
        };
        Ok(sync)
    }

    /// Puts everything sled has flushed on stable storage.
    pub fn sync(&self) -> Result<(), SyncError> {
        let blobs = self.sync_new_blobs()?;
        self.data.sync_data().map_err(failed(&self.data_path))?;
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.data += 1;
        c.blobs += blobs;
        Ok(())
    }

    pub fn counts(&self) -> SyncCounts {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns how many blob files it synced.
    fn sync_new_blobs(&self) -> Result<u64, SyncError> {
        let mut synced = self.synced_blob.lock().unwrap_or_else(PoisonError::into_inner);
        let mut newest = *synced;
        let listing = match std::fs::read_dir(&self.blobs) {
            Ok(l) => l,
            // sled creates the directory when it writes its first blob.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(failed(&self.blobs)(e)),
        };
        let mut count = 0;
        for item in listing {
            let item = item.map_err(failed(&self.blobs))?;
            let Some(id) = item.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            if synced.is_some_and(|s| id <= s) {
                continue;
            }
            let path = item.path();
            match File::open(&path) {
                Ok(f) => f.sync_all().map_err(failed(&path))?,
                // sled removes blobs it no longer needs, possibly while we list them.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(failed(&path)(e)),
            }
            newest = newest.max(Some(id));
            count += 1;
        }
        if newest != *synced {
            sync_dir(&self.blobs)?;
            *synced = newest;
        }
        Ok(count)
    }
}

/// `fsync` on a directory persists the names in it (a new file is lost without it).
pub fn sync_dir(dir: &Path) -> Result<(), SyncError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(failed(dir))
}
