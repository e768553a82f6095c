//! Job arrays (decisions.md section 13) through the real API: elements start with their
//! index in their environment, at most `max_running` at once; the next element is created
//! by whichever replica leads when one ends; `ListArrays` counts them; a cancel of the
//! array's name cancels every unfinished element; bad arrays are refused naming the field.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn array_of(name: &str, first: u32, count: u32, max_running: u32) -> SubmitRequest {
    SubmitRequest {
        array: Some(ArraySpec { first, count, max_running }),
        ..submit_of(gpu_job(name, "team-a", "train", 1))
    }
}

fn running(d: &Directive) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = d
        .assignments
        .iter()
        .filter(|a| a.action() == Action::Run)
        .map(|a| (a.job.clone(), a.env.get("BATON_ARRAY_INDEX").cloned().unwrap_or_default()))
        .collect();
    out.sort();
    out
}

async fn the_array(c: &mut baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>) -> JobArray {
    let arrays = c.list_arrays(ListArraysRequest::default()).await.unwrap().into_inner().arrays;
    assert_eq!(arrays.len(), 1, "{arrays:?}");
    arrays[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_arrays_elements_run_max_running_at_a_time_across_a_failover_and_cancel_together() {
    let mut cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let reply = c.submit(array_of("sweep", 10, 1000, 2)).await.unwrap().into_inner();
    assert_eq!(reply.name, "sweep");
    let d = agent.until("two elements run", |d| running(d).len() == 2).await;
    let pairs = [("sweep-10".to_string(), "10".to_string()), ("sweep-11".into(), "11".into())];
    assert_eq!(running(&d), pairs, "two of 1000 run, each with its index");
    let first = d.assignments.iter().find(|a| a.job == "sweep-10").unwrap().job_id;
    let a = the_array(&mut c).await;
    assert_eq!((a.running, a.pending, a.created), (2, 998, 2), "{a:?}");

    // The next element is created by the command that ended one, on the new leader.
    let old = cluster.leader().await;
    cluster.kill(old).await;
    let mut c = cluster.client((old + 1) % 3).await;
    let exited = What::Exited(Exited { job_id: first, attempt: 1, rank: 0, exit_code: 0, reason: String::new() });
    let mut agent = report_to_the_new_leader(&cluster, node("n1", 8), exited).await;
    agent.until("sweep-12 runs", |d| has(d, "sweep-12", Action::Run)).await;
    let e = wait_state(&mut c, "sweep-12", JobState::Running).await;
    assert_eq!((e.array.as_str(), e.array_index), ("sweep", Some(12)));
    let a = the_array(&mut c).await;
    assert_eq!((a.running, a.succeeded, a.pending), (2, 1, 997), "{a:?}");

    c.cancel_job(JobRef { name: "sweep".into(), id: 0 }).await.unwrap();
    let a = the_array(&mut c).await;
    assert!(a.cancelled_whole && a.finished_ms > 0, "{a:?}");
    assert_eq!((a.succeeded, a.cancelled, a.running, a.pending), (1, 999, 0, 0), "{a:?}");
    wait_state(&mut c, "sweep-12", JobState::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_arrays_are_refused_naming_the_field_and_submit_nothing() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    for (req, field) in [
        (array_of("a", 0, 0, 0), "array.count"),
        (array_of("a", 0, 2_000_000, 0), "array.count"),
        (array_of("a", 0, 10, 0), ""),
        (array_of("a", 0, 10, 0), "already exists"),
        (array_of(&"x".repeat(60), 0, 10_000, 0), "name"),
        (array_of("b", u32::MAX, 2, 0), "array.first"),
    ] {
        match c.submit(req).await {
            Ok(_) => assert_eq!(field, "", "accepted"),
            Err(e) => {
                assert_ne!(field, "", "refused: {e:?}");
                assert!(matches!(e.code(), Code::InvalidArgument | Code::AlreadyExists), "{e:?}");
                assert!(e.message().contains(field), "{field}: {}", e.message());
            }
        }
    }
    let arrays = c.list_arrays(ListArraysRequest::default()).await.unwrap().into_inner().arrays;
    assert_eq!(arrays.len(), 1, "only the one good array: {arrays:?}");
}
