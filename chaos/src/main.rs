//! `baton-chaos`: a chaos run from the command line (see the crate's documentation).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use baton_chaos::sum::Tally;
use clap::{Parser, Subcommand};

/// Bound on the runs one `--runs` starts at once: each is a cluster of six processes and its
/// jobs, and a machine holds `baton_chaos::slot::SLOTS` clusters.
const MAX_RUNS: u64 = 32;
/// Between the starts of two runs of `--runs`: clusters that start together on a small
/// machine elect their leaders slowly.
const STAGGER_MS: u64 = 3_000;
/// How often `--runs` looks whether its runs have ended, while it also waits for a signal.
const WAIT_POLL_MS: u64 = 200;
/// The exit status of a run stopped by a signal (128 + SIGTERM's number, as a shell says).
const STOPPED_EXIT: u8 = 143;
/// Bound on ending a stopped run's tasks once its cluster is torn down.
const SHUTDOWN_S: u64 = 5;

#[derive(Parser, Debug)]
#[command(name = "baton-chaos", about = "Inject faults into a local baton cluster and check its promises")]
#[command(args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// The baton binary (default: `baton` beside this program).
    #[arg(long)]
    baton: Option<PathBuf>,
    /// How long to inject faults.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The run's seed; with `--runs N`, the first of N seeds in a row.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the run's directory (logs and witness records) even when it passes.
    #[arg(long)]
    keep_dir: bool,
    /// Inject process faults only. Without it the run needs network namespaces (root, `ip`,
    /// `nft`) for its network partitions, and fails, naming what is missing, without them.
    #[arg(long, conflicts_with_all = ["only_partitions", "only_cuts"])]
    no_partitions: bool,
    /// Inject network partitions only (no process kills or pauses).
    #[arg(long, conflicts_with_all = ["preemption_kills", "only_cuts"])]
    only_partitions: bool,
    /// Inject only the five partition kinds of issue 9, a fifth each: a replica cut off, the
    /// leader cut from its peers, an agent cut off past the heartbeat timeout, a rack cut
    /// off, a one-way cut (no lossy link, no process fault).
    #[arg(long, conflicts_with = "preemption_kills")]
    only_cuts: bool,
    /// Kill the leader right after each preemption commits, and nothing else (no network
    /// namespaces needed): many leader kills mid-preemption in a short run.
    #[arg(long, conflicts_with = "no_partitions")]
    preemption_kills: bool,
    /// Brisk faults: the next fault as soon as the cluster is whole again after the last
    /// (every replica answers and names one leader, every node ready) and 0.2-0.5 s more,
    /// instead of 1-2.5 s; outages keep their lower bounds, lose most of their upper ones.
    #[arg(long)]
    brisk: bool,
    /// Run replica 2's wall clock 7 s ahead and replica 3's 7 s behind, n1's agent's 5 s
    /// ahead and n2's 5 s behind, each stepped to the opposite offset halfway through the
    /// run (needs libfaketime).
    #[arg(long, conflicts_with = "clock_rates")]
    clock_offsets: bool,
    /// Run replica 2's clocks (wall, monotonic, boot) 1 % fast and replica 3's 1 % slow, the
    /// agents' true: the drift `D` of the timing argument (needs libfaketime).
    #[arg(long)]
    clock_rates: bool,
    /// Leave slow disks out of the process faults. With them (the default) a run that draws
    /// process faults needs root, a block IO cgroup controller (v1 blkio or v2 io) and the
    /// temporary directory on a block device, and fails up front, naming what is missing,
    /// without them.
    #[arg(long, conflicts_with = "only_slow_disks")]
    no_slow_disks: bool,
    /// Inject only the fault kinds of issue 31, alike: an agent killed and its journal wiped
    /// while its processes live, a node rebooted past the heartbeat timeout (both need the
    /// agents to hold their replicas in cgroups: root), the leader's clock stepped days
    /// ahead (needs libfaketime). No network namespaces needed.
    #[arg(long, conflicts_with_all = ["no_partitions", "only_partitions", "only_cuts", "preemption_kills", "only_slow_disks", "clock_offsets", "clock_rates"])]
    only_new_kinds: bool,
    /// Inject slow disks only (needs what slow disks need, see `--no-slow-disks`).
    #[arg(long, conflicts_with_all = ["no_partitions", "only_partitions", "only_cuts", "preemption_kills"])]
    only_slow_disks: bool,
    /// Percent of the jobs that misbehave: ignore their stop signal, go on saving checkpoints
    /// after it, or (where every agent holds its replicas in cgroups) leave a process behind
    /// outside their session. 0 runs only cooperative jobs.
    #[arg(long, value_name = "PERCENT", default_value_t = baton_chaos::load::ADVERSARIAL_PERCENT, value_parser = clap::value_parser!(u64).range(0..=100))]
    adversarial_percent: u64,
    /// Also write the run's counts (faults by kind and protocol state, jobs, violations) to
    /// FILE as JSON, for `baton-chaos sum`.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run N seeds at once (`--seed`, `--seed`+1, ...), each its own cluster and process,
    /// and print their sum; each run's output and counts go to `--out`.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_RUNS))]
    runs: u64,
    /// With `--runs`: the directory for each run's output (`seed-N.log`) and counts
    /// (`seed-N.json`); default a new directory under the temporary one.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Sum the counts of runs (`--json` files): faults by kind and protocol state, leader
    /// kills right after a preemption, partitions of each kind, jobs, violations.
    Sum {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// The whole cluster in a deterministic simulation (no processes, no real time): three
    /// replicas, agents and a client over a simulated network, under faults drawn from each
    /// seed. One line per seed with its history's digest (the same seed gives the same
    /// digest), then a summary; a failing seed prints the command that replays it.
    Sim {
        /// Seeds to run, `A..B` (B excluded) or one seed.
        #[arg(long, value_parser = parse_seeds)]
        seeds: std::ops::Range<u64>,
        /// Simulated minutes of load under faults per seed (settling comes on top).
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        /// Simulated hours of load per seed, instead of `--minutes`.
        #[arg(long, conflicts_with = "minutes")]
        hours: Option<u64>,
        /// Nodes (each with an agent and 8 GPUs).
        #[arg(long, default_value_t = 16)]
        nodes: u64,
        /// Simulated milliseconds one step advances.
        #[arg(long, default_value_t = 10)]
        tick_ms: u64,
        /// No faults: the load alone.
        #[arg(long)]
        no_faults: bool,
        /// Each replica's clock is off by up to this many milliseconds, either way.
        #[arg(long, default_value_t = 5_000)]
        clock_offset_ms: u64,
        /// Each host's clock runs fast or slow by up to this many parts per million, either
        /// way (the default keeps two clocks within the 1 % the lease's timing argument
        /// allows; more shows what breaks past it).
        #[arg(long, default_value_t = baton_simworld::clocks::DRIFT_PPM)]
        clock_drift_ppm: u64,
        /// Of every hundred jobs, how many have processes that misbehave: one rank crashes
        /// partway with a code, or the ranks ignore the stop signal (0: all cooperate).
        #[arg(long, default_value_t = baton_simworld::world::ADVERSARIAL_PERCENT)]
        adversarial_percent: u64,
        /// Replicas besides the three voters, members of nothing at first: now and then the
        /// operator adds one and removes a voter, whose machine goes away for good; a new
        /// machine joins as a spare under a new id (0: no replacements).
        #[arg(long, default_value_t = baton_simworld::world::SPARES)]
        spares: u64,
        /// Of every hundred seeds, how many start their replicas on an older build (one that
        /// reads data formats only up to a drawn one) and upgrade them one at a time under
        /// the load and the faults (0: every replica runs this build).
        #[arg(long, default_value_t = baton_simworld::world::UPGRADE_PERCENT)]
        upgrade_percent: u64,
        /// Print each seed's last history lines, not only a failing one's.
        #[arg(long)]
        history: bool,
        /// How many of the last history lines are kept to print (the whole story of a
        /// failing seed, when large enough); at most 1,000,000.
        #[arg(long, default_value_t = baton_simworld::history::KEPT_LINES)]
        history_lines: usize,
        /// Seeds run at once, each in a process of its own (default: one per core); lines
        /// are printed in seed order whatever the number.
        #[arg(long)]
        jobs: Option<usize>,
        /// Run the one seed given here and print its outcome as JSON (what each seed's own
        /// process does for the parent).
        #[arg(long, hide = true)]
        child: bool,
    },
}

/// `A..B` or `A`.
fn parse_seeds(s: &str) -> Result<std::ops::Range<u64>, String> {
    let bad = |why: &str| format!("--seeds {s:?}: {why} (give A..B, B excluded, or one seed)");
    let (a, b) = match s.split_once("..") {
        Some((a, b)) => (
            a.parse::<u64>().map_err(|_| bad("A is not a number"))?,
            b.parse::<u64>().map_err(|_| bad("B is not a number"))?,
        ),
        None => {
            let a = s.parse::<u64>().map_err(|_| bad("not a number"))?;
            (a, a.saturating_add(1))
        }
    };
    if b <= a {
        return Err(bad("the range is empty"));
    }
    if b - a > baton_simworld::seeds::MAX_SEEDS {
        return Err(bad(&format!("more than {} seeds", baton_simworld::seeds::MAX_SEEDS)));
    }
    Ok(a..b)
}

fn sim(cmd: &Cmd) -> ExitCode {
    let Cmd::Sim {
        seeds,
        minutes,
        hours,
        nodes,
        tick_ms,
        no_faults,
        clock_offset_ms,
        clock_drift_ppm,
        adversarial_percent,
        spares,
        upgrade_percent,
        history,
        history_lines,
        jobs,
        child,
    } = cmd
    else {
        return ExitCode::FAILURE;
    };
    if !baton_simworld::determinism::SEEDED {
        eprintln!("error: {}", baton_simworld::determinism::UNSEEDED);
        return ExitCode::FAILURE;
    }
    let minutes = hours.map_or(*minutes, |h| h.saturating_mul(60));
    if *nodes == 0 || minutes == 0 || *tick_ms == 0 {
        eprintln!("error: --nodes, --minutes and --tick-ms must be at least 1");
        return ExitCode::FAILURE;
    }
    if *history_lines == 0 || *history_lines > baton_simworld::history::MAX_KEPT_LINES {
        eprintln!("error: --history-lines must be 1 to {}", baton_simworld::history::MAX_KEPT_LINES);
        return ExitCode::FAILURE;
    }
    if *clock_drift_ppm > baton_simworld::clocks::MAX_DRIFT_PPM {
        eprintln!(
            "error: --clock-drift-ppm must be at most {} (a clock that stops or runs backwards is no clock)",
            baton_simworld::clocks::MAX_DRIFT_PPM
        );
        return ExitCode::FAILURE;
    }
    if *spares > baton_simworld::world::MAX_SPARES {
        eprintln!("error: --spares must be 0 to {}, not {spares}", baton_simworld::world::MAX_SPARES);
        return ExitCode::FAILURE;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let jobs = jobs.unwrap_or(cores.min(baton_simworld::seeds::MAX_JOBS));
    if jobs == 0 || jobs > baton_simworld::seeds::MAX_JOBS {
        eprintln!("error: --jobs must be 1 to {}, not {jobs}", baton_simworld::seeds::MAX_JOBS);
        return ExitCode::FAILURE;
    }
    if *upgrade_percent > 100 {
        eprintln!("error: --upgrade-percent must be 0 to 100 (seeds in a hundred), not {upgrade_percent}");
        return ExitCode::FAILURE;
    }
    if *adversarial_percent > 100 {
        eprintln!("error: --adversarial-percent must be 0 to 100 (jobs in a hundred), not {adversarial_percent}");
        return ExitCode::FAILURE;
    }
    if *nodes > baton_simworld::world::MAX_NODES || minutes > baton_simworld::world::MAX_MINUTES {
        eprintln!(
            "error: at most {} nodes and {} minutes (a week) a seed",
            baton_simworld::world::MAX_NODES,
            baton_simworld::world::MAX_MINUTES
        );
        return ExitCode::FAILURE;
    }
    let opts = baton_simworld::Options {
        minutes,
        nodes: *nodes,
        tick_ms: *tick_ms,
        faults: !no_faults,
        clock_offset_ms: *clock_offset_ms,
        clock_drift_ppm: *clock_drift_ppm,
        adversarial_percent: *adversarial_percent,
        spares: *spares,
        upgrade_percent: *upgrade_percent,
        history_lines: *history_lines,
        ..baton_simworld::Options::default()
    };
    if *child {
        trace_to_stderr();
        let o = baton_simworld::run_seed(seeds.start, &opts);
        println!("{}", serde_json::to_string(&o).expect("an outcome encodes"));
        return ExitCode::SUCCESS;
    }
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("error: cannot find this program to run each seed in a process of its own: {e}");
            return ExitCode::FAILURE;
        }
    };
    let summary = baton_simworld::seeds::run(
        seeds.clone(),
        &opts,
        *history,
        jobs,
        |l| println!("{l}"),
        |seed| seed_in_own_process(&me, seed, &opts),
    );
    println!("{}", summary.text());
    if summary.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// With `BATON_SIM_LOG` set (a tracing filter, e.g. `openraft=debug`), a seed's process logs
/// to stderr what its libraries trace, each line stamped with simulated milliseconds: how
/// one replays a failing seed in detail.
fn trace_to_stderr() {
    struct SimTime;
    impl tracing_subscriber::fmt::time::FormatTime for SimTime {
        fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
            write!(w, "{:>9}ms", baton_simworld::now_ms())
        }
    }
    let Ok(filter) = std::env::var("BATON_SIM_LOG") else { return };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("warning: BATON_SIM_LOG={filter:?} is no tracing filter ({e}); logging nothing");
        tracing_subscriber::EnvFilter::new("off")
    });
    tracing_subscriber::fmt().with_env_filter(filter).with_timer(SimTime).with_writer(std::io::stderr).init();
}

/// Runs `seed` in a child process; a child that fails is a violation of its own.
fn seed_in_own_process(me: &std::path::Path, seed: u64, opts: &baton_simworld::Options) -> baton_simworld::Outcome {
    let out = std::process::Command::new(me)
        .args(["sim", "--child", "--seeds", &seed.to_string()])
        .args(["--minutes", &opts.minutes.to_string(), "--nodes", &opts.nodes.to_string()])
        .args(["--tick-ms", &opts.tick_ms.to_string(), "--clock-offset-ms", &opts.clock_offset_ms.to_string()])
        .args(["--clock-drift-ppm", &opts.clock_drift_ppm.to_string()])
        .args(["--adversarial-percent", &opts.adversarial_percent.to_string()])
        .args(["--spares", &opts.spares.to_string(), "--upgrade-percent", &opts.upgrade_percent.to_string()])
        .args(["--history-lines", &opts.history_lines.to_string()])
        .args(if opts.faults { &[][..] } else { &["--no-faults"][..] })
        .stderr(std::process::Stdio::inherit())
        .output();
    let parsed = out.as_ref().ok().and_then(|o| serde_json::from_slice::<baton_simworld::Outcome>(&o.stdout).ok());
    parsed.unwrap_or_else(|| baton_simworld::Outcome {
        seed,
        violations: vec![format!("the seed's process failed: {:?}", out.map(|o| o.status))],
        ..baton_simworld::Outcome::default()
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    match &args.command {
        Some(Cmd::Sum { files }) => return sum(files),
        Some(cmd @ Cmd::Sim { .. }) => return sim(cmd),
        None => {}
    }
    let baton = match &args.baton {
        Some(b) => b.clone(),
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
    if args.runs > 1 {
        return many(&args, &baton);
    }
    one(&args, baton)
}

fn one(args: &Args, baton: PathBuf) -> ExitCode {
    let started = Instant::now();
    let mut cfg = baton_chaos::Config::new(baton, args.seconds, args.seed);
    cfg.keep_dir = args.keep_dir;
    cfg.clock_offsets = args.clock_offsets;
    cfg.clock_rates = args.clock_rates;
    cfg.brisk = args.brisk;
    cfg.slow_disks = !args.no_slow_disks;
    cfg.adversarial_percent = args.adversarial_percent;
    cfg.mix = match (args.no_partitions, args.only_partitions, args.only_cuts, args.preemption_kills) {
        _ if args.only_slow_disks => baton_chaos::faults::Mix::SlowDisks,
        _ if args.only_new_kinds => baton_chaos::faults::Mix::NewKinds,
        (_, _, _, true) => baton_chaos::faults::Mix::PreemptionKills,
        (true, _, _, _) => baton_chaos::faults::Mix::Processes,
        (false, true, _, _) => baton_chaos::faults::Mix::Partitions,
        (false, false, true, _) => baton_chaos::faults::Mix::Cuts,
        (false, false, false, false) => baton_chaos::faults::Mix::All,
    };
    // A stop signal drops the run, and with it the cluster: its processes killed, its
    // namespaces and slow disks removed (each process of the cluster leads a session of its
    // own, so a terminal's Ctrl-C reaches none of them).
    let Some((rt, mut signals)) = runtime_with_signals(tokio::runtime::Builder::new_multi_thread()) else {
        return ExitCode::FAILURE;
    };
    let outcome = rt.block_on(async {
        tokio::select! {
            r = baton_chaos::run(&cfg) => Ok(r),
            sig = signals.first() => Err(sig),
        }
    });
    let report = match outcome {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        Err(sig) => {
            // The run's spawned tasks end with the runtime; none should take long.
            rt.shutdown_timeout(std::time::Duration::from_secs(SHUTDOWN_S));
            eprintln!("chaos: stopped by {sig}; the cluster is torn down, no report");
            return ExitCode::from(STOPPED_EXIT);
        }
    };
    print!("{report}");
    if let Some(path) = &args.json
        && let Err(e) = Tally::of(&report, args.seed, started.elapsed().as_secs_f64()).write(path)
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The arguments of one run of `--runs`: these, for `seed`, writing its counts to `json`.
fn child_args(args: &Args, baton: &Path, seed: u64, json: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--baton".into(),
        baton.display().to_string(),
        "--seconds".into(),
        args.seconds.to_string(),
        "--seed".into(),
        seed.to_string(),
        "--json".into(),
        json.display().to_string(),
        "--adversarial-percent".into(),
        args.adversarial_percent.to_string(),
    ];
    let flags = [
        (args.keep_dir, "--keep-dir"),
        (args.no_partitions, "--no-partitions"),
        (args.only_partitions, "--only-partitions"),
        (args.only_cuts, "--only-cuts"),
        (args.preemption_kills, "--preemption-kills"),
        (args.brisk, "--brisk"),
        (args.clock_offsets, "--clock-offsets"),
        (args.clock_rates, "--clock-rates"),
        (args.no_slow_disks, "--no-slow-disks"),
        (args.only_slow_disks, "--only-slow-disks"),
        (args.only_new_kinds, "--only-new-kinds"),
    ];
    a.extend(flags.iter().filter(|(on, _)| *on).map(|(_, flag)| flag.to_string()));
    a
}

/// `--runs N`: N runs at once, each a process of this program with its own cluster (see
/// `baton_chaos::slot` for why they do not interfere), then their sum.
fn many(args: &Args, baton: &Path) -> ExitCode {
    let out = match &args.out {
        Some(dir) => std::fs::create_dir_all(dir).map(|()| dir.clone()),
        None => tempfile::Builder::new().prefix("baton-chaos-runs-").tempdir().map(|d| d.keep()),
    };
    let out = match out {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: cannot make the runs' directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("error: cannot find this program ({e})");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "chaos: {} runs at once, seeds {}..={}; output in {}",
        args.runs,
        args.seed,
        args.seed + args.runs - 1,
        out.display()
    );
    // Caught from here on: a signal while the runs start is passed on once they have.
    let Some((rt, mut signals)) = runtime_with_signals(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let mut children = Vec::new();
    for seed in args.seed..args.seed + args.runs {
        if seed != args.seed {
            std::thread::sleep(std::time::Duration::from_millis(STAGGER_MS));
        }
        let json = out.join(format!("seed-{seed}.json"));
        let _ = std::fs::remove_file(&json);
        let log = match std::fs::File::create(out.join(format!("seed-{seed}.log"))) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: cannot make seed {seed}'s log: {e}");
                return ExitCode::FAILURE;
            }
        };
        let spawned = log.try_clone().and_then(|err| {
            std::process::Command::new(&me)
                .args(child_args(args, baton, seed, &json))
                .stdin(std::process::Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
        });
        match spawned {
            Ok(child) => children.push((seed, json, child)),
            Err(e) => {
                eprintln!("error: cannot start the run of seed {seed}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let stopped_by = wait_for_runs(&rt, &mut signals, &mut children);
    let mut total = Tally::default();
    for (seed, json, mut child) in children {
        let status = child.wait();
        let tally = match Tally::read(&json) {
            Ok(t) => t,
            Err(e) => Tally::no_report(seed, &format!("{e} ({status:?}); see seed-{seed}.log")),
        };
        eprintln!("chaos: seed {seed} done: {} faults, {} violations", tally.faults, tally.violations.len());
        total.add(&tally);
    }
    print!("{total}");
    println!("each run's output and counts: {}", out.display());
    if let Some(sig) = stopped_by {
        eprintln!("chaos: stopped by {sig}; every run was told to stop and tore its cluster down");
        return ExitCode::from(STOPPED_EXIT);
    }
    if total.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Waits for every run of `--runs` to end. A stop signal (SIGTERM, SIGINT) is passed on to
/// each run still going, which then tears its cluster down: the name of the signal, if one
/// came.
fn wait_for_runs(
    rt: &tokio::runtime::Runtime,
    signals: &mut StopSignals,
    children: &mut [(u64, PathBuf, std::process::Child)],
) -> Option<&'static str> {
    rt.block_on(async {
        let mut stopped_by = None;
        loop {
            let running: Vec<u32> =
                children.iter_mut().filter_map(|(_, _, c)| matches!(c.try_wait(), Ok(None)).then(|| c.id())).collect();
            if running.is_empty() {
                return stopped_by;
            }
            tokio::select! {
                sig = signals.first(), if stopped_by.is_none() => {
                    eprintln!("chaos: {sig}: telling {} runs to stop", running.len());
                    for pid in running {
                        // SAFETY: kill signals our own child, not yet reaped (so its pid is
                        // not reused).
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                    }
                    stopped_by = Some(sig);
                }
                () = tokio::time::sleep(std::time::Duration::from_millis(WAIT_POLL_MS)) => {}
            }
        }
    })
}

/// A runtime from `builder`, and the stop signals caught from now on; `None` (said) when it
/// cannot start.
fn runtime_with_signals(mut builder: tokio::runtime::Builder) -> Option<(tokio::runtime::Runtime, StopSignals)> {
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return None;
        }
    };
    let signals = {
        let _in = rt.enter();
        StopSignals::new()
    };
    Some((rt, signals))
}

/// SIGTERM and SIGINT, caught from its making (inside a runtime) on; `None` where they
/// cannot be, and then `first` never ends.
struct StopSignals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl StopSignals {
    fn new() -> StopSignals {
        use tokio::signal::unix::{SignalKind, signal};
        StopSignals(signal(SignalKind::terminate()).ok().zip(signal(SignalKind::interrupt()).ok()))
    }

    /// The first of them to come, by name.
    async fn first(&mut self) -> &'static str {
        let Some((term, int)) = &mut self.0 else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}

fn sum(files: &[PathBuf]) -> ExitCode {
    let mut total = Tally::default();
    for f in files {
        match Tally::read(f) {
            Ok(t) => total.add(&t),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{total}");
    if total.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
