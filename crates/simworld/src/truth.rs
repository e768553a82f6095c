//! What really ran where and when: the simulated processes, kept outside every host (a
//! process outlives its agent's crash, as the real ones outlive it under their watchdog),
//! and the exact checks on them. The simulator knows true time, so "two attempts of a job
//! at once" means exactly that, with no tolerance.
//!
//! Also the node journals (what an agent finds again when it restarts: its processes, the
//! ranks that ended, its lease), the run's history and its violations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_agent::fence::Fence;
use baton_agent::journal::Outcome;
use baton_agent::lease::{Floor, Lease, Standing};
use baton_model::command::Observed;

use crate::history::History;

/// Violations one run records before it stops counting (the first ones say what broke).
pub const MAX_VIOLATIONS: usize = 100;
/// Ended ranks a node's journal remembers (the oldest jobs' are forgotten first): enough
/// for every attempt a leader may still name.
pub const MAX_ENDED_PER_NODE: usize = 4_096;

/// One rank of one attempt of a job, on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    pub job: u64,
    pub attempt: u32,
    pub rank: u32,
}

impl std::fmt::Display for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {} attempt {} rank {}", self.job, self.attempt, self.rank)
    }
}

/// What a rank is given of its node.
#[derive(Debug, Clone, Copy)]
pub struct Devices<'a> {
    pub gpus: &'a [u32],
    /// Thousandths of its one GPU when it shares it (decisions.md section 11); 0: whole.
    pub gpu_milli: u32,
    /// MIG slices, of every profile.
    pub slices: u32,
}

#[derive(Debug, Clone)]
pub struct Process {
    /// When it exits on its own (if not stopped first).
    pub exits_ms: u64,
    pub gpus: Vec<u32>,
    /// Thousandths of its one GPU when it shares it (decisions.md section 11); 0: whole.
    pub gpu_milli: u32,
    /// The memory it holds, suspended or not (a stopped process keeps its memory).
    pub memory_bytes: u64,
    /// The MIG slices it holds.
    pub slices: u32,
    /// Stopped in place (it keeps its GPUs and its memory).
    pub suspended: bool,
    /// The leader state the directive that started it was built from.
    pub started_by: Floor,
    /// The code it exits with at `exits_ms` (nonzero: it crashes then; `Adversity`).
    pub exit_code: i32,
}

/// The memory of every simulated node, which its processes (suspended ones included) never
/// exceed together (decisions.md section 7: a suspended job's memory is not lent).
pub const NODE_MEMORY_BYTES: u64 = 512 << 30;

/// The MIG slices of every simulated node (`mig-1g.10gb`), which its processes never hold
/// more of together (decisions.md section 11). Jobs that hold slices are never suspended.
pub const NODE_SLICES: u32 = 7;

/// What a node's agent keeps on its disk.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub processes: BTreeMap<Rank, Process>,
    /// Ranks that exited or were stopped here, and how: never started again.
    pub ended: BTreeMap<Rank, Outcome>,
    /// The highest term, and its leader, whose directives the agent obeyed.
    pub fence: Fence,
    /// The lease, on the node's clock: the real agent's (`baton_agent::lease`), counted from
    /// when the beat a grant answers was sent, never shortened; processes may run while it
    /// is held.
    pub lease: Lease,
    /// The node's clock (`clocks::Rate`), on which the lease is timed.
    pub clock: crate::clocks::Rate,
    /// Starts of the agent.
    pub boots: u64,
    /// What the watchdog stopped, for the agent to report.
    pub unreported: Vec<Observed>,
}

impl Journal {
    /// Whether the lease is held at `local_ms` on the node's clock (never granted: not).
    pub fn holds_lease_at(&self, local_ms: u64) -> bool {
        matches!(self.lease.standing(local_ms), Standing::Held { .. })
    }
}

/// How long a job's ranks work and take to checkpoint, drawn when it is submitted, and how
/// they misbehave.
#[derive(Debug, Clone, Copy)]
pub struct JobWork {
    pub work_ms: u64,
    pub checkpoint_ms: u64,
    pub adversity: Adversity,
}

impl Default for JobWork {
    /// What a rank whose job the load never drew (none in a run) does.
    fn default() -> JobWork {
        JobWork { work_ms: 30_000, checkpoint_ms: 1_000, adversity: Adversity::default() }
    }
}

impl JobWork {
    /// How long rank `rank` runs before it exits on its own, and with which code.
    pub fn run_of(&self, rank: u32) -> (u64, i32) {
        match self.adversity.crash {
            Some(c) if c.rank == rank && c.after_ms < self.work_ms => (c.after_ms, c.code),
            _ => (self.work_ms, 0),
        }
    }

    /// When a stop signalled at `now` ends and whether the rank saved its work by then:
    /// it saves within the grace or is killed at its end.
    pub fn stop_of(&self, now: u64, grace_ms: u64) -> (u64, bool) {
        if self.adversity.ignores_stops {
            return (now + grace_ms, false);
        }
        (now + self.checkpoint_ms.min(grace_ms), self.checkpoint_ms <= grace_ms)
    }
}

/// How a job's processes misbehave, drawn per job (`load`): what a cluster meets in real
/// work, which the cluster must report as it happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Adversity {
    /// One rank of every attempt crashes partway through its work.
    pub crash: Option<Crash>,
    /// Its ranks ignore the stop signal: they save nothing and are killed when the grace
    /// ends.
    pub ignores_stops: bool,
}

/// Rank `rank` of every attempt exits with `code` (nonzero) `after_ms` into its run, if its
/// work lasts that long and the attempt has that rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash {
    pub rank: u32,
    pub after_ms: u64,
    pub code: i32,
}

/// A job's end as a replica's state tells it, to hold against what really ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// It succeeded: some attempt's rank 0 exited 0 (a late report of an older attempt's
    /// exit counts, `late_exit`).
    Succeeded { job: u64 },
    /// It failed with `code`, which a rank of attempt `attempt` (the current one) exited with.
    Failed { job: u64, attempt: u32, code: i32 },
}

impl Ending {
    /// The job that ended.
    pub fn job(&self) -> u64 {
        match self {
            Ending::Succeeded { job } | Ending::Failed { job, .. } => *job,
        }
    }
}

/// Exits remembered per job (attempts times ranks); a job past it is no longer checked.
pub const MAX_EXITS_PER_JOB: usize = 1_024;

/// A bug planted on purpose, to show that the checks find what they are meant to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// Processes outlive their lease (a job that killed its watchdog).
    NoWatchdog,
    /// Leaders declare a node lost after half a lease (a heartbeat timeout the timing
    /// argument refuses).
    EarlyLoss,
    /// Leaders grant leases without a recent quorum confirmation (a deposed leader keeps
    /// directing).
    UnconfirmedGrants,
    /// The first replica that restarts from a snapshot finds a state in it that differs from
    /// everyone's (a build whose `apply` differs, memory or a disk that changed a valid
    /// state into another); replicas snapshot often so that one does.
    PartedState,
    /// Agents tell every exit of a running rank as exit 0 (a wrapper that loses the job's
    /// exit code): a crash then ends its job as a success.
    LostExitCodes,
    /// Leaders drop the reports of the ends of ranks whose attempt has ended (a report
    /// handler that reads them as stale): each such rank holds its GPUs for good, though nothing runs.
    /// Every safety check passes; only the liveness check (`progress`) finds it.
    CompletingStopsDropped,
}

#[derive(Debug, Default)]
pub struct Truth {
    pub sabotage: Option<Sabotage>,
    /// Whether the network duplicates the agents' and leaders' datagrams now (a fault).
    pub copies: crate::wire::Copies,
    /// Whether `Sabotage::PartedState` has changed a replica's snapshot yet.
    pub parted: bool,
    /// The newest data format each replica's build reads, for those on an older build than
    /// this one (`upgrades`); a replica not named runs this build.
    pub builds: BTreeMap<u64, u32>,
    pub journals: BTreeMap<String, Journal>,
    pub work: BTreeMap<String, JobWork>,
    pub history: History,
    pub violations: Vec<String>,
    pub starts: u64,
    /// Maintenance windows the client saw acknowledged.
    pub windows: u64,
    /// GPUs the client saw marked unhealthy.
    pub gpu_faults: u64,
    /// Decisions `apply` refused of a leader's plan applied to the state it was made from
    /// (`leader::check_plan`).
    pub refused: u64,
    /// Submits with dependencies the client saw acknowledged.
    pub waiting_submits: u64,
    /// Arrays the client saw acknowledged (decisions.md section 13).
    pub arrays: u64,
    /// Elastic gangs the client saw acknowledged (section 13).
    pub elastic: u64,
    /// Ranks the agents suspended in place (section 7).
    pub suspensions: u64,
    /// Ranks started on MIG slices (section 11).
    pub slice_starts: u64,
    /// Ranks started on a fraction of a shared GPU (section 11).
    pub shared_starts: u64,
    /// Every process's own exit, by job: `(attempt, rank, code)`, also of an exit during a
    /// stop (which the agent reports as the stop). At most `MAX_EXITS_PER_JOB` each.
    pub exits: BTreeMap<u64, BTreeSet<(u32, u32, i32)>>,
    /// Processes that crashed (exited nonzero).
    pub crashes: u64,
    /// Nodes whose agent's journal is full (a fault the load draws), with when a person
    /// frees the disk: the agent starts nothing meanwhile, and tells the leader of each
    /// start it refuses (`Observed::Unrecorded`).
    pub full_journals: BTreeMap<String, u64>,
    /// Starts the agents refused and told, their journal full.
    pub unrecorded: u64,
}

#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<Truth>>);

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Truth> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn record(&self, line: impl AsRef<str>) {
        self.lock().history.record(crate::now_ms(), line);
    }
}

impl Truth {
    /// The newest data format replica `id`'s build reads.
    pub fn reads(&self, id: u64) -> u32 {
        self.builds.get(&id).copied().unwrap_or(baton_raft::identity::DATA_FORMAT)
    }

    pub fn violation(&mut self, at_ms: u64, what: String) {
        self.history.record(at_ms, format!("VIOLATION {what}"));
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(format!("at {}.{:03} s: {what}", at_ms / 1000, at_ms % 1000));
        }
    }

    /// `node` starts `r` on `gpus` with `memory_bytes`, to exit on its own at `exits_ms`;
    /// checks that no other attempt of the job runs anywhere, that this rank runs nowhere
    /// else, that no process holds one of the GPUs, and that the node's processes, suspended
    /// ones included, hold no more memory than it has.
    pub fn start(&mut self, at_ms: u64, node: &str, r: Rank, devices: Devices, memory_bytes: u64, exits_ms: u64) {
        let Devices { gpus, gpu_milli, slices } = devices;
        let mut broken = BTreeSet::new();
        let held_slices: u32 = self.journals.get(node).map_or(0, |j| j.processes.values().map(|p| p.slices).sum());
        if held_slices + slices > NODE_SLICES {
            broken.insert(format!(
                "{r} starts on {node} with {slices} MIG slices beside {held_slices} its processes hold, of {NODE_SLICES}"
            ));
        }
        let held: u64 = self.journals.get(node).map_or(0, |j| j.processes.values().map(|p| p.memory_bytes).sum());
        if held + memory_bytes > NODE_MEMORY_BYTES {
            broken.insert(format!(
                "{r} starts on {node} with {} GiB beside {} GiB its processes hold (suspended ones included) of {} GiB",
                memory_bytes >> 30,
                held >> 30,
                NODE_MEMORY_BYTES >> 30
            ));
        }
        for (n, j) in &self.journals {
            for (other, p) in &j.processes {
                if other.job == r.job && other.attempt != r.attempt {
                    broken.insert(format!("{r} starts on {node} while attempt {} runs on {n}", other.attempt));
                } else if other.job == r.job && other.rank == r.rank {
                    broken.insert(format!("{r} starts on {node} while it runs on {n}"));
                }
                if n == node && p.gpus.iter().any(|g| gpus.contains(g)) && (gpu_milli == 0 || p.gpu_milli == 0) {
                    broken.insert(format!("{r} starts on GPUs {gpus:?} of {node} that {other} holds ({:?})", p.gpus));
                }
            }
        }
        if gpu_milli > 0 {
            // Fractions share a GPU up to the whole of it, suspended holders included.
            let on = |g: &u32| -> u32 {
                let j = self.journals.get(node);
                j.map_or(0, |j| j.processes.values().filter(|p| p.gpus.contains(g)).map(|p| p.gpu_milli).sum())
            };
            for g in gpus.iter().filter(|g| on(g) + gpu_milli > 1000) {
                broken.insert(format!("{r} starts on GPU {g} of {node} with {gpu_milli}/1000 beside {}/1000", on(g)));
            }
        }
        for b in broken {
            self.violation(at_ms, b);
        }
        self.starts += 1;
        self.slice_starts += u64::from(slices > 0);
        self.shared_starts += u64::from(gpu_milli > 0);
        let and_slices = if slices > 0 { format!(" and {slices} MIG slices") } else { String::new() };
        self.history.record(at_ms, format!("{node} starts {r} on {gpus:?}{and_slices}"));
        let journal = self.journals.entry(node.to_string()).or_default();
        let started_by = Floor::default();
        let p = Process {
            exits_ms,
            gpus: gpus.to_vec(),
            gpu_milli,
            memory_bytes,
            slices,
            suspended: false,
            started_by,
            exit_code: 0,
        };
        journal.processes.insert(r, p);
    }

    /// The watchdog of every node: a process whose node's lease ran out is stopped then,
    /// whether its agent runs or not (the real one lives outside the agent), and the agent
    /// reports it when it can. The lease is read on the node's clock, at true time `at_ms`.
    pub fn watchdog(&mut self, at_ms: u64) {
        if self.sabotage == Some(Sabotage::NoWatchdog) {
            return;
        }
        let lapsed: Vec<(String, Rank)> = self
            .journals
            .iter()
            .filter(|(_, j)| !j.holds_lease_at(j.clock.local_ms(at_ms)))
            .flat_map(|(n, j)| j.processes.keys().map(move |r| (n.clone(), *r)))
            .collect();
        for (node, r) in lapsed {
            self.end(at_ms, &node, r, Outcome::Stopped { checkpointed: false }, "lease ran out");
            let o = Observed::LeaseExpired { job: r.job, attempt: r.attempt, rank: r.rank, checkpointed: false };
            self.journals.entry(node).or_default().unreported.push(o);
        }
    }

    /// `node`'s agent kills `r`, which the directive built from leader state `by` does not
    /// name. A directive older than the one that started the rank knows nothing of it:
    /// obeying it throws the rank's work away for nothing (a grant that arrived late, after
    /// newer ones, as a duplicated or reordered datagram does).
    pub fn kill(&mut self, at_ms: u64, node: &str, r: Rank, by: Floor) {
        let started_by = self.journals.get(node).and_then(|j| j.processes.get(&r)).map(|p| p.started_by);
        if let Some(s) = started_by.filter(|s| by < *s) {
            self.violation(
                at_ms,
                format!(
                    "{r} on {node} is killed by a directive of term {} index {}, older than the one that started it \
                     (term {} index {})",
                    by.term, by.state_index, s.term, s.state_index
                ),
            );
        }
        self.end(at_ms, node, r, Outcome::Killed, "not in the directive: killed");
    }

    /// `r`'s process exited on its own with `code`: what a job's ending must match.
    pub fn exited(&mut self, r: Rank, code: i32) {
        self.crashes += u64::from(code != 0);
        let exits = self.exits.entry(r.job).or_default();
        if exits.len() < MAX_EXITS_PER_JOB {
            exits.insert((r.attempt, r.rank, code));
        }
    }

    /// Holds a job's end, as a replica's state tells it, against the exits that really
    /// happened: a success needs some attempt's rank 0 to have exited 0, and a failure with
    /// a code needs a rank of the current attempt to have exited with it. Anything else is
    /// an end the cluster made up (an exit credited to the wrong job or attempt, a report
    /// read twice). A job with more exits than are remembered is not judged.
    pub fn check_ending(&mut self, at_ms: u64, replica: &str, e: &Ending) {
        let job = e.job();
        let exits = self.exits.get(&job);
        if exits.is_some_and(|x| x.len() >= MAX_EXITS_PER_JOB) {
            return;
        }
        let happened = |f: &dyn Fn(&(u32, u32, i32)) -> bool| exits.is_some_and(|x| x.iter().any(f));
        let broken = match *e {
            Ending::Succeeded { .. } if !happened(&|&(_, rank, code)| rank == 0 && code == 0) => {
                Some(format!("{replica}'s state says job {job} succeeded, but no rank 0 of it exited 0"))
            }
            Ending::Failed { attempt, code, .. } if !happened(&|&(a, _, c)| a == attempt && c == code) => {
                Some(format!(
                    "{replica}'s state says job {job} failed with code {code} in attempt {attempt}, but no rank of that attempt \
                 exited so (exits: {:?})",
                    exits.map(|x| x.iter().collect::<Vec<_>>()).unwrap_or_default()
                ))
            }
            _ => None,
        };
        if let Some(b) = broken {
            self.violation(at_ms, b);
        }
    }

    /// `node`'s process of `r` is gone (`why` says how).
    pub fn end(&mut self, at_ms: u64, node: &str, r: Rank, outcome: Outcome, why: &str) {
        self.history.record(at_ms, format!("{node} ends {r}: {why}"));
        let journal = self.journals.entry(node.to_string()).or_default();
        journal.processes.remove(&r);
        journal.ended.insert(r, outcome);
        if journal.ended.len() > MAX_ENDED_PER_NODE {
            journal.ended.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(job: u64, attempt: u32, rank: u32) -> Rank {
        Rank { job, attempt, rank }
    }

    /// Whole GPUs and MIG slices.
    fn whole(gpus: &[u32], slices: u32) -> Devices<'_> {
        Devices { gpus, gpu_milli: 0, slices }
    }

    /// A rank killed by a directive older than the one that started it is work thrown away
    /// for nothing; one killed by a newer directive (it no longer names it) is not.
    #[test]
    fn a_kill_by_a_directive_older_than_the_start_is_a_violation() {
        let mut t = Truth::default();
        let at = |state_index| Floor { term: 2, state_index };
        for (job, by) in [(1, at(9)), (2, at(8))] {
            t.start(10, "n1", rank(job, 1, 0), whole(&[job as u32], 0), 0, 1_000);
            t.journals.get_mut("n1").unwrap().processes.get_mut(&rank(job, 1, 0)).unwrap().started_by = at(8);
            t.kill(20, "n1", rank(job, 1, 0), by);
        }
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.start(30, "n1", rank(3, 1, 0), whole(&[3], 0), 0, 1_000);
        t.journals.get_mut("n1").unwrap().processes.get_mut(&rank(3, 1, 0)).unwrap().started_by = at(8);
        t.kill(40, "n1", rank(3, 1, 0), at(7));
        assert!(t.violations.iter().any(|v| v.contains("older than the one that started it")), "{:?}", t.violations);
        assert!(t.journals["n1"].processes.is_empty(), "killed either way");
    }

    /// Section 11: fractions share a GPU up to the whole of it, and never one held whole.
    #[test]
    fn fractions_share_a_gpu_up_to_the_whole_of_it() {
        let mut t = Truth::default();
        let share = |milli| Devices { gpus: &[2], gpu_milli: milli, slices: 0 };
        t.start(10, "n1", rank(1, 1, 0), share(500), 0, 1_000);
        t.start(11, "n1", rank(2, 1, 0), share(250), 0, 1_000);
        t.start(12, "n1", rank(3, 1, 0), share(250), 0, 1_000);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.start(13, "n1", rank(4, 1, 0), share(250), 0, 1_000);
        assert!(t.violations.iter().any(|v| v.contains("with 250/1000 beside 1000/1000")), "{:?}", t.violations);
        let mut t = Truth::default();
        t.start(10, "n1", rank(1, 1, 0), whole(&[2], 0), 0, 1_000);
        t.start(11, "n1", rank(2, 1, 0), share(250), 0, 1_000);
        assert!(t.violations.iter().any(|v| v.contains("that job 1")), "{:?}", t.violations);
    }

    #[test]
    fn a_second_attempt_while_the_first_runs_is_a_violation() {
        let mut t = Truth::default();
        t.start(10, "n1", rank(1, 1, 0), whole(&[0], 0), 0, 1_000);
        t.start(20, "n2", rank(1, 2, 0), whole(&[0], 0), 0, 1_000);
        assert_eq!(t.violations.len(), 1, "{:?}", t.violations);
        assert!(t.violations[0].contains("while attempt 1 runs on n1"), "{:?}", t.violations);
    }

    #[test]
    fn a_gpu_held_twice_is_a_violation_and_an_ended_one_is_free() {
        let mut t = Truth::default();
        t.start(10, "n1", rank(1, 1, 0), whole(&[0, 1], 0), 0, 1_000);
        t.start(11, "n1", rank(2, 1, 0), whole(&[1], 0), 0, 1_000);
        assert_eq!(t.violations.len(), 1, "{:?}", t.violations);
        t.end(12, "n1", rank(1, 1, 0), Outcome::Exited { code: 0 }, "exited");
        t.end(12, "n1", rank(2, 1, 0), Outcome::Exited { code: 0 }, "exited");
        t.start(13, "n1", rank(3, 1, 0), whole(&[1], 0), 0, 1_000);
        t.start(14, "n2", rank(1, 2, 0), whole(&[1], 0), 0, 1_000);
        assert_eq!(t.violations.len(), 1, "{:?}", t.violations);
        assert!(t.journals["n1"].ended.contains_key(&rank(1, 1, 0)));
    }

    /// A suspended process keeps its memory: a start that counts on it is a violation.
    #[test]
    fn memory_held_by_a_suspended_process_is_not_free() {
        let mut t = Truth::default();
        let gib = 1u64 << 30;
        t.start(10, "n1", rank(1, 1, 0), whole(&[], 0), 400 * gib, 1_000);
        t.journals.get_mut("n1").unwrap().processes.get_mut(&rank(1, 1, 0)).unwrap().suspended = true;
        t.start(11, "n1", rank(2, 1, 0), whole(&[], 0), 100 * gib, 1_000);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.start(12, "n1", rank(3, 1, 0), whole(&[], 0), 100 * gib, 1_000);
        assert_eq!(t.violations.len(), 1, "{:?}", t.violations);
        assert!(t.violations[0].contains("500 GiB its processes hold"), "{:?}", t.violations);
    }

    /// A node's MIG slices are never held more than once over (decisions.md section 11).
    #[test]
    fn more_slices_than_a_node_has_are_a_violation() {
        let mut t = Truth::default();
        t.start(10, "n1", rank(1, 1, 0), whole(&[], 3), 0, 1_000);
        t.start(11, "n1", rank(2, 1, 0), whole(&[], 4), 0, 1_000);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.start(12, "n1", rank(3, 1, 0), whole(&[], 1), 0, 1_000);
        assert_eq!(t.violations.len(), 1, "{:?}", t.violations);
        assert!(t.violations[0].contains("1 MIG slices beside 7"), "{:?}", t.violations);
        t.end(13, "n1", rank(1, 1, 0), Outcome::Exited { code: 0 }, "exited");
        t.end(13, "n1", rank(3, 1, 0), Outcome::Exited { code: 0 }, "exited");
        t.start(14, "n1", rank(4, 1, 0), whole(&[], 3), 0, 1_000);
        assert_eq!(t.violations.len(), 1, "an ended process's slices are free: {:?}", t.violations);
    }

    /// A job's end must be one its processes made: a success needs a rank 0 that exited 0
    /// (of any attempt: an older attempt's exit may be told late), a failure with a code a
    /// rank of the current attempt that exited with that code.
    #[test]
    fn an_end_no_process_made_is_a_violation() {
        let mut t = Truth::default();
        t.exited(rank(1, 1, 0), 0);
        t.exited(rank(2, 2, 1), 3);
        t.exited(rank(3, 1, 1), 0);
        t.check_ending(10, "r1", &Ending::Succeeded { job: 1 });
        t.check_ending(10, "r1", &Ending::Failed { job: 2, attempt: 2, code: 3 });
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.check_ending(11, "r1", &Ending::Succeeded { job: 3 });
        assert!(t.violations[0].contains("job 3 succeeded, but no rank 0 of it exited 0"), "{:?}", t.violations);
        t.check_ending(12, "r2", &Ending::Failed { job: 2, attempt: 3, code: 3 });
        t.check_ending(12, "r2", &Ending::Failed { job: 2, attempt: 2, code: 4 });
        assert_eq!(t.violations.len(), 3, "{:?}", t.violations);
        assert!(
            t.violations[1].contains("r2's state says job 2 failed with code 3 in attempt 3"),
            "{:?}",
            t.violations
        );
        assert_eq!(t.crashes, 1);
    }

    /// An adversarial rank: it crashes at its drawn time with its code (only the drawn
    /// rank, and only if its work lasts that long), and one that ignores the stop signal
    /// saves nothing and is killed when the grace ends.
    #[test]
    fn a_misbehaving_rank_crashes_when_drawn_and_one_that_ignores_stops_lasts_the_grace() {
        let crash = Crash { rank: 1, after_ms: 500, code: 9 };
        let w = JobWork {
            work_ms: 1_000,
            checkpoint_ms: 200,
            adversity: Adversity { crash: Some(crash), ignores_stops: false },
        };
        assert_eq!((w.run_of(0), w.run_of(1)), ((1_000, 0), (500, 9)));
        let late = JobWork { work_ms: 400, ..w };
        assert_eq!(late.run_of(1), (400, 0), "its work ends before the crash would");
        assert_eq!(w.stop_of(100, 3_000), (300, true));
        let deaf = JobWork { adversity: Adversity { crash: None, ignores_stops: true }, ..w };
        assert_eq!(deaf.stop_of(100, 3_000), (3_100, false));
    }
}
