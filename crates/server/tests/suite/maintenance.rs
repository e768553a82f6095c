//! Maintenance windows (decisions.md section 14) through the real API and a scripted agent:
//! a window created to start a moment later stops the job running on its node (the agent is
//! told STOP, as for a victim), the job goes back to the queue naming the window and runs
//! again only after the window ends; bad windows are refused with the field named.

use crate::common;

use std::time::{SystemTime, UNIX_EPOCH};

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn window(name: &str, nodes: &[&str], start_ms: u64, end_ms: u64) -> MaintenanceWindow {
    MaintenanceWindow {
        name: name.into(),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        start_ms,
        end_ms,
        active: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_window_stops_the_job_on_its_node_and_it_runs_again_after_the_end() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("train", "team-a", "train", 8))).await.unwrap();
    let d = agent.until("train runs", |d| has(d, "train", Action::Run)).await;
    let id = d.assignments[0].job_id;

    let start = now_ms() + 1_000;
    c.create_maintenance(window("fw", &["n1"], start, start + 2_000)).await.unwrap();
    let listed = c.list_maintenance(Empty {}).await.unwrap().into_inner().windows;
    assert_eq!((listed.len(), listed[0].active), (1, false));
    agent.until("train is told to stop", |d| has(d, "train", Action::Stop)).await;
    assert!(now_ms() >= start, "not before the window's start");
    let j = wait_state(&mut c, "train", JobState::Preempting).await;
    assert!(j.reason.contains("maintenance: window fw"), "{}", j.reason);
    assert!(j.preempted_by.is_empty(), "not a preemption");
    let stopped =
        What::Stopped(Stopped { job_id: id, attempt: 1, checkpointed: true, rank: 0, cause: 0, ..Default::default() });
    agent.report(vec![stopped]).await.unwrap();
    let j = wait_state(&mut c, "train", JobState::Pending).await;
    // Requeued naming the window (the model's words), and the next cycle says the same in
    // its own (`maintenance window fw holds n1`): read between the two, either is right.
    let named = ["maintenance window fw holds n1", "maintenance: window fw on its nodes"];
    assert!(j.has_checkpoint && named.iter().any(|n| j.reason.contains(n)), "{}", j.reason);
    assert!(j.events.iter().any(|e| e.kind() == EventKind::MaintenanceStop), "{:?}", j.events);
    assert!(c.list_maintenance(Empty {}).await.unwrap().into_inner().windows[0].active);
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(nodes[0].maintenance, "fw", "baton nodes names the window");

    let d = agent.until("train runs again", |d| d.assignments.iter().any(|a| a.job == "train" && a.attempt == 2)).await;
    assert!(now_ms() >= start + 2_000, "not before the window's end: {d:?}");
    assert!(c.list_maintenance(Empty {}).await.unwrap().into_inner().windows.is_empty(), "forgotten at its end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_windows_are_refused_naming_the_field() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let t = now_ms() + 60_000;
    c.create_maintenance(window("fw", &["n1"], t, t + 60_000)).await.unwrap();
    for (w, field) in [
        (window("a", &["n1"], t + 5_000, t + 1_000), "end"),
        (window("a", &["n9"], t + 200_000, t + 300_000), "nodes[0]"),
        (window("a", &["n1"], t + 30_000, t + 90_000), "nodes[0]"),
        (window("bad name", &["n1"], t + 200_000, t + 300_000), "name"),
    ] {
        let e = c.create_maintenance(w).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
    }
    let e = c.create_maintenance(window("fw", &["n1"], t + 200_000, t + 300_000)).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    c.delete_maintenance(NameRef { name: "fw".into() }).await.unwrap();
    let e = c.delete_maintenance(NameRef { name: "fw".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}
