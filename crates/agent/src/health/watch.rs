//! The source of GPU faults, behind a trait so that tests inject them without a GPU, and the
//! thread that reads it (NVML's event wait blocks, so it gets a thread of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Recorder;

/// How long one poll may wait for an event: also how soon the thread sees it is to stop.
pub const POLL_WAIT_MS: u64 = 100;

/// One fault found on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub gpu: u32,
    /// What was found, for the jobs' reasons and the events ("XID 79", ...).
    pub error: String,
}

/// Something that finds GPU faults as they happen.
pub trait GpuWatch: Send {
    /// Faults found since the last call, waiting up to `wait` for one.
    fn poll(&mut self, wait: Duration) -> Vec<Finding>;
    /// Where the faults come from, for the log.
    fn describe(&self) -> String;
}

/// A thread reading a [`GpuWatch`] into the recorder until dropped.
pub struct WatchThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl WatchThread {
    pub fn spawn(mut watch: Box<dyn GpuWatch>, recorder: Arc<Recorder>) -> std::io::Result<WatchThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        tracing::info!("watching GPU health: {}", watch.describe());
        let thread = std::thread::Builder::new().name("gpu-health".into()).spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                for f in watch.poll(Duration::from_millis(POLL_WAIT_MS)) {
                    recorder.fault(f.gpu, &f.error, false);
                }
            }
        })?;
        Ok(WatchThread { stop, thread: Some(thread) })
    }
}

impl Drop for WatchThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
