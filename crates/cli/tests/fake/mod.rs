//! In-memory fakes of a replica's `Baton` service and an agent's `AgentLogs`, served by tonic
//! on 127.0.0.1:0 from a thread of their own (so tests may run the real binary against them
//! synchronously). They record what they are asked and answer from what the test put in.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_proto::v1;
use baton_proto::v1::agent_logs_server::{AgentLogs, AgentLogsServer};
use baton_proto::v1::baton_server::{Baton, BatonServer};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

type Answer<T> = Result<Response<T>, Status>;
type EventStream = Pin<Box<dyn Stream<Item = Result<v1::Event, Status>> + Send>>;
type ChunkStream = Pin<Box<dyn Stream<Item = Result<v1::LogChunk, Status>> + Send>>;
type SnapshotStream = Pin<Box<dyn Stream<Item = Result<v1::SnapshotChunk, Status>> + Send>>;

#[derive(Default)]
pub struct State {
    /// Every call, by method name, in order.
    pub calls: Vec<String>,
    pub submits: Vec<v1::SubmitRequest>,
    /// The request id of every Submit call, refused ones included.
    pub submit_request_ids: Vec<String>,
    pub put_queues: Vec<v1::Queue>,
    pub created_queues: Vec<v1::Queue>,
    /// Each UpdateQueue that landed, with the revision it named.
    pub updated_queues: Vec<(v1::Queue, u64)>,
    /// Writes of other clients, one landing just before each UpdateQueue is checked.
    pub interfering_writes: Vec<v1::Queue>,
    pub cordons: Vec<v1::CordonRequest>,
    pub windows: Vec<v1::MaintenanceWindow>,
    /// Every SetGpuHealth request, in order.
    pub gpu_marks: Vec<v1::SetGpuHealthRequest>,
    pub scheduler_sets: Vec<v1::SchedulerSettings>,
    pub tenancy_sets: Vec<v1::TenancySettings>,
    pub usage_sets: Vec<v1::UsageSettings>,
    pub user_limits: Vec<v1::UserLimitRequest>,
    pub topology_sets: Vec<v1::TopologyRequest>,
    /// What GetUsage answers.
    pub usage: v1::UsageReply,
    /// What `History` answers, and the requests it got.
    pub history: v1::HistoryReply,
    pub history_asked: Vec<v1::HistoryRequest>,
    /// What `UsageTotals` answers, and the requests it got.
    pub totals: v1::UsageTotalsReply,
    pub totals_asked: Vec<v1::UsageTotalsRequest>,
    pub accounting_sets: Vec<v1::AccountingSettings>,
    /// The `authorization` metadata of the token calls, in order.
    pub authorizations: Vec<String>,
    pub token_requests: Vec<v1::CreateTokenRequest>,
    pub grant_requests: Vec<v1::GrantQueueRequest>,
    pub revoked: Vec<String>,
    /// The job references cancel, pause and resume were called with.
    pub acted_on: Vec<v1::JobRef>,
    pub jobs: Vec<v1::Job>,
    pub arrays: Vec<v1::JobArray>,
    pub queues: Vec<v1::QueueUsage>,
    /// What ListCohorts and ListClasses answer; CreateCohort and CreateClass add to them.
    pub cohorts: Vec<v1::Cohort>,
    pub classes: Vec<v1::PriorityClass>,
    pub nodes: Vec<v1::Node>,
    pub events: Vec<v1::Event>,
    pub info: v1::ClusterInfoReply,
    /// Answer this many calls UNAVAILABLE for want of a leader before serving (u32::MAX:
    /// always).
    pub no_leader_for: u32,
    request_ids: HashMap<String, (u64, String)>,
}

#[derive(Clone, Default)]
pub struct Fake(pub Arc<Mutex<State>>);

impl Fake {
    pub fn with(f: impl FnOnce(&mut State)) -> Fake {
        let fake = Fake::default();
        f(&mut fake.0.lock().unwrap());
        fake
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    fn enter(&self, method: &str) -> Result<std::sync::MutexGuard<'_, State>, Status> {
        let mut s = self.0.lock().unwrap();
        s.calls.push(method.to_string());
        if s.no_leader_for > 0 {
            if s.no_leader_for != u32::MAX {
                s.no_leader_for -= 1;
            }
            // Worded without "no leader": a client must act on the reason, not the words.
            return Err(baton_proto::reason::no_leader_with("leadership is moving; retry shortly"));
        }
        Ok(s)
    }

    fn find_job(s: &State, name: &str) -> Result<v1::Job, Status> {
        s.jobs
            .iter()
            .find(|j| j.spec.as_ref().is_some_and(|sp| sp.name == name) || j.id.to_string() == name)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("job {name} is not known")))
    }
}

fn ack(message: String) -> Answer<v1::Ack> {
    Ok(Response::new(v1::Ack { events: vec![v1::Event { message, ..Default::default() }] }))
}

#[tonic::async_trait]
impl Baton for Fake {
    async fn submit(&self, r: Request<v1::SubmitRequest>) -> Answer<v1::SubmitReply> {
        let r = r.into_inner();
        self.state().submit_request_ids.push(r.request_id.clone());
        let mut s = self.enter("Submit")?;
        s.submits.push(r.clone());
        let name = r.spec.as_ref().map(|sp| sp.name.clone()).unwrap_or_default();
        if let Some((id, name)) = s.request_ids.get(&r.request_id) {
            return Ok(Response::new(v1::SubmitReply { id: *id, name: name.clone(), duplicate: true }));
        }
        let id = s.request_ids.len() as u64 + 1;
        s.request_ids.insert(r.request_id.clone(), (id, name.clone()));
        Ok(Response::new(v1::SubmitReply { id, name, duplicate: false }))
    }

    async fn get_job(&self, r: Request<v1::JobRef>) -> Answer<v1::Job> {
        let s = self.enter("GetJob")?;
        Fake::find_job(&s, &r.into_inner().name).map(Response::new)
    }

    async fn list_jobs(&self, r: Request<v1::ListJobsRequest>) -> Answer<v1::ListJobsReply> {
        let s = self.enter("ListJobs")?;
        let r = r.into_inner();
        let jobs = s
            .jobs
            .iter()
            .filter(|j| r.queue.is_empty() || j.spec.as_ref().is_some_and(|sp| sp.queue == r.queue))
            .filter(|j| r.states.is_empty() || r.states.contains(&j.state))
            .cloned()
            .collect();
        Ok(Response::new(v1::ListJobsReply { jobs, truncated: false, ..Default::default() }))
    }

    async fn list_arrays(&self, _r: Request<v1::ListArraysRequest>) -> Answer<v1::ListArraysReply> {
        let s = self.enter("ListArrays")?;
        Ok(Response::new(v1::ListArraysReply { arrays: s.arrays.clone() }))
    }

    async fn cancel_job(&self, r: Request<v1::JobRef>) -> Answer<v1::Ack> {
        let mut s = self.enter("CancelJob")?;
        let r = r.into_inner();
        s.acted_on.push(r.clone());
        if let Some(a) = s.arrays.iter().find(|a| a.id == r.id) {
            return ack(format!("array {} cancelled", a.name));
        }
        let j = Fake::find_job(&s, &r.name)?;
        ack(format!("job {} cancelled", j.spec.unwrap_or_default().name))
    }

    async fn pause_job(&self, r: Request<v1::JobRef>) -> Answer<v1::Ack> {
        let mut s = self.enter("PauseJob")?;
        let r = r.into_inner();
        s.acted_on.push(r.clone());
        let j = Fake::find_job(&s, &r.name)?;
        ack(format!("job {} paused", j.spec.unwrap_or_default().name))
    }

    async fn resume_job(&self, r: Request<v1::JobRef>) -> Answer<v1::Ack> {
        let mut s = self.enter("ResumeJob")?;
        let r = r.into_inner();
        s.acted_on.push(r.clone());
        let j = Fake::find_job(&s, &r.name)?;
        ack(format!("job {} resumed", j.spec.unwrap_or_default().name))
    }

    type WatchStream = EventStream;
    type JobLogsStream = ChunkStream;

    /// As a replica does: reads from the node's agent (its `agent_addr` in `nodes`).
    async fn job_logs(&self, r: Request<v1::JobLogsRequest>) -> Answer<ChunkStream> {
        let r = r.into_inner();
        let addr = {
            let s = self.enter("JobLogs")?;
            s.nodes.iter().find(|n| n.name == r.node).map(|n| n.agent_addr.clone())
        };
        let addr = addr.ok_or_else(|| Status::not_found(format!("unknown node {}", r.node)))?;
        let unreachable =
            |e: String| Status::failed_precondition(format!("the agent of node {} is unreachable: {e}", r.node));
        let ch = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| unreachable(e.to_string()))?
            .connect()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let client = v1::agent_logs_client::AgentLogsClient::new(ch);
        let stream = client.clone().logs(r.logs.unwrap_or_default()).await?.into_inner();
        Ok(Response::new(Box::pin(stream)))
    }
    type SaveSnapshotStream = SnapshotStream;

    async fn watch(&self, r: Request<v1::WatchRequest>) -> Answer<EventStream> {
        let s = self.enter("Watch")?;
        let r = r.into_inner();
        if !r.job.is_empty() {
            Fake::find_job(&s, &r.job)?;
        }
        let events: Vec<Result<v1::Event, Status>> =
            s.events.iter().filter(|e| r.job.is_empty() || e.job == r.job).cloned().map(Ok).collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(events))))
    }

    async fn put_queue(&self, r: Request<v1::Queue>) -> Answer<v1::Ack> {
        let mut s = self.enter("PutQueue")?;
        let q = r.into_inner();
        s.put_queues.push(q.clone());
        ack(format!("queue {} written", q.name))
    }

    async fn create_queue(&self, r: Request<v1::Queue>) -> Answer<v1::Ack> {
        let mut s = self.enter("CreateQueue")?;
        let q = r.into_inner();
        if s.queues.iter().any(|u| u.queue.as_ref().is_some_and(|x| x.name == q.name)) {
            return Err(Status::already_exists(format!("queue {:?} already exists", q.name)));
        }
        s.created_queues.push(q.clone());
        ack(format!("queue {} created", q.name))
    }

    /// Compare-and-set as a replica does it; each of `interfering_writes` first lands as
    /// another client's write made between this client's read and its write.
    async fn update_queue(&self, r: Request<v1::UpdateQueueRequest>) -> Answer<v1::Ack> {
        let mut s = self.enter("UpdateQueue")?;
        let r = r.into_inner();
        let q = r.queue.unwrap_or_default();
        let interfering = if s.interfering_writes.is_empty() { None } else { Some(s.interfering_writes.remove(0)) };
        let Some(u) = s.queues.iter_mut().find(|u| u.queue.as_ref().is_some_and(|x| x.name == q.name)) else {
            return Err(Status::not_found(format!("unknown queue {:?}", q.name)));
        };
        if let Some(other) = interfering {
            u.queue = Some(other);
            u.revision += 1;
        }
        if u.revision != r.revision {
            let msg =
                format!("queue {:?} changed since it was read: revision {} then {}", q.name, r.revision, u.revision);
            return Err(baton_proto::reason::Reason::Conflict.mark(Status::failed_precondition(msg)));
        }
        u.queue = Some(q.clone());
        u.revision += 1;
        s.updated_queues.push((q.clone(), r.revision));
        ack(format!("queue {} updated", q.name))
    }

    async fn delete_queue(&self, r: Request<v1::NameRef>) -> Answer<v1::Ack> {
        let _s = self.enter("DeleteQueue")?;
        Err(Status::not_found(format!("queue {} is not known", r.into_inner().name)))
    }

    async fn list_queues(&self, _r: Request<v1::Empty>) -> Answer<v1::ListQueuesReply> {
        let s = self.enter("ListQueues")?;
        Ok(Response::new(v1::ListQueuesReply { queues: s.queues.clone() }))
    }

    async fn put_cohort(&self, _r: Request<v1::Cohort>) -> Answer<v1::Ack> {
        let _s = self.enter("PutCohort")?;
        ack("cohort written".into())
    }

    async fn delete_cohort(&self, _r: Request<v1::NameRef>) -> Answer<v1::Ack> {
        let _s = self.enter("DeleteCohort")?;
        ack("cohort deleted".into())
    }

    async fn create_cohort(&self, r: Request<v1::Cohort>) -> Answer<v1::Ack> {
        let mut s = self.enter("CreateCohort")?;
        let c = r.into_inner();
        if s.cohorts.iter().any(|x| x.name == c.name) {
            return Err(Status::already_exists(format!("cohort {:?} already exists", c.name)));
        }
        s.cohorts.push(c.clone());
        ack(format!("cohort {} created", c.name))
    }

    async fn list_cohorts(&self, _r: Request<v1::Empty>) -> Answer<v1::ListCohortsReply> {
        let s = self.enter("ListCohorts")?;
        Ok(Response::new(v1::ListCohortsReply { cohorts: s.cohorts.clone() }))
    }

    async fn put_class(&self, _r: Request<v1::PriorityClass>) -> Answer<v1::Ack> {
        let _s = self.enter("PutClass")?;
        ack("class written".into())
    }

    async fn delete_class(&self, _r: Request<v1::NameRef>) -> Answer<v1::Ack> {
        let _s = self.enter("DeleteClass")?;
        ack("class deleted".into())
    }

    async fn create_class(&self, r: Request<v1::PriorityClass>) -> Answer<v1::Ack> {
        let mut s = self.enter("CreateClass")?;
        let c = r.into_inner();
        if s.classes.iter().any(|x| x.name == c.name) {
            return Err(Status::already_exists(format!("priority class {:?} already exists", c.name)));
        }
        s.classes.push(c.clone());
        ack(format!("priority class {} created", c.name))
    }

    async fn list_classes(&self, _r: Request<v1::Empty>) -> Answer<v1::ListClassesReply> {
        let s = self.enter("ListClasses")?;
        Ok(Response::new(v1::ListClassesReply { classes: s.classes.clone() }))
    }

    async fn list_nodes(&self, _r: Request<v1::Empty>) -> Answer<v1::ListNodesReply> {
        let s = self.enter("ListNodes")?;
        Ok(Response::new(v1::ListNodesReply { nodes: s.nodes.clone() }))
    }

    async fn cordon(&self, r: Request<v1::CordonRequest>) -> Answer<v1::Ack> {
        let mut s = self.enter("Cordon")?;
        let r = r.into_inner();
        if !s.nodes.iter().any(|n| n.name == r.node) {
            return Err(Status::not_found(format!("node {} is not known", r.node)));
        }
        s.cordons.push(r);
        Ok(Response::new(v1::Ack::default()))
    }

    async fn drain(&self, _r: Request<v1::NameRef>) -> Answer<v1::Ack> {
        let _s = self.enter("Drain")?;
        Ok(Response::new(v1::Ack::default()))
    }

    async fn create_maintenance(&self, r: Request<v1::MaintenanceWindow>) -> Answer<v1::Ack> {
        let mut s = self.enter("CreateMaintenance")?;
        let w = r.into_inner();
        if s.windows.iter().any(|x| x.name == w.name) {
            return Err(Status::already_exists(format!("maintenance window {:?} already exists", w.name)));
        }
        s.windows.push(w);
        Ok(Response::new(v1::Ack::default()))
    }

    async fn delete_maintenance(&self, r: Request<v1::NameRef>) -> Answer<v1::Ack> {
        let mut s = self.enter("DeleteMaintenance")?;
        let name = r.into_inner().name;
        let before = s.windows.len();
        s.windows.retain(|w| w.name != name);
        if s.windows.len() == before {
            return Err(Status::not_found(format!("unknown maintenance window {name:?}")));
        }
        Ok(Response::new(v1::Ack::default()))
    }

    async fn set_gpu_health(&self, r: Request<v1::SetGpuHealthRequest>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetGpuHealth")?;
        s.gpu_marks.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }

    async fn list_maintenance(&self, _r: Request<v1::Empty>) -> Answer<v1::ListMaintenanceReply> {
        let s = self.enter("ListMaintenance")?;
        Ok(Response::new(v1::ListMaintenanceReply { windows: s.windows.clone() }))
    }

    async fn cluster_info(&self, _r: Request<v1::Empty>) -> Answer<v1::ClusterInfoReply> {
        let s = self.enter("ClusterInfo")?;
        Ok(Response::new(s.info.clone()))
    }

    async fn set_scheduler(&self, r: Request<v1::SchedulerSettings>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetScheduler")?;
        s.scheduler_sets.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn set_tenancy(&self, r: Request<v1::TenancySettings>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetTenancy")?;
        s.tenancy_sets.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn set_usage(&self, r: Request<v1::UsageSettings>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetUsage")?;
        s.usage_sets.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn set_user_limit(&self, r: Request<v1::UserLimitRequest>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetUserLimit")?;
        s.user_limits.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn set_topology(&self, r: Request<v1::TopologyRequest>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetTopology")?;
        s.topology_sets.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn get_usage(&self, _r: Request<v1::Empty>) -> Answer<v1::UsageReply> {
        let s = self.enter("GetUsage")?;
        Ok(Response::new(s.usage.clone()))
    }
    async fn history(&self, r: Request<v1::HistoryRequest>) -> Answer<v1::HistoryReply> {
        let mut s = self.enter("History")?;
        s.history_asked.push(r.into_inner());
        Ok(Response::new(s.history.clone()))
    }
    async fn usage_totals(&self, r: Request<v1::UsageTotalsRequest>) -> Answer<v1::UsageTotalsReply> {
        let mut s = self.enter("UsageTotals")?;
        s.totals_asked.push(r.into_inner());
        Ok(Response::new(s.totals.clone()))
    }
    async fn set_accounting(&self, r: Request<v1::AccountingSettings>) -> Answer<v1::Ack> {
        let mut s = self.enter("SetAccounting")?;
        s.accounting_sets.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn save_snapshot(&self, _r: Request<v1::Empty>) -> Answer<SnapshotStream> {
        let _s = self.enter("SaveSnapshot")?;
        Err(Status::unimplemented("the fake keeps no state to back up"))
    }
    async fn add_replica(&self, _r: Request<v1::AddReplicaRequest>) -> Answer<v1::MembershipReply> {
        let _s = self.enter("AddReplica")?;
        Ok(Response::new(v1::MembershipReply::default()))
    }
    async fn remove_replica(&self, _r: Request<v1::ReplicaRef>) -> Answer<v1::MembershipReply> {
        let _s = self.enter("RemoveReplica")?;
        Ok(Response::new(v1::MembershipReply::default()))
    }
    async fn transfer_leader(&self, _r: Request<v1::ReplicaRef>) -> Answer<v1::MembershipReply> {
        let _s = self.enter("TransferLeader")?;
        Ok(Response::new(v1::MembershipReply::default()))
    }
    async fn create_token(&self, r: Request<v1::CreateTokenRequest>) -> Answer<v1::TokenInfo> {
        let mut s = self.enter("CreateToken")?;
        s.authorizations.push(bearer(&r));
        let r = r.into_inner();
        let id: String = r.hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
        s.token_requests.push(r.clone());
        Ok(Response::new(v1::TokenInfo { id, user: r.user, roles: r.roles, queues: r.queues, ..Default::default() }))
    }
    async fn revoke_token(&self, r: Request<v1::TokenRef>) -> Answer<v1::Ack> {
        let mut s = self.enter("RevokeToken")?;
        s.authorizations.push(bearer(&r));
        s.revoked.push(r.into_inner().id);
        Ok(Response::new(v1::Ack::default()))
    }
    async fn grant_queue(&self, r: Request<v1::GrantQueueRequest>) -> Answer<v1::Ack> {
        let mut s = self.enter("GrantQueue")?;
        s.grant_requests.push(r.into_inner());
        Ok(Response::new(v1::Ack::default()))
    }
    async fn list_tokens(&self, _: Request<v1::Empty>) -> Answer<v1::ListTokensReply> {
        let _s = self.enter("ListTokens")?;
        Ok(Response::new(v1::ListTokensReply::default()))
    }
    async fn who_am_i(&self, r: Request<v1::Empty>) -> Answer<v1::WhoAmIReply> {
        let mut s = self.enter("WhoAmI")?;
        s.authorizations.push(bearer(&r));
        let reply = v1::WhoAmIReply {
            user: "alice".into(),
            queues: vec!["a".into()],
            token_id: "0123".into(),
            auth: true,
            run_as: "alice".into(),
            ..Default::default()
        };
        Ok(Response::new(reply))
    }
}

/// The `authorization` metadata a call carried (empty when none).
fn bearer<T>(r: &Request<T>) -> String {
    r.metadata().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// An agent's log server: per rank, the chunks it sends (spaced a little when following).
#[derive(Clone, Default)]
pub struct FakeAgent {
    pub logs: Arc<Mutex<HashMap<u32, Vec<&'static str>>>>,
    pub requests: Arc<Mutex<Vec<v1::LogsRequest>>>,
}

/// Gap between chunks of a followed log, so the client sees them arrive over time.
const FOLLOW_GAP_MS: u64 = 20;

#[tonic::async_trait]
impl AgentLogs for FakeAgent {
    type LogsStream = ChunkStream;

    async fn logs(&self, r: Request<v1::LogsRequest>) -> Answer<ChunkStream> {
        let r = r.into_inner();
        self.requests.lock().unwrap().push(r.clone());
        let Some(chunks) = self.logs.lock().unwrap().get(&r.rank).cloned() else {
            return Err(Status::not_found(format!("no rank {} of job {} here", r.rank, r.job)));
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let follow = r.follow;
        tokio::spawn(async move {
            let mut offset = 0u64;
            for c in chunks {
                if follow {
                    tokio::time::sleep(Duration::from_millis(FOLLOW_GAP_MS)).await;
                }
                let chunk = v1::LogChunk { attempt: 1, offset, data: c.as_bytes().to_vec() };
                offset += c.len() as u64;
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// A server on its own thread; stopped when dropped.
pub struct Served {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(router: impl FnOnce(tonic::transport::Server) -> tonic::transport::server::Router + Send + 'static) -> Served {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = router(tonic::transport::Server::builder())
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await;
        });
    });
    let addr = addr_rx.recv().unwrap();
    Served { addr, stop: Some(stop_tx), thread: Some(thread) }
}

pub fn serve_baton(fake: Fake) -> Served {
    serve(move |mut b| b.add_service(BatonServer::new(fake)))
}

pub fn serve_agent(agent: FakeAgent) -> Served {
    serve(move |mut b| b.add_service(AgentLogsServer::new(agent)))
}

/// An address that refuses connections: its port is bound, never listened on, and kept for
/// the rest of the test binary's life. A port bound and released could be taken by a server
/// another test starts in parallel, and the "dead" address would answer.
pub fn dead_addr() -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    std::mem::forget(socket);
    addr
}

pub fn resources(pairs: &[(&str, u64)]) -> Option<v1::Resources> {
    Some(v1::Resources { amounts: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect() })
}

/// A job as a server would list it.
pub fn job(id: u64, name: &str, queue: &str, state: &str, placements: &[(&str, &[u32])]) -> v1::Job {
    v1::Job {
        id,
        spec: Some(v1::JobSpec {
            name: name.into(),
            queue: queue.into(),
            priority_class: "train".into(),
            tasks: vec![v1::TaskSpec {
                name: "main".into(),
                replicas: placements.len().max(1) as u32,
                resources: resources(&[("gpu", 4)]),
                pools: vec![],
                min_replicas: None,
            }],
            command: vec!["python".into(), "train.py".into()],
            ..Default::default()
        }),
        state: baton_proto::words::Word::from_word(state).map_or(0, |s: v1::JobState| s.into()),
        priority: 100,
        preemptible: true,
        attempt: u32::from(!placements.is_empty()),
        placements: placements
            .iter()
            .map(|(n, g)| v1::Placement { node: n.to_string(), gpus: g.to_vec(), gpu_milli: vec![] })
            .collect(),
        submitted_ms: 1_795_341_600_000,
        ..Default::default()
    }
}

pub fn node(name: &str, agent_addr: &str) -> v1::Node {
    v1::Node {
        name: name.into(),
        pool: "default".into(),
        resources: resources(&[("gpu", 8)]),
        status: v1::NodeStatus::Ready.into(),
        agent_addr: agent_addr.into(),
        ..Default::default()
    }
}

/// Parses a client command line as the binary would and runs it in-process, returning what
/// it printed.
pub fn run(args: &[&str]) -> (Result<(), baton_cli::client::ClientError>, String) {
    let cli = parse(args).expect("arguments parse");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut out = Vec::new();
    let result = rt.block_on(async {
        let conn = cli.cmd.conn_args().conn()?;
        baton_cli::client::run(&conn, &cli.cmd, &mut out).await
    });
    (result, String::from_utf8(out).unwrap())
}

/// Why the command line `args` does not parse (clap's message); panics if it does.
pub fn parse_error(args: &[&str]) -> String {
    match parse(args) {
        Ok(_) => panic!("{args:?} parsed"),
        Err(e) => e.to_string(),
    }
}

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: baton_cli::client::ClientCommand,
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    use clap::Parser;
    // The fakes serve plain TCP; the flag goes right after the command's name, before any
    // `--` that starts a job's command line.
    let args = args.iter().take(1).chain(&["--insecure"]).chain(args.iter().skip(1)).copied();
    Cli::try_parse_from(std::iter::once("baton").chain(args))
}

/// The real binary, run to completion.
pub fn baton(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .env_remove("BATON_SERVER")
        .env_remove("BATON_TLS_DIR")
        .env("BATON_INSECURE", "1")
        .output()
        .expect("the baton binary runs")
}
