//! A cluster of in-process replicas on loopback, a client, and a scripted agent that speaks
//! the agent protocol by hand (so the server is tested without the real agent).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ::baton_server::{ServerConfig, ServerSettings};
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::*;
#[allow(unused_imports)]
pub use baton_proto::words::Word;
use baton_raft::{RaftSettings, ReplicaConfig, Storage};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub struct Replica {
    pub addr: String,
    /// Where its `/metrics` is served (`host:port`).
    pub metrics: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

pub struct Cluster {
    pub replicas: Vec<Replica>,
    pub dir: tempfile::TempDir,
    settings: ServerSettings,
}

/// Starts replica `id` of cluster `test` on `listener`, its data under `dir`.
async fn spawn(
    dir: &std::path::Path,
    id: u64,
    listener: tokio::net::TcpListener,
    bootstrap: Option<BTreeMap<u64, String>>,
    settings: ServerSettings,
    configure: &impl Fn(u64, &mut ReplicaConfig),
) -> Replica {
    let addr = listener.local_addr().unwrap().to_string();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = metrics.local_addr().unwrap().to_string();
    let mut rc = ReplicaConfig::new(id, "test", addr.clone(), dir.join(format!("r{id}")));
    rc.storage = Storage::Disk(dir.join(format!("r{id}")));
    rc.settings = RaftSettings::default();
    configure(id, &mut rc);
    let config = ServerConfig {
        replica: rc,
        bootstrap,
        settings,
        scheduler: None,
        transport: baton_proto::tls::Transport::Insecure,
    };
    let (stop, rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        ::baton_server::run_with_metrics(config, listener, Some(metrics), async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Replica { addr, metrics: metrics_addr, stop: Some(stop), task: Some(task) }
}

/// Fast timings, and no authentication: these tests are about scheduling (tests/suite/auth.rs
/// runs with tokens).
pub fn settings() -> ServerSettings {
    ServerSettings {
        cycle_interval_ms: 50,
        // The shortest timeout the timing argument allows a 600 ms lease (docs/protocol.md):
        // 600 + the agents' stop bound 1500 + drift 21 < 2200.
        heartbeat_timeout_ms: 2_200,
        resend_ms: 200,
        lease_ms: 600,
        auth: ::baton_server::auth::AuthMode::None,
        ..ServerSettings::default()
    }
}

impl Cluster {
    pub async fn start(n: u64) -> Cluster {
        Cluster::start_with(n, settings()).await
    }

    pub async fn start_with(n: u64, settings: ServerSettings) -> Cluster {
        Cluster::start_configured(n, settings, |_, _| {}).await
    }

    /// A cluster whose replica configs `configure` changes first (by replica id).
    pub async fn start_configured(
        n: u64,
        settings: ServerSettings,
        configure: impl Fn(u64, &mut ReplicaConfig),
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
        let members: BTreeMap<u64, String> = addrs.iter().enumerate().map(|(i, a)| (i as u64 + 1, a.clone())).collect();
        let mut replicas = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = i as u64 + 1;
            let bootstrap = (id == 1).then(|| members.clone());
            replicas.push(spawn(dir.path(), id, listener, bootstrap, settings.clone(), &configure).await);
        }
        let c = Cluster { replicas, dir, settings };
        c.leader().await;
        c
    }

    /// Starts replica `i` again (after [`Cluster::kill`]) on its address and data directory,
    /// with its config changed by `configure`.
    pub async fn restart(&mut self, i: usize, configure: impl Fn(u64, &mut ReplicaConfig)) {
        assert!(self.replicas[i].stop.is_none(), "replica {i} still runs");
        let listener = tokio::net::TcpListener::bind(&self.replicas[i].addr).await.unwrap();
        let r = spawn(self.dir.path(), i as u64 + 1, listener, None, self.settings.clone(), &configure).await;
        self.replicas[i] = r;
    }

    pub async fn client(&self, i: usize) -> BatonClient<Channel> {
        BatonClient::connect(format!("http://{}", self.replicas[i].addr)).await.unwrap()
    }

    /// The index of the replica that leads, once one does.
    pub async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            for (i, r) in self.replicas.iter().enumerate() {
                if r.stop.is_none() {
                    continue;
                }
                let Ok(mut c) = BatonClient::connect(format!("http://{}", r.addr)).await else { continue };
                if let Ok(info) = c.cluster_info(Empty {}).await {
                    let info = info.into_inner();
                    if info.leader_id != 0 && info.leader_id == info.answered_by {
                        return i;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no leader within 15 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn kill(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        if let Some(stop) = r.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = r.task.take() {
            let _ = task.await;
        }
    }

    pub fn addrs(&self) -> Vec<String> {
        self.replicas.iter().filter(|r| r.stop.is_some()).map(|r| r.addr.clone()).collect()
    }
}

/// Reports `what` from a fresh attachment of `node` to whichever replica leads (after a
/// leader was killed), retrying until one takes it; the attachment, for what follows.
pub async fn report_to_the_new_leader(cluster: &Cluster, node: NodeInfo, what: observation::What) -> FakeAgent {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let agent = FakeAgent::attach(&cluster.addrs(), node).await;
    while agent.report(vec![what.clone()]).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "no leader took the report");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    agent
}

/// A submit of `spec` without a request id, run as the caller's own user.
pub fn submit_of(spec: JobSpec) -> SubmitRequest {
    SubmitRequest { spec: Some(spec), request_id: String::new(), run_as: String::new(), after: Vec::new(), array: None }
}

pub fn gpu_job(name: &str, queue: &str, class: &str, gpus: u64) -> JobSpec {
    JobSpec { grace_ms: Some(5_000), ..baton_proto::make::gpu_job(name, queue, class, 1, gpus, vec!["train".into()]) }
}

// Not every test file makes queues.
#[allow(unused_imports)]
pub use baton_proto::make::gpu_queue as queue;

pub async fn wait_state(c: &mut BatonClient<Channel>, job: &str, state: JobState) -> Job {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(j) = c.get_job(JobRef { name: job.into(), ..Default::default() }).await {
            let j = j.into_inner();
            if j.state() == state {
                return j;
            }
            let (is, want) = (j.state().word(), state.word());
            assert!(Instant::now() < deadline, "job {job} is {is} ({}), not {want}, after 10 s", j.reason);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An agent scripted by the test: attaches to whichever replica leads, and reports what
/// the test tells it to.
pub struct FakeAgent {
    pub node: NodeInfo,
    pub leader: String,
    pub directives: tonic::Streaming<Directive>,
    pub last: Option<Directive>,
    beat: Option<tokio::task::AbortHandle>,
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.silence();
    }
}

pub fn node(name: &str, gpus: u64) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        pool: "default".into(),
        resources: [("gpu".to_string(), gpus)].into(),
        ..Default::default()
    }
}

impl FakeAgent {
    pub async fn attach(addrs: &[String], node: NodeInfo) -> FakeAgent {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut next = addrs[0].clone();
        loop {
            assert!(Instant::now() < deadline, "could not attach to a leader within 10 s");
            let Ok(mut c) = AgentGatewayClient::connect(format!("http://{next}")).await else {
                next = addrs[(addrs.iter().position(|a| *a == next).unwrap_or(0) + 1) % addrs.len()].clone();
                continue;
            };
            match c.attach(AttachRequest { node: Some(node.clone()), term_seen: 0 }).await {
                Ok(stream) => {
                    let beat = tokio::spawn(heartbeats(next.clone(), node.name.clone())).abort_handle();
                    return FakeAgent {
                        node,
                        leader: next,
                        directives: stream.into_inner(),
                        last: None,
                        beat: Some(beat),
                    };
                }
                Err(s) => {
                    let hint =
                        s.metadata().get(baton_proto::LEADER_METADATA).and_then(|v| v.to_str().ok()).unwrap_or("");
                    next = if hint.is_empty() { addrs[0].clone() } else { hint.to_string() };
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Stops heartbeating, as a dead agent would.
    pub fn silence(&mut self) {
        if let Some(b) = self.beat.take() {
            b.abort();
        }
    }

    /// Waits for a directive satisfying `f`.
    pub async fn until(&mut self, what: &str, f: impl Fn(&Directive) -> bool) -> Directive {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let d = tokio::time::timeout_at(deadline, self.directives.message())
                .await
                .unwrap_or_else(|_| panic!("no directive where {what} within 10 s; last: {:?}", self.last))
                .expect("directive stream failed")
                .expect("directive stream ended");
            self.last = Some(d.clone());
            if f(&d) {
                return d;
            }
        }
    }

    /// The next directive, if one came or comes within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<Directive> {
        let m = tokio::time::timeout(within, self.directives.message()).await.ok()?;
        Some(m.expect("directive stream failed").expect("directive stream ended"))
    }

    pub async fn report(&self, observations: Vec<observation::What>) -> Result<ReportReply, tonic::Status> {
        self.report_running(vec![], observations).await
    }

    /// A report that also lists what this agent says it runs.
    pub async fn report_running(
        &self,
        running: Vec<Running>,
        observations: Vec<observation::What>,
    ) -> Result<ReportReply, tonic::Status> {
        let observations = observations.into_iter().map(|w| Observation { what: Some(w) }).collect();
        self.send_report(ReportRequest { node: self.node.name.clone(), running, observations, ..Default::default() })
            .await
    }

    /// A report with nothing new that asks for a directive built from a state at least
    /// `state_index` new, as an agent whose lease was renewed after it ran out does.
    pub async fn report_awaiting(&self, state_index: u64) -> Result<ReportReply, tonic::Status> {
        self.send_report(ReportRequest {
            node: self.node.name.clone(),
            awaiting_state_index: state_index,
            ..Default::default()
        })
        .await
    }

    async fn send_report(&self, req: ReportRequest) -> Result<ReportReply, tonic::Status> {
        let mut c = AgentGatewayClient::connect(format!("http://{}", self.leader)).await.unwrap();
        c.report(req).await.map(|r| r.into_inner())
    }
}

pub fn has(d: &Directive, job: &str, action: Action) -> bool {
    d.assignments.iter().any(|a| a.job == job && a.action == action as i32)
}

async fn heartbeats(addr: String, node: String) {
    loop {
        if let Ok(mut c) = AgentGatewayClient::connect(format!("http://{addr}")).await {
            let _ = c.report(ReportRequest { node: node.clone(), ..Default::default() }).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Replica `i`'s applied index, read from its `/metrics`.
pub async fn applied_index(cluster: &Cluster, i: usize) -> f64 {
    samples(&scrape(&cluster.replicas[i].metrics).await)["baton_raft_applied_index"]
}

/// Replica `i`'s applied index once the leader's own first writes (accounting on, the
/// newest apply behaviour) are in and it has stood still for 300 ms (or 15 s have passed):
/// where a test that counts the entries of what it does starts counting (on a loaded
/// machine those writes fell inside the window measured).
pub async fn quiet_applied_index(cluster: &Cluster, i: usize) -> f64 {
    let mut c = cluster.client(i).await;
    newest_behaviour(&mut c).await;
    // Bounded: a cluster that keeps writing (the fault a caller looks for) is measured as it is.
    let mut before = applied_index(cluster, i).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = applied_index(cluster, i).await;
        if now == before {
            return now;
        }
        before = now;
    }
    before
}

/// Waits (at most 30 s) until the state is at this build's newest apply behaviour, which the
/// leader raises by itself once every member has told it the format it reads: what a test of
/// today's behaviour waits for, since a report on either side of the raise is taken by
/// different rules.
pub async fn newest_behaviour(c: &mut BatonClient<Channel>) {
    for _ in 0..300 {
        if c.cluster_info(Empty {}).await.unwrap().into_inner().behaviour == baton_model::behaviour::BEHAVIOUR {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET /metrics` from `addr`: the body, after checking the status line.
pub async fn scrape(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("no end of the response head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// Samples of an exposition: `name{labels}` (labels as written) to value.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap();
            (key.to_string(), value.parse::<f64>().unwrap_or_else(|e| panic!("{l:?}: {e}")))
        })
        .collect()
}

/// Sends `authorization: Bearer TOKEN` with every call.
#[derive(Clone)]
pub struct Bearer(pub String);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", format!("Bearer {}", self.0).parse().unwrap());
        Ok(req)
    }
}

/// A client of replica `addr` that sends `token`.
pub type Client = BatonClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

pub async fn client(addr: &str, token: &str) -> Client {
    let ch = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    BatonClient::with_interceptor(ch, Bearer(token.to_string()))
}

/// The bootstrap admin's client of replica `addr`, once its token is committed.
pub async fn bootstrap_admin(addr: &str, admin: &str) -> Client {
    let mut c = client(addr, admin).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.who_am_i(Empty {}).await.is_err() {
        assert!(Instant::now() < deadline, "the bootstrap admin token never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c
}

/// The bootstrap admin's client of replica `addr` once its token is committed, with queue
/// `queue` of `gpus` GPUs and a token per `(token, user)` granted that queue.
pub async fn admin_with_users(addr: &str, admin: &str, queue_name: &str, gpus: u64, users: &[(&str, &str)]) -> Client {
    let mut c = bootstrap_admin(addr, admin).await;
    c.create_queue(queue(queue_name, gpus)).await.unwrap();
    for (token, user) in users {
        let req = CreateTokenRequest {
            hash: ::baton_server::auth::hash_token(token).to_vec(),
            user: user.to_string(),
            roles: vec![],
            queues: vec![queue_name.into()],
        };
        c.create_token(req).await.unwrap();
    }
    c
}
