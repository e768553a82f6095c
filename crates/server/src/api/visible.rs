//! What a caller sees of a job: everything (its owner, an admin of its queue, operators,
//! admins, `--auth none`), or what the job's queue shows to others (docs/security.md, "Who
//! sees which jobs"). Get, list, watch and the dashboard's event stream all ask here, so they
//! agree.

use baton_model::State;
use baton_model::event::Event;
use baton_model::job::Job;
use baton_proto::v1;

use super::HIDDEN_JOB;
use crate::auth::Caller;

/// How much of one job a caller sees (the model's rule, `State::job_view`).
pub use baton_model::queue::JobView as View;

/// What `who` sees of `job`.
pub fn view(s: &State, who: &Caller, job: &Job) -> View {
    s.job_view(who.token(), job)
}

/// What `who` sees of an array: what it would see of its elements.
pub fn array_view(s: &State, who: &Caller, a: &baton_model::array::JobArray) -> View {
    s.array_view(who.token(), a)
}

/// What `who` sees of an event: as of its job (an event of a job no longer kept is shown
/// only to those who see every job); events of no job (queues, nodes) are shown as before.
pub fn event_view(s: &State, who: &Caller, e: &Event) -> View {
    let Some(name) = &e.job else {
        return View::Private;
    };
    // A live event says its job's id: judged by that job, not by a newer one of its name.
    let job = match e.job_id {
        Some(id) => s.job(id),
        None => s.job_by_name(name.as_str()),
    };
    match job {
        Some(j) => view(s, who, j),
        None if e.job_id.is_none()
            && let Some(a) = s.array_by_name(name.as_str()) =>
        {
            array_view(s, who, a)
        }
        None if who.token().is_none_or(|t| t.any_job()) => View::Private,
        None => View::Hidden,
    }
}

/// The event as `who` may see it, or `None`.
pub fn shown(s: &State, who: &Caller, e: &Event) -> Option<v1::Event> {
    seen_as(s, who, event_view(s, who, e), e)
}

/// The event as `who`, with `view` of its job, sees it, or `None`.
pub fn seen_as(s: &State, who: &Caller, view: View, e: &Event) -> Option<v1::Event> {
    match view {
        View::Hidden => None,
        View::Names => Some(event_names_only(baton_proto::convert::event_to_proto(e))),
        View::Private | View::Public => {
            let mut out = baton_proto::convert::event_to_proto(e);
            out.message = other_jobs_named(s, who, &out.message);
            Some(out)
        }
    }
}

/// Where the model's texts name another job than their own: its preemptor.
const NAMING: [&str; 2] = ["preempted by ", "suspended for "];

/// `text` with each job it names after [`NAMING`] replaced by [`HIDDEN_JOB`] where `who`
/// may not see that job: a victim seen by others must not name a preemptor they may not see.
pub fn other_jobs_named(s: &State, who: &Caller, text: &str) -> String {
    if who.token().is_none_or(|t| t.any_job()) || !NAMING.iter().any(|p| text.contains(p)) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, phrase)) = NAMING.iter().filter_map(|p| rest.find(p).map(|at| (at, p))).min() {
        let (before, after) = rest.split_at(at + phrase.len());
        out.push_str(before);
        let len =
            after.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(after.len());
        let (name, tail) = after.split_at(len);
        out.push_str(if job_seen(s, who, name) { name } else { HIDDEN_JOB });
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// `who` sees the job (or array) called `name`.
pub fn job_seen(s: &State, who: &Caller, name: &str) -> bool {
    match s.job_by_name(name) {
        Some(j) => view(s, who, j) != View::Hidden,
        None => s.array_by_name(name).is_some_and(|a| array_view(s, who, a) != View::Hidden),
    }
}

/// The job with only what [`View::Names`] shows.
pub fn names_only(full: v1::Job) -> v1::Job {
    let spec = full.spec.map(|s| v1::JobSpec { name: s.name, queue: s.queue, ..Default::default() });
    v1::Job { id: full.id, spec, state: full.state, owner: full.owner, env_hidden: true, ..Default::default() }
}

/// The event with only what [`View::Names`] shows: when, which job, what kind.
pub fn event_names_only(full: v1::Event) -> v1::Event {
    v1::Event { at_ms: full.at_ms, job: full.job, kind: full.kind, ..Default::default() }
}
