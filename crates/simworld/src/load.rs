//! The client: it sets the cluster up (a cohort, three queues, usage over time and a
//! per-user limit, the nodes), then until the
//! load ends submits jobs (some waiting for earlier ones, decisions.md section 13), cancels
//! some, rewrites queues' quotas, makes maintenance windows (section 14), fills an agent's
//! journal disk for a while (freeing it and uncordoning the node after, as a person would)
//! and reads, each
//! through a
//! replica drawn at random (a follower forwards to its leader). Each job's work is drawn as
//! it is submitted: how long its ranks run and save, and for a share of jobs how their
//! processes misbehave (`truth::Adversity`). It remembers what was
//! acknowledged, and checks that a linearizable read sees every write acknowledged before
//! it; once the faults are healed, that every acknowledged write is in the state.

use baton_model::elastic::ElasticSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_model::after::{After, JobRef, When};
use baton_model::array::ArraySpec;
use baton_model::command::{Command, Op, Outcome, Response};
use baton_model::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec};
use baton_model::maintenance::WindowSpec;
use baton_model::name::Name;
use baton_model::node::NodeSpec;
use baton_model::queue::{Cohort, PoolQuota, QueueSpec};
use baton_model::resources::Resources;
use baton_model::state::State;
use baton_rng::SplitMix64;

use crate::replica::{Handles, Hosted};
use crate::timing::{CHECKPOINT_MS, GRACE_MS, REQUEST_TIMEOUT_MS, SETTLE_MS, WORK_MS};
use crate::truth::{Adversity, Crash, JobWork, Shared};

pub const QUEUES: [&str; 3] = ["q0", "q1", "q2"];
pub const GPUS_PER_NODE: u64 = 8;
/// The MIG profile every simulated node offers `truth::NODE_SLICES` of.
const SLICE_PROFILE: &str = "mig-1g.10gb";
/// Bound on the jobs one run submits.
pub const MAX_JOBS: u64 = 5_000;

/// What the client saw acknowledged.
#[derive(Debug, Default)]
struct Acked {
    /// Job name to id.
    submits: BTreeMap<String, u64>,
    /// Array name to id (decisions.md section 13).
    arrays: BTreeMap<String, u64>,
    /// Arrays whose cancel was acknowledged.
    array_cancels: BTreeSet<u64>,
    cancels: BTreeSet<u64>,
    /// Per queue, every nominal quota written in order, with whether it was acknowledged.
    quotas: BTreeMap<String, Vec<(u64, bool)>>,
}

pub struct Load {
    pub handles: Handles,
    pub truth: Shared,
    pub seed: u64,
    pub nodes: u64,
    pub load_ms: u64,
    /// Of every hundred jobs, how many have processes that misbehave (`truth::Adversity`).
    pub adversarial_percent: u64,
    /// Set when the load has ended: the faults stop and heal.
    pub ended: Arc<AtomicBool>,
}

/// A misbehaving job: it crashes (one rank, partway, with a code 1-255 as a real process
/// exits or dies by a signal), ignores the stop signal, or both.
fn adversity(rng: &mut SplitMix64, work_ms: u64) -> Adversity {
    let crashes = rng.chance(60);
    let crash = crashes.then(|| Crash {
        rank: rng.below(2) as u32,
        after_ms: rng.range(1, work_ms),
        code: rng.range(1, 256) as i32,
    });
    let ignores_stops = !crashes || rng.chance(25);
    Adversity { crash, ignores_stops }
}

fn rng_for(seed: u64) -> SplitMix64 {
    // Its own stream: the faults draw from the seed itself.
    SplitMix64::new(seed ^ 0x6c6f_6164)
}

/// Where the load's topology setup stands (`Load::set_topology`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    Levels,
    Domains,
    Done,
}

impl Load {
    pub async fn run(self) -> turmoil::Result {
        let mut rng = rng_for(self.seed);
        let mut acked = Acked::default();
        self.set_up(&mut rng).await;
        let mut topology = Topology::Levels;
        let mut n = 0u64;
        while crate::now_ms() < self.load_ms && n < MAX_JOBS {
            tokio::time::sleep(Duration::from_millis(rng.range(200, 3_000))).await;
            if topology != Topology::Done {
                topology = self.set_topology(&mut rng, topology).await;
            }
            self.free_journals(&mut rng, false).await;
            match rng.below(100) {
                0..60 => {
                    n += 1;
                    self.submit(&mut rng, n, &mut acked).await;
                }
                60..72 => self.cancel(&mut rng, &mut acked).await,
                72..80 => self.rewrite_quota(&mut rng, &mut acked).await,
                80..83 => self.maintenance(&mut rng, n).await,
                83..85 => self.gpu_fault(&mut rng).await,
                85..87 => self.fill_journal(&mut rng),
                _ => self.read_check(&mut rng, &acked).await,
            }
        }
        // Faults heal as the load ends.
        self.free_journals(&mut rng, true).await;
        self.ended.store(true, Ordering::SeqCst);
        self.truth.record(format!("load ends: {} submits acknowledged", acked.submits.len()));
        self.final_check(&acked).await;
        Ok(())
    }

    /// A member drawn at random, as the replica of the newest term lists them: as a client
    /// given the cluster's addresses (`baton cluster info`) does not ask the spare (the
    /// operator's, `operator`), which can only fail.
    fn pick(&self, rng: &mut SplitMix64) -> Option<Hosted> {
        let all = self.handles.hosted();
        let newest = all.iter().map(|h| h.replica.metrics()).max_by_key(|m| m.term)?;
        let members: Vec<&Hosted> = all.iter().filter(|h| newest.members.contains_key(&h.replica.id())).collect();
        let from = if members.is_empty() { all.iter().collect() } else { members };
        Some(from[rng.below(from.len() as u64) as usize].clone())
    }

    /// One write through a random replica; its answer if it was committed in time.
    async fn write(&self, rng: &mut SplitMix64, op: Op) -> Option<Response> {
        let r = self.pick(rng)?;
        let cmd = Command { now_ms: crate::wall_ms(), op };
        match within(r.write(cmd)).await {
            Some(Some(Ok(resp))) => Some(resp),
            _ => None,
        }
    }

    /// Writes `op` until it is acknowledged (the setup must land).
    async fn write_until_acked(&self, rng: &mut SplitMix64, op: Op) {
        loop {
            if self.write(rng, op.clone()).await.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn set_up(&self, rng: &mut SplitMix64) {
        let cohort = Cohort { name: Name::lit("all"), parent: None, fair_sharing: false };
        self.write_until_acked(rng, Op::PutCohort(cohort)).await;
        let total = self.nodes * GPUS_PER_NODE;
        // Two queues guaranteed most of the cluster; the third only borrows.
        for (q, nominal) in QUEUES.iter().zip([total * 3 / 8, total * 3 / 8, 0]) {
            self.write_until_acked(rng, Op::PutQueue(queue(q, nominal))).await;
        }
        // Usage over time (decisions.md section 12): decayed usage orders equals, and the
        // borrowing queue's users may hold a quarter of the cluster each; every replica must
        // hold the same numbers (the state digests compare them).
        let usage = baton_model::usage::UsageSettings { half_life_ms: Some(600_000), ..Default::default() };
        self.write_until_acked(rng, Op::SetUsage(usage)).await;
        let limit = Resources::of(&[("gpu", total / 4)]);
        self.write_until_acked(rng, Op::SetUserLimit { queue: Name::lit(QUEUES[2]), limit }).await;
        let nodes = (1..=self.nodes)
            .map(|i| NodeSpec {
                name: Name::lit(&format!("n{i}")),
                pool: Name::lit("default"),
                rack: Some(Name::lit(&format!("rack{}", i % crate::faults::RACKS))),
                labels: BTreeMap::new(),
                resources: Resources::of(&[
                    ("gpu", GPUS_PER_NODE),
                    ("cpu", 64),
                    ("memory", crate::truth::NODE_MEMORY_BYTES),
                    (SLICE_PROFILE, u64::from(crate::truth::NODE_SLICES)),
                ]),
                gpus: Vec::new(),
                agent_addr: String::new(),
            })
            .collect();
        self.write_until_acked(rng, Op::RegisterNodes(nodes)).await;
        self.truth.record("set up");
    }

    /// Topology levels (decisions.md section 10): two NVLink domains in each rack; some
    /// gangs require one (`job`), so placement, preemption and the plan checker meet them.
    /// Asked once per step of the load until both writes land: a cluster on an older build
    /// holds them back until every replica is upgraded (`upgrades`), and meanwhile refuses
    /// the submits that name a level, as it refuses other writes it cannot take.
    async fn set_topology(&self, rng: &mut SplitMix64, at: Topology) -> Topology {
        if at == Topology::Levels {
            let levels = vec![level("nvlink"), level("rack")];
            if self.write(rng, Op::SetTopologyLevels(levels)).await.is_none() {
                return at;
            }
        }
        let domains = (1..=self.nodes)
            .map(|i| {
                let nvlink = format!("x{}", (i / crate::faults::RACKS) % 2);
                (Name::lit(&format!("n{i}")), BTreeMap::from([(level("nvlink"), Name::lit(&nvlink))]))
            })
            .collect();
        if self.write(rng, Op::SetNodeDomains(domains)).await.is_none() {
            return Topology::Domains;
        }
        self.truth.record("topology set");
        Topology::Done
    }

    async fn submit(&self, rng: &mut SplitMix64, n: u64, acked: &mut Acked) {
        let name = format!("j{n}");
        let work = self.work(rng, &name);
        self.truth.lock().work.insert(name.clone(), work);
        let mut spec = job(rng, &name);
        let request_id = Some(format!("req-{n}"));
        let earlier: Vec<&String> = acked.submits.keys().chain(acked.arrays.keys()).collect();
        let mut waits = String::new();
        let mut after = Vec::new();
        if !earlier.is_empty() && rng.chance(15) {
            let on = earlier[rng.below(earlier.len() as u64) as usize].clone();
            let when = When::ALL[rng.below(When::ALL.len() as u64) as usize];
            waits = format!(" (after {}:{on})", when.as_str());
            after.push(After { job: JobRef::Name(Name::lit(&on)), when });
        }
        let array = rng.chance(10).then(|| array_spec(rng));
        // One submit in six is an elastic gang of 2 to 4 replicas (section 13): shrunk as a
        // victim, grown back, each resize a new attempt.
        let elastic = (array.is_none() && rng.chance(16)).then(|| {
            let replicas = rng.range(2, 5) as u32;
            spec.tasks[0].replicas = replicas;
            ElasticSpec { task: 0, min_replicas: rng.range(1, u64::from(replicas)) as u32 }
        });
        let op = match (array, elastic) {
            (Some(array), _) => {
                self.elements_work(rng, &name, &array);
                Op::SubmitArray { spec, array, request_id, run_as: None, after }
            }
            (None, Some(elastic)) => Op::SubmitElastic { spec, elastic, request_id, run_as: None, after },
            (None, None) if after.is_empty() => Op::Submit { spec, request_id },
            (None, None) => Op::SubmitAfter { spec, request_id, run_as: None, after },
        };
        let Some(Ok(applied)) = self.write(rng, op).await else { return };
        let Outcome::Submitted { job, .. } = applied.outcome else { return };
        let mut t = self.truth.lock();
        t.waiting_submits += u64::from(!waits.is_empty());
        t.elastic += u64::from(elastic.is_some());
        match array {
            Some(a) => {
                t.arrays += 1;
                drop(t);
                self.truth.record(format!("array {name} {}{waits} acknowledged: id {job}", a.spelled()));
                acked.arrays.insert(name, job);
            }
            None => {
                drop(t);
                self.truth.record(format!("submit {name}{waits} acknowledged: job {job}"));
                acked.submits.insert(name, job);
            }
        }
    }

    /// The work of the job named `name`. Its adversity is drawn from a stream of the job's
    /// own (the seed and its name), so that drawing it changes nothing else the load draws.
    fn work(&self, rng: &mut SplitMix64, name: &str) -> JobWork {
        let work_ms = rng.range(WORK_MS.0, WORK_MS.1);
        let checkpoint_ms = rng.range(CHECKPOINT_MS.0, CHECKPOINT_MS.1);
        let mut own = SplitMix64::new(self.seed ^ crate::history::hash(name.as_bytes()));
        let adversity =
            if own.chance(self.adversarial_percent) { adversity(&mut own, work_ms) } else { Adversity::default() };
        JobWork { work_ms, checkpoint_ms, adversity }
    }

    /// Each element's work, by its name (the agents look it up).
    fn elements_work(&self, rng: &mut SplitMix64, name: &str, a: &ArraySpec) {
        let mut t = self.truth.lock();
        for index in a.first..=a.last() {
            let element = format!("{name}-{index}");
            let work = self.work(rng, &element);
            t.work.insert(element, work);
        }
    }

    /// A window on one or two nodes, starting seconds to a minute from now for up to two
    /// minutes; one that overlaps another is refused, and that is fine.
    async fn maintenance(&self, rng: &mut SplitMix64, n: u64) {
        let first = rng.range(1, self.nodes + 1);
        let mut nodes = vec![Name::lit(&format!("n{first}"))];
        if self.nodes > 1 && rng.chance(30) {
            nodes.push(Name::lit(&format!("n{}", first % self.nodes + 1)));
        }
        let start_ms = crate::wall_ms() + rng.range(5_000, 60_000);
        let end_ms = start_ms + rng.range(10_000, 120_000);
        let name = Name::lit(&format!("w{n}-{}", rng.below(1_000)));
        let spec = WindowSpec { name: name.clone(), nodes, start_ms, end_ms };
        let answer = match self.write(rng, Op::CreateMaintenance(spec)).await {
            Some(Ok(_)) => {
                self.truth.lock().windows += 1;
                "acknowledged".to_string()
            }
            Some(Err(e)) => format!("refused: {e}"),
            None => "not acknowledged".to_string(),
        };
        self.truth.record(format!("maintenance window {name} on {first}: {answer}"));
    }

    /// A GPU found unhealthy (decisions.md section 14), as an operator or an agent's report
    /// records it; or, one time in three, a GPU cleared (most often one that was not marked,
    /// which changes nothing).
    async fn gpu_fault(&self, rng: &mut SplitMix64) {
        let node = Name::lit(&format!("n{}", rng.range(1, self.nodes + 1)));
        let gpu = rng.below(GPUS_PER_NODE) as u32;
        let fault = (!rng.chance(33)).then(|| format!("XID {}", [48, 79, 94][rng.below(3) as usize]));
        let what = if fault.is_some() { "unhealthy" } else { "healthy" };
        let answer = match self.write(rng, Op::SetGpuHealth { node: node.clone(), gpu, fault }).await {
            Some(Ok(_)) => {
                if what == "unhealthy" {
                    self.truth.lock().gpu_faults += 1;
                }
                "acknowledged".to_string()
            }
            Some(Err(e)) => format!("refused: {e}"),
            None => "not acknowledged".to_string(),
        };
        self.truth.record(format!("GPU {gpu} of {node} {what}: {answer}"));
    }

    /// A node's agent journal fills up for a while (a full disk): its agent starts nothing
    /// meanwhile and tells the leader of each start it refuses, which takes the node out.
    fn fill_journal(&self, rng: &mut SplitMix64) {
        let node = format!("n{}", rng.range(1, self.nodes + 1));
        let for_ms = rng.range(1_000, 20_000);
        self.truth.lock().full_journals.insert(node.clone(), crate::now_ms() + for_ms);
        self.truth.record(format!("fault: {node}'s agent journal is full for {for_ms} ms"));
    }

    /// A person frees the full journal disks whose time is up (`all`: every one) and
    /// uncordons their nodes, which the leader took out if their agents refused a start.
    async fn free_journals(&self, rng: &mut SplitMix64, all: bool) {
        let now = crate::now_ms();
        let freed: Vec<String> = {
            let mut t = self.truth.lock();
            let due: Vec<String> =
                t.full_journals.iter().filter(|(_, until)| all || **until <= now).map(|(n, _)| n.clone()).collect();
            for n in &due {
                t.full_journals.remove(n);
            }
            due
        };
        for node in freed {
            self.truth.record(format!("heal: {node}'s agent journal has room again; it is uncordoned"));
            self.write_until_acked(rng, Op::Cordon { node: Name::lit(&node), cordoned: false }).await;
        }
    }

    async fn cancel(&self, rng: &mut SplitMix64, acked: &mut Acked) {
        let arrays: Vec<u64> = acked.arrays.values().copied().collect();
        if !arrays.is_empty() && rng.chance(20) {
            let array = arrays[rng.below(arrays.len() as u64) as usize];
            if let Some(Ok(_)) = self.write(rng, Op::CancelArray { array }).await {
                self.truth.record(format!("cancel of array {array} acknowledged"));
                acked.array_cancels.insert(array);
            }
            return;
        }
        let ids: Vec<u64> = acked.submits.values().copied().collect();
        if ids.is_empty() {
            return;
        }
        let job = ids[rng.below(ids.len() as u64) as usize];
        if let Some(Ok(_)) = self.write(rng, Op::Cancel { job }).await {
            self.truth.record(format!("cancel of job {job} acknowledged"));
            acked.cancels.insert(job);
        }
    }

    async fn rewrite_quota(&self, rng: &mut SplitMix64, acked: &mut Acked) {
        let q = QUEUES[rng.below(2) as usize];
        let nominal = rng.range(1, self.nodes * GPUS_PER_NODE / 2);
        let ok = matches!(self.write(rng, Op::PutQueue(queue(q, nominal))).await, Some(Ok(_)));
        self.truth.record(format!("quota of {q} to {nominal}: acknowledged {ok}"));
        acked.quotas.entry(q.to_string()).or_default().push((nominal, ok));
    }

    /// A linearizable read sees every submit acknowledged before it began.
    async fn read_check(&self, rng: &mut SplitMix64, acked: &Acked) {
        let Some(r) = self.pick(rng) else { return };
        let expected = acked.submits.clone();
        if let Some(Some(Ok(missing))) = within(r.read(move |s| missing_jobs(s, &expected))).await {
            if !missing.is_empty() {
                let at = crate::now_ms();
                self.truth.lock().violation(
                    at,
                    format!("a linearizable read on r{} misses acknowledged {missing:?}", r.replica.id()),
                );
            }
        }
    }

    /// After the faults heal: every acknowledged write is in the state.
    async fn final_check(&self, acked: &Acked) {
        let deadline = crate::now_ms() + SETTLE_MS;
        let mut rng = rng_for(self.seed.wrapping_add(1));
        while crate::now_ms() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Some(r) = self.pick(&mut rng) else { continue };
            let (submits, cancels, quotas) = (acked.submits.clone(), acked.cancels.clone(), acked.quotas.clone());
            let (arrays, array_cancels) = (acked.arrays.clone(), acked.array_cancels.clone());
            let read = r.read(move |s| {
                let mut lost = lost_writes(s, &submits, &cancels, &quotas);
                lost.extend(lost_array_writes(s, &arrays, &array_cancels));
                lost
            });
            if let Some(Some(Ok(lost))) = within(read).await {
                let at = crate::now_ms();
                let mut t = self.truth.lock();
                for l in lost {
                    t.violation(at, l);
                }
                t.history.record(at, "final read done");
                return;
            }
        }
        let at = crate::now_ms();
        let replicas = crate::replica::describe(&self.handles);
        self.truth
            .lock()
            .violation(at, format!("no linearizable read within {SETTLE_MS} ms after the faults healed; {replicas}"));
    }
}

async fn within<T>(f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), f).await.ok()
}

/// A queue of the cohort guaranteed `nominal_gpus` and the CPUs and memory that come with
/// them on a node (so its jobs that use no GPU may preempt within it too).
fn queue(name: &str, nominal_gpus: u64) -> QueueSpec {
    let mut q = QueueSpec::named(name);
    q.cohort = Some(Name::lit("all"));
    let per_gpu_memory = crate::truth::NODE_MEMORY_BYTES / GPUS_PER_NODE;
    let nominal = Resources::of(&[
        ("gpu", nominal_gpus),
        ("cpu", nominal_gpus * 64 / GPUS_PER_NODE),
        ("memory", nominal_gpus * per_gpu_memory),
        (SLICE_PROFILE, nominal_gpus * u64::from(crate::truth::NODE_SLICES) / GPUS_PER_NODE),
    ]);
    let quota = PoolQuota { nominal, ..PoolQuota::default() };
    q.quotas.insert(Name::lit("default"), quota);
    q
}

fn job(rng: &mut SplitMix64, name: &str) -> JobSpec {
    // Three jobs in ten use no GPU: CPUs and a share of a node's memory, suspended in place
    // when preempted (decisions.md section 7), so suspensions, resumes in place and memory
    // that a suspension keeps happen under every fault.
    let cpu_only = rng.chance(30);
    let resources = if cpu_only {
        Resources::of(&[("cpu", rng.range(16, 48)), ("memory", rng.range(64, 384) << 30)])
    } else if rng.chance(20) {
        // One GPU job in five asks for MIG slices instead (decisions.md section 11).
        Resources::of(&[(SLICE_PROFILE, rng.range(1, 4)), ("cpu", 4)])
    } else if rng.chance(20) {
        // And one in five of the rest a fraction of a shared GPU per replica (section 11).
        let mut r = Resources::of(&[("cpu", 4)]);
        r.set_gpus_milli(250 * rng.range(1, 4));
        r
    } else {
        Resources::of(&[("gpu", rng.range(1, GPUS_PER_NODE + 1)), ("cpu", 4)])
    };
    let preemption_mode = match () {
        _ if cpu_only => PreemptionMode::Suspend,
        _ if rng.chance(70) => PreemptionMode::Checkpoint,
        _ => PreemptionMode::Requeue,
    };
    let replicas = rng.range(1, 3) as u32;
    // One gang in four requires one NVLink domain (decisions.md section 10).
    let topology = (replicas > 1 && rng.chance(25))
        .then(|| baton_model::topology::LevelNeed::parse("required=nvlink").expect("valid"))
        .flatten();
    JobSpec {
        name: Name::lit(name),
        queue: Name::lit(QUEUES[rng.below(QUEUES.len() as u64) as usize]),
        priority: PriorityRef::Value(rng.range(1, 100) as i32),
        tasks: vec![TaskSpec { name: Name::lit("main"), replicas, resources, pools: None }],
        pools: None,
        topology,
        preemption_mode,
        grace_ms: GRACE_MS,
        min_runtime_ms: 0,
        // Some jobs declare a time limit, so a window ahead is open to them.
        time_limit_ms: rng.chance(20).then(|| rng.range(WORK_MS.0, WORK_MS.1) * 2),
        command: vec!["work".into()],
        env: BTreeMap::new(),
        checkpoint_signal: None,
    }
}

fn level(name: &str) -> baton_model::topology::LevelName {
    baton_model::topology::LevelName::new(name).expect("valid")
}

/// 2 to 12 elements, from 0 or from a few on, one time in three without `max_running`.
fn array_spec(rng: &mut SplitMix64) -> ArraySpec {
    let max_running = (!rng.chance(33)).then(|| rng.range(1, 4) as u32);
    ArraySpec { first: rng.below(3) as u32 * 10, count: rng.range(2, 13) as u32, max_running }
}

/// Every acknowledged array is kept; a cancelled one has no unfinished element.
fn lost_array_writes(s: &State, arrays: &BTreeMap<String, u64>, cancels: &BTreeSet<u64>) -> Vec<String> {
    let mut lost: Vec<String> = arrays
        .iter()
        .filter(|(_, id)| s.array(**id).is_none())
        .map(|(n, _)| format!("acknowledged array {n} lost"))
        .collect();
    for id in cancels {
        if let Some(a) = s.array(*id)
            && !a.live.is_empty()
        {
            lost.push(format!(
                "array {} has {} unfinished elements after its cancel was acknowledged",
                a.spec.name,
                a.live.len()
            ));
        }
    }
    lost
}

fn missing_jobs(s: &State, expected: &BTreeMap<String, u64>) -> Vec<String> {
    expected.iter().filter(|(_, id)| s.job(**id).is_none()).map(|(n, _)| n.clone()).collect()
}

fn lost_writes(
    s: &State,
    submits: &BTreeMap<String, u64>,
    cancels: &BTreeSet<u64>,
    quotas: &BTreeMap<String, Vec<(u64, bool)>>,
) -> Vec<String> {
    let mut lost: Vec<String> =
        missing_jobs(s, submits).into_iter().map(|n| format!("acknowledged submit of {n} lost")).collect();
    for id in cancels {
        if s.job(*id).is_some_and(|j| !j.state.is_finished()) {
            lost.push(format!("job {id} runs on after its cancel was acknowledged"));
        }
    }
    for (q, writes) in quotas {
        // The last acknowledged value, or any written after it (those may have landed).
        let Some(last) = writes.iter().rposition(|(_, ok)| *ok) else { continue };
        let allowed: Vec<u64> = writes[last..].iter().map(|(v, _)| *v).collect();
        let now = s.queues().get(&Name::lit(q)).map(|q| q.nominal("default").get("gpu"));
        if !now.is_some_and(|v| allowed.contains(&v)) {
            lost.push(format!("queue {q} has nominal {now:?} GPUs; acknowledged was {}", writes[last].0));
        }
    }
    lost
}
