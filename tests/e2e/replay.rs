//! Replays a scenario file on a real cluster, on a scaled clock, and checks its expectations
//! through the client API. Jobs are real processes: a shell loop that counts scenario
//! seconds, checkpoints on SIGTERM (and resumes from it), and ends on the scenario's
//! `duration`, `finish` or `fail`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use baton_proto::convert::{class_to_proto, cohort_to_proto, job_spec_to_proto, job_state_from_proto, queue_to_proto};
use baton_proto::v1::{CordonRequest, Empty, JobRef, ListJobsRequest, SubmitRequest};
use baton_proto::words::Word;
use baton_sim::scenario::{Action, Expect, JobExpect, Scenario};

use baton_chaos::cluster::{Cluster, NodeArgs, Timing};

/// Real milliseconds per scenario second.
pub const SCALE_MS: u64 = 50;
/// How long an expectation may take to come true after its time (real processes stop,
/// report, and are replaced; the simulator does it in zero time).
const SETTLE_MS: u64 = 12_000;
/// A loop turn of a job longer than this was suspended, not running (see `command`).
const SUSPENDED_TURN_MS: u64 = 400;

/// Leases and node loss slower than a cluster's default. A replay checks a scenario's policy
/// outcome, in which no node is lost unless the scenario says so; on a loaded machine (CI runs
/// two replays at once beside other tests) a renewal was seen to come later than a 1.2 s lease,
/// the replica's watchdog stopped it, and the job counted an attempt the scenario did not have.
fn replay_timing() -> Timing {
    Timing { heartbeat_timeout_ms: 9_000, lease_ms: 4_000, ..Timing::default() }
}

pub fn load(path: &str) -> Scenario {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    baton_sim::parse::parse(path, &text).unwrap_or_else(|e| panic!("{e}"))
}

pub fn nodes(s: &Scenario) -> Vec<NodeArgs> {
    s.nodes
        .iter()
        .map(|n| {
            let n = &n.v;
            NodeArgs {
                name: n.name.to_string(),
                pool: n.pool.to_string(),
                rack: n.rack.as_ref().map(|r| r.to_string()).unwrap_or_default(),
                gpus: n.resources.get("gpu"),
                // An agent offers a count of whole CPUs; the scenario holds thousandths.
                cpu: n.resources.get("cpu") / baton_model::quantity::units_per_one("cpu"),
                memory: n.resources.get("memory"),
            }
        })
        .collect()
}

/// The job's program: it counts scenario seconds of its own run time, one per `SCALE_MS`.
/// Its files are named after `$BATON_JOB`, so that each element of an array has its own.
///
/// It counts by the clock, not by loop turns: each turn forks `sleep`, and on a loaded machine
/// 100 turns of 50 ms took 6.5 s, so ten array elements run three at a time ended
/// seconds after the scenario's time and the replay failed (CI, stop 59). A turn much longer
/// than `SCALE_MS` is a suspension (SIGSTOP, a frozen cgroup), not run time: it counts one.
fn command(c: &Cluster, duration_ms: Option<u64>) -> Vec<String> {
    let steps = duration_ms.map_or(1_000_000, |d| d.div_ceil(1000));
    let dir = c.path("").display().to_string();
    let (finish, fail, starts) =
        (format!("{dir}/finish-$BATON_JOB"), format!("{dir}/fail-$BATON_JOB"), format!("{dir}/starts-$BATON_JOB"));
    let step_s = SCALE_MS as f64 / 1000.0;
    let (step_ns, pause_ns) = (SCALE_MS * 1_000_000, SUSPENDED_TURN_MS * 1_000_000);
    let script = format!(
        r#"echo "$BATON_ATTEMPT" >> "{starts}"
i=0
[ -n "$BATON_RESUME" ] && [ -f "$BATON_CHECKPOINT_DIR/step" ] && i=$(cat "$BATON_CHECKPOINT_DIR/step")
trap 'echo $i > "$BATON_CHECKPOINT_DIR/step.tmp" && mv "$BATON_CHECKPOINT_DIR/step.tmp" "$BATON_CHECKPOINT_DIR/step"; exit 0' TERM
first=$i ran=0 last=$(date +%s%N)
while [ $i -lt {steps} ]; do
  [ -e "{finish}" ] && exit 0
  [ -e "{fail}" ] && exit 1
  sleep {step_s}
  now=$(date +%s%N)
  turn=$((now - last)) last=$now
  [ $turn -gt {pause_ns} ] && turn={step_ns}
  ran=$((ran + turn))
  i=$((first + ran / {step_ns}))
done"#
    );
    vec!["sh".into(), "-c".into(), script]
}

fn touch(c: &Cluster, file: &str) {
    std::fs::write(c.path(file), b"").unwrap();
}

/// What happens at one instant: the steps, then the expectations (polled until they hold).
#[derive(Default)]
struct Instant_ {
    steps: Vec<Action>,
    expects: Vec<Expect>,
}

pub struct Replay {
    /// Kill the leader right after the steps at this scenario time.
    pub kill_leader_at_ms: Option<u64>,
}

impl Replay {
    pub async fn run(&self, s: &Scenario) -> Cluster {
        let mut c = Cluster::start_with(crate::BATON.as_ref(), &nodes(s), &replay_timing()).await;
        let mut api = c.client().await;
        for cl in &s.classes {
            api.put_class(class_to_proto(&cl.v)).await.unwrap();
        }
        for co in &s.cohorts {
            api.put_cohort(cohort_to_proto(&co.v)).await.unwrap();
        }
        for q in &s.queues {
            api.put_queue(queue_to_proto(&q.v)).await.unwrap();
        }
        let mut plan: BTreeMap<u64, Instant_> = BTreeMap::new();
        for st in &s.timeline {
            plan.entry(st.at_ms).or_default().steps.push(st.action.clone());
        }
        for e in &s.expect {
            plan.entry(e.at_ms).or_default().expects.push(e.clone());
        }
        let mut victims: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let t0 = Instant::now();
        for (at_ms, inst) in plan {
            let due = t0 + Duration::from_millis(at_ms / 1000 * SCALE_MS);
            tokio::time::sleep_until(due.into()).await;
            for a in &inst.steps {
                step(&mut c, a).await;
            }
            if self.kill_leader_at_ms == Some(at_ms) {
                let i = c.kill_leader().await;
                eprintln!("killed the leader, replica {} at t={}s", i + 1, at_ms / 1000);
            }
            for e in &inst.expects {
                settle(&c, e, &mut victims).await;
            }
        }
        c
    }
}

async fn step(c: &mut Cluster, a: &Action) {
    let job = |name: &str| JobRef { name: name.to_string(), ..Default::default() };
    match a {
        Action::Submit(sub) => {
            let mut spec = job_spec_to_proto(&sub.spec);
            spec.command = command(c, sub.duration_ms);
            if let Some(e) = sub.elastic {
                spec.tasks[e.task as usize].min_replicas = Some(e.min_replicas);
            }
            let req = SubmitRequest {
                spec: Some(spec),
                request_id: format!("e2e-{}", sub.spec.name),
                run_as: String::new(),
                after: sub.after.iter().map(baton_proto::convert::after_to_proto).collect(),
                array: sub.array.as_ref().map(baton_proto::convert::array_spec_to_proto),
            };
            call!(c, |api| api.submit(req.clone()));
        }
        Action::Finish(j) => touch(c, &format!("finish-{}", j.v)),
        Action::Fail(j) => touch(c, &format!("fail-{}", j.v)),
        Action::Cancel(j) => drop(call!(c, |api| api.cancel_job(job(&j.v.to_string())))),
        Action::Pause(j) => drop(call!(c, |api| api.pause_job(job(&j.v.to_string())))),
        Action::Resume(j) => drop(call!(c, |api| api.resume_job(job(&j.v.to_string())))),
        Action::Cordon(n) => drop(call!(c, |api| api.cordon(CordonRequest { node: n.v.to_string(), cordoned: true }))),
        Action::Uncordon(n) => {
            drop(call!(c, |api| api.cordon(CordonRequest { node: n.v.to_string(), cordoned: false })))
        }
        Action::NodeDown(n) => c.kill_agent(n.v.as_str()),
        Action::NodeUp(n) => c.start_agent(n.v.as_str()),
        Action::UpdateQueue(..) => panic!("update_queue is not replayed end to end yet"),
        Action::Maintenance(..) => panic!("maintenance is not replayed end to end yet"),
        Action::Gpu(g) => {
            let (healthy, error) = (g.v.error.is_none(), g.v.error.clone().unwrap_or_default());
            let req = baton_proto::v1::SetGpuHealthRequest { node: g.v.node.to_string(), gpu: g.v.gpu, healthy, error };
            drop(call!(c, |api| api.set_gpu_health(req.clone())))
        }
    }
}

/// Polls until every check of `e` holds, or fails with the last differences.
async fn settle(c: &Cluster, e: &Expect, victims: &mut BTreeMap<String, BTreeSet<String>>) {
    let deadline = Instant::now() + Duration::from_millis(SETTLE_MS);
    let mut api = c.client().await;
    loop {
        // During a failover replicas answer UNAVAILABLE for a moment: ask again, elsewhere.
        let read = async {
            let jobs = api.list_jobs(ListJobsRequest::default()).await?.into_inner().jobs;
            let queues = api.list_queues(Empty {}).await?.into_inner().queues;
            Ok::<_, tonic::Status>((jobs, queues))
        };
        let (jobs, queues) = match read.await {
            Ok(r) => r,
            Err(status) => {
                assert!(Instant::now() < deadline, "at t={}s: the cluster did not answer: {status}", e.at_ms / 1000);
                tokio::time::sleep(Duration::from_millis(50)).await;
                api = c.client().await;
                continue;
            }
        };
        for j in &jobs {
            if !j.preempted_by.is_empty() {
                victims.entry(j.preempted_by.clone()).or_default().insert(j.spec.as_ref().unwrap().name.clone());
            }
        }
        let failures = check(e, &jobs, &queues, victims);
        if failures.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "at t={}s (line {}): {}\nlogs in {}",
            e.at_ms / 1000,
            e.line,
            failures.join("; "),
            c.dir.path().display()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn check(
    e: &Expect,
    jobs: &[baton_proto::v1::Job],
    queues: &[baton_proto::v1::QueueUsage],
    victims: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut f = Vec::new();
    let by_name: BTreeMap<&str, &baton_proto::v1::Job> =
        jobs.iter().map(|j| (j.spec.as_ref().unwrap().name.as_str(), j)).collect();
    for at in &e.jobs {
        let (name, want) = &at.v;
        match by_name.get(name.as_str()) {
            Some(j) => check_job(&mut f, name.as_str(), j, want),
            None => f.push(format!("job {name} not submitted")),
        }
    }
    for at in &e.queues {
        let (name, want) = &at.v;
        assert!(
            want.pools.is_empty() && want.total.nominal.is_none(),
            "line {}: only queue usage is replayed",
            at.line
        );
        let Some(want) = &want.total.usage else { continue };
        let q = queues.iter().find(|q| q.queue.as_ref().is_some_and(|x| x.name == name.as_str()));
        let mut got = baton_model::resources::Resources::new();
        for p in q.map(|q| q.pools.as_slice()).unwrap_or_default() {
            for (k, v) in &p.used.as_ref().unwrap().amounts {
                got.set(k, got.get(k) + v);
            }
        }
        if want.iter().any(|(k, v)| got.get(k) != v) {
            f.push(format!("queue {name} uses {got}, expected {want}"));
        }
    }
    for at in &e.victims_of {
        let (name, want) = &at.v;
        let got: Vec<&str> =
            victims.get(name.as_str()).map(|v| v.iter().map(String::as_str).collect()).unwrap_or_default();
        let mut want: Vec<&str> = want.iter().map(|n| n.as_str()).collect();
        want.sort();
        if got != want {
            f.push(format!("victims of {name} are {got:?}, expected {want:?}"));
        }
    }
    for at in &e.victims_count {
        let (name, want) = &at.v;
        let got = victims.get(name.as_str()).map_or(0, |v| v.len());
        if got != *want as usize {
            f.push(format!("{name} preempted {got} jobs, expected {want}"));
        }
    }
    assert!(e.placed_on.is_empty(), "line {}: placed_on is not replayed end to end", e.line);
    for at in &e.counts {
        let (st, want) = at.v;
        let got = jobs.iter().filter(|j| job_state_from_proto(j.state()) == Some(st)).count();
        if got != want as usize {
            f.push(format!("{got} jobs are {}, expected {want}", st.as_str()));
        }
    }
    f
}

fn check_job(f: &mut Vec<String>, name: &str, j: &baton_proto::v1::Job, want: &JobExpect) {
    assert!(
        want.pool.is_none() && want.nodes.is_none() && want.queue.is_none(),
        "job {name}: only state, gpus, attempt, reason and preempted_by are replayed end to end"
    );
    if let Some(r) = &want.reason
        && !j.reason.contains(r.as_str())
    {
        f.push(format!("{name}'s reason is {:?}, expected it to contain {r:?}", j.reason));
    }
    if let Some(s) = want.state
        && job_state_from_proto(j.state()) != Some(s)
    {
        f.push(format!("{name} is {}, expected {}", j.state().word(), s.as_str()));
    }
    // Expected in thousandths (a fraction of a shared GPU); the replayed stories hold whole
    // GPUs, one per index placed.
    let gpus: usize = j.placements.iter().map(|p| p.gpus.len()).sum();
    if let Some(g) = want.gpus
        && gpus as u64 * 1000 != g
    {
        f.push(format!("{name} holds {gpus} GPUs, expected {}", baton_model::quantity::thousandths(g)));
    }
    if let Some(a) = want.attempt
        && j.attempt != a
    {
        f.push(format!("{name} is at attempt {}, expected {a}", j.attempt));
    }
    if let Some(by) = &want.preempted_by {
        let want_by = by.as_ref().map(|n| n.to_string()).unwrap_or_default();
        if j.preempted_by != want_by {
            f.push(format!("{name} preempted by {:?}, expected {want_by:?}", j.preempted_by));
        }
    }
}
