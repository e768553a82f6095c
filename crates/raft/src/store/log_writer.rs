//! Group commit: one thread writes the log to the store and flushes it.
//!
//! The log store keeps an in-memory view of the log for reads and sends every change to
//! this thread in order. The thread takes every change that is waiting, writes them as one
//! batch, flushes once, and then fires the acknowledgements (openraft's `LogFlushed`
//! callbacks) in order: one fsync covers a whole burst of appends. Writing on this thread
//! also keeps the raft task from stalling behind a flush in progress.

use std::sync::Arc;

use openraft::storage::LogFlushed;
use tokio::sync::{mpsc, oneshot};

use super::kv::{KvError, KvStore, Space, Write};
use crate::types::TypeConfig;

/// Changes written and acknowledged after one flush, at most.
const MAX_GROUP: usize = 4_096;

enum Job {
    /// Written in order; acknowledged by `done` (if any) once durable.
    Change { writes: Vec<Write>, done: Option<Done> },
}

enum Done {
    Appended(LogFlushed<TypeConfig>),
    Barrier(oneshot::Sender<Result<(), KvError>>),
}

pub(crate) struct LogWriter {
    /// `None` when the store has no disk to wait for: changes are written inline.
    tx: Option<mpsc::Sender<Job>>,
    kv: Arc<dyn KvStore>,
}

fn io_error(e: &KvError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl LogWriter {
    pub(crate) fn start(kv: Arc<dyn KvStore>, queue_len: usize) -> Result<LogWriter, KvError> {
        if !kv.is_durable() {
            return Ok(LogWriter { tx: None, kv });
        }
        let (tx, mut rx) = mpsc::channel::<Job>(queue_len.max(1));
        let store = kv.clone();
        std::thread::Builder::new()
            .name("baton-raft-log".into())
            .spawn(move || {
                // Ends when the log store (the only sender) is dropped.
                while let Some(first) = rx.blocking_recv() {
                    let mut jobs = vec![first];
                    while jobs.len() < MAX_GROUP {
                        match rx.try_recv() {
                            Ok(j) => jobs.push(j),
                            Err(_) => break,
                        }
                    }
                    let mut batch = Vec::new();
                    let mut acks = Vec::new();
                    for Job::Change { writes, done } in jobs {
                        batch.extend(writes);
                        acks.extend(done);
                    }
                    let mut result = store.write(batch);
                    // Only acknowledgements need the disk; other changes ride along with the
                    // next flush (or sled's own, within 500 ms).
                    if result.is_ok() && !acks.is_empty() {
                        result = store.flush();
                    }
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "log write failed");
                    }
                    for done in acks {
                        match done {
                            Done::Appended(cb) => cb.log_io_completed(result.as_ref().map(|_| ()).map_err(io_error)),
                            Done::Barrier(tx) => {
                                let _ = tx.send(result.clone());
                            }
                        }
                    }
                }
            })
            .map_err(|e| KvError {
                location: kv.location(Space::Log),
                message: format!("cannot start the log writer thread: {e}"),
            })?;
        Ok(LogWriter { tx: Some(tx), kv })
    }

    async fn send(&self, writes: Vec<Write>, done: Option<Done>) -> Result<(), KvError> {
        match &self.tx {
            None => {
                self.kv.write(writes)?;
                match done {
                    Some(Done::Appended(cb)) => cb.log_io_completed(Ok(())),
                    Some(Done::Barrier(tx)) => {
                        let _ = tx.send(Ok(()));
                    }
                    None => {}
                }
                Ok(())
            }
            Some(tx) => tx.send(Job::Change { writes, done }).await.map_err(|_| self.stopped()),
        }
    }

    /// Writes `writes` after every earlier change; not waited for, not necessarily durable.
    pub(crate) async fn write(&self, writes: Vec<Write>) -> Result<(), KvError> {
        self.send(writes, None).await
    }

    /// Writes `writes` and fires `cb` once they (and everything before) are durable.
    pub(crate) async fn append(&self, writes: Vec<Write>, cb: LogFlushed<TypeConfig>) -> Result<(), KvError> {
        self.send(writes, Some(Done::Appended(cb))).await
    }

    /// Writes `writes` and returns once they (and everything before) are durable.
    pub(crate) async fn write_durably(&self, writes: Vec<Write>) -> Result<(), KvError> {
        let (tx, rx) = oneshot::channel();
        self.send(writes, Some(Done::Barrier(tx))).await?;
        rx.await.map_err(|_| self.stopped())?
    }

    fn stopped(&self) -> KvError {
        KvError { location: self.kv.location(Space::Log), message: "the log writer thread has stopped".into() }
    }
}
