//! Seeds of the whole-cluster simulation: none may break a promise; one seed run twice gives
//! one history, byte for byte; and each planted bug is found. `BATON_SIM_SEEDS=N` runs more
//! seeds (the release CLI is faster: `baton-chaos sim --seeds 0..N`).

use baton_simworld::{Options, Outcome, Sabotage, run_seed};

/// Seeds a plain `cargo test` runs, `SEEDS_AT_ONCE` at a time: 4 until stop 86, when test
/// builds began optimizing the runtime, the network stack and the model (the root
/// `Cargo.toml`), and a seed of two minutes fell from about 27 s to about 5 s.
const CI_SEEDS: u64 = 24;
/// Seed processes run side by side (CI's machine has two cores).
const SEEDS_AT_ONCE: u64 = 2;
/// Simulated minutes of load per seed in CI.
const CI_MINUTES: u64 = 2;
/// Seeds tried for each planted bug before the test gives up on finding it. 16 since stop
/// 77: with the twelfth fault's schedule `UnconfirmedGrants` is first found by seed 14.
const SABOTAGE_SEEDS: u64 = 16;
/// The first seed tried for a planted bug, unless it says another: when this was written
/// each was first found by seed 2, but `PartedState` by seed 8 (`cargo test -p
/// baton-simworld --test seeds -- --nocapture found parted` prints which), so the seeds
/// before, minutes of CI's debug build, are skipped. A change that moves a bug to a later
/// seed is still found within `SABOTAGE_SEEDS`.
const FIRST_SABOTAGE_SEED: u64 = 2;

fn describe(o: &Outcome) -> String {
    format!("{}\n{}\n--- history ---\n{}", baton_simworld::seeds::line(o), o.violations.join("\n"), o.tail.join("\n"))
}

/// Runs seed `seed` of `minutes` in a process of its own (this test binary, running only
/// `digest_of_the_seed_in_the_environment`), and returns the line it printed; the process
/// fails if the seed broke a promise. Each run gets a fresh process, as `baton-chaos sim`
/// gives each seed: what the digest is compared with is a seed alone (before tokio's
/// choices were seeded, `baton_simworld::determinism`, a run after another seed in one
/// process could part from it), and the tests of this file run side by side.
fn line_of_seed_alone(seed: u64, minutes: u64) -> String {
    let me = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(me)
        .args(["--ignored", "--exact", "digest_of_the_seed_in_the_environment", "--nocapture"])
        .env("BATON_SIM_SEED", seed.to_string())
        .env("BATON_SIM_MINUTES", minutes.to_string())
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "seed {seed}'s process failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().find(|l| l.starts_with("seed ")).unwrap_or_else(|| panic!("no seed line in: {stdout}")).to_string()
}

/// `line_of_seed_alone` of each seed of `seeds`, `SEEDS_AT_ONCE` at a time, in seed order.
fn lines_of_seeds(seeds: std::ops::Range<u64>, minutes: u64) -> Vec<String> {
    let all: Vec<u64> = seeds.collect();
    let mut lines = Vec::with_capacity(all.len());
    for batch in all.chunks(SEEDS_AT_ONCE as usize) {
        std::thread::scope(|s| {
            let runs: Vec<_> = batch.iter().map(|&seed| s.spawn(move || line_of_seed_alone(seed, minutes))).collect();
            lines.extend(runs.into_iter().map(|r| r.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
        });
    }
    lines
}

#[test]
#[ignore = "a helper: the seed tests above and below run it in processes of their own"]
fn digest_of_the_seed_in_the_environment() {
    let seed: u64 = std::env::var("BATON_SIM_SEED").expect("BATON_SIM_SEED").parse().expect("a seed");
    let minutes: u64 = std::env::var("BATON_SIM_MINUTES").expect("BATON_SIM_MINUTES").parse().expect("minutes");
    let o = run_seed(seed, &Options { minutes, ..Options::default() });
    assert!(o.violations.is_empty(), "{}", describe(&o));
    assert!(o.starts > 0 && o.applied > 0, "the run did nothing: {}", describe(&o));
    assert!(o.faults.values().sum::<u64>() > 0, "no fault was injected: {}", describe(&o));
    println!("{}", baton_simworld::seeds::line(&o).split(" in ").next().unwrap_or_default());
}

#[test]
fn one_seed_twice_gives_one_history() {
    let (a, b) = (line_of_seed_alone(7, 1), line_of_seed_alone(7, 1));
    assert_eq!(a, b, "seed 7 gave two histories");
    assert!(a.contains("digest"), "{a}");
    let other = line_of_seed_alone(8, 1);
    assert_ne!(a.split(" applied").next(), other.split(" applied").next(), "two seeds gave one history");
}

#[test]
fn seeds_under_faults_keep_every_promise() {
    let seeds = std::env::var("BATON_SIM_SEEDS")
        .ok()
        .map(|s| s.parse::<u64>().expect("BATON_SIM_SEEDS must be a whole number of seeds"))
        .unwrap_or(CI_SEEDS);
    let (mut on_slices, mut shared) = (0u64, 0u64);
    for line in lines_of_seeds(0..seeds, CI_MINUTES) {
        println!("{line}");
        let count = |after: &str| {
            let n = line.split(after).nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<u64>().ok());
            n.unwrap_or_else(|| panic!("no count after {after:?} in {line}"))
        };
        on_slices += count(" on slices ");
        shared += count(" shared ");
    }
    assert!(on_slices > 0, "no seed started a rank on MIG slices: the load does not exercise them");
    assert!(shared > 0, "no seed started a rank on a shared GPU: the load does not exercise fractions");
}

/// A seed of one minute may end its load with replicas still to be upgraded (each up to
/// 40 s after the one before); the cluster settles after the last of them. Seed 0 of one
/// minute upgraded r3 at 93 s, and its settling, counted from the load's end, gave up at
/// 121 s (`replicas did not converge`) before r4 was upgraded.
#[test]
fn a_short_seed_settles_after_its_last_upgrade() {
    let o = run_seed(0, &Options { minutes: 1, ..Options::default() });
    assert!(o.violations.is_empty(), "{}", describe(&o));
    let mut upgraded_after_load = o
        .tail
        .iter()
        .filter(|l| l.contains("upgrade: r"))
        .filter_map(|l| l.split_whitespace().next().and_then(|t| t.parse::<f64>().ok()));
    assert!(upgraded_after_load.any(|at| at > 100.0), "no upgrade after the load: {}", describe(&o));
}

/// The first seed from `first` whose run under `opts` breaks a promise naming `wanted`,
/// with what it found.
fn found_in_runs(first: u64, opts: &Options, wanted: &str) -> (u64, String) {
    for seed in first..first + SABOTAGE_SEEDS {
        let o = run_seed(seed, opts);
        if let Some(v) = o.violations.iter().find(|v| v.contains(wanted)) {
            return (seed, v.clone());
        }
    }
    panic!("{opts:?}: no violation naming {wanted:?} in {SABOTAGE_SEEDS} seeds from seed {first}");
}

/// The first seed from `first` that finds `sabotage`, with what it found.
fn found_from(first: u64, sabotage: Sabotage, wanted: &str) -> (u64, String) {
    found_in_runs(first, &Options { sabotage: Some(sabotage), minutes: 3, ..Options::default() }, wanted)
}

fn found(sabotage: Sabotage, wanted: &str) -> (u64, String) {
    found_from(FIRST_SABOTAGE_SEED, sabotage, wanted)
}

/// Clocks that part by far more than the timing argument allows (`baton_proto::lease_fits`:
/// 1 %): an agent's clock slow enough that its lease outlasts a leader's fast-running
/// heartbeat timeout keeps a job's processes running after the job was placed elsewhere.
/// It shows that the drift reaches the lease on both sides; within the bound (every other
/// seed here) nothing breaks. (At 500,000 ppm seeds 2..8 of 3 minutes found nothing: the
/// lease's margin in the simulation, `timing`, is wide.)
#[test]
fn clocks_drifting_past_the_timing_arguments_bound_are_found() {
    let opts = Options { clock_drift_ppm: 800_000, minutes: 3, ..Options::default() };
    let (seed, v) = found_in_runs(FIRST_SABOTAGE_SEED, &opts, "while attempt");
    println!("a drift of 800000 ppm found by seed {seed}: {v}");
}

#[test]
fn processes_that_outlive_their_lease_are_found() {
    let (seed, v) = found(Sabotage::NoWatchdog, "while attempt");
    println!("NoWatchdog found by seed {seed}: {v}");
}

#[test]
fn a_heartbeat_timeout_shorter_than_the_lease_is_found() {
    let (seed, v) = found(Sabotage::EarlyLoss, "while attempt");
    println!("EarlyLoss found by seed {seed}: {v}");
}

#[test]
fn a_deposed_leader_that_keeps_granting_is_found() {
    let (seed, v) = found(Sabotage::UnconfirmedGrants, "while attempt");
    println!("UnconfirmedGrants found by seed {seed}: {v}");
}

#[test]
fn a_replica_whose_state_parted_is_stopped_by_the_state_digest() {
    let (seed, v) = found_from(8, Sabotage::PartedState, "differs from the leader's");
    println!("PartedState found by seed {seed}: {v}");
}

/// A crash told as exit 0 ends its job as a success: the check of every job's end against
/// the exits that really happened (`Truth::check_ending`) finds it.
#[test]
fn an_agent_that_loses_exit_codes_is_found() {
    let (seed, v) = found(Sabotage::LostExitCodes, "succeeded, but no rank 0 of it exited 0");
    println!("LostExitCodes found by seed {seed}: {v}");
}

/// A leader that drops the reports of the ends of ranks whose attempt ended: each holds its GPUs
/// for good, though nothing runs. Every safety check passes such a cluster; the liveness
/// check (`progress`) finds it.
#[test]
fn stops_of_ended_attempts_that_are_never_recorded_are_found_by_the_liveness_check() {
    let (seed, v) = found(Sabotage::CompletingStopsDropped, "its stop there is not complete");
    println!("CompletingStopsDropped found by seed {seed}: {v}");
}
