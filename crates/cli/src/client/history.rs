//! `baton history` (as Slurm's sacct) and `baton usage` without `--decayed` (as sreport):
//! accounting's records of each attempt, and GPU time per user, queue or pool.

use std::io::Write;

use baton_proto::v1;
use clap::{Args, ValueEnum};

use crate::client::error::{ClientError, Subject};
use crate::client::human::{now_ms, parse_time_back_ms, resources, span, timestamp};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit};

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Only this user's attempts.
    #[arg(long)]
    pub user: Option<String>,
    /// Only this queue's attempts.
    #[arg(long)]
    pub queue: Option<String>,
    /// Attempts that ended since: a span back from now (7d, 12h), a UTC time
    /// (2026-11-01T00:00:00Z) or now. Default: 7d.
    #[arg(long, default_value = "7d")]
    pub since: String,
    /// Attempts that ended before (same forms as --since). Default: now.
    #[arg(long)]
    pub until: Option<String>,
    /// How the attempt ended: succeeded, failed, timed-out, cancelled, preempted,
    /// suspended, paused, requeued, maintenance, gpu-fault, resized.
    #[arg(long)]
    pub state: Option<String>,
    /// At most this many, the newest (up to 10000).
    #[arg(long, default_value_t = 1_000)]
    pub limit: u32,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: HistoryFormat,
}

/// `-o`: a table, JSON, or CSV for spreadsheets and billing scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HistoryFormat {
    Table,
    Json,
    Csv,
}

/// `--since`/`--until` as milliseconds, a reversed range refused by flag.
fn range(since: &str, until: Option<&str>) -> Result<(u64, Option<u64>), ClientError> {
    let now = now_ms();
    let since_ms = parse_time_back_ms(since, now, "--since").map_err(ClientError::Usage)?;
    let until_ms = until.map(|u| parse_time_back_ms(u, now, "--until")).transpose().map_err(ClientError::Usage)?;
    if let Some(u) = until_ms
        && u <= since_ms
    {
        return Err(ClientError::Usage(format!(
            "--until ({}) must be after --since ({}): the time range is empty or reversed",
            timestamp(u),
            timestamp(since_ms)
        )));
    }
    Ok((since_ms, until_ms))
}

pub async fn history(conn: &Conn, a: &HistoryArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let (since_ms, until_ms) = range(&a.since, a.until.as_deref())?;
    if a.limit == 0 || a.limit > MAX_LIMIT {
        return Err(ClientError::Usage(format!("--limit must be from 1 to {MAX_LIMIT}")));
    }
    let r = v1::HistoryRequest {
        user: a.user.clone(),
        queue: a.queue.clone(),
        since_ms,
        until_ms,
        state: a.state.clone(),
        limit: a.limit,
    };
    let reply = conn
        .call(Subject::Other, "", |mut c| {
            let r = r.clone();
            async move { c.history(r).await }
        })
        .await?;
    match a.output {
        HistoryFormat::Json => emit(out, Format::Json, &reply, |_| String::new())?,
        HistoryFormat::Csv => out.write_all(csv(&reply.records).as_bytes())?,
        HistoryFormat::Table if reply.records.is_empty() => writeln!(out, "{}", reply.note)?,
        HistoryFormat::Table => {
            out.write_all(table(&reply.records).as_bytes())?;
            if reply.more {
                writeln!(out, "(the newest {}; older ones matched too: narrow --since or raise --limit)", a.limit)?;
            }
        }
    }
    Ok(())
}

/// The most records one call answers (`HistoryRequest.limit`'s bound).
const MAX_LIMIT: u32 = 10_000;

fn ended_text(r: &v1::AttemptRecord) -> String {
    match (r.ending.as_str(), r.exit_code, r.preempted_by.as_str()) {
        ("failed", Some(code), _) => format!("failed ({code})"),
        (e, _, by) if !by.is_empty() => format!("{e} by {by}"),
        (e, _, _) => e.to_string(),
    }
}

fn table(records: &[v1::AttemptRecord]) -> String {
    let mut t = Table::new(&["JOB", "ATTEMPT", "USER", "QUEUE", "GPUS", "START", "RAN", "GPU-HOURS", "LOST", "ENDED"]);
    for r in records {
        t.row(vec![
            r.name.clone(),
            r.attempt.to_string(),
            r.user.clone(),
            r.queue.clone(),
            r.gpus.to_string(),
            timestamp(r.start_ms),
            span(r.end_ms.saturating_sub(r.start_ms)),
            gpu_hours(r.gpu_ms),
            if r.lost_ms == 0 { "-".into() } else { span(r.lost_ms) },
            ended_text(r),
        ]);
    }
    t.render()
}

/// GPU-milliseconds as hours, two decimals (four below a hundredth).
pub fn gpu_hours(gpu_ms: u64) -> String {
    let h = gpu_ms as f64 / 3_600_000.0;
    if h > 0.0 && h < 0.01 { format!("{h:.4}") } else { format!("{h:.2}") }
}

/// One line per attempt, RFC 4180 quoting; times in UTC and in milliseconds.
fn csv(records: &[v1::AttemptRecord]) -> String {
    let mut s = String::from(
        "seq,job,name,attempt,user,queue,pool,nodes,gpus,resources,start,end,start_ms,end_ms,ended,exit_code,preempted_by,gpu_hours,lost_ms,detail\n",
    );
    for r in records {
        let res = r.resources.as_ref().map(|x| resources(&x.amounts)).unwrap_or_default();
        let fields = [
            r.seq.to_string(),
            r.job.to_string(),
            r.name.clone(),
            r.attempt.to_string(),
            r.user.clone(),
            r.queue.clone(),
            r.pool.clone(),
            r.nodes.join(" "),
            r.gpus.to_string(),
            res,
            timestamp(r.start_ms),
            timestamp(r.end_ms),
            r.start_ms.to_string(),
            r.end_ms.to_string(),
            r.ending.clone(),
            r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            r.preempted_by.clone(),
            format!("{:.6}", r.gpu_ms as f64 / 3_600_000.0),
            r.lost_ms.to_string(),
            r.detail.clone(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

fn csv_field(f: &str) -> String {
    if f.contains([',', '"', '\n', '\r']) { format!("\"{}\"", f.replace('"', "\"\"")) } else { f.to_string() }
}

/// `baton usage [--by user|queue|pool] [--since 30d]`: GPU-hours from the records and the
/// attempts running now.
pub async fn totals(
    conn: &Conn,
    by: &str,
    since: &str,
    until: Option<&str>,
    output: Format,
    out: &mut dyn Write,
) -> Result<(), ClientError> {
    let (since_ms, until_ms) = range(since, until)?;
    let r = v1::UsageTotalsRequest { by: by.to_string(), since_ms, until_ms };
    let reply = conn
        .call(Subject::Other, "", |mut c| {
            let r = r.clone();
            async move { c.usage_totals(r).await }
        })
        .await?;
    if reply.rows.is_empty() && output == Format::Table {
        writeln!(out, "{}", reply.note)?;
        return Ok(());
    }
    emit(out, output, &reply, |r| totals_table(by, r))
}

fn totals_table(by: &str, r: &v1::UsageTotalsReply) -> String {
    let head: &'static str = match by {
        "queue" => "QUEUE",
        "pool" => "POOL",
        _ => "USER",
    };
    let mut t =
        Table::new(&[head, "GPU-HOURS", "JOBS", "ATTEMPTS", "RUNNING", "PREEMPTED GPU-HOURS", "LOST GPU-HOURS"]);
    for row in &r.rows {
        t.row(vec![
            row.key.clone(),
            gpu_hours(row.gpu_ms),
            row.jobs.to_string(),
            row.attempts.to_string(),
            row.running.to_string(),
            gpu_hours(row.preempted_gpu_ms),
            gpu_hours(row.lost_gpu_ms),
        ]);
    }
    format!("from {} to {}\n{}", timestamp(r.since_ms), timestamp(r.until_ms), t.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn a_reversed_range_is_refused_naming_both_flags() {
        let e = range("1d", Some("2d")).unwrap_err().to_string();
        assert!(e.contains("--until") && e.contains("--since"), "{e}");
        assert!(range("yesterday", None).unwrap_err().to_string().contains("--since \"yesterday\""));
    }
}
