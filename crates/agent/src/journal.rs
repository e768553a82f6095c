//! The agent's durable memory (sled at `<data-dir>/journal`, see `journal_store`): the
//! highest leader term seen, the highest attempt per job, every replica started here (pid
//! and process start time), and the observations the leader has not acknowledged yet.
//!
//! Every change returns only once it is on stable storage (sled's flush and an
//! `fdatasync`): the supervisor acts on it right after (spawns, signals, reports). When a
//! change fails (a full disk, an I/O error) the journal says so ([`Journal::failing`]) until
//! [`Journal::recover`] finds that the disk takes writes again.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use baton_proto::v1::Observation;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::error::JournalError;
use crate::fence::Fence;
use crate::journal_store::{JournalStore, SledStore, StoreError, Tree};
use crate::limits::{MAX_ATTEMPT_RECORDS, MAX_PENDING_OBSERVATIONS, MAX_PRUNED_KEYS};

/// Identity of one replica of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaKey {
    pub job_id: u64,
    pub attempt: u32,
    pub rank: u32,
}

impl ReplicaKey {
    fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.job_id.to_be_bytes());
        b[8..12].copy_from_slice(&self.attempt.to_be_bytes());
        b[12..].copy_from_slice(&self.rank.to_be_bytes());
        b
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Running,
    /// The checkpoint signal went out (STOP); killed at the deadline.
    Stopping,
    /// SIGSTOPped in place.
    Suspended,
    /// No longer wanted here: SIGTERM, then SIGKILL; nothing is reported.
    Killing,
    Finished,
}

/// How a replica ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Exited { code: i32 },
    Stopped { checkpointed: bool },
    Killed,
}

/// A STOP in progress: when the signal went out and the newest checkpoint file before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopInfo {
    pub signal_unix_ms: u64,
    pub deadline_unix_ms: u64,
    pub newest_before_unix_ms: u64,
    /// The agent's lease ran out (not a directive's STOP): reported with that cause.
    #[serde(default)]
    pub lease_expired: bool,
    /// The deadline on CLOCK_BOOTTIME, which a wall-clock step does not move; 0 in journals
    /// written before it was recorded (then `deadline_unix_ms` counts).
    #[serde(default)]
    pub deadline_boot_ms: u64,
    /// The checkpoint signal (SIGTERM in journals written before it was recorded).
    #[serde(default = "default_stop_signal")]
    pub signal: i32,
    /// The signal went out. A stop is journaled before its signal, so `false` after a
    /// restart means the agent may have gone down in between: it sends the signal then.
    /// Journals written before this was recorded journaled only after signalling.
    #[serde(default = "signalled_in_older_journals")]
    pub signalled: bool,
}

fn default_stop_signal() -> i32 {
    libc::SIGTERM
}

fn signalled_in_older_journals() -> bool {
    true
}

impl StopInfo {
    /// Whether the grace has run out at `now_boot_ms` (`now_unix_ms` for old records).
    pub fn past(&self, now_boot_ms: u64, now_unix_ms: u64) -> bool {
        if self.deadline_boot_ms > 0 {
            now_boot_ms >= self.deadline_boot_ms
        } else {
            now_unix_ms >= self.deadline_unix_ms
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaRecord {
    pub key: ReplicaKey,
    pub job: String,
    pub task: u32,
    pub replica: u32,
    /// The wrapper's pid, which is also the process group id; 0 if it never started.
    pub pid: u32,
    /// From /proc/<pid>/stat, so a reused pid is not mistaken for the replica.
    pub start_time: u64,
    pub phase: Phase,
    pub stop: Option<StopInfo>,
    /// When the Killing phase gives up waiting and sends SIGKILL.
    pub kill_deadline_unix_ms: u64,
    /// The same on CLOCK_BOOTTIME (0 in older journals: the wall-clock one counts).
    #[serde(default)]
    pub kill_deadline_boot_ms: u64,
    pub outcome: Option<Outcome>,
    /// Where the wrapper writes the exit code.
    pub exit_file: PathBuf,
    /// GPU indices it was given (absent in journals written before they were recorded).
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// Thousandths of its one GPU when it shares it (decisions.md section 11; 0: whole,
    /// and in journals written before shared GPUs): others may share that GPU beside it.
    #[serde(default)]
    pub gpu_milli: u32,
    /// UUIDs of the MIG slices the agent gave it (absent in journals written before them):
    /// no other replica gets them while it holds them, and a restarted agent knows them.
    #[serde(default)]
    pub slices: Vec<String>,
    /// Wall-clock ms when this agent started it (0 in journals written before it was
    /// recorded): a checkpoint file newer than this was written by this attempt.
    #[serde(default)]
    pub started_unix_ms: u64,
    /// The newest file of its rank's checkpoint (a file time, 0: none) when it was started
    /// (`None` in journals written before it was recorded): a file newer than this was
    /// written by this attempt, judged without the agent's wall clock.
    #[serde(default)]
    pub newest_checkpoint_at_start_unix_ms: Option<u64>,
}

impl ReplicaRecord {
    /// A replica that ended here unrecorded (its journal was lost while it ran): only its
    /// key, its exit file and how it ended are known; it holds nothing.
    pub fn ended_unrecorded(key: ReplicaKey, exit_file: PathBuf, outcome: Outcome) -> ReplicaRecord {
        ReplicaRecord {
            key,
            job: String::new(),
            task: 0,
            replica: key.rank,
            pid: 0,
            start_time: 0,
            phase: Phase::Finished,
            stop: None,
            kill_deadline_unix_ms: 0,
            kill_deadline_boot_ms: 0,
            outcome: Some(outcome),
            exit_file,
            gpus: Vec::new(),
            gpu_milli: 0,
            slices: Vec::new(),
            started_unix_ms: 0,
            newest_checkpoint_at_start_unix_ms: None,
        }
    }

    /// Made by [`ReplicaRecord::ended_unrecorded`]: what it held is not known. Every
    /// assignment names its job, so only such a record has no job name.
    pub fn is_unrecorded(&self) -> bool {
        self.job.is_empty()
    }
}

pub struct Journal {
    /// For messages: the sled directory, or a test disk's name.
    path: PathBuf,
    store: Box<dyn JournalStore>,
    /// Held by every change: the supervisor and the reporter both write, and a
    /// read-modify-write (raising the term, numbering an observation) must not interleave.
    writing: Mutex<()>,
    /// The error of the last failed write or flush while no write has succeeded since.
    failing: Mutex<Option<String>>,
}

const TERM_KEY: &[u8] = b"term";
/// The leader first obeyed in a term: 16 bytes, (term, leader id); stale once the term
/// moved on.
const LEADER_KEY: &[u8] = b"leader";
/// Written to learn whether the disk takes writes again.
const PROBE_KEY: &[u8] = b"probe";
/// The boot id of the machine when the agent last started.
const BOOT_KEY: &[u8] = b"boot";

impl Journal {
    /// Opens (or creates) the sled journal at `path`.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let store = SledStore::open(path).map_err(|source| JournalError::Open { path: path.to_path_buf(), source })?;
        Journal::with_store(path, Box::new(store))
    }

    /// The journal on another store (a simulated disk in tests); `path` names it in errors.
    pub fn with_store(path: &Path, store: Box<dyn JournalStore>) -> Result<Journal, JournalError> {
        let journal = Journal { path: path.to_path_buf(), store, writing: Mutex::new(()), failing: Mutex::new(None) };
        // Read everything once so a damaged journal is refused at start, naming the path.
        journal.fence()?;
        journal.replicas()?;
        journal.pending(usize::MAX)?;
        Ok(journal)
    }

    fn io(&self, source: StoreError) -> JournalError {
        JournalError::Io { path: self.path.clone(), source }
    }

    fn corrupt(&self, what: &str, detail: impl ToString) -> JournalError {
        JournalError::Corrupt { path: self.path.clone(), what: what.to_string(), detail: detail.to_string() }
    }

    /// Runs one change (its writes and the flush that makes them durable) and records
    /// whether the disk took it.
    fn change<T>(&self, f: impl FnOnce() -> Result<T, JournalError>) -> Result<T, JournalError> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let result = f().and_then(|v| self.sync().map(|_| v));
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        match &result {
            Err(e @ JournalError::Io { .. }) => {
                if failing.is_none() {
                    tracing::error!("{e}; no new replica starts here until the journal takes writes again");
                }
                *failing = Some(e.to_string());
            }
            Ok(_) => *failing = None,
            Err(_) => {}
        }
        result
    }

    /// The store's flush, which may take long on a slow disk: on a multi-threaded runtime the
    /// worker hands its other tasks (the heartbeat among them) to another thread first.
    fn sync(&self) -> Result<(), JournalError> {
        let flush = || self.store.flush().map_err(|e| self.io(e));
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(flush)
            }
            _ => flush(),
        }
    }

    /// Why the journal cannot be written, while it cannot.
    pub fn failing(&self) -> Option<String> {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// While the journal is failing: opens its store again and tries a write. True once it
    /// takes writes again; what was not durable when it failed is gone (the caller writes it
    /// again).
    pub fn recover(&self) -> Result<bool, JournalError> {
        if self.failing().is_none() {
            return Ok(false);
        }
        {
            let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
            self.store.reopen().map_err(|e| self.io(e))?;
        }
        self.change(|| self.store.insert(Tree::Meta, PROBE_KEY, &[]).map_err(|e| self.io(e)))?;
        tracing::info!(path = %self.path.display(), "the journal takes writes again");
        Ok(true)
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, JournalError> {
        self.store.get(tree, key).map_err(|e| self.io(e))
    }

    fn insert(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<(), JournalError> {
        self.store.insert(tree, key, value).map_err(|e| self.io(e))
    }

    fn remove(&self, tree: Tree, key: &[u8]) -> Result<(), JournalError> {
        self.store.remove(tree, key).map_err(|e| self.io(e))
    }

    fn len(&self, tree: Tree) -> Result<usize, JournalError> {
        self.store.len(tree).map_err(|e| self.io(e))
    }

    /// Removes the lowest keys of `tree` until at most `max` remain.
    fn trim(&self, tree: Tree, max: usize) -> Result<(), JournalError> {
        let excess = self.len(tree)?.saturating_sub(max);
        if excess == 0 {
            return Ok(());
        }
        for (k, _) in self.store.scan(tree, excess).map_err(|e| self.io(e))? {
            self.remove(tree, &k)?;
        }
        Ok(())
    }

    pub fn term(&self) -> Result<u64, JournalError> {
        match self.get(Tree::Meta, TERM_KEY)? {
            None => Ok(0),
            Some(v) => {
                Ok(u64::from_be_bytes(v.as_slice().try_into().map_err(|_| self.corrupt("term", "not 8 bytes"))?))
            }
        }
    }

    /// Raises the highest term seen to `term` (never lowers it); returns the result.
    pub fn raise_term(&self, term: u64) -> Result<u64, JournalError> {
        self.change(|| self.raise_term_unflushed(term))
    }

    fn raise_term_unflushed(&self, term: u64) -> Result<u64, JournalError> {
        let new = self.term()?.max(term);
        self.insert(Tree::Meta, TERM_KEY, &new.to_be_bytes())?;
        Ok(new)
    }

    /// The highest term seen and the leader first obeyed in it.
    pub fn fence(&self) -> Result<Fence, JournalError> {
        let term = self.term()?;
        let leader_id = match self.get(Tree::Meta, LEADER_KEY)? {
            None => None,
            Some(v) => {
                let b: [u8; 16] = v.as_slice().try_into().map_err(|_| self.corrupt("leader", "not 16 bytes"))?;
                let (t, id) = b.split_at(8);
                let t = u64::from_be_bytes(t.try_into().expect("8 bytes"));
                (t == term).then(|| u64::from_be_bytes(id.try_into().expect("8 bytes")))
            }
        };
        Ok(Fence { term, leader_id })
    }

    /// Remembers a fence `Fence::check` accepted: the leader first, then the term, so a crash
    /// between the two leaves a leader entry that the old term makes stale.
    pub fn remember(&self, f: Fence) -> Result<(), JournalError> {
        self.change(|| {
            if let Some(id) = f.leader_id {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&f.term.to_be_bytes());
                b[8..].copy_from_slice(&id.to_be_bytes());
                self.insert(Tree::Meta, LEADER_KEY, &b)?;
            }
            self.raise_term_unflushed(f.term).map(drop)
        })
    }

    /// The machine's boot id when an agent last started on this journal (`None` in journals
    /// written before it was recorded).
    pub fn last_boot(&self) -> Result<Option<String>, JournalError> {
        Ok(self.get(Tree::Meta, BOOT_KEY)?.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    pub fn note_boot(&self, boot_id: &str) -> Result<(), JournalError> {
        self.change(|| self.insert(Tree::Meta, BOOT_KEY, boot_id.as_bytes()))
    }

    pub fn max_attempt(&self, job_id: u64) -> Result<Option<u32>, JournalError> {
        match self.get(Tree::Attempts, &job_id.to_be_bytes())? {
            None => Ok(None),
            Some(v) => {
                let b: [u8; 4] = v.as_slice().try_into().map_err(|_| self.corrupt("attempt", "not 4 bytes"))?;
                Ok(Some(u32::from_be_bytes(b)))
            }
        }
    }

    /// Remembers `attempt` as the highest for `job_id`. Bounded: past `MAX_ATTEMPT_RECORDS`
    /// jobs, the lowest job ids (the oldest jobs) are forgotten.
    pub fn set_max_attempt(&self, job_id: u64, attempt: u32) -> Result<(), JournalError> {
        self.change(|| {
            self.insert(Tree::Attempts, &job_id.to_be_bytes(), &attempt.to_be_bytes())?;
            self.trim(Tree::Attempts, MAX_ATTEMPT_RECORDS)
        })
    }

    pub fn replicas(&self) -> Result<Vec<ReplicaRecord>, JournalError> {
        let mut out = Vec::new();
        for (_, v) in self.store.scan(Tree::Replicas, usize::MAX).map_err(|e| self.io(e))? {
            out.push(serde_json::from_slice(&v).map_err(|e| self.corrupt("replica record", e))?);
        }
        Ok(out)
    }

    pub fn put_replica(&self, rec: &ReplicaRecord) -> Result<(), JournalError> {
        let v = serde_json::to_vec(rec).map_err(|e| self.corrupt("replica record", e))?;
        self.change(|| self.insert(Tree::Replicas, &rec.key.bytes(), &v))
    }

    /// Drops the record of a finished replica to keep the journal bounded, remembering its
    /// key (16 bytes) so that a stale RUN of it is still refused: the attempt fence refuses
    /// only attempts older than the newest. Bounded: past `MAX_PRUNED_KEYS`, the lowest job
    /// ids (the oldest jobs, which no leader runs any more) are forgotten.
    pub fn prune_replica(&self, key: &ReplicaKey) -> Result<(), JournalError> {
        self.change(|| {
            self.insert(Tree::Pruned, &key.bytes(), &[])?;
            self.trim(Tree::Pruned, MAX_PRUNED_KEYS)?;
            self.remove(Tree::Replicas, &key.bytes())
        })
    }

    /// Whether this replica finished here and its record was pruned.
    pub fn was_pruned(&self, key: &ReplicaKey) -> Result<bool, JournalError> {
        Ok(self.get(Tree::Pruned, &key.bytes())?.is_some())
    }

    pub fn remove_replica(&self, key: &ReplicaKey) -> Result<(), JournalError> {
        self.change(|| self.remove(Tree::Replicas, &key.bytes()))
    }

    /// Appends an observation. Past `MAX_PENDING_OBSERVATIONS` the oldest progress note
    /// (`Checkpointed`, which a later one supersedes) goes, and a new progress note is not
    /// kept when none can go. Exits, stops and unkillable processes are never dropped: one
    /// lost leaves its job Running for good. They are bounded without that: the same one is
    /// kept once, there is one per replica the node ran, and nothing starts once the lease
    /// ran out (so while no leader takes reports, the replicas do not grow).
    pub fn push_observation(&self, obs: &Observation) -> Result<(), JournalError> {
        self.change(|| self.push_unflushed(obs))
    }

    fn push_unflushed(&self, obs: &Observation) -> Result<(), JournalError> {
        let progress = is_progress(obs);
        if !progress && self.pending(usize::MAX)?.iter().any(|(_, o)| o == obs) {
            return Ok(());
        }
        if self.len(Tree::Pending)? >= MAX_PENDING_OBSERVATIONS {
            let oldest_note = self.pending(usize::MAX)?.into_iter().find(|(_, o)| is_progress(o)).map(|(seq, _)| seq);
            match oldest_note {
                Some(seq) => {
                    self.remove(Tree::Pending, &seq.to_be_bytes())?;
                    tracing::warn!(
                        "more than {MAX_PENDING_OBSERVATIONS} unacknowledged observations; dropped the oldest checkpoint note"
                    );
                }
                None if progress => {
                    tracing::warn!(
                        "more than {MAX_PENDING_OBSERVATIONS} unacknowledged observations; a checkpoint note is not kept"
                    );
                    return Ok(());
                }
                None => {}
            }
        }
        let next = match self.store.last(Tree::Pending).map_err(|e| self.io(e))? {
            Some((k, _)) => seq_of(&k).map_err(|d| self.corrupt("observation key", d))? + 1,
            None => 1,
        };
        self.insert(Tree::Pending, &next.to_be_bytes(), &obs.encode_to_vec())
    }

    /// Up to `limit` unacknowledged observations, oldest first, with their sequence numbers.
    pub fn pending(&self, limit: usize) -> Result<Vec<(u64, Observation)>, JournalError> {
        let mut out = Vec::new();
        for (k, v) in self.store.scan(Tree::Pending, limit).map_err(|e| self.io(e))? {
            let seq = seq_of(&k).map_err(|d| self.corrupt("observation key", d))?;
            let obs = Observation::decode(v.as_slice()).map_err(|e| self.corrupt("observation", e))?;
            out.push((seq, obs));
        }
        Ok(out)
    }

    pub fn pending_len(&self) -> usize {
        self.len(Tree::Pending).unwrap_or(0)
    }

    /// Drops acknowledged observations.
    pub fn ack(&self, seqs: &[u64]) -> Result<(), JournalError> {
        if seqs.is_empty() {
            // Most heartbeats carry none: no sync for them.
            return Ok(());
        }
        self.change(|| {
            for seq in seqs {
                self.remove(Tree::Pending, &seq.to_be_bytes())?;
            }
            Ok(())
        })
    }
}

/// A note of progress a later one supersedes (may be dropped for room).
fn is_progress(obs: &Observation) -> bool {
    matches!(obs.what, Some(baton_proto::v1::observation::What::Checkpointed(_)))
}

fn seq_of(k: &[u8]) -> Result<u64, &'static str> {
    Ok(u64::from_be_bytes(k.try_into().map_err(|_| "not 8 bytes")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::v1::{Checkpointed, Exited, observation::What};

    fn exited(job_id: u64) -> Observation {
        Observation {
            what: Some(What::Exited(Exited { job_id, attempt: 1, rank: 0, exit_code: 0, reason: String::new() })),
        }
    }

    /// A record as journals before `newest_checkpoint_at_start_unix_ms` wrote it still reads
    /// (an agent upgraded while its replicas run re-adopts them).
    #[test]
    fn a_record_without_the_newest_checkpoint_at_its_start_reads_as_none() {
        let old = r#"{"key":{"job_id":1,"attempt":2,"rank":0},"job":"a","task":0,"replica":0,"pid":42,
            "start_time":7,"phase":"Running","stop":null,"kill_deadline_unix_ms":0,"outcome":null,
            "exit_file":"exit","gpus":[0],"started_unix_ms":1000}"#;
        let rec: ReplicaRecord = serde_json::from_str(old).unwrap();
        assert_eq!((rec.started_unix_ms, rec.newest_checkpoint_at_start_unix_ms), (1_000, None));
    }

    #[test]
    fn survives_reopen_and_acks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        {
            let j = Journal::open(&path).unwrap();
            assert_eq!(j.term().unwrap(), 0);
            assert_eq!(j.raise_term(7).unwrap(), 7);
            assert_eq!(j.raise_term(5).unwrap(), 7, "never lowered");
            j.set_max_attempt(3, 2).unwrap();
            j.push_observation(&exited(1)).unwrap();
            j.push_observation(&exited(2)).unwrap();
            let p = j.pending(10).unwrap();
            j.ack(&[p[0].0]).unwrap();
        }
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.term().unwrap(), 7);
        assert_eq!(j.max_attempt(3).unwrap(), Some(2));
        assert_eq!(j.max_attempt(4).unwrap(), None);
        let p = j.pending(10).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].1, exited(2));
        // New sequence numbers continue after the last one, never reusing an acked one.
        j.push_observation(&exited(3)).unwrap();
        assert!(j.pending(10).unwrap()[1].0 > p[0].0);
    }

    #[test]
    fn pending_is_bounded_dropping_progress_notes_first() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("journal")).unwrap();
        let ckpt =
            |job_id| Observation { what: Some(What::Checkpointed(Checkpointed { job_id, attempt: 1, rank: 0 })) };
        j.push_observation(&ckpt(9)).unwrap();
        for i in 0..MAX_PENDING_OBSERVATIONS as u64 - 1 {
            j.store.insert(Tree::Pending, &(i + 2).to_be_bytes(), &exited(i).encode_to_vec()).unwrap();
        }
        assert_eq!(j.pending_len(), MAX_PENDING_OBSERVATIONS);
        j.push_observation(&exited(99_998)).unwrap();
        assert_eq!(j.pending_len(), MAX_PENDING_OBSERVATIONS);
        let all = j.pending(usize::MAX).unwrap();
        assert!(all.iter().all(|(_, o)| *o != ckpt(9)), "the progress note went first");
        assert_eq!(all[0].1, exited(0));
        // With no progress note left, a new one is not kept.
        j.push_observation(&ckpt(10)).unwrap();
        assert_eq!(j.pending_len(), MAX_PENDING_OBSERVATIONS);
    }

    /// Issue 9, hole 8: an exit or a stop dropped for room strands its job as Running for
    /// good. They are never dropped (a repeated one is kept once, so they stay bounded by
    /// the replicas the node ran).
    #[test]
    fn exits_and_stops_are_never_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("journal")).unwrap();
        for i in 0..MAX_PENDING_OBSERVATIONS as u64 {
            j.store.insert(Tree::Pending, &(i + 1).to_be_bytes(), &exited(i).encode_to_vec()).unwrap();
        }
        j.push_observation(&exited(99_999)).unwrap();
        let all = j.pending(usize::MAX).unwrap();
        assert_eq!(all.len(), MAX_PENDING_OBSERVATIONS + 1);
        assert_eq!(all[0].1, exited(0), "the oldest exit is still there");
        assert_eq!(all.last().unwrap().1, exited(99_999));
        // The same fact told twice is kept once.
        j.push_observation(&exited(99_999)).unwrap();
        assert_eq!(j.pending_len(), MAX_PENDING_OBSERVATIONS + 1);
    }

    #[test]
    fn pruned_keys_are_remembered_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("journal")).unwrap();
        let key = |job_id| ReplicaKey { job_id, attempt: 1, rank: 0 };
        for id in 0..MAX_PRUNED_KEYS as u64 + 1 {
            j.store.insert(Tree::Pruned, &key(id).bytes(), &[]).unwrap();
        }
        j.prune_replica(&key(u64::MAX)).unwrap();
        assert!(j.was_pruned(&key(u64::MAX)).unwrap());
        assert_eq!(j.len(Tree::Pruned).unwrap(), MAX_PRUNED_KEYS);
        assert!(!j.was_pruned(&key(0)).unwrap() && !j.was_pruned(&key(1)).unwrap(), "the oldest go");
        assert!(j.was_pruned(&key(2)).unwrap());
    }

    #[test]
    fn unreadable_journal_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        std::fs::write(&path, b"not a directory").unwrap();
        let err = Journal::open(&path).err().expect("refused").to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
}
