//! Trace mode (docs/trace.md): a CSV of jobs replayed against a cluster file.
//!
//! A trace row is one job: when it is submitted, its queue and priority class, its gang shape
//! (GPUs per replica x replicas), how long it runs, its time limit and how often it writes a
//! checkpoint. The cluster comes from a scenario-style YAML file without a timeline; each row
//! becomes a `submit` step, so the same engine and the same scheduler run it.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::after::{After, JobRef};
use baton_model::array::ArraySpec;
use baton_model::error::ApplyError;
use baton_model::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec};
use baton_model::limits::{DEFAULT_GRACE_MS, MAX_DEPENDENCIES_PER_JOB, MAX_TIME_LIMIT_MS};
use baton_model::name::Name;
use baton_model::resources::Resources;
use baton_model::state::State;

use crate::scenario::{Action, Scenario, Step, Submit};

/// Most rows a trace may hold (10x the largest trace measured in BENCHMARKS.md).
pub const MAX_TRACE_JOBS: usize = 1_000_000;
/// Largest trace file read (a 1,000,000-row trace is about 40 MiB).
pub const MAX_TRACE_BYTES: u64 = 128 << 20;
/// Longest duration or checkpoint interval a row may give: a year, as a time limit.
pub const MAX_ROW_SECONDS: u64 = MAX_TIME_LIMIT_MS / 1000;
/// Latest submit time: ten years after the trace starts.
pub const MAX_SUBMIT_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// The columns, in order; the first line of a trace names them exactly so, the last four,
/// `after`, `array` and `min_replicas` (decisions.md section 13) and `topology` (section
/// 10), optional (each only after the one before it).
pub const COLUMNS: [&str; 12] = [
    "submit",
    "queue",
    "class",
    "gpus",
    "replicas",
    "duration",
    "time_limit",
    "checkpoint_interval",
    "after",
    "array",
    "min_replicas",
    "topology",
];
/// The columns every trace has: all but `after`, `array`, `min_replicas` and `topology`.
pub const BASE_COLUMNS: usize = 8;
/// The column of `array`, counted from 0.
pub const ARRAY_COLUMN: usize = 9;
/// The column of `min_replicas` (an elastic gang), counted from 0.
pub const ELASTIC_COLUMN: usize = 10;
/// The column of `topology` (`required=nvlink;preferred=rack`), counted from 0.
pub const TOPOLOGY_COLUMN: usize = 11;

/// A row that cannot be used: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {}{message}", column_text(*.column))]
pub struct TraceError {
    pub file: String,
    pub line: usize,
    /// 1-based column, when one column is at fault.
    pub column: Option<usize>,
    pub message: String,
}

fn column_text(column: Option<usize>) -> String {
    match column {
        Some(c) => format!("column {c} ({}): ", COLUMNS.get(c - 1).copied().unwrap_or("extra")),
        None => String::new(),
    }
}

/// One job of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceJob {
    pub line: usize,
    pub submit_ms: u64,
    pub queue: Name,
    pub class: PriorityRef,
    /// GPUs per replica in thousandths: below 1000, a fraction of one shared GPU
    /// (decisions.md section 11).
    pub gpu_milli_per_replica: u64,
    /// MIG slices per replica instead of GPUs (`mig-1g.10gb=2`; decisions.md section 11).
    pub slices: Option<(String, u64)>,
    pub replicas: u32,
    pub duration_ms: u64,
    pub time_limit_ms: Option<u64>,
    pub checkpoint_interval_ms: Option<u64>,
    /// The earlier rows' jobs it waits for (`ok:j12;any:j15`), by name.
    pub after: Vec<After>,
    /// Submitted as an array of jobs `j<line>-i` (`0-99%10`).
    pub array: Option<ArraySpec>,
    /// An elastic gang of `replicas` that runs with at least this many.
    pub min_replicas: Option<u32>,
    /// The levels its replicas share a domain of (decisions.md section 10).
    pub topology: Option<baton_model::job::Topology>,
}

impl TraceJob {
    /// GPUs the job holds in all, in thousandths.
    pub fn gpus_milli(&self) -> u64 {
        self.gpu_milli_per_replica * u64::from(self.replicas)
    }
}

/// Reads a trace; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let err = |line: usize, column: Option<usize>, message: String| TraceError {
        file: file.to_string(),
        line,
        column,
        message,
    };
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
    let header = lines.by_ref().find(|(_, l)| !skip(l));
    let Some((hline, header)) = header else {
        return Err(err(1, None, format!("the trace is empty; its first line is the header {}", COLUMNS.join(","))));
    };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    if !(BASE_COLUMNS..=COLUMNS.len()).any(|n| names == COLUMNS[..n]) {
        let msg = format!(
            "the header must be exactly {} (or without the last column, topology, or the last two, three or four; found {header:?})",
            COLUMNS.join(",")
        );
        return Err(err(hline, None, msg));
    }
    let width = names.len();
    let mut jobs = Vec::new();
    for (n, l) in lines.filter(|(_, l)| !skip(l)) {
        if jobs.len() == MAX_TRACE_JOBS {
            return Err(err(n, None, format!("more than {MAX_TRACE_JOBS} jobs; split the trace")));
        }
        jobs.push(row(n, l, width).map_err(|(c, m)| err(n, c, m))?);
    }
    Ok(jobs)
}

/// Blank lines and `#` comments.
fn skip(l: &str) -> bool {
    let t = l.trim();
    t.is_empty() || t.starts_with('#')
}

type RowResult<T> = Result<T, (Option<usize>, String)>;

fn row(line: usize, l: &str, width: usize) -> RowResult<TraceJob> {
    let cells: Vec<&str> = l.split(',').map(str::trim).collect();
    if cells.len() != width {
        let col = (cells.len() > width).then_some(width + 1);
        return Err((col, format!("{} columns; expected {width}", cells.len())));
    }
    let at = |c: usize, m: String| (Some(c), m);
    let queue = Name::new(cells[1]).map_err(|e| at(2, e.to_string()))?;
    let class = match cells[2].parse::<i32>() {
        Ok(v) => PriorityRef::Value(v),
        Err(_) => PriorityRef::Class(Name::new(cells[2]).map_err(|e| at(3, e.to_string()))?),
    };
    let (gpu_milli_per_replica, slices) = match cells[3].split_once('=') {
        Some((profile, count)) => (0, Some(slices(profile, count)?)),
        None => (gpus(cells[3])?, None),
    };
    let replicas = whole(cells[4], 5, 1, u64::from(baton_model::limits::MAX_REPLICAS_PER_JOB))? as u32;
    let time_limit_ms = optional(cells[6], 7)?;
    let checkpoint_interval_ms = optional(cells[7], 8)?;
    Ok(TraceJob {
        line,
        submit_ms: seconds(cells[0], 1, MAX_SUBMIT_SECONDS)?,
        queue,
        class,
        gpu_milli_per_replica,
        slices,
        replicas,
        duration_ms: seconds(cells[5], 6, MAX_ROW_SECONDS)?.max(1),
        time_limit_ms,
        checkpoint_interval_ms,
        after: match cells.get(BASE_COLUMNS) {
            Some(cell) => dependencies(cell)?,
            None => Vec::new(),
        },
        array: match cells.get(ARRAY_COLUMN).filter(|c| !c.is_empty()) {
            Some(cell) => Some(ArraySpec::parse(cell).map_err(|e| at(ARRAY_COLUMN + 1, e))?),
            None => None,
        },
        min_replicas: match cells.get(ELASTIC_COLUMN).filter(|c| !c.is_empty()) {
            Some(_) if cells.get(ARRAY_COLUMN).is_some_and(|c| !c.is_empty()) => {
                let why = "an array's elements cannot be elastic gangs; leave one of array and min_replicas empty";
                return Err(at(ELASTIC_COLUMN + 1, why.into()));
            }
            Some(cell) => Some(whole(cell, ELASTIC_COLUMN + 1, 1, u64::from(replicas))? as u32),
            None => None,
        },
        topology: match cells.get(TOPOLOGY_COLUMN).filter(|c| !c.is_empty()) {
            // `;` between the two, since `,` separates the columns.
            Some(cell) => baton_model::topology::LevelNeed::parse(&cell.replace(';', ","))
                .map_err(|e| at(TOPOLOGY_COLUMN + 1, e.to_string()))?,
            None => None,
        },
    })
}

/// `ok:j12;any:j15`: dependencies on earlier rows' jobs, by name (`j<line>`); empty: none.
fn dependencies(cell: &str) -> RowResult<Vec<After>> {
    let col = Some(BASE_COLUMNS + 1);
    let mut out = Vec::new();
    for part in cell.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let a = After::parse(part).map_err(|e| (col, e))?;
        if let JobRef::Id(id) = a.job {
            return Err((col, format!("{id}: name the row's job (j<line>), not an id")));
        }
        out.push(a);
    }
    if out.len() > MAX_DEPENDENCIES_PER_JOB {
        return Err((col, format!("{} dependencies; a job waits for at most {MAX_DEPENDENCIES_PER_JOB}", out.len())));
    }
    Ok(out)
}

/// The `gpus` column: whole GPUs (1..64), or a fraction of one shared GPU (`0.25`, `500m`),
/// in thousandths.
/// The `gpus` column as MIG slices of one profile: `mig-1g.10gb=2`.
fn slices(profile: &str, count: &str) -> RowResult<(String, u64)> {
    if !baton_model::resources::is_slice_profile(profile) {
        return Err((
            Some(GPUS_COLUMN),
            format!("{profile:?} is not a MIG profile (mig-<g>g.<memory>gb, as mig-1g.10gb)"),
        ));
    }
    let n = whole(count, GPUS_COLUMN, 1, baton_model::limits::MAX_GPUS_PER_NODE * 8)?;
    Ok((profile.to_string(), n))
}

/// The column of `gpus`, counted from 1.
const GPUS_COLUMN: usize = 4;

fn gpus(cell: &str) -> RowResult<u64> {
    const COLUMN: usize = GPUS_COLUMN;
    let milli = baton_model::quantity::parse_gpu_request(cell).map_err(|e| (Some(COLUMN), e.to_string()))?;
    let most = baton_model::limits::MAX_GPUS_PER_NODE * 1000;
    if milli == 0 || milli > most {
        return Err((Some(COLUMN), format!("{cell} is out of range: more than 0 and at most {}", most / 1000)));
    }
    Ok(milli)
}

fn whole(cell: &str, col: usize, min: u64, max: u64) -> RowResult<u64> {
    let v: u64 = cell.parse().map_err(|_| (Some(col), format!("{cell:?} is not a whole number")))?;
    if !(min..=max).contains(&v) {
        return Err((Some(col), format!("{v} is out of range {min}..={max}")));
    }
    Ok(v)
}

/// Seconds (decimals allowed, to the millisecond), at most `max`.
fn seconds(cell: &str, col: usize, max: u64) -> RowResult<u64> {
    let v: f64 = cell.parse().map_err(|_| (Some(col), format!("{cell:?} is not a number of seconds")))?;
    if !v.is_finite() || v < 0.0 {
        return Err((Some(col), format!("{cell:?} is not a number of seconds >= 0")));
    }
    if v > max as f64 {
        return Err((Some(col), format!("{v} seconds is above the bound of {max}")));
    }
    Ok((v * 1000.0).round() as u64)
}

/// An optional positive number of seconds: empty means none.
fn optional(cell: &str, col: usize) -> RowResult<Option<u64>> {
    if cell.is_empty() {
        return Ok(None);
    }
    match seconds(cell, col, MAX_ROW_SECONDS)? {
        0 => Err((Some(col), "must be above 0 seconds (leave it empty for none)".into())),
        ms => Ok(Some(ms)),
    }
}

/// The job a row submits: named `j<line>`, requeued when preempted (it resumes from its last
/// periodic checkpoint, which the engine accounts for).
pub fn spec(j: &TraceJob) -> JobSpec {
    let mut resources = Resources::new();
    resources.set_gpus_milli(j.gpu_milli_per_replica);
    if let Some((profile, n)) = &j.slices {
        resources.set(profile, *n);
    }
    JobSpec {
        name: Name::new(format!("j{}", j.line)).expect("a short name"),
        queue: j.queue.clone(),
        priority: j.class.clone(),
        tasks: vec![TaskSpec { name: Name::lit("main"), replicas: j.replicas, resources, pools: None }],
        pools: None,
        topology: j.topology,
        preemption_mode: PreemptionMode::Requeue,
        grace_ms: DEFAULT_GRACE_MS,
        min_runtime_ms: 0,
        time_limit_ms: j.time_limit_ms,
        command: Vec::new(),
        env: BTreeMap::new(),
        checkpoint_signal: None,
    }
}

/// Adds the trace's jobs to a cluster scenario as `submit` steps, in submit-time order (rows
/// with the same time in file order), after checking each against the configured cluster.
pub fn attach(cluster: &mut Scenario, state: &State, trace_file: &str, jobs: &[TraceJob]) -> Result<(), TraceError> {
    if let Some(step) = cluster.timeline.first() {
        let msg = "a cluster file for a trace has no timeline (the trace is the timeline)".to_string();
        return Err(TraceError { file: cluster.file.clone(), line: step.line, column: None, message: msg });
    }
    if let Some(e) = cluster.expect.first() {
        let msg = "a cluster file for a trace has no expectations".to_string();
        return Err(TraceError { file: cluster.file.clone(), line: e.line, column: None, message: msg });
    }
    let mut order: Vec<&TraceJob> = jobs.iter().collect();
    order.sort_by_key(|j| j.submit_ms);
    let mut submitted: BTreeSet<Name> = BTreeSet::new();
    for j in order {
        let spec = spec(j);
        let refuse = |(column, message): (Option<usize>, String)| TraceError {
            file: trace_file.to_string(),
            line: j.line,
            column,
            message,
        };
        check(state, &spec).map_err(refuse)?;
        check_after(j, &spec.name, &submitted).map_err(refuse)?;
        submitted.insert(spec.name.clone());
        let sub = Submit {
            spec,
            after: j.after.clone(),
            array: j.array,
            elastic: j.min_replicas.map(|min_replicas| baton_model::elastic::ElasticSpec { task: 0, min_replicas }),
            duration_ms: Some(j.duration_ms),
            checkpoint_time_ms: 0,
            checkpoint_interval_ms: j.checkpoint_interval_ms,
            user: None,
            queue_line: j.line,
            priority_line: j.line,
        };
        let step =
            Step { at_ms: j.submit_ms, line: j.line, path: String::new(), action: Action::Submit(Box::new(sub)) };
        cluster.timeline.push(step);
    }
    Ok(())
}

/// Each dependency names a row submitted before this one (rows go in time order, so a cycle
/// cannot be written), and not this row itself.
fn check_after(j: &TraceJob, name: &Name, submitted: &BTreeSet<Name>) -> RowResult<()> {
    let col = Some(BASE_COLUMNS + 1);
    for a in &j.after {
        let JobRef::Name(on) = &a.job else { continue };
        if on == name {
            return Err((col, format!("job {on} cannot wait for itself")));
        }
        if !submitted.contains(on) {
            let msg = format!("job {on} is not submitted before this row (rows are submitted in time order)");
            return Err((col, msg));
        }
    }
    Ok(())
}

fn check(state: &State, spec: &JobSpec) -> RowResult<()> {
    if !state.queues().contains_key(&spec.queue) {
        return Err((Some(2), format!("queue {} is not defined in the cluster file", spec.queue)));
    }
    if let PriorityRef::Class(c) = &spec.priority
        && !state.classes().contains_key(c)
    {
        return Err((Some(3), format!("priority class {c} is not defined")));
    }
    state.validate_submit(spec).map(drop).map_err(|e| match e {
        ApplyError::Invalid { field, message } if field == "topology" => (Some(TOPOLOGY_COLUMN + 1), message),
        ApplyError::Invalid { field, message } => (Some(4), format!("{field}: {message}")),
        other => (Some(4), other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval\n";

    #[test]
    fn rows_read_with_optional_columns() {
        let t = format!("{HEADER}# a comment\n0,a,train,1,1,60,,\n1.5,b,7,8,4,3600,7200,600\n");
        let jobs = parse("t.csv", &t).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].line, jobs[0].time_limit_ms, jobs[0].checkpoint_interval_ms), (3, None, None));
        let b = &jobs[1];
        assert_eq!((b.submit_ms, b.gpus_milli(), b.class.clone()), (1500, 32_000, PriorityRef::Value(7)));
        assert_eq!((b.time_limit_ms, b.checkpoint_interval_ms), (Some(7_200_000), Some(600_000)));
    }

    /// Section 11: a row may ask a fraction of one shared GPU per replica.
    #[test]
    fn rows_may_ask_a_fraction_of_a_gpu() {
        let t = format!("{HEADER}0,a,train,0.25,1,60,,\n1,a,train,500m,3,60,,\n");
        let jobs = parse("t.csv", &t).unwrap();
        assert_eq!((jobs[0].gpu_milli_per_replica, jobs[1].gpus_milli()), (250, 1500));
        let r = &spec(&jobs[1]).tasks[0].resources;
        assert_eq!((r.gpus(), r.gpu_fraction()), (0, 500));
    }

    /// Section 11: a row may ask MIG slices of one profile per replica instead of GPUs.
    #[test]
    fn rows_may_ask_mig_slices() {
        let jobs = parse("t.csv", &format!("{HEADER}0,a,train,mig-1g.10gb=2,3,60,,\n")).unwrap();
        assert_eq!((jobs[0].slices.clone(), jobs[0].gpus_milli()), (Some(("mig-1g.10gb".to_string(), 2)), 0));
        assert_eq!(spec(&jobs[0]).tasks[0].resources.get("mig-1g.10gb"), 2);
        for (cell, says) in
            [("mig-1g.10gb=0", "out of range"), ("gpu=2", "not a MIG profile"), ("mig-1g.10gb=x", "not a whole")]
        {
            let e = parse("t.csv", &format!("{HEADER}0,a,train,{cell},1,60,,\n")).unwrap_err();
            assert_eq!(e.column, Some(4), "{cell}");
            assert!(e.message.contains(says), "{cell}: {e}");
        }
    }

    #[test]
    fn bad_rows_name_line_and_column() {
        let cases = [
            ("x,a,train,1,1,60,,\n", 1, "not a number"),
            ("0,a b,train,1,1,60,,\n", 2, ""),
            ("0,a,train,0,1,60,,\n", 4, "out of range"),
            ("0,a,train,65,1,60,,\n", 4, "out of range"),
            ("0,a,train,1.5,1,60,,\n", 4, "whole GPUs"),
            ("0,a,train,two,1,60,,\n", 4, "two"),
            ("0,a,train,1,1.5,60,,\n", 5, "not a whole number"),
            ("0,a,train,1,1,-3,,\n", 6, ">= 0"),
            ("0,a,train,1,1,60,0,\n", 7, "above 0"),
            ("0,a,train,1,1,60,,abc\n", 8, "not a number"),
            ("0,a,train,1,1,60,,,9\n", 9, "9 columns"),
            ("0,a,train,1,1,60,,,9,9\n", 9, "10 columns; expected 8"),
        ];
        for (row, col, text) in cases {
            let e = parse("t.csv", &format!("{HEADER}\n{row}")).unwrap_err();
            assert_eq!((e.line, e.column), (3, Some(col)), "{row}");
            assert!(e.message.contains(text), "{row}: {e}");
            assert!(e.to_string().starts_with(&format!("t.csv:3: column {col} (")), "{e}");
        }
        let e = parse("t.csv", "0,a,train,1,1,60,,\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, None));
        assert!(e.message.contains("header"));
        assert!(parse("t.csv", "").unwrap_err().message.contains("empty"));
    }
}
