//! `baton maintenance create|list|delete`: maintenance windows (decisions.md section 14).
//! Times are UTC (`2026-12-01T02:00:00Z`) or from now (`+2h`, `now`); nodes a host list
//! (`g[1-4],h7`), expanded here and sent by name.

use std::io::Write;

use baton_proto::v1;
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::human::{now_ms, parse_duration_ms, timestamp};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit, print_ack};

#[derive(Args, Debug)]
pub struct MaintenanceArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: MaintenanceCmd,
}

#[derive(Subcommand, Debug)]
pub enum MaintenanceCmd {
    /// Windows ahead and started, by name.
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Reserve nodes from --start to --end (operators and admins). Before the start they take
    /// only jobs whose time limit ends them by then; at the start what runs there is stopped
    /// (checkpoint, grace, kill) and requeued; until the end they take nothing.
    Create {
        name: String,
        /// A host list: `g[1-4]`, `g1,g3`, `g[1-2],h[5-6]`.
        #[arg(long)]
        nodes: String,
        /// When it starts: UTC (`2026-12-01T02:00:00Z`), or from now (`+2h`, `now`).
        #[arg(long)]
        start: String,
        /// When it ends, as --start.
        #[arg(long)]
        end: String,
    },
    /// Forget a window; a started one gives its nodes back at once.
    Delete { name: String },
}

pub async fn run(conn: &Conn, a: &MaintenanceArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.cmd {
        MaintenanceCmd::List { output } => {
            let reply =
                conn.call(Subject::Other, "", |mut c| async move { c.list_maintenance(v1::Empty {}).await }).await?;
            emit(out, *output, reply.windows.as_slice(), windows_table)
        }
        MaintenanceCmd::Create { name, nodes, start, end } => {
            let now = now_ms();
            let w = v1::MaintenanceWindow {
                name: name.clone(),
                nodes: expand_nodes(nodes)?,
                start_ms: parse_instant_ms(start, now).map_err(|e| usage(format!("--start: {e}")))?,
                end_ms: parse_instant_ms(end, now).map_err(|e| usage(format!("--end: {e}")))?,
                active: false,
            };
            if w.end_ms <= w.start_ms {
                return Err(usage(format!(
                    "--end ({}) is not after --start ({})",
                    timestamp(w.end_ms),
                    timestamp(w.start_ms)
                )));
            }
            baton_proto::convert::window_from_proto(&w).map_err(|e| usage(e.to_string()))?;
            let created = conn
                .call(Subject::Other, name, |mut c| {
                    let w = w.clone();
                    async move { c.create_maintenance(w).await }
                })
                .await;
            let ack = match created {
                Err(ClientError::Exists(_)) => return Err(usage(format!("maintenance window {name} already exists"))),
                other => other?,
            };
            let what =
                format!("maintenance window {name} created: {} to {}", timestamp(w.start_ms), timestamp(w.end_ms));
            print_ack(out, &ack, &what)
        }
        MaintenanceCmd::Delete { name } => {
            let r = v1::NameRef { name: name.clone() };
            let ack = conn
                .call(Subject::Other, name, |mut c| {
                    let r = r.clone();
                    async move { c.delete_maintenance(r).await }
                })
                .await?;
            print_ack(out, &ack, &format!("maintenance window {name} deleted"))
        }
    }
}

fn usage(msg: String) -> ClientError {
    ClientError::Usage(msg)
}

fn expand_nodes(list: &str) -> Result<Vec<String>, ClientError> {
    let nodes = baton_sim::hostlist::expand_list(list).map_err(|e| usage(format!("--nodes: {e}")))?;
    if nodes.is_empty() {
        return Err(usage("--nodes: no node named".into()));
    }
    Ok(nodes)
}

pub fn windows_table(ws: &[v1::MaintenanceWindow]) -> String {
    if ws.is_empty() {
        return "no maintenance windows\n".into();
    }
    let mut t = Table::new(&["NAME", "START", "END", "STATE", "NODES"]);
    for w in ws {
        let state = if w.active { "started" } else { "ahead" };
        t.row(vec![w.name.clone(), timestamp(w.start_ms), timestamp(w.end_ms), state.into(), w.nodes.join(",")]);
    }
    t.render()
}

/// `now`, `+DURATION` from `now_ms`, or a UTC time `YYYY-MM-DDTHH:MM[:SS[.mmm]]Z`.
pub fn parse_instant_ms(text: &str, now_ms: u64) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(d) = t.strip_prefix('+') {
        return Ok(now_ms.saturating_add(parse_duration_ms(d)?));
    }
    utc_ms(t).ok_or_else(|| format!("{t:?} is not a UTC time (2026-12-01T02:00:00Z), +DURATION (+2h) or now"))
}

fn utc_ms(t: &str) -> Option<u64> {
    let t = t.strip_suffix('Z').or_else(|| t.strip_suffix('z'))?;
    let (date, time) = t.split_once(['T', 't', ' '])?;
    let mut d = date.split('-');
    let (y, mo, day) = (d.next()?.parse::<i64>().ok()?, d.next()?.parse::<u32>().ok()?, d.next()?.parse::<u32>().ok()?);
    if d.next().is_some() || !(1..=12).contains(&mo) || !(1..=31).contains(&day) {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut p = hms.split(':');
    let h = p.next()?.parse::<u64>().ok()?;
    let m = p.next()?.parse::<u64>().ok()?;
    let s = p.next().map_or(Some(0), |x| x.parse::<u64>().ok())?;
    if p.next().is_some() || h > 23 || m > 59 || s > 59 || frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = if frac.is_empty() { 0 } else { frac.parse::<u64>().ok()? * 10u64.pow(3 - frac.len() as u32) };
    let days = days_from_civil(y, mo, day);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + s;
    Some(secs * 1000 + ms)
}

/// (year, month, day) to days since 1970-01-01, the inverse of `human`'s calendar (H.
/// Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_utc_relative_and_now_and_round_trip_with_timestamp() {
        let now = 1_764_000_000_000;
        assert_eq!(parse_instant_ms("now", now), Ok(now));
        assert_eq!(parse_instant_ms("+2h", now), Ok(now + 7_200_000));
        for ms in [0, 951_782_400_000, 1_764_979_200_123, 4_102_444_800_000] {
            assert_eq!(parse_instant_ms(&timestamp(ms), now), Ok(ms), "{}", timestamp(ms));
        }
        assert_eq!(parse_instant_ms("2026-12-01T02:00Z", now), Ok(1_796_090_400_000));
        for bad in ["tomorrow", "2026-13-01T00:00:00Z", "2026-12-01T02:00:00", "2026-12-01T25:00:00Z", "+soon"] {
            assert!(parse_instant_ms(bad, now).is_err(), "{bad}");
        }
    }
}
