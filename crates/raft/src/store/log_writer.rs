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
//! A store that does not block (memory, a simulated disk) is written inline instead, by the
//! same rules (a failed write retried with the same pauses, on the runtime's clock; a failed
//! sync the end); a simulated disk made slow has its syncs acknowledged in order after their
//! delay, by a task of their own ([`SlowSyncs`]), so a simulation can give a replica a slow
//! disk. Either way, once a sync failed nothing is acknowledged any more ([`Broken`]).

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
    health: DiskHealth,
    broken: Broken,
}

/// The error of the first sync that failed, kept: every later write, sync and acknowledgement
/// fails with it. Why: after a failed `fsync` the kernel may have dropped the dirty pages, and
/// a later `fsync` reports success over data that is gone, so a later acknowledgement would
/// claim entries durable that are lost. openraft stops at the first error; this covers what
/// was already queued behind it. Shared by the writer and its slow syncs.
#[derive(Clone, Default)]
struct Broken(Arc<std::sync::Mutex<Option<KvError>>>);

impl Broken {
    fn check(&self) -> Result<(), KvError> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().map_or(Ok(()), Err)
    }

    /// Syncs `store` unless an earlier sync failed; a failure is kept, marked on `health`
    /// and logged.
    fn sync(&self, store: &dyn KvStore, health: &DiskHealth) -> Result<(), KvError> {
        self.check()?;
        let Err(e) = store.flush() else { return Ok(()) };
        health.fail(&e);
        tracing::error!(error = %e, "cannot sync the raft log; stopping the replica (restart it to recover)");
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e.clone());
        Err(e)
    }
}

/// How a failed write is retried: with a pause that doubles from `RETRY_FIRST` up to
/// `RETRY_MAX`, until `GIVE_UP` has passed since the first try. The writer thread sleeps its
/// pauses; the inline writer awaits them on the runtime's clock.
struct Retries {
    pause: Duration,
}

impl Retries {
    fn new() -> Retries {
        Retries { pause: RETRY_FIRST }
    }

    /// After a write failed with `e`, `elapsed` after the first try: the pause before the
    /// next try, or `e` when it is time to give up.
    fn after(&mut self, e: KvError, elapsed: Duration, health: &DiskHealth) -> Result<Duration, KvError> {
        if health.fail(&e) {
            tracing::error!(error = %e, "cannot write the raft log; refusing writes and retrying until it succeeds");
        }
        if elapsed >= GIVE_UP {
            tracing::error!(error = %e, "the raft log could not be written for {GIVE_UP:?}; stopping the replica");
            return Err(e);
        }
        let pause = self.pause;
        self.pause = (pause * 2).min(RETRY_MAX);
        Ok(pause)
    }
}

/// Marks the disk healthy after a write went through, and says so if it was failing.
fn written(store: &dyn KvStore, health: &DiskHealth) {
    if health.recover() {
        tracing::warn!(location = %store.location(Space::Log), "the raft log can be written again; accepting writes");
    }
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
    fn start(kv: Arc<dyn KvStore>, broken: Broken, health: DiskHealth) -> SlowSyncs {
        let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Done)>();
        tokio::spawn(async move {
            while let Some((at, done)) = rx.recv().await {
                tokio::time::sleep_until(at).await;
                let result = if kv.is_durable() { broken.sync(kv.as_ref(), &health) } else { broken.check() };
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
fn run(store: &dyn KvStore, mut rx: mpsc::Receiver<Job>, health: &DiskHealth, broken: &Broken, stats: &WriteStats) {
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
        let result = write_retrying(store, &batch, flush, health, broken);
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
/// again in the same order leave the same records. A failed sync is not retried (see
/// [`Broken`]): the error goes to openraft, which stops the replica; a restart recovers from
/// what is on disk and from the peers.
fn write_retrying(
    store: &dyn KvStore,
    batch: &[Write],
    flush: bool,
    health: &DiskHealth,
    broken: &Broken,
) -> Result<(), KvError> {
    broken.check()?;
    let started = Instant::now();
    let mut retries = Retries::new();
    while let Err(e) = store.write(batch) {
        std::thread::sleep(retries.after(e, started.elapsed(), health)?);
    }
    if flush {
        broken.sync(store, health)?;
    }
    written(store, health);
    Ok(())
}

impl LogWriter {
    pub(crate) fn start(
        kv: Arc<dyn KvStore>,
        queue_len: usize,
        health: DiskHealth,
        stats: Arc<WriteStats>,
    ) -> Result<LogWriter, KvError> {
        let (slow, broken) = (std::sync::Mutex::default(), Broken::default());
        if !kv.blocks() {
            return Ok(LogWriter { tx: None, kv, slow, health, broken });
        }
        let (tx, rx) = mpsc::channel::<Job>(queue_len.max(1));
        let (store, on_thread) = (kv.clone(), (health.clone(), broken.clone()));
        std::thread::Builder::new()
            .name("baton-raft-log".into())
            .spawn(move || run(store.as_ref(), rx, &on_thread.0, &on_thread.1, &stats))
            .map_err(|e| KvError {
                location: kv.location(Space::Log),
                message: format!("cannot start the log writer thread: {e}"),
            })?;
        Ok(LogWriter { tx: Some(tx), kv, slow, health, broken })
    }

    async fn send(&self, writes: Vec<Write>, done: Option<Done>) -> Result<(), KvError> {
        let Some(tx) = &self.tx else { return self.send_inline(writes, done).await };
        tx.send(Job::Change { writes, done }).await.map_err(|_| self.stopped())
    }

    /// `write_retrying` for a store that does not block, its pauses awaited.
    async fn send_inline(&self, writes: Vec<Write>, done: Option<Done>) -> Result<(), KvError> {
        self.broken.check()?;
        let started = tokio::time::Instant::now();
        let mut retries = Retries::new();
        while let Err(e) = self.kv.write(&writes) {
            tokio::time::sleep(retries.after(e, started.elapsed(), &self.health)?).await;
        }
        written(self.kv.as_ref(), &self.health);
        let Some(done) = done else { return Ok(()) };
        if let Some(done) = self.unless_slow(done) {
            // A simulated disk is durable only once flushed, as a real one.
            if self.kv.is_durable() {
                self.broken.sync(self.kv.as_ref(), &self.health)?;
            }
            complete(done, &Ok(()));
        }
        Ok(())
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
        let syncs =
            slow.get_or_insert_with(|| SlowSyncs::start(self.kv.clone(), self.broken.clone(), self.health.clone()));
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

    /// A simulated disk's store, said to block: written by the writer thread, as a real
    /// disk is.
    struct OnThread(crate::store::PowerLossKv);

    impl KvStore for OnThread {
        fn get(&self, space: Space, key: u64) -> Result<Option<Vec<u8>>, KvError> {
            self.0.get(space, key)
        }
        fn scan(&self, space: Space, keys: std::ops::Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
            self.0.scan(space, keys, limit)
        }
        fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
            self.0.last(space)
        }
        fn write(&self, batch: &[Write]) -> Result<(), KvError> {
            self.0.write(batch)
        }
        fn flush(&self) -> Result<(), KvError> {
            self.0.flush()
        }
        fn close(&self) -> Result<(), KvError> {
            self.0.close()
        }
        fn is_durable(&self) -> bool {
            true
        }
        fn blocks(&self) -> bool {
            true
        }
        fn location(&self, space: Space) -> String {
            self.0.location(space)
        }
    }

    /// After a sync failed, nothing is acknowledged again, on the writer thread and inline
    /// alike: the disk would report the next sync fine, over the write the failure lost.
    async fn nothing_is_acknowledged_after_a_failed_sync(blocks: bool) {
        let disk = PowerLossDisk::new("disk r1");
        let kv: Arc<dyn KvStore> = if blocks { Arc::new(OnThread(disk.open())) } else { Arc::new(disk.open()) };
        let health = DiskHealth::default();
        let writer = LogWriter::start(kv, 8, health.clone(), Arc::default()).unwrap();
        writer.write_durably(put(1)).await.unwrap();
        disk.fail_next_sync();
        let err = writer.write_durably(put(2)).await.unwrap_err();
        assert!(err.to_string().contains("input/output error"), "{err}");
        let later = writer.write_durably(put(3)).await.unwrap_err();
        assert_eq!(later.to_string(), err.to_string(), "the first failure, kept");
        assert_eq!(keys(&disk), vec![1], "the write the failed sync lost is not on disk");
        assert!(health.failing().is_some(), "the replica says its disk is failing");
    }

    #[tokio::test]
    async fn the_writer_thread_acknowledges_nothing_after_a_failed_sync() {
        nothing_is_acknowledged_after_a_failed_sync(true).await;
    }

    #[tokio::test]
    async fn the_inline_writer_acknowledges_nothing_after_a_failed_sync() {
        nothing_is_acknowledged_after_a_failed_sync(false).await;
    }

    /// A simulated disk that is full refuses writes; the inline writer retries them on the
    /// runtime's clock, as the writer thread does on the wall clock, and says the disk is
    /// failing meanwhile; once there is room the write lands and is acknowledged.
    #[tokio::test(start_paused = true)]
    async fn the_inline_writer_retries_a_full_disk_until_it_has_room() {
        let disk = PowerLossDisk::new("disk r1");
        let health = DiskHealth::default();
        let writer = Arc::new(LogWriter::start(Arc::new(disk.open()), 8, health.clone(), Arc::default()).unwrap());
        disk.set_full(true);
        let w = writer.clone();
        let waiting = tokio::spawn(async move { w.write_durably(put(1)).await });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "nothing is acknowledged while the disk is full");
        let failing = health.failing().expect("the disk is failing meanwhile");
        assert!(failing.message.contains("no space left"), "{failing:?}");
        assert!(disk.errors() >= 5, "retried: {} tries failed", disk.errors());
        disk.set_full(false);
        waiting.await.unwrap().unwrap();
        assert_eq!(keys(&disk), vec![1]);
        assert!(health.failing().is_none(), "healthy again");
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
