//! The AgentLogs service and the `fetch_logs` client helper.

use crate::common;

use baton_agent::inventory::development_inventory;
use baton_agent::journal::Journal;
use baton_agent::journal_store::SimDisk;
use baton_agent::{LogsError, fetch_logs};
use baton_proto::v1::{Action, LogsRequest};
use common::*;

fn follow_request(job_id: u64) -> LogsRequest {
    LogsRequest {
        job: format!("job-{job_id}"),
        job_id,
        attempt: 0,
        rank: 0,
        stream: "stdout".into(),
        offset: 0,
        follow: true,
    }
}

/// A replica's output is on disk the moment it starts, while the agent still journals the
/// start (an fsync, slow on a busy disk). A follow asked for in that window must wait for
/// more, not end with what is there: the replica counts as live from before its start.
/// (It ended at once when the replica became live only after the journal write; seen as a
/// flaky follow under load.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_asked_while_the_start_is_journaled_waits_for_more() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let gw = Gateway::start(None).await;
    let c = config(dir.path(), &[gw.addr]);
    let inventory = development_inventory(&c.name, 4);
    let journal = Journal::with_store(&dir.path().join("journal"), Box::new(disk.open())).expect("the journal opens");
    let agent = baton_agent::start_with_journal(c, inventory, journal).await.unwrap();
    let addr = agent.logs_addr().to_string();
    let go = dir.path().join("go");
    let cmd = format!("echo first; while [ ! -e {go} ]; do sleep 0.02; done; echo last", go = go.display());
    disk.set_flush_delay(std::time::Duration::from_millis(1_500));
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let log = dir.path().join("logs/job-1/1/rank-0.stdout");
    wait_for(10, "first output", || std::fs::read_to_string(&log).ok().filter(|t| t.contains("first"))).await;
    let follow = tokio::spawn({
        let addr = addr.clone();
        async move {
            let mut out = Vec::new();
            fetch_logs(&addr, follow_request(1), &mut out).await.map(|_| out)
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    if follow.is_finished() {
        let how = follow.await.unwrap().map(|out| String::from_utf8_lossy(&out).into_owned());
        panic!("the follow ended while the replica runs: {how:?}");
    }
    disk.set_flush_delay(std::time::Duration::ZERO);
    std::fs::write(&go, b"").unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(15), follow).await.unwrap().unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "first\nlast\n");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_served_and_followed_until_the_replica_ends() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let go = dir.path().join("go");
    let cmd = format!(
        "echo first; echo oops >&2; while [ ! -e {go} ]; do sleep 0.02; done; for i in 1 2 3; do echo line $i; sleep 0.05; done",
        go = go.display()
    );
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let addr = agent.logs_addr().to_string();
    let log = dir.path().join("logs/job-1/1/rank-0.stdout");
    wait_for(5, "first output", || std::fs::read_to_string(&log).ok().filter(|t| t.contains("first"))).await;

    // Not following: what is there now.
    let mut out = Vec::new();
    let req = |follow: bool, stream: &str, offset: u64| LogsRequest {
        job: "job-1".into(),
        job_id: 1,
        attempt: 0,
        rank: 0,
        stream: stream.into(),
        offset,
        follow,
    };
    fetch_logs(&addr, req(false, "", 0), &mut out).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "first\n");
    let mut err = Vec::new();
    fetch_logs(&addr, req(false, "stderr", 0), &mut err).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&err), "oops\n");

    // Following from an offset: everything after it until the replica ends.
    let follow = tokio::spawn({
        let addr = addr.clone();
        async move {
            let mut out = Vec::new();
            fetch_logs(&addr, req(true, "stdout", 2), &mut out).await.map(|_| out)
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    if follow.is_finished() {
        let how = follow.await.unwrap().map(|out| String::from_utf8_lossy(&out).into_owned());
        panic!("a followed log waits for more while the replica runs; it ended: {how:?}");
    }
    std::fs::write(&go, b"").unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(5), follow).await.unwrap().unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&out), "rst\nline 1\nline 2\nline 3\n");

    // Bad requests get clear errors.
    let mut sink = Vec::new();
    let e = fetch_logs(&addr, LogsRequest { job_id: 99, ..req(false, "", 0) }, &mut sink).await.unwrap_err();
    assert!(matches!(&e, LogsError::Refused { status, .. } if status.code() == tonic::Code::NotFound), "{e}");
    let e = fetch_logs(&addr, req(false, "stdin", 0), &mut sink).await.unwrap_err();
    assert!(e.to_string().contains("stdin"), "{e}");
    let e = fetch_logs(&addr, LogsRequest { job_id: 0, ..req(false, "", 0) }, &mut sink).await.unwrap_err();
    assert!(matches!(&e, LogsError::Refused { status, .. } if status.code() == tonic::Code::InvalidArgument), "{e}");
    assert!(e.to_string().contains("job_id"), "{e}");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_agent_is_a_clear_error() {
    let refusing = refusing();
    let dead = refusing.addr;
    let mut sink = Vec::new();
    let req = LogsRequest { job: "j".into(), ..Default::default() };
    let e = fetch_logs(&dead.to_string(), req, &mut sink).await.unwrap_err();
    assert!(matches!(e, LogsError::Connect { .. }), "{e}");
    assert!(e.to_string().contains(&dead.to_string()));
}

/// Logs were kept under the job's name, which a later job may reuse: the second job's
/// output was appended to the first one's file and `baton logs` of either showed both.
/// They are kept under the job's id, as checkpoints are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_sharing_a_name_keep_their_own_logs() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let mut first = assignment(1, 1, Action::Run, "echo one");
    first.job = "train".into();
    gw.set(1, vec![first]);
    wait_for(5, "job 1 exits", || (!exited_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    let mut second = assignment(2, 1, Action::Run, "echo two");
    second.job = "train".into();
    gw.set(1, vec![second]);
    wait_for(5, "job 2 exits", || (!exited_of(&gw.observations(), 2).is_empty()).then_some(())).await;

    let read = |id: u64| std::fs::read_to_string(dir.path().join(format!("logs/job-{id}/1/rank-0.stdout")));
    assert_eq!(read(1).ok().as_deref(), Some("one\n"));
    assert_eq!(read(2).ok().as_deref(), Some("two\n"));
    // Served by id: the name alone does not say which.
    let req = |job_id| LogsRequest { job: "train".into(), job_id, ..Default::default() };
    let (mut one, mut two) = (Vec::new(), Vec::new());
    fetch_logs(&agent.logs_addr().to_string(), req(1), &mut one).await.unwrap();
    fetch_logs(&agent.logs_addr().to_string(), req(2), &mut two).await.unwrap();
    assert_eq!((one.as_slice(), two.as_slice()), (&b"one\n"[..], &b"two\n"[..]));
    agent.shutdown().await.unwrap();
}
