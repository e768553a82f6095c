//! Open watch streams are bounded per replica; a client that goes away frees its slot.

mod common;

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
