//! Synthetic traces shaped like published GPU-cluster traces (docs/trace.md says which
//! findings and which parameters): most jobs take one GPU and large gangs are rare,
//! durations are log-normal with a Pareto tail, arrivals follow a day cycle. Everything
//! comes from one seeded generator (splitmix64), so a seed always gives the same trace.

use std::fmt::Write;

use baton_model::name::Name;
use baton_rng::SplitMix64 as Rng;

use crate::trace::{ARRAY_COLUMN, BASE_COLUMNS, COLUMNS, ELASTIC_COLUMN, MAX_ROW_SECONDS, MAX_TRACE_JOBS};

/// Gang shapes (GPUs per replica, replicas) and their weights in per mille: 70% one GPU.
pub const SHAPES: [((u64, u32), u32); 7] =
    [((1, 1), 700), ((2, 1), 100), ((4, 1), 80), ((8, 1), 70), ((8, 2), 30), ((8, 4), 15), ((8, 8), 5)];
/// Log-normal body of durations: median and shape (sigma of the logarithm).
pub const DURATION_MEDIAN_S: f64 = 600.0;
pub const DURATION_SIGMA: f64 = 1.8;
/// Share of jobs drawn from the Pareto tail instead, its scale and its index.
pub const TAIL_SHARE: f64 = 0.2;
pub const TAIL_SCALE_S: f64 = 3600.0;
pub const TAIL_ALPHA: f64 = 1.2;
/// Longest generated duration: a week.
pub const MAX_DURATION_S: f64 = 7.0 * 24.0 * 3600.0;
/// Day cycle of arrivals: the rate swings this far above and below its mean.
pub const DIURNAL_AMPLITUDE: f64 = 0.5;
pub const DAY_S: f64 = 86_400.0;
/// Share of jobs that state a time limit, and how far above their duration users set it.
pub const TIME_LIMIT_SHARE: f64 = 0.5;
pub const TIME_LIMIT_OVER: (f64, f64) = (1.2, 3.0);
/// Jobs of at least this long write checkpoints, at this interval, with this probability.
pub const CHECKPOINT_MIN_S: f64 = 3600.0;
pub const CHECKPOINT_INTERVAL_S: u64 = 1800;
pub const CHECKPOINT_SHARE: f64 = 0.5;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenSpec {
    pub jobs: usize,
    pub seed: u64,
    /// Queues, the first the busiest (queue i gets weight 1/(i+1)).
    pub queues: Vec<Name>,
    /// Priority classes: the first takes 80% of jobs, the others share the rest.
    pub classes: Vec<Name>,
    /// GPUs in the cluster and on one node (gangs never ask more per replica).
    pub cluster_gpus: u64,
    pub gpus_per_node: u64,
    /// Offered load: GPU time asked over GPU time the cluster has while jobs arrive.
    pub load: f64,
    /// Share of rows that wait for an earlier row, and share submitted as arrays (decisions.md
    /// section 13); 0 gives the trace this generator always gave.
    pub workflows: Workflows,
}

/// How much of a generated trace is workflows. Drawn from a stream of their own, so the rows'
/// shapes, durations and arrival times are those of the same seed without them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Workflows {
    pub after_share: f64,
    pub array_share: f64,
    /// Share of gangs (rows of more than one replica, not arrays) made elastic, with a
    /// minimum of 1 to `replicas - 1`.
    pub elastic_share: f64,
    /// Share of one-GPU rows that ask a fraction of a shared GPU instead (0.25, 0.5 or 0.75;
    /// decisions.md section 11). It adds no column: the `gpus` column says it.
    pub fraction_share: f64,
}

/// The fractions a generated row may ask, in thousandths of a GPU.
pub const GENERATED_FRACTIONS: [u64; 3] = [250, 500, 750];

/// A dependency waits for one of this many rows before it (workflows are local in time), with
/// condition ok four times in five, else any or started.
pub const AFTER_WINDOW: usize = 50;
/// An array has 2 to this many elements (log-uniform), half of them bounded by a `max_running`
/// of 1 to a quarter of its elements.
pub const MAX_GENERATED_ARRAY: u32 = 100;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenError {
    #[error("--jobs must be 1..={MAX_TRACE_JOBS}, not {0}")]
    Jobs(usize),
    #[error("--queues needs at least one queue")]
    NoQueues,
    #[error("--classes needs at least one priority class")]
    NoClasses,
    #[error("--load must be above 0 and at most 10, not {0}")]
    Load(f64),
    #[error("the cluster needs at least one GPU and at most 64 per node (got {0} GPUs, {1} per node)")]
    Gpus(u64, u64),
    #[error("--{0} must be a share from 0 to 1, not {1}")]
    Share(&'static str, f64),
}

/// One generated job, before it is written as a row.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    submit_s: u64,
    queue: usize,
    class: usize,
    shape: (u64, u32),
    duration_s: u64,
    time_limit_s: Option<u64>,
    checkpoint_s: Option<u64>,
    /// (earlier row's index, condition).
    after: Option<(usize, &'static str)>,
    /// (count, max_running).
    array: Option<(u32, Option<u32>)>,
    /// An elastic gang's minimum.
    min_replicas: Option<u32>,
    /// A fraction of one shared GPU it asks instead of its one GPU, in thousandths.
    gpu_milli: Option<u64>,
}

impl Row {
    /// GPU-seconds the row asks (every element of an array).
    fn asked(&self) -> f64 {
        let n = self.array.map_or(1, |(count, _)| count);
        self.gpus() * f64::from(self.shape.1) * self.duration_s as f64 * f64::from(n)
    }

    /// GPUs per replica, a fraction of one counted as such.
    fn gpus(&self) -> f64 {
        self.gpu_milli.map_or(self.shape.0 as f64, |m| m as f64 / 1000.0)
    }

    /// The `gpus` column.
    fn gpus_cell(&self) -> String {
        self.gpu_milli.map_or(self.shape.0.to_string(), baton_model::quantity::thousandths)
    }
}

/// The trace as CSV text, header first.
pub fn generate(spec: &GenSpec) -> Result<String, GenError> {
    check(spec)?;
    let mut rng = Rng::new(spec.seed);
    let mut rows: Vec<Row> = (0..spec.jobs).map(|_| job(&mut rng, spec)).collect();
    add_workflows(&mut rows, spec);
    let asked: f64 = rows.iter().map(Row::asked).sum();
    let mean_gap_s = asked / (spec.load * spec.cluster_gpus as f64) / spec.jobs as f64;
    let mut t = 0.0;
    for r in &mut rows {
        t = next_arrival(&mut rng, t, mean_gap_s);
        r.submit_s = t as u64;
    }
    // Fractions are written in the `gpus` column: they alone add no column.
    let workflows = Workflows { fraction_share: 0.0, ..spec.workflows } != Workflows::default();
    // Traces without elastic gangs keep the columns they had.
    let elastic = spec.workflows.elastic_share > 0.0;
    let columns = match (workflows, elastic) {
        (false, _) => BASE_COLUMNS,
        (true, false) => ARRAY_COLUMN + 1,
        (true, true) => ELASTIC_COLUMN + 1,
    };
    let mut out = String::with_capacity(spec.jobs * 40);
    out.push_str(&COLUMNS[..columns].join(","));
    out.push('\n');
    // A row is job j<line>: the header is line 1.
    let line_of = |i: usize| i + 2;
    for r in &rows {
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{}",
            r.submit_s,
            spec.queues[r.queue],
            spec.classes[r.class],
            r.gpus_cell(),
            r.shape.1,
            r.duration_s,
            opt(r.time_limit_s),
            opt(r.checkpoint_s)
        );
        if workflows {
            let after = r.after.map(|(i, when)| format!("{when}:j{}", line_of(i))).unwrap_or_default();
            let array = r.array.map(|(n, m)| spelled_array(n, m)).unwrap_or_default();
            let _ = write!(out, ",{after},{array}");
        }
        if elastic {
            let _ = write!(out, ",{}", r.min_replicas.map(|m| m.to_string()).unwrap_or_default());
        }
        out.push('\n');
    }
    Ok(out)
}

fn spelled_array(count: u32, max_running: Option<u32>) -> String {
    match max_running {
        Some(m) => format!("0-{}%{m}", count - 1),
        None => format!("0-{}", count - 1),
    }
}

/// Dependencies on earlier rows and arrays, from their own stream.
fn add_workflows(rows: &mut [Row], spec: &GenSpec) {
    let w = spec.workflows;
    if w == Workflows::default() {
        return;
    }
    let mut rng = Rng::new(spec.seed ^ 0x776f_726b_666c_6f77);
    for (i, row) in rows.iter_mut().enumerate() {
        if i > 0 && rng.unit() < w.after_share {
            let back = 1 + below(&mut rng, AFTER_WINDOW.min(i));
            let when = match below(&mut rng, 10) {
                0 => "any",
                1 => "started",
                _ => "ok",
            };
            row.after = Some((i - back, when));
        }
        if rng.unit() < w.array_share {
            let count = (2.0 * (f64::from(MAX_GENERATED_ARRAY) / 2.0).powf(rng.unit())).round() as u32;
            let count = count.clamp(2, MAX_GENERATED_ARRAY);
            let max_running = (rng.unit() < 0.5).then(|| 1 + below(&mut rng, (count as usize / 4).max(1)) as u32);
            row.array = Some((count, max_running));
        }
        // Drawn only when asked for, so traces without elastic gangs stay what they were.
        if w.elastic_share > 0.0 && rng.unit() < w.elastic_share && row.array.is_none() && row.shape.1 > 1 {
            row.min_replicas = Some(1 + below(&mut rng, row.shape.1 as usize - 1) as u32);
        }
        // Drawn last and only when asked for: the draws above stay what they were.
        if w.fraction_share > 0.0 && rng.unit() < w.fraction_share && row.shape == (1, 1) {
            row.gpu_milli = Some(GENERATED_FRACTIONS[below(&mut rng, GENERATED_FRACTIONS.len())]);
        }
    }
}

fn check(spec: &GenSpec) -> Result<(), GenError> {
    if spec.jobs == 0 || spec.jobs > MAX_TRACE_JOBS {
        return Err(GenError::Jobs(spec.jobs));
    }
    if spec.queues.is_empty() {
        return Err(GenError::NoQueues);
    }
    if spec.classes.is_empty() {
        return Err(GenError::NoClasses);
    }
    if !(spec.load > 0.0 && spec.load <= 10.0) {
        return Err(GenError::Load(spec.load));
    }
    if spec.cluster_gpus == 0 || spec.gpus_per_node == 0 || spec.gpus_per_node > 64 {
        return Err(GenError::Gpus(spec.cluster_gpus, spec.gpus_per_node));
    }
    let w = spec.workflows;
    let shares = [
        ("after-share", w.after_share),
        ("array-share", w.array_share),
        ("elastic-share", w.elastic_share),
        ("fraction-share", w.fraction_share),
    ];
    for (flag, share) in shares {
        if !(0.0..=1.0).contains(&share) {
            return Err(GenError::Share(flag, share));
        }
    }
    Ok(())
}

fn job(rng: &mut Rng, spec: &GenSpec) -> Row {
    let queue = pick_queue(rng, spec.queues.len());
    let class = if spec.classes.len() == 1 || rng.unit() < 0.8 { 0 } else { 1 + below(rng, spec.classes.len() - 1) };
    let shape = fit_shape(pick_shape(rng), spec);
    let duration = duration_s(rng);
    let time_limit_s = (rng.unit() < TIME_LIMIT_SHARE).then(|| {
        let over = TIME_LIMIT_OVER.0 + rng.unit() * (TIME_LIMIT_OVER.1 - TIME_LIMIT_OVER.0);
        ((duration * over / 60.0).ceil() as u64 * 60).min(MAX_ROW_SECONDS)
    });
    let checkpoint_s = (duration >= CHECKPOINT_MIN_S && rng.unit() < CHECKPOINT_SHARE).then_some(CHECKPOINT_INTERVAL_S);
    let duration_s = duration.round().max(1.0) as u64;
    let (after, array, min_replicas, gpu_milli) = (None, None, None, None);
    Row {
        submit_s: 0,
        queue,
        class,
        shape,
        duration_s,
        time_limit_s,
        checkpoint_s,
        after,
        array,
        min_replicas,
        gpu_milli,
    }
}

/// Queue i with weight 1/(i+1): a few busy queues and a tail of quiet ones.
fn pick_queue(rng: &mut Rng, n: usize) -> usize {
    let total: f64 = (1..=n).map(|i| 1.0 / i as f64).sum();
    let mut x = rng.unit() * total;
    for i in 0..n {
        x -= 1.0 / (i + 1) as f64;
        if x < 0.0 {
            return i;
        }
    }
    n - 1
}

fn pick_shape(rng: &mut Rng) -> (u64, u32) {
    let mut x = below(rng, 1000) as u32;
    for (shape, w) in SHAPES {
        if x < w {
            return shape;
        }
        x -= w;
    }
    SHAPES[0].0
}

/// Narrower nodes take the same GPUs as more replicas; the gang never outgrows the cluster.
fn fit_shape((per, replicas): (u64, u32), spec: &GenSpec) -> (u64, u32) {
    let total = (per * u64::from(replicas)).min(spec.cluster_gpus);
    let per = per.min(spec.gpus_per_node).min(total);
    (per, (total / per) as u32)
}

fn duration_s(rng: &mut Rng) -> f64 {
    let d = if rng.unit() < TAIL_SHARE {
        // Pareto by inversion: scale / U^(1/alpha).
        TAIL_SCALE_S / (1.0 - rng.unit()).powf(1.0 / TAIL_ALPHA)
    } else {
        DURATION_MEDIAN_S * (DURATION_SIGMA * normal(rng)).exp()
    };
    d.clamp(1.0, MAX_DURATION_S)
}

/// The next arrival of a Poisson process whose rate follows the day (thinning: candidates at
/// the peak rate, each kept with the rate at its time over the peak).
fn next_arrival(rng: &mut Rng, mut t: f64, mean_gap_s: f64) -> f64 {
    let peak = (1.0 + DIURNAL_AMPLITUDE) / mean_gap_s;
    loop {
        t += -(1.0 - rng.unit()).ln() / peak;
        let rate = (1.0 + DIURNAL_AMPLITUDE * (std::f64::consts::TAU * t / DAY_S).sin()) / mean_gap_s;
        if rng.unit() * peak < rate {
            return t;
        }
    }
}

/// In `0..n`, scaled from [0, 1) (the traces were first generated this way; a seed must
/// keep giving the same trace).
fn below(rng: &mut Rng, n: usize) -> usize {
    (rng.unit() * n as f64) as usize
}

/// Standard normal (Box-Muller).
fn normal(rng: &mut Rng) -> f64 {
    let u = 1.0 - rng.unit();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * rng.unit()).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace;

    fn spec(jobs: usize, seed: u64) -> GenSpec {
        GenSpec {
            jobs,
            seed,
            queues: vec![Name::lit("a"), Name::lit("b"), Name::lit("c")],
            classes: vec![Name::lit("train")],
            cluster_gpus: 800,
            gpus_per_node: 8,
            load: 0.9,
            workflows: Workflows::default(),
        }
    }

    #[test]
    fn a_seed_gives_one_trace_and_another_seed_another() {
        assert_eq!(generate(&spec(500, 7)).unwrap(), generate(&spec(500, 7)).unwrap());
        assert_ne!(generate(&spec(500, 7)).unwrap(), generate(&spec(500, 8)).unwrap());
    }

    #[test]
    fn the_trace_has_the_published_shape() {
        let text = generate(&spec(20_000, 1)).unwrap();
        let jobs = trace::parse("gen.csv", &text).unwrap();
        let n = jobs.len() as f64;
        let single = jobs.iter().filter(|j| j.gpus_milli() == 1000).count() as f64 / n;
        let big = jobs.iter().filter(|j| j.gpus_milli() >= 32_000).count() as f64 / n;
        assert!((0.67..0.73).contains(&single), "one-GPU share {single}");
        assert!((0.01..0.03).contains(&big), "gangs of 32+ GPUs {big}");
        let mut d: Vec<u64> = jobs.iter().map(|j| j.duration_ms / 1000).collect();
        d.sort_unstable();
        let (median, p99) = (d[d.len() / 2], d[d.len() * 99 / 100]);
        // Heavy tail: the 99th percentile is far above the median.
        assert!((500..1500).contains(&median), "median {median}");
        assert!(p99 > 50 * median, "p99 {p99} vs median {median}");
        assert!(jobs.windows(2).all(|w| w[0].submit_ms <= w[1].submit_ms));
    }

    #[test]
    fn arrivals_follow_the_day() {
        let jobs = trace::parse("gen.csv", &generate(&spec(20_000, 3)).unwrap()).unwrap();
        // sin > 0 in the first half of each day: the rate is above its mean there.
        let first_half = jobs.iter().filter(|j| (j.submit_ms / 1000) % 86_400 < 43_200).count() as f64;
        let share = first_half / jobs.len() as f64;
        assert!(share > 0.55, "share of arrivals in the busy half-day {share}");
    }

    #[test]
    fn bad_settings_are_refused() {
        assert_eq!(generate(&GenSpec { jobs: 0, ..spec(1, 1) }), Err(GenError::Jobs(0)));
        assert_eq!(generate(&GenSpec { queues: vec![], ..spec(1, 1) }), Err(GenError::NoQueues));
        assert_eq!(generate(&GenSpec { load: 0.0, ..spec(1, 1) }), Err(GenError::Load(0.0)));
    }
}
