//! `baton bench sim`: trace-mode simulation speed, generated traces of each size run one after
//! another on one core (BENCHMARKS.md, "Simulation speed").

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Gangs of at least this many GPUs count as big in `bench sim`'s starvation figure.
const BIG_GANG_GPUS: u64 = 32;

pub fn run(
    cluster_path: &str,
    sizes: &[usize],
    seed: u64,
    load: f64,
    settings: Option<crate::sim::ReserveAfter>,
) -> ExitCode {
    let (file, cluster) = match baton_sim::files::read_text(Path::new(cluster_path)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "| jobs | simulated end (s) | preemptions | finished | cycles | wall (s) | CPU (s) | longest wait of a {BIG_GANG_GPUS}+ GPU gang (s) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for &n in sizes {
        let jobs = match crate::sim::generated(&file, &cluster, n, seed, load)
            .and_then(|t| baton_sim::trace::parse("generated", &t).map_err(|e| e.to_string()))
        {
            Ok(j) => j,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        let outcome = match baton_sim::run_trace_jobs(&file, &cluster, "generated", &jobs, settings.map(|s| s.0)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        let s = &outcome.report.summary;
        let end = s.end.0;
        let gang_wait = outcome
            .stats
            .jobs
            .values()
            .filter(|j| j.gpus_milli >= BIG_GANG_GPUS * 1000)
            .map(|j| j.wait_ms(end))
            .max()
            .unwrap_or(0);
        println!(
            "| {n} | {} | {} | {} | {} | {wall:.1} | {cpu:.1} | {} |",
            s.end,
            s.preemptions,
            s.finished,
            outcome.cycles,
            gang_wait / 1000
        );
    }
    ExitCode::SUCCESS
}

/// CPU time this process has used (user and system).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return f64::NAN;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}
