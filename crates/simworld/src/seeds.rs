//! Many seeds: one line per seed (its digest, what it exercised, its violations), a summary,
//! and for each failing seed the command that replays it and the history before its first
//! violation. What `baton-chaos sim` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::world::{Options, Outcome};

/// Seeds one call runs, at most.
pub const MAX_SEEDS: u64 = 1_000_000;

#[derive(Debug, Default)]
pub struct Summary {
    pub seeds: u64,
    pub failed: Vec<u64>,
    pub simulated_ms: u64,
    /// The seeds' own times, summed.
    pub wall_ms: u64,
    /// From the first seed's start to the last one's end.
    pub elapsed_ms: u64,
    /// Seeds run at once.
    pub jobs: usize,
    pub starts: u64,
    pub faults: u64,
    /// Decisions refused of plans applied to the state they were made from.
    pub refused: u64,
    /// The longest any seed's state and processes disagreed after its faults healed.
    pub settled_ms: u64,
}

/// The line of one seed.
pub fn line(o: &Outcome) -> String {
    let faults: u64 = o.faults.values().sum();
    let verdict = if o.violations.is_empty() { "ok".to_string() } else { format!("{} VIOLATIONS", o.violations.len()) };
    format!(
        "seed {}: digest {:016x} applied {} starts {} on slices {} shared {} suspended {} windows {} waiting {} arrays {} elastic {} crashes {} records {} digests {} bad GPUs {} unrecorded {} refused {} faults {} replaced {} settled {} ms simulated {} s in {} ms: {verdict}",
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
        o.unrecorded,
        o.refused,
        faults,
        o.faults.get("replace-replica").copied().unwrap_or(0),
        o.settled_ms,
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

/// Seeds run at once, at most (`--jobs`): each is a process of its own.
pub const MAX_JOBS: usize = 256;
/// How far past the first seed not yet printed a free runner may start one. Why: lines
/// are printed in seed order, so the ones finished early wait in memory, and a seed that
/// runs long must not let that queue grow without end.
const MAX_AHEAD: u64 = 1_024;

/// Runs `seeds`, up to `jobs` at a time, each by `one`, printing each line (in seed order)
/// through `print`; the summary. `baton-chaos sim` runs each seed in a process of its own,
/// so that a seed that crashes its process fails alone (what a run once left behind that
/// changed a later seed's history, tokio's unseeded choices, is seeded now: `determinism`).
pub fn run(
    seeds: Range<u64>,
    opts: &Options,
    show_history: bool,
    jobs: usize,
    mut print: impl FnMut(&str),
    one: impl Fn(u64) -> Outcome + Sync,
) -> Summary {
    assert!((1..=MAX_JOBS).contains(&jobs), "jobs {jobs} is not 1 to {MAX_JOBS}");
    let jobs = jobs.min(usize::try_from(seeds.end - seeds.start).unwrap_or(usize::MAX));
    let began = Instant::now();
    let mut s = Summary { jobs, ..Summary::default() };
    let next = AtomicU64::new(seeds.start);
    let printed = AtomicU64::new(seeds.start);
    let (tx, rx) = mpsc::channel::<Outcome>();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let (tx, next, printed, one, end) = (tx.clone(), &next, &printed, &one, seeds.end);
            scope.spawn(move || {
                loop {
                    let seed = next.fetch_add(1, Ordering::SeqCst);
                    if seed >= end {
                        return;
                    }
                    while seed >= printed.load(Ordering::SeqCst) + MAX_AHEAD {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if tx.send(one(seed)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut finished = BTreeMap::new();
        for o in rx {
            finished.insert(o.seed, o);
            while let Some(o) = finished.remove(&printed.load(Ordering::SeqCst)) {
                s.add(&o, opts, show_history, &mut print);
                printed.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    s.elapsed_ms = began.elapsed().as_millis() as u64;
    s
}

impl Summary {
    /// Prints seed `o`'s line, and its replay command and history where it failed or
    /// `show_history` asks; counts it.
    fn add(&mut self, o: &Outcome, opts: &Options, show_history: bool, print: &mut impl FnMut(&str)) {
        print(&line(o));
        if !o.violations.is_empty() {
            print(failure(o, opts).trim_end());
            self.failed.push(o.seed);
        }
        if show_history || !o.violations.is_empty() {
            print(history(o).trim_end());
        }
        self.seeds += 1;
        self.simulated_ms += o.simulated_ms;
        self.wall_ms += o.wall_ms;
        self.starts += o.starts;
        self.refused += o.refused;
        self.faults += o.faults.values().sum::<u64>();
        self.settled_ms = self.settled_ms.max(o.settled_ms);
    }

    pub fn text(&self) -> String {
        format!(
            "{} seeds, {} failed{}; {} faults, {} process starts, {} decisions refused on their own state; settled within {} ms of healing (bound {}); \
             {:.1} simulated hours in {:.1} s, {} at a time ({:.1} s of seeds' time)",
            self.seeds,
            self.failed.len(),
            if self.failed.is_empty() { String::new() } else { format!(" ({:?})", self.failed) },
            self.faults,
            self.starts,
            self.refused,
            self.settled_ms,
            crate::progress::LIVENESS_BOUND_MS,
            self.simulated_ms as f64 / 3_600_000.0,
            self.elapsed_ms as f64 / 1000.0,
            self.jobs,
            self.wall_ms as f64 / 1000.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds run side by side finish out of order; their lines come in seed order, and
    /// the summary counts each seed once.
    #[test]
    fn seeds_run_side_by_side_print_in_seed_order() {
        let one = |seed: u64| {
            // The first seeds take longest, so later ones finish first.
            std::thread::sleep(Duration::from_millis(5 * (8 - seed)));
            let violations = if seed == 5 { vec!["planted".to_string()] } else { Vec::new() };
            Outcome { seed, violations, simulated_ms: 1_000, starts: seed, ..Outcome::default() }
        };
        let mut lines = Vec::new();
        let s = run(0..8, &Options::default(), false, 3, |l| lines.push(l.to_string()), one);
        let seeds: Vec<String> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("seed "))
            .map(|l| l.split(':').next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(seeds, (0..8).map(|s| s.to_string()).collect::<Vec<_>>(), "{lines:#?}");
        assert_eq!((s.seeds, s.failed.clone(), s.starts, s.simulated_ms, s.jobs), (8, vec![5], 28, 8_000, 3));
        assert!(lines.iter().any(|l| l.contains("replay: baton-chaos sim --seeds 5..6")), "{lines:#?}");
    }
}
