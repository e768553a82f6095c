//! The agent's lease: a node cut off from the leader (or whose agent stalls or dies) stops
//! its replicas before the leader's heartbeat timeout declares the node lost, so a job never
//! runs on two nodes at once (issue 9: `kill -STOP` of an agent for 10 s ran a job twice).

use crate::common;

use std::time::{Duration, Instant};

use baton_agent::cgroup::ContainmentMode;
use baton_proto::v1::{Action, Assignment, StopCause};
use common::*;

/// The lease the fake leader grants in these tests; its directives say the heartbeat
/// timeout is 5 s, so everything must be stopped well before that.
const LEASE_MS: u64 = 800;
const HEARTBEAT_TIMEOUT_MS: u64 = 5_000;

/// A fake leader granting `LEASE_MS` from its first reply (a grant never shortens a lease
/// held, so a longer first one would outlast the test).
async fn leased() -> Gateway {
    let gw = Gateway::start(None).await;
    gw.grant_lease_ms(LEASE_MS);
    gw
}

/// A fake leader and an agent that serves its metrics (where its lease is read).
async fn with_metrics(dir: &std::path::Path) -> (Gateway, baton_agent::Agent, std::net::SocketAddr) {
    let gw = leased().await;
    let mut c = config(dir, &[gw.addr]);
    c.metrics_listen = Some("127.0.0.1:0".into());
    let agent = start_agent(c).await;
    let metrics = agent.metrics_addr().expect("metrics served");
    (gw, agent, metrics)
}

/// Writes the lease file of `data_dir` as a lease that ran out 4 s ago (granted 5 s ago for 1 s).
fn write_lease_ended_4s_ago(data_dir: &std::path::Path) {
    let mut ended = baton_agent::lease::Lease::default();
    ended.grant(baton_agent::lease_file::boot_ms().saturating_sub(5_000), 1_000);
    baton_agent::lease_file::write(&baton_agent::lease_file::path(data_dir), &ended).unwrap();
}

async fn granted(gw: &Gateway) {
    gw.grant_lease_ms(LEASE_MS);
    let now = gw.report_count();
    wait_for(5, "two reports answered with a lease", || (gw.report_count() >= now + 2).then_some(())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stops_when_no_leader_renews_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let gw = leased().await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    gw.set(
        1,
        vec![assignment(1, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display()))],
    );
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    granted(&gw).await;

    // The leader goes silent (cut off, or this node is): reports are not answered.
    gw.stall_reports(true);
    let cut = Instant::now();
    wait_for(5, "the replica stopped by the lease", || (!alive(p)).then_some(())).await;
    let took = cut.elapsed();
    assert!(
        took < Duration::from_millis(HEARTBEAT_TIMEOUT_MS),
        "stopped {took:?} after the cut: the node would have been declared lost first"
    );

    // Back in touch: the stop is reported with its cause.
    gw.stall_reports(false);
    wait_for(10, "a lease-expired stop reported", || {
        stop_causes_of(&gw.observations(), 1).contains(&StopCause::LeaseExpired).then_some(())
    })
    .await;
    agent.shutdown().await.unwrap();
}

/// Where the host allows it (as root, in CI) the replica is held by a cgroup and watched by
/// its guard; the test below runs the wrapper's own watchdog, of process groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_stops_a_replica_whose_agent_is_gone() {
    a_replica_whose_agent_is_gone_is_stopped(ContainmentMode::Auto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_of_a_process_group_stops_a_replica_whose_agent_is_gone() {
    a_replica_whose_agent_is_gone_is_stopped(ContainmentMode::ProcessGroup).await;
}

async fn a_replica_whose_agent_is_gone_is_stopped(containment: ContainmentMode) {
    let dir = tempfile::tempdir().unwrap();
    let gw = leased().await;
    let with = |mut c: baton_agent::config::AgentConfig| {
        c.containment = containment;
        c
    };
    let agent = start_agent(with(config(dir.path(), &[gw.addr]))).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    gw.set(
        1,
        vec![assignment(1, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display()))],
    );
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    granted(&gw).await;

    // The agent is gone (as stalled by SIGSTOP, or crashed): only the watchdog is left.
    agent.shutdown().await.unwrap();
    let gone = Instant::now();
    wait_for(5, "the replica stopped by its watchdog", || (!alive(p)).then_some(())).await;
    let took = gone.elapsed();
    assert!(took < Duration::from_millis(HEARTBEAT_TIMEOUT_MS), "stopped {took:?} after the agent went");

    // The agent comes back: it reports the stop with its cause, and does not count it as
    // the job's own exit.
    let obs_before = gw.observations().len();
    let agent = start_agent(with(config(dir.path(), &[gw.addr]))).await;
    wait_for(10, "a lease-expired stop reported", || {
        stop_causes_of(&gw.observations(), 1).contains(&StopCause::LeaseExpired).then_some(())
    })
    .await;
    assert!(exited_of(&gw.observations()[obs_before..], 1).is_empty(), "{:?}", gw.observations());
    agent.shutdown().await.unwrap();
}

/// Found by a chaos run of the full fault mix (chaos/README.md, "Found so far"): a replica
/// suspended in place (SIGSTOP of its process group) when its agent died stayed stopped,
/// holding what it held, after the lease ran out and the node was declared lost: the
/// SIGSTOP had stopped its watchdog too. The job, placed again, met its old process (the
/// witness: two attempts at once). The watchdog keeps watching a suspended replica, and
/// once the lease runs out it continues the replica and stops it as a running one, with its
/// checkpoint signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_stops_a_suspended_replica_whose_agent_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let gw = leased().await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    let saved = dir.path().join("saved");
    let job = format!(
        "echo $$ > {}; trap 'echo 1 > {}; exit 0' TERM; while :; do sleep 0.05; done",
        pid.display(),
        saved.display()
    );
    let run = assignment(1, 1, Action::Run, &job);
    gw.set(1, vec![run.clone()]);
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    granted(&gw).await;
    gw.set(1, vec![Assignment { action: Action::Suspend as i32, ..run }]);
    wait_for(5, "job 1 suspended", || suspended(p).then_some(())).await;

    agent.shutdown().await.unwrap();
    let gone = Instant::now();
    wait_for(5, "the suspended replica stopped by its watchdog", || (!alive(p)).then_some(())).await;
    let took = gone.elapsed();
    assert!(took < Duration::from_millis(HEARTBEAT_TIMEOUT_MS), "stopped {took:?} after the agent went");
    assert!(saved.exists(), "continued before its stop signal, it saved its work");
}

/// Found by the chaos run: the watchdog stopped a replica while its agent was down, the job
/// wrote a checkpoint on the stop signal, and the restarted agent (which only knew the
/// checkpoints as of its restart) reported the stop as not checkpointed, so the job started
/// over from zero. A checkpoint written during the attempt counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_stop_counts_the_checkpoint_written_while_the_agent_was_gone() {
    let dir = tempfile::tempdir().unwrap();
    let gw = leased().await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    let job = format!(
        "echo $$ > {}; trap 'echo 1 > \"$BATON_CHECKPOINT_DIR/step\"; exit 0' TERM; while :; do sleep 0.05; done",
        pid.display()
    );
    gw.set(1, vec![assignment(1, 1, Action::Run, &job)]);
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    granted(&gw).await;
    agent.shutdown().await.unwrap();
    wait_for(5, "the replica stopped by its watchdog", || (!alive(p)).then_some(())).await;

    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let stop = wait_for(10, "a lease-expired stop reported", || {
        gw.observations().into_iter().find_map(|o| match o.what {
            Some(baton_proto::v1::observation::What::Stopped(s)) if s.cause() == StopCause::LeaseExpired => Some(s),
            _ => None,
        })
    })
    .await;
    assert!(stop.checkpointed, "the checkpoint written on the watchdog's signal counts: {stop:?}");
    agent.shutdown().await.unwrap();
}

/// An agent started on `dir` under a fake leader granting no lease, told to RUN a looping
/// job: nothing starts until the leader grants a lease, then the newest directive does.
async fn nothing_starts_until_a_lease_is_granted(dir: &std::path::Path) {
    let gw = leased().await;
    gw.grant_lease_ms(0);
    let pid = dir.join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    gw.set(
        1,
        vec![assignment(1, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display()))],
    );
    let agent = start_agent(config(dir, &[gw.addr])).await;
    let now = gw.report_count();
    wait_for(5, "reports answered without a lease", || (gw.report_count() >= now + 3).then_some(())).await;
    assert!(!pid.exists(), "started without a lease held");

    gw.grant_lease_ms(LEASE_MS);
    let p = wait_for(5, "started once a lease is granted", || read_pid(&pid)).await;
    assert!(alive(p));
    agent.shutdown().await.unwrap();
}

/// An agent holding a lease far longer than the test whose reports then stall, and whose
/// lease file `as_after_the_stall` changes as a stall would leave it: a RUN sent then must not
/// run (the wrapper checks the file), and its start is reported as a lease stop.
async fn a_run_spawned_with_the_lease_file_does_not_run(as_after_the_stall: impl FnOnce(&std::path::Path)) {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let _reaper = Reaper(vec![ran.clone()]);
    let (gw, agent) = holding_a_long_lease_then_stalled(dir.path()).await;
    as_after_the_stall(dir.path());

    gw.set(1, vec![assignment(1, 1, Action::Run, &format!("echo $$ > {}; exec sleep 30", ran.display()))]);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!ran.exists(), "the replica ran although the lease file said no lease was held");

    gw.stall_reports(false);
    wait_for(10, "the start reported as a lease stop", || {
        stop_causes_of(&gw.observations(), 1).contains(&StopCause::LeaseExpired).then_some(())
    })
    .await;
    assert!(exited_of(&gw.observations(), 1).is_empty(), "{:?}", gw.observations());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!ran.exists(), "started again once the lease was renewed");
    agent.shutdown().await.unwrap();
}

/// Once the lease has run out (here: the previous run of the agent held one that ended
/// while it was down), nothing starts: the leader may have placed the job elsewhere. A
/// renewed lease lets the newest directive start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_starts_while_the_lease_has_run_out() {
    let dir = tempfile::tempdir().unwrap();
    write_lease_ended_4s_ago(dir.path());
    nothing_starts_until_a_lease_is_granted(dir.path()).await;
}

/// An agent that was never granted a lease (it just started, or its first report got no
/// answer) starts nothing: a leader may have placed the job here, lost the node and placed it
/// elsewhere since. Before, only a lease that had run out held starts back, and a first
/// start, a reboot or a lost first reply followed by a cut left two copies running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_starts_before_a_lease_is_granted() {
    let dir = tempfile::tempdir().unwrap();
    nothing_starts_until_a_lease_is_granted(dir.path()).await;
}

/// Found twice by chaos runs of the full fault mix (chaos/README.md, "Found so far"): an
/// agent stopped past the heartbeat timeout just as it obeyed a RUN, its lease still held
/// when it decided, went on after the node was declared lost and spawned the replica,
/// beside the attempt that had replaced it on another node (the witness: two attempts at
/// once, and an attempt 1 that started after attempt 2 had saved its work). The lease is
/// checked again as late as can be, by the replica's wrapper before it runs the command:
/// here the lease file says the lease ran out (time that passed while the agent was
/// stopped), though the agent, which decided before, holds it. Nothing runs, and the start
/// is reported as a lease stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_spawned_after_the_lease_ran_out_does_not_run() {
    a_run_spawned_with_the_lease_file_does_not_run(write_lease_ended_4s_ago).await;
}

/// The wrapper agrees with the agent: a replica spawned while no lease file is there (the
/// agent decided under a lease, and the file is gone by the spawn: removed by hand, or never
/// written on this boot) does not run either. Before, the wrapper skipped its check without
/// a file and the watchdog waited for one forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_spawned_without_a_lease_file_does_not_run() {
    a_run_spawned_with_the_lease_file_does_not_run(|dir| {
        std::fs::remove_file(baton_agent::lease_file::path(dir)).unwrap();
    })
    .await;
}

/// Only the leader the agent follows renews its lease: replies of the same term from an
/// earlier leader id (one superseded by the leader the agent follows, see `fence.rs`) are
/// refused, so the lease runs out and the replicas stop, as when no leader answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_from_an_earlier_leader_of_the_same_term_do_not_renew_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let gw = leased().await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    gw.set(
        1,
        vec![assignment(1, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display()))],
    );
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    granted(&gw).await;

    gw.set_reply_leader(0);
    wait_for(5, "the replica stopped by the lease", || (!alive(p)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// An agent holding a lease far longer than the test (it holds it throughout), whose reports
/// then stall: no renewal rewrites the lease file from here (a report answered before the
/// stall has had its time).
async fn holding_a_long_lease_then_stalled(dir: &std::path::Path) -> (Gateway, baton_agent::Agent) {
    let gw = leased().await;
    let agent = start_agent(config(dir, &[gw.addr])).await;
    gw.set(1, vec![]);
    gw.grant_lease_ms(600_000);
    let now = gw.report_count();
    wait_for(5, "two reports answered with a lease", || (gw.report_count() >= now + 2).then_some(())).await;
    gw.stall_reports(true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    (gw, agent)
}

/// The watchdog starts from the lease its wrapper checked: a lease file gone before the
/// watchdog's first poll means the agent is gone, as one gone later does (issue 31). Before,
/// the watchdog forgot the wrapper's reading and waited for a lease file forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_file_gone_before_the_watchdogs_first_poll_stops_the_replica() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    let (gw, agent) = holding_a_long_lease_then_stalled(dir.path()).await;

    // The job itself removes the file as it starts, well within the watchdog's first poll.
    let lease = baton_agent::lease_file::path(dir.path());
    let command = format!("rm -f {}; echo $$ > {}; while :; do sleep 0.05; done", lease.display(), pid.display());
    gw.set(1, vec![assignment(1, 1, Action::Run, &command)]);
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    wait_for(10, "the replica stopped by its watchdog", || (!alive(p)).then_some(())).await;
    gw.stall_reports(false);
    agent.shutdown().await.unwrap();
}

/// Found after test runs: replicas kept running for hours once their agent's data directory
/// was removed. The watchdog treated a missing lease file as "no lease granted yet" and
/// waited for one forever; and with the replica's own directory gone, marking the stop
/// failed in a way that ended the watchdog itself. A lease file that disappears after it
/// was read means the agent is gone for good: the replica is stopped at once, however long
/// its last lease had left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_stops_a_replica_whose_agents_data_directory_was_removed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    let gw = leased().await;
    let agent = start_agent(config(&data, &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    gw.set(
        1,
        vec![assignment(1, 1, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display()))],
    );
    let p = wait_for(5, "job 1 started", || read_pid(&pid)).await;
    // A lease far longer than this test: only the file's disappearance can stop the replica.
    gw.grant_lease_ms(600_000);
    let now = gw.report_count();
    wait_for(5, "two reports answered with a lease", || (gw.report_count() >= now + 2).then_some(())).await;

    // The watchdog reads the lease file once a poll: let it see this lease before the
    // directory goes (a replica whose watchdog never saw a lease waits for one).
    tokio::time::sleep(std::time::Duration::from_millis(3 * baton_agent::limits::WATCHDOG_POLL_MS)).await;
    agent.shutdown().await.unwrap();
    std::fs::remove_dir_all(&data).unwrap();
    wait_for(10, "the replica stopped by its watchdog", || (!alive(p)).then_some(())).await;
}

/// Found by a full-mix chaos run with clocks offset (chaos/README.md, "Found so far"): an
/// agent stalled past its lease woke, stopped everything, and a reply renewing its lease
/// arrived; a directive read off the connection just after (sent before the stall) was
/// obeyed before the agent's next tick had taken in the renewal and the floor that comes
/// with it, and started an attempt the leader had already replaced (`urgent-225` attempt 1
/// after attempt 2 had run). Until the agent has taken in a renewal, it obeys a directive
/// as without a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directive_read_between_a_renewal_and_the_agents_next_tick_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, agent, metrics) = with_metrics(dir.path()).await;
    let stale = dir.path().join("stale");
    let _reaper = Reaper(vec![stale.clone()]);
    gw.set(1, vec![]);
    granted(&gw).await;
    for round in 1..=5u32 {
        gw.stall_reports(true);
        wait_for(5, "the lease ran out", || {
            (blocking_scrape(metrics)["baton_agent_lease_expiries_total"] >= f64::from(round)).then_some(())
        })
        .await;
        gw.set_reply_state_index(7 + u64::from(round));
        gw.stall_reports(false);
        wait_for(5, "the lease renewed", || {
            (blocking_scrape(metrics)["baton_agent_lease_seconds_left"] > 0.0).then_some(())
        })
        .await;
        let cmd = format!("echo $$ >> {}; exec sleep 30", stale.display());
        gw.send_built_at(1, 5, vec![assignment(1, 1, Action::Run, &cmd)]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!stale.exists(), "round {round}: started a directive older than the state its lease was renewed from");
        gw.send_built_at(1, 7 + u64::from(round), vec![]);
    }
    agent.shutdown().await.unwrap();
}

/// Found by a chaos run of process faults (chaos/README.md, "Found so far"): an agent
/// stopped past the heartbeat timeout had its node declared lost, and the job's next
/// attempt started on another node. Continued, the agent read a directive sent before its
/// stall (attempt 1 on this node), stopped everything as its lease had run out, and once
/// the leader renewed the lease applied that directive and started attempt 1 beside
/// attempt 2. A renewed lease covers only a directive built from a state at least as new as the
/// renewing reply's: the leader's state had moved on to index 7, so a list built at index 5
/// is not obeyed, and the list built at 7 is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_obeys_no_directive_older_than_the_leaders_state() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, agent, metrics) = with_metrics(dir.path()).await;
    let (stale, fresh) = (dir.path().join("stale"), dir.path().join("fresh"));
    let _reaper = Reaper(vec![stale.clone(), fresh.clone()]);
    let forever = |pid: &std::path::Path| format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display());
    gw.set(1, vec![]);
    granted(&gw).await;

    gw.stall_reports(true);
    wait_for(5, "the lease ran out", || {
        (blocking_scrape(metrics)["baton_agent_lease_expiries_total"] >= 1.0).then_some(())
    })
    .await;
    // Read off the connection after the stall, sent before it.
    gw.send_built_at(1, 5, vec![assignment(1, 1, Action::Run, &forever(&stale))]);
    gw.set_reply_state_index(7);
    let now = gw.report_count();
    gw.stall_reports(false);
    wait_for(5, "the lease renewed", || {
        (gw.report_count() >= now + 3 && blocking_scrape(metrics)["baton_agent_lease_seconds_left"] > 0.0).then_some(())
    })
    .await;
    assert!(!stale.exists(), "started a directive older than the state its lease was renewed from");
    // It asks for a newer one: a leader sends an unchanged directive again only when asked.
    wait_for(5, "the agent asks for a directive as new as its lease", || {
        (gw.last_report()?.awaiting_state_index == 7).then_some(())
    })
    .await;

    gw.send_built_at(1, 7, vec![assignment(2, 1, Action::Run, &forever(&fresh))]);
    let p = wait_for(5, "the current directive obeyed", || read_pid(&fresh)).await;
    assert!(alive(p));
    assert!(!stale.exists());
    wait_for(5, "it no longer asks", || (gw.last_report()?.awaiting_state_index == 0).then_some(())).await;
    agent.shutdown().await.unwrap();
}
