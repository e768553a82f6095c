//! What one agent report may carry is bounded at the gateway, and a report that would not
//! fit in a log entry cannot wedge its node's reports for good.

mod common;

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
