//! A fleet attaching at once registers its nodes in a few commands, not one per node:
//! each registration rebuilds the state's ledger on every replica, so one per node made a
//! fleet's first attach quadratic in its size.

mod common;

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
