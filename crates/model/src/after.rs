//! Dependencies between jobs (decisions.md section 13): a job may wait for others to
//! succeed, fail, end or start. What is submitted names each job by name or id
//! ([`After`]); the state resolves it to a job id at submission ([`Waits`]) and keeps only
//! the dependencies that do not hold yet.

use serde::{Deserialize, Serialize};

use crate::job::{Job, JobId, JobState};
use crate::name::Name;

/// The condition a dependency waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum When {
    /// The job Succeeded.
    Ok,
    /// The job ended, in any state.
    Any,
    /// The job ended Failed or Cancelled.
    NotOk,
    /// The job started once (it stays held if the job is requeued later).
    Started,
}

impl When {
    pub const ALL: [When; 4] = [When::Ok, When::Any, When::NotOk, When::Started];

    pub fn as_str(self) -> &'static str {
        match self {
            When::Ok => "ok",
            When::Any => "any",
            When::NotOk => "notok",
            When::Started => "started",
        }
    }

    pub fn parse(s: &str) -> Option<When> {
        When::ALL.into_iter().find(|w| w.as_str().eq_ignore_ascii_case(s))
    }

    /// What the condition asks, in words: "prep to succeed".
    pub fn describe(self) -> &'static str {
        match self {
            When::Ok => "to succeed",
            When::Any => "to end",
            When::NotOk => "to fail or be cancelled",
            When::Started => "to start",
        }
    }
}

/// The job a dependency names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobRef {
    Id(JobId),
    Name(Name),
}

impl JobRef {
    /// A job by id when `text` is all digits, else by name (checked).
    pub fn parse(text: &str) -> Result<JobRef, crate::name::NameError> {
        match text.parse::<JobId>() {
            Ok(id) => Ok(JobRef::Id(id)),
            Err(_) => Name::new(text).map(JobRef::Name),
        }
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Id(id) => write!(f, "{id}"),
            JobRef::Name(n) => write!(f, "{n}"),
        }
    }
}

/// One dependency as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct After {
    pub job: JobRef,
    pub when: When,
}

impl After {
    /// `when:job`, the command line's spelling (`ok:prep`); a job that is all digits is
    /// taken as an id.
    pub fn parse(s: &str) -> Result<After, String> {
        let (when, job) = s.split_once(':').ok_or_else(|| format!("{s:?} is not WHEN:JOB (e.g. ok:prep)"))?;
        let when = When::parse(when.trim())
            .ok_or_else(|| format!("{when:?} in {s:?} is not one of ok, any, notok, started"))?;
        let job = job.trim();
        let job = JobRef::parse(job).map_err(|e| format!("job {job:?} in {s:?}: {e}"))?;
        Ok(After { job, when })
    }
}

/// A resolved dependency that does not hold yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    pub job: JobId,
    pub when: When,
}

/// Where a dependency stands given the job it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Holds,
    Waits,
    /// It can no longer hold: the job ended otherwise (in the state named).
    Broken(JobState),
}

/// Where `when` stands for `job`.
pub fn standing(when: When, job: &Job) -> Standing {
    let s = job.state;
    match when {
        When::Started if job.attempt > 0 => Standing::Holds,
        When::Started if s.is_finished() => Standing::Broken(s),
        When::Ok if s == JobState::Succeeded => Standing::Holds,
        When::Ok if s.is_finished() => Standing::Broken(s),
        When::NotOk if matches!(s, JobState::Failed | JobState::Cancelled) => Standing::Holds,
        When::NotOk if s.is_finished() => Standing::Broken(s),
        When::Any if s.is_finished() => Standing::Holds,
        _ => Standing::Waits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_lines_spelling_and_names_what_is_wrong() {
        assert_eq!(After::parse("ok:prep").unwrap(), After { job: JobRef::Name(Name::lit("prep")), when: When::Ok });
        assert_eq!(After::parse("NotOK:17").unwrap(), After { job: JobRef::Id(17), when: When::NotOk });
        assert!(After::parse("prep").unwrap_err().contains("WHEN:JOB"));
        assert!(After::parse("soon:prep").unwrap_err().contains("ok, any, notok, started"));
        assert!(After::parse("ok:bad name").unwrap_err().contains("bad name"));
    }
}
