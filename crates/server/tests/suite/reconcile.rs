//! What agents report against what the model holds (issue 9, reconciliation): a process
//! that cannot be killed, or a start its agent could not record, takes its node out of
//! scheduling, with the reason shown.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::transport::Channel;

/// One replica, queue team-a with 8 GPUs, node n1 with 8, and job j (4 GPUs) placed there:
/// the cluster (kept alive by the caller), a client, n1's agent and j's assignment.
async fn j_placed_on_n1() -> (Cluster, baton_client::BatonClient<Channel>, FakeAgent, Assignment) {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("j", "team-a", "train", 4))).await.unwrap();
    let d = agent.until("j runs", |d| has(d, "j", Action::Run)).await;
    let a = d.assignments[0].clone();
    (cluster, c, agent, a)
}

/// What an agent that runs assignment `a` lists in its report.
fn running(a: &Assignment) -> Running {
    Running {
        job_id: a.job_id,
        attempt: a.attempt,
        task: a.task,
        replica: a.replica,
        rank: a.rank,
        phase: ReplicaPhase::Running as i32,
    }
}

/// The agent's report that rank `a` stopped (without a checkpoint).
fn stopped(a: &Assignment) -> What {
    What::Stopped(Stopped {
        job_id: a.job_id,
        attempt: a.attempt,
        rank: a.rank,
        checkpointed: false,
        cause: 0,
        ..Default::default()
    })
}

/// A cancelled job's GPUs stay held until its agent reports its process gone (issue 9, the
/// completing state): the directive tells the agent to stop it, the job says it is
/// completing, and a job that needs those GPUs waits until the agent's report.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_jobs_gpus_are_given_out_only_once_its_agent_reports_it_stopped() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    c.cancel_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap();
    let d = agent.until("j is told to stop", |d| has(d, "j", Action::Stop)).await;
    let stop = d.assignments.iter().find(|x| x.job == "j").unwrap();
    assert_eq!((stop.attempt, stop.rank, stop.grace_ms), (a.attempt, a.rank, 5_000), "{stop:?}");
    let j = wait_state(&mut c, "j", JobState::Cancelled).await;
    assert!(j.reason.contains("completing: waiting for 1 rank"), "reason: {}", j.reason);

    // All 8 GPUs of n1: 4 of them are still j's until its agent says it stopped.
    c.submit(submit_of(gpu_job("big", "team-a", "train", 8))).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let big = wait_state(&mut c, "big", JobState::Pending).await;
    assert!(big.reason.contains("most free GPUs on one node: 4"), "reason: {}", big.reason);

    agent.report(vec![stopped(&a)]).await.unwrap();
    agent
        .until("big runs and j is gone", |d| has(d, "big", Action::Run) && !d.assignments.iter().any(|x| x.job == "j"))
        .await;
    let j = wait_state(&mut c, "j", JobState::Cancelled).await;
    assert!(!j.reason.contains("completing"), "reason: {}", j.reason);
}

/// An agent cut off for longer than the heartbeat timeout: its node is declared lost and j
/// goes back to the queue (n1 is the only node). Its lease stop saved j's work; once it is
/// back, its report of that stop is committed before n1 is ready again, and j's next attempt
/// resumes from that checkpoint instead of starting over (issue 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_stop_reported_after_the_node_was_lost_gives_the_next_attempt_its_checkpoint() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    agent.silence();
    wait_state(&mut c, "j", JobState::Pending).await;
    let lease_stop = What::Stopped(Stopped {
        job_id: a.job_id,
        attempt: a.attempt,
        rank: a.rank,
        checkpointed: true,
        cause: StopCause::LeaseExpired as i32,
        ..Default::default()
    });
    agent.report(vec![lease_stop]).await.unwrap();
    let d = agent.until("j runs again", |d| d.assignments.iter().any(|x| x.job == "j" && x.attempt > a.attempt)).await;
    let next = d.assignments.iter().find(|x| x.job == "j").unwrap();
    assert!(next.resume, "resumes from the lease stop's checkpoint: {next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unkillable_process_marks_its_node_unhealthy_with_the_reason() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    let j = a.job_id;
    c.cancel_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap();
    agent.until("j is told to stop", |d| has(d, "j", Action::Stop)).await;
    let reason = "pid 4242 in D state after SIGKILL".to_string();
    let stuck = What::Unkillable(Unkillable { job_id: j, attempt: 1, rank: 0, reason: reason.clone() });
    agent.report(vec![stuck]).await.unwrap();
    // The node takes no new work, so the stuck rank is let go: j is no longer completing.
    agent.until("j is no longer wanted", |d| !d.assignments.iter().any(|a| a.job == "j")).await;

    let n = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes.remove(0);
    assert_eq!(n.status(), NodeStatus::Unhealthy, "{n:?}");
    assert!(n.unhealthy.contains("job") && n.unhealthy.contains(&reason), "{}", n.unhealthy);
    c.submit(submit_of(gpu_job("next", "team-a", "train", 4))).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let next = wait_state(&mut c, "next", JobState::Pending).await;
    // It waits because the unhealthy node offers nothing, not for some other reason.
    assert!(next.reason.contains("most free GPUs on one node: 0"), "reason: {}", next.reason);

    // A person fixed the node: uncordon clears the mark and work is placed there again.
    c.cordon(CordonRequest { node: "n1".into(), cordoned: false }).await.unwrap();
    let n = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes.remove(0);
    assert_eq!((n.status(), n.unhealthy.as_str()), (NodeStatus::Ready, ""));
    wait_state(&mut c, "next", JobState::Running).await;
}

/// An agent whose journal takes no writes refuses to start j and says so: j goes back to
/// the queue (not failed) and waits, since n1, the only node, takes no new work until a
/// person uncordons it; then j runs there again. Before, j stayed Running with no process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_its_agent_could_not_record_requeues_the_job_and_takes_the_node_out() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    let reason = "cannot write the agent journal: No space left on device (os error 28)".to_string();
    let refused = What::Unrecorded(Unrecorded { job_id: a.job_id, attempt: a.attempt, rank: a.rank, reason });
    agent.report(vec![refused]).await.unwrap();
    agent.until("j is no longer wanted on n1", |d| !d.assignments.iter().any(|x| x.job == "j")).await;
    let j = wait_state(&mut c, "j", JobState::Pending).await;
    let requeued = j.events.iter().find(|e| e.kind() == EventKind::Requeued).expect("a requeue event");
    assert!(requeued.message.contains("could not record its start"), "{}", requeued.message);
    let n = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes.remove(0);
    assert_eq!(n.status(), NodeStatus::Unhealthy, "{n:?}");
    assert!(n.unhealthy.contains("No space left on device"), "{}", n.unhealthy);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let j = wait_state(&mut c, "j", JobState::Pending).await;
    // It waits because the node offers nothing, not placed there again.
    assert_eq!(j.attempt, a.attempt, "placed on n1 again");
    assert!(j.reason.contains("most free GPUs on one node: 0"), "reason: {}", j.reason);

    c.cordon(CordonRequest { node: "n1".into(), cordoned: false }).await.unwrap();
    agent.until("j runs again", |d| d.assignments.iter().any(|x| x.job == "j" && x.attempt > a.attempt)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_that_runs_where_the_model_does_not_place_it_is_recorded() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    c.cancel_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap();
    agent.until("j is told to stop", |d| has(d, "j", Action::Stop)).await;
    agent.report(vec![stopped(&a)]).await.unwrap();
    agent.until("j is no longer wanted", |d| !d.assignments.iter().any(|x| x.job == "j")).await;

    // The agent keeps saying it runs j, as one that lost track of it would (its
    // background heartbeats, which list nothing, are silenced: one reporter per node).
    agent.silence();
    let still = running(&a);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        agent.report_running(vec![still], vec![]).await.unwrap();
        let j = c.get_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap().into_inner();
        let strays: Vec<_> = j.events.iter().filter(|e| e.kind() == baton_proto::v1::EventKind::Stray).collect();
        if let Some(e) = strays.first() {
            assert_eq!(strays.len(), 1, "recorded once, not on every report: {strays:?}");
            assert!(e.message.contains("n1") && e.message.contains("told to stop"), "{}", e.message);
            assert_eq!(j.state(), JobState::Cancelled, "the event changes nothing else");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no Stray event within 5 s: {:?}", j.events);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_its_agent_stops_reporting_is_requeued_with_the_reason() {
    let (_cluster, mut c, agent, a) = j_placed_on_n1().await;
    // The agent has seen the assignment: it reports it running.
    agent.report_running(vec![running(&a)], vec![]).await.unwrap();
    // Then it stops listing it without any exit (a process it lost track of).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(6);
    let j = loop {
        agent.report_running(vec![], vec![]).await.unwrap();
        let j = c.get_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap().into_inner();
        // Requeued: Pending, or already placed again as a new attempt.
        if j.state() != JobState::Running || j.attempt > a.attempt {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "j still Running 6 s after its agent stopped reporting it");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        j.state() == JobState::Pending || j.state() == JobState::Running,
        "requeued, not failed: {} ({})",
        j.state().word(),
        j.reason
    );
    let e = j.events.iter().find(|e| e.kind() == baton_proto::v1::EventKind::Requeued).expect("a Requeued event");
    assert!(e.message.contains("n1") && e.message.contains("no longer reports"), "{}", e.message);
}

/// An agent whose lease ran out stopped its replica and reports so (issue 9): the job goes
/// back to the queue from its checkpoint, with an event saying why, instead of staying
/// Running with its GPUs held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_expired_stop_requeues_the_job_from_its_checkpoint() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    let ckpt = What::Checkpointed(Checkpointed { job_id: a.job_id, attempt: a.attempt, rank: a.rank });
    let stop = What::Stopped(Stopped {
        job_id: a.job_id,
        attempt: a.attempt,
        rank: a.rank,
        checkpointed: false,
        cause: StopCause::LeaseExpired as i32,
        ..Default::default()
    });
    agent.report(vec![ckpt, stop]).await.unwrap();

    let j = c.get_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap().into_inner();
    assert!(
        j.state() == JobState::Pending || (j.state() == JobState::Running && j.attempt > a.attempt),
        "requeued: {} attempt {} ({})",
        j.state().word(),
        j.attempt,
        j.reason
    );
    let e = j.events.iter().find(|e| e.kind() == baton_proto::v1::EventKind::Requeued).expect("a Requeued event");
    assert!(e.message.contains("n1") && e.message.contains("lease"), "{}", e.message);
    // The next attempt resumes from the checkpoint the first one wrote.
    let d = agent.until("j runs again", |d| d.assignments.iter().any(|x| x.job == "j" && x.attempt > a.attempt)).await;
    let next = d.assignments.iter().find(|x| x.job == "j").unwrap();
    assert!(next.resume, "resumes from its checkpoint: {next:?}");
}

/// Found by a chaos run with leader kills (issue 9; chaos/README.md, "Found so far"): a
/// leader directing from a stale state had n1's agent kill j's replica as no longer wanted,
/// which reports nothing; once the leader caught up its directive said RUN for that same
/// attempt, which an agent never starts again. The agent answers such a RUN with the
/// replica's end (cause KILLED_HERE), and j goes back to the queue, with an event saying
/// why, instead of staying Running with no process and its GPUs held. It is not j's
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_of_a_replica_its_agent_killed_as_unwanted_requeues_the_job() {
    let (_cluster, mut c, mut agent, a) = j_placed_on_n1().await;
    // The RUN still comes for the attempt the agent killed (sent again when asked): it says
    // that replica ended here.
    agent.report_awaiting(1).await.unwrap();
    agent.until("j is told to run", |d| has(d, "j", Action::Run)).await;
    let killed = What::Stopped(Stopped {
        job_id: a.job_id,
        attempt: a.attempt,
        rank: a.rank,
        checkpointed: false,
        cause: StopCause::KilledHere as i32,
        ..Default::default()
    });
    agent.report(vec![killed]).await.unwrap();

    let j = c.get_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap().into_inner();
    assert!(
        j.state() == JobState::Pending || (j.state() == JobState::Running && j.attempt > a.attempt),
        "requeued, not left Running nor failed: {} attempt {} ({})",
        j.state().word(),
        j.attempt,
        j.reason
    );
    let e = j.events.iter().find(|e| e.kind() == baton_proto::v1::EventKind::Requeued).expect("a Requeued event");
    assert!(e.message.contains("n1") && e.message.contains("killed"), "{}", e.message);
    // Its GPUs are given out again: the next attempt runs.
    agent.until("j runs again", |d| d.assignments.iter().any(|x| x.job == "j" && x.attempt > a.attempt)).await;
}
