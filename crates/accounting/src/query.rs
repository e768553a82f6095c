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
