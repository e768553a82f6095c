//! Where replicas' stdout and stderr go (`<data-dir>/logs/job-<id>/<attempt>/rank-<r>.<stream>`,
//! keyed by the job's id like checkpoint directories: a name is reused once its job ended)
//! and how much of them is kept: the newest `MAX_LOG_ATTEMPTS_PER_JOB` attempts per job, the
//! most recently changed `MAX_LOG_JOBS` jobs, and at most the cap per file. The job writes
//! its files directly (append mode, so it survives an agent restart); the agent cuts a file
//! back to the cap with a note when it grows past it, so a file holds at most the cap plus
//! what the job wrote in one supervisor tick.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::limits::{MAX_LOG_ATTEMPTS_PER_JOB, MAX_LOG_JOBS};

fn job_dir(data_dir: &Path, job_id: u64) -> PathBuf {
    data_dir.join("logs").join(job_dir_name(job_id))
}

fn job_dir_name(job_id: u64) -> String {
    format!("job-{job_id}")
}

pub fn attempt_dir(data_dir: &Path, job_id: u64, attempt: u32) -> PathBuf {
    job_dir(data_dir, job_id).join(attempt.to_string())
}

pub fn log_path(data_dir: &Path, job_id: u64, attempt: u32, rank: u32, stream: &str) -> PathBuf {
    attempt_dir(data_dir, job_id, attempt).join(format!("rank-{rank}.{stream}"))
}

/// The attempts with logs for the job, ascending.
pub fn attempts(data_dir: &Path, job_id: u64) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(job_dir(data_dir, job_id))
        .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    out.sort_unstable();
    out
}

/// Removes the oldest attempts of `job` past the bound, and the least recently changed
/// jobs past theirs (never `job_id` itself, nor a job in `active`, whose replicas still write).
pub fn retain(data_dir: &Path, job_id: u64, active: &HashSet<u64>) {
    retain_bounded(data_dir, job_id, active, MAX_LOG_JOBS);
}

fn retain_bounded(data_dir: &Path, job_id: u64, active: &HashSet<u64>, max_jobs: usize) {
    let list = attempts(data_dir, job_id);
    if list.len() > MAX_LOG_ATTEMPTS_PER_JOB {
        for old in &list[..list.len() - MAX_LOG_ATTEMPTS_PER_JOB] {
            let _ = std::fs::remove_dir_all(attempt_dir(data_dir, job_id, *old));
        }
    }
    let job = job_dir_name(job_id);
    let active: HashSet<String> = active.iter().map(|id| job_dir_name(*id)).collect();
    let Ok(rd) = std::fs::read_dir(data_dir.join("logs")) else { return };
    let mut others = 0;
    let mut removable: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == job {
            continue;
        }
        others += 1;
        if !active.contains(name)
            && let Some(t) = e.metadata().ok().and_then(|m| m.modified().ok())
        {
            removable.push((t, e.path()));
        }
    }
    // Room for `job` itself.
    if others + 1 > max_jobs {
        removable.sort();
        for (_, path) in removable.into_iter().take(others + 1 - max_jobs) {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// Opens a log file for appending (created if needed). Never through a link: the agent
/// hands the file to the job's user, and a link's target would be handed over instead.
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().create(true).append(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Opens a replica's log for reading. Nothing below `<data-dir>/logs` may be a link (the
/// `logs` directory itself may, an operator's choice of disk), and the log must be a plain
/// file: a link there, however it got there, would serve whatever it points to (a file
/// only root may read) to whoever may read the job's logs. `NotFound` for all of these.
pub fn open_log(data_dir: &Path, job_id: u64, attempt: u32, rank: u32, stream: &str) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    for dir in [job_dir(data_dir, job_id), attempt_dir(data_dir, job_id, attempt)] {
        if !std::fs::symlink_metadata(&dir)?.is_dir() {
            return Err(not_plain(&dir, "a directory"));
        }
    }
    let path = log_path(data_dir, job_id, attempt, rank, stream);
    // O_NONBLOCK: a FIFO put there would otherwise hold the open until a writer comes.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| if e.raw_os_error() == Some(libc::ELOOP) { not_plain(&path, "a file") } else { e })?;
    if !f.metadata()?.is_file() {
        return Err(not_plain(&path, "a file"));
    }
    Ok(f)
}

fn not_plain(path: &Path, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{} is not {what} (a link is never followed)", path.display()),
    )
}

fn cap_note(cap_bytes: u64) -> String {
    format!("\n[baton: this log reached {cap_bytes} bytes; further output is dropped]\n")
}

/// Cuts `path` back to `cap_bytes` plus a note when it grew past that. Idempotent: a file
/// already ending at the note is only cut back to it.
pub fn enforce_cap(path: &Path, cap_bytes: u64) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a link: cutting back a link's target would truncate another file.
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() || meta.len() <= cap_bytes {
        return Ok(());
    }
    let note = cap_note(cap_bytes);
    let mut f = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let mut head = vec![0u8; note.len()];
    f.seek(SeekFrom::Start(cap_bytes))?;
    let noted = f.read_exact(&mut head).is_ok() && head == note.as_bytes();
    if noted {
        f.set_len(cap_bytes + note.len() as u64)?;
    } else {
        f.set_len(cap_bytes)?;
        f.seek(SeekFrom::Start(cap_bytes))?;
        f.write_all(note.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_cuts_back_and_notes_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-0.stdout");
        let mut f = open_append(&path).unwrap();
        f.write_all(&[b'x'; 3000]).unwrap();
        enforce_cap(&path, 1024).unwrap();
        let note = cap_note(1024);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1024 + note.len() as u64);
        // The job keeps writing (append mode lands after the note); the next check cuts it again.
        f.write_all(b"more output").unwrap();
        enforce_cap(&path, 1024).unwrap();
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.len(), 1024 + note.len());
        assert!(text.ends_with(note.as_bytes()));
    }

    #[test]
    fn a_link_for_a_log_file_is_neither_cut_back_nor_opened() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("someone-elses-file");
        std::fs::write(&other, [b'x'; 3000]).unwrap();
        let path = dir.path().join("rank-0.stdout");
        std::os::unix::fs::symlink(&other, &path).unwrap();
        enforce_cap(&path, 1024).unwrap();
        assert_eq!(std::fs::metadata(&other).unwrap().len(), 3000, "the link's target is untouched");
        assert!(open_append(&path).is_err(), "a launch never hands a link's target to the job's user");
    }

    #[test]
    fn keeps_the_newest_attempts() {
        let dir = tempfile::tempdir().unwrap();
        for a in 1..=(MAX_LOG_ATTEMPTS_PER_JOB as u32 + 2) {
            std::fs::create_dir_all(attempt_dir(dir.path(), 7, a)).unwrap();
        }
        retain(dir.path(), 7, &HashSet::new());
        let left = attempts(dir.path(), 7);
        assert_eq!(left.len(), MAX_LOG_ATTEMPTS_PER_JOB);
        assert_eq!(left[0], 3);
    }

    #[test]
    fn keeps_the_newest_jobs_but_never_active_ones() {
        let dir = tempfile::tempdir().unwrap();
        const MAX: usize = 6;
        for j in 0..MAX as u64 + 3 {
            std::fs::create_dir_all(attempt_dir(dir.path(), j, 1)).unwrap();
            // Distinct modification times, oldest first.
            let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + j);
            std::fs::File::open(job_dir(dir.path(), j)).unwrap().set_modified(t).unwrap();
        }
        let active: HashSet<u64> = [0].into_iter().collect();
        retain_bounded(dir.path(), 1_000, &active, MAX);
        let left: HashSet<String> = std::fs::read_dir(dir.path().join("logs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left.len(), MAX - 1, "room for the new job");
        assert!(left.contains("job-0"), "an active job keeps its logs");
        assert!(!left.contains("job-1") && !left.contains("job-4") && left.contains("job-5"));
    }
}
