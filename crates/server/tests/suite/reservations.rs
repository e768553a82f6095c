//! docs/policy.md section 9 on a live cluster: the leader's cycle stops a job at its time limit
//! through the agent's ordinary STOP and the job ends Failed; `reserve_after` changes at run
//! time, and a starving job's reservation shows in `cluster info` and on the job.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;

fn submit(spec: JobSpec) -> SubmitRequest {
    submit_of(spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_at_its_time_limit_is_stopped_by_its_agent_and_ends_failed() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let spec = JobSpec { time_limit_ms: Some(1_000), ..gpu_job("capped", "team", "train", 8) };
    c.submit(submit(spec)).await.unwrap();
    let d = agent.until("capped runs", |d| has(d, "capped", Action::Run)).await;
    let id = d.assignments[0].job_id;
    agent.until("capped is told to stop at its time limit", |d| has(d, "capped", Action::Stop)).await;
    let stopped = Stopped { job_id: id, attempt: 1, checkpointed: true, rank: 0, cause: 0, ..Default::default() };
    agent.report(vec![What::Stopped(stopped)]).await.unwrap();
    let j = wait_state(&mut c, "capped", JobState::Failed).await;
    assert_eq!(j.reason, "time limit");
    assert!(j.has_checkpoint, "the checkpoint written on the way is kept");
    assert_eq!(j.attempt, 1, "not requeued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserve_after_set_at_run_time_gives_a_starving_job_a_reservation_clients_see() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team", 8)).await.unwrap();
    c.set_scheduler(SchedulerSettings { reserve_after_ms: Some(500) }).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit(gpu_job("a", "team", "train", 4))).await.unwrap();
    agent.until("a runs", |d| has(d, "a", Action::Run)).await;
    c.submit(submit(gpu_job("big", "team", "train", 8))).await.unwrap();

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let info = loop {
        let info = c.cluster_info(Empty {}).await.unwrap().into_inner();
        if !info.reservations.is_empty() {
            break info;
        }
        assert!(tokio::time::Instant::now() < deadline, "no reservation within 10 s: {info:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(info.scheduler.unwrap().reserve_after_ms, Some(500));
    let r = &info.reservations[0];
    assert_eq!(
        (r.job.as_str(), r.pool.as_str(), r.nodes.clone(), r.waiting_for),
        ("big", "default", vec!["n1".into()], 1)
    );
    let big = c.get_job(JobRef { name: "big".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(big.reservation.as_ref().map(|r| r.waiting_for), Some(1));
    assert!(big.reason.contains("reserved n1 (pool default)"), "{}", big.reason);

    // Another job of big's queue may not start while it holds, though 4 GPUs are free.
    c.submit(submit(gpu_job("small", "team", "train", 2))).await.unwrap();
    let small = loop {
        let j = c.get_job(JobRef { name: "small".into(), ..Default::default() }).await.unwrap().into_inner();
        if j.reason.contains("reservation") {
            break j;
        }
        assert!(tokio::time::Instant::now() < deadline, "small never waited behind the reservation: {j:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(small.state(), JobState::Pending);

    // never turns reservations off: the reservation goes, and small starts.
    c.set_scheduler(SchedulerSettings { reserve_after_ms: None }).await.unwrap();
    assert!(c.cluster_info(Empty {}).await.unwrap().into_inner().reservations.is_empty());
    agent.until("small runs", |d| has(d, "small", Action::Run)).await;
}
