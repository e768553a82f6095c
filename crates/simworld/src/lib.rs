//! The whole cluster in a deterministic simulation. One seed drives turmoil's simulated
//! network and clock; on it run three real replicas (openraft, the replicated model, its
//! store on a simulated disk that loses unsynced writes at a power cut), a leader on each
//! that plans with the real scheduler and publishes the real directives
//! (`baton_server::desired`), agents that run and stop simulated processes under leases,
//! and a client that submits, cancels and rewrites queues. Faults are drawn from the same
//! seed. The checker knows true time, so its checks are exact.
//!
//! Layout:
//! - `world`: one seeded run: hosts, the step loop, the checks after each step, the outcome.
//! - `replica`: a replica host: the raft server and its leader.
//! - `leader`: what a leader does beyond the log: cycles, liveness (the server's
//!   `baton_server::liveness::Silences`), leases, reports.
//! - `agent`: a node's agent: beats and leases, and the real agent's reconciliation
//!   (`baton_agent::reconcile::plan`) carried out on simulated processes.
//! - `wire`: the datagrams between agents and leaders.
//! - `truth`: what really ran where and when (the processes), and its exact checks.
//! - `load`: the client: setup, submits, cancels, queue writes, linearizable reads, and
//!   what was acknowledged.
//! - `faults`: the fault schedule drawn from the seed.
//! - `progress`: liveness once the faults heal: every job ends or waits for a named reason
//!   (the state's directives held against the processes).
//! - `operator`: replacements of voters by spare replicas on new machines, drawn from the
//!   seed.
//! - `hosts`: starting replica hosts, at the start and mid-run.
//! - `upgrades`: replicas that start on an older build and are upgraded one at a time.
//! - `seeds`: many seeds, the line each prints, the replay command of a failing one.
//! - `determinism`: what a seed needs to replay besides itself (tokio's choices seeded).
//! - `history`: the run's history: a digest of every line, the last lines kept.
//! - `timing`: every interval and bound of the simulated cluster.
//! - `clocks`: each host's clock rate (drift), on which it times leases and silences.
//!
//! Not yet here (issue 32): the agent decides by the real agent's rules, but its beats,
//! leases and processes, and the leader beyond its directives and its silences, are this
//! crate's own small copies of the protocol, not the real agent's and server's code (those
//! become pure cores first); openraft's timers do not drift (the leases and silences do); processes crash and
//! ignore stop signals (`truth::Adversity`) but save no files, so none writes after its stop;
//! voters are replaced under new ids (`operator`), and replicas upgraded from an older
//! build (`upgrades`), but an older build is this one saying it reads older formats: its
//! apply is today's.

pub mod agent;
pub mod clocks;
pub mod determinism;
pub mod faults;
pub mod history;
pub mod hosts;
pub mod leader;
pub mod load;
pub mod operator;
pub mod progress;
pub mod replica;
pub mod seeds;
pub mod timing;
pub mod truth;
pub mod upgrades;
pub mod wire;
pub mod world;

pub use truth::Sabotage;
pub use world::{Options, Outcome, run_seed};

/// Milliseconds of simulated time since the run began (inside a host or the step loop).
pub fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

/// The cluster's wall clock in commands: simulated time after a fixed epoch (commands with
/// time 0 would look unset).
pub fn wall_ms() -> u64 {
    timing::EPOCH_MS + now_ms()
}

/// Simulated milliseconds of `sim` (from the step loop, outside any host).
pub fn now_ms_of(sim: &turmoil::Sim<'_>) -> u64 {
    sim.elapsed().as_millis() as u64
}
