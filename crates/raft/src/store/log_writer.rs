//! Group commit: one thread writes the log to the store and flushes it.
//!
//! The log store keeps an in-memory view of the log for reads and sends every change to
//! this thread in order. The thread takes every change that is waiting, writes them as one
//! batch, flushes once, and then fires the acknowledgements (openraft's `LogFlushed`
//! callbacks) in order: one fsync covers a whole burst of appends. Writing on this thread
//! also keeps the raft task from stalling behind a flush in progress.
//!
//! A write that fails (a full disk) is retried, the same batch in the same order, with a
//! growing pause, and nothing is acknowledged until it succeeds: openraft stops a replica for
//! good on the first storage error it is told of, while a full disk usually gets space back.
//! Meanwhile [`DiskHealth`] says the disk is failing, and the replica refuses new writes with
//! that error. A failed sync is not retried (see [`write_retrying`]): it stops the replica.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::storage::LogFlushed;
use tokio::sync::{mpsc, oneshot};

use super::disk_health::DiskHealth;
use super::kv::{KvError, KvStore, Space, Write};
use crate::stats::WriteStats;
use crate::types::{FlushSignal, TypeConfig};

/// Changes written and acknowledged after one flush, at most.
const MAX_GROUP: usize = 4_096;
/// First pause before retrying a failed write; it doubles up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(10);
/// Longest pause between retries: how soon writes resume once the disk is back.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a failing disk is retried before the error goes to openraft, which stops the
/// replica: long enough for an operator to free space, short enough that a dead disk ends
/// in a stopped replica rather than one that waits forever.
const GIVE_UP: Duration = Duration::from_secs(600);

enum Job {
    /// Written in order; acknowledged by `done` (if any) once durable.
    Change { writes: Vec<Write>, done: Option<Done> },
}

enum Done {
    /// openraft's callback, and the batcher's signals of the batches among the entries.
    Appended(LogFlushed<TypeConfig>, Vec<FlushSignal>),
    Barrier(oneshot::Sender<Result<(), KvError>>),
}

pub(crate) struct LogWriter {
    /// `None` when the store does not block (memory, a simulated disk): changes are written
    /// inline.
    tx: Option<mpsc::Sender<Job>>,
    kv: Arc<dyn KvStore>,
}

fn io_error(e: &KvError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The writer thread: ends when the log store (the only sender) is dropped.
fn run(store: &dyn KvStore, mut rx: mpsc::Receiver<Job>, health: &DiskHealth, stats: &WriteStats) {
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
        // Only acknowledgements need the disk; other changes ride along with the next
        // flush (or sled's own, within 500 ms).
        let flush = !acks.is_empty();
        let result = write_retrying(store, &batch, flush, health);
        if flush && result.is_ok() {
            stats.flushed();
        }
        for done in acks {
            match done {
                Done::Appended(cb, signals) => {
                    cb.log_io_completed(result.as_ref().map(|_| ()).map_err(io_error));
                    signals.iter().for_each(FlushSignal::release);
                }
                Done::Barrier(tx) => {
                    let _ = tx.send(result.clone());
                }
            }
        }
    }
}

/// Writes (and flushes, if asked) `batch`. A failed write is retried until it succeeds or
/// `GIVE_UP` passes: rewriting the whole batch is safe, as puts and range removes applied
/// again in the same order leave the same records. A failed sync is not retried: after a
/// failed `fsync` the kernel may have dropped the unwritten pages and a second `fsync` can
/// report success for data that is gone, so the error goes to openraft, which stops the
/// replica; a restart recovers from what is on disk and from the peers.
fn write_retrying(store: &dyn KvStore, batch: &[Write], flush: bool, health: &DiskHealth) -> Result<(), KvError> {
    let started = Instant::now();
    let mut pause = RETRY_FIRST;
    while let Err(e) = store.write(batch) {
        if health.fail(&e) {
            tracing::error!(error = %e, "cannot write the raft log; refusing writes and retrying until it succeeds");
        }
        if started.elapsed() >= GIVE_UP {
            tracing::error!(error = %e, "the raft log could not be written for {GIVE_UP:?}; stopping the replica");
            return Err(e);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(RETRY_MAX);
    }
    if flush && let Err(e) = store.flush() {
        health.fail(&e);
        tracing::error!(error = %e, "cannot sync the raft log; stopping the replica (restart it to recover)");
        return Err(e);
    }
    if health.recover() {
        tracing::warn!(location = %store.location(Space::Log), "the raft log can be written again; accepting writes");
    }
    Ok(())
}

impl LogWriter {
    pub(crate) fn start(
        kv: Arc<dyn KvStore>,
        queue_len: usize,
        health: DiskHealth,
        stats: Arc<WriteStats>,
    ) -> Result<LogWriter, KvError> {
        if !kv.blocks() {
            return Ok(LogWriter { tx: None, kv });
        }
        let (tx, rx) = mpsc::channel::<Job>(queue_len.max(1));
        let store = kv.clone();
        std::thread::Builder::new()
            .name("baton-raft-log".into())
            .spawn(move || run(store.as_ref(), rx, &health, &stats))
            .map_err(|e| KvError {
                location: kv.location(Space::Log),
                message: format!("cannot start the log writer thread: {e}"),
            })?;
        Ok(LogWriter { tx: Some(tx), kv })
    }

    async fn send(&self, writes: Vec<Write>, done: Option<Done>) -> Result<(), KvError> {
        match &self.tx {
            None => {
                self.kv.write(&writes)?;
                // A simulated disk is durable only once flushed, as a real one.
                if done.is_some() && self.kv.is_durable() {
                    self.kv.flush()?;
                }
                match done {
                    Some(Done::Appended(cb, signals)) => {
                        cb.log_io_completed(Ok(()));
                        signals.iter().for_each(FlushSignal::release);
                    }
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

    /// Writes `writes` and fires `cb` and `signals` once they (and everything before) are
    /// durable.
    pub(crate) async fn append(
        &self,
        writes: Vec<Write>,
        cb: LogFlushed<TypeConfig>,
        signals: Vec<FlushSignal>,
    ) -> Result<(), KvError> {
        self.send(writes, Some(Done::Appended(cb, signals))).await
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
