//! A fake AgentGateway (the leader side) on 127.0.0.1:0, and helpers to drive an agent
//! against it with real processes.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_agent::inventory::development_inventory;
use baton_agent::{Agent, AgentConfig};
use baton_proto::v1::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use baton_proto::v1::observation::What;
use baton_proto::v1::{Action, Assignment, AttachRequest, Directive, Observation, ReportReply, ReportRequest};
use tokio::sync::{oneshot, watch};
use tokio_stream::Stream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

#[derive(Default)]
pub struct Seen {
    pub attaches: Vec<AttachRequest>,
    pub reports: Vec<ReportRequest>,
}

#[derive(Clone)]
pub struct FakeGateway {
    pub seen: Arc<Mutex<Seen>>,
    directive: Arc<watch::Sender<Option<Directive>>>,
    /// Some(addr): act as a follower pointing at `addr`.
    follower_of: Option<String>,
    reply_term: Arc<Mutex<u64>>,
    /// Leave reports unanswered, as a leader cut off from its quorum does.
    stall_reports: Arc<std::sync::atomic::AtomicBool>,
    /// The lease each report reply grants (0: none).
    lease_ms: Arc<std::sync::atomic::AtomicU64>,
    /// The leader id report replies carry.
    reply_leader: Arc<std::sync::atomic::AtomicU64>,
    /// The `state_index` report replies carry (how new the leader's state is).
    reply_state_index: Arc<std::sync::atomic::AtomicU64>,
}

type DirectiveStream = Pin<Box<dyn Stream<Item = Result<Directive, Status>> + Send>>;

#[tonic::async_trait]
impl AgentGateway for FakeGateway {
    type AttachStream = DirectiveStream;

    async fn attach(&self, request: Request<AttachRequest>) -> Result<Response<Self::AttachStream>, Status> {
        if let Some(leader) = &self.follower_of {
            let mut status = Status::failed_precondition("not the leader");
            status.metadata_mut().insert(baton_proto::LEADER_METADATA, leader.parse().unwrap());
            return Err(status);
        }
        self.seen.lock().unwrap().attaches.push(request.into_inner());
        let stream = WatchStream::new(self.directive.subscribe()).filter_map(|d| d.map(Ok));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report(&self, request: Request<ReportRequest>) -> Result<Response<ReportReply>, Status> {
        if self.stall_reports.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.seen.lock().unwrap().reports.push(request.into_inner());
        let lease_ms = self.lease_ms.load(std::sync::atomic::Ordering::SeqCst);
        let leader_id = self.reply_leader.load(std::sync::atomic::Ordering::SeqCst);
        let state_index = self.reply_state_index.load(std::sync::atomic::Ordering::SeqCst);
        Ok(Response::new(ReportReply { term: *self.reply_term.lock().unwrap(), leader_id, lease_ms, state_index }))
    }
}

pub struct Gateway {
    pub addr: SocketAddr,
    pub fake: FakeGateway,
    stop: Option<oneshot::Sender<()>>,
}

impl Gateway {
    pub async fn start(follower_of: Option<String>) -> Gateway {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, _) = watch::channel(None);
        let fake = FakeGateway {
            seen: Arc::default(),
            directive: Arc::new(tx),
            follower_of,
            reply_term: Arc::new(Mutex::new(1)),
            stall_reports: Arc::default(),
            // Granted by default, as a leader does: an agent starts nothing before a grant.
            lease_ms: Arc::new(std::sync::atomic::AtomicU64::new(DEFAULT_FAKE_LEASE_MS)),
            reply_leader: Arc::new(std::sync::atomic::AtomicU64::new(1)),
            reply_state_index: Arc::default(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let svc = AgentGatewayServer::new(fake.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Gateway { addr, fake, stop: Some(stop) }
    }

    /// Sends the whole desired state of the node.
    pub fn set(&self, term: u64, assignments: Vec<Assignment>) {
        *self.fake.reply_term.lock().unwrap() = term;
        self.send(Directive { term, leader_id: 1, assignments, ..directive() });
    }

    /// Sends a directive built from a state that had applied `state_index` commands,
    /// without changing the term the fake answers reports with.
    pub fn send_built_at(&self, term: u64, state_index: u64, assignments: Vec<Assignment>) {
        self.send(Directive { term, leader_id: 1, assignments, state_index, ..directive() });
    }

    /// The `state_index` report replies carry from now on: the leader's state has moved on
    /// to it, whether or not a directive built from it was sent yet.
    pub fn set_reply_state_index(&self, state_index: u64) {
        self.fake.reply_state_index.store(state_index, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sends a directive without changing the term the fake answers reports with.
    pub fn send_raw(&self, term: u64, assignments: Vec<Assignment>) {
        self.send_from(term, 1, assignments);
    }

    /// Sends a directive as leader `leader_id`, without changing the reply term.
    pub fn send_from(&self, term: u64, leader_id: u64, assignments: Vec<Assignment>) {
        self.send(Directive { term, leader_id, assignments, ..directive() });
    }

    fn send(&self, d: Directive) {
        self.fake.directive.send_replace(Some(d));
    }

    /// The term the fake answers reports with (a deposed leader answers a lower one).
    pub fn set_reply_term(&self, term: u64) {
        *self.fake.reply_term.lock().unwrap() = term;
    }

    /// The leader id report replies carry from now on.
    pub fn set_reply_leader(&self, leader_id: u64) {
        self.fake.reply_leader.store(leader_id, std::sync::atomic::Ordering::SeqCst);
    }

    /// The lease every report reply grants from now on (0: none).
    pub fn grant_lease_ms(&self, lease_ms: u64) {
        self.fake.lease_ms.store(lease_ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Leave reports unanswered (`true`) while keeping the directive stream open.
    pub fn stall_reports(&self, stall: bool) {
        self.fake.stall_reports.store(stall, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn report_count(&self) -> usize {
        self.fake.seen.lock().unwrap().reports.len()
    }

    pub fn observations(&self) -> Vec<Observation> {
        let seen = self.fake.seen.lock().unwrap();
        seen.reports.iter().flat_map(|r| r.observations.clone()).collect()
    }

    pub fn attaches(&self) -> usize {
        self.fake.seen.lock().unwrap().attaches.len()
    }

    pub fn last_report(&self) -> Option<ReportRequest> {
        self.fake.seen.lock().unwrap().reports.last().cloned()
    }

    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What every directive of the fake says besides its term, leader and assignments.
fn directive() -> Directive {
    Directive { heartbeat_timeout_ms: 5_000, ..Default::default() }
}

/// The lease the fake grants unless a test says otherwise: long enough that no test runs
/// into it unasked.
pub const DEFAULT_FAKE_LEASE_MS: u64 = 120_000;

pub fn config(dir: &Path, servers: &[SocketAddr]) -> AgentConfig {
    let mut c = AgentConfig::new("node-a", dir);
    c.servers = servers.iter().map(|a| a.to_string()).collect();
    c.heartbeat_ms = 50;
    c.kill_grace_ms = 500;
    c
}

pub async fn start_agent(c: AgentConfig) -> Agent {
    let inv = development_inventory(&c.name, 4);
    baton_agent::start_with_inventory(c, inv).await.expect("agent starts")
}

/// An assignment of job `job_id` on GPUs of its own (job 1 gets GPUs 1 and 3), as a leader
/// gives them: the agent holds back a replica whose GPUs another replica still holds.
pub fn assignment(job_id: u64, attempt: u32, action: Action, command: &str) -> Assignment {
    let first = 4 * job_id as u32 - 3;
    Assignment {
        job_id,
        job: format!("job-{job_id}"),
        attempt,
        task: 0,
        replica: 0,
        rank: 0,
        world_size: 1,
        action: action as i32,
        gpus: vec![first, first + 2],
        command: vec!["sh".into(), "-c".into(), command.into()],
        env: Default::default(),
        checkpoint_signal: String::new(),
        grace_ms: 2_000,
        resume: false,
        run_as: String::new(),
        awaiting_suspended: false,
        resume_if_checkpointed: false,
        memory_bytes: 0,
        cpu_millis: 0,
        suspension_by: 0,
        suspension_ms: 0,
        slices: Default::default(),
        gpu_milli: 0,
    }
}

/// How many times longer than its quiet-machine figure a wait may take before a test fails.
/// These waits say that something happens, not how fast (speed lives in the benchmarks); CI
/// runs them on a loaded two-core machine, where an exit that takes milliseconds here was once
/// reported later than 5 s (stop 58).
const PATIENCE: u64 = 4;

/// Polls `f` every 20 ms until it returns Some, or panics naming `what` after `PATIENCE`
/// times `secs`, the time it takes at most on a quiet machine.
pub async fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs * PATIENCE);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what} ({} s)", secs * PATIENCE);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A replica's end was reported at least once, every time as `want`: reports are at least
/// once, and a directive that reaches an agent after the replica ended (a restart's first
/// directive, a resend) is answered with that end again.
pub fn said_once_or_more<T: PartialEq + std::fmt::Debug>(got: &[T], want: T) {
    assert!(!got.is_empty() && got.iter().all(|g| *g == want), "reported {got:?}, wanted {want:?} once or more");
}

pub fn stopped_of(obs: &[Observation], job_id: u64) -> Vec<bool> {
    obs.iter()
        .filter_map(|o| match &o.what {
            Some(What::Stopped(s)) if s.job_id == job_id => Some(s.checkpointed),
            _ => None,
        })
        .collect()
}

pub fn exited_of(obs: &[Observation], job_id: u64) -> Vec<i32> {
    obs.iter()
        .filter_map(|o| match &o.what {
            Some(What::Exited(e)) if e.job_id == job_id => Some(e.exit_code),
            _ => None,
        })
        .collect()
}

/// The pid the replica wrote to `file` (`echo $$ > file` in its command).
pub fn read_pid(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// /proc state letter of `pid`.
pub fn proc_state(pid: i32) -> Option<char> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

pub fn alive(pid: i32) -> bool {
    matches!(proc_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// Kills every process group whose leader pid was written to one of `files`, so no test
/// leaves processes behind even when it fails.
pub struct Reaper(pub Vec<PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for f in &self.0 {
            let Some(pid) = read_pid(f) else { continue };
            // SAFETY: getpgid and kill have no memory effects.
            let pgid = unsafe { libc::getpgid(pid) };
            // Never signal group 0 or 1 (or an error's -1): only the replica's own group.
            if pgid > 1 && pgid != unsafe { libc::getpgrp() } {
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
        }
    }
}

/// The repository root (for examples/workloads/train.py).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cause of every Stopped observation of `job_id`, in order.
pub fn stop_causes_of(obs: &[Observation], job_id: u64) -> Vec<baton_proto::v1::StopCause> {
    obs.iter()
        .filter_map(|o| match &o.what {
            Some(What::Stopped(s)) if s.job_id == job_id => Some(s.cause()),
            _ => None,
        })
        .collect()
}

/// A blocking scrape for use inside `wait_for`'s synchronous check.
pub fn blocking_scrape(addr: std::net::SocketAddr) -> std::collections::BTreeMap<String, f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let body = reply.split_once("\r\n\r\n").unwrap().1;
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(k, v)| (k.to_string(), v.parse().unwrap_or(f64::NAN))))
        .collect()
}

/// The whole HTTP reply of `GET /metrics` at `addr`, head and body.
pub async fn scrape_reply(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    reply
}

/// The process is suspended: stopped (`T`, process groups) or in a frozen cgroup v2
/// (`cgroup.events` says `frozen 1`; a frozen process shows as sleeping).
pub fn suspended(pid: i32) -> bool {
    if proc_state(pid) == Some('T') {
        return true;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return false };
    let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) else { return false };
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"].iter().any(|mount| {
        std::fs::read_to_string(format!("{mount}{path}/cgroup.events"))
            .is_ok_and(|e| e.lines().any(|l| l == "frozen 1"))
    })
}

/// An address that refuses connections for as long as this value lives: its port is bound but
/// never listened on. Binding a port and dropping it is not enough, because a test running in
/// parallel may start a server on the freed port (an "unreachable" agent then answered).
pub struct Refusing {
    _socket: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

pub fn refusing() -> Refusing {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    Refusing { _socket: socket, addr }
}

/// A cgroup root of this test's own under the v2 hierarchy, removed at the end.
pub struct TestRoot(pub PathBuf);

impl TestRoot {
    pub fn new(name: &str) -> TestRoot {
        let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|m| m.join("cgroup.kill").exists() || m.join("cgroup.subtree_control").exists())
            .expect("a cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified");
        TestRoot(mount.join(format!("baton-test-{name}-{}", std::process::id())))
    }
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            // Child cgroups only: the interface files beside them are never removed, and
            // waiting on each of them took a second apiece.
            for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                let _ = std::fs::write(e.path().join("cgroup.kill"), "1");
                for _ in 0..50 {
                    if std::fs::remove_dir(e.path()).is_ok() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
        let _ = std::fs::remove_dir(&self.0);
        // Its counterparts in the v1 hierarchies of a hybrid host (for limits), emptied by
        // the kill above.
        let name = self.0.file_name().unwrap();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        for (mount, controller) in
            [("memory", "memory"), ("cpu", "cpu"), ("cpu,cpuacct", "cpu"), ("devices", "devices")]
        {
            let Some(path) = own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',').any(|c| c == controller).then_some(path)
            }) else {
                continue;
            };
            let v1 = Path::new("/sys/fs/cgroup").join(mount).join(path.trim_start_matches('/')).join(name);
            if let Ok(entries) = std::fs::read_dir(&v1) {
                entries.flatten().for_each(|e| drop(std::fs::remove_dir(e.path())));
            }
            let _ = std::fs::remove_dir(&v1);
        }
    }
}

/// An agent's configuration holding its replicas in cgroups under `root`.
pub fn cgroup_config(dir: &Path, gw: &Gateway, root: &Path) -> baton_agent::AgentConfig {
    let mut c = config(dir, &[gw.addr]);
    c.containment = baton_agent::cgroup::ContainmentMode::Cgroup;
    c.cgroup_root = Some(root.to_path_buf());
    c
}

/// Issue 31's order for job 1 (run as `first`, which exits 3) whose processes survive
/// SIGKILL, beside job 2 given the same GPUs (it writes its pid to `next_ran`): the agent
/// reports job 1 `Unkillable`, then its end, and job 2 does not start while those processes
/// live. Returns job 2's assignment, the only one wanted from then on.
pub async fn reported_unkillable_with_its_gpus_held(gw: &Gateway, first: &str, next_ran: &Path) -> Assignment {
    let mut next = assignment(2, 1, Action::Run, &format!("echo $$ > {}; exec sleep 30", next_ran.display()));
    next.gpus = assignment(1, 1, Action::Run, first).gpus;
    gw.set(1, vec![assignment(1, 1, Action::Run, first), next.clone()]);
    let unkillable = wait_for(10, "Unkillable reported", || {
        gw.observations().iter().position(|o| matches!(&o.what, Some(What::Unkillable(u)) if u.job_id == 1))
    })
    .await;
    let Some(What::Unkillable(u)) = &gw.observations()[unkillable].what else { unreachable!() };
    assert!(u.reason.contains("survived SIGKILL"), "{}", u.reason);
    let exited = wait_for(5, "its end told after Unkillable", || {
        gw.observations()
            .iter()
            .position(|o| matches!(&o.what, Some(What::Exited(e)) if e.job_id == 1 && e.exit_code == 3))
    })
    .await;
    assert!(exited > unkillable, "the node must be out before the job lets its GPUs go");
    gw.set(1, vec![next.clone()]);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!next_ran.exists(), "another job started on GPUs a live process holds");
    next
}
