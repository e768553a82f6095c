//! Job arrays (decisions.md section 13): one submit of N jobs `NAME-i` with one spec, at
//! most `max_running` of them at once.
//!
//! An array is one record ([`JobArray`]), not N jobs: its elements are created as jobs
//! only as they come within reach of running (at most `max_running` unfinished, and at most
//! [`crate::limits::ARRAY_PENDING_WINDOW`] pending at once), inside the command that
//! submitted the array or that started or ended an element. So a 100,000-element array
//! costs one log entry and one record; an element not yet created is pending, with the
//! array's reason. Each created element is a job of its own in every rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::after::{Standing, When};
use crate::job::{JobId, JobSpec, JobState};
use crate::limits::{MAX_ARRAY_ELEMENTS, MAX_NAME_LEN};
use crate::name::Name;

/// The variable each element's processes find their index in.
pub const ARRAY_INDEX_ENV: &str = "BATON_ARRAY_INDEX";

/// What a submit asks: elements `first` .. `first + count - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    pub first: u32,
    pub count: u32,
    /// At most this many elements unfinished (created and not ended) at once; `None`: no
    /// bound but the cluster's.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// The command line's `FIRST-LAST[%MAX]` (Slurm's `--array`), or `N` for `0-(N-1)`.
    pub fn parse(text: &str) -> Result<ArraySpec, String> {
        let (range, max) = match text.split_once('%') {
            Some((r, m)) => (r, Some(number(m, "max_running", text)?)),
            None => (text, None),
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (number(a, "first index", text)?, number(b, "last index", text)?),
            None => {
                let n = number(range, "count", text)?;
                if n == 0 {
                    return Err(format!("{text:?}: an array needs at least one element"));
                }
                (0, n - 1)
            }
        };
        if last < first {
            return Err(format!("{text:?}: the range is reversed ({first} is after {last})"));
        }
        let spec = ArraySpec { first, count: last - first + 1, max_running: max };
        spec.validate().map_err(|(field, e)| format!("{text:?}: {}: {e}", field.trim_start_matches("array.")))?;
        Ok(spec)
    }

    /// Refuses an empty array, one over the bound, or a `max_running` of 0: the field
    /// named first.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.count == 0 {
            return Err(("array.count", "an array needs at least one element".into()));
        }
        if self.count > MAX_ARRAY_ELEMENTS {
            return Err(("array.count", format!("at most {MAX_ARRAY_ELEMENTS} elements")));
        }
        if self.first.checked_add(self.count - 1).is_none() {
            return Err(("array.first", "the last index is past 4294967295".into()));
        }
        if self.max_running == Some(0) {
            return Err(("array.max_running", "must be at least 1 (leave it out for no bound)".into()));
        }
        Ok(())
    }

    pub fn last(&self) -> u32 {
        self.first + (self.count - 1)
    }

    /// `0-999%50`, as a user writes it.
    pub fn spelled(&self) -> String {
        match self.max_running {
            Some(m) => format!("{}-{}%{m}", self.first, self.last()),
            None => format!("{}-{}", self.first, self.last()),
        }
    }
}

fn number(part: &str, what: &str, text: &str) -> Result<u32, String> {
    part.trim().parse().map_err(|_| format!("{text:?}: the {what} {part:?} is not a whole number"))
}

/// The name of element `index` of array `name`: `name-index`.
pub fn element_name(name: &Name, index: u32) -> Result<Name, String> {
    let text = format!("{name}-{index}");
    if text.len() > MAX_NAME_LEN {
        return Err(format!("its elements' names ({text}) would be longer than {MAX_NAME_LEN} characters"));
    }
    Name::new(&text).map_err(|e| e.to_string())
}

/// If `name` is of the form `ARRAY-i`, the array's name and `i`.
pub fn split_element_name(name: &Name) -> Option<(Name, u32)> {
    let (base, index) = name.as_str().rsplit_once('-')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) || (index.len() > 1 && index.starts_with('0')) {
        return None;
    }
    Some((Name::new(base).ok()?, index.parse().ok()?))
}

/// How many elements ended each way, and how many started: what a dependency on the
/// array, `list` and `/metrics` read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTally {
    /// Elements that started at least once.
    pub started: u32,
    pub succeeded: u32,
    pub failed: u32,
    /// Cancelled elements, and the ones never created once the array was cancelled.
    pub cancelled: u32,
    /// Elements that ended without ever starting.
    pub ended_unstarted: u32,
}

impl ArrayTally {
    pub fn ended(&self) -> u32 {
        self.succeeded + self.failed + self.cancelled
    }
}

/// One array, replicated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobArray {
    /// From the jobs' id space: a dependency or a request id names it like a job.
    pub id: JobId,
    /// Every element's spec but its name and `BATON_ARRAY_INDEX`; `spec.name` is the array's.
    pub spec: JobSpec,
    pub array: ArraySpec,
    pub priority: i32,
    pub preemptible: bool,
    /// Every element is ordered as if submitted now, then by index (its name).
    pub submitted_ms: u64,
    pub submit_seq: u64,
    /// The Unix user its elements run as (they belong to the array's owner, in the state's
    /// record of owners).
    pub run_as: Option<crate::tenancy::UnixUser>,
    /// Elements created so far: indices `first .. first + created`.
    pub created: u32,
    /// Created elements not ended yet, by index.
    pub live: BTreeMap<u32, JobId>,
    pub tally: ArrayTally,
    /// Cancelled as a whole: no further element is created.
    pub cancelled: bool,
    /// Why elements not created yet wait, in words a person can act on.
    pub reason: String,
    pub finished_ms: Option<u64>,
}

impl JobArray {
    /// Every element ended (or will never be created).
    pub fn is_finished(&self) -> bool {
        self.tally.ended() >= self.array.count
    }

    /// Elements not created yet that may still be.
    pub fn not_created(&self) -> u32 {
        if self.cancelled { 0 } else { self.array.count - self.created }
    }

    /// Where a dependency `when` on the whole array stands: every element must meet it
    /// (decisions.md section 13).
    pub fn standing(&self, when: When) -> Standing {
        let t = &self.tally;
        let n = self.array.count;
        match when {
            When::Ok if t.succeeded == n => Standing::Holds,
            When::Ok if t.failed > 0 => Standing::Broken(JobState::Failed),
            When::Ok if t.cancelled > 0 => Standing::Broken(JobState::Cancelled),
            When::NotOk if t.failed + t.cancelled == n => Standing::Holds,
            When::NotOk if t.succeeded > 0 => Standing::Broken(JobState::Succeeded),
            When::Any if t.ended() == n => Standing::Holds,
            When::Started if t.started == n => Standing::Holds,
            When::Started if t.ended_unstarted > 0 => Standing::Broken(JobState::Cancelled),
            _ => Standing::Waits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slurms_spelling_and_names_what_is_wrong() {
        assert_eq!(ArraySpec::parse("0-999%50").unwrap(), ArraySpec { first: 0, count: 1000, max_running: Some(50) });
        assert_eq!(ArraySpec::parse("5-9").unwrap(), ArraySpec { first: 5, count: 5, max_running: None });
        assert_eq!(ArraySpec::parse("100").unwrap(), ArraySpec { first: 0, count: 100, max_running: None });
        assert!(ArraySpec::parse("9-5").unwrap_err().contains("reversed"));
        assert!(ArraySpec::parse("0").unwrap_err().contains("at least one element"));
        assert!(ArraySpec::parse("0-9%0").unwrap_err().contains("max_running"));
        assert!(ArraySpec::parse("a-9").unwrap_err().contains("first index"));
        assert!(ArraySpec::parse("0-99999999").unwrap_err().contains("at most"));
        assert_eq!(ArraySpec::parse("0-999%50").unwrap().spelled(), "0-999%50");
    }

    #[test]
    fn an_elements_name_is_the_arrays_and_its_index() {
        let n = Name::lit("train");
        assert_eq!(element_name(&n, 7).unwrap().as_str(), "train-7");
        assert_eq!(split_element_name(&Name::lit("train-7")), Some((n.clone(), 7)));
        assert_eq!(split_element_name(&Name::lit("train-07")), None);
        assert_eq!(split_element_name(&Name::lit("train")), None);
        assert!(element_name(&Name::new("x".repeat(60)).unwrap(), 1000).is_err());
    }
}
