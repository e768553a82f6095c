//! A fleet attaching at once registers its nodes in a few commands, not one per node:
//! each registration rebuilds the state's ledger on every replica, so one per node made a
//! fleet's first attach quadratic in its size.

use crate::common;

use baton_proto::v1::AttachRequest;
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use common::*;

const AGENTS: usize = 100;

async fn applied(metrics_addr: &str) -> f64 {
    samples(&scrape(metrics_addr).await)["baton_state_applied_index"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agents_attaching_at_once_share_registration_commands() {
    let cluster = Cluster::start(1).await;
    let replica = &cluster.replicas[0];
    // Connected first, so that the attaches themselves go out together.
    let mut clients = Vec::new();
    for _ in 0..AGENTS {
        clients.push(AgentGatewayClient::connect(format!("http://{}", replica.addr)).await.unwrap());
    }
    let before = applied(&replica.metrics).await;
    let attaches = clients.into_iter().enumerate().map(|(i, mut c)| async move {
        let req = AttachRequest { node: Some(node(&format!("n{i:03}"), 8)), term_seen: 0 };
        c.attach(req).await.map(|r| r.into_inner())
    });
    let streams = futures::future::join_all(attaches).await;
    // An attach answers once its node's registration is committed.
    assert!(streams.iter().all(Result::is_ok), "{:?}", streams.iter().find(|s| s.is_err()));
    let commands = applied(&replica.metrics).await - before;
    assert!(commands >= 1.0);
    // Nothing else is committed meanwhile (no jobs, no reservations). One per node before;
    // attaches that arrive while a registration commits share the next one.
    assert!(commands <= (AGENTS / 4) as f64, "{AGENTS} agents attaching at once took {commands} commands");
    let mut c = cluster.client(0).await;
    let nodes = c.list_nodes(baton_proto::v1::Empty {}).await.unwrap().into_inner();
    assert_eq!(nodes.nodes.len(), AGENTS);
}

/// Issue 39: one node's certificate could open directive streams without end, each carrying
/// its jobs' environments. A node has at most `MAX_ATTACH_STREAMS_PER_NODE` open on a replica;
/// the next is refused naming the bound, and one that ends frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_may_hold_only_a_few_directive_streams_at_once() {
    let cluster = Cluster::start(1).await;
    let addr = format!("http://{}", cluster.addrs()[0]);
    let attach = || async {
        let mut c = AgentGatewayClient::connect(addr.clone()).await.unwrap();
        c.attach(AttachRequest { node: Some(node("n1", 8)), term_seen: 0 }).await
    };
    let mut open = Vec::new();
    for _ in 0..::baton_server::MAX_ATTACH_STREAMS_PER_NODE {
        open.push(attach().await.expect("an agent's stream").into_inner());
    }
    let refused = attach().await.expect_err("one stream too many");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("MAX_ATTACH_STREAMS_PER_NODE"), "{}", refused.message());
    drop(open.pop());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while attach().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "a closed stream never freed its place");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
