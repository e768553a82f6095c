//! `baton sim FILE... [-o text|json] [--check] [--report out.html]`, and trace mode:
//! `baton sim trace --cluster C.yaml --trace T.csv` and `baton sim gen-trace` (docs/trace.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use baton_model::name::Name;
use baton_model::scheduler::SchedulerSettings;
use baton_sim::stats::TraceReport;
use baton_sim::synth::GenSpec;
use clap::{Args, Subcommand, ValueEnum};

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    #[command(subcommand)]
    what: Option<SimWhat>,
    /// Scenario files (docs/scenario-format.md).
    #[arg(required = true)]
    files: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    output: Format,
    /// Check each file's `expect:` blocks; exit non-zero naming each one that failed.
    #[arg(long)]
    check: bool,
    /// Write an HTML report with charts (and one SVG file per chart beside it); with several
    /// files, each gets `<stem>-<scenario file stem>.html`.
    #[arg(long, value_name = "OUT.html")]
    report: Option<PathBuf>,
}

#[derive(Subcommand)]
enum SimWhat {
    /// Replay a CSV trace of jobs against a cluster file and print per-queue figures.
    Trace(TraceArgs),
    /// Print a synthetic trace shaped like published GPU-cluster traces.
    GenTrace(GenArgs),
}

#[derive(Args)]
struct TraceArgs {
    /// The cluster: a scenario file without timeline or expectations.
    #[arg(long, value_name = "C.yaml")]
    cluster: String,
    /// The jobs (docs/trace.md); or use --generate.
    #[arg(long, value_name = "T.csv", required_unless_present = "generate", conflicts_with = "generate")]
    trace: Option<String>,
    /// Generate this many jobs in memory instead of reading a trace (queues and classes
    /// from the cluster file, offered load from --load).
    #[arg(long, value_name = "JOBS")]
    generate: Option<usize>,
    /// Seed of --generate.
    #[arg(long, default_value_t = 1, requires = "generate")]
    seed: u64,
    /// Offered load of --generate.
    #[arg(long, default_value_t = 0.9, requires = "generate")]
    load: f64,
    #[command(flatten)]
    workflows: WorkflowArgs,
    /// Replace the cluster file's `scheduler: reserve_after` (seconds, or `never`).
    #[arg(long, value_name = "SECONDS|never", value_parser = parse_reserve_after)]
    reserve_after: Option<ReserveAfter>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    output: Format,
    /// Write an HTML report with charts (and one SVG file per chart beside it).
    #[arg(long, value_name = "OUT.html")]
    report: Option<PathBuf>,
}

/// `--reserve-after`: the scheduler settings it gives.
#[derive(Clone, Copy, Debug)]
pub struct ReserveAfter(pub SchedulerSettings);

pub fn parse_reserve_after(s: &str) -> Result<ReserveAfter, String> {
    let reserve_after_ms = match s {
        "never" => None,
        _ => {
            let secs: u64 = s.parse().map_err(|_| format!("{s:?} is neither whole seconds nor `never`"))?;
            Some(secs.checked_mul(1000).ok_or("too many seconds")?)
        }
    };
    let settings = SchedulerSettings { reserve_after_ms };
    settings.validate()?;
    Ok(ReserveAfter(settings))
}

#[derive(Args)]
struct GenArgs {
    /// Jobs to generate.
    #[arg(long)]
    jobs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Queue names, comma-separated; the first is the busiest.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    queues: Vec<String>,
    /// Priority class names, comma-separated; the first takes 80% of jobs.
    #[arg(long, value_delimiter = ',', default_value = "train")]
    classes: Vec<String>,
    /// GPUs in the cluster the trace is meant for (sets the arrival rate).
    #[arg(long, default_value_t = 8000)]
    gpus: u64,
    /// GPUs per node (no replica asks more).
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u64,
    /// Offered load: GPU time asked over GPU time the cluster has while jobs arrive.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    #[command(flatten)]
    workflows: WorkflowArgs,
}

/// Workflows in a generated trace (decisions.md section 13).
#[derive(Args, Clone, Copy, Debug)]
struct WorkflowArgs {
    /// Share of generated jobs that wait for an earlier one (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    after_share: f64,
    /// Share of generated rows submitted as arrays of 2 to 100 jobs (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    array_share: f64,
    /// Share of generated gangs (more than one replica) made elastic, each with a minimum of
    /// 1 to one less than its replicas (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    elastic_share: f64,
    /// Share of generated one-GPU jobs that ask 0.25, 0.5 or 0.75 of a shared GPU instead (0
    /// to 1).
    #[arg(long, default_value_t = 0.0)]
    fraction_share: f64,
}

impl WorkflowArgs {
    fn spec(self) -> baton_sim::synth::Workflows {
        let (after_share, array_share, elastic_share) = (self.after_share, self.array_share, self.elastic_share);
        baton_sim::synth::Workflows { after_share, array_share, elastic_share, fraction_share: self.fraction_share }
    }
}

pub fn run(args: SimArgs) -> ExitCode {
    let result = match &args.what {
        Some(SimWhat::Trace(t)) => run_trace(t),
        Some(SimWhat::GenTrace(g)) => gen_trace(g),
        None => Ok(args.files.iter().fold(true, |ok, f| run_file(f, &args) & ok)),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_file(file: &str, args: &SimArgs) -> bool {
    let text = match baton_sim::files::read_text(Path::new(file)) {
        Ok((_, t)) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return false;
        }
    };
    let outcome = match baton_sim::run(file, &text) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return false;
        }
    };
    match args.output {
        Format::Json => match serde_json::to_string_pretty(&outcome.report) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("error: cannot write JSON: {e}");
                return false;
            }
        },
        Format::Text => print!("{}", baton_sim::output::text(&outcome.report)),
    }
    if let Some(out) = &args.report {
        let path = if args.files.len() > 1 { per_file(out, file) } else { out.clone() };
        if let Err(e) = write_report(&path, &outcome) {
            eprintln!("error: {e}");
            return false;
        }
    }
    if !args.check {
        return true;
    }
    for f in &outcome.failures {
        eprintln!("FAIL {file}: {f}");
    }
    if outcome.failures.is_empty() {
        eprintln!("ok {file}: {} expectations hold", outcome.checked);
        true
    } else {
        eprintln!("FAILED {file}: {} of {} expectations failed", outcome.failures.len(), outcome.checked);
        false
    }
}

/// `out.html` and `a/b.yaml` give `out-b.html`.
fn per_file(out: &Path, file: &str) -> PathBuf {
    let stem = |p: &Path| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    out.with_file_name(format!("{}-{}.html", stem(out), stem(Path::new(file))))
}

fn write_report(path: &Path, outcome: &baton_sim::Outcome) -> Result<(), String> {
    let r = baton_sim::report::Report::of(outcome);
    r.write(path).map_err(|e| format!("cannot write report {}: {e}", path.display()))?;
    eprintln!("report: {}", path.display());
    Ok(())
}

fn run_trace(t: &TraceArgs) -> Result<bool, String> {
    let (cluster_file, cluster) = baton_sim::files::read_text(Path::new(&t.cluster)).map_err(|e| e.to_string())?;
    let (trace_file, jobs) = match (&t.trace, t.generate) {
        (Some(path), _) => {
            let (file, text) = read_trace(path)?;
            let jobs = baton_sim::trace::parse(&file, &text).map_err(|e| e.to_string())?;
            (file, jobs)
        }
        (None, Some(n)) => {
            let text = generated_with(&cluster_file, &cluster, (n, t.seed, t.load), t.workflows.spec())?;
            let file = format!("generated({n} jobs, seed {})", t.seed);
            (file.clone(), baton_sim::trace::parse(&file, &text).map_err(|e| e.to_string())?)
        }
        (None, None) => return Err("give --trace T.csv or --generate JOBS".into()),
    };
    let settings = t.reserve_after.map(|r| r.0);
    let outcome =
        baton_sim::run_trace_jobs(&cluster_file, &cluster, &trace_file, &jobs, settings).map_err(|e| e.to_string())?;
    let report = TraceReport {
        cluster: cluster_file,
        trace: trace_file,
        jobs: jobs.len() as u64,
        summary: outcome.report.summary.clone(),
        queues: outcome.queue_stats(),
    };
    match t.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?),
        Format::Text => print!("{}", baton_sim::stats::text(&report)),
    }
    if let Some(out) = &t.report {
        write_report(out, &outcome)?;
    }
    Ok(true)
}

/// A trace file, refused past `MAX_TRACE_BYTES`.
fn read_trace(path: &str) -> Result<(String, String), String> {
    use std::io::Read;
    let max = baton_sim::trace::MAX_TRACE_BYTES;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    if text.len() as u64 > max {
        return Err(format!("{path} is over {max} bytes (the most a trace may be; docs/trace.md)"));
    }
    Ok((path.to_string(), text))
}

/// A trace for the cluster file's queues, classes and GPUs.
pub fn generated(file: &str, cluster: &str, jobs: usize, seed: u64, load: f64) -> Result<String, String> {
    generated_with(file, cluster, (jobs, seed, load), Default::default())
}

/// `generated`, with workflows.
fn generated_with(
    file: &str,
    cluster: &str,
    (jobs, seed, load): (usize, u64, f64),
    workflows: baton_sim::synth::Workflows,
) -> Result<String, String> {
    let s = baton_sim::parse::parse(file, cluster).map_err(|e| e.to_string())?;
    let mut classes: Vec<Name> = s.classes.iter().map(|c| c.v.name.clone()).collect();
    if classes.is_empty() {
        classes.push(Name::lit("train"));
    }
    let spec = GenSpec {
        jobs,
        seed,
        queues: s.queues.iter().map(|q| q.v.name.clone()).collect(),
        classes,
        cluster_gpus: s.nodes.iter().map(|n| n.v.resources.gpus()).sum(),
        gpus_per_node: s.nodes.iter().map(|n| n.v.resources.gpus()).max().unwrap_or(0),
        load,
        workflows,
    };
    baton_sim::synth::generate(&spec).map_err(|e| e.to_string())
}

fn gen_trace(g: &GenArgs) -> Result<bool, String> {
    let names = |v: &[String], what: &str| -> Result<Vec<Name>, String> {
        v.iter().map(|s| Name::new(s.trim()).map_err(|e| format!("{what} {s:?}: {e}"))).collect()
    };
    let spec = GenSpec {
        jobs: g.jobs,
        seed: g.seed,
        queues: names(&g.queues, "queue")?,
        classes: names(&g.classes, "class")?,
        cluster_gpus: g.gpus,
        gpus_per_node: g.gpus_per_node,
        load: g.load,
        workflows: g.workflows.spec(),
    };
    print!("{}", baton_sim::synth::generate(&spec).map_err(|e| e.to_string())?);
    Ok(true)
}
