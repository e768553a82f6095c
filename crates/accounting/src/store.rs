//! The record store: records by end time, indexed by user and by queue, written
//! idempotently by number.

use std::path::Path;

use baton_model::accounting::AttemptRecord;

use crate::error::AccountingError;
use crate::query::{By, MAX_PAGE, Page, Query, Series, Total, Totals};
use crate::trees::{Change, Tree, Trees};

/// Keys read from an index per step of a query.
const STEP: usize = 512;

/// A replica's accounting store.
pub struct RecordStore {
    trees: Trees,
}

fn end_seq(end_ms: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&end_ms.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// An index key: the name, a 0 byte (names hold none), then end and number.
fn index_key(name: &str, end_ms: u64, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 17);
    k.extend_from_slice(name.as_bytes());
    k.push(0);
    k.extend_from_slice(&end_seq(end_ms, seq));
    k
}

fn encode(r: &AttemptRecord) -> Result<Vec<u8>, AccountingError> {
    bincode::serde::encode_to_vec(r, bincode::config::standard()).map_err(|e| AccountingError::Corrupt(e.to_string()))
}

fn decode(bytes: &[u8]) -> Result<AttemptRecord, AccountingError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(r, _)| r)
        .map_err(|e| AccountingError::Corrupt(format!("a record does not decode: {e}")))
}

impl RecordStore {
    /// Opens (or creates) the store in directory `path`.
    pub fn open(path: &Path) -> Result<RecordStore, AccountingError> {
        Ok(RecordStore { trees: Trees::open(path)? })
    }

    /// A store that lives in memory only.
    pub fn memory() -> RecordStore {
        RecordStore { trees: Trees::memory() }
    }

    pub fn location(&self) -> String {
        self.trees.location()
    }

    /// Writes the records not written yet; one written before is left as it is.
    pub fn put<'a>(&self, records: impl IntoIterator<Item = &'a AttemptRecord>) -> Result<usize, AccountingError> {
        let mut changes: Vec<Change> = Vec::new();
        let mut written = 0;
        for r in records {
            let at = end_seq(r.end_ms, r.seq);
            if self.trees.get(Tree::Records, &at)?.is_some() {
                continue;
            }
            changes.push((Tree::ByUser, index_key(&r.user, r.end_ms, r.seq), Some(Vec::new())));
            changes.push((Tree::ByQueue, index_key(&r.queue, r.end_ms, r.seq), Some(Vec::new())));
            changes.push((Tree::Records, at.to_vec(), Some(encode(r)?)));
            written += 1;
        }
        if !changes.is_empty() {
            self.trees.apply(changes)?;
        }
        Ok(written)
    }

    /// Up to `limit` records numbered above `seq`, in number order (an exporter's next
    /// batch); `end_ms` is when record `seq` ended (0 when not known: from the oldest).
    pub fn after(&self, end_ms: u64, seq: u64, limit: usize) -> Result<Vec<AttemptRecord>, AccountingError> {
        // A record numbered above `seq` ended at `end_ms` or later (numbers follow end times).
        let from = end_seq(end_ms, seq.saturating_add(1));
        let found = self.trees.range(Tree::Records, &from, &[0xff; 17], false, limit)?;
        found.iter().map(|(_, v)| decode(v)).filter(|r| r.as_ref().map_or(true, |r| r.seq > seq)).collect()
    }

    /// The greatest record number written.
    pub fn newest_seq(&self) -> Result<u64, AccountingError> {
        // The last record by end time is the last by number.
        let key = self.trees.last_key(Tree::Records)?;
        Ok(key.and_then(|k| k.get(8..16).and_then(|b| b.try_into().ok())).map_or(0, u64::from_be_bytes))
    }

    /// When the oldest record held ended (`None`: none held).
    pub fn oldest_end_ms(&self) -> Result<Option<u64>, AccountingError> {
        let key = self.trees.first_key(Tree::Records)?;
        Ok(key.and_then(|k| k.get(..8).and_then(|b| b.try_into().ok())).map(u64::from_be_bytes))
    }

    /// Records held: a pass over them all (sled counts by iterating); for tests and tools.
    pub fn len(&self) -> Result<usize, AccountingError> {
        self.trees.len(Tree::Records)
    }

    pub fn is_empty(&self) -> Result<bool, AccountingError> {
        Ok(self.len()? == 0)
    }

    /// The newest `q.limit` records `q` matches that `allow` lets through, oldest first.
    pub fn query(&self, q: &Query, allow: impl Fn(&AttemptRecord) -> bool) -> Result<Page, AccountingError> {
        q.check()?;
        let limit = q.limit.min(MAX_PAGE);
        let mut found = Vec::new();
        let mut more = false;
        self.scan_newest_first(q, |r| {
            if !(q.matches(&r) && allow(&r)) {
                return true;
            }
            if found.len() == limit {
                more = true;
                return false;
            }
            found.push(r);
            true
        })?;
        found.reverse();
        Ok(Page { records: found, more })
    }

    /// Calls `each` with the records `q`'s user, queue and times select, newest first,
    /// through the narrowest index, until it returns false.
    fn scan_newest_first(&self, q: &Query, mut each: impl FnMut(AttemptRecord) -> bool) -> Result<(), AccountingError> {
        let (tree, from, mut to) = match (&q.user, &q.queue) {
            (Some(u), _) => (Tree::ByUser, index_key(u, q.since_ms, 0), index_key(u, q.until_ms, 0)),
            (None, Some(queue)) => (Tree::ByQueue, index_key(queue, q.since_ms, 0), index_key(queue, q.until_ms, 0)),
            (None, None) => (Tree::Records, end_seq(q.since_ms, 0).to_vec(), end_seq(q.until_ms, 0).to_vec()),
        };
        loop {
            let step = self.trees.range(tree, &from, &to, true, STEP)?;
            let Some((last, _)) = step.last() else { return Ok(()) };
            to = last.clone();
            for (k, v) in step {
                let record = if tree == Tree::Records {
                    decode(&v)?
                } else {
                    // A key without its record is a write cut short; it is written again whole.
                    match self.trees.get(Tree::Records, &k[k.len() - 16..])? {
                        Some(v) => decode(&v)?,
                        None => continue,
                    }
                };
                if !each(record) {
                    return Ok(());
                }
            }
        }
    }

    /// Calls `each` with every record that ended from `since_ms` on (any attempt that may
    /// overlap a window starting there) that `allow` lets through.
    fn each_since(
        &self,
        since_ms: u64,
        allow: impl Fn(&AttemptRecord) -> bool,
        mut each: impl FnMut(&AttemptRecord),
    ) -> Result<(), AccountingError> {
        let q = Query { since_ms, until_ms: u64::MAX, ..Query::default() };
        self.scan_newest_first(&q, |r| {
            if allow(&r) {
                each(&r);
            }
            true
        })
    }

    /// Adds the ended attempts that ran within `totals`' window and that `allow` lets
    /// through.
    pub fn add_totals(&self, t: &mut Totals, allow: impl Fn(&AttemptRecord) -> bool) -> Result<(), AccountingError> {
        self.each_since(t.since_ms(), allow, |r| t.add(r))
    }

    /// Adds the ended attempts that ran within `series`' window and that `allow` lets
    /// through.
    pub fn add_series(&self, s: &mut Series, allow: impl Fn(&AttemptRecord) -> bool) -> Result<(), AccountingError> {
        self.each_since(s.since_ms(), allow, |r| s.add(r))
    }

    /// GPU time and attempts per user, queue or pool within `[since_ms, until_ms)` (each
    /// attempt's part of it), of the ended attempts `allow` lets through.
    pub fn totals(
        &self,
        by: By,
        since_ms: u64,
        until_ms: u64,
        allow: impl Fn(&AttemptRecord) -> bool,
    ) -> Result<Vec<Total>, AccountingError> {
        let mut t = Totals::new(by, since_ms, until_ms);
        self.add_totals(&mut t, allow)?;
        Ok(t.finish())
    }

    /// Removes up to `max` records that ended before `before_ms`; how many it removed.
    pub fn prune(&self, before_ms: u64, max: usize) -> Result<usize, AccountingError> {
        let old = self.trees.range(Tree::Records, &end_seq(0, 0), &end_seq(before_ms, 0), false, max)?;
        let mut changes: Vec<Change> = Vec::new();
        for (k, v) in &old {
            let r = decode(v)?;
            // Applied indexes first (`Trees::apply`): a removal cut short leaves the record,
            // which the next prune removes again.
            changes.push((Tree::Records, k.clone(), None));
            changes.push((Tree::ByUser, index_key(&r.user, r.end_ms, r.seq), None));
            changes.push((Tree::ByQueue, index_key(&r.queue, r.end_ms, r.seq), None));
        }
        if !changes.is_empty() {
            self.trees.apply(changes)?;
        }
        Ok(old.len())
    }

    /// Makes every record written so far durable.
    pub fn flush(&self) -> Result<(), AccountingError> {
        self.trees.flush()
    }

    /// Flushes and releases the files; later calls fail.
    pub fn close(&self) -> Result<(), AccountingError> {
        self.trees.close()
    }
}
