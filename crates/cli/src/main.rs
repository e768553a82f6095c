//! The single `baton` binary. Each subcommand lives in its own module.

mod agent;
mod sim;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "baton", version, about = "A GPU-cluster scheduler with Raft-replicated state")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the real scheduler against a scenario file on a virtual clock (what-if).
    Sim(sim::SimArgs),
    /// Run the worker agent on a GPU node: follow the leader, run job replicas, serve their logs.
    Agent(Box<agent::AgentArgs>),
    /// A preemptible test job: counts steps, checkpoints on SIGTERM/SIGUSR1, resumes.
    #[command(hide = true)]
    Workload(agent::WorkloadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Agent(args) => agent::run(*args),
        Command::Workload(args) => agent::workload(args),
    }
}
