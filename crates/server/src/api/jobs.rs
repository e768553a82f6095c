//! Jobs: submit (idempotent by request id), get, list, and name resolution.

use baton_model::State;
use baton_model::command::{Op, Outcome};
use baton_model::job::{Job, JobId, JobState};
use baton_proto::convert::{job_spec_from_proto, job_to_proto, pool_reservation_to_proto};
use baton_proto::v1::{self, JobRef, ListJobsReply, ListJobsRequest, SubmitReply, SubmitRequest};
use tonic::{Response, Status};

use super::Api;
use crate::status;

/// Longest client request id kept for idempotency.
pub const MAX_REQUEST_ID_LEN: usize = 128;

pub async fn submit(api: &Api, r: SubmitRequest) -> Result<Response<SubmitReply>, Status> {
    let spec = r.spec.ok_or_else(|| Status::invalid_argument("spec: missing"))?;
    let spec = job_spec_from_proto(&spec).map_err(status::from_convert)?;
    if r.request_id.len() > MAX_REQUEST_ID_LEN {
        return Err(Status::invalid_argument(format!("request_id: longer than {MAX_REQUEST_ID_LEN} bytes")));
    }
    let request_id = (!r.request_id.is_empty()).then_some(r.request_id);
    let applied = api.write(Op::Submit { spec, request_id }).await?;
    match applied.outcome {
        Outcome::Submitted { job, name, duplicate } => {
            Ok(Response::new(SubmitReply { id: job, name: name.to_string(), duplicate }))
        }
        other => Err(Status::internal(format!("submit answered {other:?}"))),
    }
}

/// A job by name, or by its numeric id.
fn find<'s>(s: &'s State, key: &str) -> Option<&'s Job> {
    s.job_by_name(key).or_else(|| key.parse::<u64>().ok().and_then(|id| s.job(id)))
}

fn unknown(key: &str) -> Status {
    Status::not_found(format!("unknown job {key:?}; see `baton list`"))
}

/// The job a cancel, pause or resume acts on: `r.id` when set, else the name (or id as
/// text) resolved once here; the command then carries the id, never the name.
pub async fn resolve(api: &Api, r: &JobRef) -> Result<JobId, Status> {
    if r.id != 0 {
        let known = api.read(|s| s.job(r.id).is_some()).await?;
        return if known { Ok(r.id) } else { Err(unknown(&r.id.to_string())) };
    }
    api.read(|s| find(s, &r.name).map(|j| j.id)).await?.ok_or_else(|| unknown(&r.name))
}

fn to_proto(s: &State, j: &Job, with_events: bool) -> v1::Job {
    let by = j.preempted_by.and_then(|id| s.job(id)).map(|p| &p.spec.name);
    let mut out = job_to_proto(j, with_events, by);
    out.reservation = s.pool_reservation_of(j.id).map(|r| pool_reservation_to_proto(r, s));
    out
}

pub async fn get(api: &Api, r: JobRef) -> Result<Response<v1::Job>, Status> {
    let job = api.read(|s| find(s, &r.name).map(|j| to_proto(s, j, true))).await?;
    job.map(Response::new).ok_or_else(|| unknown(&r.name))
}

pub async fn list(api: &Api, r: ListJobsRequest) -> Result<Response<ListJobsReply>, Status> {
    let mut states = Vec::new();
    for (i, st) in r.states.iter().enumerate() {
        let parsed = JobState::parse(st).ok_or_else(|| {
            let all: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            Status::invalid_argument(format!("states[{i}]: {st:?} is not one of {}", all.join(", ")))
        })?;
        states.push(parsed);
    }
    let bound = api.ctx.settings.max_list_jobs;
    let limit = if r.limit == 0 { bound } else { (r.limit as usize).min(bound) };
    let (jobs, truncated) = api
        .read(|s| {
            let mut matched = s.jobs().values().filter(|j| {
                (r.queue.is_empty() || j.spec.queue.as_str() == r.queue)
                    && (states.is_empty() || states.contains(&j.state))
                    && (r.node.is_empty() || j.replicas.iter().any(|x| x.node.as_str() == r.node))
            });
            let jobs: Vec<v1::Job> = matched.by_ref().take(limit).map(|j| to_proto(s, j, false)).collect();
            (jobs, matched.next().is_some())
        })
        .await?;
    Ok(Response::new(ListJobsReply { jobs, truncated }))
}
