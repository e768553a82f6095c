//! One chaos run: start the cluster, submit the load while injecting faults, heal, let the
//! jobs finish, judge.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use baton_agent::node::CONTAINMENT_LABEL;
use baton_agent::workload::Misbehave;
use baton_proto::v1::{JobRef, JobState, ListJobsRequest, SubmitRequest};
use tokio::task::JoinHandle;

use crate::check::{Evidence, Landed, Report, attempt_of_violation, attempts_after_node_loss};
use crate::cluster::{Cluster, NodeArgs, Servers, Timing, connect_any};
use crate::faults::{Faults, Mix};
use crate::history::{History, Op, OpKind, Outcome, now_ms};
use crate::load::{self, Load};
use crate::rng::Rng;
use crate::unkillable::Freezer;

/// Tries of one setup call (the cohort, a queue) while the cluster is unavailable.
const SETUP_TRIES: u32 = 150;
/// Attempts at one submit before giving up on it (it then counts as not acknowledged).
const SUBMIT_TRIES: u32 = 50;
const SUBMIT_RETRY_MS: u64 = 200;
/// Bound on one call of a client operation; past it the try's outcome is unknown.
const CALL_MS: u64 = 2_000;
/// Share of submitted jobs that get cancelled, and how long after their submit at most.
const CANCEL_PERCENT: u64 = 6;
const CANCEL_AFTER_MAX_MS: u64 = 3_000;
/// Attempts at one cancel while the cluster cannot tell whether it happened.
const CANCEL_TRIES: u32 = 20;
/// How long after an acknowledged cancel a start may still come, beyond the lease: the
/// agent's tick and a process start on a busy machine.
const CANCEL_START_SLACK_MS: u64 = 500;
/// Bound on the jobs one run submits.
const MAX_JOBS: usize = 2_000;
/// Once the faults stop, the jobs are given time to finish as long as some job finishes
/// every `DRAIN_STALL_S`, and `DRAIN_MAX_S` at most.
const DRAIN_STALL_S: u64 = 30;
const DRAIN_MAX_S: u64 = 900;

#[derive(Clone, Debug)]
pub struct Config {
    /// The `baton` binary.
    pub baton: PathBuf,
    /// How long faults are injected.
    pub seconds: u64,
    pub seed: u64,
    pub nodes: usize,
    pub gpus_per_node: u64,
    /// Keep the run's directory (logs, witness records) and print where it is.
    pub keep_dir: bool,
    /// Which faults to draw; all but `Mix::Processes`, `Mix::PreemptionKills` and
    /// `Mix::SlowDisks` need network namespaces (root).
    pub mix: Mix,
    /// Replica 2's wall clock runs `CLOCK_OFFSET_S` ahead of the others', replica 3's as
    /// much behind, node n1's agent's `AGENT_CLOCK_OFFSET_S` ahead and n2's as much behind
    /// (libfaketime); halfway through the run each of these clocks steps to the opposite
    /// offset (an NTP step of twice the offset, backwards for replica 2 and n1).
    pub clock_offsets: bool,
    /// Replica 2's clocks (wall, monotonic and boot) run `CLOCK_RATE_PERMILLE` thousandths
    /// fast and replica 3's as much slow (libfaketime's rate): the drift `D` of the timing
    /// argument, between a leader and the agents, which run true. Not with `clock_offsets`.
    pub clock_rates: bool,
    /// Brisk faults (`Faults::brisk`): the next fault once the cluster is whole again after
    /// the last, shorter outages above the same lower bounds.
    pub brisk: bool,
    /// Slow disks among the process faults (`crate::disk`; needs root, a block IO cgroup
    /// controller and the temporary directory on a block device: the run fails up front,
    /// naming what is missing, without them). Off for mixes without process faults.
    pub slow_disks: bool,
    /// Share of the jobs that misbehave (`load::Load::misbehave`): ignore their stop
    /// signal, go on saving checkpoints after it, or, where every agent holds its replicas in
    /// cgroups, leave a process behind outside their session.
    pub adversarial_percent: u64,
}

/// The clock offset of replicas 2 (ahead) and 3 (behind) with `Config::clock_offsets`:
/// more than the heartbeat timeout, the lease and a stop's grace together.
pub const CLOCK_OFFSET_S: i64 = 7;
/// With `Config::clock_rates`: how many thousandths fast or slow replicas' clocks run: the
/// 1 % that `D` allows. A fast leader is the direction the timing argument fears (it counts
/// the heartbeat timeout short). The agents run true: libfaketime's faked monotonic and boot
/// clocks start from another base (about the wall clock's), and an agent's lease file, in
/// boot time, is read by the watchdog of each of its replicas, which runs in the jobs'
/// clean environment on the machine's clock: the lease would look fresh for ever.
pub const CLOCK_RATE_PERMILLE: i64 = 10;
/// The clock offset of the agents of n1 (ahead) and n2 (behind) with `Config::clock_offsets`.
pub const AGENT_CLOCK_OFFSET_S: i64 = 5;

impl Config {
    pub fn new(baton: impl Into<PathBuf>, seconds: u64, seed: u64) -> Config {
        Config {
            baton: baton.into(),
            seconds,
            seed,
            nodes: 3,
            gpus_per_node: 4,
            keep_dir: false,
            mix: Mix::All,
            clock_offsets: false,
            clock_rates: false,
            brisk: false,
            slow_disks: false,
            adversarial_percent: load::ADVERSARIAL_PERCENT,
        }
    }
}

/// The run's verdict; an error, naming what is missing, when the faults it is to draw
/// cannot be made here (network partitions without root, `ip netns` or `nft`).
pub async fn run(cfg: &Config) -> Result<Report, String> {
    let node = |i: usize| NodeArgs {
        cpu: load::CPUS_PER_NODE,
        ..NodeArgs::gpus(&format!("n{i}"), &format!("rack-{i}"), cfg.gpus_per_node)
    };
    let nodes: Vec<NodeArgs> = (1..=cfg.nodes).map(node).collect();
    let mut timing = Timing::default();
    if cfg.clock_offsets {
        crate::cluster::libfaketime()?;
        timing.clock_offsets_s = vec![0, CLOCK_OFFSET_S, -CLOCK_OFFSET_S];
        timing.agent_clock_offsets_s = vec![AGENT_CLOCK_OFFSET_S, -AGENT_CLOCK_OFFSET_S];
    }
    if cfg.clock_rates {
        if cfg.clock_offsets {
            return Err("clock rates are not combined with clock offsets".into());
        }
        crate::cluster::libfaketime()?;
        timing.clock_rates_permille = vec![0, CLOCK_RATE_PERMILLE, -CLOCK_RATE_PERMILLE];
    }
    let leader_clocks = leader_clocks_steppable(cfg);
    timing.steppable_replica_clocks = leader_clocks;
    timing.job_user = job_user(&cfg.baton);
    let cluster_started = Instant::now();
    let slow_disks = (cfg.slow_disks || cfg.mix == Mix::SlowDisks) && cfg.mix.process_faults();
    if slow_disks {
        // Refused before the cluster starts; the cluster's directory is made under it.
        crate::disk::check(&std::env::temp_dir()).map_err(|e| e.to_string())?;
    }
    let mut c = if cfg.mix.partitions() {
        Cluster::start_partitionable(&cfg.baton, &nodes, &timing).await?
    } else {
        Cluster::start_with(&cfg.baton, &nodes, &timing).await
    };
    let witness = c.path("witness");
    std::fs::create_dir_all(&witness).expect("a witness directory");
    if timing.job_user.is_some() {
        // Jobs of every user record there (the workload makes each file writable by all).
        std::fs::set_permissions(
            &witness,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o777),
        )
        .expect("the witness directory open to the jobs");
        setup_call(&c, "root jobs are allowed", |mut api| async move {
            let allow = baton_proto::v1::TenancySettings { allow_root_jobs: Some(true), ..Default::default() };
            api.set_tenancy(allow).await.map(|_| ())
        })
        .await;
    }
    let (cohort, queues) = load::setup(cfg.gpus_per_node * cfg.nodes as u64, load::CPUS_PER_NODE * cfg.nodes as u64);
    setup_call(&c, "the cohort is created", |mut api| {
        let cohort = cohort.clone();
        async move { api.put_cohort(cohort).await.map(|_| ()) }
    })
    .await;
    for q in queues {
        setup_call(&c, "the queues are created", |mut api| {
            let q = q.clone();
            async move { api.put_queue(q).await.map(|_| ()) }
        })
        .await;
    }

    let contained = every_agent_holds_replicas_in_cgroups(&c).await;
    let mut ways = vec![Misbehave::IgnoreStop, Misbehave::WriteAfterStop];
    if contained {
        ways.push(Misbehave::Escape);
    }
    let freezer = unkillable_processes(contained).then(|| Arc::new(Freezer::start()));
    if freezer.is_some() {
        ways.push(Misbehave::Unkillable);
    }
    // A job that kills what watches it: only where a cgroup holds it and it runs as a user
    // other than the agent's (a process group's watchdog is the job's to kill, the weaker
    // mode's stated limit; a root job may kill anything).
    if contained && timing.job_user.is_some() {
        ways.push(Misbehave::KillWatchdog);
    }
    let tag = freezer.as_ref().map_or("0", |f| f.tag()).to_string();
    let mut load = Load::new(cfg.seed, &cfg.baton, &witness)
        .misbehave(cfg.adversarial_percent, &ways)
        .unkillable_tag(&tag)
        .job_user(timing.job_user.clone());
    let history = Arc::new(History::default());
    // Training gangs fill the cluster first, so that interactive jobs must reclaim.
    for _ in 0..cfg.nodes {
        submit(&c.servers, load.train(), &history).await;
    }
    // And CPU jobs fill every node's CPUs, so that the first `cpu-urgent` must suspend some.
    for _ in 0..load::CPUS_PER_NODE * cfg.nodes as u64 {
        submit(&c.servers, load.sleepy(), &history).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = tokio::spawn(submit_load(c.servers.clone(), load, cfg.seed, history.clone(), stop.clone()));
    let gpu_faults = crate::gpu_faults::Injector {
        servers: c.servers.clone(),
        dir: c.dir.path().to_path_buf(),
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        gpus_per_node: cfg.gpus_per_node,
        seed: cfg.seed,
    };
    let gpu_faulter = tokio::spawn(gpu_faults.run(stop.clone()));
    // The operator fixes nodes a frozen process made unhealthy until the jobs have drained.
    let drained = Arc::new(AtomicBool::new(false));
    let operator =
        freezer.clone().map(|f| tokio::spawn(crate::unkillable::operate(c.servers.clone(), f, drained.clone())));

    let disk = match slow_disks {
        true => Some(crate::disk::SlowDisk::new(c.dir.path()).map_err(|e| e.to_string())?),
        false => None,
    };
    match &disk {
        Some(d) => eprintln!("chaos: slow disks on, device {} of the replicas' data", d.device()),
        None => eprintln!("chaos: slow disks off"),
    }
    let mut faults = Faults::new(cfg.seed, timing.heartbeat_timeout_ms, &c.servers, cfg.mix)
        .brisk(cfg.brisk)
        .slow_disks(disk)
        .contained(contained)
        .leader_clocks(leader_clocks);
    if cfg.mix == Mix::NewKinds && faults.new_kinds().is_empty() {
        return Err("--only-new-kinds: no fault of those kinds can be made here: the agents do not hold their \
             replicas in cgroups (needs root and a cgroup v2 hierarchy), and the replicas' clocks cannot be \
             stepped (needs libfaketime)"
            .into());
    }
    let mut landed = Vec::new();
    let start = Instant::now();
    let mut stepped = !cfg.clock_offsets;
    while start.elapsed() < Duration::from_secs(cfg.seconds) {
        if !stepped && start.elapsed() >= Duration::from_secs(cfg.seconds) / 2 {
            stepped = true;
            step_clocks(&c, &timing, &nodes);
            eprintln!(
                "chaos: every offset clock stepped to the opposite offset at {:.1} s",
                start.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(faults.pause_before_next()).await;
        let (at_s, at_ms) = (start.elapsed().as_secs_f64(), crate::history::now_ms());
        let (fault, moment) = faults.inject(&mut c).await;
        landed.push(Landed { at_s, at_ms, fault, moment });
        faults.settle(&c).await;
    }
    stop.store(true, Ordering::SeqCst);
    let gpu_spans = gpu_faulter.await.unwrap_or_default();
    if let Ok(cancels) = submitter.await {
        for cancel in cancels {
            let _ = cancel.await;
        }
    }

    let ops = history.ops();
    let acked: Vec<String> =
        ops.iter().filter(|o| o.kind == OpKind::Submit && o.outcome == Outcome::Ok).map(|o| o.key.clone()).collect();
    let jobs = drain(&c, &acked).await;
    drained.store(true, Ordering::SeqCst);
    let mut repairs = match operator {
        Some(o) => o.await.unwrap_or_default(),
        None => Vec::new(),
    };
    // A node made unhealthy during the drain's last look is fixed too, before quiescence.
    if let Some(f) = &freezer {
        for node in crate::unkillable::unkillable_nodes(&c.servers).await {
            repairs.push(crate::unkillable::repair(&c.servers, f, node).await);
        }
    }
    let after_node_loss = after_node_loss(&c, &witness).await;
    say_frozen_waits(&witness);
    // Quiescence first: the events read after it include the last stops.
    let quiescence = crate::observe::quiescence(&c, &witness, c.servers.addrs.len()).await;
    let events = crate::observe::events_of(&c, &jobs).await;
    let events_read_ms = now_ms();
    // The replicas are done with: stopped, so their logs can be read (each holds its store).
    c.kill_replicas();
    let commit = crate::commit::read_most_committed(&c.replica_data_dirs()).await;
    // A clock that runs at another rate has drifted off by the end: the checks that allow
    // for wall clocks apart count that as an offset.
    let drifted_s = drifted_offsets_s(&timing.clock_rates_permille, cluster_started.elapsed());
    let offsets_s = if cfg.clock_rates { &drifted_s } else { &timing.clock_offsets_s };
    let logs = logs_in(c.dir.path());
    let report = Report::judge(&Evidence {
        seconds: cfg.seconds,
        mix: cfg.mix,
        clock_offsets_s: offsets_s,
        agent_clock_offsets_s: &timing.agent_clock_offsets_s,
        faults: &landed,
        jobs: &jobs,
        witness: &witness,
        ops: &ops,
        after_node_loss: &after_node_loss,
        cancel_slack_ms: timing.lease_ms + CANCEL_START_SLACK_MS,
        events: &events,
        events_read_ms,
        preemption_bound_ms: crate::check::preemption_bound_ms(timing.heartbeat_timeout_ms),
        quiescence: &quiescence,
        logs: &logs,
        gpu_faults: &gpu_spans,
        contained,
        leader_clocks,
        unkillable: freezer.is_some(),
        repairs: &repairs,
        commit: &commit,
    });
    if cfg.keep_dir || !report.ok() {
        // Kept for a post-mortem: the replicas' and agents' logs, the witness records.
        c.dir.disable_cleanup(true);
        eprintln!("chaos: the run's directory is kept at {}", c.dir.path().display());
    }
    Ok(report)
}

/// Whether jobs may leave a process behind that SIGKILL cannot end (`Misbehave::Unkillable`):
/// where every agent holds its replicas in cgroups (an agent of the weaker mode counts a
/// replica ended when its wrapper ends, as its docs say) and this host has a cgroup v1
/// freezer the harness may use (as root, on a host with hybrid cgroups). The run says which.
fn unkillable_processes(contained: bool) -> bool {
    let freezer = baton_agent::workload::unkillable_cgroups::available();
    if !(contained && freezer) {
        let why =
            if contained { "no writable cgroup v1 freezer here" } else { "the agents do not hold replicas in cgroups" };
        eprintln!("chaos: no job leaves an unkillable process this run: {why}");
    }
    contained && freezer
}

/// The Unix user jobs run as: `nobody`, where the harness runs as root, the user exists and
/// may run `baton` (every directory above it passable, the file executable by others).
/// Otherwise jobs run as the agents' user and no job kills what watches it; the run says why.
fn job_user(baton: &std::path::Path) -> Option<String> {
    const USER: &str = "nobody";
    // SAFETY: geteuid(2) reads this process's credentials only.
    let why = if unsafe { libc::geteuid() } != 0 {
        "the harness is not root".to_string()
    } else if !matches!(baton_agent::run_as::lookup_user(USER), Ok(Some(_))) {
        format!("no user {USER} here")
    } else if !runnable_by_others(baton) {
        format!("{USER} may not run {}", baton.display())
    } else {
        return Some(USER.into());
    };
    eprintln!("chaos: jobs run as the agents' user this run, and none kills what watches it: {why}");
    None
}

/// Whether users other than the owner may run `path`: it and every directory above it are
/// executable by others.
fn runnable_by_others(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(path) = path.canonicalize() else { return false };
    path.ancestors().all(|p| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// Whether the replicas run on clocks the harness can step, so that the leader's may jump
/// days ahead (`faults::Fault::LeaderClockAhead`): in a mix of process faults, with
/// libfaketime installed, and no other clock fault in the run (offsets step by a plan of
/// their own; a rate moves the monotonic clocks, which a step would move as well). Without
/// libfaketime the run says so and goes on without such faults (its verdict says which).
fn leader_clocks_steppable(cfg: &Config) -> bool {
    if !cfg.mix.clock_jumps() || cfg.clock_offsets || cfg.clock_rates {
        return false;
    }
    match crate::cluster::libfaketime() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("chaos: no leader clock jumps this run: {e}");
            false
        }
    }
}

/// Every `*.log` the run's processes wrote in `dir` (replicas and agents), by file name.
fn logs_in(dir: &std::path::Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut logs: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok().filter(|n| n.ends_with(".log"))?;
            // Lossy: a log cut off mid-character by a kill is still read.
            let text = String::from_utf8_lossy(&std::fs::read(e.path()).ok()?).into_owned();
            Some((name, text))
        })
        .collect();
    logs.sort();
    logs
}

/// Whether every agent holds its replicas in cgroups, as its node's label says. Only then
/// may jobs leave a process behind outside their session (`Misbehave::Escape`) and agents'
/// journals be wiped (`Fault::WipeJournal`): an agent of the weaker mode (`--containment
/// auto` without a usable cgroup tree; not root here) holds a replica by its process group,
/// which such a process leaves, and cannot find processes its journal forgot, limits of that
/// mode its docs state.
async fn every_agent_holds_replicas_in_cgroups(c: &Cluster) -> bool {
    let weak = |n: &baton_proto::v1::Node| n.labels.get(CONTAINMENT_LABEL).is_none_or(|m| m == "process-group");
    let nodes = setup_call(c, "the nodes are listed", |mut api| async move {
        api.list_nodes(baton_proto::v1::Empty {}).await.map(|r| r.into_inner().nodes)
    })
    .await;
    !nodes.is_empty() && !nodes.iter().any(weak)
}

/// Makes one setup call (a put or a read, which may be repeated), again while the cluster
/// is unavailable: on a loaded machine (several runs at once) a new leader may not have
/// heard from a quorum yet. Panics, naming the logs, after `SETUP_TRIES`.
async fn setup_call<T, F, Fut>(c: &Cluster, what: &str, call: F) -> T
where
    F: Fn(crate::cluster::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    for try_no in 1..=SETUP_TRIES {
        match call(c.client().await).await {
            Ok(answer) => return answer,
            Err(status) if status.code() == tonic::Code::Unavailable && try_no < SETUP_TRIES => {
                tokio::time::sleep(Duration::from_millis(SUBMIT_RETRY_MS)).await;
            }
            Err(status) => panic!("{what}: {status}; logs in {}", c.dir.path().display()),
        }
    }
    unreachable!("the last try returns or panics")
}

/// How far (whole seconds, rounded up, signed) clocks running `rates_permille` fast or
/// slow since the cluster started have drifted off the machine's after `elapsed`.
fn drifted_offsets_s(rates_permille: &[i64], elapsed: Duration) -> Vec<i64> {
    let ms = elapsed.as_millis() as u64;
    rates_permille.iter().map(|r| r.signum() * (r.unsigned_abs() * ms).div_ceil(1_000_000) as i64).collect()
}

/// Steps every clock that runs off the machine's to the opposite offset.
fn step_clocks(c: &Cluster, timing: &Timing, nodes: &[NodeArgs]) {
    for (i, &offset_s) in timing.clock_offsets_s.iter().enumerate().filter(|(_, o)| **o != 0) {
        c.step_clock(&crate::cluster::replica_label(i), -offset_s);
    }
    for (n, &offset_s) in nodes.iter().zip(&timing.agent_clock_offsets_s).filter(|(_, o)| **o != 0) {
        c.step_clock(&crate::cluster::agent_label(&n.name), -offset_s);
    }
}

/// Submits until told to stop, a job every 0.6 to 1.4 s: about what 12 GPUs get through, so
/// the backlog stays short while preemptions keep coming. A few jobs are cancelled a moment
/// after their submit; the cancels' tasks are returned, to be awaited.
async fn submit_load(
    servers: Servers,
    mut load: Load,
    seed: u64,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    let mut rng = Rng::new(seed ^ 0x5ab);
    let mut cancels = Vec::new();
    let mut made = 0;
    while !stop.load(Ordering::SeqCst) && made < MAX_JOBS {
        tokio::time::sleep(Duration::from_millis(rng.range(600, 1_400))).await;
        let req = load.any();
        let name = req.request_id.clone();
        made += 1;
        let names = req.array.is_some().then(|| elements(&req));
        if submit(&servers, req, &history).await && rng.chance(CANCEL_PERCENT) {
            let after = Duration::from_millis(rng.range(0, CANCEL_AFTER_MAX_MS));
            let (servers, history) = (servers.clone(), history.clone());
            cancels.push(tokio::spawn(async move {
                tokio::time::sleep(after).await;
                cancel(&servers, &name, names.as_deref(), &history).await;
            }));
        }
    }
    cancels
}

/// One try of a client call, recorded in `history`: `None` when no replica could be reached
/// (nothing was sent), else the outcome.
async fn try_call<F, Fut>(servers: &Servers, kind: OpKind, key: &str, history: &History, call: F) -> Option<Outcome>
where
    F: FnOnce(crate::cluster::Client) -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let client = connect_any(servers).await?;
    let invoke_ms = now_ms();
    let outcome = match tokio::time::timeout(Duration::from_millis(CALL_MS), call(client)).await {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(status)) => Outcome::of_status(&status),
        Err(_) => Outcome::Unknown(format!("no answer within {CALL_MS} ms")),
    };
    history.record(Op { kind, key: key.into(), invoke_ms, complete_ms: now_ms(), outcome: outcome.clone() });
    Some(outcome)
}

/// The names of an array's elements (the submit's own name when it is no array).
fn elements(req: &SubmitRequest) -> Vec<String> {
    let name = &req.request_id;
    match &req.array {
        Some(a) => (a.first..a.first + a.count).map(|i| format!("{name}-{i}")).collect(),
        None => vec![name.clone()],
    }
}

/// Records one try for each element of an array, as `kind`, with `outcome`.
fn record_elements(history: &History, kind: OpKind, names: &[String], outcome: &Outcome) {
    let at = now_ms();
    for n in names {
        history.record(Op { kind, key: n.clone(), invoke_ms: at, complete_ms: at, outcome: outcome.clone() });
    }
}

/// Submits with retries under the same request id; true once acknowledged.
async fn submit(servers: &Servers, req: SubmitRequest, history: &History) -> bool {
    let name = req.request_id.clone();
    let kind = if req.array.is_some() { OpKind::SubmitArray } else { OpKind::Submit };
    for _ in 0..SUBMIT_TRIES {
        let r = req.clone();
        let outcome =
            try_call(servers, kind, &name, history, |mut c| async move { c.submit(r).await.map(|_| ()) }).await;
        if outcome == Some(Outcome::Ok) {
            if kind == OpKind::SubmitArray {
                record_elements(history, OpKind::Submit, &elements(&req), &Outcome::Ok);
            }
            return true;
        }
        tokio::time::sleep(Duration::from_millis(SUBMIT_RETRY_MS)).await;
    }
    eprintln!("chaos: submit of {name} never acknowledged");
    false
}

/// Cancels job `name` (unique in the run), or the array of that name and its `elements`,
/// until the cluster says it did, or says it will not (the job already ended); a replica
/// that is not the leader is no answer.
async fn cancel(servers: &Servers, name: &str, elements: Option<&[String]>, history: &History) {
    let kind = if elements.is_some() { OpKind::CancelArray } else { OpKind::Cancel };
    for _ in 0..CANCEL_TRIES {
        let job = JobRef { name: name.into(), ..Default::default() };
        let outcome =
            try_call(servers, kind, name, history, |mut c| async move { c.cancel_job(job).await.map(|_| ()) }).await;
        if let (Some(names), Some(o)) = (elements, &outcome) {
            record_elements(history, OpKind::Cancel, names, o);
        }
        match outcome {
            Some(Outcome::Ok) => return,
            Some(Outcome::Failed(why)) if !why.contains("not the leader") => return,
            _ => tokio::time::sleep(Duration::from_millis(SUBMIT_RETRY_MS)).await,
        }
    }
}

/// Says how many starts waited for an older attempt frozen with its node (the witness's
/// `waits`: `job attempt rank node frozen-ms after-thaw-ms`), and the longest wait after a
/// thaw: the time its older attempt lived on, which the witness bounds; and how many older
/// attempts ran again at a thaw (`thawed-starts`), and how many starts from zero redo the
/// work of one that saved at its thaw (`redone`).
fn say_frozen_waits(witness: &std::path::Path) {
    let text = std::fs::read_to_string(witness.join("waits")).unwrap_or_default();
    let after_thaw: Vec<u64> =
        text.lines().filter_map(|l| l.split_whitespace().nth(5).and_then(|ms| ms.parse().ok())).collect();
    eprintln!(
        "chaos: {} starts waited for an older attempt frozen with its node; the longest {} ms after the thaw",
        after_thaw.len(),
        after_thaw.iter().max().copied().unwrap_or(0)
    );
    let thawed = std::fs::read_to_string(witness.join("thawed-starts")).unwrap_or_default();
    eprintln!(
        "chaos: {} older attempts ran again as their node thawed and found a newer one running",
        thawed.lines().count()
    );
    let redone = std::fs::read_to_string(witness.join("redone")).unwrap_or_default();
    eprintln!(
        "chaos: {} starts from zero beside a checkpoint an older attempt saved as its node thawed, after they were launched (work redone)",
        redone.lines().count()
    );
}

/// The (job, attempt) pairs that a witness saw start from zero despite a whole checkpoint,
/// and that their job's events say were placed after a requeue for a lost node or an
/// expired lease.
async fn after_node_loss(c: &Cluster, witness: &std::path::Path) -> BTreeSet<(String, u32)> {
    let lines = std::fs::read_to_string(witness.join("violations")).unwrap_or_default();
    let named: BTreeSet<(String, u32)> = lines
        .lines()
        .filter(|l| l.contains("started from zero"))
        .filter_map(attempt_of_violation)
        .map(|(job, attempt)| (job.to_string(), attempt))
        .collect();
    let jobs: BTreeSet<&String> = named.iter().map(|(job, _)| job).collect();
    let mut found = BTreeSet::new();
    let mut api = c.client().await;
    for name in jobs {
        let Ok(job) = api.get_job(JobRef { name: name.clone(), ..Default::default() }).await else { continue };
        for attempt in attempts_after_node_loss(&job.into_inner().events) {
            found.insert((name.clone(), attempt));
        }
    }
    found.retain(|pair| named.contains(pair));
    found
}

/// Waits until every acknowledged job has ended, or none ended for `DRAIN_STALL_S`, or
/// `DRAIN_MAX_S` passed; the final job list.
async fn drain(c: &Cluster, acked: &[String]) -> Vec<baton_proto::v1::Job> {
    let start = Instant::now();
    let (mut ended_before, mut progress) = (0, Instant::now());
    loop {
        let api = c.client().await;
        if let Ok(jobs) = crate::observe::list_all(&api, ListJobsRequest::default()).await {
            let is_ended = |name: &String| {
                jobs.iter().any(|j| {
                    j.spec.as_ref().is_some_and(|s| &s.name == name)
                        && matches!(j.state(), JobState::Succeeded | JobState::Failed | JobState::Cancelled)
                })
            };
            let ended = acked.iter().filter(|n| is_ended(n)).count();
            if ended > ended_before {
                (ended_before, progress) = (ended, Instant::now());
            }
            let stalled = progress.elapsed() > Duration::from_secs(DRAIN_STALL_S);
            if ended == acked.len() || stalled || start.elapsed() > Duration::from_secs(DRAIN_MAX_S) {
                return jobs;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_at_another_rate_drifts_by_its_rate_times_the_run() {
        let rates = [0, 5, -5];
        assert_eq!(drifted_offsets_s(&rates, Duration::from_secs(120)), [0, 1, -1]);
        assert_eq!(drifted_offsets_s(&rates, Duration::from_secs(201)), [0, 2, -2], "rounded up");
        assert_eq!(drifted_offsets_s(&[50], Duration::from_secs(600)), [30]);
    }
}
