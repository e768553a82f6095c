//! The replicated state machine: committed commands applied to `baton_model::State`.
//!
//! The accounting records the state makes as it applies commands go into this replica's
//! record store (`baton_accounting`) after each entry; the newest ones the state keeps are
//! written again when it opens and when it installs a snapshot (writing one again changes
//! nothing), so that a replica that skipped commands by a snapshot still has their records.
//! The store is synced before a snapshot is saved: the log a snapshot lets go of cannot
//! make them again.
//!
//! The state lives in memory; it is rebuilt at start from the latest snapshot plus the
//! committed log after it. A snapshot is the bincode of `State`, stored with its metadata
//! as one checksummed record, stamped with the data format its state needs (see
//! `snapshot_record`): the newest of the snapshot it started from and of every command
//! applied since.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use baton_accounting::RecordStore;
use baton_model::event::Event;
use baton_model::format::STATE_LAYOUT_FORMAT;
use baton_model::{Op, State};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};

use super::StoreError;
use super::kv::KvStore;
use super::snapshot_record::{StoredSnapshot, format_of, stamped};
use crate::codec::{decode_state, encode};
use crate::digest::{Marks, Verdict, hash_state};
use crate::types::{Entry, LogId, ResponseBatch, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

fn any(e: impl std::fmt::Display) -> AnyError {
    AnyError::error(e.to_string())
}

/// Applied batches of events a slow watcher may fall behind by.
pub const EVENT_BUFFER: usize = 4_096;
/// Records made since the last write that make `apply` write them before its call ends: half
/// the state's window of newest records, so none drops out of it unwritten.
const RECORDS_WRITTEN_BY: usize = baton_model::accounting::RECENT_RECORDS / 2;
/// Records written between two prunings of the record store by age.
const PRUNE_EVERY: u64 = 1_024;
/// Records one pruning removes at most, so that it never holds an apply up for long.
const PRUNE_AT_MOST: usize = 10_000;

/// Told, after each applied entry, how long each of its commands took to apply, by kind
/// (the operation's name; an operation made with a token counts as the one it carries).
pub type ApplyObserver = Arc<dyn Fn(&'static str, Duration) + Send + Sync>;

/// The kind of command `op` is, for [`ApplyObserver`].
fn kind(op: &Op) -> &'static str {
    match op {
        Op::As { op, .. } => op.name(),
        other => other.name(),
    }
}

struct Data {
    state: State,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// The data format `state` needs: what a snapshot of it is stamped with.
    format: u32,
    /// The newest accounting record written into the record store.
    records_written: u64,
}

/// The state machine's data, shared between openraft's state-machine task and readers.
pub struct SmShared {
    kv: Arc<dyn KvStore>,
    /// What each applied command produced, for watchers (`baton watch`). Bounded: a watcher
    /// that falls more than `EVENT_BUFFER` batches behind is told it lagged.
    events: tokio::sync::broadcast::Sender<Arc<[Event]>>,
    data: RwLock<Data>,
    records: Arc<RecordStore>,
    current: Mutex<Option<StoredSnapshot>>,
    snapshot_seq: AtomicU64,
    on_apply: RwLock<Option<ApplyObserver>>,
    /// This replica's hashes of the newest state digest marks (see `digest`).
    marks: Mutex<Marks>,
    digest_counts: Mutex<DigestCounts>,
}

/// What this replica made of the leader's state digests since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DigestCounts {
    /// Marks hashed.
    pub marks: u64,
    /// Checks whose hash equalled this replica's.
    pub agreed: u64,
    /// Checks not compared (another build's format, or a mark this replica did not apply).
    pub not_compared: u64,
}

/// A state digest step of an `apply` call, done after the state's lock is released.
enum DigestStep {
    /// Hash the state as it was right after the mark at this index (a clone: cheap, its
    /// large collections are shared).
    Mark(u64, Box<State>),
    /// Judge the leader's hash, carried by the entry at this log id.
    Check(LogId, baton_model::digest::DigestAt),
}

impl SmShared {
    fn read_data(&self) -> RwLockReadGuard<'_, Data> {
        // Only `apply` writes, and a panic there is a bug that already stopped raft; readers
        // still see the last complete state.
        self.data.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_data(&self) -> Result<RwLockWriteGuard<'_, Data>, StorageError> {
        self.data
            .write()
            .map_err(|_| StorageIOError::write_state_machine(any("state machine poisoned by an earlier panic")).into())
    }

    /// Runs `f` on the applied state (as of the last applied entry; no consensus round).
    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.read_data().state)
    }

    /// This replica's accounting records.
    pub fn records(&self) -> &Arc<RecordStore> {
        &self.records
    }

    /// Picks up from the newest record the store holds, after the state was loaded or
    /// replaced by a snapshot, and writes what the state holds beyond it: those the log
    /// no longer holds may be missing here.
    fn resume_records(&self, d: &mut Data) {
        let stored = self.records.newest_seq().unwrap_or_else(|e| {
            tracing::error!(error = %e, "accounting store unreadable; writing every record the state holds");
            0
        });
        d.records_written = stored.min(d.state.accounting().made());
        self.write_records(d);
    }

    /// Writes the records the state made since the last call; a failure is logged, never
    /// raft's: accounting must not stop the cluster.
    fn write_records(&self, d: &mut Data) {
        let a = d.state.accounting();
        if a.made() <= d.records_written {
            return;
        }
        if let Some(oldest) = a.oldest_kept().filter(|&o| o > d.records_written + 1) {
            tracing::warn!(
                missing_from = d.records_written + 1,
                missing_to = oldest - 1,
                "accounting records the state no longer holds were never written here; they are missing from this replica's history"
            );
        }
        let (before, now_ms) = (d.records_written, d.state.now_ms());
        match self.records.put(a.after(before)) {
            Ok(_) => d.records_written = a.made(),
            Err(e) => tracing::error!(error = %e, "accounting records not written"),
        }
        if let Some(s) = a.settings()
            && a.made() / PRUNE_EVERY != before / PRUNE_EVERY
            && let Err(e) = self.records.prune(now_ms.saturating_sub(s.retention_ms), PRUNE_AT_MOST)
        {
            tracing::error!(error = %e, "old accounting records not pruned");
        }
    }

    /// Events of commands applied from now on, on this replica.
    pub fn subscribe_events(&self) -> tokio::sync::broadcast::Receiver<Arc<[Event]>> {
        self.events.subscribe()
    }

    fn publish(&self, events: Vec<Event>) {
        if !events.is_empty() {
            // No receiver is not an error: nobody watches.
            let _ = self.events.send(events.into());
        }
    }

    /// The applied state encoded, with the index it reflects and the data format it needs,
    /// read under one lock.
    pub fn encode_state(&self) -> (u64, u32, Result<Vec<u8>, crate::codec::CodecError>) {
        let d = self.read_data();
        (d.last_applied.map_or(0, |l| l.index), d.format, encode(&d.state))
    }

    /// The data format the applied state needs: the newest this cluster has used.
    pub fn format_used(&self) -> u32 {
        self.read_data().format
    }

    /// Has `observer` told of every command applied from now on (replacing any before).
    pub fn observe_applies(&self, observer: ApplyObserver) {
        *self.on_apply.write().unwrap_or_else(PoisonError::into_inner) = Some(observer);
    }

    /// This replica's hash of the newest mark it applied: what a leader writes into its
    /// next `StateDigest`.
    pub fn newest_mark(&self) -> Option<baton_model::digest::DigestAt> {
        self.marks.lock().unwrap_or_else(PoisonError::into_inner).newest()
    }

    /// What this replica made of the state digests since it started.
    pub fn digest_counts(&self) -> DigestCounts {
        *self.digest_counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hashes the marks and judges the checks of one `apply` call, in log order (a check
    /// may name a mark of the same call). A parted state is an error: raft stops, and the
    /// replica with it (`Replica::failed`).
    async fn digest_steps(self: &Arc<Self>, steps: Vec<DigestStep>) -> Result<(), StorageError> {
        for step in steps {
            match step {
                DigestStep::Mark(index, state) => {
                    let hashed = off_runtime(self.kv.blocks(), move || hash_state(&state))
                        .await
                        .map_err(|e| StorageIOError::read_state_machine(any(e)))?;
                    match hashed {
                        Ok(sha256) => {
                            self.marks.lock().unwrap_or_else(PoisonError::into_inner).insert(index, sha256);
                            self.count(|c| c.marks += 1);
                        }
                        // Not this replica's state parting: nothing is compared at this mark.
                        Err(e) => tracing::error!(index, error = %e, "the state could not be hashed at a digest mark"),
                    }
                }
                DigestStep::Check(log_id, theirs) => {
                    let verdict = self.marks.lock().unwrap_or_else(PoisonError::into_inner).judge(&theirs);
                    match verdict {
                        Verdict::Agreed => {
                            self.count(|c| c.agreed += 1);
                            tracing::debug!(index = theirs.index, digest = %theirs.short(), "state digest agrees with the leader's");
                        }
                        Verdict::NotCompared(why) => {
                            self.count(|c| c.not_compared += 1);
                            tracing::info!(index = theirs.index, why, "state digest not compared");
                        }
                        parted @ Verdict::Parted { .. } => {
                            let reason = parted.stop_reason().unwrap_or_default();
                            tracing::error!(index = theirs.index, "{reason}");
                            return Err(StorageIOError::apply(log_id, any(reason)).into());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn count(&self, f: impl FnOnce(&mut DigestCounts)) {
        f(&mut self.digest_counts.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn apply_observer(&self) -> Option<ApplyObserver> {
        self.on_apply.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn last_applied(&self) -> Option<LogId> {
        self.read_data().last_applied
    }

    fn current_snapshot(&self) -> Option<StoredSnapshot> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_current_snapshot(&self, s: StoredSnapshot) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(s);
    }
}

/// The state machine handed to openraft.
#[derive(Clone)]
pub struct StateMachineStore {
    shared: Arc<SmShared>,
}

impl StateMachineStore {
    /// Loads the latest snapshot, if any; a corrupt one stops the replica here. Records
    /// are kept in memory.
    pub fn open(kv: Arc<dyn KvStore>) -> Result<StateMachineStore, StoreError> {
        Self::open_with(kv, Arc::new(RecordStore::memory()))
    }

    /// As [`StateMachineStore::open`], writing accounting records into `records`.
    pub fn open_with(kv: Arc<dyn KvStore>, records: Arc<RecordStore>) -> Result<StateMachineStore, StoreError> {
        let stored = StoredSnapshot::load(kv.as_ref())?;
        let data = match &stored {
            None => Data {
                state: State::new(),
                last_applied: None,
                membership: StoredMembership::default(),
                format: STATE_LAYOUT_FORMAT,
                records_written: 0,
            },
            Some(s) => Data {
                state: decode_state(&s.data).map_err(|e| StoreError::Corrupt {
                    location: kv.location(super::kv::Space::Snapshot),
                    record: "snapshot state".into(),
                    reason: e.to_string(),
                })?,
                last_applied: s.meta.last_log_id,
                membership: s.meta.last_membership.clone(),
                format: format_of(&s.meta.snapshot_id),
                records_written: 0,
            },
        };
        let shared = SmShared {
            kv,
            events: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
            data: RwLock::new(data),
            records,
            current: Mutex::new(stored),
            snapshot_seq: AtomicU64::new(0),
            on_apply: RwLock::new(None),
            marks: Mutex::new(Marks::default()),
            digest_counts: Mutex::new(DigestCounts::default()),
        };
        shared.resume_records(&mut shared.data.write().unwrap_or_else(PoisonError::into_inner));
        Ok(StateMachineStore { shared: Arc::new(shared) })
    }
}

impl StateMachineStore {
    pub fn shared(&self) -> Arc<SmShared> {
        self.shared.clone()
    }
}

fn to_snapshot(s: StoredSnapshot) -> Snapshot<TypeConfig> {
    Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }
}

/// Runs `work` off the async threads when the store is on disk: serializing a large state
/// and syncing it must not hold up heartbeats. The in-memory and simulated stores (tests,
/// simulations) run it inline, so that under a simulated clock it takes simulated time,
/// not real time, and a seeded run gives one history.
async fn off_runtime<T: Send + 'static>(
    durable: bool,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    if durable { tokio::task::spawn_blocking(work).await } else { Ok(work()) }
}

/// Saves a snapshot (see `off_runtime`).
async fn persist(shared: Arc<SmShared>, stored: StoredSnapshot) -> Result<(), StorageError> {
    let signature = stored.meta.signature();
    let durable = shared.kv.blocks();
    off_runtime(durable, move || stored.save(shared.kv.as_ref()))
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(signature.clone()), any(e)))?
        .map_err(|e| StorageIOError::write_snapshot(Some(signature), any(e)).into())
}

/// Makes the accounting records written so far durable before a snapshot lets go of the
/// log that made them (see `off_runtime`). A failure is logged: the snapshot goes on.
async fn sync_records(shared: &Arc<SmShared>) {
    let records = shared.records.clone();
    match off_runtime(shared.kv.blocks(), move || records.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "accounting records not synced before a snapshot"),
        Err(e) => tracing::error!(error = %e, "accounting records not synced before a snapshot"),
    }
}

/// Builds snapshots from a copy of the state taken under a short read lock.
pub struct SnapshotBuilder {
    shared: Arc<SmShared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (state, last_applied, membership, format) = {
            let d = self.shared.read_data();
            (d.state.clone(), d.last_applied, d.membership.clone(), d.format)
        };
        let seq = self.shared.snapshot_seq.fetch_add(1, Ordering::Relaxed);
        let name = match last_applied {
            Some(l) => format!("{}-{}-{seq}", l.leader_id.term, l.index),
            None => format!("empty-{seq}"),
        };
        let snapshot_id = stamped(&name, format);
        let meta = SnapshotMeta { last_log_id: last_applied, last_membership: membership, snapshot_id };
        let data = off_runtime(self.shared.kv.blocks(), move || encode(&state))
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), any(e)))?
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), any(e)))?;
        let stored = StoredSnapshot { meta, data };
        sync_records(&self.shared).await;
        persist(self.shared.clone(), stored.clone()).await?;
        self.shared.set_current_snapshot(stored.clone());
        tracing::info!(snapshot = %stored.meta.snapshot_id, bytes = stored.data.len(), "snapshot built");
        Ok(to_snapshot(stored))
    }
}

/// The `apply` step of a job's decision path (the server's `trace` module): a span for each
/// attempt this entry started, with the job's id, the attempt, and the term and index of
/// the entry.
fn trace_starts(state: &State, log_id: &LogId, responses: &[baton_model::command::Response]) {
    use baton_model::event::EventKind;
    for e in responses.iter().flatten().flat_map(|a| a.events.iter()) {
        if let (EventKind::Started { attempt, .. }, Some(name)) = (&e.kind, &e.job) {
            let job = state.job_by_name(name.as_str()).map(|j| j.id);
            let _span = tracing::info_span!("apply", job, attempt, term = log_id.leader_id.term, index = log_id.index);
        }
    }
}

/// What one `apply` call did under the state's lock, for what follows it outside.
struct AppliedEntries {
    out: Vec<ResponseBatch>,
    events: Vec<Event>,
    /// How long each command took, by kind, when timed.
    timings: Vec<(&'static str, Duration)>,
    digest_steps: Vec<DigestStep>,
}

impl SmShared {
    /// Applies `entries` under the state's lock. Commands are timed when `timed` (timed
    /// under the lock, told after it: the observer may take locks of its own).
    fn apply_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
        timed: bool,
    ) -> Result<AppliedEntries, StorageError> {
        let mut d = self.write_data()?;
        let mut done =
            AppliedEntries { out: Vec::new(), events: Vec::new(), timings: Vec::new(), digest_steps: Vec::new() };
        for entry in entries {
            d.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => done.out.push(ResponseBatch::default()),
                EntryPayload::Normal(batch) => {
                    let mut marked = false;
                    let responses: Vec<_> = batch
                        .commands
                        .into_iter()
                        .map(|cmd| {
                            if let Op::StateDigest(check) = &cmd.op {
                                marked = true;
                                done.digest_steps.extend((*check).map(|c| DigestStep::Check(entry.log_id, c)));
                            }
                            d.format = d.format.max(cmd.op.format());
                            if !timed {
                                return d.state.apply(cmd);
                            }
                            let (what, started) = (kind(&cmd.op), Instant::now());
                            let r = d.state.apply(cmd);
                            done.timings.push((what, started.elapsed()));
                            r
                        })
                        .collect();
                    trace_starts(&d.state, &entry.log_id, &responses);
                    done.events.extend(responses.iter().flatten().flat_map(|a| a.events.iter().cloned()));
                    done.out.push(ResponseBatch { responses });
                    if marked {
                        done.digest_steps.push(DigestStep::Mark(entry.log_id.index, Box::new(d.state.clone())));
                    }
                    // Written once for the whole call (one batch per tree costs less than
                    // one per entry), unless the state's window of newest records would
                    // otherwise drop some before they are written.
                    if d.state.accounting().made().saturating_sub(d.records_written) >= RECORDS_WRITTEN_BY as u64 {
                        self.write_records(&mut d);
                    }
                }
                EntryPayload::Membership(m) => {
                    // Ids the change removes are never taken back (behaviour 6, `retired`).
                    let removed: Vec<_> = d
                        .membership
                        .membership()
                        .nodes()
                        .map(|(id, _)| *id)
                        .filter(|id| m.get_node(id).is_none())
                        .collect();
                    d.state.replicas_removed(removed);
                    d.membership = StoredMembership::new(Some(entry.log_id), m);
                    done.out.push(ResponseBatch::default());
                }
            }
        }
        // Before the lock goes: a read that sees these entries applied finds their records.
        self.write_records(&mut d);
        Ok(done)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let d = self.shared.read_data();
        Ok((d.last_applied, d.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ResponseBatch>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let observer = self.shared.apply_observer();
        let applied = self.shared.apply_entries(entries, observer.is_some())?;
        if let Some(observe) = observer {
            for (what, took) in applied.timings {
                observe(what, took);
            }
        }
        self.shared.digest_steps(applied.digest_steps).await?;
        self.shared.publish(applied.events);
        Ok(applied.out)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder { shared: self.shared.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let state: State = decode_state(&data).map_err(|e| {
            StorageIOError::read_snapshot(
                Some(meta.signature()),
                any(format!("received snapshot does not decode: {e}")),
            )
        })?;
        let stored = StoredSnapshot { meta: meta.clone(), data };
        persist(self.shared.clone(), stored.clone()).await?;
        {
            let mut d = self.shared.write_data()?;
            d.state = state;
            d.last_applied = meta.last_log_id;
            d.membership = meta.last_membership.clone();
            d.format = format_of(&meta.snapshot_id);
            self.shared.resume_records(&mut d);
        }
        self.shared.marks.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.shared.set_current_snapshot(stored);
        tracing::info!(snapshot = %meta.snapshot_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.shared.current_snapshot().map(to_snapshot))
    }
}
