//! Many seeds: one line per seed (its digest, what it exercised, its violations), a summary,
//! and for each failing seed the command that replays it and the history before its first
//! violation. What `baton-chaos sim` prints.

use std::fmt::Write as _;
use std::ops::Range;

use crate::world::{Options, Outcome};

/// Seeds one call runs, at most.
pub const MAX_SEEDS: u64 = 1_000_000;

#[derive(Debug, Default)]
pub struct Summary {
    pub seeds: u64,
    pub failed: Vec<u64>,
    pub simulated_ms: u64,
    pub wall_ms: u64,
    pub starts: u64,
    pub faults: u64,
}

/// The line of one seed.
pub fn line(o: &Outcome) -> String {
    let faults: u64 = o.faults.values().sum();
    let verdict = if o.violations.is_empty() { "ok".to_string() } else { format!("{} VIOLATIONS", o.violations.len()) };
    format!(
        "seed {}: digest {:016x} applied {} starts {} on slices {} shared {} suspended {} windows {} waiting {} arrays {} elastic {} crashes {} records {} digests {} bad GPUs {} faults {} replaced {} simulated {} s in {} ms: {verdict}",
        o.seed,
        o.digest,
        o.applied,
        o.starts,
        o.slice_starts,
        o.shared_starts,
        o.suspensions,
        o.windows,
        o.waiting_submits,
        o.arrays,
        o.elastic,
        o.crashes,
        o.records,
        o.digest_checks,
        o.gpu_faults,
        faults,
        o.faults.get("replace-replica").copied().unwrap_or(0),
        o.simulated_ms / 1000,
        o.wall_ms
    )
}

/// What a failing seed prints after its line: the replay command, its violations, and the
/// history's last lines before it stopped.
pub fn failure(o: &Outcome, opts: &Options) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  replay: baton-chaos sim --seeds {}..{} --minutes {} --nodes {} --tick-ms {} --clock-offset-ms {} \
         --clock-drift-ppm {} --adversarial-percent {} --spares {} --upgrade-percent {} --history",
        o.seed,
        o.seed + 1,
        opts.minutes,
        opts.nodes,
        opts.tick_ms,
        opts.clock_offset_ms,
        opts.clock_drift_ppm,
        opts.adversarial_percent,
        opts.spares,
        opts.upgrade_percent
    );
    for v in &o.violations {
        let _ = writeln!(out, "  violation {v}");
    }
    out
}

pub fn history(o: &Outcome) -> String {
    o.tail.iter().map(|l| format!("    {l}\n")).collect()
}

/// Runs `seeds`, each by `one`, printing each line through `print`; the summary.
/// `baton-chaos sim` runs each seed in a process of its own, so that a seed that crashes
/// its process fails alone (what a run once left behind that changed a later seed's
/// history, tokio's unseeded choices, is seeded now: `determinism`).
pub fn run(
    seeds: Range<u64>,
    opts: &Options,
    show_history: bool,
    mut print: impl FnMut(&str),
    mut one: impl FnMut(u64) -> Outcome,
) -> Summary {
    let mut s = Summary::default();
    for seed in seeds {
        let o = one(seed);
        print(&line(&o));
        if !o.violations.is_empty() {
            print(failure(&o, opts).trim_end());
            s.failed.push(seed);
        }
        if show_history || !o.violations.is_empty() {
            print(history(&o).trim_end());
        }
        s.seeds += 1;
        s.simulated_ms += o.simulated_ms;
        s.wall_ms += o.wall_ms;
        s.starts += o.starts;
        s.faults += o.faults.values().sum::<u64>();
    }
    s
}

impl Summary {
    pub fn text(&self) -> String {
        format!(
            "{} seeds, {} failed{}; {} faults, {} process starts; {:.1} simulated hours in {:.1} s",
            self.seeds,
            self.failed.len(),
            if self.failed.is_empty() { String::new() } else { format!(" ({:?})", self.failed) },
            self.faults,
            self.starts,
            self.simulated_ms as f64 / 3_600_000.0,
            self.wall_ms as f64 / 1000.0
        )
    }
}
