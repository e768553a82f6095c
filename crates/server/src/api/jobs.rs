//! Jobs: submit (idempotent by request id), get, list, and name resolution.

use baton_model::State;
use baton_model::command::{Op, Outcome};
use baton_model::job::{Job, JobId};
use baton_model::limits::MAX_REQUEST_ID_LEN;
use baton_model::tenancy::UnixUser;
use baton_proto::convert::{
    after_from_proto, array_spec_from_proto, elastic_from_proto, job_array_to_proto, job_spec_from_proto,
    job_states_from_proto, job_to_proto, pool_reservation_to_proto, waits_to_proto,
};
use baton_proto::v1::{self, JobRef, ListJobsReply, ListJobsRequest, SubmitReply, SubmitRequest};
use prost::Message;
use tonic::{Response, Status};
use tracing::Instrument;

use super::Api;
use super::visible::{self, View};
use crate::auth::Caller;
use crate::status;

pub async fn submit(api: &Api, who: &Caller, r: SubmitRequest) -> Result<Response<SubmitReply>, Status> {
    let spec_proto = r.spec.ok_or_else(|| Status::invalid_argument("spec: missing"))?;
    let spec = job_spec_from_proto(&spec_proto).map_err(status::from_convert)?;
    let after = after_from_proto(&r.after).map_err(status::from_convert)?;
    let elastic = elastic_from_proto(&spec_proto).map_err(status::from_convert)?;
    if r.request_id.len() > MAX_REQUEST_ID_LEN {
        return Err(Status::invalid_argument(format!("request_id: longer than {MAX_REQUEST_ID_LEN} bytes")));
    }
    let request_id = (!r.request_id.is_empty()).then_some(r.request_id);
    let run_as = match r.run_as.as_str() {
        "" => None,
        u => Some(UnixUser::new(u).map_err(|e| Status::invalid_argument(format!("run_as: {e}")))?),
    };
    // The first step of the job's decision path (docs/metrics.md, "Tracing"); its id is
    // known once the submit commits. A retried submit that found its job is marked
    // `duplicate`: the first one is the root of the job's exported trace.
    let term = api.ctx.replica.term();
    let span = tracing::info_span!("submit", job = tracing::field::Empty, name = %spec.name, term, duplicate = tracing::field::Empty);
    // A job without dependencies goes as before, so it needs no newer data format.
    let op = match (r.array.as_ref().map(array_spec_from_proto), elastic) {
        (Some(_), Some(_)) => {
            return Err(Status::invalid_argument(
                "spec.tasks.min_replicas: an array's elements cannot be elastic gangs (submit them one by one)",
            ));
        }
        (Some(array), None) => Op::SubmitArray { spec, array, request_id, run_as, after },
        (None, Some(elastic)) => Op::SubmitElastic { spec, elastic, request_id, run_as, after },
        (None, None) if after.is_empty() => Op::SubmitRunAs { spec, request_id, run_as },
        (None, None) => Op::SubmitAfter { spec, request_id, run_as, after },
    };
    let applied = api.write(who, op).instrument(span.clone()).await?;
    match applied.outcome {
        Outcome::Submitted { job, name, duplicate } => {
            span.record("job", job);
            span.record("duplicate", duplicate);
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
/// text) resolved once here; the command then carries the id, never the name. A job
/// hidden from `who` (its queue's visibility `own`) is unknown, as to a get: refused as
/// someone else's, the answer would say that it exists and whose it is.
pub async fn resolve(api: &Api, who: &Caller, r: &JobRef) -> Result<JobId, Status> {
    let seen = |s: &State, j: &Job| visible::view(s, who, j) != View::Hidden;
    if r.id != 0 {
        let known = api.read(|s| s.job(r.id).is_some_and(|j| seen(s, j))).await?;
        return if known { Ok(r.id) } else { Err(unknown(&r.id.to_string())) };
    }
    api.read(|s| find(s, &r.name).filter(|j| seen(s, j)).map(|j| j.id)).await?.ok_or_else(|| unknown(&r.name))
}

/// What a cancel names: a job, or an array.
pub enum Target {
    Job(JobId),
    Array(JobId),
}

/// A cancel's target: as `resolve`, except that a name (or id) that is an array's, newer
/// than any job of that name, names the array.
pub async fn resolve_cancel(api: &Api, who: &Caller, r: &JobRef) -> Result<Target, Status> {
    let array = api
        .read(|s| {
            let id = match r.id {
                0 => baton_model::Name::new(r.name.as_str()).ok().and_then(|n| s.newest_named(&n)),
                id => Some(id),
            };
            let id = id.or_else(|| r.name.parse().ok())?;
            s.array(id).filter(|a| array_seen(s, who, a)).map(|a| a.id)
        })
        .await?;
    match array {
        Some(id) => Ok(Target::Array(id)),
        None => resolve(api, who, r).await.map(Target::Job),
    }
}

/// An array is seen as its elements are: by its queue's visibility, and its owner.
fn array_seen(s: &State, who: &Caller, a: &baton_model::array::JobArray) -> bool {
    visible::array_view(s, who, a) != View::Hidden
}

/// Arrays `who` may see, one line each.
pub async fn list_arrays(
    api: &Api,
    who: &Caller,
    r: v1::ListArraysRequest,
) -> Result<Response<v1::ListArraysReply>, Status> {
    let arrays = api
        .read(|s| {
            s.arrays()
                .values()
                .filter(|a| r.queue.is_empty() || a.spec.queue.as_str() == r.queue)
                .filter(|a| array_seen(s, who, a))
                .map(|a| job_array_to_proto(s, a))
                .collect()
        })
        .await?;
    Ok(Response::new(v1::ListArraysReply { arrays }))
}

/// The job as `who` may see it (`None`: not at all): its environment (secrets, often) only
/// for those who see its private data, the rest as its queue's visibility allows.
fn to_proto(s: &State, who: &Caller, j: &Job, with_events: bool) -> Option<v1::Job> {
    let view = visible::view(s, who, j);
    if view == View::Hidden {
        return None;
    }
    let by = j.preempted_by.and_then(|id| s.job(id));
    let mut out = job_to_proto(j, with_events, by.map(|p| &p.spec.name));
    // The preemptor is another job: named only to those who may see it.
    if by.is_some_and(|p| visible::view(s, who, p) == View::Hidden) {
        out.preempted_by = super::HIDDEN_JOB.to_string();
    }
    out.reason = visible::other_jobs_named(s, who, &out.reason);
    for e in &mut out.events {
        e.message = visible::other_jobs_named(s, who, &e.message);
    }
    // A completing job says so first: its GPUs are held until its processes are gone.
    if let Some(completing) = s.completing_reason(j.id) {
        out.reason = if out.reason.is_empty() { completing } else { format!("{completing}; {}", out.reason) };
    }
    out.reservation = s.pool_reservation_of(j.id).map(|r| pool_reservation_to_proto(r, s));
    if with_events {
        out.waiting_for = waits_to_proto(s, j.id);
    }
    let owner = s.access().owner(j.id);
    out.owner = owner.map(|o| o.to_string()).unwrap_or_default();
    if let Some(e) = s.elastic(j.id) {
        out.elastic_max_replicas = Some(e.max);
        if let Some(t) = out.spec.as_mut().and_then(|spec| spec.tasks.get_mut(e.task as usize)) {
            t.min_replicas = Some(e.min);
        }
    }
    if let Some((a, index)) = s.element_of(j.id) {
        out.array = a.spec.name.to_string();
        out.array_index = Some(index);
    }
    out.run_as = s.tenancy().run_as(j.id).map(|u| u.to_string()).unwrap_or_default();
    if view != View::Private
        && let Some(spec) = out.spec.as_mut()
    {
        spec.env.clear();
        out.env_hidden = true;
    }
    Some(if view == View::Names { visible::names_only(out) } else { out })
}

pub async fn get(api: &Api, who: &Caller, r: JobRef) -> Result<Response<v1::Job>, Status> {
    // A job the caller may not see is answered as one that does not exist.
    let job = api.read(|s| find(s, &r.name).and_then(|j| to_proto(s, who, j, true))).await?;
    job.map(Response::new).ok_or_else(|| unknown(&r.name))
}

pub async fn list(api: &Api, who: &Caller, r: ListJobsRequest) -> Result<Response<ListJobsReply>, Status> {
    let states = job_states_from_proto(&r.states, "states").map_err(status::from_convert)?;
    let page = page_size(r.page_size, api.ctx.settings.max_list_jobs)?;
    let after = page_start(&r.page_token)?;
    let limit = if r.limit == 0 { page } else { page.min(r.limit as usize) };
    let (jobs, more) = api
        .read(|s| {
            let mut matched = s.jobs().range(after..).map(|(_, j)| j).filter(|j| {
                (r.queue.is_empty() || j.spec.queue.as_str() == r.queue)
                    && (states.is_empty() || states.contains(&j.state))
                    && (r.node.is_empty() || j.replicas.iter().any(|x| x.node.as_str() == r.node))
            });
            let mut jobs = Vec::new();
            let mut bytes = 0;
            // Jobs the caller may not see are skipped, not counted against the page.
            // A job shown by name only does not say where it runs: a node filter skips it.
            let mut visible = matched
                .by_ref()
                .filter(|j| r.node.is_empty() || visible::view(s, who, j) != View::Names)
                .filter_map(|j| to_proto(s, who, j, false));
            for job in visible.by_ref().take(limit) {
                bytes += job.encoded_len();
                jobs.push(job);
                // Stop early rather than send a page the client cannot decode.
                if bytes > MAX_PAGE_BYTES {
                    break;
                }
            }
            (jobs, visible.next().is_some())
        })
        .await?;
    // The token names the last job sent; it is not a cursor into server memory, so any
    // replica answers the next page.
    let next_page_token = match jobs.last() {
        Some(last) if more => last.id.to_string(),
        _ => String::new(),
    };
    Ok(Response::new(ListJobsReply { jobs, truncated: more, next_page_token }))
}

/// Jobs in one page when the client names no size (the bound, where that is lower).
pub const DEFAULT_PAGE_SIZE: usize = 1_000;
/// Bytes of jobs one page holds at most: half the message bound, so a page and its framing
/// always fit however large the jobs' commands and environments are (each is bounded far
/// below this by the model).
const MAX_PAGE_BYTES: usize = baton_proto::MAX_MESSAGE_BYTES / 2;

fn page_size(asked: u32, bound: usize) -> Result<usize, Status> {
    match asked as usize {
        0 => Ok(DEFAULT_PAGE_SIZE.min(bound)),
        n if n > bound => Err(Status::invalid_argument(format!(
            "page_size {n} is over this server's bound of {bound} jobs per page (max_list_jobs); ask for fewer and follow next_page_token"
        ))),
        n => Ok(n),
    }
}

/// The first job id a page may hold: one past the id the token names.
fn page_start(token: &str) -> Result<JobId, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    let last: JobId = token.parse().map_err(|_| {
        Status::invalid_argument(format!("page_token {token:?} is not one this server gave (a job id)"))
    })?;
    Ok(last.saturating_add(1))
}
