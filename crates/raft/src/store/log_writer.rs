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
//!
//! A store that does not block (memory, a simulated disk) is written inline instead; a
//! simulated disk made slow has its syncs acknowledged in order after their delay, by a
//! task of their own ([`SlowSyncs`]), so a simulation can give a replica a slow disk.

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
    /// Inline writers on a simulated disk that was slow: the syncs being waited for.
    slow: std::sync::Mutex<Option<SlowSyncs>>,
}

/// Syncs of a slow simulated disk (`KvStore::sync_delay_ms`), acknowledged in order by a
/// task of their own, each once its time has come: the raft task goes on meanwhile, as it
/// does beside the writer thread of a real disk. Holds as many as there are appends in
/// flight during a slow spell (openraft bounds those), each a callback.
struct SlowSyncs {
    tx: mpsc::UnboundedSender<(tokio::time::Instant, Done)>,
    /// When the newest sync handed over is acknowledged: a later one never comes before it.
    last_at: tokio::time::Instant,
}

impl SlowSyncs {
    fn start(kv: Arc<dyn KvStore>) -> SlowSyncs {
        let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Done)>();
        tokio::spawn(async move {
            while let Some((at, done)) = rx.recv().await {
                tokio::time::sleep_until(at).await;
                let result = if kv.is_durable() { kv.flush() } else { Ok(()) };
                complete(done, &result);
            }
        });
        SlowSyncs { tx, last_at: tokio::time::Instant::now() }
    }
}

/// Fires one acknowledgement with the result of the flush that covered it.
fn complete(done: Done, result: &Result<(), KvError>) {
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
            complete(done, &result);
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
            return Ok(LogWriter { tx: None, kv, slow: std::sync::Mutex::default() });
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
        Ok(LogWriter { tx: Some(tx), kv, slow: std::sync::Mutex::default() })
    }

    async fn send(&self, writes: Vec<Write>, done: Option<Done>) -> Result<(), KvError> {
        match &self.tx {
            None => {
                self.kv.write(&writes)?;
                let Some(done) = done else { return Ok(()) };
                if let Some(done) = self.unless_slow(done) {
                    // A simulated disk is durable only once flushed, as a real one.
                    if self.kv.is_durable() {
                        self.kv.flush()?;
                    }
                    complete(done, &Ok(()));
                }
                Ok(())
            }
            Some(tx) => tx.send(Job::Change { writes, done }).await.map_err(|_| self.stopped()),
        }
    }

    /// Hands `done` to the slow syncs when the simulated disk is slow now or an earlier
    /// sync is still waited for; gives it back when it may be acknowledged at once.
    fn unless_slow(&self, done: Done) -> Option<Done> {
        let delay = Duration::from_millis(self.kv.sync_delay_ms());
        let now = tokio::time::Instant::now();
        let mut slow = self.slow.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let pending = slow.as_ref().map(|s| s.last_at).filter(|at| *at > now);
        if delay.is_zero() && pending.is_none() {
            return Some(done);
        }
        let at = pending.unwrap_or(now) + delay;
        let syncs = slow.get_or_insert_with(|| SlowSyncs::start(self.kv.clone()));
        syncs.last_at = at;
        // Refused only if the task is gone (its runtime is shutting down): at once, then.
        syncs.tx.send((at, done)).err().map(|e| e.0.1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PowerLossDisk;

    fn put(key: u64) -> Vec<Write> {
        vec![Write::Put(Space::Log, key, vec![key as u8])]
    }

    fn keys(disk: &PowerLossDisk) -> Vec<u64> {
        let kv = disk.open();
        kv.scan(Space::Log, 0..u64::MAX, usize::MAX).unwrap().into_iter().map(|(k, _)| k).collect()
    }

    /// A slow simulated disk acknowledges a sync only after its delay, and a later sync
    /// (even once the disk is fast again) never before an earlier one; a power cut before
    /// the delay ends loses what was not yet synced.
    #[tokio::test(start_paused = true)]
    async fn a_slow_disk_acknowledges_syncs_in_order_after_their_delay() {
        let disk = PowerLossDisk::new("disk r1");
        let kv: Arc<dyn KvStore> = Arc::new(disk.open());
        let writer = Arc::new(LogWriter::start(kv, 8, DiskHealth::default(), Arc::default()).unwrap());
        let began = tokio::time::Instant::now();
        disk.set_sync_ms(300);
        let durably = |key| {
            let w = writer.clone();
            tokio::spawn(async move { w.write_durably(put(key)).await.map(|()| tokio::time::Instant::now()) })
        };
        let first = durably(1);
        tokio::task::yield_now().await;
        disk.set_sync_ms(0);
        let second = durably(2);
        tokio::time::sleep(Duration::from_millis(299)).await;
        assert_eq!(disk.flushes(), 0, "nothing is synced before the delay ends");
        assert!(!first.is_finished() && !second.is_finished());
        let (first, second) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
        assert!(first - began >= Duration::from_millis(300), "{:?}", first - began);
        assert!(second >= first, "the fast disk's sync waited for the slow one before it");

        disk.set_sync_ms(5_000);
        let third = durably(3);
        tokio::time::sleep(Duration::from_millis(100)).await;
        disk.power_loss(0);
        assert_eq!(keys(&disk), vec![1, 2], "the write whose sync had not ended is lost");
        let err = third.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("earlier life"), "{err}");
    }
}
