//! `baton logs JOB`: finds the node that runs the job's rank (GetJob placements; for an
//! attempt that no longer runs, the nodes its `Started` event names) and streams the
//! replica's output through a replica (`JobLogs`), which checks that the caller may read the
//! job's logs and reads them from that node's agent. Agents keep logs; replicas do not.

use std::io::Write;

use baton_proto::v1;
use baton_proto::words::Word;
use clap::Args;
use tonic::Code;

use crate::client::connect::chain;
use crate::client::error::{ClientError, Subject};
use crate::client::jobs::get_job;
use crate::client::{Conn, ConnArgs};

#[derive(Args, Debug)]
pub struct LogsArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The job's name or id.
    pub job: String,
    /// Keep printing as the log grows, until the attempt ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Which replica (0 is the gang's first).
    #[arg(long, default_value_t = 0)]
    pub rank: u32,
    /// Print stderr instead of stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Which attempt [default: the newest the agent ran].
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Read from this node's agent (for a job that no longer runs, whose placement the server
    /// no longer lists).
    #[arg(long)]
    pub node: Option<String>,
}

fn logs_err(msg: impl Into<String>) -> ClientError {
    ClientError::Logs(msg.into())
}

/// The nodes that may hold the rank's log, in the order to ask them.
fn candidate_nodes(job: &v1::Job, a: &LogsArgs) -> Result<Vec<String>, ClientError> {
    if let Some(n) = &a.node {
        return Ok(vec![n.clone()]);
    }
    let attempt = a.attempt.unwrap_or(job.attempt);
    if !job.placements.is_empty() && attempt == job.attempt {
        return Ok(job.placements.iter().map(|p| p.node.clone()).collect());
    }
    // An attempt that no longer runs: its Started event says where it ran.
    let started = job
        .events
        .iter()
        .rev()
        .find(|e| e.kind() == v1::EventKind::Started && e.attempt == attempt && !e.nodes.is_empty());
    if let Some(e) = started {
        return Ok(e.nodes.clone());
    }
    if job.attempt == 0 {
        let why = if job.reason.is_empty() { String::new() } else { format!(": {}", job.reason) };
        return Err(logs_err(format!(
            "job {} never started, so it has no logs yet (state {}{why})",
            a.job,
            job.state().word()
        )));
    }
    Err(logs_err(format!(
        "job {} has no record of where attempt {attempt} ran (state {}; the job's event history keeps only \
         its newest events); name the node whose agent kept its logs with --node",
        a.job,
        job.state().word()
    )))
}

fn replica_count(job: &v1::Job) -> u32 {
    job.spec.as_ref().map_or(0, |s| s.tasks.iter().map(|t| t.replicas).sum())
}

pub async fn run(conn: &Conn, a: &LogsArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let job = get_job(conn, &a.job).await?;
    let replicas = replica_count(&job);
    if replicas > 0 && a.rank >= replicas {
        return Err(ClientError::Usage(format!(
            "--rank {}: job {} has {replicas} replica(s), ranks 0 to {}",
            a.rank,
            a.job,
            replicas - 1
        )));
    }
    let candidates = candidate_nodes(&job, a)?;
    let nodes = conn.call(Subject::Other, "", |mut c| async move { c.list_nodes(v1::Empty {}).await }).await?.nodes;
    let mut asked = Vec::new();
    let mut unreachable = Vec::new();
    let mut no_address = Vec::new();
    for name in &candidates {
        let node = nodes.iter().find(|n| &n.name == name).ok_or_else(|| ClientError::NotFound {
            what: "node",
            name: name.clone(),
            see: "baton nodes",
        })?;
        if node.agent_addr.is_empty() {
            no_address.push(name.clone());
            continue;
        }
        let request = v1::LogsRequest {
            job: job.spec.as_ref().map_or_else(|| a.job.clone(), |s| s.name.clone()),
            job_id: job.id,
            attempt: a.attempt.unwrap_or(0),
            rank: a.rank,
            stream: if a.stderr { "stderr".into() } else { "stdout".into() },
            offset: 0,
            follow: a.follow,
        };
        let started = tokio::time::timeout(conn.timeout(), open(conn, name, request)).await;
        match started {
            Err(_) => {
                unreachable.push(format!("{name} (agent {}): no answer within {:?}", node.agent_addr, conn.timeout()))
            }
            Ok(Err(Open::Unreachable(why))) => unreachable.push(format!("{name} (agent {}): {why}", node.agent_addr)),
            Ok(Err(Open::NotHere)) => asked.push(format!("{name} (agent {})", node.agent_addr)),
            Ok(Err(Open::Refused(s))) if matches!(s.code(), Code::PermissionDenied | Code::Unauthenticated) => {
                return Err(ClientError::from_status(&s, Subject::Other, &a.job));
            }
            Ok(Err(Open::Refused(s))) => {
                return Err(logs_err(format!("the agent on {name} ({}) refused: {}", node.agent_addr, s.message())));
            }
            Ok(Ok(stream)) => return copy(stream, out, name, &node.agent_addr).await,
        }
    }
    if let [only] = no_address.as_slice()
        && candidates.len() == 1
    {
        return Err(logs_err(format!(
            "node {only} has no agent address, so its logs cannot be read; its agent serves no logs \
             (check the agent's log address setting on {only})"
        )));
    }
    let attempt = a.attempt.map_or("the newest attempt".to_string(), |n| format!("attempt {n}"));
    let mut msg = format!("no log of job {} rank {} ({attempt}) could be read", a.job, a.rank);
    if !unreachable.is_empty() {
        msg.push_str(&format!("; agent unreachable: {}", unreachable.join("; ")));
        msg.push_str("; check that `baton agent` runs there and its log address is reachable from here");
    }
    if !no_address.is_empty() {
        msg.push_str(&format!("; node without an agent address: {}", no_address.join(", ")));
    }
    if !asked.is_empty() {
        msg.push_str(&format!("; agents without it: {}", asked.join(", ")));
    }
    Err(logs_err(msg))
}

enum Open {
    Unreachable(String),
    /// The agent does not have this job, rank or attempt.
    NotHere,
    Refused(tonic::Status),
}

/// Opens the log stream through a replica. Only a replica that cannot serve (UNAVAILABLE)
/// is retried on another; what the replica or the agent answers comes back as it is.
async fn open(conn: &Conn, node: &str, request: v1::LogsRequest) -> Result<tonic::Streaming<v1::LogChunk>, Open> {
    let req = v1::JobLogsRequest { node: node.to_string(), logs: Some(request) };
    let answer = conn
        .call(Subject::Other, "", |mut c| {
            let r = req.clone();
            async move {
                match c.job_logs(r).await {
                    Ok(s) => Ok(tonic::Response::new(Ok(s.into_inner()))),
                    Err(s) if s.code() == Code::Unavailable => Err(s),
                    Err(s) => Ok(tonic::Response::new(Err(s))),
                }
            }
        })
        .await
        .map_err(|e| Open::Unreachable(e.to_string()))?;
    match answer {
        Ok(stream) => Ok(stream),
        Err(s) if s.code() == Code::NotFound => Err(Open::NotHere),
        Err(s) if s.code() == Code::FailedPrecondition => Err(Open::Unreachable(s.message().to_string())),
        Err(s) => Err(Open::Refused(s)),
    }
}

async fn copy(
    mut stream: tonic::Streaming<v1::LogChunk>,
    out: &mut dyn Write,
    node: &str,
    addr: &str,
) -> Result<(), ClientError> {
    let mut received: u64 = 0;
    loop {
        let next = stream.message().await;
        match next {
            Ok(Some(chunk)) => {
                out.write_all(&chunk.data)?;
                // Each chunk is shown as it comes: a follow may idle for long between chunks.
                out.flush()?;
                received += chunk.data.len() as u64;
            }
            Ok(None) => {
                out.flush()?;
                return Ok(());
            }
            Err(s) => {
                out.flush()?;
                return Err(ClientError::Stream(format!(
                    "the log stream from the agent on {node} ({addr}) broke after {received} bytes: {}",
                    if s.message().is_empty() { chain(&s) } else { s.message().to_string() }
                )));
            }
        }
    }
}
