//! An in-memory [`KvStore`] for tests and simulations: nothing survives the process.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;

use super::kv::{KvError, KvStore, Space, Write};

#[derive(Debug, Default)]
pub struct MemKv {
    spaces: Mutex<BTreeMap<(Space, u64), Vec<u8>>>,
}

impl MemKv {
    pub fn new() -> MemKv {
        MemKv::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Space, u64), Vec<u8>>> {
        // A panic while holding the lock cannot leave a half-applied map behind: every
        // mutation below is a single insert or remove.
        self.spaces.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl KvStore for MemKv {
    fn get(&self, space: Space, key: u64) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.lock().get(&(space, key)).cloned())
    }

    fn scan(&self, space: Space, keys: Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
        if keys.start >= keys.end {
            return Ok(Vec::new());
        }
        Ok(self
            .lock()
            .range((space, keys.start)..(space, keys.end))
            .take(limit)
            .map(|((_, k), v)| (*k, v.clone()))
            .collect())
    }

    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
        Ok(self.lock().range((space, 0)..=(space, u64::MAX)).next_back().map(|((_, k), v)| (*k, v.clone())))
    }

    fn write(&self, batch: &[Write]) -> Result<(), KvError> {
        let mut map = self.lock();
        for w in batch {
            match w {
                Write::Put(space, key, value) => {
                    map.insert((*space, *key), value.clone());
                }
                Write::Remove(space, keys) => {
                    if keys.start >= keys.end {
                        continue;
                    }
                    let doomed: Vec<(Space, u64)> =
                        map.range((*space, keys.start)..(*space, keys.end)).map(|(k, _)| *k).collect();
                    for k in doomed {
                        map.remove(&k);
                    }
                }
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), KvError> {
        Ok(())
    }

    fn close(&self) -> Result<(), KvError> {
        Ok(())
    }

    fn is_durable(&self) -> bool {
        false
    }

    fn location(&self, space: Space) -> String {
        format!("memory ({})", space.name())
    }
}
