//! Usage over time and per-user limits (decisions.md section 12) through the real API and a
//! fake agent, with tokens on: a queue's `max_per_user` holds a user's second job with
//! that reason while another user's job starts; `GetUsage` shows each caller only its own
//! rows (all of them to an admin); the settings show in `cluster info`; only admins change
//! them, and bad ones are refused naming what is wrong.

use crate::common;

use std::time::{Duration, Instant};

use ::baton_server::ServerSettings;
use ::baton_server::auth::{AuthMode, hash_token};
use baton_proto::v1::*;
use common::*;
use tonic::Code;

const ADMIN: &str = "admin-secret";
const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";

async fn job(c: &mut Client, name: &str) -> Job {
    c.get_job(JobRef { name: name.into(), id: 0 }).await.unwrap().into_inner()
}

/// Waits until `f` holds of job `name` as `c` reads it.
async fn until(c: &mut Client, name: &str, what: &str, f: impl Fn(&Job) -> bool) -> Job {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let j = job(c, name).await;
        if f(&j) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {name}: not {what} after 10 s: {:?}, {}", j.state(), j.reason);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_users_limit_holds_its_job_and_usage_shows_each_caller_its_own_rows() {
    let settings =
        ServerSettings { auth: AuthMode::Tokens, bootstrap_admin: Some(hash_token(ADMIN)), ..common::settings() };
    let cluster = Cluster::start_with(1, settings).await;
    let addr = cluster.addrs()[0].clone();
    let mut admin = admin_with_users(&addr, ADMIN, "lab", 8, &[(ALICE, "alice"), (BOB, "bob")]).await;
    let hour = UsageSettings { half_life_ms: Some(3_600_000), weights_milli: [("gpu".to_string(), 1000)].into() };
    admin.set_usage(hour).await.unwrap();
    let limit = Resources { amounts: [("gpu".to_string(), 4)].into() };
    admin.set_user_limit(UserLimitRequest { queue: "lab".into(), limit: Some(limit) }).await.unwrap();
    let info = admin.cluster_info(Empty {}).await.unwrap().into_inner();
    assert_eq!(info.usage.unwrap().half_life_ms, Some(3_600_000));
    let queues = admin.list_queues(Empty {}).await.unwrap().into_inner().queues;
    assert_eq!(queues[0].max_per_user.as_ref().unwrap().amounts["gpu"], 4);

    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let (mut alice, mut bob) = (client(&addr, ALICE).await, client(&addr, BOB).await);
    alice.submit(submit_of(gpu_job("a1", "lab", "train", 4))).await.unwrap();
    until(&mut alice, "a1", "running", |j| j.state() == JobState::Running).await;
    alice.submit(submit_of(gpu_job("a2", "lab", "train", 2))).await.unwrap();
    bob.submit(submit_of(gpu_job("b1", "lab", "train", 2))).await.unwrap();
    until(&mut bob, "b1", "running", |j| j.state() == JobState::Running).await;
    let a2 = until(&mut alice, "a2", "held by the limit", |j| j.reason.contains("max_per_user")).await;
    assert_eq!(a2.state(), JobState::Pending);
    assert!(
        a2.reason.contains("user alice's jobs in queue lab hold 4 gpu of the 4 each user may hold"),
        "{}",
        a2.reason
    );

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let rows = |r: UsageReply| r.rows.into_iter().map(|r| (r.user.clone(), r)).collect::<Vec<_>>();
    let mine = rows(alice.get_usage(Empty {}).await.unwrap().into_inner());
    assert_eq!(mine.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(), ["alice"], "alice sees her own row only");
    let (_, row) = &mine[0];
    assert_eq!(row.held.as_ref().unwrap().amounts["gpu"], 4);
    assert!(row.weighted > 3.0 && row.usage["gpu"] == row.weighted, "4 GPUs for over a second: {row:?}");
    let all = rows(admin.get_usage(Empty {}).await.unwrap().into_inner());
    assert_eq!(all.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(), ["alice", "bob"]);

    let e = bob.set_usage(UsageSettings { half_life_ms: Some(0), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = admin.set_usage(UsageSettings { half_life_ms: Some(1_000), ..Default::default() }).await.unwrap_err();
    assert!(e.code() == Code::InvalidArgument && e.message().contains("usage_half_life"), "{e:?}");
    let e = admin.set_user_limit(UserLimitRequest { queue: "nope".into(), limit: None }).await.unwrap_err();
    assert!(e.code() == Code::NotFound && e.message().contains("unknown queue \"nope\""), "{e:?}");
}
