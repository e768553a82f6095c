//! `baton maintenance create|list|delete`: maintenance windows (decisions.md section 14).
//! Times are UTC (`2026-12-01T02:00:00Z`) or from now (`+2h`, `now`); nodes a host list
//! (`g[1-4],h7`), expanded here and sent by name.

use std::io::Write;

use baton_proto::v1;
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::human::{now_ms, parse_instant_ms, timestamp};
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
