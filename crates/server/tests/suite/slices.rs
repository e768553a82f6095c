//! MIG slices (decisions.md section 11) through the real API and gateway: an agent offers
//! slices by profile, a queue's quota counts them as it counts GPUs, each rank's
//! assignment carries the slices it asked for (its agent picks which), `ListNodes` shows
//! them in use, a job that would take more than are free waits, and one naming a profile no
//! node offers is refused, naming the field.

use crate::common;

use baton_proto::v1::*;
use common::*;
use tonic::Code;

fn mig_node(name: &str, slices: u64) -> NodeInfo {
    let mut n = node(name, 0);
    n.resources.insert("mig-1g.10gb".into(), slices);
    n
}

fn slice_job(name: &str, profile: &str, per_replica: u64, replicas: u32) -> JobSpec {
    let mut spec = gpu_job(name, "team-a", "train", 0);
    spec.tasks[0].replicas = replicas;
    let amounts = &mut spec.tasks[0].resources.get_or_insert_with(Default::default).amounts;
    amounts.remove("gpu");
    amounts.insert(profile.into(), per_replica);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slices_are_counted_by_profile_carried_to_the_agent_and_unknown_profiles_are_refused() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    let mut q = queue("team-a", 0);
    q.quotas[0].nominal.get_or_insert_with(Default::default).amounts.insert("mig-1g.10gb".into(), 7);
    c.put_queue(q).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), mig_node("m1", 7)).await;

    let err = c.submit(submit_of(slice_job("big", "mig-3g.40gb", 1, 1))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("tasks[0].resources.mig-3g.40gb"), "{}", err.message());
    assert!(err.message().contains("the cluster's nodes offer mig-1g.10gb"), "{}", err.message());

    c.submit(submit_of(slice_job("infer", "mig-1g.10gb", 3, 2))).await.unwrap();
    wait_state(&mut c, "infer", JobState::Running).await;
    let d = agent.until("both ranks told to run", |d| d.assignments.len() == 2).await;
    for a in &d.assignments {
        assert_eq!(a.slices.get("mig-1g.10gb"), Some(&3), "{a:?}");
        assert!(a.gpus.is_empty(), "{a:?}");
    }
    let nodes = c.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    let used = nodes[0].used.as_ref().and_then(|u| u.amounts.get("mig-1g.10gb")).copied();
    assert_eq!(used, Some(6), "{nodes:?}");

    // One slice is free: a job asking two waits, one asking one (submitted after it, so
    // the cycle that starts it has seen the other) runs.
    c.submit(submit_of(slice_job("more", "mig-1g.10gb", 2, 1))).await.unwrap();
    c.submit(submit_of(slice_job("one", "mig-1g.10gb", 1, 1))).await.unwrap();
    wait_state(&mut c, "one", JobState::Running).await;
    let job = c.get_job(JobRef { name: "more".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(job.state(), JobState::Pending, "{job:?}");
}
