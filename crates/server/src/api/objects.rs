//! Queues, cohorts and priority classes: create or replace, and list.

use baton_model::command::Op;
use baton_model::name::Name;
use baton_proto::convert::{
    self, class_from_proto, class_to_proto, cohort_from_proto, cohort_to_proto, queue_from_proto,
};
use baton_proto::v1::{Ack, Cohort, ListClassesReply, ListCohortsReply, PriorityClass, Queue, UpdateQueueRequest};
use tonic::{Response, Status};

use super::Api;
use crate::auth::Caller;
use crate::status;

pub fn name(text: &str) -> Result<Name, Status> {
    convert::name(text, "name").map_err(status::from_convert)
}

pub async fn put_queue(api: &Api, who: &Caller, q: Queue) -> Result<Response<Ack>, Status> {
    let q = queue_from_proto(&q).map_err(status::from_convert)?;
    api.ack(who, Op::PutQueue(q)).await
}

pub async fn create_queue(api: &Api, who: &Caller, q: Queue) -> Result<Response<Ack>, Status> {
    let q = queue_from_proto(&q).map_err(status::from_convert)?;
    api.ack(who, Op::CreateQueue(q)).await
}

pub async fn update_queue(api: &Api, who: &Caller, r: UpdateQueueRequest) -> Result<Response<Ack>, Status> {
    let q = r.queue.ok_or_else(|| Status::invalid_argument("queue is missing"))?;
    let spec = queue_from_proto(&q).map_err(status::from_convert)?;
    api.ack(who, Op::UpdateQueue { spec, revision: r.revision }).await
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
