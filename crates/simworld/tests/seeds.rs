//! Seeds of the whole-cluster simulation: none may break a promise; one seed run twice gives
//! one history, byte for byte; and each planted bug is found. `BATON_SIM_SEEDS=N` runs more
//! seeds (the release CLI is faster: `baton-chaos sim --seeds 0..N`).

use baton_simworld::{Options, Outcome, Sabotage, run_seed};

/// Seeds a plain `cargo test` runs.
const CI_SEEDS: u64 = 4;
/// Simulated minutes of load per seed in CI.
const CI_MINUTES: u64 = 2;
/// Seeds tried for each planted bug before the test gives up on finding it.
const SABOTAGE_SEEDS: u64 = 12;

fn describe(o: &Outcome) -> String {
    format!("{}\n{}\n--- history ---\n{}", baton_simworld::seeds::line(o), o.violations.join("\n"), o.tail.join("\n"))
}

fn options() -> Options {
    Options { minutes: CI_MINUTES, ..Options::default() }
}

#[test]
fn one_seed_twice_gives_one_history() {
    let opts = Options { minutes: 1, ..Options::default() };
    let (a, b) = (run_seed(7, &opts), run_seed(7, &opts));
    assert!(a.violations.is_empty(), "{}", describe(&a));
    assert!(a.starts > 0 && a.applied > 0, "the run did nothing: {}", describe(&a));
    assert_eq!(a.digest, b.digest, "seed 7 gave two histories:\n{}\n\n{}", describe(&a), describe(&b));
    let other = run_seed(8, &opts);
    assert_ne!(a.digest, other.digest, "two seeds gave one history");
}

#[test]
fn seeds_under_faults_keep_every_promise() {
    let seeds = std::env::var("BATON_SIM_SEEDS")
        .ok()
        .map(|s| s.parse::<u64>().expect("BATON_SIM_SEEDS must be a whole number of seeds"))
        .unwrap_or(CI_SEEDS);
    let summary = baton_simworld::seeds::run(0..seeds, &options(), false, |l| println!("{l}"));
    println!("{}", summary.text());
    assert!(summary.failed.is_empty(), "failing seeds: {:?} (see their lines above)", summary.failed);
    assert!(summary.faults > 0 && summary.starts > 0, "vacuous: {}", summary.text());
}

/// The first seed that finds `sabotage`, with what it found.
fn found(sabotage: Sabotage, wanted: &str) -> (u64, String) {
    let opts = Options { sabotage: Some(sabotage), minutes: 3, ..Options::default() };
    for seed in 0..SABOTAGE_SEEDS {
        let o = run_seed(seed, &opts);
        if let Some(v) = o.violations.iter().find(|v| v.contains(wanted)) {
            return (seed, v.clone());
        }
    }
    panic!("{sabotage:?}: no violation naming {wanted:?} in {SABOTAGE_SEEDS} seeds");
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
