//! Faults injected into development GPUs: a file named after the GPU index in the agent's
//! `gpu-faults` directory (`echo "XID 79" > DATA_DIR/gpu-faults/3`) is one fault on that
//! GPU, read and removed by the next poll. Tests and chaos runs use it; a node with real
//! GPUs watches NVML instead.

use std::path::PathBuf;
use std::time::Duration;

use super::{Finding, GpuWatch};

/// Longest error read from one file; the rest is cut (the leader clips it further).
const MAX_ERROR_BYTES: usize = 512;
/// Files read per poll: a flood waits for later polls.
const MAX_FILES_PER_POLL: usize = 64;

pub struct InjectedWatch {
    dir: PathBuf,
}

impl InjectedWatch {
    pub fn new(data_dir: &std::path::Path) -> std::io::Result<InjectedWatch> {
        let dir = dir(data_dir);
        std::fs::create_dir_all(&dir)?;
        Ok(InjectedWatch { dir })
    }
}

/// Where faults are injected for an agent whose data directory is `data_dir`.
pub fn dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("gpu-faults")
}

impl GpuWatch for InjectedWatch {
    fn poll(&mut self, wait: Duration) -> Vec<Finding> {
        let found = self.read();
        if found.is_empty() {
            std::thread::sleep(wait);
        }
        found
    }

    fn describe(&self) -> String {
        format!("development GPUs; faults are injected as files in {}", self.dir.display())
    }
}

impl InjectedWatch {
    fn read(&self) -> Vec<Finding> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut found = Vec::new();
        for entry in entries.flatten().take(MAX_FILES_PER_POLL) {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            // Written elsewhere and renamed in, or still being written: only whole names.
            let Ok(gpu) = name.parse::<u32>() else { continue };
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), "cannot remove an injected GPU fault: {e}; ignored");
                continue;
            }
            let mut error = text.trim().to_string();
            if error.is_empty() {
                error = "injected fault".into();
            }
            if error.len() > MAX_ERROR_BYTES {
                let mut cut = MAX_ERROR_BYTES;
                while !error.is_char_boundary(cut) {
                    cut -= 1;
                }
                error.truncate(cut);
            }
            found.push(Finding { gpu, error });
        }
        found.sort_by_key(|f| f.gpu);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_named_after_a_gpu_is_one_fault_read_once() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = InjectedWatch::new(tmp.path()).unwrap();
        std::fs::write(dir(tmp.path()).join("3"), "XID 79\n").unwrap();
        std::fs::write(dir(tmp.path()).join("1"), "").unwrap();
        std::fs::write(dir(tmp.path()).join("notes.tmp"), "XID 48").unwrap();
        let found = w.poll(Duration::from_millis(1));
        let want = vec![Finding { gpu: 1, error: "injected fault".into() }, Finding { gpu: 3, error: "XID 79".into() }];
        assert_eq!(found, want);
        assert!(w.poll(Duration::from_millis(1)).is_empty(), "read once");
    }
}
