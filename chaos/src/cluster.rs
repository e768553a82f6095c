//! A real cluster on this machine: `baton server` x3 and one `baton agent` per node, as child
//! processes, on loopback ports, with data in a temporary directory. Replicas and agents can
//! be killed (SIGKILL), restarted, paused (SIGSTOP, then SIGCONT) and sent other signals
//! (SIGHUP: reload certificates); their logs are files in that directory, and an agent's
//! metrics are read at the address it prints (loopback clusters).
//!
//! With [`Cluster::start_partitionable`] every process runs in a network namespace of its own
//! (`net`), so that the links between them can be cut ([`Cluster::set_network`]); replica `i`
//! is then in rack `rack-i`, with the agents of that rack.
//!
//! It panics, naming the logs' directory, when the cluster does not come up or answer in
//! time: it serves tests and the chaos harness, where that is a failed run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_proto::tls::{REPLICA_HOST, Transport};

use crate::net::{self, Net, Rule};
use crate::slot::Slot;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::{ClusterInfoReply, Empty, Job, JobRef, NodeStatus};
use baton_proto::words::Word;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A client of the cluster's API, calling with the admin token.
pub type Client = BatonClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer TOKEN` to every call: the cluster runs with tokens, as a
/// real one does.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Bearer {
    fn new(token: &str) -> Bearer {
        Bearer(format!("Bearer {token}").parse().expect("a token is ASCII"))
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

// Never the token itself in a log or a panic message.
impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(..)")
    }
}

/// Replicas in the cluster: the smallest that survives losing one.
pub const REPLICAS: usize = 3;
/// Bound on one call to a replica while looking for one that answers: a paused replica
/// accepts connections and never answers.
const PROBE_MS: u64 = 500;
/// How long the cluster may take to elect a leader, register agents, or reach a job state:
/// generous, for a loaded machine (several chaos runs at once); only a failure waits it out.
const WAIT_S: u64 = 60;

/// A node as the agent offers it.
#[derive(Clone, Debug)]
pub struct NodeArgs {
    pub name: String,
    pub pool: String,
    pub rack: String,
    pub gpus: u64,
    pub cpu: u64,
    pub memory: u64,
}

impl NodeArgs {
    /// A node of the default pool with `gpus` development GPUs.
    pub fn gpus(name: &str, rack: &str, gpus: u64) -> NodeArgs {
        NodeArgs { name: name.into(), pool: "default".into(), rack: rack.into(), gpus, cpu: 0, memory: 0 }
    }
}

/// Timing settings of the replicas.
#[derive(Clone, Debug)]
pub struct Timing {
    pub cycle_interval_ms: u64,
    pub heartbeat_timeout_ms: u64,
    pub resend_ms: u64,
    pub lease_ms: u64,
    /// Replica `i`'s wall clock runs this many seconds ahead (negative: behind) of the
    /// machine's, by libfaketime ([`libfaketime`]); none past the end, or 0, runs true.
    pub clock_offsets_s: Vec<i64>,
    /// The same for the agent of the `i`-th node given to the cluster.
    pub agent_clock_offsets_s: Vec<i64>,
    /// Replica `i`'s clocks, wall and monotonic alike, run this many thousandths fast
    /// (negative: slow), by libfaketime's rate; none past the end, or 0, run true. A rate
    /// moves the monotonic clocks too, so it is never combined with an offset (which would
    /// move them as well, and step them backwards).
    pub clock_rates_permille: Vec<i64>,
    /// The same for the agent of the `i`-th node.
    pub agent_clock_rates_permille: Vec<i64>,
    /// Every replica runs under libfaketime, on the machine's clock unless an offset or a
    /// rate says otherwise, so that [`Cluster::step_clock`] can step any replica's clock
    /// (`faults::Fault::LeaderClockAhead`).
    pub steppable_replica_clocks: bool,
    /// The Unix user jobs run as (`SubmitRequest::run_as`): agents allow it and root
    /// (`--run-as-allow USER,root --allow-root`), and the cluster's directory is one every
    /// user may pass through. `None`: jobs run as the agents' own user (`--run-as-self`).
    pub job_user: Option<String>,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            cycle_interval_ms: 50,
            heartbeat_timeout_ms: 3000,
            resend_ms: 500,
            lease_ms: 1_200,
            clock_offsets_s: Vec::new(),
            agent_clock_offsets_s: Vec::new(),
            clock_rates_permille: Vec::new(),
            agent_clock_rates_permille: Vec::new(),
            steppable_replica_clocks: false,
            job_user: None,
        }
    }
}

/// Where libfaketime's library for threaded programs is, or an error naming the package.
pub fn libfaketime() -> Result<PathBuf, String> {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ];
    candidates.iter().map(PathBuf::from).find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "clock offsets need libfaketime (Debian package libfaketime), found at none of {}",
            candidates.join(", ")
        )
    })
}

struct Proc {
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// The network namespace it runs in, when the cluster is partitionable.
    netns: Option<String>,
    /// Environment it runs with besides the harness's (libfaketime's, for a clock offset).
    env: Vec<(String, String)>,
}

/// The replicas' addresses and how to reach them (mutual TLS, as the `chaos` client, with the
/// admin token).
#[derive(Clone, Debug)]
pub struct Servers {
    pub addrs: Vec<String>,
    pub transport: Transport,
    pub bearer: Bearer,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub servers: Servers,
    baton: PathBuf,
    timing: Timing,
    replicas: Vec<Proc>,
    replica_racks: Vec<Option<String>>,
    agents: BTreeMap<String, (NodeArgs, Proc)>,
    /// The processes' private network, when partitionable; dropped (removed) after the
    /// processes are killed. It holds the cluster's slot.
    net: Option<Net>,
    /// The slot of a loopback cluster (its ports), held until the processes are killed.
    slot: Option<Slot>,
}

/// How long [`Cluster::agent_metrics`] waits for an agent's answer.
const SCRAPE_TIMEOUT_MS: u64 = 2_000;

/// Port every replica listens on in a partitionable cluster (each has an address of its own).
const NET_REPLICA_PORT: u16 = 7100;
/// Port every agent serves its jobs' logs on there.
const NET_AGENT_PORT: u16 = 7200;

/// The network label of replica `i` (0-based).
pub fn replica_label(i: usize) -> String {
    format!("replica-{}", i + 1)
}

/// The network label of the agent of node `name`.
pub fn agent_label(name: &str) -> String {
    format!("agent-{name}")
}

/// Who is where, by network label, for building network faults.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    /// Replica `i`'s label, by index.
    pub replicas: Vec<String>,
    /// Agents' labels, with their node's name and rack.
    pub agents: Vec<(String, String)>,
    /// Replica `i`'s rack, by index (`None`: no rack).
    pub replica_racks: Vec<Option<String>>,
}

impl Topology {
    /// Every label, the harness's ([`net::HOST`]) too.
    pub fn everyone(&self) -> Vec<String> {
        let mut all = self.replicas.clone();
        all.extend(self.agents.iter().map(|(l, _)| l.clone()));
        all.push(net::HOST.into());
        all
    }

    /// Replica `i` and the agents of its rack.
    pub fn rack_of(&self, i: usize) -> Vec<String> {
        let mut members = vec![self.replicas[i].clone()];
        if let Some(rack) = &self.replica_racks[i] {
            members.extend(self.agents.iter().filter(|(_, r)| r == rack).map(|(l, _)| l.clone()));
        }
        members
    }
}

/// Loopback address `i` of the cluster's slot (see `slot`: ports no other cluster and no
/// outgoing connection takes, also while the replica that listens there is down).
fn slot_addr(slot: &Slot, i: usize) -> String {
    let port = slot.port(i).unwrap_or_else(|| {
        panic!("a loopback cluster has {} replica ports, not {}", crate::slot::PORTS_PER_SLOT, i + 1)
    });
    format!("127.0.0.1:{port}")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

impl Proc {
    fn new(args: Vec<String>, log: PathBuf) -> Proc {
        Proc { args, log, child: None, paused: false, netns: None, env: Vec::new() }
    }

    fn spawn(&mut self, baton: &Path) {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("a log file");
        // `nsenter` execs the program in place: the child's pid is baton's, so signals
        // reach it. It enters the network namespace alone: `ip netns exec` also gives the
        // program a mount namespace with /sys mounted afresh, without the cgroup
        // hierarchies, and the agents fell back to holding replicas by process groups.
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg("--").arg(baton);
                c
            }
            None => Command::new(baton),
        };
        // A session (and process group) of its own: a process SIGSTOPped by a fault must stay
        // stopped. In the harness's own group, the kernel sent it SIGHUP and SIGCONT whenever
        // that group became orphaned with a stopped member (POSIX's rule for orphaned
        // process groups): a batch run under `nohup` found a frozen node's agent running
        // again at once (stop 66, seed 18000), its lease renewed under its frozen replicas.
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| if libc::setsid() < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
        }
        let child = cmd
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // The agents also log each directive they obey (its term and leader).
            .env("RUST_LOG", "info,openraft=warn,baton_agent::directives=debug")
            .env_remove("BATON_INSECURE")
            .env_remove("BATON_TLS_DIR")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("a log file"))
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", baton.display()));
        self.child = Some(child);
        self.paused = false;
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    fn pause(&mut self, paused: bool) {
        if let Some(c) = &self.child {
            signal(c, if paused { libc::SIGSTOP } else { libc::SIGCONT });
            self.paused = paused;
        }
    }

    /// Running and not paused.
    fn answers(&self) -> bool {
        self.child.is_some() && !self.paused
    }
}

impl Cluster {
    pub async fn start(baton: &Path, nodes: &[NodeArgs]) -> Cluster {
        Cluster::start_with(baton, nodes, &Timing::default()).await
    }

    pub async fn start_with(baton: &Path, nodes: &[NodeArgs], t: &Timing) -> Cluster {
        Cluster::start_racked(baton, nodes, t, &[]).await
    }

    /// Like [`Cluster::start_with`], replica `i` started with `--rack racks[i]` (none past
    /// the end of `racks`).
    pub async fn start_racked(baton: &Path, nodes: &[NodeArgs], t: &Timing, racks: &[&str]) -> Cluster {
        Cluster::start_on(baton, nodes, t, racks, None).await
    }

    /// Like [`Cluster::start_with`], every process in a network namespace of its own, so
    /// that links can be cut; replica `i` in rack `rack-i`. An error names what is missing
    /// when partitions cannot be made here (not root, no `ip netns`, no `nft`).
    pub async fn start_partitionable(baton: &Path, nodes: &[NodeArgs], t: &Timing) -> Result<Cluster, String> {
        let mut labels: Vec<String> = (0..REPLICAS).map(replica_label).collect();
        labels.extend(nodes.iter().map(|n| agent_label(&n.name)));
        let net = Net::create(&labels.iter().map(String::as_str).collect::<Vec<_>>())?;
        let racks: Vec<String> = (1..=REPLICAS).map(|i| format!("rack-{i}")).collect();
        let racks: Vec<&str> = racks.iter().map(String::as_str).collect();
        Ok(Cluster::start_on(baton, nodes, t, &racks, Some(net)).await)
    }

    async fn start_on(baton: &Path, nodes: &[NodeArgs], t: &Timing, racks: &[&str], net: Option<Net>) -> Cluster {
        let dir = tempfile::Builder::new().prefix("baton-e2e-").tempdir().expect("a temporary directory");
        if t.job_user.is_some() {
            // Jobs of another user reach their exit files and checkpoints below it (each
            // agent checks, and refuses to start otherwise); nothing here is listed to them.
            std::fs::set_permissions(
                dir.path(),
                <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o711),
            )
            .expect("the cluster's directory passable");
        }
        let slot = match net {
            Some(_) => None,
            None => Some(Slot::take(crate::slot::ports_free).unwrap_or_else(|e| panic!("{e}"))),
        };
        let servers: Vec<String> = match (&net, &slot) {
            (Some(net), _) => {
                (0..REPLICAS).map(|i| format!("{}:{NET_REPLICA_PORT}", net.addr(&replica_label(i)))).collect()
            }
            (None, Some(slot)) => (0..REPLICAS).map(|i| slot_addr(slot, i)).collect(),
            (None, None) => unreachable!("a loopback cluster takes a slot"),
        };
        let members: Vec<String> = servers.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        let tls = make_certificates(baton, &dir.path().join("tls"), nodes);
        let transport = Transport::load(&tls.join("client-chaos")).expect("the chaos client's certificate");
        let token = write_admin_token(&dir.path().join(ADMIN_TOKEN_FILE));
        let mut c = Cluster {
            dir,
            servers: Servers { addrs: servers.clone(), transport, bearer: Bearer::new(&token) },
            baton: baton.to_path_buf(),
            timing: t.clone(),
            replicas: Vec::new(),
            replica_racks: Vec::new(),
            agents: BTreeMap::new(),
            net,
            slot,
        };
        for (i, addr) in servers.iter().enumerate() {
            let rack = racks.get(i).copied();
            c.spawn_replica_process((i + 1) as u64, addr, Some(&members.join(",")), rack);
        }
        c.leader().await;
        c.wait_admin_token().await;
        for (i, n) in nodes.iter().enumerate() {
            let args = c.agent_args(n);
            let mut p = Proc::new(args, c.path(&format!("agent-{}.log", n.name)));
            p.netns = c.net.as_ref().map(|net| net.namespace(&agent_label(&n.name)).to_string());
            let offset_s = c.timing.agent_clock_offsets_s.get(i).copied().unwrap_or(0);
            let rate = c.timing.agent_clock_rates_permille.get(i).copied().unwrap_or(0);
            p.env = c.clock_env(&agent_label(&n.name), offset_s, rate, false);
            c.agents.insert(n.name.clone(), (n.clone(), p));
            c.start_agent(&n.name);
        }
        c.wait_nodes(nodes.len()).await;
        c
    }

    /// Starts replica `id` at `addr` on its own data directory; with `bootstrap` it proposes
    /// that first membership, without it waits to be added (`baton cluster add-replica`).
    fn spawn_replica_process(&mut self, id: u64, addr: &str, bootstrap: Option<&str>, rack: Option<&str>) {
        let t = &self.timing;
        let data = self.path(&format!("replica-{id}")).display().to_string();
        let tls = self.path(&format!("tls/replica-{id}")).display().to_string();
        let mut args = strings(&[
            "server",
            "--id",
            &id.to_string(),
            "--listen",
            addr,
            "--data-dir",
            &data,
            "--cycle-interval-ms",
            &t.cycle_interval_ms.to_string(),
            "--heartbeat-timeout-ms",
            &t.heartbeat_timeout_ms.to_string(),
            "--resend-ms",
            &t.resend_ms.to_string(),
            "--lease-ms",
            &t.lease_ms.to_string(),
            "--tls-dir",
            &tls,
            // Tokens on, as in production: every replica makes the harness's token the
            // first admin of a cluster that has none (the first to commit it wins; the
            // others find the cluster has a token and leave it).
            "--bootstrap-admin-token-file",
            &self.path(ADMIN_TOKEN_FILE).display().to_string(),
        ]);
        if let Some(members) = bootstrap {
            args.extend(strings(&["--bootstrap", members]));
        }
        if let Some(rack) = rack {
            args.extend(strings(&["--rack", rack]));
        }
        let mut p = Proc::new(args, self.path(&format!("replica-{id}.log")));
        p.netns = self.net.as_ref().map(|net| net.namespace(&replica_label(id as usize - 1)).to_string());
        let offset_s = self.timing.clock_offsets_s.get(id as usize - 1).copied().unwrap_or(0);
        let rate = self.timing.clock_rates_permille.get(id as usize - 1).copied().unwrap_or(0);
        let steppable = self.timing.steppable_replica_clocks;
        p.env = self.clock_env(&replica_label(id as usize - 1), offset_s, rate, steppable);
        p.spawn(&self.baton);
        self.replicas.push(p);
        self.replica_racks.push(rack.map(str::to_string));
    }

    /// Starts a new replica `id` (with its own certificate and an empty data directory) that
    /// belongs to no membership yet: `baton cluster add-replica` adds it. Returns its index
    /// and its address, which clients of this `Cluster` use from now on too, once it listens.
    pub fn spawn_new_replica(&mut self, id: u64, rack: Option<&str>) -> (usize, String) {
        assert!(self.net.is_none(), "a partitionable cluster has a namespace for its first replicas only");
        let ca = self.path("tls/ca").display().to_string();
        let out = self.path(&format!("tls/replica-{id}")).display().to_string();
        let args = strings(&["tls", "cert", "create", "--server", &id.to_string(), "--ca-dir", &ca, "--out-dir", &out]);
        let made = Command::new(&self.baton).args(&args).output().expect("baton tls runs");
        assert!(made.status.success(), "baton {args:?}: {}", String::from_utf8_lossy(&made.stderr));
        let slot = self.slot.as_ref().expect("a loopback cluster holds a slot");
        let addr = slot_addr(slot, self.replicas.len());
        self.spawn_replica_process(id, &addr, None, rack);
        self.servers.addrs.push(addr.clone());
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "replica {id} does not listen; logs in {}", self.dir.path().display());
            std::thread::sleep(Duration::from_millis(20));
        }
        (self.replicas.len() - 1, addr)
    }

    /// libfaketime's environment for the process labelled `label` whose wall clock runs
    /// `offset_s` off, or whose clocks run `rate_permille` fast or slow, if either or if
    /// `steppable` (then on the machine's clock until [`Cluster::step_clock`]). An offset
    /// moves only the wall clock: a host's monotonic and boot clocks are its own, and nothing
    /// compares them across hosts. A rate moves the monotonic clocks too: the leases, grace
    /// periods and timeouts are counted on them, and their rate is the drift `D` of the
    /// timing argument. The spec is read from a file (again at most a second after it
    /// changes), so [`Cluster::step_clock`] can step an offset.
    fn clock_env(&self, label: &str, offset_s: i64, rate_permille: i64, steppable: bool) -> Vec<(String, String)> {
        if offset_s == 0 && rate_permille == 0 && !steppable {
            return Vec::new();
        }
        assert!(offset_s == 0 || rate_permille == 0, "{label}: a clock rate is never combined with an offset");
        let lib = libfaketime().unwrap_or_else(|e| panic!("{e}"));
        let file = self.clock_file(label);
        if !file.exists() {
            write_spec(&file, &faketime_spec(offset_s, rate_permille));
        }
        let fake_monotonic = if rate_permille == 0 { "1" } else { "0" };
        vec![
            ("LD_PRELOAD".into(), lib.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
            ("FAKETIME_CACHE_DURATION".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), fake_monotonic.into()),
        ]
    }

    fn clock_file(&self, label: &str) -> PathBuf {
        self.path(&format!("clock-{label}"))
    }

    /// Steps the wall clock of the process labelled `label` to `offset_s` off the machine's
    /// (within a second): an NTP step. Panics unless it was started with a clock offset.
    pub fn step_clock(&self, label: &str, offset_s: i64) {
        let file = self.clock_file(label);
        assert!(file.exists(), "{label} runs on the machine's clock; only a process started with an offset steps");
        write_spec(&file, &faketime_spec(offset_s, 0));
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Injects a fault into development GPU `gpu` of node `name` (its agent reads it within
    /// a poll and reports it to the leader): written aside, then renamed in whole.
    pub fn inject_gpu_fault(&self, name: &str, gpu: u32, error: &str) {
        let dir = self.path(&format!("agent-{name}"));
        let faults = dir.join("gpu-faults");
        std::fs::create_dir_all(&faults).expect("the fault directory");
        let tmp = dir.join(format!("gpu-fault-{gpu}.tmp"));
        std::fs::write(&tmp, error).expect("a fault written");
        std::fs::rename(&tmp, faults.join(gpu.to_string())).expect("a fault injected");
    }

    fn agent_args(&self, n: &NodeArgs) -> Vec<String> {
        let listen = match &self.net {
            Some(net) => format!("{}:{NET_AGENT_PORT}", net.addr(&agent_label(&n.name))),
            None => "127.0.0.1:0".into(),
        };
        let mut args = strings(&[
            "agent",
            "--listen",
            &listen,
            // A cgroup each where the host allows it (as root here), else process groups.
            "--containment",
            "auto",
            "--server",
            &self.servers.addrs.join(","),
            "--name",
            &n.name,
            "--pool",
            &n.pool,
            "--rack",
            &n.rack,
            "--gpus",
            &n.gpus.to_string(),
            "--cpu",
            &n.cpu.to_string(),
            "--memory",
            &n.memory.to_string(),
            "--data-dir",
            &self.path(&format!("agent-{}", n.name)).display().to_string(),
            "--checkpoint-root",
            &self.path("checkpoints").display().to_string(),
            "--heartbeat-ms",
            "100",
            // A process that survives SIGKILL (`Misbehave::Unkillable`) is reported within
            // seconds, not the default minute, so that the operator fixes its node in time.
            "--unkillable-after-ms",
            "3000",
            "--tls-dir",
            &self.path(&format!("tls/agent-{}", n.name)).display().to_string(),
        ]);
        match &self.timing.job_user {
            // Root too: `unkillable` jobs (`Misbehave::Unkillable`) make cgroups of the freezer.
            Some(user) => args.extend(strings(&["--run-as-allow", &format!("{user},root"), "--allow-root"])),
            // Jobs name the admin token's user, `admin`; they run as the agent's own user.
            None => args.push("--run-as-self".into()),
        }
        // Metrics on a port of the kernel's choosing, which the agent prints in its log
        // (`Cluster::agent_metrics` reads it there). Loopback clusters only: in a namespace of
        // its own, the agent's loopback is out of the test's reach.
        if self.net.is_none() {
            args.extend(strings(&["--metrics-plain-listen", "127.0.0.1:0"]));
        }
        args
    }

    pub fn start_agent(&mut self, name: &str) {
        let baton = self.baton.clone();
        self.agents.get_mut(name).expect("a known agent").1.spawn(&baton);
    }

    /// The process id of node `name`'s agent while it runs (`None` once it has exited).
    pub fn agent_pid(&mut self, name: &str) -> Option<u32> {
        let child = self.agents.get_mut(name).expect("a known agent").1.child.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Sends `sig` to node `name`'s agent (SIGHUP: reload its certificates).
    pub fn signal_agent(&self, name: &str, sig: libc::c_int) {
        if let Some(c) = &self.agents.get(name).expect("a known agent").1.child {
            signal(c, sig);
        }
    }

    /// What node `name`'s agent has logged so far (every start of it, appended).
    pub fn agent_log(&self, name: &str) -> String {
        std::fs::read_to_string(&self.agents.get(name).expect("a known agent").1.log).unwrap_or_default()
    }

    /// `GET /metrics` of node `name`'s agent: the body, or why there is none (no metrics URL
    /// in its log yet, the agent does not answer, not a 200). It is served at the address
    /// its latest start printed (`metrics_url=`); loopback clusters only.
    pub async fn agent_metrics(&self, name: &str) -> Result<String, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let log = self.agent_log(name);
        let addr = log
            .lines()
            .filter_map(|l| l.split_once("metrics_url=http://"))
            .filter_map(|(_, rest)| rest.split_once("/metrics"))
            .map(|(addr, _)| addr.to_string())
            .next_back()
            .ok_or_else(|| format!("agent {name} printed no metrics_url= (yet)"))?;
        let ask = async {
            let mut s = tokio::net::TcpStream::connect(&addr).await?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n").await?;
            let mut reply = String::new();
            s.read_to_string(&mut reply).await?;
            Ok::<String, std::io::Error>(reply)
        };
        let reply = tokio::time::timeout(Duration::from_millis(SCRAPE_TIMEOUT_MS), ask)
            .await
            .map_err(|_| format!("agent {name}'s metrics at {addr}: no answer within {SCRAPE_TIMEOUT_MS} ms"))?
            .map_err(|e| format!("agent {name}'s metrics at {addr}: {e}"))?;
        let (head, body) = reply
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("agent {name}'s metrics at {addr}: no end of the head"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("agent {name}'s metrics at {addr}: {head}"));
        }
        Ok(body.to_string())
    }

    /// SIGKILL, as a crash.
    pub fn kill_agent(&mut self, name: &str) {
        self.agents.get_mut(name).expect("a known agent").1.kill();
    }

    /// Kills every process of node `name`'s replicas at once, as a reboot does: `cgroup.kill`
    /// of the cgroup tree its agent's latest start logged (`root=`). Nothing when it logged
    /// none (it holds replicas by process groups).
    pub fn kill_agent_replicas(&self, name: &str) {
        let Some(root) = self.replica_root(name) else { return };
        let kill = root.join("cgroup.kill");
        if let Err(e) = std::fs::write(&kill, "1")
            && e.kind() != std::io::ErrorKind::NotFound
        {
            panic!("cannot kill the replicas of {name} through {}: {e}", kill.display());
        }
    }

    /// The cgroup tree of node `name`'s replicas, as its agent's latest start logged it
    /// (`root=`); `None` when it logged none (it holds replicas by process groups).
    fn replica_root(&self, name: &str) -> Option<PathBuf> {
        let log = self.agent_log(name);
        log.lines()
            .filter(|l| l.contains("each replica runs in a cgroup of its own"))
            .filter_map(|l| l.split_once("root=").map(|(_, r)| PathBuf::from(r.trim())))
            .next_back()
    }

    /// Freezes node `name` whole, as a paused virtual machine: its agent and its replicas'
    /// guards (SIGSTOP; they run outside the replicas' cgroups) and every process of its
    /// replicas (`cgroup.freeze` of its agent's tree). What [`Cluster::thaw_node`] needs.
    pub fn freeze_node(&mut self, name: &str) -> crate::freeze::FrozenNode {
        self.pause_agent(name, true);
        let lease_file = baton_agent::lease_file::path(&self.path(&format!("agent-{name}")));
        let guards: Vec<u32> = baton_agent::procfs::find_by_arg(lease_file.as_os_str().as_encoded_bytes())
            .into_iter()
            .filter(|&pid| baton_agent::procfs::has_arg(pid, baton_agent::launch::GUARD_NAME.as_bytes()))
            .collect();
        for &pid in &guards {
            crate::freeze::signal_pid(pid, libc::SIGSTOP);
        }
        let root = self.replica_root(name);
        if let Some(root) = &root {
            crate::freeze::write_cgroup(root, "cgroup.freeze", "1");
        }
        let replicas = root.as_deref().map(crate::freeze::populated_children).unwrap_or_default();
        crate::freeze::FrozenNode { root, guards, replicas }
    }

    /// Runs node `name` again, every process at once (as closely as a harness can: the
    /// replicas' tree first, then the guards, then the agent, microseconds apart).
    pub fn thaw_node(&mut self, name: &str, frozen: &crate::freeze::FrozenNode) {
        // The freeze must have held: an agent that ran meanwhile kept its lease, and nothing
        // the thaw is judged by would follow (stop 66: the kernel had continued one).
        let state = self.agent_pid(name).and_then(baton_agent::procfs::stat).map(|(_, s)| s);
        if state != Some('T') {
            let line =
                format!("the harness's freeze of node {name} did not hold: its agent was {state:?} before the thaw");
            eprintln!("chaos: {line}");
            baton_agent::workload::append(&self.path("witness").join("violations"), &line);
        }
        // First, for the witnesses: an older attempt the thaw runs again tells itself apart
        // (`workload::frozen::thawed_late`).
        crate::freeze::say_thawed(&self.path("witness"), name, frozen.root.as_deref());
        if let Some(root) = &frozen.root {
            crate::freeze::write_cgroup(root, "cgroup.freeze", "0");
        }
        for &pid in &frozen.guards {
            crate::freeze::signal_pid(pid, libc::SIGCONT);
        }
        self.pause_agent(name, false);
    }

    /// Deletes node `name`'s agent journal (its agent stopped), the remedy an operator might
    /// reach for when a journal is damaged, while its replicas' processes may still live.
    pub fn wipe_agent_journal(&self, name: &str) {
        let journal = self.path(&format!("agent-{name}")).join("journal");
        if let Err(e) = std::fs::remove_dir_all(&journal)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            panic!("cannot wipe {}: {e}", journal.display());
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) an agent: a stalled host, a long pause. Its
    /// replicas' processes are not stopped with it.
    pub fn pause_agent(&mut self, name: &str, paused: bool) {
        self.agents.get_mut(name).expect("a known agent").1.pause(paused);
    }

    /// SIGKILL replica `i` (0-based), as a crash.
    pub fn kill_replica(&mut self, i: usize) {
        self.replicas[i].kill();
    }

    /// SIGKILLs every replica: what each has made durable stays on disk for a reader.
    pub fn kill_replicas(&mut self) {
        for r in &mut self.replicas {
            r.kill();
        }
    }

    /// Each replica's data directory (its `--data-dir`), in replica order.
    pub fn replica_data_dirs(&self) -> Vec<PathBuf> {
        let dir_of = |r: &Proc| r.args.iter().skip_while(|a| *a != "--data-dir").nth(1).map(PathBuf::from);
        self.replicas.iter().filter_map(dir_of).collect()
    }

    /// Starts replica `i` again on its data directory.
    pub fn start_replica(&mut self, i: usize) {
        let baton = self.baton.clone();
        self.replicas[i].spawn(&baton);
    }

    /// Starts replica `i` again on its data directory from another binary (a previous build,
    /// in an upgrade test) with `extra` arguments, this time only (`start_replica` starts it
    /// as before).
    pub fn start_replica_from(&mut self, i: usize, baton: &Path, extra: &[&str]) {
        let args = self.replicas[i].args.clone();
        self.replicas[i].args.extend(strings(extra));
        self.replicas[i].spawn(baton);
        self.replicas[i].args = args;
    }

    /// The process id of replica `i` (0-based), while it runs.
    pub fn replica_pid(&self, i: usize) -> Option<u32> {
        self.replicas[i].child.as_ref().map(Child::id)
    }

    /// Sends `sig` to replica `i` (SIGHUP: reload its certificates).
    pub fn signal_replica(&self, i: usize, sig: libc::c_int) {
        if let Some(c) = &self.replicas[i].child {
            signal(c, sig);
        }
    }

    /// What replica `i` has logged so far.
    pub fn replica_log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.replicas[i].log).unwrap_or_default()
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) replica `i`: to the others it is cut off.
    pub fn pause_replica(&mut self, i: usize, paused: bool) {
        self.replicas[i].pause(paused);
    }

    /// Whether links can be cut ([`Cluster::start_partitionable`]).
    pub fn partitionable(&self) -> bool {
        self.net.is_some()
    }

    /// Who is where, by network label.
    pub fn topology(&self) -> Topology {
        Topology {
            replicas: (0..self.replicas.len()).map(replica_label).collect(),
            agents: self.agents.iter().map(|(name, (n, _))| (agent_label(name), n.rack.clone())).collect(),
            replica_racks: self.replica_racks.clone(),
        }
    }

    /// Puts the network `rules` in force, replacing those before (`&[]` heals every link).
    /// Panics in a cluster that is not partitionable, or when the rules cannot be set.
    pub fn set_network(&self, rules: &[Rule]) {
        let net = self.net.as_ref().expect("a partitionable cluster (Cluster::start_partitionable)");
        if let Err(e) = net.apply(rules) {
            panic!("cannot set the network's rules: {e}; logs in {}", self.dir.path().display());
        }
    }

    pub fn agent_names(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }

    /// A client of replica `i` and what it says of the cluster, if it runs (not paused) and
    /// answers. A leader cut off from its peers still says it leads until it hears otherwise.
    pub async fn answering(&self, i: usize) -> Option<(Client, ClusterInfoReply)> {
        if !self.replicas[i].answers() {
            return None;
        }
        probe(&self.servers.addrs[i], &self.servers).await
    }

    /// The file holding the admin token every call of this harness carries (for the CLI's
    /// `BATON_TOKEN_FILE`).
    pub fn token_file(&self) -> PathBuf {
        self.path(ADMIN_TOKEN_FILE)
    }

    /// Waits until the admin token is committed: `cluster info` answers without a token, so a
    /// leader may be known before the bootstrap admin is.
    async fn wait_admin_token(&self) {
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        loop {
            let mut c = self.client().await;
            if c.who_am_i(Empty {}).await.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the admin token was never committed; logs in {}",
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Replica `i`'s applied index, if it runs and answers `cluster info` (which it does once
    /// it follows a leader).
    pub async fn applied_index_of(&self, i: usize) -> Option<u64> {
        self.answering(i).await.map(|(_, info)| info.applied_index)
    }

    /// A client of a replica that knows the leader.
    pub async fn client(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        loop {
            for i in 0..self.replicas.len() {
                if let Some((c, info)) = self.answering(i).await
                    && info.leader_id != 0
                {
                    return c;
                }
            }
            assert!(Instant::now() < deadline, "no replica answers; logs in {}", self.dir.path().display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Index of the leading replica.
    pub async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        loop {
            for i in 0..self.replicas.len() {
                if let Some((_, info)) = self.answering(i).await
                    && info.leader_id != 0
                    && info.leader_id == info.answered_by
                {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no leader within {WAIT_S} s; logs in {}", self.dir.path().display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Index of a leading replica other than `deposed` (one cut off from its peers still
    /// believes it leads) and what it says of the cluster (its term, its id).
    pub async fn leader_other_than(&self, deposed: usize) -> (usize, ClusterInfoReply) {
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        loop {
            for i in (0..self.replicas.len()).filter(|&i| i != deposed) {
                if let Some((_, info)) = self.answering(i).await
                    && info.leader_id != 0
                    && info.leader_id == info.answered_by
                {
                    return (i, info);
                }
            }
            assert!(
                Instant::now() < deadline,
                "no new leader within {WAIT_S} s; logs in {}",
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the cluster is whole, at most `wait_ms`: every replica runs, answers and
    /// names the same leader, and every node is ready. False when it was not in time.
    pub async fn wait_whole(&self, wait_ms: u64) -> bool {
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        while Instant::now() < deadline {
            if self.is_whole().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    async fn is_whole(&self) -> bool {
        let mut leaders = BTreeSet::new();
        let mut client = None;
        for i in 0..self.replicas.len() {
            let Some((c, info)) = self.answering(i).await else { return false };
            leaders.insert(info.leader_id);
            if info.leader_id == info.answered_by {
                client = Some(c);
            }
        }
        let (Some(mut c), 1) = (client, leaders.len()) else { return false };
        let bound = Duration::from_millis(PROBE_MS);
        match tokio::time::timeout(bound, c.list_nodes(Empty {})).await {
            Ok(Ok(r)) => {
                let nodes = &r.get_ref().nodes;
                nodes.len() == self.agents.len() && nodes.iter().all(|n| n.status() == NodeStatus::Ready)
            }
            _ => false,
        }
    }

    /// SIGKILL the leader; returns its index.
    pub async fn kill_leader(&mut self) -> usize {
        let i = self.leader().await;
        self.kill_replica(i);
        i
    }

    async fn wait_nodes(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        let mut c = self.client().await;
        loop {
            if let Ok(r) = c.list_nodes(Empty {}).await
                && r.get_ref().nodes.iter().filter(|x| x.status() == NodeStatus::Ready).count() >= n
            {
                return;
            }
            assert!(Instant::now() < deadline, "agents did not register; logs in {}", self.dir.path().display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn wait_job(&self, job: &str, what: &str, ok: impl Fn(&Job) -> bool) -> Job {
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        let mut c = self.client().await;
        loop {
            if let Ok(j) = c.get_job(JobRef { name: job.into(), ..Default::default() }).await {
                let j = j.into_inner();
                if ok(&j) {
                    return j;
                }
                assert!(
                    Instant::now() < deadline,
                    "{job}: {what} never held; it is {} ({})",
                    j.state().word(),
                    j.reason
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, p) in self.agents.values_mut() {
            p.kill();
        }
        for p in &mut self.replicas {
            p.kill();
        }
        // Jobs run in their own sessions and outlive a killed agent: end them too.
        let _ = Command::new("pkill").arg("-KILL").arg("-f").arg(self.dir.path().display().to_string()).status();
        // A failing test names this directory: keep its logs for the reader.
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!("the cluster's logs are kept in {}", self.dir.path().display());
        }
    }
}

/// libfaketime's spec of a clock `offset_s` off the machine's, running `rate_permille`
/// thousandths fast (negative: slow): "+7s", or "+0s x1.005".
pub fn faketime_spec(offset_s: i64, rate_permille: i64) -> String {
    if rate_permille == 0 {
        return format!("{offset_s:+}s");
    }
    let rate = 1_000 + rate_permille;
    format!("{offset_s:+}s x{}.{:03}", rate / 1_000, rate % 1_000)
}

/// Writes libfaketime's spec file in one rename, so that no reader sees half of it.
fn write_spec(file: &Path, spec: &str) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{spec}\n")).expect("a clock spec file");
    std::fs::rename(&tmp, file).expect("a clock spec file");
}

/// A client of any of `servers` that knows a leader, trying each once with a short bound
/// (for callers that run beside fault injection and cannot borrow the `Cluster`).
pub async fn connect_any(servers: &Servers) -> Option<Client> {
    for addr in &servers.addrs {
        if let Some((c, info)) = probe(addr, servers).await
            && info.leader_id != 0
        {
            return Some(c);
        }
    }
    None
}

/// A client of the leading replica among `servers` and its index, trying each once with a
/// short bound.
pub async fn connect_leader(servers: &Servers) -> Option<(Client, usize)> {
    for (i, addr) in servers.addrs.iter().enumerate() {
        if let Some((c, info)) = probe(addr, servers).await
            && info.leader_id != 0
            && info.leader_id == info.answered_by
        {
            return Some((c, i));
        }
    }
    None
}

/// A client of the replica at `addr` and what it says of the cluster, each step bounded by
/// `PROBE_MS`.
async fn probe(addr: &str, servers: &Servers) -> Option<(Client, ClusterInfoReply)> {
    let bound = Duration::from_millis(PROBE_MS);
    let ep = servers.transport.endpoint(addr, REPLICA_HOST).ok()?;
    let channel = tokio::time::timeout(bound, ep.connect()).await.ok()?.ok()?;
    let c = BatonClient::with_interceptor(channel, servers.bearer.clone());
    let max = baton_proto::MAX_MESSAGE_BYTES;
    let mut c = c.max_decoding_message_size(max).max_encoding_message_size(max);
    let info = tokio::time::timeout(bound, c.cluster_info(Empty {})).await.ok()?.ok()?.into_inner();
    Some((c, info))
}

/// The admin token's file, in the cluster's directory.
const ADMIN_TOKEN_FILE: &str = "admin.token";

/// A new random token in `path` (readable by this user only), as `baton dev` makes one.
fn write_admin_token(path: &Path) -> String {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).expect("random bytes");
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    writeln!(f, "{token}").expect("the token is written");
    token
}

/// A CA and one certificate per replica, agent and the `chaos` client under `dir`, made with
/// `baton tls` as an operator would: the cluster runs with mutual TLS like a real one.
fn make_certificates(baton: &Path, dir: &Path, nodes: &[NodeArgs]) -> PathBuf {
    let run = |args: &[String]| {
        let out = Command::new(baton).args(args).output().unwrap_or_else(|e| panic!("cannot run baton tls: {e}"));
        assert!(out.status.success(), "baton {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ca = dir.join("ca").display().to_string();
    run(&strings(&["tls", "ca", "create", "--dir", &ca]));
    let mut who: Vec<(String, String, String)> =
        (1..=REPLICAS).map(|i| ("--server".into(), i.to_string(), format!("replica-{i}"))).collect();
    who.extend(nodes.iter().map(|n| ("--agent".into(), n.name.clone(), format!("agent-{}", n.name))));
    who.push(("--client".into(), "chaos".into(), "client-chaos".into()));
    for (flag, name, sub) in who {
        let out = dir.join(sub).display().to_string();
        run(&strings(&["tls", "cert", "create", &flag, &name, "--ca-dir", &ca, "--out-dir", &out]));
    }
    dir.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::{Proc, faketime_spec};

    /// Stop 66, seed 18000: a process of the cluster lived in the harness's process group,
    /// and the kernel continued it (SIGHUP, SIGCONT) when that group became orphaned while
    /// it was stopped by a fault. Each leads a session of its own.
    #[test]
    fn a_process_of_the_cluster_leads_a_session_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Proc::new(vec!["30".into()], dir.path().join("log"));
        p.spawn(std::path::Path::new("sleep"));
        let pid = p.child.as_ref().unwrap().id() as libc::pid_t;
        // SAFETY: getsid reads the session id of our own child.
        let sid = unsafe { libc::getsid(pid) };
        p.kill();
        assert_eq!(sid, pid, "not a session of its own");
    }

    #[test]
    fn clock_specs_are_written_as_libfaketime_reads_them() {
        assert_eq!(faketime_spec(7, 0), "+7s");
        assert_eq!(faketime_spec(-7, 0), "-7s");
        assert_eq!(faketime_spec(0, 5), "+0s x1.005");
        assert_eq!(faketime_spec(0, -5), "+0s x0.995");
        assert_eq!(faketime_spec(0, 50), "+0s x1.050");
    }
}
