//! What a caller sees of a job: everything (its owner, an admin of its queue, operators,
//! admins, `--auth none`), or what the job's queue shows to others (docs/security.md, "Who
//! sees which jobs"). Get, list, watch and the dashboard's event stream all ask here, so they
//! agree.

use baton_model::State;
use baton_model::event::Event;
use baton_model::job::Job;
use baton_proto::v1;

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
    match s.job_by_name(name.as_str()) {
        Some(j) => view(s, who, j),
        None if let Some(a) = s.array_by_name(name.as_str()) => array_view(s, who, a),
        None if who.token().is_none_or(|t| t.any_job()) => View::Private,
        None => View::Hidden,
    }
}

/// The event as `who` may see it, or `None`.
pub fn shown(s: &State, who: &Caller, e: &Event) -> Option<v1::Event> {
    seen_as(event_view(s, who, e), e)
}

/// The event as a caller with `view` of its job sees it, or `None`.
pub fn seen_as(view: View, e: &Event) -> Option<v1::Event> {
    match view {
        View::Hidden => None,
        View::Names => Some(event_names_only(baton_proto::convert::event_to_proto(e))),
        View::Private | View::Public => Some(baton_proto::convert::event_to_proto(e)),
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
