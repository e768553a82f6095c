//! Group commit: appended entries are acknowledged only after a flush made them durable.
//!
//! The log store writes entries into the store at once and hands their acknowledgement
//! (openraft's `LogFlushed` callback) to a flusher thread. The thread takes every
//! acknowledgement that is waiting, flushes once, and then fires them in order, so one fsync
//! covers a whole burst of appends from many clients.

use std::sync::Arc;

use openraft::storage::LogFlushed;
use tokio::sync::{mpsc, oneshot};

use super::kv::{KvError, KvStore};
use crate::types::TypeConfig;

/// Acknowledgements fired after one flush, at most.
const MAX_GROUP: usize = 4_096;

enum Job {
    Appended(LogFlushed<TypeConfig>),
    Barrier(oneshot::Sender<Result<(), KvError>>),
}

pub(crate) struct Flusher {
    /// `None` when the store has no disk to wait for.
    tx: Option<mpsc::Sender<Job>>,
    kv: Arc<dyn KvStore>,
}

fn io_error(e: &KvError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl Flusher {
    pub(crate) fn start(kv: Arc<dyn KvStore>, queue_len: usize) -> Result<Flusher, KvError> {
        if !kv.is_durable() {
            return Ok(Flusher { tx: None, kv });
        }
        let (tx, mut rx) = mpsc::channel::<Job>(queue_len.max(1));
        let store = kv.clone();
        std::thread::Builder::new()
            .name("baton-raft-flush".into())
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
                    let result = store.flush();
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "log flush failed");
                    }
                    for job in jobs {
                        match job {
                            Job::Appended(cb) => {
                                cb.log_io_completed(result.as_ref().map(|_| ()).map_err(io_error))
                            }
                            Job::Barrier(done) => {
                                let _ = done.send(result.clone());
                            }
                        }
                    }
                }
            })
            .map_err(|e| KvError {
                location: kv.location(super::kv::Space::Log),
                message: format!("cannot start the flush thread: {e}"),
            })?;
        Ok(Flusher { tx: Some(tx), kv })
    }

    /// Fires `cb` once everything written so far is durable.
    pub(crate) async fn after_flush(&self, cb: LogFlushed<TypeConfig>) -> Result<(), KvError> {
        match &self.tx {
            None => {
                cb.log_io_completed(Ok(()));
                Ok(())
            }
            Some(tx) => tx.send(Job::Appended(cb)).await.map_err(|_| self.stopped()),
        }
    }

    /// Returns once everything written so far is durable.
    pub(crate) async fn flush_now(&self) -> Result<(), KvError> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        let (done, wait) = oneshot::channel();
        tx.send(Job::Barrier(done))
            .await
            .map_err(|_| self.stopped())?;
        wait.await.map_err(|_| self.stopped())?
    }

    fn stopped(&self) -> KvError {
        KvError {
            location: self.kv.location(super::kv::Space::Log),
            message: "the flush thread has stopped".into(),
        }
    }
}
