//! `baton gpu list|healthy|unhealthy`: unhealthy GPUs (decisions.md section 14). An unhealthy
//! GPU takes no new work and leaves its pool's capacity; jobs on it are stopped (checkpoint,
//! grace, kill) and requeued. Agents report what they find; operators mark and clear by hand.

use std::io::Write;

use baton_proto::v1;
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::human::timestamp;
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit, print_ack};

#[derive(Args, Debug)]
pub struct GpuArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: GpuCmd,
}

#[derive(Subcommand, Debug)]
pub enum GpuCmd {
    /// Unhealthy GPUs, by node: what was found and since when.
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Clear a GPU's unhealthy mark once it is fixed (operators and admins): it takes work
    /// again.
    Healthy {
        node: String,
        /// The GPU's index on its node (as in CUDA_VISIBLE_DEVICES).
        gpu: u32,
    },
    /// Mark a GPU unhealthy by hand (operators and admins): the jobs on it are stopped and
    /// requeued, and it takes no new work until `baton gpu healthy`.
    Unhealthy {
        node: String,
        gpu: u32,
        /// What is wrong with it, for the jobs' reasons and the events.
        #[arg(long)]
        error: String,
    },
}

/// One unhealthy GPU as `list` shows it.
#[derive(serde::Serialize)]
pub struct Row {
    pub node: String,
    #[serde(flatten)]
    pub fault: v1::GpuFault,
}

pub async fn run(conn: &Conn, a: &GpuArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let (node, gpu, error) = match &a.cmd {
        GpuCmd::List { output } => {
            let reply = conn.call(Subject::Other, "", |mut c| async move { c.list_nodes(v1::Empty {}).await }).await?;
            let rows: Vec<Row> = reply
                .nodes
                .into_iter()
                .flat_map(|n| n.unhealthy_gpus.into_iter().map(move |fault| Row { node: n.name.clone(), fault }))
                .collect();
            return emit(out, *output, rows.as_slice(), rows_table);
        }
        GpuCmd::Healthy { node, gpu } => (node, *gpu, None),
        GpuCmd::Unhealthy { node, gpu, error } => {
            if error.trim().is_empty() {
                return Err(ClientError::Usage("--error: say what is wrong with the GPU (e.g. \"XID 79\")".into()));
            }
            (node, *gpu, Some(error.clone()))
        }
    };
    let req = v1::SetGpuHealthRequest {
        node: node.clone(),
        gpu,
        healthy: error.is_none(),
        error: error.clone().unwrap_or_default(),
    };
    let ack = conn
        .call(Subject::Node, node, |mut c| {
            let req = req.clone();
            async move { c.set_gpu_health(req).await }
        })
        .await?;
    let what = match error {
        Some(e) => format!("GPU {gpu} of node {node} marked unhealthy ({e}): the jobs on it are stopped and requeued"),
        None => format!("GPU {gpu} of node {node} is healthy: it takes work again"),
    };
    print_ack(out, &ack, &what)
}

pub fn rows_table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "no unhealthy GPUs\n".into();
    }
    let mut t = Table::new(&["NODE", "GPU", "SINCE", "FOUND BY", "ERROR"]);
    for r in rows {
        let by = if r.fault.by_check { "health check" } else { "NVML or a person" };
        t.row(vec![
            r.node.clone(),
            r.fault.gpu.to_string(),
            timestamp(r.fault.since_ms),
            by.into(),
            r.fault.error.clone(),
        ]);
    }
    t.render()
}
