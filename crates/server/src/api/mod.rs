//! The client API (`Baton` in `proto/baton.proto`). Any replica answers: writes go through
//! [`baton_raft::Replica::write`] (forwarded to the leader), reads are linearizable
//! ([`baton_raft::Replica::read`]).
//!
//! - `jobs`: submit, get, list, cancel, pause, resume.
//! - `objects`: queues, cohorts, priority classes.
//! - `nodes`: list, cordon, drain.
//! - `cluster`: replicas, leader, term, usage.
//! - `watch`: the event stream.
//! - `usage`: capacity and usage arithmetic shared by the above.

mod cluster;
mod jobs;
mod nodes;
mod objects;
pub mod usage;
mod watch;

use std::pin::Pin;
use std::sync::Arc;

use baton_model::State;
use baton_model::command::{Applied, Command, Op};
use baton_proto::convert::event_to_proto;
use baton_proto::v1::baton_server::Baton;
use baton_proto::v1::*;
use futures::Stream;
use tonic::{Request, Response, Status};

use crate::Ctx;
use crate::clock::now_ms;
use crate::status;

pub struct Api {
    pub(crate) ctx: Arc<Ctx>,
}

impl Api {
    /// Commits `op` and returns what it produced, or the state machine's refusal as a status.
    pub(crate) async fn write(&self, op: Op) -> Result<Applied, Status> {
        let response = self.ctx.replica.write(Command { now_ms: now_ms(), op }).await.map_err(status::from_write)?;
        response.map_err(status::from_apply)
    }

    pub(crate) async fn ack(&self, op: Op) -> Result<Response<Ack>, Status> {
        let applied = self.write(op).await?;
        Ok(Response::new(Ack { events: applied.events.iter().map(event_to_proto).collect() }))
    }

    pub(crate) async fn read<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, Status> {
        self.ctx.replica.read(f).await.map_err(status::from_read)
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;

#[tonic::async_trait]
impl Baton for Api {
    type WatchStream = EventStream;

    async fn submit(&self, r: Request<SubmitRequest>) -> Result<Response<SubmitReply>, Status> {
        jobs::submit(self, r.into_inner()).await
    }
    async fn get_job(&self, r: Request<JobRef>) -> Result<Response<Job>, Status> {
        jobs::get(self, r.into_inner()).await
    }
    async fn list_jobs(&self, r: Request<ListJobsRequest>) -> Result<Response<ListJobsReply>, Status> {
        jobs::list(self, r.into_inner()).await
    }
    async fn cancel_job(&self, r: Request<JobRef>) -> Result<Response<Ack>, Status> {
        let job = jobs::resolve(self, &r.into_inner()).await?;
        self.ack(Op::Cancel { job }).await
    }
    async fn pause_job(&self, r: Request<JobRef>) -> Result<Response<Ack>, Status> {
        let job = jobs::resolve(self, &r.into_inner()).await?;
        self.ack(Op::Pause { job }).await
    }
    async fn resume_job(&self, r: Request<JobRef>) -> Result<Response<Ack>, Status> {
        let job = jobs::resolve(self, &r.into_inner()).await?;
        self.ack(Op::Resume { job }).await
    }
    async fn watch(&self, r: Request<WatchRequest>) -> Result<Response<EventStream>, Status> {
        watch::watch(self, r.into_inner()).await
    }

    async fn put_queue(&self, r: Request<Queue>) -> Result<Response<Ack>, Status> {
        objects::put_queue(self, r.into_inner()).await
    }
    async fn delete_queue(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let name = objects::name(&r.into_inner().name)?;
        self.ack(Op::DeleteQueue { name }).await
    }
    async fn list_queues(&self, _: Request<Empty>) -> Result<Response<ListQueuesReply>, Status> {
        Ok(Response::new(ListQueuesReply { queues: self.read(usage::queues).await? }))
    }
    async fn put_cohort(&self, r: Request<Cohort>) -> Result<Response<Ack>, Status> {
        objects::put_cohort(self, r.into_inner()).await
    }
    async fn delete_cohort(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let name = objects::name(&r.into_inner().name)?;
        self.ack(Op::DeleteCohort { name }).await
    }
    async fn list_cohorts(&self, _: Request<Empty>) -> Result<Response<ListCohortsReply>, Status> {
        objects::list_cohorts(self).await
    }
    async fn put_class(&self, r: Request<PriorityClass>) -> Result<Response<Ack>, Status> {
        objects::put_class(self, r.into_inner()).await
    }
    async fn delete_class(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let name = objects::name(&r.into_inner().name)?;
        self.ack(Op::DeleteClass { name }).await
    }
    async fn list_classes(&self, _: Request<Empty>) -> Result<Response<ListClassesReply>, Status> {
        objects::list_classes(self).await
    }

    async fn list_nodes(&self, _: Request<Empty>) -> Result<Response<ListNodesReply>, Status> {
        nodes::list(self).await
    }
    async fn cordon(&self, r: Request<CordonRequest>) -> Result<Response<Ack>, Status> {
        let r = r.into_inner();
        let node = objects::name(&r.node)?;
        self.ack(Op::Cordon { node, cordoned: r.cordoned }).await
    }
    async fn drain(&self, r: Request<NameRef>) -> Result<Response<Ack>, Status> {
        let node = objects::name(&r.into_inner().name)?;
        self.ack(Op::Cordon { node, cordoned: true }).await
    }

    async fn cluster_info(&self, _: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        cluster::info(self).await
    }
    async fn set_scheduler(&self, r: Request<SchedulerSettings>) -> Result<Response<Ack>, Status> {
        cluster::set_scheduler(self, r.into_inner()).await
    }
}
