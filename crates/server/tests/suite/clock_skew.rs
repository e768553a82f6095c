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

/// How far the replica's clock falls behind the replicated clock in the test below.
const BEHIND_MS: u64 = 20 * 60_000;

/// A leader whose clock reads behind the replicated clock (the clock stepped back, or a new
/// leader trailing the old one) stamps its commands with the replicated clock, and so must
/// plan at that time too: `apply` checks a plan's time limits and windows at its stamp.
/// Planned at its own clock, a job with a 20-minute limit fitted before a window starting
/// in 10 minutes of the replicated clock, and every plan placing it was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_clock_fell_behind_the_replicated_clock_plans_at_its_stamp() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let ahead = Arc::new(AtomicU64::new(BEHIND_MS));
    let offset = ahead.clone();
    let cluster = Cluster::start_configured(1, settings(), move |_, c| {
        let offset = offset.clone();
        c.clock = WallClock(Arc::new(move || WallClock::system().now_ms() + offset.load(Ordering::Relaxed)));
    })
    .await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("q", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    // The replicated clock is BEHIND_MS ahead of the real time now; the replica's clock
    // goes back to the real time.
    ahead.store(0, Ordering::Relaxed);
    let replicated_ms = WallClock::system().now_ms() + BEHIND_MS;
    let start_ms = replicated_ms + 10 * 60_000;
    let window = MaintenanceWindow {
        name: "fw".into(),
        nodes: vec!["n1".into()],
        start_ms,
        end_ms: start_ms + 3_600_000,
        active: false,
    };
    c.create_maintenance(window).await.unwrap();
    let mut spec = gpu_job("limited", "q", "train", 1);
    spec.time_limit_ms = Some(BEHIND_MS);
    c.submit(submit_of(spec)).await.unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let job = loop {
        let job = c.get_job(JobRef { name: "limited".into(), id: 0 }).await.unwrap().into_inner();
        if job.reason.contains("fw") {
            break job;
        }
        assert!(std::time::Instant::now() < deadline, "no cycle said why it waits: {:?}", job.reason);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(job.state(), JobState::Pending, "{}", job.reason);
    assert!(agent.next_within(Duration::from_millis(500)).await.is_none_or(|d| !has(&d, "limited", Action::Run)));
}
