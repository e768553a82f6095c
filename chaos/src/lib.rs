//! The chaos harness: a real baton cluster (3 replicas and agents as processes of this
//! machine) under a stream of jobs that preempt each other, while faults are injected: the
//! leader or another replica is killed (SIGKILL) and restarted, paused (SIGSTOP) so that it is
//! cut off and deposed, then let go (SIGCONT); the leader and then the new leader are killed;
//! an agent is killed and restarted, briefly or past the heartbeat timeout, or stopped past
//! it; a replica's disk is slowed for a few seconds (`disk`). The load includes CPU-only
//! jobs suspended in place (SIGSTOP, SIGCONT) by their preemptors. Half the faults wait for a
//! protocol state (a placement or preemption just committed, a stop in flight). Then it
//! checks baton's promises (chaos/README.md, "The promises") on what the jobs themselves
//! witnessed and on the history of client operations.
//!
//! Layout:
//! - `cluster`: starting, killing, pausing the processes (also used by `tests/e2e`).
//! - `load`: the jobs: borrowing training gangs and the interactive jobs that reclaim their
//!   GPUs; every job is `baton workload --witness DIR`, which holds a lock per GPU and per job
//!   rank while it runs and records violations (see `baton_agent::workload`).
//! - `disk`: slow disks, a replica's writes throttled through a cgroup of its own.
//! - `gpu_faults`: XIDs injected into the agents' development GPUs during the load, each
//!   cleared some seconds later (decisions.md section 14).
//! - `faults`: the fault schedule, drawn from a seed, and the protocol state each landed in.
//! - `freeze`: a whole node frozen and thawed, and the judgement of the thaw (its replicas
//!   gone within a bound).
//! - `history`: submits and cancels with invoke/complete times and outcomes, and the checks
//!   on them (an acknowledged submit exists once, nothing starts after an acknowledged cancel).
//! - `observe`: what the checks read from the cluster after the load: every job's events,
//!   and the cluster at quiescence (running sets, each replica's state and index).
//! - `check`: the verdict: violations the jobs recorded, every acknowledged job succeeded,
//!   no attempt started twice, the history checks, every start after its committed
//!   placement, every preemption ended within its grace plus a bound, the cluster quiescent
//!   (processes as the model says, replicas at one state and index), Succeeded jobs ran all
//!   their steps, resumes from the newest checkpoint, and the run was not vacuous (faults
//!   happened, jobs resumed from checkpoints, faults landed in non-idle protocol states).
//! - `commit`: the placement check against the commit: a stopped replica's raft log replayed
//!   to the state index each start names, where its attempt must run that rank on that node.
//! - `run`: the whole run.
//! - `slot`: what one cluster holds for itself (loopback ports, a subnet, names), so that
//!   several runs at once on one machine do not interfere.
//! - `sum`: a run's counts as JSON and the sum of several runs' (`--json`, `--runs`, `sum`).
//!
//! `baton-chaos --seconds 300 --seed 7` runs it from the command line (`--runs 4` runs four
//! seeds at once and sums them); `tests/e2e` runs a short one in CI.

pub mod check;
pub mod cluster;
pub mod commit;
pub mod disk;
pub mod faults;
pub mod freeze;
pub mod gpu_faults;
pub mod history;
pub mod load;
pub mod net;
pub mod observe;
mod rng;
pub mod run;
pub mod slot;
pub mod sum;
pub mod unkillable;

pub use check::Report;
pub use run::{Config, run};
