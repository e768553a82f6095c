//! Ordered byte-keyed trees, on disk (sled) or in memory (tests, simulations): what the
//! record store sits on.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

use crate::error::AccountingError;

/// The trees of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tree {
    /// (end, seq) -> the record. Numbers follow end times (records are numbered in commit
    /// order, and the state's clock never goes back), so this is also number order.
    Records,
    /// (user, 0, end, seq) -> ().
    ByUser,
    /// (queue, 0, end, seq) -> ().
    ByQueue,
}

impl Tree {
    /// In the order a write applies them: the indexes before the record, which says it is
    /// whole; a crash between them leaves a record that is written again whole.
    const ALL: [Tree; 3] = [Tree::ByUser, Tree::ByQueue, Tree::Records];

    fn index(self) -> usize {
        match self {
            Tree::ByUser => 0,
            Tree::ByQueue => 1,
            Tree::Records => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tree::Records => "records",
            Tree::ByUser => "by_user",
            Tree::ByQueue => "by_queue",
        }
    }
}

/// One change: a put, or a removal (`None`).
pub(crate) type Change = (Tree, Vec<u8>, Option<Vec<u8>>);

/// A key and its value.
pub(crate) type Pair = (Vec<u8>, Vec<u8>);

/// The in-memory trees.
type MemTrees = BTreeMap<Tree, BTreeMap<Vec<u8>, Vec<u8>>>;

pub(crate) enum Trees {
    Disk(RwLock<Option<Disk>>, PathBuf),
    Memory(RwLock<MemTrees>),
}

pub(crate) struct Disk {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    sync: baton_durable::DiskSync,
}

impl Disk {
    fn tree(&self, t: Tree) -> &sled::Tree {
        &self.trees[t.index()]
    }
}

/// How long opening waits for the directory's lock: a replica restarted in place may find
/// its predecessor's last handles still closing.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn open_waiting_for_lock(path: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        // Records are read by range; a large cache buys little.
        let config = sled::Config::new().path(path).mode(sled::Mode::HighThroughput).cache_capacity(64 << 20);
        match config.open() {
            Err(sled::Error::Io(io))
                if (io.kind() == std::io::ErrorKind::WouldBlock
                    || io.to_string().contains("could not acquire lock"))
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

impl Trees {
    pub(crate) fn open(path: &Path) -> Result<Trees, AccountingError> {
        let err = |e: String| AccountingError::Storage { location: path.display().to_string(), message: e };
        let db = open_waiting_for_lock(path).map_err(|e| err(format!("cannot open the accounting store: {e}")))?;
        let trees = Tree::ALL.iter().map(|t| db.open_tree(t.name())).collect::<Result<Vec<_>, _>>();
        let trees = trees.map_err(|e| err(e.to_string()))?;
        let sync = baton_durable::DiskSync::open(path).map_err(|e| err(e.to_string()))?;
        Ok(Trees::Disk(RwLock::new(Some(Disk { db, trees, sync })), path.to_path_buf()))
    }

    pub(crate) fn memory() -> Trees {
        Trees::Memory(RwLock::new(Tree::ALL.iter().map(|t| (*t, BTreeMap::new())).collect()))
    }

    pub(crate) fn location(&self) -> String {
        match self {
            Trees::Disk(_, path) => path.display().to_string(),
            Trees::Memory(_) => "memory".into(),
        }
    }

    fn failed(&self, e: impl std::fmt::Display) -> AccountingError {
        AccountingError::Storage { location: self.location(), message: e.to_string() }
    }

    fn with_disk<T>(&self, f: impl FnOnce(&Disk) -> Result<T, sled::Error>) -> Result<T, AccountingError> {
        let Trees::Disk(open, _) = self else { unreachable!("called for a disk store") };
        let guard = open.read().unwrap_or_else(PoisonError::into_inner);
        let disk = guard.as_ref().ok_or_else(|| self.failed("the accounting store is closed"))?;
        f(disk).map_err(|e| self.failed(e))
    }

    pub(crate) fn get(&self, t: Tree, key: &[u8]) -> Result<Option<Vec<u8>>, AccountingError> {
        match self {
            Trees::Disk(..) => self.with_disk(|d| Ok(d.tree(t).get(key)?.map(|v| v.to_vec()))),
            Trees::Memory(m) => Ok(m.read().unwrap_or_else(PoisonError::into_inner)[&t].get(key).cloned()),
        }
    }

    /// Applies the changes, tree by tree, each tree's atomically.
    pub(crate) fn apply(&self, changes: Vec<Change>) -> Result<(), AccountingError> {
        match self {
            Trees::Disk(..) => self.with_disk(|d| {
                for t in Tree::ALL {
                    let mut batch = sled::Batch::default();
                    let mut any = false;
                    for (_, k, v) in changes.iter().filter(|c| c.0 == t) {
                        any = true;
                        match v {
                            Some(v) => batch.insert(k.as_slice(), v.as_slice()),
                            None => batch.remove(k.as_slice()),
                        }
                    }
                    if any {
                        d.tree(t).apply_batch(batch)?;
                    }
                }
                Ok(())
            }),
            Trees::Memory(m) => {
                let mut m = m.write().unwrap_or_else(PoisonError::into_inner);
                for (t, k, v) in changes {
                    let tree = m.get_mut(&t).expect("every tree exists");
                    match v {
                        Some(v) => tree.insert(k, v),
                        None => tree.remove(&k),
                    };
                }
                Ok(())
            }
        }
    }

    /// At most `limit` entries with keys from `from` (inclusive) to `to` (exclusive), in
    /// key order, or newest first when `rev`.
    pub(crate) fn range(
        &self,
        t: Tree,
        from: &[u8],
        to: &[u8],
        rev: bool,
        limit: usize,
    ) -> Result<Vec<Pair>, AccountingError> {
        if from >= to {
            return Ok(Vec::new());
        }
        match self {
            Trees::Disk(..) => self.with_disk(|d| {
                let range = d.tree(t).range(from..to);
                let pair = |r: Result<(sled::IVec, sled::IVec), sled::Error>| r.map(|(k, v)| (k.to_vec(), v.to_vec()));
                if rev { range.rev().take(limit).map(pair).collect() } else { range.take(limit).map(pair).collect() }
            }),
            Trees::Memory(m) => {
                let m = m.read().unwrap_or_else(PoisonError::into_inner);
                let range = m[&t].range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)));
                let pair = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
                Ok(if rev {
                    range.rev().take(limit).map(pair).collect()
                } else {
                    range.take(limit).map(pair).collect()
                })
            }
        }
    }

    /// The greatest key of tree `t`.
    pub(crate) fn last_key(&self, t: Tree) -> Result<Option<Vec<u8>>, AccountingError> {
        match self {
            Trees::Disk(..) => self.with_disk(|d| Ok(d.tree(t).last()?.map(|(k, _)| k.to_vec()))),
            Trees::Memory(m) => {
                Ok(m.read().unwrap_or_else(PoisonError::into_inner)[&t].last_key_value().map(|(k, _)| k.clone()))
            }
        }
    }

    /// The least key of tree `t`.
    pub(crate) fn first_key(&self, t: Tree) -> Result<Option<Vec<u8>>, AccountingError> {
        match self {
            Trees::Disk(..) => self.with_disk(|d| Ok(d.tree(t).first()?.map(|(k, _)| k.to_vec()))),
            Trees::Memory(m) => {
                Ok(m.read().unwrap_or_else(PoisonError::into_inner)[&t].first_key_value().map(|(k, _)| k.clone()))
            }
        }
    }

    pub(crate) fn len(&self, t: Tree) -> Result<usize, AccountingError> {
        match self {
            Trees::Disk(..) => self.with_disk(|d| Ok(d.tree(t).len())),
            Trees::Memory(m) => Ok(m.read().unwrap_or_else(PoisonError::into_inner)[&t].len()),
        }
    }

    /// Makes every earlier write durable (on disk: flushed and synced).
    pub(crate) fn flush(&self) -> Result<(), AccountingError> {
        if let Trees::Disk(..) = self {
            self.with_disk(|d| d.db.flush().map(|_| ()))?;
            let Trees::Disk(open, _) = self else { unreachable!() };
            let guard = open.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(d) = guard.as_ref() {
                d.sync.sync().map_err(|e| self.failed(e))?;
            }
        }
        Ok(())
    }

    /// Flushes and releases the files, so the same directory can be opened again in this
    /// process. Later calls fail.
    pub(crate) fn close(&self) -> Result<(), AccountingError> {
        self.flush()?;
        if let Trees::Disk(open, _) = self {
            open.write().unwrap_or_else(PoisonError::into_inner).take();
        }
        Ok(())
    }
}
