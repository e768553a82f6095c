//! The client commands: each talks to a replica's `Baton` service (proto/baton.proto), one
//! file per concept. Every command is an `Args` struct and an async `run(conn, args, out)`
//! that writes to `out`, so tests can call them without a process; `execute` is what the
//! binary calls.
//!
//! - `connect`: addresses, failover, retries and the per-call deadline.
//! - `error`: what can go wrong, worded with what to do next.
//! - `output`, `data`, `human`: tables, `-o json|yaml`, and human units.
//! - `submit`, `jobs` (list, describe, cancel, pause, resume), `logs` (from the job's agent),
//!   `watch`, `queue`, `cohort`, `class`, `nodes` (nodes, cordon, uncordon, drain), `cluster`.
//! - `auth`: the token a command sends, `token` and `whoami`.
//! - `fairshare`: `usage`, GPU-hours per user, queue or pool, and with `--decayed` decayed
//!   usage per queue and user; `history`: accounting's record of each attempt.

pub mod arrays;
pub mod auth;
pub mod class;
pub mod cluster;
pub mod cohort;
pub mod connect;
pub mod data;
pub mod error;
pub mod fairshare;
pub mod gpu;
pub mod history;
pub mod human;
pub mod jobs;
pub mod logs;
pub mod maintenance;
pub mod mismatch;
pub mod nodes;
pub mod output;
pub mod queue;
pub mod snapshot;
pub mod submit;
pub mod watch;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

pub use connect::Conn;
pub use error::ClientError;

/// How to reach the cluster; every client command takes these.
#[derive(Args, Debug, Clone)]
pub struct ConnArgs {
    /// Replica addresses (host:port), comma-separated; the first that answers serves the command.
    #[arg(long, global = true, env = "BATON_SERVER", default_value = connect::DEFAULT_SERVER)]
    pub server: String,
    /// Bound on each call to the cluster, retries included (e.g. 10s, 1m).
    #[arg(long, global = true, default_value = "10s", value_parser = human::parse_duration_ms)]
    pub timeout: u64,
    #[command(flatten)]
    pub security: crate::tls::TransportArgs,
    /// A file holding the token to send (else the BATON_TOKEN environment variable).
    #[arg(long, global = true, env = "BATON_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
}

impl ConnArgs {
    pub fn conn(&self) -> Result<Conn, ClientError> {
        if self.timeout == 0 {
            return Err(ClientError::Usage("--timeout must be more than 0".into()));
        }
        let transport = self.security.transport().map_err(ClientError::Usage)?;
        let conn = Conn::new(connect::parse_addrs(&self.server)?, Duration::from_millis(self.timeout), transport);
        Ok(conn.with_bearer(auth::bearer(self)?))
    }
}

#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Submit a job: `baton submit --name N --queue Q --gpus 8 -- python train.py`, or `-f job.yaml`.
    Submit(Box<submit::SubmitArgs>),
    /// List jobs (filters combine).
    List(jobs::ListArgs),
    /// Show one job: spec, state, placement, why it waits, and with --events its history.
    Describe(jobs::DescribeArgs),
    /// Cancel a job (it is stopped if running).
    Cancel(jobs::JobArgs),
    /// Checkpoint a running job and hold it until `baton resume`.
    Pause(jobs::JobArgs),
    /// Let a paused job be scheduled again.
    Resume(jobs::JobArgs),
    /// Print a job replica's stdout or stderr, from the agent of the node it runs on.
    Logs(logs::LogsArgs),
    /// Print events as they happen (all jobs and nodes, or one job).
    Watch(watch::WatchArgs),
    /// Queues: quotas, cohort membership and preemption policy.
    Queue(queue::QueueArgs),
    /// Cohorts: groups of queues that lend and borrow quota.
    Cohort(cohort::CohortArgs),
    /// Priority classes.
    Class(class::ClassArgs),
    /// List nodes with their capacity, usage and status.
    Nodes(nodes::NodesArgs),
    /// Place no new work on a node (what runs there keeps running).
    Cordon(nodes::NodeArgs),
    /// Let new work be placed on a cordoned node again.
    Uncordon(nodes::NodeArgs),
    /// Cordon a node and let what runs there finish; it lists as drained once empty.
    Drain(nodes::NodeArgs),
    /// Maintenance windows: nodes reserved from a start to an end (create, list, delete).
    Maintenance(maintenance::MaintenanceArgs),
    /// Unhealthy GPUs: list them, clear one once fixed, or mark one by hand.
    Gpu(gpu::GpuArgs),
    /// The cluster as a whole.
    Cluster(cluster::ClusterArgs),
    /// GPU-hours per user, queue or pool; `--decayed`: the fair-share view (decayed usage).
    Usage(fairshare::UsageArgs),
    /// Each attempt jobs ran: who, where, how long, how it ended (accounting's records).
    History(history::HistoryArgs),
    /// Back up a live cluster's state to a file; restore one into a new cluster.
    Snapshot(snapshot::SnapshotArgs),
    /// API tokens: create, revoke, grant a queue, list (admins).
    Token(auth::TokenArgs),
    /// Who the token this command sends belongs to: user, roles, queues.
    Whoami(auth::WhoAmIArgs),
}

impl ClientCommand {
    pub fn conn_args(&self) -> &ConnArgs {
        match self {
            ClientCommand::Submit(a) => &a.conn,
            ClientCommand::List(a) => &a.conn,
            ClientCommand::Describe(a) => &a.conn,
            ClientCommand::Cancel(a) | ClientCommand::Pause(a) | ClientCommand::Resume(a) => &a.conn,
            ClientCommand::Logs(a) => &a.conn,
            ClientCommand::Watch(a) => &a.conn,
            ClientCommand::Queue(a) => &a.conn,
            ClientCommand::Cohort(a) => &a.conn,
            ClientCommand::Class(a) => &a.conn,
            ClientCommand::Nodes(a) => &a.conn,
            ClientCommand::Cordon(a) | ClientCommand::Uncordon(a) | ClientCommand::Drain(a) => &a.conn,
            ClientCommand::Maintenance(a) => &a.conn,
            ClientCommand::Gpu(a) => &a.conn,
            ClientCommand::Cluster(a) => &a.conn,
            ClientCommand::Usage(a) => &a.conn,
            ClientCommand::History(a) => &a.conn,
            ClientCommand::Snapshot(a) => &a.conn,
            ClientCommand::Token(a) => &a.conn,
            ClientCommand::Whoami(a) => &a.conn,
        }
    }
}

/// Runs a client command against `conn`, writing what it prints to `out`.
pub async fn run(conn: &Conn, cmd: &ClientCommand, out: &mut dyn Write) -> Result<(), ClientError> {
    match cmd {
        ClientCommand::Submit(a) => submit::run(conn, a, out).await,
        ClientCommand::List(a) => jobs::list(conn, a, out).await,
        ClientCommand::Describe(a) => jobs::describe(conn, a, out).await,
        ClientCommand::Cancel(a) => jobs::act(conn, jobs::Act::Cancel, a, out).await,
        ClientCommand::Pause(a) => jobs::act(conn, jobs::Act::Pause, a, out).await,
        ClientCommand::Resume(a) => jobs::act(conn, jobs::Act::Resume, a, out).await,
        ClientCommand::Logs(a) => logs::run(conn, a, out).await,
        ClientCommand::Watch(a) => watch::run(conn, a, out).await,
        ClientCommand::Queue(a) => queue::run(conn, a, out).await,
        ClientCommand::Cohort(a) => cohort::run(conn, a, out).await,
        ClientCommand::Class(a) => class::run(conn, a, out).await,
        ClientCommand::Nodes(a) => nodes::list(conn, a, out).await,
        ClientCommand::Cordon(a) => nodes::act(conn, nodes::Act::Cordon, a, out).await,
        ClientCommand::Uncordon(a) => nodes::act(conn, nodes::Act::Uncordon, a, out).await,
        ClientCommand::Drain(a) => nodes::act(conn, nodes::Act::Drain, a, out).await,
        ClientCommand::Maintenance(a) => maintenance::run(conn, a, out).await,
        ClientCommand::Gpu(a) => gpu::run(conn, a, out).await,
        ClientCommand::Cluster(a) => cluster::run(conn, a, out).await,
        ClientCommand::Usage(a) => fairshare::run(conn, a, out).await,
        ClientCommand::History(a) => history::history(conn, a, out).await,
        ClientCommand::Snapshot(a) => snapshot::run(conn, a, out).await,
        ClientCommand::Token(a) => auth::run(conn, a, out).await,
        ClientCommand::Whoami(_) => auth::whoami(conn, out).await,
    }
}

/// What the binary calls: runs the command on stdout and reports an error on stderr.
pub fn execute(cmd: ClientCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let mut stdout = std::io::stdout();
        // A restore reaches no cluster: it needs no transport security or token.
        if let ClientCommand::Snapshot(a) = &cmd
            && let snapshot::SnapshotCmd::Restore { .. } = &a.cmd
        {
            return snapshot::restore_offline(&a.cmd, &mut stdout);
        }
        let conn = cmd.conn_args().conn()?;
        run(&conn, &cmd, &mut stdout).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `baton list | head`: the reader went away, which is not a failure of the command.
        Err(ClientError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A table, or the message as data, per `-o`.
pub fn emit<T: data::ToData + ?Sized>(
    out: &mut dyn Write,
    format: output::Format,
    msg: &T,
    table: impl FnOnce(&T) -> String,
) -> Result<(), ClientError> {
    let text = match output::data_text(format, &msg.to_data()) {
        Some(t) => t,
        None => table(msg),
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// Prints what a write produced ("job train-1 paused"), or `fallback` when it says nothing.
pub fn print_ack(out: &mut dyn Write, ack: &baton_proto::v1::Ack, fallback: &str) -> Result<(), ClientError> {
    if ack.events.is_empty() {
        writeln!(out, "{fallback}")?;
    }
    for e in &ack.events {
        if e.message.is_empty() {
            writeln!(out, "{}", fallback)?;
        } else {
            writeln!(out, "{}", e.message)?;
        }
    }
    Ok(())
}
