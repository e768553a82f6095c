//! Accounting (issue 34) through the real API and a fake agent, with tokens on: the leader
//! turns accounting on by itself; each ended attempt is a record `History` answers, each
//! caller seeing only its own (an admin all); `UsageTotals` adds the attempts running now;
//! a reversed range or an unknown state is refused naming the flag; an unknown queue is an
//! empty answer that says so; only admins change the retention.

use crate::common;

use std::time::{Duration, Instant};

use ::baton_server::ServerSettings;
use ::baton_server::auth::{AuthMode, hash_token};
use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

const ADMIN: &str = "admin-secret";
const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";

fn since_start() -> HistoryRequest {
    HistoryRequest { since_ms: 1, ..Default::default() }
}

/// Waits until job `name` is in `state`, as `c` reads it.
async fn wait(c: &mut Client, name: &str, state: JobState) -> Job {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let j = c.get_job(JobRef { name: name.into(), id: 0 }).await.unwrap().into_inner();
        if j.state() == state {
            return j;
        }
        assert!(Instant::now() < deadline, "job {name}: not {state:?} after 10 s: {:?}, {}", j.state(), j.reason);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn history(c: &mut Client, r: HistoryRequest) -> HistoryReply {
    c.history(r).await.unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_and_totals_show_each_caller_its_own_attempts() {
    let settings =
        ServerSettings { auth: AuthMode::Tokens, bootstrap_admin: Some(hash_token(ADMIN)), ..common::settings() };
    let cluster = Cluster::start_with(1, settings).await;
    let addr = cluster.addrs()[0].clone();
    let mut admin = admin_with_users(&addr, ADMIN, "lab", 8, &[(ALICE, "alice"), (BOB, "bob")]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = admin.cluster_info(Empty {}).await.unwrap().into_inner();
        if info.accounting.as_ref().is_some_and(|a| a.on) {
            break;
        }
        assert!(Instant::now() < deadline, "accounting never turned on: {info:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let (mut alice, mut bob) = (client(&addr, ALICE).await, client(&addr, BOB).await);
    alice.submit(submit_of(gpu_job("a1", "lab", "train", 2))).await.unwrap();
    bob.submit(submit_of(gpu_job("b1", "lab", "train", 4))).await.unwrap();
    let a1 = wait(&mut alice, "a1", JobState::Running).await;
    let b1 = wait(&mut bob, "b1", JobState::Running).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let exit =
        |job_id, exit_code| What::Exited(Exited { job_id, attempt: 1, rank: 0, exit_code, reason: String::new() });
    agent.report(vec![exit(a1.id, 0)]).await.unwrap();
    wait(&mut alice, "a1", JobState::Succeeded).await;

    // What each caller sees, right after the write that made the record.
    let mine = history(&mut alice, since_start()).await;
    assert_eq!(mine.records.len(), 1, "{mine:?}");
    let r = &mine.records[0];
    assert_eq!(
        (r.name.as_str(), r.user.as_str(), r.queue.as_str(), r.ending.as_str()),
        ("a1", "alice", "lab", "succeeded")
    );
    assert_eq!((r.gpus, r.exit_code, r.nodes.clone()), (2, Some(0), vec!["n1".to_string()]));
    assert!(r.gpu_ms >= 2 * 300 && r.gpu_ms == 2 * (r.end_ms - r.start_ms), "{r:?}");
    assert!(history(&mut bob, since_start()).await.records.is_empty(), "bob sees none of alice's");
    agent.report(vec![exit(b1.id, 3)]).await.unwrap();
    wait(&mut bob, "b1", JobState::Failed).await;
    let all = history(&mut admin, since_start()).await;
    assert_eq!(all.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a1", "b1"]);
    let failed = history(&mut admin, HistoryRequest { state: Some("failed".into()), ..since_start() }).await;
    assert_eq!((failed.records.len(), failed.records[0].exit_code), (1, Some(3)));
    let bobs = history(&mut admin, HistoryRequest { user: Some("bob".into()), ..since_start() }).await;
    assert_eq!(bobs.records.len(), 1);

    // Totals: ended attempts from the records, a running one from the state.
    alice.submit(submit_of(gpu_job("a2", "lab", "train", 1))).await.unwrap();
    wait(&mut alice, "a2", JobState::Running).await;
    let totals = |by: &str| UsageTotalsRequest { by: by.into(), since_ms: 1, until_ms: None };
    let rows = admin.usage_totals(totals("user")).await.unwrap().into_inner().rows;
    let row = |key: &str| rows.iter().find(|r| r.key == key).cloned().unwrap_or_default();
    assert_eq!((row("alice").jobs, row("alice").attempts, row("alice").running), (2, 2, 1), "{rows:?}");
    assert_eq!((row("bob").jobs, row("bob").running), (1, 0), "{rows:?}");
    let mine = alice.usage_totals(totals("queue")).await.unwrap().into_inner().rows;
    assert_eq!((mine.len(), mine[0].key.as_str(), mine[0].jobs), (1, "lab", 2), "alice's own jobs only: {mine:?}");

    // Bad input is refused by flag; an empty answer says why.
    let e = admin.history(HistoryRequest { since_ms: 10, until_ms: Some(5), ..Default::default() }).await.unwrap_err();
    assert!(e.code() == Code::InvalidArgument && e.message().contains("--since"), "{e:?}");
    let e = admin.history(HistoryRequest { state: Some("exploded".into()), ..since_start() }).await.unwrap_err();
    assert!(e.code() == Code::InvalidArgument && e.message().contains("--state"), "{e:?}");
    let none = history(&mut admin, HistoryRequest { queue: Some("nope".into()), ..since_start() }).await;
    assert!(none.records.is_empty() && none.note.contains("no queue is named nope"), "{none:?}");
    let none = history(&mut admin, HistoryRequest { user: Some("carol".into()), ..since_start() }).await;
    assert!(none.note.contains("no records of user carol"), "{none:?}");
    let e = admin.usage_totals(UsageTotalsRequest { by: "rack".into(), ..Default::default() }).await.unwrap_err();
    assert!(e.code() == Code::InvalidArgument && e.message().contains("--by"), "{e:?}");

    let e = bob.set_accounting(AccountingSettings { retention_ms: 30 * 86_400_000 }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = admin.set_accounting(AccountingSettings { retention_ms: 1_000 }).await.unwrap_err();
    assert!(e.code() == Code::InvalidArgument && e.message().contains("accounting_retention"), "{e:?}");
    admin.set_accounting(AccountingSettings { retention_ms: 30 * 86_400_000 }).await.unwrap();
    let info = admin.cluster_info(Empty {}).await.unwrap().into_inner().accounting.unwrap();
    assert_eq!((info.retention_ms, info.records_made, info.newest_here), (30 * 86_400_000, 2, 2), "{info:?}");
    assert!(info.oldest_here_ms > 0, "{info:?}");
}
