//! Simulated agents for `baton bench scale`: one task per node, over real gRPC, speaking the
//! agent protocol as `baton agent` does (attach, follow the leader's hint, heartbeat with
//! the running replicas, report exits and stops until acknowledged) and deciding what a
//! directive means by the real agent's rules (`baton_agent::reconcile::plan`), but running
//! nothing: a replica told to run "runs" for a synthetic duration, then exits 0; one told to
//! stop reports a checkpoint at once. Many nodes share a few connections per replica (HTTP/2
//! streams), as a real fleet's agents would each hold one.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_agent::backoff::seed_for;
use baton_agent::dialing::{Dialing, Tried};
use baton_agent::fence::Fence;
use baton_agent::journal::{Outcome, Phase, ReplicaKey};
use baton_agent::limits::{ATTACH_TIMEOUT_MS, REPORT_TIMEOUT_MS};
use baton_agent::reconcile::{self, Act, Inputs, Known};
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::observation::What;
use baton_proto::v1::{
    Assignment, AttachRequest, Directive, Exited, GpuDevice, NodeInfo, Observation, ReplicaPhase, ReportRequest,
    Running, StopCause, Stopped,
};
use prost::Message;
use tonic::transport::{Channel, Endpoint};

// Most observations held unacknowledged by one simulated node: the real agent's bound.
use baton_agent::limits::MAX_PENDING_OBSERVATIONS;
use baton_proto::LEADER_METADATA;

/// Attach streams that share one connection by default (below HTTP/2 servers' usual stream
/// limits). Real agents hold a connection each; `--nodes-per-connection` goes nearer that.
pub const NODES_PER_CONNECTION: u32 = 100;
/// Most attach streams on one connection: HTTP/2 servers commonly allow 100 to 1,000
/// concurrent streams, and each node holds one open.
pub const MAX_NODES_PER_CONNECTION: u32 = 1_000;

#[derive(Debug, Clone)]
pub struct Fleet {
    pub nodes: u32,
    pub gpus: u32,
    pub racks: u32,
    pub run_ms: u64,
    pub heartbeat_ms: u64,
    pub servers: Vec<String>,
    /// Nodes whose attach streams and reports share one connection.
    pub nodes_per_connection: u32,
}

/// What the simulated nodes saw, shared with the benchmark.
#[derive(Default)]
pub struct Seen {
    /// Job name -> when its submit was sent; a job's first start takes it out.
    pub submitted: Mutex<HashMap<String, Instant>>,
    /// Every first start: when its submit was sent (ms since `epoch`) and its
    /// submit-to-running in ms.
    pub to_running: Mutex<Vec<Start>>,
    pub started: AtomicU64,
    pub exited: AtomicU64,
    pub stopped: AtomicU64,
    pub directive_bytes: AtomicU64,
    pub report_bytes: AtomicU64,
    pub directives: AtomicU64,
    pub reports: AtomicU64,
    /// Per node: the term of the last directive it received (0: none yet).
    pub term_of: Vec<AtomicU64>,
    /// Per node: when it last received a directive, in ms since `epoch`.
    pub directed_at_ms: Vec<AtomicU64>,
    /// Per node: when it first received a directive of its current term, in ms since `epoch`.
    pub term_began_ms: Vec<AtomicU64>,
    /// Per node: when its last attach was accepted, in ms since `epoch`.
    pub attached_at_ms: Vec<AtomicU64>,
    /// Attaches refused or failed (a replica down, not leading yet, or redirecting).
    pub attach_failures: AtomicU64,
    pub epoch: Option<Instant>,
    /// Starts of jobs whose submit was not known yet (a client process's `sent` line read
    /// after the start), kept while `keep_early` is set, up to `MAX_EARLY_STARTS`.
    pub early: Mutex<HashMap<String, Instant>>,
    pub keep_early: std::sync::atomic::AtomicBool,
}

/// A job's first start as the fleet saw it.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// When its submit was sent, in ms since `Seen::epoch`.
    pub sent_ms: u64,
    pub to_running_ms: f64,
}

/// Most starts kept while their submits are not known yet.
const MAX_EARLY_STARTS: usize = 1_000_000;

impl Seen {
    pub fn new(nodes: u32) -> Seen {
        Seen {
            term_of: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            directed_at_ms: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            term_began_ms: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            attached_at_ms: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            epoch: Some(Instant::now()),
            ..Seen::default()
        }
    }

    pub fn since_epoch_ms(&self) -> u64 {
        self.epoch.map_or(0, |e| e.elapsed().as_millis() as u64)
    }

    /// Nodes whose last directive is of a term above `term`.
    pub fn directed_after(&self, term: u64) -> usize {
        self.term_of.iter().filter(|t| t.load(Ordering::Relaxed) > term).count()
    }

    pub fn submitted_now(&self, job: String) {
        self.lock_submitted().insert(job, Instant::now());
    }

    /// The submit-to-running times gathered so far, leaving none.
    pub fn take_to_running_ms(&self) -> Vec<f64> {
        self.take_starts().into_iter().map(|s| s.to_running_ms).collect()
    }

    /// The first starts gathered so far, leaving none.
    pub fn take_starts(&self) -> Vec<Start> {
        std::mem::take(&mut *self.to_running.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A job submitted by another process at `unix_us` (its clock and ours are the machine's).
    /// Under the submits' lock, as `first_start` looks: a start and its submit that cross
    /// are counted once, whichever comes first.
    pub fn submitted_at(&self, job: String, unix_us: u64) {
        let ago = Duration::from_micros(super::clients::unix_us().saturating_sub(unix_us));
        let sent = Instant::now().checked_sub(ago).unwrap_or_else(Instant::now);
        let mut submitted = self.lock_submitted();
        let early = self.early.lock().unwrap_or_else(PoisonError::into_inner).remove(&job);
        match early {
            Some(started) => self.count_start(sent, started.saturating_duration_since(sent)),
            None => _ = submitted.insert(job, sent),
        }
    }

    /// Forgets the jobs submitted and not started yet: their starts are no longer counted.
    pub fn forget_submitted(&self) {
        self.lock_submitted().clear();
        self.early.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    fn lock_submitted(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.submitted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn first_start(&self, job: &str) {
        let mut submitted = self.lock_submitted();
        match submitted.remove(job) {
            Some(t) => self.count_start(t, t.elapsed()),
            None if self.keep_early.load(Ordering::Relaxed) => {
                let mut early = self.early.lock().unwrap_or_else(PoisonError::into_inner);
                if early.len() < MAX_EARLY_STARTS {
                    early.insert(job.to_string(), Instant::now());
                }
            }
            None => {}
        }
    }

    fn count_start(&self, sent: Instant, to_running: Duration) {
        let sent_ms = self.epoch.map_or(0, |e| sent.saturating_duration_since(e).as_millis() as u64);
        let start = Start { sent_ms, to_running_ms: to_running.as_secs_f64() * 1000.0 };
        self.to_running.lock().unwrap_or_else(PoisonError::into_inner).push(start);
        self.started.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn node_name(i: u32) -> String {
    format!("sim-{i:05}")
}

fn node_info(f: &Fleet, i: u32) -> NodeInfo {
    let gpus = (0..f.gpus)
        .map(|g| GpuDevice {
            index: g,
            uuid: format!("GPU-sim-{i}-{g}"),
            model: "simulated".into(),
            memory_bytes: 80 << 30,
            healthy: true,
        })
        .collect();
    NodeInfo {
        name: node_name(i),
        pool: "default".into(),
        rack: format!("rack-{}", i % f.racks.max(1)),
        resources: [("gpu".to_string(), u64::from(f.gpus))].into(),
        gpus,
        ..Default::default()
    }
}

/// Lazily connected channels, `Fleet::nodes_per_connection` nodes to each, per replica
/// address.
struct Channels {
    by_addr: HashMap<String, Vec<Channel>>,
}

impl Channels {
    fn new(servers: &[String], nodes: u32, nodes_per_connection: u32) -> Result<Channels, String> {
        let per = nodes.div_ceil(nodes_per_connection.max(1)).max(1) as usize;
        let mut by_addr = HashMap::new();
        for addr in servers {
            let mut v = Vec::with_capacity(per);
            for _ in 0..per {
                let ep = Endpoint::from_shared(format!("http://{addr}")).map_err(|e| format!("{addr}: {e}"))?;
                v.push(ep.tcp_nodelay(true).connect_timeout(Duration::from_secs(2)).connect_lazy());
            }
            by_addr.insert(addr.clone(), v);
        }
        Ok(Channels { by_addr })
    }

    fn get(&self, addr: &str, node: u32) -> Option<Channel> {
        let v = self.by_addr.get(addr)?;
        Some(v[node as usize % v.len()].clone())
    }
}

/// Starts every node's task; they run until the runtime ends.
pub fn start(f: Fleet, seen: Arc<Seen>) -> Result<(), String> {
    let channels = Arc::new(Channels::new(&f.servers, f.nodes, f.nodes_per_connection)?);
    for i in 0..f.nodes {
        let node = SimNode::new(&f, i);
        tokio::spawn(node.run(f.clone(), channels.clone(), seen.clone()));
    }
    Ok(())
}

/// A replica this node "runs".
struct Replica {
    running: Running,
    ends_at: Instant,
    gpus: Vec<u32>,
    gpu_milli: u32,
}

struct SimNode {
    index: u32,
    info: NodeInfo,
    term_seen: u64,
    /// The highest term and leader whose directive it obeyed (the real agent journals it).
    fence: Fence,
    replicas: BTreeMap<ReplicaKey, Replica>,
    /// How the replicas the newest directive still names ended here (the real agent prunes
    /// the others' records too).
    finished: BTreeMap<ReplicaKey, Outcome>,
    pending: Vec<Observation>,
    run_ms: u64,
}

enum Attached {
    /// The stream ended or failed: attach again.
    Lost,
    /// A follower named the leader.
    Redirect(String),
}

impl SimNode {
    fn new(f: &Fleet, i: u32) -> SimNode {
        SimNode {
            index: i,
            info: node_info(f, i),
            term_seen: 0,
            fence: Fence::default(),
            replicas: BTreeMap::new(),
            finished: BTreeMap::new(),
            pending: Vec::new(),
            run_ms: f.run_ms,
        }
    }

    async fn run(mut self, f: Fleet, channels: Arc<Channels>, seen: Arc<Seen>) {
        let mut dialing = Dialing::new(f.servers.clone(), self.index as usize + 1, seed_for(&self.info.name));
        loop {
            let addr = dialing.next_addr();
            let Some(ch) = channels.get(&addr, self.index) else { continue };
            let tried = match self.attached(ch, &addr, &f, &seen).await {
                Ok(Attached::Redirect(leader)) => Tried::Redirect(leader),
                Ok(Attached::Lost) => Tried::Served,
                Err(()) => Tried::Failed,
            };
            if tried != Tried::Served {
                seen.attach_failures.fetch_add(1, Ordering::Relaxed);
            }
            // The same dialing and jittered backoff as `baton agent`, so the reattach
            // measured is the one real agents make.
            let wait_ms = dialing.wait_ms(tried);
            if wait_ms > 0 {
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            }
        }
    }

    /// One attachment: Err(()) when the attach itself failed.
    async fn attached(&mut self, ch: Channel, addr: &str, f: &Fleet, seen: &Seen) -> Result<Attached, ()> {
        let mut client = AgentGatewayClient::new(ch).max_decoding_message_size(baton_proto::MAX_MESSAGE_BYTES);
        let req = AttachRequest { node: Some(self.info.clone()), term_seen: self.term_seen };
        let answer = tokio::time::timeout(Duration::from_millis(ATTACH_TIMEOUT_MS), client.attach(req)).await;
        let mut stream = match answer {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition => {
                let leader = s.metadata().get(LEADER_METADATA).and_then(|v| v.to_str().ok()).map(str::trim);
                return match leader {
                    Some(l) if !l.is_empty() && l != addr => Ok(Attached::Redirect(l.to_string())),
                    _ => Err(()),
                };
            }
            _ => return Err(()),
        };
        seen.attached_at_ms[self.index as usize].store(seen.since_epoch_ms(), Ordering::Relaxed);
        let beat = Duration::from_millis(f.heartbeat_ms);
        let mut next_beat = tokio::time::Instant::now() + beat;
        let mut failed_reports = 0u32;
        loop {
            let wake = self.next_end().map_or(next_beat, |e| next_beat.min(e.into()));
            let report_now = tokio::select! {
                m = stream.message() => match m {
                    Ok(Some(d)) => self.direct(d, seen),
                    _ => return Ok(Attached::Lost),
                },
                () = tokio::time::sleep_until(wake) => {
                    let ended = self.finish_ended(seen);
                    let due = tokio::time::Instant::now() >= next_beat;
                    ended || due
                }
            };
            if report_now {
                next_beat = tokio::time::Instant::now() + beat;
                if self.report(&mut client, seen).await {
                    failed_reports = 0;
                } else {
                    failed_reports += 1;
                    if failed_reports >= baton_agent::limits::REATTACH_AFTER_FAILED_REPORTS {
                        return Ok(Attached::Lost);
                    }
                }
            }
        }
    }

    fn next_end(&self) -> Option<Instant> {
        self.replicas.values().filter(|r| r.running.phase == ReplicaPhase::Running as i32).map(|r| r.ends_at).min()
    }

    /// Replicas whose synthetic run is over exit 0; whether any did.
    fn finish_ended(&mut self, seen: &Seen) -> bool {
        let now = Instant::now();
        let ended: Vec<ReplicaKey> = self
            .replicas
            .iter()
            .filter(|(_, r)| r.running.phase == ReplicaPhase::Running as i32 && r.ends_at <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in &ended {
            if let Some(r) = self.replicas.remove(k) {
                self.finished.insert(*k, Outcome::Exited { code: 0 });
                let e = Exited {
                    job_id: r.running.job_id,
                    attempt: r.running.attempt,
                    rank: r.running.rank,
                    exit_code: 0,
                    reason: String::new(),
                };
                self.observe(What::Exited(e));
                seen.exited.fetch_add(1, Ordering::Relaxed);
            }
        }
        !ended.is_empty()
    }

    fn observe(&mut self, what: What) {
        if self.pending.len() < MAX_PENDING_OBSERVATIONS {
            self.pending.push(Observation { what: Some(what) });
        }
    }

    /// Acts on a directive, by the real agent's plan; whether something new must be reported
    /// now.
    fn direct(&mut self, d: Directive, seen: &Seen) -> bool {
        // Refused: a deposed leader's, or too many assignments.
        let Ok(plan) = reconcile::plan(&d, &self.inputs(&d)) else { return false };
        if let Some(fence) = plan.remember {
            self.fence = fence;
        }
        self.term_seen = self.term_seen.max(d.term);
        seen.directives.fetch_add(1, Ordering::Relaxed);
        seen.directive_bytes.fetch_add(d.encoded_len() as u64, Ordering::Relaxed);
        let i = self.index as usize;
        let now_ms = seen.since_epoch_ms();
        seen.directed_at_ms[i].store(now_ms, Ordering::Relaxed);
        if seen.term_of[i].swap(d.term, Ordering::Relaxed) != d.term {
            seen.term_began_ms[i].store(now_ms, Ordering::Relaxed);
        }
        let before = self.pending.len();
        self.finished.retain(|k, _| plan.wanted.contains(k));
        let named: HashMap<ReplicaKey, &Assignment> = d.assignments.iter().map(|a| (reconcile::key_of(a), a)).collect();
        for act in plan.acts {
            self.carry_out(act, &named, seen);
        }
        if !plan.deferred.is_empty() {
            self.start_deferred(&d, &plan.deferred, &named, seen);
        }
        self.pending.len() > before
    }

    /// Starts what waited for GPUs that this directive's own stops freed (a simulated stop
    /// ends at once), as the agent starts its deferred replicas once their GPUs are free.
    fn start_deferred(
        &mut self,
        d: &Directive,
        deferred: &std::collections::BTreeSet<ReplicaKey>,
        named: &HashMap<ReplicaKey, &Assignment>,
        seen: &Seen,
    ) {
        let Ok(again) = reconcile::plan(d, &self.inputs(d)) else { return };
        for act in again.acts {
            if let Act::Start(k) = act
                && deferred.contains(&k)
                && let Some(a) = named.get(&k)
            {
                self.start(k, a, seen);
            }
        }
    }

    /// What `reconcile::plan` reads: the replicas here, how the named ones that ended did.
    /// A simulated node keeps no lease and no journal, so neither stops it.
    fn inputs(&self, d: &Directive) -> Inputs {
        let mut replicas: BTreeMap<ReplicaKey, Known> = self
            .finished
            .iter()
            .map(|(k, o)| (*k, Known { phase: Phase::Finished, outcome: Some(*o), gpus: Vec::new(), gpu_milli: 0 }))
            .collect();
        for (k, r) in &self.replicas {
            let phase =
                if r.running.phase == ReplicaPhase::Suspended as i32 { Phase::Suspended } else { Phase::Running };
            replicas.insert(*k, Known { phase, outcome: None, gpus: r.gpus.clone(), gpu_milli: r.gpu_milli });
        }
        let mut max_attempts: BTreeMap<u64, u32> = BTreeMap::new();
        let named: std::collections::BTreeSet<u64> = d.assignments.iter().map(|a| a.job_id).collect();
        for k in replicas.keys().filter(|k| named.contains(&k.job_id)) {
            let newest = max_attempts.entry(k.job_id).or_insert(k.attempt);
            *newest = (*newest).max(k.attempt);
        }
        Inputs { fence: self.fence, replicas, max_attempts, ..Inputs::default() }
    }

    /// Carries out one act of a plan, as `baton agent`'s supervisor does with processes.
    fn carry_out(&mut self, act: Act, named: &HashMap<ReplicaKey, &Assignment>, seen: &Seen) {
        let assignment = |k: &ReplicaKey| named.get(k).copied();
        match act {
            // Not wanted any more: gone, and nothing is reported (as the agent's kill).
            Act::Kill(k) => {
                self.replicas.remove(&k);
                self.finished.insert(k, Outcome::Killed);
            }
            Act::Start(k) => {
                if let Some(a) = assignment(&k) {
                    self.start(k, a, seen);
                }
            }
            Act::Resume(k) => {
                if let Some(r) = self.replicas.get_mut(&k) {
                    r.running.phase = ReplicaPhase::Running as i32;
                }
            }
            Act::Stop(k) => {
                self.replicas.remove(&k);
                self.finished.insert(k, Outcome::Stopped { checkpointed: true });
                self.stopped(k, assignment(&k), true, StopCause::Directed, seen);
            }
            Act::StopNeverRan(k) | Act::KilledCountsAsStopped(k) => {
                self.finished.insert(k, Outcome::Stopped { checkpointed: false });
                self.stopped(k, assignment(&k), false, StopCause::Directed, seen);
            }
            Act::ReportStopped { key, checkpointed } => {
                self.stopped(key, assignment(&key), checkpointed, StopCause::Directed, seen);
            }
            Act::ReportKilledHere { key, checkpointed } => {
                self.stopped(key, assignment(&key), checkpointed, StopCause::KilledHere, seen);
            }
            Act::ReportExited { key, code } => {
                let e = Exited {
                    job_id: key.job_id,
                    attempt: key.attempt,
                    rank: key.rank,
                    exit_code: code,
                    reason: String::new(),
                };
                self.observe(What::Exited(e));
            }
            Act::Suspend(k) => {
                if let Some(r) = self.replicas.get_mut(&k) {
                    r.running.phase = ReplicaPhase::Suspended as i32;
                }
                self.stopped(k, assignment(&k), false, StopCause::Directed, seen);
            }
            Act::ReportSuspended(k) => self.stopped(k, assignment(&k), false, StopCause::Directed, seen),
            Act::SuspendNeverRan(k) => {
                self.finished.insert(k, Outcome::Stopped { checkpointed: false });
                self.stopped(k, assignment(&k), false, StopCause::KilledHere, seen);
            }
            // A simulated node keeps no journal, so none fails.
            Act::Ignore { .. } | Act::Unrecorded { .. } => {}
        }
    }

    fn start(&mut self, k: ReplicaKey, a: &Assignment, seen: &Seen) {
        if a.rank == 0 {
            seen.first_start(&a.job);
        }
        let running = Running {
            job_id: a.job_id,
            attempt: a.attempt,
            task: a.task,
            replica: a.replica,
            rank: a.rank,
            phase: ReplicaPhase::Running as i32,
        };
        let ends_at = Instant::now() + Duration::from_millis(self.run_ms);
        self.replicas.insert(k, Replica { running, ends_at, gpus: a.gpus.clone(), gpu_milli: a.gpu_milli });
    }

    fn stopped(&mut self, k: ReplicaKey, a: Option<&Assignment>, checkpointed: bool, cause: StopCause, seen: &Seen) {
        let s = Stopped {
            job_id: k.job_id,
            attempt: k.attempt,
            checkpointed,
            rank: k.rank,
            cause: cause as i32,
            // A suspension names its preemption, as the agent's does (0 for a stop).
            suspension_by: a.map_or(0, |a| a.suspension_by),
            suspension_ms: a.map_or(0, |a| a.suspension_ms),
        };
        self.observe(What::Stopped(s));
        seen.stopped.fetch_add(1, Ordering::Relaxed);
    }

    /// Heartbeat and pending observations; whether the leader took it.
    async fn report(&mut self, client: &mut AgentGatewayClient<Channel>, seen: &Seen) -> bool {
        let n = self.pending.len().min(baton_agent::limits::MAX_OBSERVATIONS_PER_REPORT);
        let req = ReportRequest {
            node: self.info.name.clone(),
            term_seen: self.term_seen,
            running: self.replicas.values().map(|r| r.running).collect(),
            observations: self.pending[..n].to_vec(),
            // A simulated node keeps no lease, so it never waits for a newer state.
            awaiting_state_index: 0,
        };
        seen.reports.fetch_add(1, Ordering::Relaxed);
        seen.report_bytes.fetch_add(req.encoded_len() as u64, Ordering::Relaxed);
        let answer = tokio::time::timeout(Duration::from_millis(REPORT_TIMEOUT_MS), client.report(req)).await;
        match answer {
            Ok(Ok(reply)) => {
                self.term_seen = self.term_seen.max(reply.get_ref().term);
                self.pending.drain(..n);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::v1::Action;

    use super::*;

    #[tokio::test]
    async fn nodes_share_a_connection_per_so_many_nodes_at_each_replica() {
        let servers = vec!["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        let c = Channels::new(&servers, 250, 10).expect("valid addresses");
        assert!(c.by_addr.values().all(|v| v.len() == 25), "250 nodes, 10 to a connection");
        let one = Channels::new(&servers, 250, 1_000).expect("valid addresses");
        assert!(one.by_addr.values().all(|v| v.len() == 1), "fewer nodes than one connection takes");
        assert!(c.get("127.0.0.1:3", 0).is_none(), "no channel to an address not given");
    }

    fn fleet() -> Fleet {
        Fleet {
            nodes: 1,
            gpus: 8,
            racks: 1,
            run_ms: 60_000,
            heartbeat_ms: 500,
            servers: vec![],
            nodes_per_connection: NODES_PER_CONNECTION,
        }
    }

    fn assign(job_id: u64, action: Action) -> Assignment {
        Assignment { job_id, job: format!("j{job_id}"), attempt: 1, action: action as i32, ..Default::default() }
    }

    fn directive(term: u64, assignments: Vec<Assignment>) -> Directive {
        Directive { term, assignments, ..Default::default() }
    }

    /// A client process's `sent` line may be read after its job started: the start waits for
    /// it and is timed from the submit, once; without client processes it is not kept.
    #[test]
    fn a_start_before_its_submit_is_known_is_timed_from_the_submit() {
        let seen = Seen::new(1);
        seen.first_start("j1");
        assert!(seen.early.lock().unwrap().is_empty(), "kept only with client processes");
        seen.keep_early.store(true, Ordering::Relaxed);
        seen.first_start("j2");
        let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
        seen.submitted_at("j2".into(), now_us - 300_000);
        seen.submitted_at("j3".into(), now_us);
        assert_eq!(seen.started.load(Ordering::Relaxed), 1);
        let ms = seen.take_to_running_ms();
        assert!(ms.len() == 1 && (290.0..1_000.0).contains(&ms[0]), "{ms:?}");
        seen.first_start("j3");
        assert_eq!(seen.started.load(Ordering::Relaxed), 2, "j3 was known before it started");
        assert!(seen.early.lock().unwrap().is_empty());
    }

    #[test]
    fn a_run_starts_once_a_stop_reports_a_checkpoint_and_an_absent_job_is_dropped() {
        let seen = Seen::new(1);
        seen.submitted_now("j1".into());
        let mut n = SimNode::new(&fleet(), 0);
        assert!(!n.direct(directive(1, vec![assign(1, Action::Run), assign(2, Action::Run)]), &seen));
        assert_eq!(seen.started.load(Ordering::Relaxed), 1, "only j1 was submitted by the bench");
        assert_eq!(n.replicas.len(), 2);
        // Sent again (keep-alive): nothing new starts.
        n.direct(directive(1, vec![assign(1, Action::Run), assign(2, Action::Run)]), &seen);
        assert_eq!((seen.started.load(Ordering::Relaxed), n.replicas.len()), (1, 2));
        // j1 stops with a checkpoint; j2 is gone from the directive.
        assert!(n.direct(directive(1, vec![assign(1, Action::Stop)]), &seen));
        assert!(n.replicas.is_empty());
        assert!(matches!(
            n.pending[..],
            [Observation { what: Some(What::Stopped(Stopped { job_id: 1, checkpointed: true, .. })) }]
        ));
    }

    fn on_gpu(mut a: Assignment, gpu: u32) -> Assignment {
        a.gpus = vec![gpu];
        a
    }

    /// The agent's rules (`reconcile::plan`): a RUN of a replica stopped here does not start
    /// it again, its end is told instead; a RUN on a GPU that a STOP of the same directive
    /// frees starts once that stop is done.
    #[test]
    fn a_run_of_a_stopped_replica_is_told_its_end_and_a_freed_gpu_is_reused() {
        let seen = Seen::new(1);
        let mut n = SimNode::new(&fleet(), 0);
        n.direct(directive(1, vec![on_gpu(assign(1, Action::Run), 0)]), &seen);
        n.direct(directive(1, vec![on_gpu(assign(1, Action::Stop), 0), on_gpu(assign(2, Action::Run), 0)]), &seen);
        let running: Vec<u64> = n.replicas.keys().map(|k| k.job_id).collect();
        assert_eq!(running, vec![2], "job 2 runs on the GPU job 1's stop freed");
        n.pending.clear();
        n.direct(directive(1, vec![on_gpu(assign(1, Action::Run), 0)]), &seen);
        assert!(!n.replicas.keys().any(|k| k.job_id == 1), "a stopped replica never starts again");
        assert!(matches!(
            n.pending[..],
            [Observation { what: Some(What::Stopped(Stopped { job_id: 1, checkpointed: true, cause, .. })) }]
                if cause == StopCause::KilledHere as i32
        ));
    }

    #[test]
    fn a_directive_of_an_older_term_is_ignored() {
        let seen = Seen::new(1);
        let mut n = SimNode::new(&fleet(), 0);
        n.direct(directive(3, vec![]), &seen);
        n.direct(directive(2, vec![assign(1, Action::Run)]), &seen);
        assert!(n.replicas.is_empty());
        assert_eq!(seen.term_of[0].load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_replica_exits_once_its_synthetic_run_is_over() {
        let seen = Seen::new(1);
        let mut n = SimNode::new(&Fleet { run_ms: 0, ..fleet() }, 0);
        n.direct(directive(1, vec![assign(4, Action::Run)]), &seen);
        assert!(n.finish_ended(&seen));
        assert!(matches!(
            n.pending[..],
            [Observation { what: Some(What::Exited(Exited { job_id: 4, exit_code: 0, .. })) }]
        ));
    }
}
