//! `baton-chaos`: a chaos run from the command line (see the crate's documentation).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "baton-chaos", about = "Inject faults into a local baton cluster and check its promises")]
struct Args {
    /// The baton binary (default: `baton` beside this program).
    #[arg(long)]
    baton: Option<PathBuf>,
    /// How long to inject faults.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the run's directory (logs and witness records) even when it passes.
    #[arg(long)]
    keep_dir: bool,
    /// Inject process faults only. Without it the run needs network namespaces (root, `ip`,
    /// `nft`) for its network partitions, and fails, naming what is missing, without them.
    #[arg(long, conflicts_with = "only_partitions")]
    no_partitions: bool,
    /// Inject network partitions only (no process kills or pauses).
    #[arg(long, conflicts_with = "preemption_kills")]
    only_partitions: bool,
    /// Kill the leader right after each preemption commits, and nothing else (no network
    /// namespaces needed): many leader kills mid-preemption in a short run.
    #[arg(long, conflicts_with = "no_partitions")]
    preemption_kills: bool,
    /// Run replica 2's wall clock 7 s ahead and replica 3's 7 s behind, n1's agent's 5 s
    /// ahead and n2's 5 s behind, each stepped to the opposite offset halfway through the
    /// run (needs libfaketime).
    #[arg(long)]
    clock_offsets: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let baton = match args.baton {
        Some(b) => b,
        None => match std::env::current_exe() {
            Ok(me) => me.with_file_name("baton"),
            Err(e) => {
                eprintln!("error: cannot find this program's directory ({e}); give --baton");
                return ExitCode::FAILURE;
            }
        },
    };
    if !baton.is_file() {
        eprintln!(
            "error: {} is not a baton binary (build it: cargo build --release --bin baton; or give --baton)",
            baton.display()
        );
        return ExitCode::FAILURE;
    }
    let mut cfg = baton_chaos::Config::new(baton, args.seconds, args.seed);
    cfg.keep_dir = args.keep_dir;
    cfg.clock_offsets = args.clock_offsets;
    cfg.mix = match (args.no_partitions, args.only_partitions, args.preemption_kills) {
        (_, _, true) => baton_chaos::faults::Mix::PreemptionKills,
        (true, _, _) => baton_chaos::faults::Mix::Processes,
        (false, true, _) => baton_chaos::faults::Mix::Partitions,
        (false, false, false) => baton_chaos::faults::Mix::All,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = match rt.block_on(baton_chaos::run(&cfg)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{report}");
    if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
