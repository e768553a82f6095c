//! Accounting (issue 34): a record of every attempt a job ran, from the command that started
//! it (or resumed it in place) to the one that ended (or suspended) it.
//!
//! The state numbers each record (`seq`, from 1, the same on every replica: records come
//! from committed commands alone) and keeps the newest [`RECENT_RECORDS`] of them, so that
//! they travel in snapshots: a replica that installs a snapshot instead of applying the
//! commands it covers still gets the records those commands made. Each replica writes them
//! into its own accounting store (the `baton-accounting` crate) by `seq`, so that writing
//! one again (a replay after a restart, a snapshot's window) changes nothing.
//!
//! Records are kept only once accounting is on (`settings` set): a cluster upgraded from a
//! build without it turns it on only once every member reads the format that carries it
//! (the leader does so by itself; see `Op::StartAccounting`), so that a snapshot holding
//! records never reaches a replica that cannot read it.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::job::PreemptionMode;
use crate::resources::Resources;

/// Records the replicated state keeps (and every snapshot carries): the newest ones. A
/// replica that misses more than this many between two snapshots it installs has a gap in
/// its store (docs/ops.md, "Accounting").
pub const RECENT_RECORDS: usize = 4_096;
/// How long a replica's store keeps a record after it ended, by default: 400 days (a year
/// and a billing quarter's slack).
pub const DEFAULT_RETENTION_MS: u64 = 400 * DAY_MS;
/// The shortest retention accepted.
pub const MIN_RETENTION_MS: u64 = DAY_MS;
/// The longest: twenty years.
pub const MAX_RETENTION_MS: u64 = 20 * 365 * DAY_MS;
/// The longest detail kept in a record.
pub const MAX_DETAIL_LEN: usize = 200;
/// Nodes a record names at most (a gang's larger spread is cut, and says so).
pub const MAX_RECORD_NODES: usize = 64;

const DAY_MS: u64 = 86_400_000;

/// Accounting's settings, changed with `baton cluster set --accounting-retention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountingSettings {
    /// How long each replica's store keeps a record after its attempt ended.
    pub retention_ms: u64,
}

impl Default for AccountingSettings {
    fn default() -> Self {
        AccountingSettings { retention_ms: DEFAULT_RETENTION_MS }
    }
}

impl AccountingSettings {
    /// Refuses a retention out of bounds, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if !(MIN_RETENTION_MS..=MAX_RETENTION_MS).contains(&self.retention_ms) {
            return Err(format!(
                "accounting_retention must be from {} to {} days, not {} s",
                MIN_RETENTION_MS / DAY_MS,
                MAX_RETENTION_MS / DAY_MS,
                self.retention_ms / 1000
            ));
        }
        Ok(())
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ending {
    Succeeded,
    Failed {
        exit_code: Option<i32>,
    },
    TimedOut,
    Cancelled,
    /// Stopped for a preemptor (in mode checkpoint, requeue or cancel).
    Preempted {
        by: String,
        mode: PreemptionMode,
    },
    /// Stopped in place for a preemptor; it resumes in place, as a new record.
    Suspended {
        by: String,
    },
    Paused,
    /// Back in the queue without a stop asked for: a node lost, a process gone.
    Requeued,
    /// Stopped for a maintenance window.
    Maintenance,
    /// Stopped because a GPU it ran on was found unhealthy.
    GpuFault,
    /// An elastic gang stopped to grow or shrink.
    Resized,
}

impl Ending {
    /// The word `baton history --state` matches and prints.
    pub fn word(&self) -> &'static str {
        match self {
            Ending::Succeeded => "succeeded",
            Ending::Failed { .. } => "failed",
            Ending::TimedOut => "timed-out",
            Ending::Cancelled => "cancelled",
            Ending::Preempted { .. } => "preempted",
            Ending::Suspended { .. } => "suspended",
            Ending::Paused => "paused",
            Ending::Requeued => "requeued",
            Ending::Maintenance => "maintenance",
            Ending::GpuFault => "gpu-fault",
            Ending::Resized => "resized",
        }
    }

    pub const WORDS: [&'static str; 11] = [
        "succeeded",
        "failed",
        "timed-out",
        "cancelled",
        "preempted",
        "suspended",
        "paused",
        "requeued",
        "maintenance",
        "gpu-fault",
        "resized",
    ];

    /// The process's exit code, where the attempt ended by one (0 when it succeeded).
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Ending::Failed { exit_code } => *exit_code,
            Ending::Succeeded => Some(0),
            _ => None,
        }
    }

    /// The preemptor, for an attempt a preemption ended.
    pub fn preempted_by(&self) -> Option<&str> {
        match self {
            Ending::Preempted { by, .. } | Ending::Suspended { by } => Some(by),
            _ => None,
        }
    }

    /// Whether the cluster ended it to run it again later: what it computed since its last
    /// checkpoint is lost. A suspended job keeps its memory, so it loses nothing.
    pub fn runs_again(&self) -> bool {
        match self {
            Ending::Preempted { mode, .. } => *mode != PreemptionMode::Cancel,
            Ending::Paused | Ending::Requeued | Ending::Maintenance | Ending::GpuFault | Ending::Resized => true,
            _ => false,
        }
    }
}

/// One attempt, as accounting keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Its number, from 1, in the order commands ended attempts.
    pub seq: u64,
    pub job: u64,
    pub name: String,
    pub attempt: u32,
    pub user: String,
    pub queue: String,
    /// The pools of its nodes, joined with `,` when it spanned more than one.
    pub pool: String,
    pub nodes: Vec<String>,
    pub gpus: u64,
    /// What its replicas held.
    pub resources: Resources,
    pub start_ms: u64,
    pub end_ms: u64,
    pub ending: Ending,
    /// What ended it, in words (its job's event).
    pub detail: String,
    /// Work since its last checkpoint (or its start) that a later attempt must redo.
    pub lost_ms: u64,
}

impl AttemptRecord {
    pub fn duration_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }

    /// GPU-milliseconds it used: its GPUs times its duration.
    pub fn gpu_ms(&self) -> u64 {
        self.gpus.saturating_mul(self.duration_ms())
    }

    /// GPU-milliseconds of work lost.
    pub fn lost_gpu_ms(&self) -> u64 {
        self.gpus.saturating_mul(self.lost_ms)
    }
}

/// The replicated part: settings, the next number, the newest records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounting {
    settings: Option<AccountingSettings>,
    /// The number the next record gets, less one: records made so far.
    made: u64,
    /// Shared by the state's clones until one of them changes it: the leader clones the
    /// state for every round, and the invariant checks for each rebuild, and copying up to
    /// `RECENT_RECORDS` records each time was most of such a clone's cost (stop 83).
    recent: Arc<VecDeque<AttemptRecord>>,
}

impl Accounting {
    /// `None`: accounting is off (a cluster upgraded from a build without it, until its
    /// leader turns it on).
    pub fn settings(&self) -> Option<AccountingSettings> {
        self.settings
    }

    pub(crate) fn set(&mut self, s: AccountingSettings) {
        self.settings = Some(s);
    }

    /// Records made since the cluster began keeping them.
    pub fn made(&self) -> u64 {
        self.made
    }

    /// Numbers `r` and keeps it among the newest.
    pub(crate) fn push(&mut self, mut r: AttemptRecord) {
        debug_assert!(self.settings.is_some(), "records are made only while accounting is on");
        // Stores rely on it: their order by end time is number order.
        debug_assert!(self.recent.back().is_none_or(|last| last.end_ms <= r.end_ms), "records end in number order");
        self.made += 1;
        r.seq = self.made;
        let recent = Arc::make_mut(&mut self.recent);
        if recent.len() == RECENT_RECORDS {
            recent.pop_front();
        }
        recent.push_back(r);
    }

    /// The kept records numbered above `seq`, oldest first.
    pub fn after(&self, seq: u64) -> impl Iterator<Item = &AttemptRecord> {
        // Numbers are consecutive, so the first one wanted sits at a known offset.
        let oldest = self.recent.front().map_or(self.made + 1, |r| r.seq);
        let skip = seq.saturating_add(1).saturating_sub(oldest) as usize;
        self.recent.iter().skip(skip)
    }

    /// The oldest record kept, if any.
    pub fn oldest_kept(&self) -> Option<u64> {
        self.recent.front().map(|r| r.seq)
    }

    pub fn is_empty(&self) -> bool {
        self.settings.is_none() && self.recent.is_empty()
    }

    /// Checks what a snapshot brought: consecutive numbers ending at `made`, within bounds.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.recent.len() > RECENT_RECORDS {
            return Err(format!("{} accounting records kept, more than {RECENT_RECORDS}", self.recent.len()));
        }
        if self.settings.is_none() && self.made > 0 {
            return Err("accounting records without accounting settings".into());
        }
        let Some(first) = (self.made + 1).checked_sub(self.recent.len() as u64) else {
            return Err(format!("{} accounting records kept of {} made", self.recent.len(), self.made));
        };
        for (i, r) in self.recent.iter().enumerate() {
            if r.seq != first + i as u64 {
                return Err(format!("accounting record {} out of order (expected {})", r.seq, first + i as u64));
            }
        }
        if let Some((a, b)) = self.recent.iter().zip(self.recent.iter().skip(1)).find(|(a, b)| a.end_ms > b.end_ms) {
            return Err(format!("accounting record {} ends before record {}", b.seq, a.seq));
        }
        Ok(())
    }
}

/// `s` cut to at most [`MAX_DETAIL_LEN`] bytes, on a character boundary.
pub fn clip_detail(mut s: String) -> String {
    if s.len() > MAX_DETAIL_LEN {
        let mut cut = MAX_DETAIL_LEN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(end_ms: u64) -> AttemptRecord {
        AttemptRecord {
            seq: 0,
            job: 1,
            name: "j".into(),
            attempt: 1,
            user: "u".into(),
            queue: "q".into(),
            pool: "default".into(),
            nodes: vec!["n1".into()],
            gpus: 2,
            resources: Resources::of(&[("gpu", 2)]),
            start_ms: 1_000,
            end_ms,
            ending: Ending::Succeeded,
            detail: String::new(),
            lost_ms: 0,
        }
    }

    #[test]
    fn records_are_numbered_and_the_newest_kept() {
        let mut a = Accounting::default();
        a.set(AccountingSettings::default());
        for i in 0..(RECENT_RECORDS as u64 + 10) {
            a.push(record(2_000 + i));
        }
        assert_eq!(a.made(), RECENT_RECORDS as u64 + 10);
        assert_eq!(a.oldest_kept(), Some(11));
        assert_eq!(a.after(0).count(), RECENT_RECORDS);
        assert_eq!(a.after(a.made() - 3).map(|r| r.seq).collect::<Vec<_>>(), vec![4_104, 4_105, 4_106]);
        assert_eq!(a.after(a.made()).count(), 0);
        a.check().unwrap();
    }

    #[test]
    fn a_clone_shares_the_records_until_either_makes_one_and_encodes_as_before() {
        let mut a = Accounting::default();
        a.set(AccountingSettings::default());
        (0..100).for_each(|i| a.push(record(2_000 + i)));
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.recent, &b.recent), "a clone copies no record");
        b.push(record(5_000));
        assert!(!Arc::ptr_eq(&a.recent, &b.recent));
        assert_eq!((a.made(), a.after(0).count(), b.made(), b.after(0).count()), (100, 100, 101, 101));
        // Behind its pointer the list encodes as the plain list did: snapshots read back.
        #[derive(Serialize)]
        struct Plain<'a> {
            settings: Option<AccountingSettings>,
            made: u64,
            recent: &'a VecDeque<AttemptRecord>,
        }
        let plain = Plain { settings: a.settings, made: a.made, recent: &a.recent };
        let config = bincode::config::standard();
        let (ours, theirs) = (bincode::serde::encode_to_vec(&a, config), bincode::serde::encode_to_vec(&plain, config));
        assert_eq!(ours.unwrap(), theirs.unwrap());
    }

    #[test]
    fn gpu_time_is_gpus_times_duration() {
        let r = record(3_600_000 + 1_000);
        assert_eq!(r.gpu_ms(), 2 * 3_600_000);
    }

    #[test]
    fn retention_out_of_bounds_is_refused_by_name() {
        let e = AccountingSettings { retention_ms: 1_000 }.validate().unwrap_err();
        assert!(e.contains("accounting_retention"), "{e}");
        AccountingSettings::default().validate().unwrap();
    }
}
