//! Jobs that wait for others (decisions.md section 13) through the real API: a held job is
//! not placed and says what it waits for; it starts once its dependency succeeds, on a
//! replica that was not the leader when it was submitted; bad dependencies are refused with
//! the field named. Visibility of what one may wait for: `visibility.rs`.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn after(job: &str, when: DependencyCondition) -> Dependency {
    Dependency { job: job.into(), when: when.into() }
}

fn submit_after(name: &str, gpus: u64, deps: Vec<Dependency>) -> SubmitRequest {
    SubmitRequest { after: deps, ..submit_of(gpu_job(name, "team-a", "train", gpus)) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_job_starts_when_its_dependency_succeeds_even_after_a_failover() {
    let mut cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("prep", "team-a", "train", 2))).await.unwrap();
    c.submit(submit_after("train", 4, vec![after("prep", DependencyCondition::Ok)])).await.unwrap();
    let d = agent.until("prep runs", |d| has(d, "prep", Action::Run)).await;
    let prep = d.assignments.iter().find(|a| a.job == "prep").unwrap().job_id;
    assert!(!has(&d, "train", Action::Run), "train waits for prep although 6 GPUs are free");
    let held = c.get_job(JobRef { name: "train".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(held.state(), JobState::Pending);
    assert!(held.reason.contains("waiting for prep to succeed"), "{}", held.reason);
    assert_eq!(held.waiting_for, [after("prep", DependencyCondition::Ok)]);

    // The wait is replicated: it holds across a new leader.
    let old = cluster.leader().await;
    cluster.kill(old).await;
    let mut c = cluster.client((old + 1) % 3).await;
    let exited = What::Exited(Exited { job_id: prep, attempt: 1, rank: 0, exit_code: 0, reason: String::new() });
    // The agent's reports go to whichever replica leads now.
    let mut agent = report_to_the_new_leader(&cluster, node("n1", 8), exited).await;
    agent.until("train runs", |d| has(d, "train", Action::Run)).await;
    let j = wait_state(&mut c, "train", JobState::Running).await;
    assert!(j.events.iter().any(|e| e.kind() == EventKind::DependenciesMet), "{:?}", j.events);
    assert!(j.waiting_for.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_dependencies_are_refused_naming_the_field_and_a_broken_one_cancels_the_job() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("prep", "team-a", "train", 1))).await.unwrap();
    for (deps, field) in [
        (vec![after("nope", DependencyCondition::Ok)], "after[0].job"),
        (vec![after("prep", DependencyCondition::Ok), after("x y", DependencyCondition::Ok)], "after[1].job"),
        (vec![after("prep", DependencyCondition::Unspecified)], "after[0].when"),
        (vec![after("train", DependencyCondition::Any)], "after[0].job"),
    ] {
        let e = c.submit(submit_after("train", 1, deps)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
    }
    let listed = c.list_jobs(ListJobsRequest::default()).await.unwrap().into_inner().jobs;
    assert_eq!(listed.len(), 1, "nothing was submitted by the refused requests");

    c.submit(submit_after("cleanup", 1, vec![after("prep", DependencyCondition::Notok)])).await.unwrap();
    let d = agent.until("prep runs", |d| has(d, "prep", Action::Run)).await;
    let prep = d.assignments[0].job_id;
    let exited = What::Exited(Exited { job_id: prep, attempt: 1, rank: 0, exit_code: 0, reason: String::new() });
    agent.report(vec![exited]).await.unwrap();
    let j = wait_state(&mut c, "cleanup", JobState::Cancelled).await;
    assert!(j.reason.contains("notok:prep can no longer hold: prep ended Succeeded"), "{}", j.reason);
}
