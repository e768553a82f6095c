//! The on-disk [`KvStore`]: one sled database with a tree per key space.
//!
//! Keys are big-endian so that sled's byte order is numeric order. sled syncs to disk only
//! every 500 ms by itself, and its own flush is not an fsync; [`KvStore::flush`] flushes and
//! then syncs sled's files ([`DiskSync`]), and the log store calls it before it acknowledges
//! an entry or a vote.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use super::kv::{KvError, KvStore, Space, Write};
use baton_durable::{DiskSync, SyncCounts};

struct Open {
    db: sled::Db,
    trees: [sled::Tree; 3],
    disk: DiskSync,
}

pub struct SledKv {
    /// `None` once closed. Every operation holds the read lock, so `close` waits for them.
    open: RwLock<Option<Open>>,
    path: PathBuf,
}

struct Guard<'a>(RwLockReadGuard<'a, Option<Open>>);

impl Guard<'_> {
    fn open(&self) -> &Open {
        self.0.as_ref().expect("checked in SledKv::opened")
    }

    fn tree(&self, space: Space) -> &sled::Tree {
        let t = &self.open().trees;
        match space {
            Space::Log => &t[0],
            Space::Meta => &t[1],
            Space::Snapshot => &t[2],
        }
    }
}

/// Writes to one space on their way into one atomic sled batch.
///
/// A range remove is expanded into single-key removes: the keys stored in the tree and the
/// keys put earlier in this same batch, which the tree cannot show yet. Without the second
/// set, "append term-1 entries, truncate, append the term-2 entry" merged into one batch
/// would leave the term-1 tail on disk. A later put of a removed key wins, because sled's
/// batch keeps the last change per key.
struct Pending {
    space: Space,
    batch: sled::Batch,
    /// Keys put in this batch and not removed since.
    put: BTreeSet<u64>,
}

impl Pending {
    fn new(space: Space) -> Pending {
        Pending { space, batch: sled::Batch::default(), put: BTreeSet::new() }
    }

    fn put(&mut self, k: u64, v: &[u8]) {
        self.batch.insert(&key(k), v);
        self.put.insert(k);
    }

    fn remove(&mut self, keys: Range<u64>, stored: Vec<u64>) {
        if keys.start >= keys.end {
            return;
        }
        let queued: Vec<u64> = self.put.range(keys).copied().collect();
        for k in queued.iter().chain(stored.iter()) {
            self.batch.remove(&key(*k));
            self.put.remove(k);
        }
    }
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

/// How long opening waits for the directory's lock: a replica restarted in place may find
/// its predecessor's last handles still closing.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// sled reports a held lock as a plain I/O error whose text names it.
fn is_lock_held(io: &std::io::Error) -> bool {
    io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("could not acquire lock")
}

fn open_waiting_for_lock(path: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match sled::Config::new().path(path).mode(sled::Mode::HighThroughput).open() {
            Err(sled::Error::Io(io)) if is_lock_held(&io) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

impl SledKv {
    /// Opens (or creates) the database directory at `path`.
    pub fn open(path: &Path) -> Result<SledKv, KvError> {
        let err = |e: sled::Error| KvError {
            location: path.display().to_string(),
            message: format!("cannot open sled database: {e}"),
        };
        let db = open_waiting_for_lock(path).map_err(|e| match e {
            sled::Error::Io(io) if is_lock_held(&io) => KvError {
                location: path.display().to_string(),
                message: format!(
                    "another process holds this database ({io}); is another replica running with this data directory?"
                ),
            },
            e => err(e),
        })?;
        let tree = |s: Space| db.open_tree(s.name()).map_err(err);
        let trees = [tree(Space::Log)?, tree(Space::Meta)?, tree(Space::Snapshot)?];
        let disk = DiskSync::open(path)
            .map_err(|e| KvError { location: path.display().to_string(), message: e.to_string() })?;
        Ok(SledKv { open: RwLock::new(Some(Open { db, trees, disk })), path: path.to_path_buf() })
    }

    /// The syncs issued since the database was opened.
    pub fn sync_counts(&self) -> Result<SyncCounts, KvError> {
        Ok(self.opened()?.open().disk.counts())
    }

    fn opened(&self) -> Result<Guard<'_>, KvError> {
        let g = self.open.read().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            return Err(KvError {
                location: self.path.display().to_string(),
                message: "the database is closed".into(),
            });
        }
        Ok(Guard(g))
    }

    fn fail(&self, space: Space, what: &str, e: impl std::fmt::Display) -> KvError {
        KvError { location: self.location(space), message: format!("{what}: {e}") }
    }

    /// The stored keys in `keys` (not those only queued in a batch).
    fn keys_in(&self, g: &Guard<'_>, space: Space, keys: Range<u64>) -> Result<Vec<u64>, KvError> {
        if keys.start >= keys.end {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for item in g.tree(space).range(key(keys.start)..key(keys.end)) {
            let (k, _) = item.map_err(|e| self.fail(space, "scan", e))?;
            out.push(self.decode_key(space, &k)?);
        }
        Ok(out)
    }

    fn commit(&self, g: &Guard<'_>, pending: Pending) -> Result<(), KvError> {
        let space = pending.space;
        g.tree(space).apply_batch(pending.batch).map_err(|e| self.fail(space, "write", e))
    }

    /// sled's flush, then the syncs that make it reach stable storage (see [`DiskSync`]).
    fn sync(&self, open: &Open, what: &str) -> Result<(), KvError> {
        let fail = |message: String| KvError { location: self.path.display().to_string(), message };
        open.db.flush().map_err(|e| fail(format!("{what}: {e}")))?;
        open.disk.sync().map_err(|e| fail(format!("{what}: {e}")))
    }

    fn decode_key(&self, space: Space, k: &[u8]) -> Result<u64, KvError> {
        let bytes: [u8; 8] =
            k.try_into().map_err(|_| self.fail(space, "bad key", format!("{} bytes, expected 8", k.len())))?;
        Ok(u64::from_be_bytes(bytes))
    }
}

impl KvStore for SledKv {
    fn get(&self, space: Space, k: u64) -> Result<Option<Vec<u8>>, KvError> {
        self.opened()?.tree(space).get(key(k)).map(|v| v.map(|v| v.to_vec())).map_err(|e| self.fail(space, "read", e))
    }

    fn scan(&self, space: Space, keys: Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
        if keys.start >= keys.end {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let g = self.opened()?;
        for item in g.tree(space).range(key(keys.start)..key(keys.end)).take(limit) {
            let (k, v) = item.map_err(|e| self.fail(space, "scan", e))?;
            out.push((self.decode_key(space, &k)?, v.to_vec()));
        }
        Ok(out)
    }

    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
        match self.opened()?.tree(space).last().map_err(|e| self.fail(space, "read", e))? {
            Some((k, v)) => Ok(Some((self.decode_key(space, &k)?, v.to_vec()))),
            None => Ok(None),
        }
    }

    fn write(&self, batch: &[Write]) -> Result<(), KvError> {
        // Consecutive writes to one space go into one atomic sled batch, applied in order.
        let g = self.opened()?;
        let mut current: Option<Pending> = None;
        for w in batch {
            let space = match &w {
                Write::Put(s, _, _) | Write::Remove(s, _) => *s,
            };
            if current.as_ref().map(|p| p.space) != Some(space) {
                if let Some(p) = current.take() {
                    self.commit(&g, p)?;
                }
                current = Some(Pending::new(space));
            }
            let pending = current.as_mut().expect("set just above");
            match w {
                Write::Put(_, k, v) => pending.put(*k, v),
                Write::Remove(_, keys) => {
                    let stored = self.keys_in(&g, space, keys.clone())?;
                    pending.remove(keys.clone(), stored);
                }
            }
        }
        match current {
            Some(p) => self.commit(&g, p),
            None => Ok(()),
        }
    }

    fn flush(&self) -> Result<(), KvError> {
        let g = self.opened()?;
        self.sync(g.open(), "flush")
    }

    fn close(&self) -> Result<(), KvError> {
        let mut g = self.open.write().unwrap_or_else(PoisonError::into_inner);
        match g.take() {
            Some(open) => self.sync(&open, "flush on close"),
            None => Ok(()),
        }
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn location(&self, space: Space) -> String {
        format!("{} (tree {})", self.path.display(), space.name())
    }
}
