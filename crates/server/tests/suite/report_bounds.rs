//! What one agent report may carry is bounded at the gateway, and a report that would not
//! fit in a log entry cannot wedge its node's reports for good; a report without news costs
//! no log entry.

use crate::common;

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_with_too_many_observations_is_refused_by_name() {
    let cluster = Cluster::start(1).await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let many = (0..70_000).map(|i| What::Checkpointed(Checkpointed { job_id: i, attempt: 1, rank: 0 })).collect();
    let err = agent.report(many).await.expect_err("a report over the bound is refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("observations") && err.message().contains("65536"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_unkillable_reason_does_not_block_the_nodes_reports() {
    let cluster = Cluster::start(1).await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    // Over the raft command bound (4 MiB) by itself: before, the report was refused as too
    // large every time the agent resent it, and no later exit from this node committed.
    let reason = "x".repeat(5 << 20);
    let stuck = What::Unkillable(Unkillable { job_id: 1, attempt: 1, rank: 0, reason });
    agent.report(vec![stuck]).await.expect("the report is accepted with its reason cut short");
}

/// Issue 37: heartbeats without news cost no raft entry. A hundred reports that observe
/// nothing (beside the agent's own beat every 200 ms) leave the applied index where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reports_without_news_commit_nothing() {
    let cluster = Cluster::start(1).await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let before = quiet_applied_index(&cluster, 0).await;
    for _ in 0..100 {
        agent.report(vec![]).await.expect("a beat is answered");
    }
    assert_eq!(applied_index(&cluster, 0).await, before, "reports without news were written to the log");
}
