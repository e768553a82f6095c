//! An agent whose journal's disk is full (issue 10): it starts nothing new, says why (log,
//! metric, and to the leader for each start it refuses), keeps supervising what runs
//! (heartbeats, exits, told from memory while the journal cannot take them), and resumes by itself once the disk takes writes again, with nothing
//! lost or corrupted.

use crate::common;

use std::path::Path;

use baton_agent::inventory::development_inventory;
use baton_agent::journal::{Journal, Outcome, Phase};
use baton_agent::journal_store::SimDisk;
use baton_proto::v1::Action;
use baton_proto::v1::observation::What;
use common::*;

/// How many times the agent told the leader it could not start `job` (`Unrecorded`).
fn unrecorded_of(gw: &Gateway, job: u64) -> usize {
    let told = |w: &Option<What>| matches!(w, Some(What::Unrecorded(u)) if u.job_id == job);
    gw.observations().iter().filter(|o| told(&o.what)).count()
}

fn journal_on(disk: &SimDisk, dir: &Path) -> Journal {
    Journal::with_store(&dir.join("journal"), Box::new(disk.open())).expect("the journal opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_journal_starts_nothing_new_and_resumes_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.metrics_listen = Some("127.0.0.1:0".into());
    let inventory = development_inventory(&c.name, 4);
    let agent = baton_agent::start_with_journal(c, inventory, journal_on(&disk, dir.path())).await.unwrap();
    let metrics = agent.metrics_addr().expect("metrics served");
    let (pid1, pid2, end1) = (dir.path().join("pid1"), dir.path().join("pid2"), dir.path().join("end1"));
    let _reaper = Reaper(vec![pid1.clone(), pid2.clone()]);
    let job1 = assignment(
        1,
        1,
        Action::Run,
        &format!("echo $$ > {}; while [ ! -e {} ]; do sleep 0.02; done; exit 3", pid1.display(), end1.display()),
    );
    gw.set(1, vec![job1.clone()]);
    wait_for(5, "job 1 started", || read_pid(&pid1)).await;

    disk.set_fault(Some(libc::ENOSPC));
    let job2 = assignment(2, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid2.display()));
    gw.set(1, vec![job1.clone(), job2.clone()]);
    // The first try fails at its first journal write, before anything is spawned.
    wait_for(5, "the journal failing", || {
        (blocking_scrape(metrics)["baton_agent_journal_failing"] == 1.0).then_some(())
    })
    .await;
    assert!(read_pid(&pid2).is_none(), "job 2 started although its start could not be journaled");
    // Known to fail from then on: a RUN is refused before any of it is tried.
    gw.set(1, vec![job1.clone(), job2.clone()]);
    wait_for(5, "the RUN refused", || {
        (blocking_scrape(metrics)["baton_agent_runs_refused_total"] >= 1.0).then_some(())
    })
    .await;
    assert!(read_pid(&pid2).is_none(), "job 2 started although the journal fails");
    // The leader is told, although the journal cannot record it: else it holds job 2
    // Running with no process for as long as the disk is full.
    wait_for(5, "job 2's refused start told", || (unrecorded_of(&gw, 2) > 0).then_some(())).await;
    let Some(What::Unrecorded(told)) =
        gw.observations().into_iter().rev().find_map(|o| o.what.filter(|w| matches!(w, What::Unrecorded(_))))
    else {
        unreachable!()
    };
    assert!(told.reason.contains("No space left on device"), "{}", told.reason);

    // What runs stays supervised: heartbeats go on, and job 1's exit is noticed.
    let reports = gw.report_count();
    wait_for(5, "heartbeats while the disk is full", || (gw.report_count() >= reports + 3).then_some(())).await;
    let running: Vec<u64> = gw.last_report().unwrap().running.iter().map(|r| r.job_id).collect();
    assert_eq!(running, vec![1], "job 1 still reported running, job 2 not started");
    std::fs::write(&end1, b"").unwrap();
    wait_for(5, "job 1's exit noticed", || gw.last_report().is_some_and(|r| r.running.is_empty()).then_some(())).await;
    // Told while the disk is still full, from memory: before, it waited for the journal,
    // and a leader declared the replica vanished once the running list dropped it, and ran
    // its job again (also one that had succeeded).
    wait_for(5, "job 1's exit reported while the journal fails", || {
        exited_of(&gw.observations(), 1).contains(&3).then_some(())
    })
    .await;
    assert_eq!(blocking_scrape(metrics)["baton_agent_journal_failing"], 1.0, "the journal recovered meanwhile");
    assert!(read_pid(&pid2).is_none(), "job 2 started although the journal still fails");
    // The leader ended job 1: its directive no longer names it (while one does, each RUN of
    // it is answered with its exit again, by design).
    gw.set(1, vec![job2.clone()]);
    let reports = gw.report_count();
    wait_for(5, "reports after the directive", || (gw.report_count() >= reports + 2).then_some(())).await;
    let exits_told = exited_of(&gw.observations(), 1).len();

    // Told once: the directive that still names job 2 (this gateway never requeues it)
    // is refused again and again, and not told again.
    assert_eq!(unrecorded_of(&gw, 2), 1, "the refused start told more than once");
    disk.set_fault(None);
    wait_for(15, "job 2 started once the disk takes writes", || read_pid(&pid2)).await;
    wait_for(5, "the gauge cleared", || (blocking_scrape(metrics)["baton_agent_journal_failing"] == 0.0).then_some(()))
        .await;
    // A leader took it while the disk was full: it is not journaled and sent again.
    let reports = gw.report_count();
    wait_for(5, "reports after the recovery", || (gw.report_count() >= reports + 3).then_some(())).await;
    assert_eq!(exited_of(&gw.observations(), 1).len(), exits_told, "job 1's exit told again after the recovery");
    agent.shutdown().await.unwrap();

    // Nothing is corrupted or forgotten: what the disk kept opens and says what happened.
    disk.power_loss(0);
    let journal = journal_on(&disk, dir.path());
    let records = journal.replicas().unwrap();
    let job = |id: u64| records.iter().find(|r| r.key.job_id == id).unwrap_or_else(|| panic!("job {id}'s record"));
    assert_eq!((job(1).phase, job(1).outcome), (Phase::Finished, Some(Outcome::Exited { code: 3 })));
    assert_eq!(job(2).phase, Phase::Running);
    assert_ne!(job(2).pid, 0, "job 2's pid is journaled");
    assert_eq!(journal.max_attempt(2).unwrap(), Some(1));
}

/// A journal whose syncs take longer than the lease (1.5 s against 1 s): the replica's end is
/// journaled and reported late, but the heartbeat never waits for a sync (acknowledged
/// observations are dropped from the journal in the background, the supervisor's syncs
/// leave the runtime's other tasks to other threads), so the lease stays renewed and what
/// runs keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_journal_does_not_cost_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let gw = Gateway::start(None).await;
    gw.grant_lease_ms(1_000);
    let mut c = config(dir.path(), &[gw.addr]);
    c.metrics_listen = Some("127.0.0.1:0".into());
    let inventory = development_inventory(&c.name, 4);
    let agent = baton_agent::start_with_journal(c, inventory, journal_on(&disk, dir.path())).await.unwrap();
    let metrics = agent.metrics_addr().expect("metrics served");
    let (pid1, pid2, end2) = (dir.path().join("pid1"), dir.path().join("pid2"), dir.path().join("end2"));
    let _reaper = Reaper(vec![pid1.clone(), pid2.clone()]);
    let job1 = assignment(1, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid1.display()));
    let job2 = assignment(
        2,
        1,
        Action::Run,
        &format!("echo $$ > {}; while [ ! -e {} ]; do sleep 0.02; done; exit 0", pid2.display(), end2.display()),
    );
    gw.set(1, vec![job1, job2]);
    let p1 = wait_for(5, "job 1 started", || read_pid(&pid1)).await;
    wait_for(5, "job 2 started", || read_pid(&pid2)).await;
    wait_for(5, "the lease granted", || {
        (blocking_scrape(metrics)["baton_agent_lease_seconds_left"] > 0.0).then_some(())
    })
    .await;

    disk.set_flush_delay(std::time::Duration::from_millis(1_500));
    std::fs::write(&end2, b"").unwrap();
    wait_for(15, "job 2's exit reported", || exited_of(&gw.observations(), 2).contains(&0).then_some(())).await;
    // Acknowledged: reports carry it no more, and list job 1 alone.
    let after = gw.report_count();
    wait_for(15, "a report of job 1 alone, without observations", || {
        let seen = gw.fake.seen.lock().unwrap();
        let alone = |r: &baton_proto::v1::ReportRequest| r.running.len() == 1 && r.running[0].job_id == 1;
        seen.reports[after..].iter().any(|r| r.observations.is_empty() && alone(r)).then_some(())
    })
    .await;
    // And dropped from the journal, one slow sync later.
    let journal = journal_on(&disk, dir.path());
    wait_for(15, "the exit dropped from the journal", || (journal.pending_len() == 0).then_some(())).await;
    let m = blocking_scrape(metrics);
    assert_eq!(m["baton_agent_lease_expiries_total"], 0.0, "the lease ran out while the journal synced");
    assert!(alive(p1), "job 1 was stopped");
    disk.set_flush_delay(std::time::Duration::ZERO);
    agent.shutdown().await.unwrap();
}

/// An agent restarted while its journal's disk is full: a replica that ended while it was
/// down is recorded as ended, which the journal cannot take. Before, the agent refused to
/// start (`Supervisor::new` returned the journal's error), so nothing on the node was
/// supervised or reported until the disk was freed, and the leader declared the node lost.
/// Now it starts, tells the exit from memory, starts nothing new, and journals the end once
/// the disk takes writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restarted_on_a_full_disk_starts_and_tells_what_ended_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let gw = Gateway::start(None).await;
    let (pid1, end1, pid2) = (dir.path().join("pid1"), dir.path().join("end1"), dir.path().join("pid2"));
    let _reaper = Reaper(vec![pid1.clone(), pid2.clone()]);
    let job1 = assignment(
        1,
        1,
        Action::Run,
        &format!("echo $$ > {}; while [ ! -e {} ]; do sleep 0.02; done; exit 3", pid1.display(), end1.display()),
    );
    let start = |c| baton_agent::start_with_journal(c, development_inventory("n1", 4), journal_on(&disk, dir.path()));
    let agent = start(config(dir.path(), &[gw.addr])).await.unwrap();
    gw.set(1, vec![job1.clone()]);
    let pid = wait_for(5, "job 1 started", || read_pid(&pid1)).await;
    agent.shutdown().await.unwrap();

    // Job 1 ends while no agent runs; then the disk fills up.
    std::fs::write(&end1, b"").unwrap();
    wait_for(5, "job 1 ended", || (!alive(pid)).then_some(())).await;
    disk.set_fault(Some(libc::ENOSPC));
    let mut c = config(dir.path(), &[gw.addr]);
    c.metrics_listen = Some("127.0.0.1:0".into());
    let agent = start(c).await.expect("an agent on a full disk starts");
    let metrics = agent.metrics_addr().expect("metrics served");
    assert_eq!(blocking_scrape(metrics)["baton_agent_journal_failing"], 1.0, "the journal failing is shown");
    wait_for(5, "job 1's exit told while the journal fails", || {
        exited_of(&gw.observations(), 1).contains(&3).then_some(())
    })
    .await;
    let job2 = assignment(2, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid2.display()));
    gw.set(1, vec![job2.clone()]);
    wait_for(5, "job 2's refused start told", || (unrecorded_of(&gw, 2) > 0).then_some(())).await;
    assert!(read_pid(&pid2).is_none(), "job 2 started although the journal fails");

    disk.set_fault(None);
    wait_for(15, "job 2 started once the disk takes writes", || read_pid(&pid2)).await;
    agent.shutdown().await.unwrap();
    disk.power_loss(0);
    let records = journal_on(&disk, dir.path()).replicas().unwrap();
    let job = |id: u64| records.iter().find(|r| r.key.job_id == id).unwrap_or_else(|| panic!("job {id}'s record"));
    assert_eq!((job(1).phase, job(1).outcome), (Phase::Finished, Some(Outcome::Exited { code: 3 })));
    assert_eq!(job(2).phase, Phase::Running);
}
