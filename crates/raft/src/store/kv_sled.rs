//! The on-disk [`KvStore`]: one sled database with a tree per key space.
//!
//! Keys are big-endian so that sled's byte order is numeric order. sled syncs to disk only
//! every 500 ms by itself; [`KvStore::flush`] forces it, and the log store calls it before it
//! acknowledges an entry.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::kv::{KvError, KvStore, Space, Write};

pub struct SledKv {
    db: sled::Db,
    trees: [sled::Tree; 3],
    path: PathBuf,
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

impl SledKv {
    /// Opens (or creates) the database directory at `path`.
    pub fn open(path: &Path) -> Result<SledKv, KvError> {
        let err = |e: sled::Error| KvError {
            location: path.display().to_string(),
            message: format!("cannot open sled database: {e}"),
        };
        let db = sled::Config::new()
            .path(path)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(err)?;
        let tree = |s: Space| db.open_tree(s.name()).map_err(err);
        let trees = [
            tree(Space::Log)?,
            tree(Space::Meta)?,
            tree(Space::Snapshot)?,
        ];
        Ok(SledKv {
            db,
            trees,
            path: path.to_path_buf(),
        })
    }

    fn tree(&self, space: Space) -> &sled::Tree {
        match space {
            Space::Log => &self.trees[0],
            Space::Meta => &self.trees[1],
            Space::Snapshot => &self.trees[2],
        }
    }

    fn fail(&self, space: Space, what: &str, e: impl std::fmt::Display) -> KvError {
        KvError {
            location: self.location(space),
            message: format!("{what}: {e}"),
        }
    }

    fn decode_key(&self, space: Space, k: &[u8]) -> Result<u64, KvError> {
        let bytes: [u8; 8] = k
            .try_into()
            .map_err(|_| self.fail(space, "bad key", format!("{} bytes, expected 8", k.len())))?;
        Ok(u64::from_be_bytes(bytes))
    }
}

impl KvStore for SledKv {
    fn get(&self, space: Space, k: u64) -> Result<Option<Vec<u8>>, KvError> {
        self.tree(space)
            .get(key(k))
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| self.fail(space, "read", e))
    }

    fn scan(
        &self,
        space: Space,
        keys: Range<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
        if keys.start >= keys.end {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for item in self
            .tree(space)
            .range(key(keys.start)..key(keys.end))
            .take(limit)
        {
            let (k, v) = item.map_err(|e| self.fail(space, "scan", e))?;
            out.push((self.decode_key(space, &k)?, v.to_vec()));
        }
        Ok(out)
    }

    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
        match self
            .tree(space)
            .last()
            .map_err(|e| self.fail(space, "read", e))?
        {
            Some((k, v)) => Ok(Some((self.decode_key(space, &k)?, v.to_vec()))),
            None => Ok(None),
        }
    }

    fn write(&self, batch: Vec<Write>) -> Result<(), KvError> {
        // Consecutive writes to one space go into one atomic sled batch.
        let mut current: Option<(Space, sled::Batch)> = None;
        let commit = |pending: Option<(Space, sled::Batch)>| -> Result<(), KvError> {
            if let Some((space, b)) = pending {
                self.tree(space)
                    .apply_batch(b)
                    .map_err(|e| self.fail(space, "write", e))?;
            }
            Ok(())
        };
        for w in batch {
            let space = match &w {
                Write::Put(s, _, _) | Write::Remove(s, _) => *s,
            };
            if current.as_ref().map(|(s, _)| *s) != Some(space) {
                commit(current.take())?;
                current = Some((space, sled::Batch::default()));
            }
            let b = &mut current.as_mut().expect("set just above").1;
            match w {
                Write::Put(_, k, v) => b.insert(&key(k), v),
                Write::Remove(_, keys) => {
                    if keys.start >= keys.end {
                        continue;
                    }
                    for item in self.tree(space).range(key(keys.start)..key(keys.end)) {
                        let (k, _) = item.map_err(|e| self.fail(space, "scan", e))?;
                        b.remove(k);
                    }
                }
            }
        }
        commit(current)
    }

    fn flush(&self) -> Result<(), KvError> {
        self.db.flush().map(|_| ()).map_err(|e| KvError {
            location: self.path.display().to_string(),
            message: format!("flush: {e}"),
        })
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn location(&self, space: Space) -> String {
        format!("{} (tree {})", self.path.display(), space.name())
    }
}
