//! A leader whose wall clock runs far ahead of the other voters' (a host that lost NTP, a
//! mistyped date) stamps commands with the quorum's time, not its own: the replicated clock
//! never goes back, so one such leader used to end every job's time limit and expire every
//! reservation for good (issue 31).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use baton_proto::v1::*;
use baton_raft::replica::WallClock;
use common::*;

const AHEAD_MS: u64 = 2 * 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_clock_runs_days_ahead_stamps_the_quorums_time() {
    let cluster = Cluster::start_configured(3, settings(), |id, c| {
        if id == 3 {
            c.clock = WallClock(Arc::new(|| WallClock::system().now_ms() + AHEAD_MS));
        }
    })
    .await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("q", 8)).await.unwrap();
    c.transfer_leader(ReplicaRef { id: 3 }).await.expect("leadership handed to replica 3");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cluster.leader().await != 2 {
        assert!(std::time::Instant::now() < deadline, "replica 3 never led");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let mut spec = gpu_job("limited", "q", "train", 1);
    spec.time_limit_ms = Some(3_600_000);
    c.submit(submit_of(spec)).await.unwrap();
    let job = c.get_job(JobRef { name: "limited".into(), id: 0 }).await.unwrap().into_inner();
    let real_ms = WallClock::system().now_ms();
    assert!(
        job.submitted_ms < real_ms + 60_000,
        "stamped {} s ahead of the other voters' time",
        (job.submitted_ms.saturating_sub(real_ms)) / 1_000
    );
}
