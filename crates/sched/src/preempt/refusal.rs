//! Why preemption planning found no way to run a job: a closed set, so the cycle and tests
//! match on the case. `Display` gives the words that become the job's reason.

use std::fmt;

use baton_model::name::Name;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoPreemption {
    /// The queue's policy forbids preempting for a request beyond its nominal quota that it
    /// has no way to borrow (the gate); names the first pool and resource over nominal.
    /// The amounts are as a person reads them (`8`, `0.5`).
    Forbidden { requested: String, nominal: String, resource: String, pool: Name, queue: Name },
    /// No running job is an eligible victim.
    NoCandidates,
    /// The eligible victims together would not make room.
    NoRoom,
}

impl fmt::Display for NoPreemption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoPreemption::Forbidden { requested, nominal, resource, pool, queue } => {
                write!(
                    f,
                    "may not preempt: its request of {} {resource} in pool {pool} exceeds queue {queue}'s nominal of \
                     {} {resource}, and neither borrow_within_cohort nor fair sharing lets it borrow",
                    requested, nominal
                )
            }
            NoPreemption::NoCandidates => f.write_str("no running job may be preempted for it"),
            NoPreemption::NoRoom => f.write_str("preempting the jobs it may preempt would not make room"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are the reasons jobs showed when these were strings.
    #[test]
    fn the_words_are_the_reasons_jobs_showed() {
        let gate = NoPreemption::Forbidden {
            requested: "8".into(),
            nominal: "4".into(),
            resource: "gpu".into(),
            pool: Name::lit("default"),
            queue: Name::lit("q"),
        };
        assert_eq!(
            gate.to_string(),
            "may not preempt: its request of 8 gpu in pool default exceeds queue q's nominal of 4 gpu, and neither \
             borrow_within_cohort nor fair sharing lets it borrow"
        );
        assert_eq!(NoPreemption::NoCandidates.to_string(), "no running job may be preempted for it");
        assert_eq!(NoPreemption::NoRoom.to_string(), "preempting the jobs it may preempt would not make room");
    }
}
