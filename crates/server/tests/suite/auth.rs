//! Tokens at the client API (issue 11): each refused call gets UNAUTHENTICATED or
//! PERMISSION_DENIED saying what is missing, and changes nothing; a write forwarded or
//! forged past the API is checked again where it is applied.

use crate::common;

use ::baton_server::ServerSettings;
use ::baton_server::auth::{AuthMode, hash_token};
use baton_model::command::{Command, Op};
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::raft_transport_client::RaftTransportClient;
use baton_proto::v1::*;
use common::*;
use tonic::Code;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const ADMIN: &str = "admin-secret";
const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";

#[derive(Clone)]
struct Bearer(Option<String>);

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(req)
    }
}

type Client = BatonClient<InterceptedService<Channel, Bearer>>;

async fn client(addr: &str, token: Option<&str>) -> Client {
    let ch = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    BatonClient::with_interceptor(ch, Bearer(token.map(str::to_string)))
}

/// A cluster with tokens on, bootstrapped with the admin token; queues `a` and `b`, a node,
/// alice and bob as users of queue `a`.
async fn setup(replicas: u64) -> (Cluster, FakeAgent) {
    setup_with(replicas, common::settings()).await
}

async fn setup_with(replicas: u64, base: ServerSettings) -> (Cluster, FakeAgent) {
    let settings = ServerSettings { auth: AuthMode::Tokens, bootstrap_admin: Some(hash_token(ADMIN)), ..base };
    let cluster = Cluster::start_with(replicas, settings).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while admin.who_am_i(Empty {}).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the bootstrap admin token never committed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for q in ["a", "b"] {
        admin.put_queue(queue(q, 8)).await.unwrap();
    }
    for (token, user) in [(ALICE, "alice"), (BOB, "bob")] {
        let req = CreateTokenRequest {
            hash: hash_token(token).to_vec(),
            user: user.into(),
            roles: vec![],
            queues: vec!["a".into()],
        };
        admin.create_token(req).await.unwrap();
    }
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    (cluster, agent)
}

fn submit(name: &str, queue: &str, rid: &str) -> SubmitRequest {
    let mut spec = gpu_job(name, queue, "train", 1);
    spec.env.insert("SECRET".into(), "s3".into());
    SubmitRequest { spec: Some(spec), request_id: rid.into(), run_as: String::new(), after: Vec::new(), array: None }
}

fn job_ref(name: &str) -> JobRef {
    JobRef { name: name.into(), ..Default::default() }
}

/// Every job, as the admin sees them.
async fn all_jobs(c: &mut Client) -> Vec<Job> {
    c.list_jobs(ListJobsRequest::default()).await.unwrap().into_inner().jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_token_is_unauthenticated_and_changes_nothing() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut anon = client(&cluster.addrs()[0], None).await;
    let e = anon.submit(submit("j", "a", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("missing `authorization: Bearer TOKEN`"), "{}", e.message());
    let e = anon.list_jobs(ListJobsRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let e = client(&cluster.addrs()[0], Some("not-a-token")).await.submit(submit("j", "a", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    assert!(e.message().contains("unknown token"), "{}", e.message());
    assert!(all_jobs(&mut admin).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_token_is_unauthenticated_at_once() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    alice.submit(submit("j1", "a", "")).await.unwrap();
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.revoke_token(TokenRef { id }).await.unwrap();
    let e = alice.submit(submit("j2", "a", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("revoked"), "{}", e.message());
    let names: Vec<String> = all_jobs(&mut admin).await.into_iter().map(|j| j.spec.unwrap().name).collect();
    assert_eq!(names, ["j1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_user_submitting_to_a_queue_not_granted_is_denied() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let e = alice.submit(submit("j", "b", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("no grant on queue b"), "{}", e.message());
    let e = alice.put_queue(queue("c", 8)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("needs role admin"), "{}", e.message());
    assert!(all_jobs(&mut admin).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_another_users_job_is_denied() {
    let (cluster, _agent) = setup(1).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut bob = client(&cluster.addrs()[0], Some(BOB)).await;
    alice.submit(submit("j", "a", "")).await.unwrap();
    let e = bob.cancel_job(job_ref("j")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("belongs to user alice"), "{}", e.message());
    let after = alice.get_job(job_ref("j")).await.unwrap().into_inner();
    assert_ne!(after.state(), JobState::Cancelled);
    assert!(after.events.iter().all(|e| e.kind() != baton_proto::v1::EventKind::Cancelled), "{:?}", after.events);
    alice.cancel_job(job_ref("j")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_users_environment_is_hidden() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut bob = client(&cluster.addrs()[0], Some(BOB)).await;
    alice.submit(submit("j", "a", "")).await.unwrap();
    let seen = bob.get_job(job_ref("j")).await.unwrap().into_inner();
    assert!(seen.env_hidden && seen.spec.unwrap().env.is_empty());
    assert_eq!(seen.owner, "alice");
    let listed = bob.list_jobs(ListJobsRequest::default()).await.unwrap().into_inner().jobs;
    assert!(listed.iter().all(|j| j.env_hidden && j.spec.as_ref().unwrap().env.is_empty()));
    for c in [&mut alice, &mut admin] {
        let j = c.get_job(job_ref("j")).await.unwrap().into_inner();
        assert!(!j.env_hidden);
        assert_eq!(j.spec.unwrap().env.get("SECRET").map(String::as_str), Some("s3"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_admin_sees_and_cancels_other_users_jobs_in_that_queue_only() {
    let (cluster, _agent) = setup(1).await;
    let addr = &cluster.addrs()[0];
    let mut admin = client(addr, Some(ADMIN)).await;
    let mut alice = client(addr, Some(ALICE)).await;
    let mut bob = client(addr, Some(BOB)).await;
    alice.submit(submit("j", "a", "")).await.unwrap();
    let bob_id = bob.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    let grant = GrantQueueRequest { id: bob_id.clone(), queue: "a".into(), revoke: false, admin: true };
    let e = alice.grant_queue(grant.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "only admins grant: {e:?}");
    admin.grant_queue(grant).await.unwrap();
    let me = bob.who_am_i(Empty {}).await.unwrap().into_inner();
    assert_eq!(me.admin_of, ["a"]);
    let listed = admin.list_tokens(Empty {}).await.unwrap().into_inner().tokens;
    assert_eq!(listed.iter().find(|t| t.id == bob_id).unwrap().admin_of, ["a"]);
    // Bob now sees alice's environment in queue a and may cancel her job there.
    let seen = bob.get_job(job_ref("j")).await.unwrap().into_inner();
    assert!(!seen.env_hidden, "a queue admin sees the environment");
    assert_eq!(seen.spec.unwrap().env.get("SECRET").map(String::as_str), Some("s3"));
    bob.cancel_job(job_ref("j")).await.unwrap();
    // Not in queue b, which he does not administer.
    admin.submit(submit("k", "b", "")).await.unwrap();
    assert!(bob.get_job(job_ref("k")).await.unwrap().into_inner().env_hidden);
    let e = bob.cancel_job(job_ref("k")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("an admin of queue b"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_id_another_user_used_makes_a_new_job() {
    let (cluster, _agent) = setup(1).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut bob = client(&cluster.addrs()[0], Some(BOB)).await;
    let first = alice.submit(submit("ja", "a", "r1")).await.unwrap().into_inner();
    let other = bob.submit(submit("jb", "a", "r1")).await.unwrap().into_inner();
    assert!(!other.duplicate && other.id != first.id && other.name == "jb", "{other:?}");
    let again = alice.submit(submit("ja", "a", "r1")).await.unwrap().into_inner();
    assert!(again.duplicate && again.id == first.id, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_through_a_follower_and_forged_forwards_are_checked_where_applied() {
    let (cluster, _agent) = setup(3).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let mut admin = client(&cluster.addrs()[leader], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[follower], Some(ALICE)).await;
    alice.submit(submit("j", "a", "")).await.unwrap();
    let e = alice.submit(submit("k", "b", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "through the follower: {e:?}");

    // A forwarded write sent straight to the leader's raft service, without a token.
    let cmd = Command { now_ms: 0, op: Op::Cancel { job: 1 } };
    let mut raft = RaftTransportClient::connect(format!("http://{}", cluster.addrs()[leader])).await.unwrap();
    let req = RaftRequest {
        cluster_id: "test".into(),
        from_node_id: follower as u64 + 1,
        to_node_id: leader as u64 + 1,
        payload: baton_raft::codec::encode(&cmd).unwrap(),
    };
    let reply = raft.forward_write(req).await.unwrap().into_inner();
    let answer: Result<baton_model::Response, baton_raft::WriteError> =
        baton_raft::codec::decode(&reply.payload).unwrap();
    let refused = answer.unwrap().unwrap_err();
    assert!(matches!(refused, baton_model::ApplyError::Unauthenticated(_)), "{refused:?}");
    let j = admin.get_job(job_ref("j")).await.unwrap().into_inner();
    assert_ne!(j.state(), JobState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auth_none_asks_for_tokens_once_the_cluster_has_one() {
    let settings = ServerSettings { bootstrap_admin: Some(hash_token(ADMIN)), ..common::settings() };
    assert_eq!(settings.auth, AuthMode::None);
    let cluster = Cluster::start_with(1, settings).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !admin.list_tokens(Empty {}).await.is_ok_and(|r| !r.into_inner().tokens.is_empty()) {
        assert!(std::time::Instant::now() < deadline, "the bootstrap admin token never committed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let e = client(&cluster.addrs()[0], None).await.list_jobs(ListJobsRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
}

fn run_as(mut r: SubmitRequest, user: &str) -> SubmitRequest {
    r.run_as = user.into();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_asking_to_run_as_root_is_denied_at_submit_and_nothing_changes() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let e = admin.submit(run_as(submit("j", "a", ""), "root")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("may not run as root") && e.message().contains("allow_root_jobs"), "{}", e.message());
    assert!(all_jobs(&mut admin).await.is_empty());
    let e = admin.submit(run_as(submit("j", "a", ""), "0")).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "a uid is no user name: {e:?}");
    assert!(e.message().starts_with("run_as: "), "{}", e.message());
    // Allowed by an admin, it is accepted and shows who it runs as.
    let allow = TenancySettings { allow_root_jobs: Some(true), ..Default::default() };
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    assert_eq!(alice.set_tenancy(allow).await.unwrap_err().code(), Code::PermissionDenied);
    admin.set_tenancy(allow).await.unwrap();
    let info = admin.cluster_info(Empty {}).await.unwrap().into_inner().tenancy.unwrap();
    assert_eq!(info.allow_root_jobs, Some(true));
    assert_eq!(info.max_jobs_per_user, Some(1_000), "fields left out keep their value");
    admin.submit(run_as(submit("j", "a", ""), "root")).await.unwrap();
    assert_eq!(admin.get_job(job_ref("j")).await.unwrap().into_inner().run_as, "root");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whoami_names_the_unix_user_jobs_run_as_or_why_a_submit_would_be_refused() {
    let (cluster, _agent) = setup(1).await;
    let addr = &cluster.addrs()[0];
    let me = client(addr, Some(ALICE)).await.who_am_i(Empty {}).await.unwrap().into_inner();
    assert_eq!((me.run_as.as_str(), me.run_as_refused.as_str()), ("alice", ""));
    // A token user whose name is no Unix user name ("root" is no token user name at all).
    let mut admin = client(addr, Some(ADMIN)).await;
    let carol = CreateTokenRequest {
        hash: hash_token("carol-token").to_vec(),
        user: "Carol.Smith".into(),
        roles: vec![],
        queues: vec!["a".into()],
    };
    admin.create_token(carol).await.unwrap();
    let mut carol = client(addr, Some("carol-token")).await;
    let me = carol.who_am_i(Empty {}).await.unwrap().into_inner();
    assert_eq!(me.run_as, "");
    assert!(me.run_as_refused.contains("\"Carol.Smith\" is not a Unix user name"), "{}", me.run_as_refused);
    // What whoami says is what a submit meets.
    let e = carol.submit(submit("j", "a", "")).await.unwrap_err();
    assert_eq!(e.message(), me.run_as_refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_runs_as_its_submitter_and_its_assignment_says_so() {
    let (cluster, mut agent) = setup(1).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    alice.submit(submit("j", "a", "")).await.unwrap();
    assert_eq!(alice.get_job(job_ref("j")).await.unwrap().into_inner().run_as, "alice");
    let d = agent.until("j started", |d| has(d, "j", Action::Run)).await;
    let a = d.assignments.iter().find(|a| a.job == "j").unwrap();
    assert_eq!(a.run_as, "alice");
    let e = alice.submit(run_as(submit("k", "a", ""), "bob")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("needs role operator"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_over_the_per_user_bound_are_refused_naming_it() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    admin.set_tenancy(TenancySettings { max_jobs_per_user: Some(1), ..Default::default() }).await.unwrap();
    alice.submit(submit("j1", "a", "")).await.unwrap();
    let e = alice.submit(submit("j2", "a", "")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("max_jobs_per_user (1)"), "{}", e.message());
    let e = admin.set_tenancy(TenancySettings { max_jobs_per_queue: Some(0), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("max_jobs_per_queue must be 1 to"), "{}", e.message());
}

/// Issue 39: nothing bounded how fast one user wrote; a script could fill the log and the
/// leader's apply queue for everyone. A queue user's writes are bounded per second (bursts of
/// twice as many) and the refusal names the setting; admins are not bounded; a pause lets
/// the user write again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_users_writes_are_bounded_per_second_naming_the_setting() {
    let base = ServerSettings { max_user_writes_per_s: 5, ..common::settings() };
    let (cluster, _agent) = setup_with(1, base).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut refused = None;
    for i in 0..30 {
        if let Err(e) = alice.submit(submit(&format!("burst-{i}"), "a", "")).await {
            refused = Some((i, e));
            break;
        }
    }
    let (at, e) = refused.expect("30 writes at once were all taken");
    assert!(at >= 10, "refused after {at} writes: the burst is 10");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("user alice") && e.message().contains("max_user_writes_per_s"), "{}", e.message());
    for i in 0..30 {
        admin.submit(submit(&format!("admin-{i}"), "a", "")).await.expect("admins are not bounded");
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    alice.submit(submit("after-a-pause", "a", "")).await.expect("written again after a pause");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_users_logs_are_denied_at_the_replica() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut bob = client(&cluster.addrs()[0], Some(BOB)).await;
    alice.submit(submit("j", "a", "")).await.unwrap();
    let logs =
        || JobLogsRequest { node: "n1".into(), logs: Some(LogsRequest { job: "j".into(), ..Default::default() }) };
    let Err(e) = bob.job_logs(logs()).await else { panic!("bob read alice's logs") };
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("owner's (user alice)") && e.message().contains("user bob"), "{}", e.message());
    let e = client(&cluster.addrs()[0], None).await.job_logs(logs()).await.err().unwrap();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    // The owner and an admin get past the check to the node (whose fake agent serves no logs).
    for c in [&mut alice, &mut admin] {
        let e = c.job_logs(logs()).await.err().unwrap();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("node n1 has no agent address"), "{}", e.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_streams_are_bounded_per_user_and_the_refusal_names_the_bound() {
    let base = ServerSettings { max_watch_streams_per_client: 2, ..common::settings() };
    let (cluster, _agent) = setup_with(1, base).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut bob = client(&cluster.addrs()[0], Some(BOB)).await;
    let first = alice.watch(WatchRequest::default()).await.unwrap().into_inner();
    let _second = alice.watch(WatchRequest::default()).await.unwrap().into_inner();
    let Err(e) = alice.watch(WatchRequest::default()).await else { panic!("a third watch of alice's was taken") };
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("user alice has 2 watch streams open")
            && e.message().contains("max_watch_streams_per_client"),
        "{}",
        e.message()
    );
    // Another user is not held back by alice's streams.
    let _bob = bob.watch(WatchRequest::default()).await.unwrap().into_inner();
    // A closed stream frees its slot, even while no event flows.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(e) = alice.watch(WatchRequest::default()).await {
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(std::time::Instant::now() < deadline, "the closed watch's slot was never freed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn membership_changes_and_backups_need_an_admin() {
    use baton_proto::v1::{AddReplicaRequest, ReplicaRef};
    let (cluster, _agent) = setup(1).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let denied = |e: tonic::Status, what: &str| {
        assert_eq!(e.code(), Code::PermissionDenied, "{what}: {e:?}");
        assert!(e.message().contains(what) && e.message().contains("needs role admin"), "{}", e.message());
    };
    let add = AddReplicaRequest { id: 2, addr: "127.0.0.1:1".into(), peer_addr: String::new() };
    denied(alice.add_replica(add).await.unwrap_err(), "AddReplica");
    denied(alice.remove_replica(ReplicaRef { id: 1 }).await.unwrap_err(), "RemoveReplica");
    denied(alice.transfer_leader(ReplicaRef { id: 0 }).await.unwrap_err(), "TransferLeader");
    denied(alice.save_snapshot(Empty {}).await.unwrap_err(), "SaveSnapshot");

    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut stream = admin.save_snapshot(Empty {}).await.unwrap().into_inner();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        bytes.extend_from_slice(&chunk.data);
    }
    let backup = baton_raft::backup::Backup::from_bytes(&bytes, std::path::Path::new("stream")).unwrap();
    let state = baton_raft::codec::decode_state(&backup.state).unwrap();
    assert!(state.queues().len() == 2 && backup.index > 0, "the backup holds the queues made in setup");
}

/// An agent's log service whose every log stays open and silent until its reader goes.
struct OpenLogs;

#[tonic::async_trait]
impl baton_proto::v1::agent_logs_server::AgentLogs for OpenLogs {
    type LogsStream = tokio_stream::wrappers::ReceiverStream<Result<LogChunk, tonic::Status>>;

    async fn logs(&self, _r: tonic::Request<LogsRequest>) -> Result<tonic::Response<Self::LogsStream>, tonic::Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        // The sender lives as long as the stream's reader: the log never ends by itself.
        tokio::spawn(async move { tx.closed().await });
        Ok(tonic::Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn log_streams_are_bounded_per_user_and_the_refusal_names_the_bound() {
    let logs_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let logs_addr = logs_listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(baton_proto::v1::agent_logs_server::AgentLogsServer::new(OpenLogs))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(logs_listener)),
    );
    let base = ServerSettings { max_log_streams_per_client: 2, ..common::settings() };
    let (cluster, _agent) = setup_with(1, base).await;
    let with_logs = NodeInfo { agent_addr: logs_addr, ..node("n2", 8) };
    let _agent2 = FakeAgent::attach(&cluster.addrs(), with_logs).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut bob = client(&cluster.addrs()[0], Some(BOB)).await;
    alice.submit(submit("aj", "a", "")).await.unwrap();
    bob.submit(submit("bj", "a", "")).await.unwrap();
    let logs = |job: &str| JobLogsRequest {
        node: "n2".into(),
        logs: Some(LogsRequest { job: job.into(), follow: true, ..Default::default() }),
    };
    let first = alice.job_logs(logs("aj")).await.unwrap().into_inner();
    let _second = alice.job_logs(logs("aj")).await.unwrap().into_inner();
    let Err(e) = alice.job_logs(logs("aj")).await else { panic!("a third log stream of alice's was taken") };
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("user alice has 2 log streams open")
            && e.message().contains("max_log_streams_per_client 2"),
        "{}",
        e.message()
    );
    // Another user is not held back by alice's streams.
    let _bob = bob.job_logs(logs("bj")).await.unwrap().into_inner();
    // A closed stream frees its slot, even while no chunk flows.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(e) = alice.job_logs(logs("aj")).await {
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(std::time::Instant::now() < deadline, "the closed log stream's slot was never freed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An agent's log service that writes `chunks` chunks of 1,000 bytes, then ends the log.
struct ChattyLogs {
    chunks: u64,
}

#[tonic::async_trait]
impl baton_proto::v1::agent_logs_server::AgentLogs for ChattyLogs {
    type LogsStream = tokio_stream::wrappers::ReceiverStream<Result<LogChunk, tonic::Status>>;

    async fn logs(&self, _r: tonic::Request<LogsRequest>) -> Result<tonic::Response<Self::LogsStream>, tonic::Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let chunks = self.chunks;
        tokio::spawn(async move {
            for i in 0..chunks {
                let chunk = LogChunk { attempt: 1, offset: i * 1_000, data: vec![b'x'; 1_000] };
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        });
        Ok(tonic::Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_stream_ends_at_its_byte_bound_naming_it_and_where_the_log_goes_on() {
    let logs_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let logs_addr = logs_listener.local_addr().unwrap().to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(baton_proto::v1::agent_logs_server::AgentLogsServer::new(ChattyLogs { chunks: 100 }))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(logs_listener)),
    );
    let base = ServerSettings { max_log_stream_bytes: 4_500, ..common::settings() };
    let (cluster, _agent) = setup_with(1, base).await;
    let with_logs = NodeInfo { agent_addr: logs_addr, ..node("n2", 8) };
    let _agent2 = FakeAgent::attach(&cluster.addrs(), with_logs).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    alice.submit(submit("aj", "a", "")).await.unwrap();
    let req = JobLogsRequest {
        node: "n2".into(),
        logs: Some(LogsRequest { job: "aj".into(), follow: true, ..Default::default() }),
    };
    let mut stream = alice.job_logs(req).await.unwrap().into_inner();
    let mut relayed = 0usize;
    let end = loop {
        match stream.message().await {
            Ok(Some(chunk)) => relayed += chunk.data.len(),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    assert_eq!(relayed, 4_000, "the stream relayed more than max_log_stream_bytes, or less");
    let e = end.expect("the stream ended without saying it reached its bound");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("max_log_stream_bytes (4500)") && e.message().contains("byte 4000"),
        "{}",
        e.message()
    );
}

/// How the stream `s` ends, with every event it sent first (bounded: a stream still open
/// after `STREAM_END_WAIT` fails the test, naming what it sent).
async fn until_end<T: std::fmt::Debug>(s: &mut tonic::Streaming<T>) -> (Vec<T>, Option<tonic::Status>) {
    let deadline = tokio::time::Instant::now() + STREAM_END_WAIT;
    let mut sent = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, s.message()).await {
            Ok(Ok(Some(m))) => sent.push(m),
            Ok(Ok(None)) => return (sent, None),
            Ok(Err(e)) => return (sent, Some(e)),
            Err(_) => panic!("the stream was still open {STREAM_END_WAIT:?} after the revocation; it sent {sent:?}"),
        }
    }
}

/// Longest wait for a stream to end once its token lost its rights.
const STREAM_END_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Events of `s` until one of job `job` (bounded).
async fn until_event_of(s: &mut tonic::Streaming<Event>, job: &str) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + STREAM_END_WAIT;
    let mut seen = Vec::new();
    loop {
        let e = tokio::time::timeout_at(deadline, s.message())
            .await
            .unwrap_or_else(|_| panic!("no event of job {job} within {STREAM_END_WAIT:?}; saw {seen:?}"))
            .expect("the stream failed")
            .expect("the stream ended");
        let done = e.job == job;
        seen.push(e);
        if done {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_tokens_watch_ends_unauthenticated_and_sends_nothing_applied_after() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut watch = alice.watch(WatchRequest::default()).await.unwrap().into_inner();
    // Alice sees the events of others' jobs in queue a (its visibility is `all`).
    admin.submit(submit("before", "a", "")).await.unwrap();
    until_event_of(&mut watch, "before").await;
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.revoke_token(TokenRef { id: id.clone() }).await.unwrap();
    // Every event of this job is applied after the revocation.
    admin.submit(submit("after", "a", "")).await.unwrap();
    let (sent, end) = until_end(&mut watch).await;
    assert!(sent.iter().all(|e| e.job != "after"), "an event applied after the revocation was sent: {sent:?}");
    let e = end.expect("the stream ended without saying why");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains(&format!("token {id} of user alice was revoked")), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_tokens_silent_watch_ends_too() {
    let (cluster, _agent) = setup(1).await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let mut watch = alice.watch(WatchRequest::default()).await.unwrap().into_inner();
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    // The revocation makes no event: nothing wakes the stream but its own re-check.
    admin.revoke_token(TokenRef { id }).await.unwrap();
    let (_, end) = until_end(&mut watch).await;
    let e = end.expect("the stream ended without saying why");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("revoked"), "{}", e.message());
}

/// An agent's log service whose one log relays what the test sends into `feed`, and stays
/// open until its reader goes.
struct FedLogs {
    feed: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<Result<LogChunk, tonic::Status>>>>,
}

#[tonic::async_trait]
impl baton_proto::v1::agent_logs_server::AgentLogs for FedLogs {
    type LogsStream = tokio_stream::wrappers::ReceiverStream<Result<LogChunk, tonic::Status>>;

    async fn logs(&self, _r: tonic::Request<LogsRequest>) -> Result<tonic::Response<Self::LogsStream>, tonic::Status> {
        let rx = self.feed.lock().unwrap().take().ok_or_else(|| tonic::Status::internal("the one log was read"))?;
        Ok(tonic::Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

/// Setup, with node n2 whose agent serves one log fed by the returned sender, alice's job
/// `aj` and her follow stream of its log.
async fn fed_log_stream()
-> (Cluster, Vec<FakeAgent>, tokio::sync::mpsc::Sender<Result<LogChunk, tonic::Status>>, tonic::Streaming<LogChunk>) {
    let (feed, rx) = tokio::sync::mpsc::channel(4);
    let logs_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let logs_addr = logs_listener.local_addr().unwrap().to_string();
    let service = FedLogs { feed: std::sync::Mutex::new(Some(rx)) };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(baton_proto::v1::agent_logs_server::AgentLogsServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(logs_listener)),
    );
    let (cluster, agent) = setup(1).await;
    let with_logs = NodeInfo { agent_addr: logs_addr, ..node("n2", 8) };
    let agent2 = FakeAgent::attach(&cluster.addrs(), with_logs).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    alice.submit(submit("aj", "a", "")).await.unwrap();
    let req = JobLogsRequest {
        node: "n2".into(),
        logs: Some(LogsRequest { job: "aj".into(), follow: true, ..Default::default() }),
    };
    let stream = alice.job_logs(req).await.unwrap().into_inner();
    (cluster, vec![agent, agent2], feed, stream)
}

fn chunk(offset: u64, text: &str) -> LogChunk {
    LogChunk { attempt: 1, offset, data: text.as_bytes().to_vec() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_tokens_log_stream_ends_unauthenticated_and_relays_nothing_after() {
    let (cluster, _agents, feed, mut logs) = fed_log_stream().await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    feed.send(Ok(chunk(0, "before\n"))).await.unwrap();
    let first = tokio::time::timeout(STREAM_END_WAIT, logs.message()).await.expect("no first chunk");
    assert_eq!(first.unwrap().unwrap().data, b"before\n");
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.revoke_token(TokenRef { id: id.clone() }).await.unwrap();
    // The agent goes on writing; the replica has applied the revocation (it acknowledged it).
    feed.send(Ok(chunk(7, "after\n"))).await.unwrap();
    let (sent, end) = until_end(&mut logs).await;
    assert!(sent.is_empty(), "a chunk was relayed after the revocation: {sent:?}");
    let e = end.expect("the stream ended without saying why");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains(&format!("token {id} of user alice was revoked")), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_tokens_silent_log_stream_ends_too() {
    let (cluster, _agents, _feed, mut logs) = fed_log_stream().await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.revoke_token(TokenRef { id }).await.unwrap();
    let (sent, end) = until_end(&mut logs).await;
    assert!(sent.is_empty(), "{sent:?}");
    let e = end.expect("the stream ended without saying why");
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("revoked"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_stream_ends_when_its_reader_loses_the_grant_that_let_them_read_it() {
    let (cluster, _agents, feed, mut logs) = fed_log_stream().await;
    let mut admin = client(&cluster.addrs()[0], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[0], Some(ALICE)).await;
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    // An owner reads their job's logs only while granted its queue (docs/security.md).
    admin.grant_queue(GrantQueueRequest { id, queue: "a".into(), revoke: true, admin: false }).await.unwrap();
    feed.send(Ok(chunk(0, "after\n"))).await.unwrap();
    let (sent, end) = until_end(&mut logs).await;
    assert!(sent.is_empty(), "a chunk was relayed after the grant was taken back: {sent:?}");
    let e = end.expect("the stream ended without saying why");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("the logs of job aj") && e.message().contains("user alice"), "{}", e.message());
}

/// A membership change sent straight to the leader's raft service (the raft port takes any
/// replica certificate) as `from`, carrying `authority`: the leader's answer.
async fn forged_membership(
    cluster: &Cluster,
    leader: usize,
    from: usize,
    payload: Vec<u8>,
) -> Result<baton_raft::ReplicaMetrics, baton_raft::MembershipError> {
    let mut raft = RaftTransportClient::connect(format!("http://{}", cluster.addrs()[leader])).await.unwrap();
    let req = RaftRequest {
        cluster_id: "test".into(),
        from_node_id: from as u64 + 1,
        to_node_id: leader as u64 + 1,
        payload,
    };
    let reply = raft.membership(req).await.unwrap().into_inner();
    baton_raft::codec::decode(&reply.payload).unwrap()
}

/// Issue 39: the `Membership` RPC made any change a replica forwarded, with no admin check
/// on the leader. Now a forwarded change carries the caller's token hash and the leader
/// judges it: none (as a replica of an older build, or a forger, sends it), a user's, or an
/// unknown one is refused with PERMISSION_DENIED's reason and nothing moves; an admin's
/// change through a follower is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_membership_change_needs_an_admins_token_on_the_leader() {
    let (cluster, _agent) = setup(3).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let to = Some(follower as u64 + 1);
    let change = baton_raft::Change::Transfer { to };
    let forwarded = |authority: Option<Vec<u8>>| {
        baton_raft::codec::encode(&baton_raft::Forwarded { change: change.clone(), authority }).unwrap()
    };
    let cases = [
        ("a bare change", baton_raft::codec::encode(&change).unwrap(), "without the caller's token"),
        ("no token", forwarded(None), "without the caller's token"),
        ("alice's token", forwarded(Some(hash_token(ALICE).to_vec())), "needs role admin; user alice"),
        ("an unknown token", forwarded(Some(hash_token("nobody").to_vec())), "unknown token"),
    ];
    for (what, payload, why) in cases {
        let e = forged_membership(&cluster, leader, follower, payload).await.expect_err(what);
        assert!(matches!(&e, baton_raft::MembershipError::NotAllowed(m) if m.contains(why)), "{what}: {e}");
    }
    assert_eq!(cluster.leader().await, leader, "a refused change moved leadership");

    let mut admin = client(&cluster.addrs()[follower], Some(ADMIN)).await;
    let mut alice = client(&cluster.addrs()[follower], Some(ALICE)).await;
    let e = alice.transfer_leader(ReplicaRef { id: follower as u64 + 1 }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let moved = admin.transfer_leader(ReplicaRef { id: follower as u64 + 1 }).await.unwrap().into_inner();
    assert_eq!(moved.leader_id, follower as u64 + 1, "an admin's change through a follower was not made");
}
