//! Three in-process replicas on loopback with scripted agents: submit, place, run, finish;
//! preemption with checkpoint-then-stop; idempotent submit; a silent agent's node is lost;
//! any replica answers.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;

/// Rank 0 of attempt 1 of `job_id` stopped after a STOP, with a checkpoint.
fn checkpointed_stop(job_id: u64) -> What {
    What::Stopped(Stopped { job_id, attempt: 1, checkpointed: true, rank: 0, cause: 0, ..Default::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_runs_on_an_agent_and_finishes() {
    let cluster = Cluster::start(3).await;
    let follower = (cluster.leader().await + 1) % 3;
    let mut c = cluster.client(follower).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;

    let req = SubmitRequest {
        spec: Some(gpu_job("train-1", "team-a", "train", 4)),
        request_id: "r-1".into(),
        run_as: String::new(),
        after: Vec::new(),
        array: None,
    };
    let first = c.submit(req.clone()).await.unwrap().into_inner();
    let again = c.submit(req).await.unwrap().into_inner();
    assert!(!first.duplicate && again.duplicate, "a retried submit returns the first job");
    assert_eq!(first.id, again.id);

    let d = agent.until("train-1 runs", |d| has(d, "train-1", Action::Run)).await;
    let a = &d.assignments[0];
    assert_eq!((a.attempt, a.gpus.len(), a.rank, a.world_size), (1, 4, 0, 1));
    assert!(d.term > 0);
    wait_state(&mut c, "train-1", JobState::Running).await;

    agent
        .report(vec![What::Exited(Exited {
            job_id: a.job_id,
            attempt: 1,
            rank: 0,
            exit_code: 0,
            reason: String::new(),
        })])
        .await
        .unwrap();
    let j = wait_state(&mut c, "train-1", JobState::Succeeded).await;
    assert_eq!(j.exit_code, Some(0));
    agent.until("nothing left to run", |d| d.assignments.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_preemption_checkpoints_the_victim_then_starts_the_preemptor() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("research", 0)).await.unwrap();
    c.put_queue(queue("prod", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;

    let low = gpu_job("low", "research", "train", 8);
    c.submit(submit_of(low)).await.unwrap();
    let d = agent.until("low runs", |d| has(d, "low", Action::Run)).await;
    let low_id = d.assignments[0].job_id;

    let high = gpu_job("high", "prod", "inference", 8);
    c.submit(submit_of(high)).await.unwrap();
    let d = agent.until("low is told to stop", |d| has(d, "low", Action::Stop)).await;
    let stop = d.assignments.iter().find(|a| a.job == "low").unwrap();
    assert!(stop.grace_ms > 0 && stop.grace_ms <= 5_000, "grace left: {}", stop.grace_ms);
    assert!(!has(&d, "high", Action::Run), "the preemptor waits for its victim");

    agent.report(vec![checkpointed_stop(low_id)]).await.unwrap();
    agent.until("high runs", |d| has(d, "high", Action::Run) && !d.assignments.iter().any(|a| a.job == "low")).await;
    let j = wait_state(&mut c, "low", JobState::Pending).await;
    assert!(j.has_checkpoint, "the victim resumes from its checkpoint");
    assert_eq!(j.preempted_by, "high");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_agent_loses_its_node_and_its_jobs_are_requeued() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(1).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("j", "team-a", "train", 2))).await.unwrap();
    agent.until("j runs", |d| has(d, "j", Action::Run)).await;
    agent.silence();
    let j = wait_state(&mut c, "j", JobState::Pending).await;
    // The reason is the scheduler's by now; the history says why it was requeued.
    let requeued = j.events.iter().find(|e| e.kind() == baton_proto::v1::EventKind::Requeued);
    let requeued = requeued.unwrap_or_else(|| panic!("no Requeued event in {:?}", j.events));
    assert!(requeued.message.contains("node n1 was lost"), "requeued because: {}", requeued.message);
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(nodes[0].status(), NodeStatus::Lost);
}

/// Attaching is not coming back: a lost node is ready again only once its first report is
/// committed, so nothing is placed there before what it says of its lease stops is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_node_that_attaches_again_is_ready_only_after_its_first_report() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut c = cluster.client(leader).await;
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    agent.silence();
    let status = |nodes: Vec<baton_proto::v1::Node>| nodes[0].status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while status(c.list_nodes(Empty {}).await.unwrap().into_inner().nodes) != NodeStatus::Lost {
        assert!(std::time::Instant::now() < deadline, "n1 was never declared lost");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let leader_addr = cluster.replicas[leader].addr.clone();
    let mut g = AgentGatewayClient::connect(format!("http://{leader_addr}")).await.unwrap();
    let _stream = g.attach(AttachRequest { node: Some(node("n1", 8)), term_seen: 0 }).await.unwrap();
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(status(nodes), NodeStatus::Lost, "attaching alone made the lost node ready");

    g.report(ReportRequest { node: "n1".into(), ..Default::default() }).await.unwrap();
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(status(nodes), NodeStatus::Ready, "its first report committed, the node is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_send_agents_to_the_leader_and_answer_clients_clearly() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let follower = cluster.replicas[(leader + 1) % 3].addr.clone();
    let mut g = AgentGatewayClient::connect(format!("http://{follower}")).await.unwrap();
    let err = g.attach(AttachRequest { node: Some(node("n1", 8)), term_seen: 0 }).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    let hint = err.metadata().get(baton_proto::LEADER_METADATA).unwrap().to_str().unwrap();
    assert_eq!(hint, cluster.replicas[leader].addr);

    let mut c = cluster.client((leader + 1) % 3).await;
    let err = c.get_job(JobRef { name: "nope".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().contains("unknown job \"nope\""), "{}", err.message());
    let mut bad = gpu_job("x", "team-a", "train", 1);
    bad.preemption_mode = 99;
    let err = c.submit(submit_of(bad)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("spec.preemption_mode"), "{}", err.message());
    let info = c.cluster_info(Empty {}).await.unwrap().into_inner();
    assert_eq!(info.replicas.len(), 3);
    assert_eq!(info.leader_addr, cluster.replicas[leader].addr);
}

use baton_proto::v1::agent_gateway_client::AgentGatewayClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_resends_the_stop_and_finishes_the_preemption() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut c = cluster.client((leader + 1) % 3).await;
    c.put_queue(queue("research", 0)).await.unwrap();
    c.put_queue(queue("prod", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("low", "research", "train", 8))).await.unwrap();
    let d = agent.until("low runs", |d| has(d, "low", Action::Run)).await;
    let low_id = d.assignments[0].job_id;
    c.submit(submit_of(gpu_job("high", "prod", "inference", 8))).await.unwrap();
    let old = agent.until("low is told to stop", |d| has(d, "low", Action::Stop)).await;

    cluster.kill(leader).await;
    let survivors = cluster.addrs();
    drop(agent);
    let mut agent = FakeAgent::attach(&survivors, node("n1", 8)).await;
    let d = agent.until("the new leader re-sends the stop", |d| has(d, "low", Action::Stop)).await;
    assert!(d.term > old.term, "the new leader's term {} is above the old {}", d.term, old.term);
    agent.report(vec![checkpointed_stop(low_id)]).await.unwrap();
    agent.until("high runs", |d| has(d, "high", Action::Run)).await;
    let mut c = baton_proto::v1::baton_client::BatonClient::connect(format!("http://{}", survivors[0])).await.unwrap();
    assert!(wait_state(&mut c, "low", JobState::Pending).await.has_checkpoint);
}
