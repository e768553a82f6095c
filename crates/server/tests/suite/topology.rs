//! Topology levels (decisions.md section 10) through the real API and gateway: an admin
//! declares the levels, agents name their NVLink domain when they attach, `ListNodes` and
//! `ClusterInfo` show them, and a gang that requires `nvlink` runs inside one domain, the
//! one with the fewest free GPUs that holds it; one naming an undeclared level is refused,
//! naming the field.

use crate::common;

use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn node_in(name: &str, nvlink: &str) -> NodeInfo {
    NodeInfo { rack: "r1".into(), domains: [("nvlink".to_string(), nvlink.to_string())].into(), ..node(name, 4) }
}

fn gang(name: &str, replicas: u32, required: &str) -> JobSpec {
    let mut spec = gpu_job(name, "team-a", "train", 4);
    spec.tasks[0].replicas = replicas;
    spec.topology_required = required.into();
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_that_requires_nvlink_runs_in_the_best_fitting_domain_its_agents_named() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 32)).await.unwrap();
    c.set_topology(TopologyRequest { levels: vec!["nvlink".into(), "rack".into()] }).await.unwrap();
    // nvl-a: a1-a3 (12 GPUs); nvl-b: b1-b2 (8 GPUs).
    let mut agents = Vec::new();
    for (n, d) in [("a1", "nvl-a"), ("a2", "nvl-a"), ("a3", "nvl-a"), ("b1", "nvl-b"), ("b2", "nvl-b")] {
        agents.push(FakeAgent::attach(&cluster.addrs(), node_in(n, d)).await);
    }
    let info = c.cluster_info(Empty {}).await.unwrap().into_inner();
    assert_eq!(info.topology_levels, ["nvlink", "rack"]);
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    let b1 = nodes.iter().find(|n| n.name == "b1").unwrap();
    assert_eq!(b1.domains.get("nvlink").map(String::as_str), Some("nvl-b"), "{b1:?}");

    let err = c.submit(submit_of(gang("far", 2, "zone"))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("topology level zone is not one this cluster declares"), "{}", err.message());

    c.submit(submit_of(gang("pair", 2, "nvlink"))).await.unwrap();
    let j = wait_state(&mut c, "pair", JobState::Running).await;
    let mut on: Vec<&str> = j.placements.iter().map(|r| r.node.as_str()).collect();
    on.sort_unstable();
    assert_eq!(on, ["b1", "b2"], "the smaller domain that holds the gang: {j:?}");
    assert_eq!(j.spec.unwrap().topology_required, "nvlink", "the levels read back");
    drop(agents);
}
