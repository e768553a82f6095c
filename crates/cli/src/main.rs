//! The single `baton` binary: clap wiring only; each subcommand lives in the library.

use std::process::ExitCode;

use baton_cli::{agent, bench, client, dev, init, server, sim, tls};
use clap::{Parser, Subcommand};

/// mimalloc rather than the system's allocator: a leader's round clones the state, plans and
/// drops the clone, and a cycle after one change can rewrite tens of thousands of waiting
/// jobs' reasons, whose old versions the dropped clone frees; such a round takes 35% less
/// time with mimalloc than with glibc's malloc (`cargo bench -p baton-sched --bench rounds`
/// against `--bench rounds-mimalloc`; BENCHMARKS.md has the live figures before and after).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Server(Box<server::ServerArgs>),
    /// Start a local HA cluster (3 replicas, 2 agents with development GPUs); --demo plays a
    /// preemption story live.
    Dev(dev::DevArgs),
    /// Measure a local cluster (latency of starts and preemptions).
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Client(Box<client::ClientCommand>),
    /// Run the worker agent on a GPU node: follow the leader, run job replicas, serve their logs.
    Agent(Box<agent::AgentArgs>),
    /// Be the container's PID 1 for the agent: keep a command running (restart it when it
    /// exits), reap orphans, pass SIGTERM on. `baton init -- baton agent ...`
    Init(init::InitArgs),
    /// Make the cluster's certificate authority and the certificates of its replicas, agents
    /// and clients (mutual TLS).
    Tls(tls::TlsArgs),
    /// A preemptible test job: counts steps, checkpoints on SIGTERM/SIGUSR1, resumes.
    #[command(hide = true)]
    Workload(agent::WorkloadArgs),
}

/// `baton sim ... | head` dies quietly of SIGPIPE when its reader goes away, as other Unix
/// tools do; Rust ignores SIGPIPE, which turns the closed pipe into a panic in `print!`. The
/// client commands keep ignoring it: they write through `Write` and end quietly on a broken
/// pipe, and a server that closes their connection (a TLS server asked for plain HTTP/2)
/// must be an error that says what to do, not a silent death of the process.
fn quiet_on_closed_pipe() {
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Sim(_)) {
        quiet_on_closed_pipe();
    }
    match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Server(args) => server::run(*args),
        Command::Dev(args) => dev::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Client(cmd) => client::execute(*cmd),
        Command::Agent(args) => agent::run(*args),
        Command::Init(args) => init::run(args),
        Command::Tls(args) => tls::run(args),
        Command::Workload(args) => agent::workload(args),
    }
}
