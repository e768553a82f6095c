//! Stale leaders and stale attempts are refused; followers point to the leader; a restarted
//! agent re-adopts its replicas and never starts one twice.

use crate::common;

use baton_proto::v1::{Action, Assignment, ReplicaPhase};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directive_with_a_lower_term_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid1 = dir.path().join("pid1");
    let started2 = dir.path().join("started2");
    let pid3 = dir.path().join("pid3");
    let _reaper = Reaper(vec![pid1.clone(), started2.clone(), pid3.clone()]);
    let long = |f: &std::path::Path| format!("echo $$ > {}; while :; do sleep 0.05; done", f.display());
    let one = assignment(1, 1, Action::Run, &long(&pid1));
    gw.set(5, vec![one.clone()]);
    let p1 = wait_for(5, "job 1 started", || read_pid(&pid1)).await;

    // A deposed leader (term 3) wants job 2 instead of job 1.
    let attaches = gw.attaches();
    gw.send_raw(3, vec![assignment(2, 1, Action::Run, &long(&started2))]);
    // The agent got it: it leaves a leader that sends a lower term and attaches again.
    wait_for(5, "a reattach after the stale directive", || (gw.attaches() > attaches).then_some(())).await;
    // Then the real leader (term 5) adds job 3; directives are handled in order, so once
    // job 3 runs the term-3 directive has been dealt with.
    gw.set(5, vec![one, assignment(3, 1, Action::Run, &long(&pid3))]);
    wait_for(5, "job 3 started", || read_pid(&pid3)).await;
    assert!(!started2.exists(), "the deposed leader's job was not started");
    assert!(alive(p1), "the deposed leader could not kill job 1");
    let term_seen = gw.fake.seen.lock().unwrap().attaches.iter().map(|a| a.term_seen).max().unwrap();
    assert!(term_seen <= 5);
    gw.set(5, vec![]);
    wait_for(5, "everything killed", || (!alive(p1)).then_some(())).await;
    agent.shutdown().await.unwrap();

    // The highest term is durable: a restarted agent still refuses term 3 at once.
    let journal = baton_agent::journal::Journal::open(&dir.path().join("journal")).unwrap();
    assert_eq!(journal.term().unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_attempt_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let old = dir.path().join("old");
    let marker = dir.path().join("marker");
    let _reaper = Reaper(vec![pid.clone(), old.clone(), marker.clone()]);
    gw.set(
        1,
        vec![assignment(1, 2, Action::Run, &format!("echo $$ > {}; while :; do sleep 0.05; done", pid.display()))],
    );
    let p = wait_for(5, "attempt 2 started", || read_pid(&pid)).await;
    gw.set(
        1,
        vec![
            assignment(1, 1, Action::Run, &format!("echo $$ > {}; sleep 5", old.display())),
            assignment(7, 1, Action::Run, &format!("echo $$ > {}", marker.display())),
        ],
    );
    wait_for(5, "the marker job ran", || read_pid(&marker)).await;
    assert!(!old.exists(), "attempt 1 was not started after attempt 2");
    // Attempt 2 is absent from that directive, so it was killed.
    wait_for(5, "attempt 2 killed", || (!alive(p)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_points_the_agent_to_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let leader = Gateway::start(None).await;
    let follower = Gateway::start(Some(leader.addr.to_string())).await;
    let agent = start_agent(config(dir.path(), &[follower.addr])).await;
    let out = dir.path().join("out");
    leader.set(2, vec![assignment(1, 1, Action::Run, &format!("echo hi > {}", out.display()))]);
    wait_for(5, "attached to the leader", || (leader.attaches() == 1).then_some(())).await;
    let attach = leader.fake.seen.lock().unwrap().attaches[0].clone();
    let node = attach.node.unwrap();
    assert_eq!(node.name, "node-a");
    assert_eq!(node.gpus.len(), 4);
    assert_eq!(node.resources["gpu"], 4);
    assert_eq!(node.agent_addr, agent.logs_addr().to_string());
    wait_for(5, "the leader's job reported", || (!exited_of(&leader.observations(), 1).is_empty()).then_some(())).await;
    assert!(out.exists());
    assert!(follower.fake.seen.lock().unwrap().reports.is_empty(), "reports go to the attached leader");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_tries_the_next_replica_when_one_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let refusing = refusing();
    let dead = refusing.addr;
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[dead, gw.addr])).await;
    wait_for(5, "attached to the live replica", || (gw.attaches() >= 1).then_some(())).await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_readopts_its_replicas_and_reports_exits_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let starts = dir.path().join("starts");
    let pid1 = dir.path().join("pid1");
    let pid2 = dir.path().join("pid2");
    let go1 = dir.path().join("go1");
    let go2 = dir.path().join("go2");
    let _reaper = Reaper(vec![pid1.clone(), pid2.clone()]);
    let wait_then_exit = |pid: &std::path::Path, go: &std::path::Path, code: i32| {
        format!(
            "echo $$ > {pid}; echo started >> {starts}; while [ ! -e {go} ]; do sleep 0.02; done; exit {code}",
            pid = pid.display(),
            starts = starts.display(),
            go = go.display()
        )
    };
    let directive = vec![
        assignment(1, 1, Action::Run, &wait_then_exit(&pid1, &go1, 5)),
        assignment(2, 1, Action::Run, &wait_then_exit(&pid2, &go2, 7)),
    ];
    gw.set(1, directive.clone());

    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let p1 = wait_for(5, "job 1 started", || read_pid(&pid1)).await;
    let p2 = wait_for(5, "job 2 started", || read_pid(&pid2)).await;
    agent.shutdown().await.unwrap();

    // While the agent is down, job 2 ends with 7; job 1 keeps running.
    std::fs::write(&go2, b"").unwrap();
    wait_for(5, "job 2 ended", || (!alive(p2)).then_some(())).await;
    assert!(alive(p1), "replicas outlive their agent");

    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(5, "job 2's exit reported", || (!exited_of(&gw.observations(), 2).is_empty()).then_some(())).await;
    // Said once or more: the fake keeps asking to RUN job 2, and a RUN of a replica whose
    // exit ended its job is answered with that exit again (reports are at least once).
    said_once_or_more(&exited_of(&gw.observations(), 2), 7);
    wait_for(5, "job 1 reported running", || {
        gw.last_report().filter(|r| r.running.iter().any(|x| x.job_id == 1 && x.phase() == ReplicaPhase::Running))
    })
    .await;
    let lines = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(lines.lines().count(), 2, "each replica started once: {lines}");

    // The adopted replica's own exit is noticed and reported with its code.
    std::fs::write(&go1, b"").unwrap();
    wait_for(5, "job 1's exit reported", || (!exited_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    said_once_or_more(&exited_of(&gw.observations(), 1), 5);
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 2, "nothing started twice");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_in_progress_survives_an_agent_restart() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let (pid, _reaper, _sent) = stop_then_shut_down(dir.path(), &gw, 600).await;
    assert!(alive(pid), "the replica ignores its signal; the agent is gone");

    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(5, "Stopped after the grace period", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(()))
        .await;
    // A STOP that reaches the restarted agent after the replica ended is answered with
    // its end again: once or more.
    said_once_or_more(&stopped_of(&gw.observations(), 1), false);
    assert!(!alive(pid), "killed by the restarted agent at the journaled deadline");
    agent.shutdown().await.unwrap();
}

/// A replica that accepts connections and never answers (paused, or still starting) holds
/// the agent up for a bounded time only: it goes on to the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_never_answers_does_not_hold_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let mute = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mute_addr = mute.local_addr().unwrap();
    // Accepts and keeps every connection open without a byte of HTTP/2.
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = mute.accept().await {
            held.push(sock);
        }
    });
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[mute_addr, gw.addr])).await;
    wait_for(5, "attached to the replica that answers", || (gw.attaches() >= 1).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// A leader that keeps the directive stream open but no longer answers reports (cut off
/// from its quorum, or stuck) is left after a few failed reports, for a replica that answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_leaves_a_leader_that_stops_answering_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (stuck, live) = (Gateway::start(None).await, Gateway::start(None).await);
    stuck.set(1, vec![]);
    live.set(1, vec![]);
    let agent = start_agent(config(dir.path(), &[stuck.addr, live.addr])).await;
    wait_for(5, "attached to the first replica", || (stuck.report_count() >= 1).then_some(())).await;
    stuck.stall_reports(true);
    wait_for(10, "reattached to the replica that answers", || (live.report_count() >= 1).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// openraft (default leader ids) may elect two leaders in one term, and the one with the
/// higher node id supersedes the other: a directive of the same term from a lower leader id
/// comes from a replica this agent must not obey, and one from a higher id comes from the
/// leader to follow from then on (issue 9, hole 2; the simulator found the old rule, one
/// leader per term, refusing a working second leader until the next election).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_a_term_an_earlier_leader_is_refused_and_a_later_one_obeyed() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid1 = dir.path().join("pid1");
    let started2 = dir.path().join("started2");
    let pid3 = dir.path().join("pid3");
    let _reaper = Reaper(vec![pid1.clone(), started2.clone(), pid3.clone()]);
    let long = |f: &std::path::Path| format!("echo $$ > {}; while :; do sleep 0.05; done", f.display());
    let one = assignment(1, 1, Action::Run, &long(&pid1));
    gw.set(5, vec![one.clone()]);
    let p1 = wait_for(5, "job 1 started", || read_pid(&pid1)).await;

    // Leader 0 claims term 5 too (superseded by leader 1), and wants job 2 instead of job 1.
    gw.send_from(5, 0, vec![assignment(2, 1, Action::Run, &long(&started2))]);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Leader 2, elected later in term 5, keeps job 1 and adds job 3; once job 3 runs the
    // earlier directive has been dealt with.
    gw.send_from(5, 2, vec![one, assignment(3, 1, Action::Run, &long(&pid3))]);
    let p3 = wait_for(5, "job 3 started", || read_pid(&pid3)).await;
    assert!(!started2.exists(), "the earlier leader's job was not started");
    assert!(alive(p1), "the earlier leader could not kill job 1");
    // Leader 1 is now the superseded one: its empty directive is refused, so nothing stops.
    gw.send_from(5, 1, vec![]);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(alive(p1) && alive(p3), "leader 1, superseded by leader 2, could not stop the jobs");
    gw.send_from(5, 2, vec![]);
    wait_for(5, "everything killed", || (!alive(p1) && !alive(p3)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// Rewrites the journal's records of job `job_id` as a crash right after the first journal
/// write of a start leaves them: pid 0, no start time.
fn as_if_crashed_before_the_pid_was_journaled(data_dir: &std::path::Path, job_id: u64) {
    let journal = baton_agent::journal::Journal::open(&data_dir.join("journal")).unwrap();
    for mut rec in journal.replicas().unwrap().into_iter().filter(|r| r.key.job_id == job_id) {
        rec.pid = 0;
        rec.start_time = 0;
        journal.put_replica(&rec).unwrap();
    }
}

/// Issue 9, hole 5a: the agent crashed between spawning a replica and journaling its pid.
/// The process runs on, holding its GPUs; the restarted agent must find it by its marker
/// and adopt it, not report it Exited 127 and lose track of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_spawned_just_before_a_crash_is_adopted_not_reported_127() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let pid_file = dir.path().join("pid");
    let _reaper = Reaper(vec![pid_file.clone()]);
    let cmd = format!("echo $$ > {}; while :; do sleep 0.05; done", pid_file.display());
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = wait_for(5, "started", || read_pid(&pid_file)).await;
    agent.shutdown().await.unwrap();
    as_if_crashed_before_the_pid_was_journaled(dir.path(), 1);

    let reports = gw.report_count();
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(5, "reported running again", || {
        gw.last_report().filter(|r| gw.report_count() > reports && r.running.iter().any(|x| x.job_id == 1))
    })
    .await;
    assert!(exited_of(&gw.observations(), 1).is_empty(), "{:?}", gw.observations());
    assert!(alive(pid));
    // Tracked again: a directive without it kills it.
    gw.set(1, vec![]);
    wait_for(5, "killed once unwanted", || (!alive(pid)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// The same crash one step earlier: journaled, never spawned. It never ran, so it is not an
/// exit of the job (127 would fail it): it starts when the leader still wants it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_journaled_but_never_spawned_starts_when_still_wanted() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let started = dir.path().join("started");
    let _reaper = Reaper(vec![started.clone()]);
    let cmd = format!("echo $$ >> {}; while :; do sleep 0.05; done", started.display());
    {
        let journal = baton_agent::journal::Journal::open(&dir.path().join("journal")).unwrap();
        let rec = baton_agent::journal::ReplicaRecord {
            key: baton_agent::journal::ReplicaKey { job_id: 1, attempt: 1, rank: 0 },
            job: "job-1".into(),
            task: 0,
            replica: 0,
            pid: 0,
            start_time: 0,
            phase: baton_agent::journal::Phase::Running,
            stop: None,
            kill_deadline_unix_ms: 0,
            kill_deadline_boot_ms: 0,
            outcome: None,
            exit_file: baton_agent::launch::exit_file(dir.path(), 1, 1, 0),
            gpus: vec![1, 3],
            gpu_milli: 0,
            slices: Vec::new(),
            started_unix_ms: 0,
            newest_checkpoint_at_start_unix_ms: None,
        };
        journal.put_replica(&rec).unwrap();
        journal.set_max_attempt(1, 1).unwrap();
        // The agent went down in this boot of the machine (no power cut): no trace of the
        // wrapper then proves it was never spawned.
        journal.note_boot(&baton_agent::procfs::boot_id().expect("a boot id")).unwrap();
    }
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = wait_for(5, "started", || read_pid(&started)).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(exited_of(&gw.observations(), 1).is_empty(), "{:?}", gw.observations());
    assert_eq!(std::fs::read_to_string(&started).unwrap().lines().count(), 1, "started once");
    gw.set(1, vec![]);
    wait_for(5, "killed once unwanted", || (!alive(pid)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// Issue 9, hole 6b: finished replica records are pruned (the journal is bounded), and the
/// attempt fence refuses only older attempts, so a stale RUN of a finished attempt whose
/// record was pruned would start it again. What pruning leaves must still refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_attempt_whose_record_was_pruned_is_not_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let starts = dir.path().join("starts");
    let cmd = format!("echo $$ >> {}", starts.display());
    let run = assignment(1, 1, Action::Run, &cmd);
    gw.set(1, vec![run.clone()]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(5, "job 1's exit reported", || (exited_of(&gw.observations(), 1) == vec![0]).then_some(())).await;
    // The leader moves on; the record goes as pruning drops it.
    gw.set(1, vec![]);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    agent.shutdown().await.unwrap();
    {
        let journal = baton_agent::journal::Journal::open(&dir.path().join("journal")).unwrap();
        let key = baton_agent::journal::ReplicaKey { job_id: 1, attempt: 1, rank: 0 };
        journal.prune_replica(&key).unwrap();
    }

    // A stale directive (say, resent by a leader that lagged) runs attempt 1 again, with a
    // marker job after it so we know it was handled.
    let marker = dir.path().join("marker");
    gw.set(1, vec![run, assignment(2, 1, Action::Run, &format!("echo $$ > {}", marker.display()))]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(5, "the marker job ran", || read_pid(&marker)).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(std::fs::read_to_string(&starts).unwrap().lines().count(), 1, "attempt 1 started once");
    agent.shutdown().await.unwrap();
}

/// Issue 9, hole 7, on the agent's side: the grace deadline is counted on a clock that a
/// wall-clock step does not move. Here the wall clock is stepped 60 s forward while the
/// agent is down (as NTP may do): the journaled wall-clock deadline has passed, but the
/// grace has not, and the replica keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_does_not_shorten_a_stop_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let (pid, _reaper, sent) = stop_then_shut_down(dir.path(), &gw, 3_000).await;
    {
        let journal = baton_agent::journal::Journal::open(&dir.path().join("journal")).unwrap();
        for mut rec in journal.replicas().unwrap() {
            let stop = rec.stop.as_mut().expect("a stop in progress");
            stop.signal_unix_ms -= 60_000;
            stop.deadline_unix_ms -= 60_000;
            journal.put_replica(&rec).unwrap();
        }
    }

    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(alive(pid) || sent.elapsed() >= std::time::Duration::from_millis(3_000), "killed before its grace");
    wait_for(10, "Stopped after the grace period", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(()))
        .await;
    assert!(sent.elapsed() >= std::time::Duration::from_millis(3_000), "killed after {:?}", sent.elapsed());
    agent.shutdown().await.unwrap();
}

/// Starts job 1 as a replica that ignores SIGTERM, sends it a STOP with `grace_ms`, and shuts
/// the agent down once it reports the replica Stopping: a stop in progress with no agent.
/// Returns the replica's pid, the guard that kills it at the end, and when the STOP was sent.
async fn stop_then_shut_down(dir: &std::path::Path, gw: &Gateway, grace_ms: u64) -> (i32, Reaper, std::time::Instant) {
    let pid_file = dir.join("pid");
    let reaper = Reaper(vec![pid_file.clone()]);
    let cmd = format!("trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done", pid_file.display());
    let run = assignment(1, 1, Action::Run, &cmd);
    gw.set(1, vec![run.clone()]);
    let agent = start_agent(config(dir, &[gw.addr])).await;
    let pid = wait_for(5, "started", || read_pid(&pid_file)).await;
    let mut stop = run;
    stop.action = Action::Stop as i32;
    stop.grace_ms = grace_ms;
    let sent = std::time::Instant::now();
    gw.set(1, vec![stop]);
    wait_for(5, "reported stopping", || {
        gw.last_report().filter(|r| r.running.iter().any(|x| x.job_id == 1 && x.phase() == ReplicaPhase::Stopping))
    })
    .await;
    agent.shutdown().await.unwrap();
    (pid, reaper, sent)
}

/// Issue 9, hole 5b: the agent journals a stop before it sends the checkpoint signal, so a
/// crash in between leaves a replica journaled as stopping that never got its signal. The
/// restarted agent must send it (the job checkpoints and stops), not wait out the grace and
/// kill a job that never heard it should save its work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_journaled_but_not_signalled_before_a_crash_is_signalled_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let pid_file = dir.path().join("pid");
    let _reaper = Reaper(vec![pid_file.clone()]);
    let cmd = format!(
        "trap 'echo saved > \"$BATON_CHECKPOINT_DIR/ckpt\"; exit 0' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let run = assignment(1, 1, Action::Run, &cmd);
    gw.set(1, vec![run.clone()]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = wait_for(5, "started", || read_pid(&pid_file)).await;
    agent.shutdown().await.unwrap();
    {
        // What the crash leaves: the stop journaled, no signal sent.
        let journal = baton_agent::journal::Journal::open(&dir.path().join("journal")).unwrap();
        for mut rec in journal.replicas().unwrap() {
            let now = baton_agent::checkpoint::now_unix_ms();
            rec.phase = baton_agent::journal::Phase::Stopping;
            rec.stop = Some(baton_agent::journal::StopInfo {
                signal_unix_ms: now,
                deadline_unix_ms: now + 3_000,
                deadline_boot_ms: baton_agent::lease_file::boot_ms() + 3_000,
                newest_before_unix_ms: 0,
                lease_expired: false,
                signal: libc::SIGTERM,
                signalled: false,
            });
            journal.put_replica(&rec).unwrap();
        }
    }
    assert!(alive(pid));

    let mut stop = run;
    stop.action = Action::Stop as i32;
    stop.grace_ms = 3_000;
    gw.set(1, vec![stop]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(10, "Stopped", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    // It got its signal and saved its work (said again if the STOP reached the restarted
    // agent after the replica ended).
    said_once_or_more(&stopped_of(&gw.observations(), 1), true);
    assert!(exited_of(&gw.observations(), 1).is_empty(), "{:?}", gw.observations());
    agent.shutdown().await.unwrap();
}

/// A chaos run with leader kills found this (chaos/README.md, "Found so far"); here with a
/// real process: a directive from a stale state leaves job 1 out, so the agent kills it as
/// no longer wanted (which reports nothing); then the leader's state catches up and its
/// directive says RUN for that same attempt. The agent does not start it again, and answers
/// with its end (`KILLED_HERE`), so that the leader does not hold the job Running with no
/// process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_a_replica_killed_as_unwanted_is_answered_with_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let started = dir.path().join("started");
    let run = assignment(1, 1, Action::Run, &format!("echo $$ >> {}; exec sleep 30", started.display()));
    gw.set(1, vec![run.clone()]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = wait_for(5, "started", || read_pid(&started)).await;
    gw.set(1, vec![]);
    wait_for(5, "killed once unwanted", || (!alive(pid)).then_some(())).await;
    assert!(stop_causes_of(&gw.observations(), 1).is_empty(), "a kill reports nothing: {:?}", gw.observations());

    gw.set(1, vec![run]);
    wait_for(5, "its end reported", || {
        stop_causes_of(&gw.observations(), 1).contains(&baton_proto::v1::StopCause::KilledHere).then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(&started).unwrap().lines().count(), 1, "started once");
    agent.shutdown().await.unwrap();
}

/// Issue 9, found by a chaos partitions run (chaos/README.md, "Found so far"): a SUSPEND
/// reached the agent before the RUN of the same attempt (it had lost its lease when the job
/// was placed, so the RUN waited). The agent answered that it never ran here and the leader
/// counted the job suspended in place; the RUN that came after started the attempt's one
/// process while the job was held suspended, its GPUs lent to the preemptor. A SUSPEND of a
/// replica that never ran ends that replica here, as a STOP does: a later RUN of it is
/// answered with its end and starts nothing. The SUSPEND is answered as ended here
/// (`KILLED_HERE`), not as stopped in place: nothing is there to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_after_a_suspend_of_a_replica_that_never_ran_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let started = dir.path().join("started");
    let run = assignment(1, 1, Action::Run, &format!("echo $$ >> {}; exec sleep 30", started.display()));
    gw.set(1, vec![Assignment { action: Action::Suspend as i32, ..run.clone() }]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    wait_for(5, "the suspension answered", || (!stop_causes_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    // As ended here, not as stopped in place: there is nothing to resume.
    let causes = stop_causes_of(&gw.observations(), 1);
    assert!(causes.iter().all(|c| *c == baton_proto::v1::StopCause::KilledHere), "{causes:?}");

    // A marker job after it, so we know the RUN was handled.
    let marker = dir.path().join("marker");
    gw.set(1, vec![run, assignment(2, 1, Action::Run, &format!("echo $$ > {}", marker.display()))]);
    wait_for(5, "the marker job ran", || read_pid(&marker)).await;
    wait_for(5, "its end reported", || {
        stop_causes_of(&gw.observations(), 1).contains(&baton_proto::v1::StopCause::KilledHere).then_some(())
    })
    .await;
    assert!(!started.exists(), "attempt 1 started after it was suspended as never run here");
    agent.shutdown().await.unwrap();
}

/// A leader sends a node's directive when it changes, not again on a timer: what one
/// directive left for later is decided again by the agent on its own. Here the RUN of job 1
/// comes back while the agent is still killing it as unwanted (it ignores SIGTERM), so the
/// RUN is ignored; once the kill ends, the same directive, never sent again, is answered
/// with the replica's end (`KILLED_HERE`), and the leader does not hold the job Running
/// with no process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ignored_while_its_replica_was_being_killed_is_answered_once_the_kill_ends() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let started = dir.path().join("started");
    let cmd = format!("trap '' TERM; echo $$ >> {}; while :; do sleep 0.05; done", started.display());
    let run = assignment(1, 1, Action::Run, &cmd);
    gw.set(1, vec![run.clone()]);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = wait_for(5, "started", || read_pid(&started)).await;
    gw.set(1, vec![]);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(alive(pid), "SIGTERM is ignored: the kill waits for its grace");
    gw.set(1, vec![run]);
    wait_for(5, "killed after its grace", || (!alive(pid)).then_some(())).await;
    wait_for(5, "its end reported without another directive", || {
        stop_causes_of(&gw.observations(), 1).contains(&baton_proto::v1::StopCause::KilledHere).then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(&started).unwrap().lines().count(), 1, "started once");
    agent.shutdown().await.unwrap();
}
