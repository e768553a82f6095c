//! The jobs of a chaos run. Queue `batch` has no GPUs of its own and borrows all it runs on
//! from `prod`, which owns every GPU: each `interactive` job of `prod` that finds no room
//! reclaims GPUs from `train` gangs of `batch`, which checkpoint, wait and resume. Some
//! gangs' ranks finish apart (rank 1 exits 0 while rank 0 runs on: issue 9's item 4), and
//! some gangs ask for preemption mode `suspend`, which a job with GPUs gets as checkpoint
//! and stop (docs/policy.md: a stopped CUDA process keeps its GPU memory).

use std::path::Path;

use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::{Cohort, JobSpec, PreemptionMode, Queue, SubmitRequest};

use crate::rng::Rng;

/// Each step of a workload, in milliseconds.
const STEP_MS: u64 = 50;
/// The grace every job gets to checkpoint once signalled. The workload saves within a
/// step's poll (10 ms); 5 s leaves room for a loaded machine while keeping the verdict's
/// preemption bound (grace plus 4 heartbeat timeouts) tight: the API's default, 30 s,
/// would let a stop hang for 42 s before it counts.
pub const GRACE_MS: u64 = 5_000;
/// Share of two-rank gangs whose rank 1 runs fewer steps than rank 0 (a third to a half).
const UNEVEN_PERCENT: u64 = 40;
/// Share of gangs that ask for preemption mode `suspend`.
const SUSPEND_PERCENT: u64 = 20;

/// The cohort and queues a run needs; `gpus` is the cluster's total.
pub fn setup(gpus: u64) -> (Cohort, Vec<Queue>) {
    let cohort = Cohort { name: "lab".into(), ..Default::default() };
    let queue = |name: &str, nominal: u64| Queue { cohort: "lab".into(), ..gpu_queue(name, nominal) };
    (cohort, vec![queue("prod", gpus), queue("batch", 0)])
}

/// Draws the run's jobs.
pub struct Load {
    rng: Rng,
    made: u32,
    command: Vec<String>,
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
        Load { rng: Rng::new(seed ^ 0x10ad), made: 0, command }
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
        req
    }

    /// An interactive job of `prod`: 1 to 4 GPUs, 0.5 to 1.5 seconds of work.
    pub fn interactive(&mut self) -> SubmitRequest {
        let gpus = self.rng.range(1, 4);
        let steps = self.rng.range(10, 30);
        self.job("urgent", "prod", "interactive", 1, gpus, steps)
    }

    /// The next job of the mix: mostly training, a third interactive.
    pub fn any(&mut self) -> SubmitRequest {
        if self.rng.chance(35) { self.interactive() } else { self.train() }
    }

    fn job(&mut self, kind: &str, queue: &str, class: &str, replicas: u32, gpus: u64, steps: u64) -> SubmitRequest {
        self.made += 1;
        let name = format!("{kind}-{}", self.made);
        let mut command = self.command.clone();
        command.push(steps.to_string());
        let spec = JobSpec { grace_ms: Some(GRACE_MS), ..gpu_job(&name, queue, class, replicas, gpus, command) };
        // The name is unique in the run: retrying a submit with it as the request id cannot
        // create a second job.
        SubmitRequest { spec: Some(spec), request_id: name, run_as: String::new() }
    }
}
