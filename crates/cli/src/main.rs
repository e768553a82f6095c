//! The single `baton` binary. Each subcommand lives in its own module.

mod logging;
mod server;
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
    /// Run one scheduler replica.
    Server(server::ServerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Server(args) => server::run(args),
    }
}
