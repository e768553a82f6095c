//! decisions.md section 14 with real processes: an XID injected on a GPU of a running gang
//! requeues the gang from its checkpoint onto healthy GPUs, while the job on the same node's
//! other GPUs keeps running its first attempt; the GPU is listed unhealthy until an
//! operator clears it.

use std::time::Duration;

use baton_chaos::cluster::{Cluster, NodeArgs};
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::{CordonRequest, Empty, EventKind, JobState, SubmitRequest};

use crate::BATON;

fn submit(name: &str, replicas: u32, gpus: u64, command: Vec<String>) -> SubmitRequest {
    let mut spec = gpu_job(name, "q", "", replicas, gpus, command);
    spec.topology = baton_proto::v1::Topology::Node as i32;
    SubmitRequest { spec: Some(spec), request_id: name.into(), run_as: String::new(), after: Vec::new(), array: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xid_on_a_gangs_gpu_requeues_it_from_its_checkpoint_and_spares_its_neighbour() {
    let nodes = [NodeArgs::gpus("n1", "", 8), NodeArgs::gpus("n2", "", 4)];
    let c = Cluster::start(BATON.as_ref(), &nodes).await;
    call!(c, |api| api.put_queue(gpu_queue("q", 12)));
    // Both jobs on n1 first: n2 is cordoned until they run.
    call!(c, |api| api.cordon(CordonRequest { node: "n2".into(), cordoned: true }));
    let witness = c.path("witness");
    std::fs::create_dir_all(&witness).unwrap();
    let workload: Vec<String> =
        [BATON, "workload", "--witness", &witness.display().to_string(), "--step-ms", "50", "--steps", "600"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    call!(c, |api| api.submit(submit("gang", 2, 2, workload.clone())));
    call!(c, |api| api.submit(submit("serve", 1, 4, workload.clone())));
    let gang = c.wait_job("gang", "running", |j| j.state() == JobState::Running).await;
    let serve = c.wait_job("serve", "running", |j| j.state() == JobState::Running).await;
    assert!(gang.placements.iter().chain(&serve.placements).all(|p| p.node == "n1"), "{gang:?} {serve:?}");
    call!(c, |api| api.cordon(CordonRequest { node: "n2".into(), cordoned: false }));
    // Some steps first.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let bad = gang.placements[0].gpus[0];
    c.inject_gpu_fault("n1", bad, "XID 79");
    let moved = c.wait_job("gang", "running again on n2", |j| j.attempt == 2 && j.state() == JobState::Running).await;
    assert!(moved.placements.iter().all(|p| p.node == "n2"), "onto healthy GPUs: {moved:?}");
    assert!(moved.preempted_by.is_empty(), "not a preemption: {moved:?}");
    assert!(moved.events.iter().any(|e| e.kind() == EventKind::GpuFaultStop), "{:?}", moved.events);
    let serve = c.wait_job("serve", "still running", |j| j.state() == JobState::Running).await;
    assert_eq!(serve.attempt, 1, "the job on n1's other GPUs kept running");

    // Attempt 2 resumed from the checkpoint every rank wrote at the stop.
    let starts = attempt_starts(&witness.join("starts"), "gang 2 ", 2).await;
    let resumed: Vec<&str> = starts.lines().filter(|l| l.starts_with("gang 2 ")).collect();
    for line in resumed {
        let first_step: u64 = line.split(' ').nth(4).unwrap().parse().unwrap();
        assert!(first_step > 0 && line.contains(" resume "), "started from zero: {line}\n{starts}");
    }
    let nodes = call!(c, |api| api.list_nodes(Empty {})).nodes;
    let n1 = nodes.iter().find(|n| n.name == "n1").unwrap();
    assert_eq!(n1.unhealthy_gpus.iter().map(|f| f.gpu).collect::<Vec<_>>(), vec![bad], "{n1:?}");
    let violations = std::fs::read_to_string(witness.join("violations")).unwrap_or_default();
    assert!(violations.is_empty(), "the witness saw:\n{violations}");
}

/// The witness's start records, once `n` of them begin with `prefix` (the leader says
/// Running as soon as it places a job; the processes record their start a moment later).
async fn attempt_starts(path: &std::path::Path, prefix: &str, n: usize) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let starts = std::fs::read_to_string(path).unwrap_or_default();
        if starts.lines().filter(|l| l.starts_with(prefix)).count() >= n {
            return starts;
        }
        assert!(std::time::Instant::now() < deadline, "{n} starts of {prefix:?} not recorded:\n{starts}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
