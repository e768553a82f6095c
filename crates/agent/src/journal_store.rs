//! Where the journal's records live: the small [`JournalStore`] trait, sled on disk
//! ([`SledStore`]), and [`SimDisk`], a simulated disk for tests that loses what was not synced
//! at a power cut, fails writes with an OS error (a full disk, EIO) or syncs slowly.
//!
//! Writes are visible at once and durable only after [`JournalStore::flush`], which reaches
//! stable storage: for sled, its own flush (`sync_file_range` on Linux, no device cache
//! flush, no metadata) is followed by `fdatasync` on its files (`baton_durable::DiskSync`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use baton_durable::DiskSync;

use crate::limits::{JOURNAL_LOCK_RETRY_MS as LOCK_RETRY_MS, JOURNAL_LOCK_TRIES as LOCK_TRIES};

/// A key space of the journal. Each is ordered by key bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tree {
    /// The highest term and the leader first obeyed in it.
    Meta,
    /// The highest attempt per job.
    Attempts,
    /// Every replica started here.
    Replicas,
    /// Observations the leader has not acknowledged.
    Pending,
    /// Keys of finished replicas whose records were dropped.
    Pruned,
}

impl Tree {
    pub const ALL: [Tree; 5] = [Tree::Meta, Tree::Attempts, Tree::Replicas, Tree::Pending, Tree::Pruned];

    pub fn name(self) -> &'static str {
        match self {
            Tree::Meta => "meta",
            Tree::Attempts => "attempts",
            Tree::Replicas => "replicas",
            Tree::Pending => "pending",
            Tree::Pruned => "pruned",
        }
    }
}

/// A storage failure; the journal adds its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

impl StoreError {
    fn from(e: impl std::fmt::Display) -> StoreError {
        StoreError(e.to_string())
    }
}

/// A key and its value.
pub type Record = (Vec<u8>, Vec<u8>);
pub type Records = Vec<Record>;

/// Ordered records in a few trees. Shared by the supervisor and the reporter: `&self`.
pub trait JournalStore: Send + Sync + 'static {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    fn insert(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    fn remove(&self, tree: Tree, key: &[u8]) -> Result<(), StoreError>;
    /// Up to `limit` records in key order.
    fn scan(&self, tree: Tree, limit: usize) -> Result<Records, StoreError>;
    /// The record with the greatest key.
    fn last(&self, tree: Tree) -> Result<Option<Record>, StoreError>;
    fn len(&self, tree: Tree) -> Result<usize, StoreError>;
    /// Puts every earlier write on stable storage.
    fn flush(&self) -> Result<(), StoreError>;
    /// Starts again from what the disk holds, after a failure: sled refuses every operation
    /// once a write of its failed, until it is opened again.
    fn reopen(&self) -> Result<(), StoreError>;
}

struct SledOpen {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    sync: DiskSync,
}

/// The journal on disk: a sled database directory.
pub struct SledStore {
    path: PathBuf,
    open: RwLock<Option<SledOpen>>,
}

impl SledStore {
    pub fn open(path: &Path) -> Result<SledStore, StoreError> {
        let open = open_sled(path)?;
        Ok(SledStore { path: path.to_path_buf(), open: RwLock::new(Some(open)) })
    }

    /// The syncs issued since the store was last opened.
    pub fn sync_counts(&self) -> Result<baton_durable::SyncCounts, StoreError> {
        self.with(|o| Ok(o.sync.counts()))
    }

    fn with<T>(&self, f: impl FnOnce(&SledOpen) -> Result<T, sled::Error>) -> Result<T, StoreError> {
        let g = self.open.read().unwrap_or_else(PoisonError::into_inner);
        let open = g.as_ref().ok_or_else(|| StoreError("the journal is closed after a failed reopen".into()))?;
        f(open).map_err(StoreError::from)
    }

    fn tree(open: &SledOpen, tree: Tree) -> &sled::Tree {
        &open.trees[tree as usize]
    }
}

fn open_sled(path: &Path) -> Result<SledOpen, StoreError> {
    let db = open_db(path).map_err(StoreError::from)?;
    let trees =
        Tree::ALL.iter().map(|t| db.open_tree(t.name())).collect::<Result<Vec<_>, _>>().map_err(StoreError::from)?;
    let sync = DiskSync::open(path).map_err(StoreError::from)?;
    Ok(SledOpen { db, trees, sync })
}

/// Opens the database, waiting a bounded time for its file lock: a previous holder (an agent
/// that is still exiting, or a handle just dropped whose flusher thread has not ended) keeps
/// the lock for a moment after it is done with it.
fn open_db(path: &Path) -> Result<sled::Db, sled::Error> {
    let mut tries = 0;
    loop {
        match sled::Config::new().path(path).open() {
            // sled 0.34 reports a held lock only in the message of an `Other` I/O error.
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") && tries < LOCK_TRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(LOCK_RETRY_MS));
            }
            other => return other,
        }
    }
}

impl JournalStore for SledStore {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.with(|o| Ok(Self::tree(o, tree).get(key)?.map(|v| v.to_vec())))
    }

    fn insert(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.with(|o| Self::tree(o, tree).insert(key, value).map(drop))
    }

    fn remove(&self, tree: Tree, key: &[u8]) -> Result<(), StoreError> {
        self.with(|o| Self::tree(o, tree).remove(key).map(drop))
    }

    fn scan(&self, tree: Tree, limit: usize) -> Result<Records, StoreError> {
        self.with(|o| {
            Self::tree(o, tree).iter().take(limit).map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec()))).collect()
        })
    }

    fn last(&self, tree: Tree) -> Result<Option<Record>, StoreError> {
        self.with(|o| Ok(Self::tree(o, tree).last()?.map(|(k, v)| (k.to_vec(), v.to_vec()))))
    }

    fn len(&self, tree: Tree) -> Result<usize, StoreError> {
        self.with(|o| Ok(Self::tree(o, tree).len()))
    }

    fn flush(&self) -> Result<(), StoreError> {
        let g = self.open.read().unwrap_or_else(PoisonError::into_inner);
        let open = g.as_ref().ok_or_else(|| StoreError("the journal is closed after a failed reopen".into()))?;
        open.db.flush().map_err(StoreError::from)?;
        open.sync.sync().map_err(StoreError::from)
    }

    fn reopen(&self) -> Result<(), StoreError> {
        let mut g = self.open.write().unwrap_or_else(PoisonError::into_inner);
        // The old handles go first: they hold the directory's lock.
        drop(g.take());
        *g = Some(open_sled(&self.path)?);
        Ok(())
    }
}

type SimRecords = BTreeMap<(Tree, Vec<u8>), Vec<u8>>;

#[derive(Debug, Clone)]
enum SimWrite {
    Insert(Tree, Vec<u8>, Vec<u8>),
    Remove(Tree, Vec<u8>),
}

#[derive(Default)]
struct Sim {
    /// What a power cut keeps.
    synced: SimRecords,
    /// What readers see: `synced` with every write in `unsynced` applied.
    visible: SimRecords,
    /// Writes since the last flush, oldest first.
    unsynced: Vec<SimWrite>,
    /// Bumped at every power cut; handles of an older life fail.
    life: u64,
    /// The OS error every write and flush fails with while set.
    fault: Option<i32>,
    /// A write or flush failed since the last reopen: like sled, every later write fails.
    poisoned: bool,
    /// How long each flush takes.
    flush_delay: Duration,
    /// Writes and flushes left before the power goes out (`None`: it stays on).
    power_left: Option<u64>,
    flushes: u64,
}

fn apply(records: &mut SimRecords, w: &SimWrite) {
    match w {
        SimWrite::Insert(t, k, v) => {
            records.insert((*t, k.clone()), v.clone());
        }
        SimWrite::Remove(t, k) => {
            records.remove(&(*t, k.clone()));
        }
    }
}

/// A simulated disk for tests, shared by every life of one agent. A power cut keeps what was
/// flushed and a prefix of the rest (the order in which a log-structured store such as sled
/// writes it; a torn record fails its checksum and counts as lost). Writes and flushes can be
/// made to fail with an OS error, and flushes to take a while.
#[derive(Clone, Default)]
pub struct SimDisk {
    sim: Arc<Mutex<Sim>>,
}

/// A handle on a [`SimDisk`] for one life of an agent.
pub struct SimStore {
    disk: SimDisk,
    life: u64,
}

impl SimDisk {
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    fn lock(&self) -> MutexGuard<'_, Sim> {
        // Every change below completes or leaves the maps as they were.
        self.sim.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A handle for the next life of the agent.
    pub fn open(&self) -> SimStore {
        SimStore { disk: self.clone(), life: self.lock().life }
    }

    /// Cuts the power: keeps what was flushed and the first `random % (unsynced + 1)`
    /// unflushed writes, and ends the current life. Returns how many unflushed writes were
    /// lost.
    pub fn power_loss(&self, random: u64) -> usize {
        let mut s = self.lock();
        let unsynced = std::mem::take(&mut s.unsynced);
        let keep = usize::try_from(random % (unsynced.len() as u64 + 1)).expect("at most the write count");
        for w in &unsynced[..keep] {
            apply(&mut s.synced, w);
        }
        s.visible = s.synced.clone();
        s.life += 1;
        s.poisoned = false;
        s.power_left = None;
        unsynced.len() - keep
    }

    /// The power goes out after `ops` more writes and flushes: every later one fails, as if
    /// the agent had died there; [`SimDisk::power_loss`] then decides what the disk kept.
    pub fn power_out_after(&self, ops: u64) {
        self.lock().power_left = Some(ops);
    }

    /// Every write and flush fails with this OS error from now on (`None`: the disk works).
    pub fn set_fault(&self, os_error: Option<i32>) {
        self.lock().fault = os_error;
    }

    /// Every flush takes this long from now on.
    pub fn set_flush_delay(&self, delay: Duration) {
        self.lock().flush_delay = delay;
    }

    /// Flushes that succeeded, over every life.
    pub fn flushes(&self) -> u64 {
        self.lock().flushes
    }
}

impl SimStore {
    fn live(&self) -> Result<MutexGuard<'_, Sim>, StoreError> {
        let s = self.disk.lock();
        if s.life != self.life {
            return Err(StoreError("the power was cut: this handle belongs to an earlier life".into()));
        }
        Ok(s)
    }

    fn write(&self, w: SimWrite) -> Result<(), StoreError> {
        let mut s = self.live()?;
        check_fault(&mut s)?;
        apply(&mut s.visible, &w);
        s.unsynced.push(w);
        Ok(())
    }
}

fn check_fault(s: &mut Sim) -> Result<(), StoreError> {
    match s.power_left {
        Some(0) => return Err(StoreError("the power is out".into())),
        Some(n) => s.power_left = Some(n - 1),
        None => {}
    }
    if let Some(code) = s.fault {
        s.poisoned = true;
        return Err(StoreError::from(std::io::Error::from_raw_os_error(code)));
    }
    if s.poisoned {
        return Err(StoreError("an earlier write failed; the store must be reopened".into()));
    }
    Ok(())
}

impl JournalStore for SimStore {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.live()?.visible.get(&(tree, key.to_vec())).cloned())
    }

    fn insert(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.write(SimWrite::Insert(tree, key.to_vec(), value.to_vec()))
    }

    fn remove(&self, tree: Tree, key: &[u8]) -> Result<(), StoreError> {
        self.write(SimWrite::Remove(tree, key.to_vec()))
    }

    fn scan(&self, tree: Tree, limit: usize) -> Result<Records, StoreError> {
        let s = self.live()?;
        Ok(s.visible
            .range((tree, Vec::new())..)
            .take_while(|((t, _), _)| *t == tree)
            .take(limit)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }

    fn last(&self, tree: Tree) -> Result<Option<Record>, StoreError> {
        let s = self.live()?;
        Ok(s.visible
            .range((tree, Vec::new())..)
            .take_while(|((t, _), _)| *t == tree)
            .last()
            .map(|((_, k), v)| (k.clone(), v.clone())))
    }

    fn len(&self, tree: Tree) -> Result<usize, StoreError> {
        let s = self.live()?;
        Ok(s.visible.range((tree, Vec::new())..).take_while(|((t, _), _)| *t == tree).count())
    }

    fn flush(&self) -> Result<(), StoreError> {
        let delay = self.live()?.flush_delay;
        if !delay.is_zero() {
            // Outside the lock: a slow disk does not stop readers.
            std::thread::sleep(delay);
        }
        let mut s = self.live()?;
        check_fault(&mut s)?;
        let unsynced = std::mem::take(&mut s.unsynced);
        for w in &unsynced {
            apply(&mut s.synced, w);
        }
        s.flushes += 1;
        Ok(())
    }

    fn reopen(&self) -> Result<(), StoreError> {
        let mut s = self.live()?;
        if let Some(code) = s.fault {
            return Err(StoreError::from(std::io::Error::from_raw_os_error(code)));
        }
        // What never reached the disk is gone, as after sled is opened again.
        s.unsynced.clear();
        s.visible = s.synced.clone();
        s.poisoned = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(store: &SimStore) -> Vec<Vec<u8>> {
        store.scan(Tree::Pending, usize::MAX).unwrap().into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_power_cut_keeps_what_was_flushed_and_a_prefix_of_the_rest() {
        let disk = SimDisk::new();
        let store = disk.open();
        store.insert(Tree::Pending, b"1", b"a").unwrap();
        store.flush().unwrap();
        store.insert(Tree::Pending, b"2", b"b").unwrap();
        store.insert(Tree::Meta, b"term", b"c").unwrap();
        store.insert(Tree::Pending, b"3", b"d").unwrap();
        assert_eq!(disk.power_loss(1), 2, "three unflushed writes, the first kept");
        let next = disk.open();
        assert_eq!(keys(&next), vec![b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(next.get(Tree::Meta, b"term").unwrap(), None);
        assert!(store.get(Tree::Meta, b"term").is_err(), "the old life's handle is cut off");
    }

    #[test]
    fn a_failed_write_poisons_the_store_until_it_is_reopened() {
        let disk = SimDisk::new();
        let store = disk.open();
        store.insert(Tree::Meta, b"a", b"1").unwrap();
        disk.set_fault(Some(libc::ENOSPC));
        let err = store.flush().unwrap_err();
        assert!(err.0.contains("No space left"), "{err}");
        disk.set_fault(None);
        assert!(store.insert(Tree::Meta, b"b", b"2").is_err(), "still failing until reopened");
        store.reopen().unwrap();
        assert_eq!(store.get(Tree::Meta, b"a").unwrap(), None, "the unflushed write is gone");
        store.insert(Tree::Meta, b"b", b"2").unwrap();
        store.flush().unwrap();
    }

    #[test]
    fn sled_reopens_with_what_it_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("journal")).unwrap();
        store.insert(Tree::Replicas, b"k", b"v").unwrap();
        store.flush().unwrap();
        // sled's own flush is no fsync: the store's flush syncs its data file as well.
        assert_eq!(store.sync_counts().unwrap().data, 1);
        store.reopen().unwrap();
        assert_eq!(store.get(Tree::Replicas, b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(store.len(Tree::Replicas).unwrap(), 1);
        assert_eq!(store.len(Tree::Meta).unwrap(), 0);
    }
}
