//! `JobLogs`: a job replica's log, read through this replica from the agent that keeps it.
//!
//! Logs are a job's private data, like its environment: only its owner, operators and admins
//! may read them. The check needs the caller's token, which only replicas can verify, so the
//! read goes through a replica: it checks the token against the replicated state (a
//! revocation counts at once), then reads from the agent with its own replica certificate.
//! Agents serve logs to replica certificates only. No key or grant has to be shared with
//! agents, and no clock of theirs is trusted.
//!
//! A followed log can stay open for days, so the relay checks the caller again (against this
//! replica's applied state: [`Caller::refresh`], then the same rights as at the start) before
//! each chunk it relays and every `STREAM_RECHECK_MS` while the log is silent: a revoked token's
//! stream ends with UNAUTHENTICATED, a reader who lost the right to the job's logs (a grant
//! taken back) with PERMISSION_DENIED, and no chunk is relayed after this replica applied that.

use std::time::Duration;

use baton_model::State;
use baton_model::access::{Subject, Token};
use baton_model::job::Job;
use baton_proto::v1::agent_logs_client::AgentLogsClient;
use baton_proto::v1::{JobLogsRequest, LogChunk, LogsRequest};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Response, Status};

use super::{Api, LogStream};
use crate::auth::{Caller, STREAM_RECHECK_MS};

/// Chunks buffered per log stream between the agent and the client.
const LOG_BUFFER_CHUNKS: usize = 16;
/// Longest wait for an agent to answer a log request.
const AGENT_DIAL_TIMEOUT_MS: u64 = 3_000;

pub async fn job_logs(
    api: &Api,
    who: &Caller,
    identity: String,
    cert: baton_proto::tls::CertGuard,
    r: JobLogsRequest,
) -> Result<Response<LogStream>, Status> {
    let mut logs = r.logs.ok_or_else(|| Status::invalid_argument("logs: missing"))?;
    let job_name = logs.job.clone();
    let (addr, job_id) = allowed_agent(api, who, &r.node, &logs.job).await?;
    // Agents keep logs by job id. The id is the one of the job whose rights were just
    // checked, whatever the client sent: an id of its own choosing would read another
    // job's logs under the name of one the caller may read.
    logs.job_id = job_id;
    // Held by the stream's task, like the replica-wide slot: both free when the stream ends
    // or its client goes.
    let client_slot = api.ctx.log_readers.acquire(identity, api.ctx.settings.max_log_streams_per_client)?;
    let slot = api.ctx.log_slots.clone().try_acquire_owned().map_err(|_| {
        Status::resource_exhausted(format!(
            "{} log streams are open on this replica (max_log_streams); close one or read through another replica",
            api.ctx.settings.max_log_streams
        ))
    })?;
    let mut upstream = open(api, &r.node, &addr, logs).await?;
    let (tx, rx) = mpsc::channel(LOG_BUFFER_CHUNKS);
    let mut closing = api.ctx.closing.subscribe();
    let max_bytes = api.ctx.settings.max_log_stream_bytes;
    let (ctx, mut who) = (api.ctx.clone(), who.clone());
    // The caller's rights to this job's logs now, as this replica's applied state has them.
    let mut still_allowed =
        move || cert.check().and_then(|()| ctx.replica.read_local(|s| may_still_read(s, &mut who, job_id, &job_name)));
    tokio::spawn(async move {
        let _slots = (slot, client_slot);
        let mut relayed: u64 = 0;
        let mut recheck = tokio::time::interval(Duration::from_millis(STREAM_RECHECK_MS));
        recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                next = upstream.message() => next,
                // A revocation makes no event and a silent log no chunk: look for itself.
                _ = recheck.tick() => match still_allowed() {
                    Ok(()) => continue,
                    Err(s) => {
                        let _ = tx.send(Err(s)).await;
                        return;
                    }
                },
                // Its output (a guard, not Send) must not live across the awaits above.
                () = async { let _ = closing.wait_for(|c| *c).await; } => return,
                () = tx.closed() => return,
            };
            let item: Result<LogChunk, Status> = match next {
                // Checked before the chunk goes: none is relayed once the rights are gone.
                Ok(Some(chunk)) => still_allowed().and_then(|()| {
                    if relayed.saturating_add(chunk.data.len() as u64) > max_bytes {
                        return Err(Status::resource_exhausted(format!(
                            "this log stream relayed {relayed} bytes, the replica's bound \
                             (max_log_stream_bytes ({max_bytes})); the log goes on at byte {}: ask for it again",
                            chunk.offset
                        )));
                    }
                    relayed = relayed.saturating_add(chunk.data.len() as u64);
                    Ok(chunk)
                }),
                Ok(None) => return,
                Err(s) => Err(s),
            };
            let end = item.is_err();
            if tx.send(item).await.is_err() || end {
                return;
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// The agent address of `node` and the job's id, once `who` may read `job`'s logs. A job
/// the caller may not see at all is answered as one that does not exist, as `get` does:
/// the refusal would name its owner.
async fn allowed_agent(api: &Api, who: &Caller, node: &str, job: &str) -> Result<(String, u64), Status> {
    let who = who.clone();
    api.read(move |s| {
        let unknown = || Status::not_found(format!("unknown job {job:?}; see `baton list`"));
        let j = s.job_by_name(job).ok_or_else(unknown)?;
        if super::visible::view(s, &who, j) == super::visible::View::Hidden {
            return Err(unknown());
        }
        may_read(s, who.token(), j)?;
        let n = s
            .nodes()
            .iter()
            .find(|(name, _)| name.as_str() == node)
            .map(|(_, n)| n)
            .ok_or_else(|| Status::not_found(format!("unknown node {node:?}; see `baton nodes`")))?;
        if n.spec.agent_addr.is_empty() {
            return Err(Status::failed_precondition(format!(
                "node {node} has no agent address; its agent serves no logs"
            )));
        }
        Ok((n.spec.agent_addr.clone(), j.id))
    })
    .await?
}

/// PERMISSION_DENIED unless `token` may read `j`'s logs (no token: `--auth none`, anyone).
fn may_read(s: &State, token: Option<&Token>, j: &Job) -> Result<(), Status> {
    match token {
        Some(t) if !t.may_see_private(&Subject::of_job(j, s.access().owner(j.id))) => {
            let owner = s.access().owner(j.id).map_or("no user".to_string(), |o| format!("user {o}"));
            Err(Status::permission_denied(format!(
                "the logs of job {} are its owner's ({owner}), operators' and admins'; user {} is none of them",
                j.spec.name, t.spec.user
            )))
        }
        _ => Ok(()),
    }
}

/// Whether the caller of a log stream opened earlier may still read job `job_id`'s logs, as
/// `s` says now. A job no longer kept (forgotten once finished) has no owner to ask, so its
/// logs stay open only to those who may read every job's, as its events do.
fn may_still_read(s: &State, who: &mut Caller, job_id: u64, job_name: &str) -> Result<(), Status> {
    who.refresh(s)?;
    match (s.job(job_id), who.token()) {
        (Some(j), token) => may_read(s, token, j),
        (None, Some(t)) if !t.any_job() => Err(Status::permission_denied(format!(
            "job {job_name} is no longer kept, and only operators and admins read the logs of such jobs; \
             user {} is neither",
            t.spec.user
        ))),
        (None, _) => Ok(()),
    }
}

/// Opens the log stream on the agent, as this replica.
async fn open(api: &Api, node: &str, addr: &str, logs: LogsRequest) -> Result<tonic::Streaming<LogChunk>, Status> {
    // Not UNAVAILABLE: that says this replica cannot serve, and clients try another one.
    let unreachable = |why: String| {
        Status::failed_precondition(format!(
            "the agent of node {node} ({addr}) is unreachable from this replica: {why}"
        ))
    };
    let endpoint = api
        .ctx
        .transport
        .endpoint(addr, baton_proto::tls::AGENT_HOST)
        .map_err(|e| unreachable(e.to_string()))?
        .connect_timeout(Duration::from_millis(AGENT_DIAL_TIMEOUT_MS));
    let channel = endpoint.connect().await.map_err(|e| unreachable(e.to_string()))?;
    let mut client = AgentLogsClient::new(channel)
        .max_decoding_message_size(baton_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(baton_proto::MAX_MESSAGE_BYTES);
    match client.logs(logs).await {
        Ok(r) => Ok(r.into_inner()),
        Err(s) if s.code() == Code::Unavailable => Err(unreachable(s.message().to_string())),
        Err(s) => Err(Status::new(s.code(), format!("the agent of node {node}: {}", s.message()))),
    }
}
