//! Queue writes through the API on a real replica: an update names the revision it read, so
//! of two clients that read the same queue the second is refused (FAILED_PRECONDITION naming
//! both revisions) instead of silently undoing the first one's change; of two concurrent
//! creates of one name (a queue, a cohort or a priority class) exactly one lands.

use crate::common;

use baton_proto::v1::*;
use common::*;
use tonic::Code;

async fn read(c: &mut baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>) -> QueueUsage {
    let queues = c.list_queues(Empty {}).await.unwrap().into_inner().queues;
    queues.into_iter().find(|q| q.queue.as_ref().is_some_and(|q| q.name == "team-a")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_updates_from_one_read_cannot_both_land() {
    let cluster = Cluster::start(1).await;
    let mut a = cluster.client(0).await;
    let mut b = cluster.client(0).await;
    a.create_queue(queue("team-a", 8)).await.unwrap();
    let (read_a, read_b) = (read(&mut a).await, read(&mut b).await);
    assert_eq!(read_a.revision, read_b.revision);
    assert!(read_a.revision > 0);

    let weight = Queue { weight: 2.0, ..read_a.queue.clone().unwrap() };
    let strict = Queue { ordering: QueueOrdering::StrictFifo.into(), ..read_b.queue.clone().unwrap() };
    a.update_queue(UpdateQueueRequest { queue: Some(weight), revision: read_a.revision }).await.unwrap();
    let now = read(&mut a).await.revision;
    let e = b.update_queue(UpdateQueueRequest { queue: Some(strict), revision: read_b.revision }).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let based = format!("based on revision {}, it is now at revision {now}", read_b.revision);
    assert!(e.message().contains(&based), "{}", e.message());
    let after = read(&mut a).await.queue.unwrap();
    assert_eq!((after.weight, after.ordering()), (2.0, QueueOrdering::BestEffortFifo), "A's change is kept");

    let gone = UpdateQueueRequest { queue: Some(queue("ghost", 1)), revision: 0 };
    assert_eq!(a.update_queue(gone).await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_concurrent_creates_one_lands() {
    let cluster = Cluster::start(1).await;
    let (mut a, mut b) = (cluster.client(0).await, cluster.client(0).await);
    let (ra, rb) = tokio::join!(a.create_queue(queue("team-a", 8)), b.create_queue(queue("team-a", 2)));
    let codes: Vec<Code> = [&ra, &rb].iter().map(|r| r.as_ref().map_or_else(|e| e.code(), |_| Code::Ok)).collect();
    assert!(codes.contains(&Code::Ok) && codes.contains(&Code::AlreadyExists), "{codes:?}");
    let kept = read(&mut a).await.queue.unwrap();
    let winner = if ra.is_ok() { 8 } else { 2 };
    assert_eq!(kept.quotas[0].nominal.as_ref().unwrap().amounts["gpu"], winner);
}

/// Which of two concurrent results landed: exactly one Ok and one ALREADY_EXISTS, else panics.
fn one_landed<T: std::fmt::Debug>(ra: &Result<T, tonic::Status>, rb: &Result<T, tonic::Status>) -> bool {
    let codes: Vec<Code> = [ra, rb].iter().map(|r| r.as_ref().map_or_else(|e| e.code(), |_| Code::Ok)).collect();
    assert!(codes.contains(&Code::Ok) && codes.contains(&Code::AlreadyExists), "{codes:?}");
    ra.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_concurrent_cohort_and_class_creates_one_lands() {
    let cluster = Cluster::start(1).await;
    let (mut a, mut b) = (cluster.client(0).await, cluster.client(0).await);
    let cohort = |fair_sharing| Cohort { name: "org".into(), parent: String::new(), fair_sharing };
    let (ra, rb) = tokio::join!(a.create_cohort(cohort(true)), b.create_cohort(cohort(false)));
    let first_won = one_landed(&ra, &rb);
    let cohorts = a.list_cohorts(Empty {}).await.unwrap().into_inner().cohorts;
    assert_eq!(cohorts, vec![cohort(first_won)]);

    let class = |value| PriorityClass { name: "urgent".into(), value, preemptible: false };
    let (ra, rb) = tokio::join!(a.create_class(class(900)), b.create_class(class(5)));
    let first_won = one_landed(&ra, &rb);
    let classes = a.list_classes(Empty {}).await.unwrap().into_inner().classes;
    let kept: Vec<&PriorityClass> = classes.iter().filter(|c| c.name == "urgent").collect();
    assert_eq!(kept, vec![&class(if first_won { 900 } else { 5 })]);
}
