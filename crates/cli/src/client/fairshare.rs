//! `baton usage`: GPU-hours per user, queue or pool from accounting's records (as Slurm's
//! sreport; `history.rs`), or with `--decayed` the fair-share view (decisions.md section
//! 12), as Slurm's sshare: each queue's and user's decayed usage at the cluster's time, in
//! resource-hours, weighted as the order compares them, and what each holds now.

use std::collections::BTreeMap;
use std::io::Write;

use baton_proto::v1;
use clap::{Args, ValueEnum};

use crate::client::error::{ClientError, Subject};
use crate::client::human::usage_settings_text;
use crate::client::output::{Format, Table};
use crate::client::queue::limit_text;
use crate::client::{Conn, ConnArgs, emit};

#[derive(Args, Debug)]
pub struct UsageArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The fair-share view: usage decayed by the cluster's usage_half_life.
    #[arg(long)]
    pub decayed: bool,
    /// Rows per user (the default), queue or pool; with --decayed per queue and user (pair,
    /// its default), user or queue.
    #[arg(long, value_enum)]
    pub by: Option<By>,
    /// GPU-hours since: a span back from now (30d, 12h), a UTC time or now. Default: 30d.
    #[arg(long, conflicts_with = "decayed")]
    pub since: Option<String>,
    /// GPU-hours until (same forms as --since). Default: now.
    #[arg(long, conflicts_with = "decayed")]
    pub until: Option<String>,
    /// Only this user's rows.
    #[arg(long)]
    pub user: Option<String>,
    /// Only this queue's rows.
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    Pair,
    User,
    Queue,
    Pool,
}

pub async fn run(conn: &Conn, a: &UsageArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    if !a.decayed {
        let by = match a.by.unwrap_or(By::User) {
            By::User => "user",
            By::Queue => "queue",
            By::Pool => "pool",
            By::Pair => {
                return Err(ClientError::Usage(
                    "--by pair is for --decayed; GPU-hours go by user, queue or pool".into(),
                ));
            }
        };
        if a.user.is_some() || a.queue.is_some() {
            return Err(ClientError::Usage(
                "--user and --queue filter the --decayed view; for one user's or queue's attempts see `baton history`"
                    .into(),
            ));
        }
        let since = a.since.as_deref().unwrap_or("30d");
        return crate::client::history::totals(conn, by, since, a.until.as_deref(), a.output, out).await;
    }
    if a.by == Some(By::Pool) {
        return Err(ClientError::Usage("--decayed goes by pair, user or queue; pools have no decayed usage".into()));
    }
    let reply = conn.call(Subject::Other, "", |mut c| async move { c.get_usage(v1::Empty {}).await }).await?;
    let rows = grouped(&reply.rows, a);
    if rows.is_empty() {
        let settings = reply.settings.as_ref().map_or("off".into(), usage_settings_text);
        let what = match (&a.user, &a.queue) {
            (Some(u), _) => format!("for user {u} "),
            (None, Some(q)) => format!("for queue {q} "),
            (None, None) => String::new(),
        };
        writeln!(out, "no usage {what}to show (usage over time: {settings})")?;
        return Ok(());
    }
    emit(out, a.output, rows.as_slice(), table)
}

/// The rows asked for, summed per user or per queue when `--by` says so.
fn grouped(rows: &[v1::UsageRow], a: &UsageArgs) -> Vec<v1::UsageRow> {
    let kept = rows
        .iter()
        .filter(|r| a.user.as_ref().is_none_or(|u| &r.user == u) && a.queue.as_ref().is_none_or(|q| &r.queue == q));
    let mut out: BTreeMap<(String, String), v1::UsageRow> = BTreeMap::new();
    for r in kept {
        let key = match a.by.unwrap_or(By::Pair) {
            By::Pair | By::Pool => (r.queue.clone(), r.user.clone()),
            By::User => ("*".into(), r.user.clone()),
            By::Queue => (r.queue.clone(), "*".into()),
        };
        let row = out.entry(key.clone()).or_insert_with(|| v1::UsageRow {
            queue: key.0.clone(),
            user: key.1.clone(),
            ..Default::default()
        });
        row.weighted += r.weighted;
        for (k, v) in &r.usage {
            *row.usage.entry(k.clone()).or_insert(0.0) += v;
        }
        let held = row.held.get_or_insert_with(v1::Resources::default);
        for (k, v) in r.held.iter().flat_map(|h| h.amounts.iter()) {
            *held.amounts.entry(k.clone()).or_insert(0) += v;
        }
    }
    let mut rows: Vec<v1::UsageRow> = out.into_values().collect();
    // Heaviest first: who waits behind whom among equals.
    rows.sort_by(|x, y| y.weighted.total_cmp(&x.weighted).then_with(|| (&x.queue, &x.user).cmp(&(&y.queue, &y.user))));
    rows
}

fn table(rows: &[v1::UsageRow]) -> String {
    let mut t = Table::new(&["QUEUE", "USER", "WEIGHTED", "DECAYED USAGE", "HOLDS NOW"]);
    for r in rows {
        let usage: Vec<String> = r
            .usage
            .iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| format!("{k} {}", hours(*v)))
            .collect();
        let usage = if usage.is_empty() { "-".to_string() } else { usage.join(", ") };
        let held = match limit_text(r.held.as_ref()).as_str() {
            "none" => "-".to_string(),
            h => h.to_string(),
        };
        t.row(vec![r.queue.clone(), r.user.clone(), hours(r.weighted), usage, held]);
    }
    t.render()
}

/// Resource-seconds as hours: two decimals, four below a hundredth (a few GPU-seconds
/// would read as nothing).
fn hours(seconds: f64) -> String {
    let h = seconds / 3600.0;
    if h > 0.0 && h < 0.01 { format!("{h:.4}h") } else { format!("{h:.2}h") }
}
