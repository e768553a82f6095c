//! Queues, cohorts and priority classes: create or replace, and list.

use baton_model::command::Op;
use baton_model::name::Name;
use baton_model::queue::Visibility;
use baton_proto::convert::{
    self, class_from_proto, class_to_proto, cohort_from_proto, cohort_to_proto, queue_from_proto,
};
use baton_proto::v1::{
    Ack, Cohort, JobVisibility, ListClassesReply, ListCohortsReply, PriorityClass, Queue, UpdateQueueRequest,
};
use tonic::{Response, Status};

use super::Api;
use crate::auth::Caller;
use crate::status;

pub fn name(text: &str) -> Result<Name, Status> {
    convert::name(text, "name").map_err(status::from_convert)
}

/// A put replaces the queue whole without naming what it read, so it leaves the visibility
/// as it is and refuses to set one: a security setting is changed by create or update only.
pub async fn put_queue(api: &Api, who: &Caller, q: Queue) -> Result<Response<Ack>, Status> {
    if visibility(&q)?.is_some() {
        return Err(Status::invalid_argument(
            "visibility: a put leaves it as it is; set it with CreateQueue or UpdateQueue \
             (`baton queue create|update --visibility`)",
        ));
    }
    let q = queue_from_proto(&q).map_err(status::from_convert)?;
    api.ack(who, Op::PutQueue(q)).await
}

/// Without a visibility (or with the default), the format-4 command, so that creating a
/// queue keeps working while a replica of an older build is in the cluster.
pub async fn create_queue(api: &Api, who: &Caller, q: Queue) -> Result<Response<Ack>, Status> {
    let visibility = visibility(&q)?;
    let spec = queue_from_proto(&q).map_err(status::from_convert)?;
    match visibility {
        None | Some(Visibility::All) => api.ack(who, Op::CreateQueue(spec)).await,
        Some(visibility) => api.ack(who, Op::CreateQueueVisible { spec, visibility }).await,
    }
}

/// Without a visibility, or with the one the queue has, the format-4 command, which leaves
/// it as it is: clients write back the whole queue they read, visibility included, and
/// such an update must keep working while a replica of an older build is in the cluster.
/// The revision makes this exact: a visibility changed since the read moved it on, and
/// the update is refused.
pub async fn update_queue(api: &Api, who: &Caller, r: UpdateQueueRequest) -> Result<Response<Ack>, Status> {
    let q = r.queue.ok_or_else(|| Status::invalid_argument("queue is missing"))?;
    let spec = queue_from_proto(&q).map_err(status::from_convert)?;
    let revision = r.revision;
    let current = api.read(|s| s.queue_visibility(&spec.name)).await?;
    match visibility(&q)?.filter(|v| *v != current) {
        None => api.ack(who, Op::UpdateQueue { spec, revision }).await,
        Some(visibility) => api.ack(who, Op::UpdateQueueVisible { spec, revision, visibility }).await,
    }
}

/// The visibility a queue write asks for (`None`: unspecified).
fn visibility(q: &Queue) -> Result<Option<Visibility>, Status> {
    let v = JobVisibility::try_from(q.visibility)
        .map_err(|_| Status::invalid_argument(format!("visibility: {} is not one of all, names, own", q.visibility)))?;
    Ok(convert::visibility_from_proto(v))
}

pub async fn put_cohort(api: &Api, who: &Caller, c: Cohort) -> Result<Response<Ack>, Status> {
    let c = cohort_from_proto(&c).map_err(status::from_convert)?;
    api.ack(who, Op::PutCohort(c)).await
}

pub async fn create_cohort(api: &Api, who: &Caller, c: Cohort) -> Result<Response<Ack>, Status> {
    let c = cohort_from_proto(&c).map_err(status::from_convert)?;
    api.ack(who, Op::CreateCohort(c)).await
}

pub async fn create_class(api: &Api, who: &Caller, c: PriorityClass) -> Result<Response<Ack>, Status> {
    let c = class_from_proto(&c).map_err(status::from_convert)?;
    api.ack(who, Op::CreateClass(c)).await
}

pub async fn put_class(api: &Api, who: &Caller, c: PriorityClass) -> Result<Response<Ack>, Status> {
    let c = class_from_proto(&c).map_err(status::from_convert)?;
    api.ack(who, Op::PutClass(c)).await
}

pub async fn list_cohorts(api: &Api) -> Result<Response<ListCohortsReply>, Status> {
    let cohorts = api.read(|s| s.cohorts().values().map(cohort_to_proto).collect()).await?;
    Ok(Response::new(ListCohortsReply { cohorts }))
}

pub async fn list_classes(api: &Api) -> Result<Response<ListClassesReply>, Status> {
    let classes = api.read(|s| s.classes().values().map(class_to_proto).collect()).await?;
    Ok(Response::new(ListClassesReply { classes }))
}
