//! cancel/pause/resume act on the job they resolved once (issue 9, hole 6a): a retried
//! cancel of an old job never reaches a newer job that reused its name.

use crate::common;

use baton_proto::v1::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_of_an_old_id_does_not_touch_a_new_job_with_the_same_name() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let _agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let submit = || submit_of(gpu_job("j", "team-a", "train", 2));
    let old = c.submit(submit()).await.unwrap().into_inner().id;
    let by_id = || JobRef { name: old.to_string(), ..Default::default() };
    c.cancel_job(by_id()).await.unwrap();
    let new = c.submit(submit()).await.unwrap().into_inner().id;
    assert_ne!(old, new);

    // The same cancel again, as a client retries it after a lost answer.
    c.cancel_job(by_id()).await.unwrap();
    c.pause_job(by_id()).await.expect_err("the old job is cancelled; pausing it is refused");
    // The id field names exactly that job, whatever the name says.
    let exact = JobRef { name: "j".into(), id: old };
    c.cancel_job(exact.clone()).await.unwrap();
    c.resume_job(exact).await.expect_err("the old job is not paused; resuming it is refused");
    let gone = JobRef { name: "j".into(), id: 999_999 };
    let err = c.cancel_job(gone).await.expect_err("an unknown id is refused");
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().contains("999999"), "{}", err.message());
    let j = c.get_job(JobRef { name: "j".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(j.id, new);
    assert!(
        j.state() == JobState::Pending || j.state() == JobState::Running,
        "the new job is untouched, yet it is {}",
        j.state().word()
    );
}
