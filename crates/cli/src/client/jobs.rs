//! Jobs: `baton list`, `baton describe`, `baton cancel|pause|resume`.

use std::fmt::Write as _;
use std::io::Write;

use baton_model::limits::MAX_JOBS;
use baton_proto::v1::{self, JobState};
use baton_proto::words::Word;
use clap::Args;

use crate::client::error::{ClientError, Subject};
use crate::client::human::{age, event_kind, now_ms, parse_word, placements, resources, span, timestamp};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, arrays, emit, print_ack};

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Only this queue's jobs.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only jobs in this state (Pending, Running, Preempting, Suspended, Paused, Succeeded,
    /// Failed, Cancelled; any case); repeatable.
    #[arg(long = "state", value_parser = parse_word::<v1::JobState>)]
    pub states: Vec<v1::JobState>,
    /// Only jobs with replicas on this node.
    #[arg(long)]
    pub node: Option<String>,
    /// At most this many jobs [default: every matching job, fetched page by page].
    #[arg(long)]
    pub limit: Option<u32>,
    /// Show each element of an array (those not created yet too) instead of one line per
    /// array.
    #[arg(long)]
    pub expand: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

/// What `baton list` shows: the jobs (every array element created so far among them) and,
/// unless a state or node filter is given, the arrays.
#[derive(serde::Serialize)]
pub struct Listing {
    #[serde(flatten)]
    pub reply: v1::ListJobsReply,
    pub arrays: Vec<v1::JobArray>,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The job's name or id.
    pub job: String,
    /// Also show the job's event history.
    #[arg(long)]
    pub events: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

#[derive(Args, Debug)]
pub struct JobArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The job's name or id.
    pub job: String,
}

pub async fn get_job(conn: &Conn, job: &str) -> Result<v1::Job, ClientError> {
    let r = v1::JobRef { name: job.to_string(), ..Default::default() };
    conn.call(Subject::Job, job, |mut c| {
        let r = r.clone();
        async move { c.get_job(r).await }
    })
    .await
}

pub async fn list(conn: &Conn, a: &ListArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let base = v1::ListJobsRequest {
        queue: a.queue.clone().unwrap_or_default(),
        states: a.states.iter().map(|s| i32::from(*s)).collect(),
        node: a.node.clone().unwrap_or_default(),
        ..Default::default()
    };
    let reply = list_pages(conn, base, a.limit).await?;
    // Arrays are one line each; a state or node filter is about jobs, so it lists elements.
    let filtered = !a.states.is_empty() || a.node.is_some();
    let arrays = match filtered {
        true => Vec::new(),
        false => arrays::list_arrays(conn, a.queue.as_deref()).await?,
    };
    let listing = Listing { reply, arrays };
    emit(out, a.output, &listing, |l| listing_table(l, a.expand, now_ms()))
}

/// Jobs, with each array as one line (or, `expand`, each of its elements).
pub fn listing_table(l: &Listing, expand: bool, now: u64) -> String {
    if l.reply.jobs.is_empty() && l.arrays.is_empty() {
        return "no jobs match\n".into();
    }
    let mut t = Table::new(&JOB_COLUMNS);
    for j in l.reply.jobs.iter().filter(|j| expand || j.array.is_empty() || l.arrays.is_empty()) {
        t.row(job_row(j, now));
    }
    for a in &l.arrays {
        if expand {
            for r in arrays::not_created_rows(a, now) {
                t.row(r);
            }
        } else {
            t.row(arrays::row(a, now));
        }
    }
    let mut s = t.render();
    if l.reply.truncated {
        s.push_str("(more jobs match than were returned; filter or raise --limit)\n");
    }
    s
}

/// Every job `base` matches, up to `limit` (or the model's job bound), page by page: one
/// reply never has to hold them all.
pub async fn list_pages(
    conn: &Conn,
    base: v1::ListJobsRequest,
    limit: Option<u32>,
) -> Result<v1::ListJobsReply, ClientError> {
    let wanted = limit.map_or(MAX_JOBS, |n| n as usize);
    let mut all = v1::ListJobsReply::default();
    let mut token = String::new();
    loop {
        let remaining = wanted - all.jobs.len();
        let req = v1::ListJobsRequest {
            limit: if limit.is_some() { remaining.min(u32::MAX as usize) as u32 } else { 0 },
            page_token: token.clone(),
            ..base.clone()
        };
        let page = conn
            .call(Subject::Other, "", |mut c| {
                let r = req.clone();
                async move { c.list_jobs(r).await }
            })
            .await?;
        let got = page.jobs.len();
        all.jobs.extend(page.jobs);
        all.truncated = page.truncated;
        // An empty page with a token would never end: treat it as the last.
        if page.next_page_token.is_empty() || got == 0 || all.jobs.len() >= wanted {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}

/// GPUs a job asks for in all (every task's replicas).
/// GPUs a job asks for in all, in thousandths: its replicas' whole GPUs and fractions of
/// shared ones (decisions.md section 11).
pub fn job_gpus_milli(spec: Option<&v1::JobSpec>) -> u64 {
    let per_replica =
        |t: &v1::TaskSpec| t.resources.as_ref().map_or(0, |r| crate::client::human::gpus_milli(&r.amounts));
    spec.map_or(0, |s| s.tasks.iter().map(|t| u64::from(t.replicas).saturating_mul(per_replica(t))).sum())
}

pub fn jobs_table(reply: &v1::ListJobsReply, now: u64) -> String {
    if reply.jobs.is_empty() {
        return "no jobs match\n".into();
    }
    let mut t = Table::new(&JOB_COLUMNS);
    for j in &reply.jobs {
        t.row(job_row(j, now));
    }
    let mut s = t.render();
    if reply.truncated {
        s.push_str("(more jobs match than were returned; filter or raise --limit)\n");
    }
    s
}

const JOB_COLUMNS: [&str; 9] = ["ID", "NAME", "QUEUE", "STATE", "PRIORITY", "GPUS", "AGE", "NODES", "REASON"];

fn job_row(j: &v1::Job, now: u64) -> Vec<String> {
    let spec = j.spec.as_ref();
    let reason = match (j.exit_code, j.reason.is_empty()) {
        (Some(code), _) if j.state() == JobState::Failed || j.state() == JobState::Succeeded => {
            format!("exit {code}")
        }
        (_, false) => j.reason.clone(),
        _ if !j.preempted_by.is_empty() => format!("preempted by {}", j.preempted_by),
        _ => String::new(),
    };
    vec![
        j.id.to_string(),
        spec.map_or(String::new(), |s| s.name.clone()),
        spec.map_or(String::new(), |s| s.queue.clone()),
        j.state().word().to_string(),
        j.priority.to_string(),
        baton_model::quantity::thousandths(job_gpus_milli(spec)),
        age(j.submitted_ms, now),
        placements(&j.placements),
        reason,
    ]
}

pub async fn describe(conn: &Conn, a: &DescribeArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    // A name no job has may be an array's: describe shows the array.
    let mut job = match get_job(conn, &a.job).await {
        Err(ClientError::NotFound { .. }) if let Some(array) = arrays::find(conn, &a.job).await? => {
            return emit(out, a.output, &array, |x| arrays::describe_text(x, now_ms()));
        }
        other => other?,
    };
    if !a.events {
        // An elastic gang's resizes are shown whatever the flag (`Resizes:`).
        job.events.retain(|e| e.kind() == v1::EventKind::Resized);
    }
    emit(out, a.output, &job, |j| describe_text(j, now_ms()))
}

/// Resizes shown in `describe`, the newest last.
const RESIZES_SHOWN: usize = 5;

/// An elastic gang's resizes, from its events: "8 -> 4 at 12:00:01; 4 -> 8 at 12:05:00".
fn resizes(events: &[v1::Event]) -> Option<String> {
    let all: Vec<String> = events
        .iter()
        .filter(|e| e.kind() == v1::EventKind::Resized)
        .map(|e| format!("{} at {}", e.message, timestamp(e.at_ms)))
        .collect();
    let shown = &all[all.len().saturating_sub(RESIZES_SHOWN)..];
    let earlier = all.len() - shown.len();
    let more = if earlier > 0 { format!(" ({earlier} earlier)") } else { String::new() };
    (!all.is_empty()).then(|| format!("{}{more}", shown.join("; ")))
}

pub fn describe_text(j: &v1::Job, now: u64) -> String {
    let default = v1::JobSpec::default();
    let s = j.spec.as_ref().unwrap_or(&default);
    let mut rows: Vec<(&str, String)> = vec![
        ("Name", format!("{} (id {})", s.name, j.id)),
        ("Queue", s.queue.clone()),
        (
            "State",
            if j.attempt > 0 {
                format!("{} (attempt {})", j.state().word(), j.attempt)
            } else {
                j.state().word().into()
            },
        ),
    ];
    let class =
        if s.priority_class.is_empty() { "raw value".to_string() } else { format!("class {}", s.priority_class) };
    let preemptible = if j.preemptible { "preemptible" } else { "not preemptible" };
    rows.push(("Priority", format!("{} ({class}, {preemptible})", j.priority)));
    for t in &s.tasks {
        let r = t.resources.as_ref().map(|r| resources(&r.amounts)).unwrap_or_else(|| "-".into());
        let pools = if t.pools.is_empty() { String::new() } else { format!(" in {}", t.pools.join(", ")) };
        let elastic = match (t.min_replicas, j.elastic_max_replicas) {
            (Some(min), Some(max)) => format!("; elastic: {min} to {max} replicas"),
            _ => String::new(),
        };
        rows.push(("Task", format!("{}: {} x ({r}){pools}{elastic}", t.name, t.replicas)));
    }
    rows.push(("Pools", if s.pools.is_empty() { "any".into() } else { s.pools.join(", ") }));
    if s.topology() != v1::Topology::Unspecified {
        rows.push(("Topology", format!("one {}", s.topology().word())));
    }
    // Section 10's levels: "one nvlink, the fewest racks".
    let mut levels = Vec::new();
    if !s.topology_required.is_empty() {
        levels.push(format!("one {}", s.topology_required));
    }
    if !s.topology_preferred.is_empty() {
        levels.push(format!("the fewest of {} preferred", s.topology_preferred));
    }
    if !levels.is_empty() {
        rows.push(("Topology", levels.join(", ")));
    }
    // As the server holds it: the server fills the mode and the grace of a job that named
    // neither, so a default written here could only drift from the server's.
    let mut pre = match s.preemption_mode().word() {
        "" => "-".to_string(),
        mode => mode.to_string(),
    };
    if let Some(grace_ms) = s.grace_ms {
        pre.push_str(&format!(", grace {}", span(grace_ms)));
    }
    if s.min_runtime_ms > 0 {
        pre.push_str(&format!(", min runtime {}", span(s.min_runtime_ms)));
    }
    rows.push(("Preemption", pre));
    if let Some(limit) = s.time_limit_ms {
        rows.push(("Time limit", span(limit)));
    }
    rows.push(("Command", shell_words(&s.command)));
    if j.env_hidden {
        rows.push(("Env", "hidden (only its owner, operators and admins see it)".into()));
    } else if !s.env.is_empty() {
        let mut env: Vec<String> = s.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.sort();
        rows.push(("Env", env.join(" ")));
    }
    if !s.checkpoint_signal.is_empty() {
        rows.push(("Signal", s.checkpoint_signal.clone()));
    }
    let when = |ms: u64| if ms == 0 { "-".to_string() } else { format!("{} ({} ago)", timestamp(ms), age(ms, now)) };
    rows.push(("Submitted", when(j.submitted_ms)));
    if !j.run_as.is_empty() {
        rows.push(("Runs as", format!("Unix user {}", j.run_as)));
    }
    if let Some(index) = j.array_index.filter(|_| !j.array.is_empty()) {
        rows.push(("Array", format!("{}, element {index} (BATON_ARRAY_INDEX={index})", j.array)));
    }
    if !j.owner.is_empty() {
        rows.push(("Owner", j.owner.clone()));
    }
    if j.started_ms > 0 {
        rows.push(("Started", when(j.started_ms)));
    }
    if j.finished_ms > 0 {
        rows.push(("Finished", when(j.finished_ms)));
    }
    if !j.placements.is_empty() {
        rows.push(("Placement", placements(&j.placements)));
    }
    if let Some(resizes) = resizes(&j.events) {
        rows.push(("Resizes", resizes));
    }
    rows.push(("Checkpoint", if j.has_checkpoint { "yes".into() } else { "none".into() }));
    if let Some(code) = j.exit_code {
        rows.push(("Exit code", code.to_string()));
    }
    if !j.preempted_by.is_empty() {
        rows.push(("Preempted by", j.preempted_by.clone()));
    }
    if !j.reason.is_empty() {
        rows.push(("Reason", j.reason.clone()));
    }
    if !j.waiting_for.is_empty() {
        let deps: Vec<String> =
            j.waiting_for.iter().map(|d| format!("{}:{}", v1::DependencyCondition::word_of(d.when), d.job)).collect();
        rows.push(("Waits for", format!("{} (held until they hold)", deps.join(", "))));
    }
    if let Some(r) = &j.reservation {
        let what = format!("{} (pool {}); waiting for {} running jobs", r.nodes.join(", "), r.pool, r.waiting_for);
        rows.push(("Reservation", what));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut text = String::new();
    for (k, v) in rows {
        let _ = writeln!(text, "{:<width$}  {v}", format!("{k}:"), width = width);
    }
    if j.events.iter().any(|e| e.kind() != v1::EventKind::Resized) {
        text.push_str("Events:\n");
        let mut t = Table::new(&["  TIME", "KIND", "NODE", "MESSAGE"]);
        for e in &j.events {
            let node = if e.nodes.is_empty() { dash(&e.node) } else { e.nodes.join(",") };
            t.row(vec![format!("  {}", timestamp(e.at_ms)), event_kind(e).into(), node, e.message.clone()]);
        }
        text.push_str(&t.render());
    }
    text
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_string() }
}

/// The command as a shell would read it back: words with spaces or quotes are quoted.
pub fn shell_words(words: &[String]) -> String {
    if words.is_empty() {
        return "-".into();
    }
    let quote = |w: &String| {
        let plain = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
        if plain { w.clone() } else { format!("'{}'", w.replace('\'', "'\\''")) }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[derive(Clone, Copy, Debug)]
pub enum Act {
    Cancel,
    Pause,
    Resume,
}

pub async fn act(conn: &Conn, act: Act, a: &JobArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    // Resolved once: every retry below names this job by id, so a retry after a lost answer
    // never reaches a newer job that reused the name.
    let by_name = v1::JobRef { name: a.job.clone(), id: 0 };
    let job = conn
        .call(Subject::Job, &a.job, |mut c| {
            let r = by_name.clone();
            async move { c.get_job(r).await }
        })
        .await;
    // A name no unfinished job has may be an array's: cancel takes every element.
    let unfinished = |j: &v1::Job| !matches!(j.state(), JobState::Succeeded | JobState::Failed | JobState::Cancelled);
    if matches!(act, Act::Cancel)
        && job.as_ref().map_or(true, |j| !unfinished(j))
        && let Some(array) = arrays::find(conn, &a.job).await?.filter(|x| x.finished_ms == 0)
    {
        return cancel_array(conn, &array, out).await;
    }
    let job = job?;
    let r = v1::JobRef { name: a.job.clone(), id: job.id };
    let ack = conn
        .call(Subject::Job, &a.job, |mut c| {
            let r = r.clone();
            async move {
                match act {
                    Act::Cancel => c.cancel_job(r).await,
                    Act::Pause => c.pause_job(r).await,
                    Act::Resume => c.resume_job(r).await,
                }
            }
        })
        .await?;
    let verb = match act {
        Act::Cancel => "cancelled",
        Act::Pause => "pausing (it checkpoints, then waits for baton resume)",
        Act::Resume => "resumed",
    };
    print_ack(out, &ack, &format!("job {} {verb}", a.job))
}

/// Cancels every unfinished element of `array`; no other is created.
async fn cancel_array(conn: &Conn, array: &v1::JobArray, out: &mut dyn Write) -> Result<(), ClientError> {
    let r = v1::JobRef { name: array.name.clone(), id: array.id };
    conn.call(Subject::Job, &array.name, |mut c| {
        let r = r.clone();
        async move { c.cancel_job(r).await }
    })
    .await?;
    let live = array.running + array.pending + array.other;
    writeln!(out, "array {} cancelled ({live} unfinished elements)", arrays::range_name(array))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_quote_what_needs_it() {
        let w: Vec<String> = ["python", "train.py", "--msg", "hello world", "it's"].map(String::from).to_vec();
        assert_eq!(shell_words(&w), "python train.py --msg 'hello world' 'it'\\''s'");
    }

    /// Section 11: a job's GPUS column counts fractions of shared GPUs (a job of two half-GPU
    /// replicas asks for 1, one of a quarter for 0.25), not only whole GPUs.
    #[test]
    fn the_gpus_column_counts_fractions() {
        let task = |replicas: u32, amounts: &[(&str, u64)]| v1::TaskSpec {
            replicas,
            resources: Some(v1::Resources { amounts: amounts.iter().map(|(k, v)| (k.to_string(), *v)).collect() }),
            ..Default::default()
        };
        let spec = |tasks| Some(v1::JobSpec { tasks, ..Default::default() });
        assert_eq!(job_gpus_milli(spec(vec![task(2, &[("gpu.milli", 500)])]).as_ref()), 1000);
        assert_eq!(job_gpus_milli(spec(vec![task(1, &[("gpu.milli", 250)]), task(2, &[("gpu", 4)])]).as_ref()), 8250);
        let job = v1::Job { spec: spec(vec![task(1, &[("gpu.milli", 250)])]), ..Default::default() };
        let row = job_row(&job, 0);
        assert_eq!(row[JOB_COLUMNS.iter().position(|c| *c == "GPUS").unwrap()], "0.25");
    }
}
