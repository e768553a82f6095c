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
    scan(dir, 0, false, &mut seen, &mut newest);
    newest
}

/// A file's modification time in Unix ms; 0 when it cannot be read.
fn modified_unix_ms(meta: &std::fs::Metadata) -> u64 {
    meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as u64)
}

/// The modification time (Unix ms) of the file at `path`; 0 when there is none.
pub fn mtime_ms(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| modified_unix_ms(&m))
}

/// A rank's own checkpoint directory inside its job's: `rank-<r>`.
pub fn rank_dir_name(rank: u32) -> String {
    format!("rank-{rank}")
}

/// Whether a file named `name` is a checkpoint still being written, by the convention of
/// writing `<name>.tmp` and renaming it when complete: no checkpoint to resume from. A rank
/// killed between the write and the rename (a node thawed and killed at once: chaos seed
/// 21002) was reported as stopped with its work saved, and its next attempt, told to resume,
/// found no checkpoint.
fn being_written(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().ends_with(b".tmp")
}

/// Whether `name` is a rank's directory name (`rank-` and decimal digits).
fn is_rank_dir_name(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .and_then(|n| n.strip_prefix("rank-"))
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// The newest mtime (Unix ms) of the files that count as `rank`'s checkpoint in the job
/// directory `job_dir`; 0 when there is none. Those are the files of its own directory
/// (`rank-<r>`), and the job directory's files outside every rank's directory: the ranks of a
/// gang share the job directory (one file system for all nodes), so another rank's save in
/// its own directory must not count as this rank's, while a file of the job directory
/// itself cannot be told apart (a job written before rank directories, or one rank saving
/// for all) and counts for every rank, as it always did. Both scans share the bounds on
/// entries and depth (the rank's directory is one level down).
pub fn newest_rank_mtime_ms(job_dir: &Path, rank: u32) -> u64 {
    let mut newest = 0;
    let mut seen = 0;
    scan(job_dir, 0, true, &mut seen, &mut newest);
    scan(&job_dir.join(rank_dir_name(rank)), 1, false, &mut seen, &mut newest);
    newest
}

/// Whether every rank of a job of `world_size` ranks has a checkpoint under `job_dir` (in
/// its own directory, or the job directory's files that count for every rank): the job has
/// a complete checkpoint to resume from.
pub fn complete(job_dir: &Path, world_size: u32) -> bool {
    (0..world_size.max(1)).all(|rank| newest_rank_mtime_ms(job_dir, rank) > 0)
}

/// `skip_rank_dirs`: leave out the ranks' directories directly under `dir`.
fn scan(dir: &Path, depth: usize, skip_rank_dirs: bool, seen: &mut usize, newest: &mut u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        *seen += 1;
        if *seen > MAX_CHECKPOINT_SCAN_ENTRIES {
            return;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            if skip_rank_dirs && is_rank_dir_name(&entry.file_name()) {
                continue;
            }
            if depth + 1 < MAX_CHECKPOINT_SCAN_DEPTH {
                scan(&entry.path(), depth + 1, false, seen, newest);
            }
        } else if meta.is_file() && !being_written(&entry.file_name()) {
            *newest = (*newest).max(modified_unix_ms(&meta));
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
    fn a_file_still_being_written_is_no_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let rank = dir.path().join("rank-0");
        std::fs::create_dir_all(&rank).unwrap();
        touch(&rank.join("rank-0.ckpt.tmp"), 5_000);
        touch(&dir.path().join("shared.tmp"), 6_000);
        assert_eq!(newest_rank_mtime_ms(dir.path(), 0), 0, "only files being written");
        assert!(!complete(dir.path(), 1));
        touch(&rank.join("rank-0.ckpt"), 4_000);
        assert_eq!(newest_rank_mtime_ms(dir.path(), 0), 4_000);
        assert_eq!(newest_mtime_ms(dir.path()), 4_000);
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

    /// Found by a chaos run with leader kills (chaos/README.md, "Found so far"): rank 0 of
    /// a gang was killed before it saved anything, and was reported stopped with a
    /// checkpoint because rank 1, on another node of the shared file system, wrote its file
    /// into the same job directory 20 ms after rank 0's signal.
    #[test]
    fn another_ranks_files_in_the_shared_job_directory_do_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path();
        std::fs::create_dir_all(job.join("rank-0")).unwrap();
        std::fs::create_dir_all(job.join("rank-1/sub")).unwrap();
        std::fs::create_dir_all(job.join("rank-12")).unwrap();
        touch(&job.join("rank-1/ckpt"), 2_000_000);
        touch(&job.join("rank-1/sub/more"), 2_100_000);
        touch(&job.join("rank-12/ckpt"), 2_200_000);
        assert_eq!(newest_rank_mtime_ms(job, 0), 0, "rank 0 saved nothing");
        assert_eq!(newest_rank_mtime_ms(job, 1), 2_100_000);
        assert_eq!(newest_rank_mtime_ms(job, 12), 2_200_000, "rank-1 is not a prefix of rank-12");
        touch(&job.join("rank-0/ckpt"), 1_500_000);
        assert_eq!(newest_rank_mtime_ms(job, 0), 1_500_000);
        // A file of the job directory itself (a job that does not use its ranks'
        // directories, or one rank that saves for all) counts for every rank.
        touch(&job.join("model.pt"), 1_800_000);
        std::fs::create_dir_all(job.join("shared")).unwrap();
        touch(&job.join("shared/opt.pt"), 1_900_000);
        assert_eq!(newest_rank_mtime_ms(job, 0), 1_900_000);
        assert_eq!(newest_rank_mtime_ms(job, 1), 2_100_000);
        assert_eq!(newest_rank_mtime_ms(job, 3), 1_900_000, "a rank without a directory of its own yet");
    }

    #[test]
    fn only_files_newer_than_the_newest_at_the_signal_count() {
        assert!(written_after(500, 1_001));
        assert!(!written_after(500, 500), "nothing new");
        assert!(!written_after(900, 400), "an older file (another rank's, restored) is not a new checkpoint");
        assert!(written_after(0, 900), "the first file of an empty directory");
    }
}
