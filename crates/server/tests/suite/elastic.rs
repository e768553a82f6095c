//! Elastic gangs (decisions.md section 13) through the real API and a fake agent: a gang
//! admitted with all of its replicas shrinks to its minimum when a preemptor reclaims what
//! it borrowed, across the death of the leader in the middle of the stop, and runs on with
//! its new world size on the GPUs it kept; bad ranges are refused naming the field.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn gang(name: &str, queue: &str, replicas: u32, min: u32) -> SubmitRequest {
    let mut spec = gpu_job(name, queue, "train", 1);
    spec.tasks[0].replicas = replicas;
    spec.tasks[0].min_replicas = Some(min);
    submit_of(spec)
}

/// The ranks of `job` the directive runs: (attempt, rank, world size, GPUs).
fn ranks(d: &Directive, job: &str) -> Vec<(u32, u32, u32, Vec<u32>)> {
    let mut out: Vec<_> = d
        .assignments
        .iter()
        .filter(|a| a.job == job && a.action() == Action::Run)
        .map(|a| (a.attempt, a.rank, a.world_size, a.gpus.clone()))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_shrinks_to_its_minimum_across_a_failover_and_runs_on_with_its_world_size() {
    let mut cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("research", 0)).await.unwrap();
    c.put_queue(queue("prod", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(gang("train", "research", 8, 2)).await.unwrap();
    let d = agent.until("train runs 8 ranks", |d| ranks(d, "train").len() == 8).await;
    assert!(ranks(&d, "train").iter().all(|r| r.0 == 1 && r.2 == 8), "{:?}", ranks(&d, "train"));
    let id = d.assignments.iter().find(|a| a.job == "train").unwrap().job_id;

    c.submit(submit_of(gpu_job("high", "prod", "inference", 4))).await.unwrap();
    agent.until("train is told to stop", |d| has(d, "train", Action::Stop)).await;
    let j = c.get_job(JobRef { name: "train".into(), id: 0 }).await.unwrap().into_inner();
    assert!(j.reason.ends_with("shrinking to 2 of 8 replicas (minimum 2)"), "{}", j.reason);

    // The leader dies in the middle of the stop; the agent reports to the next one.
    let old = cluster.leader().await;
    cluster.kill(old).await;
    let mut c = cluster.client((old + 1) % 3).await;
    let stopped = |rank| {
        What::Stopped(Stopped { job_id: id, attempt: 1, checkpointed: true, rank, cause: 0, ..Default::default() })
    };
    let mut agent = report_to_the_new_leader(&cluster, node("n1", 8), stopped(0)).await;
    agent.report((1..8).map(stopped).collect()).await.unwrap();

    let d = agent
        .until("train runs 2 ranks and high runs", |d| ranks(d, "train").len() == 2 && has(d, "high", Action::Run))
        .await;
    assert_eq!(ranks(&d, "train"), vec![(2, 0, 2, vec![0]), (2, 1, 2, vec![1])], "its lowest ranks, on their GPUs");
    let j = wait_state(&mut c, "train", JobState::Running).await;
    let task = &j.spec.as_ref().unwrap().tasks[0];
    assert_eq!((j.attempt, task.replicas, task.min_replicas, j.elastic_max_replicas), (2, 2, Some(2), Some(8)));
    assert!(j.has_checkpoint, "it starts again from its checkpoint");
    let resized: Vec<&str> =
        j.events.iter().filter(|e| e.kind() == EventKind::Resized).map(|e| e.message.as_str()).collect();
    assert_eq!(resized.last(), Some(&"resized from 8 to 2 of 8 replicas (minimum 2)"), "{resized:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_ranges_are_refused_naming_the_field_and_submit_nothing() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut two = gang("b", "team-a", 4, 2);
    let extra = TaskSpec { name: "ps".into(), min_replicas: Some(1), ..two.spec.as_ref().unwrap().tasks[0].clone() };
    two.spec.as_mut().unwrap().tasks.push(extra);
    let mut with_array = gang("c", "team-a", 4, 2);
    with_array.array = Some(ArraySpec { first: 0, count: 3, max_running: 0 });
    for (req, says) in [
        (gang("a", "team-a", 4, 5), "min_replicas: 5 is above replicas (4) of task main"),
        (gang("a", "team-a", 4, 0), "min_replicas: must be at least 1"),
        (two, "spec.tasks[1].min_replicas: only one task group of a job may be elastic"),
        (with_array, "an array's elements cannot be elastic gangs"),
    ] {
        let e = c.submit(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(says), "{}", e.message());
    }
    let jobs = c.list_jobs(ListJobsRequest::default()).await.unwrap().into_inner().jobs;
    assert!(jobs.is_empty(), "{jobs:?}");
}
