//! The format gate through the API: three replicas, one of which says it reads an older data
//! format (as a replica of the previous build would, mid-upgrade). Commands that format has
//! commit; a newer one is refused naming that replica, until it is upgraded (restarted
//! saying the newer format), after which the same command commits.

use crate::common;

use std::time::{Duration, Instant};

use baton_model::format::DATA_FORMAT;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

async fn queue_names(c: &mut baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>) -> Vec<String> {
    let queues = c.list_queues(Empty {}).await.unwrap().into_inner().queues;
    queues.into_iter().filter_map(|q| q.queue.map(|q| q.name)).collect()
}

/// The data format that brought `CreateQueue` (the model's format table says so).
const CREATE_QUEUE_FORMAT: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_newer_than_a_replica_reads_is_refused_until_it_is_upgraded() {
    // The format before the one that brought CreateQueue.
    let older = CREATE_QUEUE_FORMAT - 1;
    let mut cluster = Cluster::start_configured(3, settings(), |id, rc| {
        if id == 3 {
            rc.max_format = older;
        }
    })
    .await;
    let mut c = cluster.client(0).await;
    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;

    // What the older format reads commits: a queue put (format 1) and a submit (format 3).
    c.put_queue(queue("team-a", 8)).await.unwrap();
    c.submit(submit_of(gpu_job("j1", "team-a", "train", 1))).await.unwrap();

    // A create-if-absent queue write came with format 4: refused, naming replica 3.
    let e = c.create_queue(queue("team-b", 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let needs = format!("CreateQueue needs data format {CREATE_QUEUE_FORMAT}");
    assert!(e.message().contains(&needs), "{}", e.message());
    let behind = format!("replica 3 (reads formats up to {older})");
    assert!(e.message().contains(&behind), "{}", e.message());
    assert!(!e.message().contains("replica 1 ") && !e.message().contains("replica 2 "), "{}", e.message());
    assert!(!queue_names(&mut c).await.contains(&"team-b".to_string()));

    // `cluster info` shows what each replica reads and its build.
    let info = c.cluster_info(Empty {}).await.unwrap().into_inner();
    let formats: Vec<(u64, u32)> = info.replicas.iter().map(|r| (r.id, r.format)).collect();
    assert_eq!(formats, vec![(1, DATA_FORMAT), (2, DATA_FORMAT), (3, older)]);
    assert!(info.replicas.iter().all(|r| r.version == env!("CARGO_PKG_VERSION")), "{:?}", info.replicas);

    // Replica 3 is upgraded: restarted saying the newest format. The leader hears it and the
    // same command commits (an election may intervene if replica 3 led).
    cluster.kill(2).await;
    cluster.restart(2, |_, _| {}).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.create_queue(queue("team-b", 1)).await {
            Ok(_) => break,
            Err(e) => {
                let retry = matches!(e.code(), Code::FailedPrecondition | Code::Unavailable);
                assert!(retry && Instant::now() < deadline, "still refused: {e:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(queue_names(&mut c).await.contains(&"team-b".to_string()));
    c.submit(submit_of(gpu_job("j2", "team-b", "train", 1))).await.unwrap();
}

/// An agent's lease stop is an observation of format 4; mid-upgrade it goes as the older
/// lease expiry, so the report (and with it the agent's lease) does not wait for the upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_stop_report_is_taken_while_a_replica_reads_an_older_format() {
    report_taken_while_a_replica_reads(3, StopCause::LeaseExpired, "lease").await;
}

/// A rank killed here is an observation of format 5; mid-upgrade it goes as the older
/// vanished rank: the same requeue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_here_report_is_taken_while_a_replica_reads_an_older_format() {
    report_taken_while_a_replica_reads(4, StopCause::KilledHere, "no longer reports").await;
}

/// Replica 2 reads formats up to `older`; n1's agent reports j's replica stopped with
/// `cause`: the report is taken and j requeued, its event saying `why`.
async fn report_taken_while_a_replica_reads(older: u32, cause: StopCause, why: &str) {
    let cluster = Cluster::start_configured(3, settings(), |id, rc| {
        if id == 2 {
            rc.max_format = older;
        }
    })
    .await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("j", "team-a", "train", 4))).await.unwrap();
    let d = agent.until("j runs", |d| has(d, "j", Action::Run)).await;
    let a = d.assignments[0].clone();
    let stop = observation::What::Stopped(Stopped {
        job_id: a.job_id,
        attempt: a.attempt,
        rank: a.rank,
        checkpointed: false,
        cause: cause as i32,
        ..Default::default()
    });
    agent.report(vec![stop]).await.expect("the report is taken");
    // Requeued (and perhaps placed again at once, as a next attempt).
    let j = c.get_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap().into_inner();
    assert!(
        j.state() == JobState::Pending || (j.state() == JobState::Running && j.attempt > a.attempt),
        "requeued: {} attempt {} ({})",
        j.state().word(),
        j.attempt,
        j.reason
    );
    let e = j.events.iter().find(|e| e.kind() == baton_proto::v1::EventKind::Requeued).expect("a Requeued event");
    assert!(e.message.contains(why), "{}", e.message);
}

/// Setting a queue's visibility came with format 6; mid-upgrade it is refused naming the
/// replica behind, while queue writes that leave it out (or ask for the default) go through
/// as the format-4 commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_visibility_waits_for_replicas_of_format_5() {
    let cluster = Cluster::start_configured(3, settings(), |id, rc| {
        if id == 3 {
            rc.max_format = 5;
        }
    })
    .await;
    let mut c = cluster.client(0).await;
    let own = Queue { visibility: JobVisibility::Own.into(), ..queue("private", 1) };
    let e = c.create_queue(own.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("CreateQueueVisible needs data format 6"), "{}", e.message());
    assert!(e.message().contains("replica 3 (reads formats up to 5)"), "{}", e.message());
    assert!(!queue_names(&mut c).await.contains(&"private".to_string()));
    let all = Queue { visibility: JobVisibility::All.into(), ..queue("open", 1) };
    c.create_queue(all).await.unwrap();
    c.create_queue(queue("private", 1)).await.unwrap();
    let e = c.update_queue(UpdateQueueRequest { queue: Some(own), revision: 0 }).await.unwrap_err();
    assert!(e.message().contains("UpdateQueueVisible needs data format 6"), "{}", e.message());
    // A client writes back the whole queue it read, visibility included: unchanged, that is
    // the format-4 update, and it goes through.
    let read = c.list_queues(Empty {}).await.unwrap().into_inner().queues;
    let read = read.into_iter().find(|u| u.queue.as_ref().unwrap().name == "private").unwrap();
    let q = Queue { weight: 3.0, ..read.queue.unwrap() };
    assert_eq!(q.visibility(), JobVisibility::All);
    c.update_queue(UpdateQueueRequest { queue: Some(q), revision: read.revision }).await.unwrap();
}

/// Accounting (issue 34) stays off while a replica reads only format 8, whose snapshots
/// cannot carry records, and the leader turns it on by itself once that replica is upgraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn accounting_turns_on_only_once_every_replica_reads_its_format() {
    let mut cluster = Cluster::start_configured(3, settings(), |id, rc| {
        if id == 3 {
            rc.max_format = 8;
        }
    })
    .await;
    let mut c = cluster.client(0).await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    c.submit(submit_of(gpu_job("j1", "team-a", "train", 1))).await.unwrap();
    let j1 = wait_state(&mut c, "j1", JobState::Running).await;
    let exited = Exited { job_id: j1.id, attempt: 1, rank: 0, exit_code: 0, reason: String::new() };
    agent.report(vec![observation::What::Exited(exited)]).await.unwrap();
    wait_state(&mut c, "j1", JobState::Succeeded).await;
    let accounting = |i: ClusterInfoReply| i.accounting.expect("cluster info says how accounting stands");
    let off = accounting(c.cluster_info(Empty {}).await.unwrap().into_inner());
    assert!(!off.on && off.records_made == 0, "{off:?}");

    cluster.kill(2).await;
    cluster.restart(2, |_, _| {}).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = c.cluster_info(Empty {}).await.map(|r| accounting(r.into_inner()));
        if now.as_ref().is_ok_and(|a| a.on) {
            break;
        }
        assert!(Instant::now() < deadline, "accounting still off 30 s after the upgrade: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Apply behaviour 2 (request ids bounded per user) changes what an existing command does, so
/// replicas of two builds would part if one applied it and another not: the leader raises
/// the state's behaviour only once every replica reads format 10, and does so by itself
/// once the last one is upgraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_apply_behaviour_is_raised_only_once_every_replica_applies_it() {
    let mut cluster = Cluster::start_configured(3, settings(), |id, rc| {
        if id == 3 {
            rc.max_format = 9;
        }
    })
    .await;
    let mut c = cluster.client(0).await;
    let info = |r: tonic::Response<ClusterInfoReply>| r.into_inner();
    // Accounting (format 9) comes first, and does turn on: the raise is what waits.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = c.cluster_info(Empty {}).await.map(info);
        if now.as_ref().is_ok_and(|i| i.accounting.as_ref().is_some_and(|a| a.on)) {
            break;
        }
        assert!(Instant::now() < deadline, "accounting never turned on: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = c.cluster_info(Empty {}).await.map(info).unwrap();
    assert_eq!(held.behaviour, baton_model::behaviour::BASELINE, "raised while replica 3 reads format 9");

    cluster.kill(2).await;
    cluster.restart(2, |_, _| {}).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = c.cluster_info(Empty {}).await.map(info);
        if now.as_ref().is_ok_and(|i| i.behaviour == baton_model::behaviour::BEHAVIOUR) {
            break;
        }
        assert!(Instant::now() < deadline, "the behaviour was not raised 30 s after the upgrade: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
