//! Whether a job wrote a checkpoint: the newest modification time under its checkpoint
//! directory, scanned with bounds on entries and depth.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::limits::{MAX_CHECKPOINT_SCAN_DEPTH, MAX_CHECKPOINT_SCAN_ENTRIES};

/// Milliseconds since the Unix epoch, now.
pub fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The newest mtime (Unix ms) of any regular file under `dir`; 0 when there is none.
pub fn newest_mtime_ms(dir: &Path) -> u64 {
    let mut newest = 0;
    let mut seen = 0;
    scan(dir, 0, &mut seen, &mut newest);
    newest
}

fn scan(dir: &Path, depth: usize, seen: &mut usize, newest: &mut u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_CHECKPOINT_SCAN_ENTRIES {
            return;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            if depth + 1 < MAX_CHECKPOINT_SCAN_DEPTH {
                scan(&entry.path(), depth + 1, seen, newest);
            }
        } else if meta.is_file() {
            let ms = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_millis() as u64);
            *newest = (*newest).max(ms.unwrap_or(0));
        }
    }
}

/// Whether a checkpoint was written since the checkpoint signal, given the newest file's time
/// when the signal went out (`before_ms`, scanned right before it) and now (`after_ms`).
/// Both are file times, on the file system's clock: the agent's wall clock, which may be
/// off from it (a shared file system's server, an NTP step), is never compared with them.
pub fn written_after(before_ms: u64, after_ms: u64) -> bool {
    after_ms > before_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a file whose mtime is exactly `ms` after the epoch.
    fn touch(path: &Path, ms: u64) {
        let f = std::fs::File::create(path).unwrap();
        f.set_modified(UNIX_EPOCH + std::time::Duration::from_millis(ms)).unwrap();
    }

    #[test]
    fn finds_newest_file_in_subdirectories() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_mtime_ms(dir.path()), 0);
        assert_eq!(newest_mtime_ms(&dir.path().join("missing")), 0);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        touch(&dir.path().join("old.ckpt"), 1_000_000);
        touch(&dir.path().join("sub/a.ckpt"), 2_000_000);
        touch(&dir.path().join("sub/b.ckpt"), 1_500_000);
        // Exactly the newest file's time: a scan that missed `sub`, or reported anything
        // else (the clock, a directory's mtime), fails here.
        assert_eq!(newest_mtime_ms(dir.path()), 2_000_000);
    }

    #[test]
    fn files_below_the_depth_bound_are_not_seen() {
        let dir = tempfile::tempdir().unwrap();
        let mut deep = dir.path().to_path_buf();
        for i in 0..MAX_CHECKPOINT_SCAN_DEPTH {
            deep.push(format!("d{i}"));
        }
        std::fs::create_dir_all(&deep).unwrap();
        touch(&deep.join("too-deep.ckpt"), 3_000_000);
        touch(&dir.path().join("top.ckpt"), 1_000_000);
        assert_eq!(newest_mtime_ms(dir.path()), 1_000_000);
    }

    #[test]
    fn only_files_newer_than_the_newest_at_the_signal_count() {
        assert!(written_after(500, 1_001));
        assert!(!written_after(500, 500), "nothing new");
        assert!(!written_after(900, 400), "an older file (another rank's, restored) is not a new checkpoint");
        assert!(written_after(0, 900), "the first file of an empty directory");
    }
}
