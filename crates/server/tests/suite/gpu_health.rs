//! Unhealthy GPUs (decisions.md section 14) through the real gateway and API: an agent's
//! report of an XID on a GPU stops the job on it (the agent is told STOP) and leaves the job
//! on the node's other GPUs running; the job is requeued, not preempted, and runs again on
//! healthy GPUs only; `ListNodes` shows the fault; an operator clears it; a passing health
//! check clears only what a check found; bad marks are refused naming the field.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn gpu_report(gpu: u32, error: &str, by_check: bool) -> What {
    What::Gpu(GpuHealth { gpu, healthy: error.is_empty(), error: error.into(), by_check })
}

fn gpus_of(d: &Directive, job: &str) -> Vec<u32> {
    d.assignments.iter().find(|a| a.job == job).map(|a| a.gpus.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_xid_on_a_gpu_stops_its_job_and_spares_the_job_beside_it() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("train", "team-a", "train", 4))).await.unwrap();
    c.submit(submit_of(gpu_job("serve", "team-a", "train", 4))).await.unwrap();
    let d = agent.until("both run", |d| has(d, "train", Action::Run) && has(d, "serve", Action::Run)).await;
    let bad = gpus_of(&d, "train")[1];
    let id = d.assignments.iter().find(|a| a.job == "train").unwrap().job_id;

    agent.report(vec![gpu_report(bad, "XID 79: GPU has fallen off the bus", false)]).await.unwrap();
    let d = agent.until("train is told to stop", |d| has(d, "train", Action::Stop)).await;
    assert!(has(&d, "serve", Action::Run), "serve keeps running: {d:?}");
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    let faults = &nodes[0].unhealthy_gpus;
    assert_eq!((faults.len(), faults[0].gpu, faults[0].by_check), (1, bad, false), "{faults:?}");
    assert!(faults[0].error.contains("XID 79"));
    let stopped =
        What::Stopped(Stopped { job_id: id, attempt: 1, checkpointed: true, rank: 0, cause: 0, ..Default::default() });
    agent.report(vec![stopped]).await.unwrap();
    let mut j = wait_state(&mut c, "train", JobState::Pending).await;
    assert!(j.has_checkpoint && j.preempted_by.is_empty(), "requeued from its checkpoint, not preempted: {j:?}");
    // The cycle that finds no room says why: no 4 healthy GPUs free, one being unhealthy.
    // Until that cycle has run, the reason is the requeue's.
    let why = "most free GPUs on one node: 3); 1 GPU of the pool is unhealthy";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !j.reason.contains(why) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        j = c.get_job(JobRef { name: "train".into(), id: 0 }).await.unwrap().into_inner();
    }
    assert!(j.reason.contains(why), "{}", j.reason);
    let requeued = j.events.iter().find(|e| e.kind() == EventKind::Requeued).unwrap();
    assert!(requeued.message.contains("its GPU failed"), "{requeued:?}");
    assert!(j.events.iter().any(|e| e.kind() == EventKind::GpuFaultStop), "{:?}", j.events);

    // A passing health check does not clear an XID; an operator does, and train runs again.
    agent.report(vec![gpu_report(bad, "", true)]).await.unwrap();
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(nodes[0].unhealthy_gpus.len(), 1);
    c.set_gpu_health(SetGpuHealthRequest { node: "n1".into(), gpu: bad, healthy: true, error: String::new() })
        .await
        .unwrap();
    let d = agent.until("train runs again", |d| d.assignments.iter().any(|a| a.job == "train" && a.attempt == 2)).await;
    assert!(gpus_of(&d, "train").contains(&bad), "the cleared GPU takes work again: {d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_gpu_marks_are_refused_naming_the_field() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let mark = |node: &str, gpu, healthy, error: &str| SetGpuHealthRequest {
        node: node.into(),
        gpu,
        healthy,
        error: error.into(),
    };
    for (m, field) in [
        (mark("n9", 0, false, "XID 79"), "node"),
        (mark("n1", 8, false, "XID 79"), "gpu"),
        (mark("n1", 0, false, ""), "error"),
        (mark("n1", 0, true, "XID 79"), "error"),
        (mark("bad name", 0, false, "XID 79"), "node"),
    ] {
        let e = c.set_gpu_health(m.clone()).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{m:?}: {e:?}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
    }
    // An agent's word on a GPU its node does not have is logged, and its report still lands.
    agent.report(vec![gpu_report(12, "XID 79", false)]).await.unwrap();
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert!(nodes[0].unhealthy_gpus.is_empty());
}

/// A report may carry 65,536 observations; GPU findings were each a raft write of their own,
/// in turn, before the rest of the report (issue 39: one agent could hold the log with one
/// report). Now a report commits at most one finding per GPU, the last it carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_commits_at_most_one_gpu_finding_per_gpu() {
    let cluster = Cluster::start(1).await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let before = quiet_applied_index(&cluster, 0).await;
    let mut c = cluster.client(0).await;
    // Flips of every GPU, and GPUs the node does not have; the last word on GPU 2 is a fault.
    let mut flips: Vec<What> =
        (0..4_000).map(|i| gpu_report(i % 8, if i % 2 == 0 { "XID 48" } else { "" }, true)).collect();
    flips.extend((0..1_000).map(|i| gpu_report(100 + i, "XID 79", false)));
    flips.push(gpu_report(2, "XID 79: fell off the bus", false));
    agent.report(flips).await.expect("the report is taken");
    let writes = applied_index(&cluster, 0).await - before;
    assert!(writes <= 9.0, "{writes} entries for one report of 8 GPUs");
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    let faults: Vec<u32> = nodes[0].unhealthy_gpus.iter().map(|f| f.gpu).collect();
    assert!(faults.contains(&2), "the last finding of GPU 2 is what holds: {faults:?}");
}
