//! Who sees which jobs (issue 11): a queue's visibility decides what it shows of a job to a
//! user who is neither its owner, an admin of its queue, an operator nor an admin: `all`
//! (the job without its private data), `names` (id, name, queue, state, owner) or `own`
//! (nothing). Checked through the real API: get, list, watch (replayed and live).

use crate::common;

use ::baton_server::ServerSettings;
use ::baton_server::auth::{AuthMode, hash_token};
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;
use tonic::transport::Channel;

const ADMIN: &str = "admin-secret";
const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";
const CAROL: &str = "carol-secret";

/// The queues, named after their visibility.
const QUEUES: [(&str, JobVisibility); 3] =
    [("all", JobVisibility::All), ("names", JobVisibility::Names), ("own", JobVisibility::Own)];

/// Tokens on; queues `all`, `names` and `own` (each with that visibility, set at create);
/// alice, bob and carol users of all three, carol also an admin of queue `own`; alice has a
/// job with a secret in each queue (`j-all`, `j-names`, `j-own`).
async fn setup() -> (Cluster, FakeAgent) {
    let settings =
        ServerSettings { auth: AuthMode::Tokens, bootstrap_admin: Some(hash_token(ADMIN)), ..common::settings() };
    let cluster = Cluster::start_with(1, settings).await;
    let mut admin = bootstrap_admin(&cluster.addrs()[0], ADMIN).await;
    for (q, v) in QUEUES {
        admin.create_queue(Queue { visibility: v.into(), ..queue(q, 8) }).await.unwrap();
    }
    for (token, user) in [(ALICE, "alice"), (BOB, "bob"), (CAROL, "carol")] {
        let queues = QUEUES.iter().map(|(q, _)| q.to_string()).collect();
        let req = CreateTokenRequest { hash: hash_token(token).to_vec(), user: user.into(), roles: vec![], queues };
        admin.create_token(req).await.unwrap();
    }
    let carol = client(&cluster.addrs()[0], CAROL).await.who_am_i(Empty {}).await.unwrap().into_inner();
    let grant = GrantQueueRequest { id: carol.token_id, queue: "own".into(), revoke: false, admin: true };
    admin.grant_queue(grant).await.unwrap();
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let mut alice = client(&cluster.addrs()[0], ALICE).await;
    for (q, _) in QUEUES {
        alice.submit(secret_job(&format!("j-{q}"), q)).await.unwrap();
    }
    (cluster, agent)
}

fn secret_job(name: &str, queue: &str) -> SubmitRequest {
    let mut spec = gpu_job(name, queue, "train", 1);
    spec.env.insert("SECRET".into(), "s3".into());
    submit_of(spec)
}

fn job_ref(name: &str) -> JobRef {
    JobRef { name: name.into(), ..Default::default() }
}

fn name_of(j: &Job) -> &str {
    j.spec.as_ref().map_or("", |s| s.name.as_str())
}

async fn listed(c: &mut Client) -> Vec<Job> {
    c.list_jobs(ListJobsRequest::default()).await.unwrap().into_inner().jobs
}

/// The job as a user who may see everything of it sees it: its command and its secret.
fn assert_full_with_secret(j: &Job) {
    let spec = j.spec.as_ref().unwrap();
    assert!(!j.env_hidden && spec.env.get("SECRET").map(String::as_str) == Some("s3"), "{j:?}");
    assert!(!spec.command.is_empty(), "{j:?}");
}

/// Everything but the private data.
fn assert_full_without_secret(j: &Job) {
    let spec = j.spec.as_ref().unwrap();
    assert!(j.env_hidden && spec.env.is_empty(), "{j:?}");
    assert!(!spec.command.is_empty() && !spec.tasks.is_empty(), "{j:?}");
}

/// Id, name, queue, state and owner; nothing else.
fn assert_names_only(j: &Job, queue: &str) {
    let spec = j.spec.as_ref().unwrap();
    assert!(j.id != 0 && j.owner == "alice" && spec.queue == queue, "{j:?}");
    assert_ne!(j.state, 0, "the state is shown: {j:?}");
    assert!(j.env_hidden && spec.env.is_empty() && spec.command.is_empty() && spec.tasks.is_empty(), "{j:?}");
    assert!(j.events.is_empty() && j.reason.is_empty() && j.run_as.is_empty(), "{j:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_user_sees_others_jobs_only_as_each_queue_allows() {
    let (cluster, _agent) = setup().await;
    let mut bob = client(&cluster.addrs()[0], BOB).await;
    let jobs = listed(&mut bob).await;
    let names: Vec<&str> = jobs.iter().map(name_of).collect();
    assert_eq!(names, ["j-all", "j-names"], "a job in an `own` queue is not listed to others");
    assert_full_without_secret(&jobs[0]);
    assert_names_only(&jobs[1], "names");
    assert_full_without_secret(&bob.get_job(job_ref("j-all")).await.unwrap().into_inner());
    assert_names_only(&bob.get_job(job_ref("j-names")).await.unwrap().into_inner(), "names");
    let e = bob.get_job(job_ref("j-own")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "as for a job that does not exist: {e:?}");
    let absent = bob.get_job(job_ref("no-such-job")).await.unwrap_err();
    assert_eq!(e.message(), absent.message().replace("no-such-job", "j-own"));
    // Filtering by the queue shows nothing more.
    let own = ListJobsRequest { queue: "own".into(), ..Default::default() };
    assert!(bob.list_jobs(own).await.unwrap().into_inner().jobs.is_empty());
    // The queues say what they show.
    let queues = bob.list_queues(Empty {}).await.unwrap().into_inner().queues;
    for (q, v) in QUEUES {
        let got = queues.iter().find(|u| u.queue.as_ref().unwrap().name == q).unwrap();
        assert_eq!(got.queue.as_ref().unwrap().visibility(), v, "{q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_the_queues_admin_and_admins_see_everything() {
    let (cluster, _agent) = setup().await;
    let addr = &cluster.addrs()[0];
    for token in [ALICE, ADMIN] {
        let mut c = client(addr, token).await;
        let jobs = listed(&mut c).await;
        assert_eq!(jobs.iter().map(name_of).collect::<Vec<_>>(), ["j-all", "j-names", "j-own"], "{token}");
        for (q, _) in QUEUES {
            let j = c.get_job(job_ref(&format!("j-{q}"))).await.unwrap().into_inner();
            assert_full_with_secret(&j);
            assert!(!j.events.is_empty(), "{j:?}");
        }
    }
    // Carol administers queue `own` only: there she sees all; elsewhere, what others see.
    let mut carol = client(addr, CAROL).await;
    let jobs = listed(&mut carol).await;
    assert_eq!(jobs.iter().map(name_of).collect::<Vec<_>>(), ["j-all", "j-names", "j-own"]);
    assert_full_with_secret(&carol.get_job(job_ref("j-own")).await.unwrap().into_inner());
    assert_names_only(&carol.get_job(job_ref("j-names")).await.unwrap().into_inner(), "names");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queues_visibility_changes_with_an_update_and_stays_through_one_without_it() {
    let (cluster, _agent) = setup().await;
    let mut admin = client(&cluster.addrs()[0], ADMIN).await;
    let mut bob = client(&cluster.addrs()[0], BOB).await;
    let read = |queues: Vec<QueueUsage>| queues.into_iter().find(|u| u.queue.as_ref().unwrap().name == "own").unwrap();
    let own = read(admin.list_queues(Empty {}).await.unwrap().into_inner().queues);
    // An update that leaves the field out (an older client's) keeps the queue private.
    let mut q = own.queue.clone().unwrap();
    q.visibility = JobVisibility::Unspecified.into();
    q.weight = 2.0;
    admin.update_queue(UpdateQueueRequest { queue: Some(q.clone()), revision: own.revision }).await.unwrap();
    assert!(bob.get_job(job_ref("j-own")).await.is_err());
    let own = read(admin.list_queues(Empty {}).await.unwrap().into_inner().queues);
    q.visibility = JobVisibility::All.into();
    admin.update_queue(UpdateQueueRequest { queue: Some(q), revision: own.revision }).await.unwrap();
    assert_full_without_secret(&bob.get_job(job_ref("j-own")).await.unwrap().into_inner());
    // A put cannot set it (it would not be checked against what was read).
    let put = Queue { visibility: JobVisibility::Own.into(), ..queue("own", 8) };
    let e = admin.put_queue(put).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("visibility"), "{}", e.message());
}

/// Events until one of job `until` arrives (bounded by a deadline).
async fn events_until(stream: &mut tonic::Streaming<Event>, until: &str) -> Vec<Event> {
    let mut seen = Vec::new();
    let deadline = std::time::Duration::from_secs(10);
    loop {
        let e = tokio::time::timeout(deadline, stream.message()).await.expect("no event of the marker job").unwrap();
        let e = e.expect("the stream ended");
        let done = e.job == until;
        seen.push(e);
        if done {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_shows_others_events_only_as_each_queue_allows() {
    let (cluster, _agent) = setup().await;
    let addr = &cluster.addrs()[0];
    let mut bob = client(addr, BOB).await;
    let mut admin = client(addr, ADMIN).await;
    let replay = WatchRequest { replay: true, ..Default::default() };
    let mut bobs = bob.watch(replay.clone()).await.unwrap().into_inner();
    let mut admins = admin.watch(replay).await.unwrap().into_inner();
    // Live events after the replayed ones; the last one marks the end of what to read.
    let mut alice = client(addr, ALICE).await;
    for (q, _) in QUEUES {
        alice.submit(secret_job(&format!("late-{q}"), q)).await.unwrap();
    }
    alice.submit(secret_job("marker", "all")).await.unwrap();
    let seen = events_until(&mut bobs, "marker").await;
    let jobs: std::collections::BTreeSet<&str> = seen.iter().map(|e| e.job.as_str()).collect();
    assert_eq!(
        jobs.into_iter().collect::<Vec<_>>(),
        ["j-all", "j-names", "late-all", "late-names", "marker"],
        "no event of a job in an `own` queue: {seen:?}"
    );
    for e in &seen {
        if e.job.ends_with("-names") {
            assert!(e.message.is_empty() && e.nodes.is_empty(), "names only: {e:?}");
        } else {
            assert!(!e.message.is_empty(), "{e:?}");
        }
    }
    let seen = events_until(&mut admins, "marker").await;
    assert!(seen.iter().any(|e| e.job == "j-own") && seen.iter().any(|e| e.job == "late-own"), "{seen:?}");
    assert!(seen.iter().all(|e| !e.message.is_empty()), "{seen:?}");
}

/// A job hidden from a caller is as unknown to a cancel, pause or resume as to a get: the
/// refusal must not say whose it is, nor that it exists. Others' jobs in a visible queue
/// are still refused as someone else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acting_on_a_hidden_job_is_answered_as_for_one_that_does_not_exist() {
    let (cluster, _agent) = setup().await;
    let mut bob = client(&cluster.addrs()[0], BOB).await;
    let missing = bob.cancel_job(JobRef { name: "no-such-job".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let mut alice = client(&cluster.addrs()[0], ALICE).await;
    let own_id = alice.get_job(JobRef { name: "j-own".into(), ..Default::default() }).await.unwrap().into_inner().id;
    for r in [JobRef { name: "j-own".into(), ..Default::default() }, JobRef { id: own_id, ..Default::default() }] {
        for e in [
            bob.cancel_job(r.clone()).await.unwrap_err(),
            bob.pause_job(r.clone()).await.unwrap_err(),
            bob.resume_job(r.clone()).await.unwrap_err(),
        ] {
            assert_eq!(e.code(), Code::NotFound, "{r:?}: {e:?}");
            assert!(!e.message().contains("alice"), "names the owner: {e:?}");
        }
    }
    let e = bob.cancel_job(JobRef { name: "j-all".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // Its logs too: not found, not "its owner's (user alice)" (before, the refusal named the
    // owner of a job `get` said did not exist).
    let logs = LogsRequest { job: "j-own".into(), ..Default::default() };
    let e = bob.job_logs(JobLogsRequest { node: "n1".into(), logs: Some(logs) }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(!e.message().contains("alice"), "names the owner: {e:?}");
    // Its owner still acts on it.
    alice.cancel_job(JobRef { name: "j-own".into(), ..Default::default() }).await.unwrap();
}

/// Rights that shrink count on a watch already open: once carol no longer administers queue
/// `own`, its jobs' events are hidden from her stream as from a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_shows_only_what_the_callers_rights_show_now() {
    let (cluster, _agent) = setup().await;
    let addr = &cluster.addrs()[0];
    let mut carol = client(addr, CAROL).await;
    let mut admin = client(addr, ADMIN).await;
    let mut alice = client(addr, ALICE).await;
    let mut watch = carol.watch(WatchRequest::default()).await.unwrap().into_inner();
    alice.submit(secret_job("before-own", "own")).await.unwrap();
    let seen = events_until(&mut watch, "before-own").await;
    assert!(seen.iter().any(|e| e.job == "before-own" && !e.message.is_empty()), "{seen:?}");
    let id = carol.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.grant_queue(GrantQueueRequest { id, queue: "own".into(), revoke: true, admin: true }).await.unwrap();
    alice.submit(secret_job("after-own", "own")).await.unwrap();
    alice.submit(secret_job("marker", "all")).await.unwrap();
    let seen = events_until(&mut watch, "marker").await;
    assert!(seen.iter().all(|e| e.job != "after-own"), "an event hidden by carol's rights now was sent: {seen:?}");
}

/// A starving job's reservation shows in `cluster info`, which answers without a token too:
/// its name only to those who may see the job. Before, anyone (no token at all) read the
/// names of reserved jobs of `own` queues there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_info_names_a_reserved_job_only_to_those_who_may_see_it() {
    let (cluster, _agent) = setup().await;
    let addr = cluster.addrs()[0].clone();
    let mut admin = client(&addr, ADMIN).await;
    admin.set_scheduler(SchedulerSettings { reserve_after_ms: Some(300) }).await.unwrap();
    // Alice's three jobs hold 3 of n1's 8 GPUs: an 8-GPU job of `own` starves and reserves.
    client(&addr, ALICE).await.submit(submit_of(gpu_job("big-own", "own", "train", 8))).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut alice = client(&addr, ALICE).await;
    while alice.cluster_info(Empty {}).await.unwrap().into_inner().reservations.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no reservation within 10 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let reserved = |info: ClusterInfoReply| info.reservations.into_iter().map(|r| r.job).collect::<Vec<_>>();
    assert_eq!(reserved(alice.cluster_info(Empty {}).await.unwrap().into_inner()), ["big-own"], "its owner");
    assert_eq!(reserved(admin.cluster_info(Empty {}).await.unwrap().into_inner()), ["big-own"], "an admin");
    let mut bob = client(&addr, BOB).await;
    let hidden = ::baton_server::api::HIDDEN_JOB;
    assert_eq!(reserved(bob.cluster_info(Empty {}).await.unwrap().into_inner()), [hidden], "another user");
    let ch = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let anyone = BatonClient::new(ch).cluster_info(Empty {}).await.unwrap().into_inner();
    assert_eq!(reserved(anyone), [hidden], "a caller without a token");
}

/// A user may wait only for jobs they see: a dependency on a job hidden from them is refused
/// in the very words of one on a job that does not exist, and one on a job they see by name
/// only is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dependency_on_a_hidden_job_is_refused_as_an_unknown_one() {
    let (cluster, _agent) = setup().await;
    let mut bob = client(&cluster.addrs()[0], BOB).await;
    let waits_for = |job: &str| {
        let dep = Dependency { job: job.into(), when: DependencyCondition::Any.into() };
        SubmitRequest { after: vec![dep], ..submit_of(gpu_job("bobs", "all", "train", 1)) }
    };
    let hidden = bob.submit(waits_for("j-own")).await.unwrap_err();
    let absent = bob.submit(waits_for("no-such-job")).await.unwrap_err();
    assert_eq!(hidden.code(), absent.code());
    assert_eq!(hidden.message(), absent.message().replace("no-such-job", "j-own"));
    bob.submit(waits_for("j-names")).await.unwrap();
    // carol administers queue `own`: she sees j-own, so she may wait for it.
    let mut carol = client(&cluster.addrs()[0], CAROL).await;
    let dep = Dependency { job: "j-own".into(), when: DependencyCondition::Any.into() };
    carol.submit(SubmitRequest { after: vec![dep], ..submit_of(gpu_job("carols", "own", "train", 1)) }).await.unwrap();
}

/// A victim seen by others does not name a preemptor they may not see (issue 39: its
/// `preempted_by`, its reason and its events named it): bob's borrowed job is preempted by
/// alice's job of a queue that shows others nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_victim_does_not_name_a_preemptor_its_viewer_may_not_see() {
    let settings =
        ServerSettings { auth: AuthMode::Tokens, bootstrap_admin: Some(hash_token(ADMIN)), ..common::settings() };
    let cluster = Cluster::start_with(1, settings).await;
    let addr = cluster.addrs()[0].clone();
    let mut admin = bootstrap_admin(&addr, ADMIN).await;
    admin.create_queue(Queue { visibility: JobVisibility::All.into(), ..queue("open", 0) }).await.unwrap();
    admin.create_queue(Queue { visibility: JobVisibility::Own.into(), ..queue("closed", 8) }).await.unwrap();
    for (token, user, queues) in [(ALICE, "alice", vec!["open", "closed"]), (BOB, "bob", vec!["open"])] {
        let queues = queues.into_iter().map(String::from).collect();
        let req = CreateTokenRequest { hash: hash_token(token).to_vec(), user: user.into(), roles: vec![], queues };
        admin.create_token(req).await.unwrap();
    }
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let mut bob = client(&addr, BOB).await;
    bob.submit(submit_of(gpu_job("low", "open", "train", 8))).await.unwrap();
    let d = agent.until("low runs", |d| has(d, "low", Action::Run)).await;
    let low_id = d.assignments[0].job_id;
    client(&addr, ALICE).await.submit(submit_of(gpu_job("secret-high", "closed", "inference", 8))).await.unwrap();
    agent.until("low is told to stop", |d| has(d, "low", Action::Stop)).await;
    let stopped = Stopped { job_id: low_id, attempt: 1, checkpointed: true, rank: 0, cause: 0, ..Default::default() };
    agent.report(vec![What::Stopped(stopped)]).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let seen_by_admin = loop {
        let j = admin.get_job(job_ref("low")).await.unwrap().into_inner();
        if j.state() == JobState::Pending || std::time::Instant::now() > deadline {
            break j;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(seen_by_admin.preempted_by, "secret-high", "an admin sees who preempted it: {seen_by_admin:?}");

    let j = bob.get_job(job_ref("low")).await.unwrap().into_inner();
    assert_eq!(j.preempted_by, ::baton_server::api::HIDDEN_JOB, "{j:?}");
    let texts: Vec<&str> =
        std::iter::once(j.reason.as_str()).chain(j.events.iter().map(|e| e.message.as_str())).collect();
    assert!(texts.iter().all(|t| !t.contains("secret-high")), "{texts:?}");
    let req = WatchRequest { job: "low".into(), replay: true };
    let mut stream = bob.watch(req).await.unwrap().into_inner();
    let within = std::time::Duration::from_secs(10);
    loop {
        let e = tokio::time::timeout(within, stream.message()).await.expect("no Requeued event").unwrap().unwrap();
        assert!(!e.message.contains("secret-high"), "{e:?}");
        if e.kind() == EventKind::Requeued {
            break;
        }
    }
}

/// Issue 39: live events were judged by their job's name, and a name is reused once its job
/// ended: an event of alice's finished job in a queue that shows others nothing went to bob
/// when bob's new job had taken the name. A live event is judged by its job's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_event_is_judged_by_its_job_not_by_a_newer_job_of_its_name() {
    let (cluster, mut agent) = setup().await;
    let addr = cluster.addrs()[0].clone();
    let (mut alice, mut bob) = (client(&addr, ALICE).await, client(&addr, BOB).await);
    let old = alice.submit(secret_job("dup", "own")).await.unwrap().into_inner().id;
    agent.until("alice's dup runs", |d| has(d, "dup", Action::Run)).await;
    alice.cancel_job(job_ref("dup")).await.unwrap();
    agent.until("alice's dup is told to stop", |d| has(d, "dup", Action::Stop)).await;
    let stopped = Stopped { job_id: old, attempt: 1, checkpointed: false, rank: 0, cause: 0, ..Default::default() };
    agent.report(vec![What::Stopped(stopped)]).await.unwrap();
    agent.until("alice's dup is gone", |d| !d.assignments.iter().any(|a| a.job == "dup")).await;
    bob.submit(secret_job("dup", "all")).await.expect("the name is free once alice's dup ended");
    let mut bobs = bob.watch(WatchRequest { job: String::new(), replay: false }).await.unwrap().into_inner();
    let mut admins = client(&addr, ADMIN).await.watch(WatchRequest::default()).await.unwrap().into_inner();
    // Alice's old attempt still runs on n1, where nothing of it is placed: a stray, and an
    // event of her old job named `dup` (the background heartbeats, which list nothing, are
    // silenced: one reporter per node).
    agent.silence();
    let stray = Running { job_id: old, attempt: 1, task: 0, replica: 0, rank: 0, phase: ReplicaPhase::Running as i32 };
    let reporting = async {
        loop {
            let _ = agent.report_running(vec![stray], vec![]).await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let seen = async {
        loop {
            let e = admins.message().await.unwrap().expect("the admin's watch ended");
            if e.kind() == EventKind::Stray {
                return e;
            }
        }
    };
    let within = std::time::Duration::from_secs(10);
    let e = tokio::time::timeout(within, async {
        tokio::select! { e = seen => e, () = reporting => unreachable!() }
    })
    .await
    .expect("no Stray event of alice's old job");
    assert_eq!(e.job, "dup");
    // Bob's watch got everything applied up to it by now, or gets it within a moment.
    let more = std::time::Duration::from_millis(500);
    while let Ok(Some(e)) = tokio::time::timeout(more, bobs.message()).await.map(|m| m.unwrap()) {
        assert_ne!(e.kind(), EventKind::Stray, "bob saw an event of alice's hidden job: {e:?}");
    }
}
