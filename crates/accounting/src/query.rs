//! What a query asks and what it answers: a page of records, or totals per user, queue or
//! pool.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::accounting::{AttemptRecord, Ending};
use serde::{Deserialize, Serialize};

use crate::error::AccountingError;

/// The most records one query answers: a page of about 3 MB, under the API's message
/// limit. Narrower times or `--limit` page through more.
pub const MAX_PAGE: usize = 10_000;

/// A query of the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub user: Option<String>,
    pub queue: Option<String>,
    /// Records that ended from `since_ms` (inclusive) to `until_ms` (exclusive).
    pub since_ms: u64,
    pub until_ms: u64,
    /// One of [`Ending::WORDS`].
    pub ending: Option<String>,
    /// At most this many (the newest), up to [`MAX_PAGE`].
    pub limit: usize,
}

impl Default for Query {
    fn default() -> Self {
        Query { user: None, queue: None, since_ms: 0, until_ms: u64::MAX, ending: None, limit: MAX_PAGE }
    }
}

impl Query {
    /// Refuses a reversed time range or an unknown ending, naming the flag.
    pub fn check(&self) -> Result<(), AccountingError> {
        if self.since_ms >= self.until_ms {
            return Err(AccountingError::Query(format!(
                "--since ({} ms) must be before --until ({} ms)",
                self.since_ms, self.until_ms
            )));
        }
        if let Some(e) = &self.ending
            && !Ending::WORDS.contains(&e.as_str())
        {
            return Err(AccountingError::Query(format!(
                "--state {e:?} is not a way an attempt ends; one of: {}",
                Ending::WORDS.join(", ")
            )));
        }
        Ok(())
    }

    pub(crate) fn matches(&self, r: &AttemptRecord) -> bool {
        self.user.as_ref().is_none_or(|u| *u == r.user)
            && self.queue.as_ref().is_none_or(|q| *q == r.queue)
            && (self.since_ms..self.until_ms).contains(&r.end_ms)
            && self.ending.as_ref().is_none_or(|e| e == r.ending.word())
    }
}

/// Records a query found, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub records: Vec<AttemptRecord>,
    /// More matched than the page holds (older ones were left out).
    pub more: bool,
}

/// What totals are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum By {
    User,
    Queue,
    Pool,
}

impl By {
    /// The word `--by` takes, and the API and the dashboard carry.
    pub fn word(self) -> &'static str {
        match self {
            By::User => "user",
            By::Queue => "queue",
            By::Pool => "pool",
        }
    }

    /// `user`, `queue` or `pool` (empty: `user`); otherwise why not, naming `--by`.
    pub fn from_word(word: &str) -> Result<By, AccountingError> {
        match word {
            "user" | "" => Ok(By::User),
            "queue" => Ok(By::Queue),
            "pool" => Ok(By::Pool),
            other => Err(AccountingError::Query(format!("--by {other:?}: one of user, queue, pool"))),
        }
    }

    pub fn key(self, r: &AttemptRecord) -> &str {
        match self {
            By::User => &r.user,
            By::Queue => &r.queue,
            By::Pool => &r.pool,
        }
    }
}

/// Totals of one user, queue or pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Total {
    pub key: String,
    /// GPU-milliseconds used within the window.
    pub gpu_ms: u64,
    /// Attempts that ran within it.
    pub attempts: u64,
    /// Jobs those attempts belong to.
    pub jobs: u64,
    /// GPU-milliseconds of the attempts a preemption ended.
    pub preempted_gpu_ms: u64,
    /// GPU-milliseconds of work lost (to redo after a preemption, a lost node...).
    pub lost_gpu_ms: u64,
    /// Attempts running now (counted in `attempts` too).
    pub running: u64,
}

impl Total {
    /// Adds the part of attempt `r` within `[since_ms, until_ms)`.
    pub fn add(&mut self, r: &AttemptRecord, since_ms: u64, until_ms: u64) {
        let part_ms = r.end_ms.min(until_ms).saturating_sub(r.start_ms.max(since_ms));
        let gpu_ms = r.gpus.saturating_mul(part_ms);
        self.gpu_ms = self.gpu_ms.saturating_add(gpu_ms);
        self.attempts += 1;
        if r.ending.preempted_by().is_some() {
            self.preempted_gpu_ms = self.preempted_gpu_ms.saturating_add(gpu_ms);
        }
        self.lost_gpu_ms = self.lost_gpu_ms.saturating_add(r.lost_gpu_ms());
    }
}

/// Totals being summed: ended attempts from the records, running ones from the state.
pub struct Totals {
    by: By,
    since_ms: u64,
    until_ms: u64,
    rows: BTreeMap<String, (Total, BTreeSet<u64>)>,
}

impl Totals {
    pub fn new(by: By, since_ms: u64, until_ms: u64) -> Totals {
        Totals { by, since_ms, until_ms, rows: BTreeMap::new() }
    }

    pub fn by(&self) -> By {
        self.by
    }

    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }

    fn row(&mut self, key: &str) -> &mut (Total, BTreeSet<u64>) {
        if !self.rows.contains_key(key) {
            self.rows.insert(key.to_string(), (Total { key: key.to_string(), ..Total::default() }, BTreeSet::new()));
        }
        self.rows.get_mut(key).expect("inserted above")
    }

    /// Adds an ended attempt's part of the window, if it ran within it.
    pub fn add(&mut self, r: &AttemptRecord) {
        // Attempts that ran within the window, if only for a moment.
        if r.start_ms >= self.until_ms || r.end_ms <= self.since_ms {
            return;
        }
        let (since_ms, until_ms) = (self.since_ms, self.until_ms);
        let (t, jobs) = self.row(self.by.key(r));
        t.add(r, since_ms, until_ms);
        jobs.insert(r.job);
    }

    /// Adds a running attempt of `job` that started at `start_ms` on `gpus` GPUs, as of `now_ms`.
    pub fn add_running(&mut self, key: &str, job: u64, gpus: u64, start_ms: u64, now_ms: u64) {
        let part_ms = self.until_ms.min(now_ms).saturating_sub(start_ms.max(self.since_ms));
        let (t, jobs) = self.row(key);
        t.gpu_ms = t.gpu_ms.saturating_add(gpus.saturating_mul(part_ms));
        t.attempts += 1;
        t.running += 1;
        jobs.insert(job);
    }

    /// One row per key, in key order.
    pub fn finish(self) -> Vec<Total> {
        self.rows.into_values().map(|(t, jobs)| Total { jobs: jobs.len() as u64, ..t }).collect()
    }
}

/// Most buckets one series has (the dashboard draws a bar per bucket).
pub const MAX_BUCKETS: usize = 366;
/// Most keys one series names; the rest are summed under [`OTHERS`].
pub const MAX_SERIES_KEYS: usize = 12;
/// The key the keys beyond [`MAX_SERIES_KEYS`] are summed under.
pub const OTHERS: &str = "(others)";

/// GPU time per key and per bucket of a window: what the dashboard's usage page draws.
pub struct Series {
    by: By,
    since_ms: u64,
    bucket_ms: u64,
    buckets: usize,
    rows: BTreeMap<String, Vec<u64>>,
}

/// One key's GPU-milliseconds per bucket, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesRow {
    pub key: String,
    pub gpu_ms: Vec<u64>,
}

impl Series {
    /// `buckets` equal buckets from `since_ms` to `until_ms` (at least 1 ms each).
    pub fn new(by: By, since_ms: u64, until_ms: u64, buckets: usize) -> Result<Series, AccountingError> {
        if since_ms >= until_ms {
            return Err(AccountingError::Query(format!("since ({since_ms} ms) must be before until ({until_ms} ms)")));
        }
        if !(1..=MAX_BUCKETS).contains(&buckets) {
            return Err(AccountingError::Query(format!("buckets must be from 1 to {MAX_BUCKETS}, not {buckets}")));
        }
        let bucket_ms = (until_ms - since_ms).div_ceil(buckets as u64).max(1);
        Ok(Series { by, since_ms, bucket_ms, buckets, rows: BTreeMap::new() })
    }

    pub fn by(&self) -> By {
        self.by
    }

    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }

    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }

    fn until_ms(&self) -> u64 {
        self.since_ms + self.bucket_ms * self.buckets as u64
    }

    /// Spreads `gpus` GPUs held from `start_ms` to `end_ms` over the buckets they overlap.
    pub fn add_span(&mut self, key: &str, gpus: u64, start_ms: u64, end_ms: u64) {
        let (from, to) = (start_ms.max(self.since_ms), end_ms.min(self.until_ms()));
        if from >= to || gpus == 0 {
            return;
        }
        let buckets = self.buckets;
        let row = self.rows.entry(key.to_string()).or_insert_with(|| vec![0; buckets]);
        let mut at = from;
        while at < to {
            let i = ((at - self.since_ms) / self.bucket_ms) as usize;
            let bucket_end = self.since_ms + (i as u64 + 1) * self.bucket_ms;
            let part = bucket_end.min(to) - at;
            row[i] = row[i].saturating_add(gpus.saturating_mul(part));
            at += part;
        }
    }

    pub fn add(&mut self, r: &AttemptRecord) {
        let key = self.by.key(r).to_string();
        self.add_span(&key, r.gpus, r.start_ms, r.end_ms);
    }

    /// The heaviest keys first, the rest summed under [`OTHERS`].
    pub fn finish(self) -> Vec<SeriesRow> {
        let mut rows: Vec<SeriesRow> = self.rows.into_iter().map(|(key, gpu_ms)| SeriesRow { key, gpu_ms }).collect();
        rows.sort_by_key(|r| (std::cmp::Reverse(r.gpu_ms.iter().sum::<u64>()), r.key.clone()));
        if rows.len() > MAX_SERIES_KEYS {
            let rest = rows.split_off(MAX_SERIES_KEYS - 1);
            let mut others = vec![0u64; self.buckets];
            for r in rest {
                for (o, v) in others.iter_mut().zip(r.gpu_ms) {
                    *o = o.saturating_add(v);
                }
            }
            rows.push(SeriesRow { key: OTHERS.into(), gpu_ms: others });
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_spread_over_the_buckets_it_overlaps() {
        let mut s = Series::new(By::User, 1_000, 5_000, 4).unwrap();
        s.add_span("alice", 2, 1_500, 3_250);
        s.add_span("bob", 1, 0, 10_000);
        let rows = s.finish();
        assert_eq!(rows[0], SeriesRow { key: "bob".into(), gpu_ms: vec![1_000; 4] });
        assert_eq!(rows[1], SeriesRow { key: "alice".into(), gpu_ms: vec![1_000, 2_000, 500, 0] });
        assert!(Series::new(By::User, 5, 5, 1).is_err());
        assert!(Series::new(By::User, 0, 5, MAX_BUCKETS + 1).is_err());
    }

    #[test]
    fn keys_beyond_the_most_are_summed_as_others() {
        let mut s = Series::new(By::Queue, 0, 100, 1).unwrap();
        for i in 0..(MAX_SERIES_KEYS as u64 + 3) {
            s.add_span(&format!("q{i:02}"), i + 1, 0, 100);
        }
        let rows = s.finish();
        assert_eq!(rows.len(), MAX_SERIES_KEYS);
        assert_eq!(rows.last().unwrap().key, OTHERS);
        assert_eq!(rows.last().unwrap().gpu_ms, vec![100 * (1 + 2 + 3 + 4)]);
    }
}
