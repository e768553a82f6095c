//! Jobs of many users on shared nodes: the Unix user each job runs as, and the bounds on how
//! many jobs one user or one queue may hold.
//!
//! The user a job runs as is decided once, when the submit is applied, and replicated, so
//! every replica hands agents the same user. The model cannot ask a node's user database, so
//! it refuses what it can see from the name alone (`root` unless the cluster allows it);
//! each agent then resolves the name on its node and checks its own allow-list (uid 0
//! included, whatever the name).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::job::JobId;
use crate::limits::MAX_JOBS;

/// Longest Unix user name accepted (the usual `useradd` bound).
pub const MAX_UNIX_USER_LEN: usize = 32;
/// Default `max_jobs_per_user`: unfinished jobs one user may hold.
pub const DEFAULT_MAX_JOBS_PER_USER: u32 = 1_000;
/// Default `max_jobs_per_queue`: unfinished jobs one queue may hold.
pub const DEFAULT_MAX_JOBS_PER_QUEUE: u32 = 10_000;
/// The superuser's name; running as it needs `allow_root_jobs`.
pub const ROOT: &str = "root";

/// A portable Unix user name: `[a-z_][a-z0-9_-]*`, 1 to 32 characters. It is looked up on
/// agents, so nothing that reads as an option, a path or a number (a uid) is accepted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UnixUser(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Unix user name: 1 to {MAX_UNIX_USER_LEN} of [a-z0-9_-], starting with a letter or '_'")]
pub struct UnixUserError(pub String);

impl UnixUser {
    pub fn new(s: impl Into<String>) -> Result<UnixUser, UnixUserError> {
        let s = s.into();
        let first_ok = s.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        let rest_ok = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !first_ok || !rest_ok || s.len() > MAX_UNIX_USER_LEN {
            return Err(UnixUserError(s));
        }
        Ok(UnixUser(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0 == ROOT
    }
}

impl fmt::Display for UnixUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Cluster-wide settings for many users, changed by admins (`baton cluster set`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenancySettings {
    /// Whether a job may ask to run as `root`; off by default. Agents have their own
    /// `--allow-root` on top.
    pub allow_root_jobs: bool,
    /// Unfinished jobs (pending, running, stopping, suspended, paused) one user may hold.
    pub max_jobs_per_user: u32,
    /// Unfinished jobs one queue may hold.
    pub max_jobs_per_queue: u32,
}

impl Default for TenancySettings {
    fn default() -> Self {
        TenancySettings {
            allow_root_jobs: false,
            max_jobs_per_user: DEFAULT_MAX_JOBS_PER_USER,
            max_jobs_per_queue: DEFAULT_MAX_JOBS_PER_QUEUE,
        }
    }
}

impl TenancySettings {
    /// Refuses settings out of bounds, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in
            [("max_jobs_per_user", self.max_jobs_per_user), ("max_jobs_per_queue", self.max_jobs_per_queue)]
        {
            if v == 0 || v as usize > MAX_JOBS {
                return Err(format!("{name} must be 1 to {MAX_JOBS}, not {v}"));
            }
        }
        Ok(())
    }
}

/// The replicated part of this module: settings and the user each job runs as.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tenancy {
    pub(crate) settings: TenancySettings,
    /// Jobs without an entry were submitted without a token and without `run_as`: agents
    /// run them only when they run every job as themselves (`--run-as-self`).
    pub(crate) run_as: BTreeMap<JobId, UnixUser>,
}

impl Tenancy {
    pub fn settings(&self) -> &TenancySettings {
        &self.settings
    }

    /// The Unix user `job` runs as, if it names one.
    pub fn run_as(&self, job: JobId) -> Option<&UnixUser> {
        self.run_as.get(&job)
    }
}
