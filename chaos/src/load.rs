//! The jobs of a chaos run. Queue `batch` has no GPUs of its own and borrows all it runs on
//! from `prod`, which owns every GPU: each `interactive` job of `prod` that finds no room
//! reclaims GPUs from `train` gangs of `batch`, which checkpoint, wait and resume. Some
//! gangs' ranks finish apart (rank 1 exits 0 while rank 0 runs on: issue 9's item 4), and
//! some gangs ask for preemption mode `suspend`, which a job with GPUs gets as checkpoint
//! and stop (docs/policy.md: a stopped CUDA process keeps its GPU memory).
//!
//! Jobs without GPUs are really suspended in place (SIGSTOP, then SIGCONT in the same
//! attempt): `sleepy` jobs of `batch` ask for one CPU, in mode `suspend`, and `cpu-urgent`
//! jobs of `prod` for every CPU of the harness's three nodes, which they cannot have while
//! any `sleepy` job runs without suspending it.
//!
//! A share of every kind does not cooperate (`Load::misbehave`, `baton workload
//! --misbehave`): it ignores its stop signal, leaves a process behind outside its session,
//! or goes on saving checkpoints after it was told to stop. Its name ends with the way it
//! misbehaves (`train-7-escape`), which the checks read.

use std::path::Path;

use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::{ArraySpec, Cohort, JobSpec, PreemptionMode, Queue, Resources, SubmitRequest};

use baton_agent::workload::{Misbehave, unkillable_cgroups};

use crate::rng::Rng;

/// Each step of a workload, in milliseconds.
const STEP_MS: u64 = 50;
/// The grace every job gets to checkpoint once signalled. The workload saves within a
/// step's poll (10 ms); 5 s leaves room for a loaded machine while keeping the verdict's
/// preemption bound (grace plus 4 heartbeat timeouts) tight: the API's default, 30 s,
/// would let a stop hang for 42 s before it counts.
pub const GRACE_MS: u64 = 5_000;
/// Every job's time limit: far longer than any attempt of a run lives (seconds), far shorter
/// than the days a leader's clock jumps ahead (`faults::Fault::LeaderClockAhead`). A
/// replicated clock that followed such a leader would end every running job at its limit
/// (and the checks flag any job that did not succeed, and any event stamped ahead of time).
pub const TIME_LIMIT_MS: u64 = 12 * 3_600_000;
/// Share of two-rank gangs whose rank 1 runs fewer steps than rank 0 (a third to a half).
const UNEVEN_PERCENT: u64 = 40;
/// Share of gangs that ask for preemption mode `suspend`.
const SUSPEND_PERCENT: u64 = 20;
/// Share of training submits that are arrays (decisions.md section 13) of 2 or 3 elements,
/// one or two at a time: each element is a job the checks judge by its name.
const ARRAY_PERCENT: u64 = 15;
/// The CPUs each node offers (an accounting, not the machine's): a `sleepy` job asks for
/// one, each of a `cpu-urgent` job's ranks for all of a node's.
pub const CPUS_PER_NODE: u64 = 2;
/// Shares of the mix (of 100) for the CPU-only jobs: `sleepy` (suspended in place when
/// preempted) and `cpu-urgent` (their preemptors).
const SLEEPY_PERCENT: u64 = 30;
const CPU_URGENT_PERCENT: u64 = 15;
/// A `cpu-urgent` job's ranks: one per node of the harness (`run::Config::new`'s three).
const CPU_URGENT_RANKS: u32 = 3;

/// The cohort and queues a run needs; `gpus` is the cluster's total.
/// `prod` owns the CPUs as well (`cpus`), so that `batch`'s CPU jobs borrow them too.
pub fn setup(gpus: u64, cpus: u64) -> (Cohort, Vec<Queue>) {
    let cohort = Cohort { name: "lab".into(), ..Default::default() };
    let queue = |name: &str, nominal_gpus: u64, nominal_cpus: u64| {
        let mut q = Queue { cohort: "lab".into(), ..gpu_queue(name, nominal_gpus) };
        if let Some(n) = q.quotas[0].nominal.as_mut() {
            n.amounts.insert("cpu".into(), nominal_cpus * MILLI_PER_CPU);
        }
        q
    };
    (cohort, vec![queue("prod", gpus, cpus), queue("batch", 0, 0)])
}

/// The wire carries CPUs in thousandths (docs/policy.md, "Quantities"); an agent offers
/// whole CPUs.
const MILLI_PER_CPU: u64 = 1_000;

/// Resources of `n` CPUs and nothing else.
fn cpus(n: u64) -> Resources {
    Resources { amounts: [("cpu".to_string(), n * MILLI_PER_CPU)].into() }
}

/// The share of jobs that misbehave unless told otherwise (`Load::misbehave`).
pub const ADVERSARIAL_PERCENT: u64 = 15;

/// Draws the run's jobs.
pub struct Load {
    rng: Rng,
    made: u32,
    command: Vec<String>,
    /// Share of jobs that misbehave, and the ways they may.
    adversarial_percent: u64,
    ways: Vec<Misbehave>,
    /// The tag `unkillable` jobs name their frozen cgroups with (`unkillable::Freezer::tag`).
    unkillable_tag: String,
    /// The Unix user jobs run as (`Load::job_user`).
    job_user: Option<String>,
}

/// How a job of the run misbehaves, as its name says (`train-7-escape`, and its array
/// elements `train-7-escape-0`, ...).
pub fn way_of(job: &str) -> Option<Misbehave> {
    let named = |w: &&str| job.ends_with(&format!("-{w}")) || job.contains(&format!("-{w}-"));
    Misbehave::NAMES.into_iter().find(named).and_then(|w| w.parse().ok())
}

impl Load {
    /// Jobs run `baton workload` from `baton`, witnessing into `witness`.
    pub fn new(seed: u64, baton: &Path, witness: &Path) -> Load {
        let command = vec![
            baton.display().to_string(),
            "workload".into(),
            "--witness".into(),
            witness.display().to_string(),
            "--step-ms".into(),
            STEP_MS.to_string(),
            "--steps".into(),
        ];
        Load {
            rng: Rng::new(seed ^ 0x10ad),
            made: 0,
            command,
            adversarial_percent: 0,
            ways: Vec::new(),
            unkillable_tag: "0".into(),
            job_user: None,
        }
    }

    /// Jobs run as `user` (`None`: as the agents' user), but `unkillable` ones as root: a
    /// cgroup of the freezer is root's to make.
    pub fn job_user(mut self, user: Option<String>) -> Load {
        self.job_user = user;
        self
    }

    /// `unkillable` jobs (`Misbehave::Unkillable`) name their frozen cgroups with `tag`.
    pub fn unkillable_tag(mut self, tag: &str) -> Load {
        self.unkillable_tag = tag.to_string();
        self
    }

    /// `percent` of the jobs misbehave, each in one of `ways` drawn at random.
    pub fn misbehave(mut self, percent: u64, ways: &[Misbehave]) -> Load {
        self.adversarial_percent = if ways.is_empty() { 0 } else { percent.min(100) };
        self.ways = ways.to_vec();
        self
    }

    /// A training gang of `batch`: 1 or 2 replicas of 2 or 4 GPUs, 2 to 5 seconds of work;
    /// of two replicas, rank 1 sometimes finishes first (`UNEVEN_PERCENT`); some gangs are
    /// of mode `suspend` (`SUSPEND_PERCENT`).
    pub fn train(&mut self) -> SubmitRequest {
        let replicas = self.rng.range(1, 2) as u32;
        let gpus = 2 * self.rng.range(1, 2);
        let steps = self.rng.range(40, 100);
        let other_ranks_steps = (replicas > 1 && self.rng.chance(UNEVEN_PERCENT)).then(|| steps / self.rng.range(2, 3));
        let mut req = self.job("train", "batch", "train", replicas, gpus, steps);
        let spec = req.spec.as_mut().expect("a spec");
        if let Some(other) = other_ranks_steps {
            spec.command.extend(["--other-ranks-steps".to_string(), other.to_string()]);
        }
        if self.rng.chance(SUSPEND_PERCENT) {
            spec.set_preemption_mode(PreemptionMode::Suspend);
        }
        if self.rng.chance(ARRAY_PERCENT) {
            let count = self.rng.range(2, 3) as u32;
            req.array = Some(ArraySpec { first: 0, count, max_running: self.rng.range(1, 2) as u32 });
        }
        req
    }

    /// An interactive job of `prod`: 1 to 4 GPUs, 0.5 to 1.5 seconds of work.
    pub fn interactive(&mut self) -> SubmitRequest {
        let gpus = self.rng.range(1, 4);
        let steps = self.rng.range(10, 30);
        self.job("urgent", "prod", "interactive", 1, gpus, steps)
    }

    /// A CPU-only job of `batch` in mode `suspend`: one CPU, 4 to 8 seconds of work. Its
    /// preemption suspends it in place (SIGSTOP) and resumes it there (SIGCONT).
    pub fn sleepy(&mut self) -> SubmitRequest {
        let steps = self.rng.range(80, 160);
        let mut req = self.job("sleepy", "batch", "train", 1, 0, steps);
        let spec = req.spec.as_mut().expect("a spec");
        spec.tasks[0].resources = Some(cpus(1));
        spec.set_preemption_mode(PreemptionMode::Suspend);
        req
    }

    /// A CPU-only job of `prod` that wants every node's CPUs (`CPU_URGENT_RANKS` ranks): 0.5
    /// to 1.5 seconds of work. It suspends every `sleepy` job that runs.
    pub fn cpu_urgent(&mut self) -> SubmitRequest {
        let steps = self.rng.range(10, 30);
        let mut req = self.job("cpu-urgent", "prod", "interactive", CPU_URGENT_RANKS, 0, steps);
        req.spec.as_mut().expect("a spec").tasks[0].resources = Some(cpus(CPUS_PER_NODE));
        req
    }

    /// The next job of the mix: 30 % `sleepy`, 15 % `cpu-urgent`; of the rest, a
    /// third interactive, the others training gangs.
    pub fn any(&mut self) -> SubmitRequest {
        let roll = self.rng.range(0, 99);
        if roll < SLEEPY_PERCENT {
            self.sleepy()
        } else if roll < SLEEPY_PERCENT + CPU_URGENT_PERCENT {
            self.cpu_urgent()
        } else if self.rng.chance(35) {
            self.interactive()
        } else {
            self.train()
        }
    }

    fn job(&mut self, kind: &str, queue: &str, class: &str, replicas: u32, gpus: u64, steps: u64) -> SubmitRequest {
        self.made += 1;
        let mut name = format!("{kind}-{}", self.made);
        let mut command = self.command.clone();
        command.push(steps.to_string());
        let mut env = std::collections::HashMap::new();
        let mut run_as = self.job_user.clone().unwrap_or_default();
        if self.adversarial_percent > 0 && self.rng.chance(self.adversarial_percent) {
            let way = self.ways[self.rng.range(0, self.ways.len() as u64 - 1) as usize];
            name = format!("{name}-{}", way.name());
            command.extend(["--misbehave".to_string(), way.name().to_string()]);
            if way == Misbehave::Unkillable {
                env.insert(unkillable_cgroups::TAG_ENV.to_string(), self.unkillable_tag.clone());
                if self.job_user.is_some() {
                    run_as = "root".into();
                }
            }
        }
        let spec = JobSpec {
            grace_ms: Some(GRACE_MS),
            time_limit_ms: Some(TIME_LIMIT_MS),
            env,
            ..gpu_job(&name, queue, class, replicas, gpus, command)
        };
        // The name is unique in the run: retrying a submit with it as the request id cannot
        // create a second job.
        SubmitRequest { spec: Some(spec), request_id: name, run_as, after: Vec::new(), array: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::convert::{job_spec_from_proto, node_from_agent};
    use baton_proto::v1::NodeInfo;

    /// What the model holds of a node offering `CPUS_PER_NODE` CPUs (as the harness starts it).
    fn node_cpus() -> u64 {
        let info = NodeInfo {
            name: "n1".into(),
            resources: [("cpu".to_string(), CPUS_PER_NODE), ("gpu".to_string(), 4)].into(),
            ..Default::default()
        };
        node_from_agent(&info).unwrap().resources.get("cpu")
    }

    fn cpus_per_rank(req: &SubmitRequest) -> u64 {
        let spec = job_spec_from_proto(req.spec.as_ref().unwrap()).unwrap();
        assert_eq!(spec.tasks[0].resources.get("gpu"), 0, "a CPU job asks for no GPU");
        spec.tasks[0].resources.get("cpu")
    }

    #[test]
    fn a_share_of_jobs_misbehaves_each_named_by_its_way() {
        let ways = [Misbehave::IgnoreStop, Misbehave::Escape];
        let mut load = Load::new(1, Path::new("baton"), Path::new("witness")).misbehave(30, &ways);
        let jobs: Vec<JobSpec> = (0..300).map(|_| load.any().spec.unwrap()).collect();
        let way_in = |j: &JobSpec| {
            let at = j.command.iter().position(|a| a == "--misbehave")?;
            Some(j.command[at + 1].clone())
        };
        let bad: Vec<&JobSpec> = jobs.iter().filter(|j| way_in(j).is_some()).collect();
        assert!((60..=120).contains(&bad.len()), "{} of 300 misbehave", bad.len());
        for j in &bad {
            let way = way_in(j).unwrap();
            assert!(ways.iter().any(|w| w.name() == way), "{way}");
            assert!(j.name.ends_with(&format!("-{way}")), "{} misbehaves as {way}", j.name);
        }
        // The checks read the way from a job's name, an array element's too.
        assert_eq!(way_of("train-7-write-after-stop"), Some(Misbehave::WriteAfterStop));
        assert_eq!(way_of("train-7-escape-1"), Some(Misbehave::Escape));
        assert_eq!(way_of("train-7"), None);
        let mut none = Load::new(1, Path::new("baton"), Path::new("witness")).misbehave(30, &[]);
        assert!((0..100).all(|_| way_in(&none.any().spec.unwrap()).is_none()));
    }

    /// An `unkillable` job names its frozen cgroups with the run's tag (the harness's pid),
    /// so that the harness thaws only its own; no other job carries the tag.
    #[test]
    fn an_unkillable_job_carries_the_runs_tag_and_no_other_does() {
        let ways = [Misbehave::Unkillable];
        let mut load = Load::new(2, Path::new("baton"), Path::new("witness")).misbehave(50, &ways).unkillable_tag("77");
        let jobs: Vec<JobSpec> = (0..100).map(|_| load.any().spec.unwrap()).collect();
        fn tagged(j: &JobSpec) -> Option<&str> {
            j.env.get(unkillable_cgroups::TAG_ENV).map(String::as_str)
        }
        let (bad, good): (Vec<&JobSpec>, Vec<&JobSpec>) = jobs.iter().partition(|j| j.name.ends_with("-unkillable"));
        assert!(!bad.is_empty() && !good.is_empty());
        assert!(bad.iter().all(|j| tagged(j) == Some("77")));
        assert!(good.iter().all(|j| tagged(j).is_none()));
        assert!(jobs.iter().all(|j| j.time_limit_ms == Some(TIME_LIMIT_MS)), "every job has the long time limit");
        // The cluster takes the tag: a name of the agent's (`BATON_...`) was refused, and
        // every unkillable job went unacknowledged.
        for j in &bad {
            let env = j.env.clone().into_iter().collect();
            baton_model::runnable::validate_env(&env).unwrap_or_else(|e| panic!("{}: {e}", j.name));
        }
    }

    #[test]
    fn some_training_submits_are_small_arrays() {
        let mut load = Load::new(1, Path::new("baton"), Path::new("witness"));
        let arrays: Vec<ArraySpec> = (0..200).filter_map(|_| load.train().array).collect();
        assert!((15..=50).contains(&arrays.len()), "{} arrays in 200 training submits", arrays.len());
        assert!(arrays.iter().all(|a| (2..=3).contains(&a.count) && (1..=2).contains(&a.max_running)));
    }

    #[test]
    fn a_node_holds_two_sleepy_jobs_or_one_rank_of_a_cpu_urgent_job() {
        let mut load = Load::new(1, Path::new("baton"), Path::new("witness"));
        let sleepy = load.sleepy();
        assert_eq!(sleepy.spec.as_ref().unwrap().preemption_mode(), PreemptionMode::Suspend);
        assert_eq!(CPUS_PER_NODE * cpus_per_rank(&sleepy), node_cpus());
        let urgent = load.cpu_urgent();
        assert_eq!(cpus_per_rank(&urgent), node_cpus());
        assert_eq!(urgent.spec.as_ref().unwrap().tasks[0].replicas, CPU_URGENT_RANKS);
        // `prod` owns every node's CPUs, `batch` none.
        let (_, queues) = setup(12, 3 * CPUS_PER_NODE);
        let owned = |q: &Queue| q.quotas[0].nominal.as_ref().unwrap().amounts["cpu"];
        assert_eq!((owned(&queues[0]), owned(&queues[1])), (3 * node_cpus(), 0));
    }
}
