//! Open watch streams are bounded per replica; a client that goes away frees its slot.

use crate::common;

use std::time::Duration;

use baton_proto::v1::WatchRequest;
use baton_proto::v1::baton_client::BatonClient;
use baton_server::ServerSettings;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_past_the_bound_is_refused_and_a_closed_one_frees_its_slot() {
    let cluster = Cluster::start_with(1, ServerSettings { max_watch_streams: 2, ..settings() }).await;
    let mut c = BatonClient::connect(format!("http://{}", cluster.addrs()[0])).await.unwrap();
    let first = c.watch(WatchRequest::default()).await.expect("first watch").into_inner();
    let _second = c.watch(WatchRequest::default()).await.expect("second watch").into_inner();
    let err = c.watch(WatchRequest::default()).await.expect_err("a third watch is over the bound");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("max_watch_streams") && err.message().contains('2'), "{}", err.message());

    // No event flows; the replica notices the closed stream by itself.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match c.watch(WatchRequest::default()).await {
            Ok(_) => break,
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the closed watch's slot was never freed: {e:?}"),
        }
    }
}

/// Issue 39: `Watch { replay }` gathered and sorted every retained event (up to 64 per job,
/// for every job kept) under the state's read lock, holding up apply, and sent them all. A
/// replay now gathers from a snapshot, outside the lock, and holds the newest
/// `max_replay_events`, after an event saying how many older ones it left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_holds_the_newest_events_up_to_its_bound_and_says_what_it_left_out() {
    use tokio_stream::StreamExt;
    let cluster = Cluster::start_with(1, ServerSettings { max_replay_events: 3, ..settings() }).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    for i in 0..4 {
        let spec = gpu_job(&format!("j{i}"), "team-a", "train", 1);
        c.submit(baton_proto::v1::SubmitRequest {
            spec: Some(spec),
            request_id: format!("r{i}"),
            run_as: String::new(),
            after: Vec::new(),
            array: None,
        })
        .await
        .unwrap();
    }
    // Settled first, so that no live event follows the replay.
    for i in 0..4 {
        wait_state(&mut c, &format!("j{i}"), baton_proto::v1::JobState::Running).await;
    }
    let mut stream = c.watch(WatchRequest { replay: true, ..Default::default() }).await.unwrap().into_inner();
    let mut got = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
        got.push(e.unwrap());
    }
    let lagged = baton_proto::v1::EventKind::Lagged as i32;
    assert_eq!(got.len(), 4, "the note and the 3 newest events: {got:?}");
    assert_eq!(got[0].kind, lagged, "{got:?}");
    assert!(got[0].message.contains("newest 3") && got[0].message.contains("max_replay_events"), "{}", got[0].message);
    assert!(got[1..].iter().all(|e| e.kind != lagged), "{got:?}");
    assert!(got[1..].windows(2).all(|w| w[0].at_ms <= w[1].at_ms), "in time order: {got:?}");
}
