//! RUN, STOP, SUSPEND and kills with real processes against a fake leader.

use crate::common;

use std::time::Duration;

use baton_proto::v1::observation::What;
use baton_proto::v1::{Action, Assignment, ReplicaPhase};
use common::*;

/// An agent following a fake leader that runs job 1's replica: a shell loop that first runs
/// `prefix` (a trap, say) and writes its pid. Bind `_dir` and `_reaper` by name: they hold
/// the agent's directory and kill what is left at the end of the test.
struct Looping {
    _dir: tempfile::TempDir,
    _reaper: Reaper,
    gw: Gateway,
    agent: baton_agent::Agent,
    pid: i32,
    run: Assignment,
}

async fn looping(prefix: &str) -> Looping {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid_file = dir.path().join("pid");
    let reaper = Reaper(vec![pid_file.clone()]);
    let cmd = format!("{prefix}echo $$ > {}; while :; do sleep 0.05; done", pid_file.display());
    let run = assignment(1, 1, Action::Run, &cmd);
    gw.set(1, vec![run.clone()]);
    let pid = wait_for(5, "the replica's pid", || read_pid(&pid_file)).await;
    Looping { _dir: dir, _reaper: reaper, gw, agent, pid, run }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_starts_the_replica_with_its_environment_and_reports_its_exit() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let env_file = dir.path().join("env.txt");
    let mut a = assignment(1, 2, Action::Run, &format!("env > {}; exit 3", env_file.display()));
    a.env.insert("USER_VAR".into(), "x y".into());
    a.resume = true;
    a.checkpoint_signal = "SIGUSR1".into();
    let mut missing = assignment(2, 1, Action::Run, "");
    missing.command = vec!["no-such-command-for-baton".into()];
    let killed = assignment(3, 1, Action::Run, "kill -USR2 $$; sleep 1");
    gw.set(1, vec![a, missing, killed]);

    let obs = wait_for(5, "all exits reported", || {
        let o = gw.observations();
        (exited_of(&o, 1).len() == 1 && exited_of(&o, 2).len() == 1 && exited_of(&o, 3).len() == 1).then_some(o)
    })
    .await;
    assert_eq!(exited_of(&obs, 1), vec![3]);
    assert_eq!(exited_of(&obs, 2), vec![127], "a command that is not found exits 127");
    assert_eq!(exited_of(&obs, 3), vec![128 + libc::SIGUSR2], "a signal death is 128 + signal");

    let env = std::fs::read_to_string(&env_file).unwrap();
    let ckpt_dir = dir.path().join("checkpoints").join("job-1");
    for line in [
        "CUDA_VISIBLE_DEVICES=1,3".to_string(),
        "BATON_JOB=job-1".into(),
        "BATON_JOB_ID=1".into(),
        "BATON_ATTEMPT=2".into(),
        "BATON_RANK=0".into(),
        "BATON_WORLD_SIZE=1".into(),
        format!("BATON_CHECKPOINT_DIR={}", ckpt_dir.display()),
        "BATON_RESUME=1".into(),
        "BATON_CHECKPOINT_SIGNAL=SIGUSR1".into(),
        "USER_VAR=x y".into(),
    ] {
        assert!(env.lines().any(|l| l == line), "missing {line:?} in\n{env}");
    }
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let launched: u64 = env
        .lines()
        .find_map(|l| l.strip_prefix("BATON_LAUNCHED_AT_MS="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no BATON_LAUNCHED_AT_MS in\n{env}"));
    assert!(launched <= now_ms && now_ms - launched < 60_000, "launched at {launched}, now {now_ms}");
    assert!(ckpt_dir.is_dir(), "the checkpoint directory is created");
    let stderr = std::fs::read_to_string(dir.path().join("logs/job-2/1/rank-0.stderr")).unwrap();
    assert!(stderr.contains("no-such-command-for-baton"), "the reason is in the stderr log: {stderr}");
    agent.shutdown().await.unwrap();
}

/// A start names the replicated state that asked for it (`BATON_STATE_INDEX`): the chaos
/// checker holds every start against the commit at that index. A replica that waited for
/// its GPUs starts under the newest directive that still asks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_told_the_state_index_of_the_directive_it_started_under() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let _agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let env_of = |job: u64| dir.path().join(format!("env-{job}"));
    let index_in = |job: u64| {
        let env = std::fs::read_to_string(env_of(job)).ok()?;
        env.lines().find_map(|l| l.strip_prefix("BATON_STATE_INDEX=").map(str::to_string))
    };
    let slow_to_stop = format!(
        "env > {0}.tmp; mv {0}.tmp {0}; trap 'sleep 1; exit 0' TERM; while :; do sleep 0.05; done",
        env_of(1).display()
    );
    gw.send_built_at(1, 41, vec![assignment(1, 1, Action::Run, &slow_to_stop)]);
    let first = wait_for(5, "job 1's environment", || index_in(1)).await;
    assert_eq!(first, "41");
    // Job 2 on job 1's GPUs waits for job 1 to stop; meanwhile a newer state asks the same.
    let mut second = assignment(2, 1, Action::Run, &format!("env > {0}.tmp; mv {0}.tmp {0}", env_of(2).display()));
    second.gpus = assignment(1, 1, Action::Run, "").gpus;
    let both = vec![assignment(1, 1, Action::Stop, &slow_to_stop), second];
    gw.send_built_at(1, 50, both.clone());
    gw.send_built_at(1, 57, both);
    let later = wait_for(10, "job 2's environment", || index_in(2)).await;
    assert_eq!(later, "57", "a deferred start names the directive it started under");
}

/// A job whose node was lost while its agent stalled: the stalled agent's watchdog saved
/// every rank as the lease ran out, and no report told the leader. The next attempt finds
/// the checkpoint in the job's directory and resumes from it, where before it started from
/// zero; it does not resume while a rank has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_resumes_from_a_complete_checkpoint_the_leader_was_not_told_of() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let _agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let job_dir = dir.path().join("checkpoints").join("job-1");
    std::fs::create_dir_all(job_dir.join("rank-0")).unwrap();
    std::fs::write(job_dir.join("rank-0").join("state"), "step 40").unwrap();
    let env_of = |attempt: u32| dir.path().join(format!("env-{attempt}"));
    let run = |attempt: u32, rank: u32| {
        let mut a =
            assignment(1, attempt, Action::Run, &format!("env > {}.tmp; mv {0}.tmp {0}", env_of(attempt).display()));
        (a.rank, a.world_size, a.resume, a.resume_if_checkpointed) = (rank, 2, false, true);
        a
    };
    // Rank 1 saved nothing yet: attempt 2 of rank 0 starts over.
    gw.set(1, vec![run(2, 0)]);
    let env = wait_for(5, "attempt 2's environment", || std::fs::read_to_string(env_of(2)).ok()).await;
    assert!(!env.contains("BATON_RESUME"), "resumed from an incomplete checkpoint: {env}");
    std::fs::create_dir_all(job_dir.join("rank-1")).unwrap();
    std::fs::write(job_dir.join("rank-1").join("state"), "step 40").unwrap();
    gw.set(1, vec![run(3, 0)]);
    let env = wait_for(5, "attempt 3's environment", || std::fs::read_to_string(env_of(3)).ok()).await;
    assert!(env.lines().any(|l| l == "BATON_RESUME=1"), "did not resume from the complete checkpoint: {env}");
}

/// Chaos seed 22502: a CPU job's attempt 2 was placed on the node where its attempt 1, run
/// again by the node's thaw, still ran; attempt 2 started at once, from zero, and attempt 1
/// saved its checkpoint 150 ms later as it stopped. A newer attempt now waits until an older
/// one of its job here has ended, GPUs or none, and resumes from what that one saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_attempt_waits_for_the_older_one_here_and_resumes_from_its_last_save() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let _agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let rank_dir = dir.path().join("checkpoints").join("job-1").join("rank-0");
    // Attempt 1 takes 200 ms to save as it is stopped (within the agent's 500 ms kill grace).
    let running = dir.path().join("attempt-1-runs");
    let saves_on_stop = format!(
        "trap 'sleep 0.2; mkdir -p {0}; echo 4 > {0}/state; exit 0' TERM; touch {1}; while :; do sleep 0.05; done",
        rank_dir.display(),
        running.display()
    );
    let first = Assignment { gpus: Vec::new(), ..assignment(1, 1, Action::Run, &saves_on_stop) };
    gw.set(1, vec![first]);
    wait_for(5, "attempt 1 running", || running.exists().then_some(())).await;
    let env_file = dir.path().join("env-2");
    let record_env = format!("env > {0}.tmp; mv {0}.tmp {0}", env_file.display());
    let mut second = Assignment { gpus: Vec::new(), ..assignment(1, 2, Action::Run, &record_env) };
    second.resume_if_checkpointed = true;
    gw.set(1, vec![second]);
    let env = wait_for(10, "attempt 2's environment", || std::fs::read_to_string(&env_file).ok()).await;
    assert!(rank_dir.join("state").exists(), "attempt 2 started before attempt 1 saved: {:?}", gw.observations());
    assert!(env.lines().any(|l| l == "BATON_RESUME=1"), "attempt 2 did not resume from attempt 1's save: {env}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_is_unset_without_a_checkpoint_and_reports_carry_running_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid_file = dir.path().join("pid");
    let _reaper = Reaper(vec![pid_file.clone()]);
    let cmd =
        format!("echo $$ > {}; env > {}.env; while :; do sleep 0.05; done", pid_file.display(), pid_file.display());
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let report = wait_for(5, "a report listing the replica", || {
        gw.last_report().filter(|r| r.running.iter().any(|x| x.job_id == 1 && x.phase() == ReplicaPhase::Running))
    })
    .await;
    assert_eq!(report.node, "node-a");
    wait_for(5, "the env file", || read_pid(&pid_file)).await;
    let env = std::fs::read_to_string(format!("{}.env", pid_file.display())).unwrap();
    assert!(!env.contains("BATON_RESUME"), "{env}");
    gw.set(1, vec![]);
    let pid = read_pid(&pid_file).unwrap();
    wait_for(5, "the replica killed", || (!alive(pid)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_checkpoints_then_resumes_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let train = common::repo_root().join("examples/workloads/train.py");
    let mut run = assignment(1, 1, Action::Run, "");
    run.command = vec![
        "python3".into(),
        train.display().to_string(),
        "--steps".into(),
        "1000".into(),
        "--step-ms".into(),
        "10".into(),
    ];
    gw.set(1, vec![run.clone()]);
    let log = dir.path().join("logs/job-1/1/rank-0.stdout");
    wait_for(5, "a few steps", || std::fs::read_to_string(&log).ok().filter(|t| t.contains("step 3"))).await;

    let mut stop = run.clone();
    stop.action = Action::Stop as i32;
    stop.grace_ms = 5_000;
    gw.set(1, vec![stop.clone()]);
    wait_for(5, "Stopped", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    assert_eq!(stopped_of(&gw.observations(), 1), vec![true], "checkpointed");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("checkpointed at step"), "{text}");
    assert!(exited_of(&gw.observations(), 1).is_empty(), "a stop is not an exit");

    // A repeated STOP for the stopped attempt re-reports the same observation.
    gw.set(1, vec![stop]);
    wait_for(5, "Stopped again", || (stopped_of(&gw.observations(), 1).len() == 2).then_some(())).await;
    assert_eq!(stopped_of(&gw.observations(), 1), vec![true, true]);

    let mut resume = run.clone();
    resume.attempt = 2;
    resume.resume = true;
    resume.command[3] = "5".into();
    gw.set(1, vec![resume]);
    wait_for(10, "attempt 2 exits", || (!exited_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    assert_eq!(exited_of(&gw.observations(), 1), vec![0]);
    let text = std::fs::read_to_string(dir.path().join("logs/job-1/2/rank-0.stdout")).unwrap();
    assert!(text.starts_with("resumed from step"), "{text}");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_ignoring_its_signal_is_killed_after_grace() {
    let Looping { gw, agent, pid, run, _dir, _reaper } = looping("trap '' TERM; ").await;
    let mut stop = run;
    stop.action = Action::Stop as i32;
    stop.grace_ms = 300;
    let sent = std::time::Instant::now();
    gw.set(1, vec![stop]);
    wait_for(5, "Stopped", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    assert!(sent.elapsed() >= Duration::from_millis(300), "waited for the grace period");
    assert_eq!(stopped_of(&gw.observations(), 1), vec![false]);
    assert!(!alive(pid), "killed");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_stops_the_group_and_run_continues_it() {
    let Looping { gw, agent, pid, run, _dir, _reaper } = looping("").await;
    let mut suspend = run.clone();
    suspend.action = Action::Suspend as i32;
    gw.set(1, vec![suspend]);
    wait_for(5, "suspended", || suspended(pid).then_some(())).await;
    wait_for(5, "Stopped", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    assert_eq!(stopped_of(&gw.observations(), 1), vec![false]);
    wait_for(5, "reported suspended", || {
        gw.last_report().filter(|r| r.running.iter().any(|x| x.job_id == 1 && x.phase() == ReplicaPhase::Suspended))
    })
    .await;
    gw.set(1, vec![run]);
    wait_for(5, "running again", || (alive(pid) && !suspended(pid)).then_some(())).await;
    assert!(exited_of(&gw.observations(), 1).is_empty());
    gw.set(1, vec![]);
    wait_for(5, "the replica killed", || (!alive(pid)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// Found by a chaos run with leader kills (chaos/README.md, "Found so far"): the leader
/// resumed a suspended replica in place and suspended it again before any directive between
/// the two reached the agent. The agent saw one SUSPEND after another, held the replica
/// suspended, and said nothing, so the new suspension waited for its report until the lease
/// ran out. A SUSPEND the leader still awaits, in a directive built once the earlier report
/// was recorded, is answered again; one built before is not (the earlier report answers
/// it). Each report names the suspension it answers (issue 31: preemptor and time), so the
/// leader takes a late repeat of the first for no later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_the_leader_awaits_of_a_replica_held_suspended_is_reported_again() {
    let Looping { gw, agent, pid, run, _dir, _reaper } = looping("").await;
    let suspend = Assignment {
        action: Action::Suspend as i32,
        awaiting_suspended: true,
        suspension_by: 7,
        suspension_ms: 1_000,
        ..run
    };
    let named = |gw: &Gateway| -> Vec<(u64, u64)> {
        gw.observations()
            .iter()
            .filter_map(|o| match &o.what {
                Some(What::Stopped(s)) if s.job_id == 1 => Some((s.suspension_by, s.suspension_ms)),
                _ => None,
            })
            .collect()
    };
    gw.set_reply_state_index(20);
    gw.send_built_at(1, 10, vec![suspend.clone()]);
    wait_for(5, "the first suspension reported", || (stopped_of(&gw.observations(), 1).len() == 1).then_some(())).await;
    // Built before that report was recorded (at 20): the report answers it. Then recorded:
    // the SUSPEND of a suspended job asks nothing more.
    gw.send_built_at(1, 15, vec![suspend.clone()]);
    gw.send_built_at(1, 20, vec![Assignment { awaiting_suspended: false, ..suspend.clone() }]);
    let reports = gw.report_count();
    wait_for(5, "two reports after those directives", || (gw.report_count() > reports + 1).then_some(())).await;
    assert_eq!(stopped_of(&gw.observations(), 1), vec![false], "held suspended, nothing more to say");
    // Resumed in place and suspended again, for another preemptor; the agent sees only the
    // second SUSPEND.
    gw.send_built_at(1, 30, vec![Assignment { suspension_by: 8, suspension_ms: 2_000, ..suspend }]);
    wait_for(5, "the second suspension reported", || (stopped_of(&gw.observations(), 1).len() == 2).then_some(()))
        .await;
    assert_eq!(stopped_of(&gw.observations(), 1), vec![false, false]);
    assert_eq!(named(&gw), vec![(7, 1_000), (8, 2_000)], "each report names the suspension it answers");
    assert!(suspended(pid), "still suspended, never resumed");
    gw.set(1, vec![]);
    wait_for(5, "the replica killed", || (!alive(pid)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_absent_from_the_directive_is_killed_without_a_report() {
    let Looping { gw, agent, pid, _dir, _reaper, .. } = looping("").await;
    gw.set(1, vec![]);
    wait_for(5, "the replica killed", || (!alive(pid)).then_some(())).await;
    wait_for(5, "a report with nothing running", || gw.last_report().filter(|r| r.running.is_empty())).await;
    let obs = gw.observations();
    assert!(exited_of(&obs, 1).is_empty() && stopped_of(&obs, 1).is_empty(), "{obs:?}");
    agent.shutdown().await.unwrap();
}

/// A replica the leader moves onto GPUs whose previous replica is still stopping starts only
/// once that one has exited: no GPU runs two processes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_for_its_gpus_until_the_previous_one_has_exited() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    // Grace enough for its handler, which a second SIGTERM (it is young) starts over.
    let mut c = config(dir.path(), &[gw.addr]);
    c.kill_grace_ms = 5_000;
    let agent = start_agent(c).await;
    let order = dir.path().join("order");
    let pid_file = dir.path().join("pid");
    let _reaper = Reaper(vec![pid_file.clone()]);
    // The first replica takes 0.3 s to stop after its signal.
    let slow = format!(
        "trap 'sleep 0.3; echo first-ended >> {order}; exit 0' TERM; echo $$ > {pid}; while :; do sleep 0.05; done",
        pid = pid_file.display(),
        order = order.display()
    );
    gw.set(1, vec![assignment(1, 1, Action::Run, &slow)]);
    wait_for(5, "the first replica runs", || read_pid(&pid_file)).await;
    // Job 1 is no longer wanted; job 2 gets the same GPUs (1 and 3).
    let second = format!("echo \"second-started $BATON_NODE\" >> {}", order.display());
    let mut moved = assignment(2, 1, Action::Run, &second);
    moved.gpus = vec![3, 1];
    gw.set(1, vec![moved]);
    wait_for(5, "the second replica ran", || exited_of(&gw.observations(), 2).first().copied()).await;
    let lines = std::fs::read_to_string(&order).unwrap();
    assert_eq!(lines, "first-ended\nsecond-started node-a\n", "the second started only after the first ended");
    agent.shutdown().await.unwrap();
}

/// The same for MIG slices (decisions.md section 11): a replica moved onto slices that the
/// previous one still holds, stopping, starts once it has exited, on those slices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waits_for_its_slices_until_the_previous_one_has_exited() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.kill_grace_ms = 5_000;
    let mut inv = baton_agent::inventory::development_inventory(&c.name, 4);
    baton_agent::inventory::add_development_slices(&mut inv, &c.name, &[("mig-1g.10gb".into(), 2)]);
    let agent = baton_agent::start_with_inventory(c, inv).await.expect("agent starts");
    let order = dir.path().join("order");
    let pid_file = dir.path().join("pid");
    let _reaper = Reaper(vec![pid_file.clone()]);
    let on_slices = |job_id: u64, command: &str| {
        let mut a = assignment(job_id, 1, Action::Run, command);
        a.gpus = Vec::new();
        a.slices = [("mig-1g.10gb".to_string(), 2)].into();
        a
    };
    let slow = format!(
        "trap 'sleep 0.3; echo first-ended >> {order}; exit 0' TERM; echo $$ > {pid}; while :; do sleep 0.05; done",
        pid = pid_file.display(),
        order = order.display()
    );
    gw.set(1, vec![on_slices(1, &slow)]);
    wait_for(5, "the first replica runs", || read_pid(&pid_file)).await;
    // Job 1 is no longer wanted; job 2 asks for both slices.
    let second = format!("echo \"second-started $CUDA_VISIBLE_DEVICES\" >> {}", order.display());
    gw.set(1, vec![on_slices(2, &second)]);
    wait_for(5, "the second replica ran", || exited_of(&gw.observations(), 2).first().copied()).await;
    let lines = std::fs::read_to_string(&order).unwrap();
    assert_eq!(
        lines, "first-ended\nsecond-started MIG-dev-node-a-4-0,MIG-dev-node-a-4-1\n",
        "the second started only after the first ended"
    );
    agent.shutdown().await.unwrap();
}

/// A stop signal that comes right after a replica started may be lost (between the
/// wrapper's fork and the job's exec); the agent sends it once more. This job stands in for
/// one that lost the first: it acts on the second SIGTERM only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_right_after_the_start_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.kill_grace_ms = 5_000;
    let agent = start_agent(c).await;
    let (pid_file, done) = (dir.path().join("pid"), dir.path().join("done"));
    let _reaper = Reaper(vec![pid_file.clone()]);
    let cmd = format!(
        "trap 'n=$((n+1)); if [ $n -ge 2 ]; then echo second > {done}; exit 0; fi' TERM; echo $$ > {pid}; \
         while :; do sleep 0.05; done",
        done = done.display(),
        pid = pid_file.display()
    );
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let pid = wait_for(5, "the replica runs", || read_pid(&pid_file)).await;
    gw.set(1, vec![]);
    wait_for(4, "the replica ended on the second SIGTERM, before any SIGKILL", || (!alive(pid)).then_some(())).await;
    assert_eq!(std::fs::read_to_string(&done).unwrap().trim(), "second");
    agent.shutdown().await.unwrap();
}

/// Issue 9, hole 6c: a name is reused by a newer job once the old one ended; keyed by the
/// name, the new job would resume from the old job's files. Keyed by the job id, it cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_sharing_a_name_get_separate_checkpoint_directories() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let out = |i: u32| dir.path().join(format!("dir{i}"));
    let write = |i: u32| {
        format!("echo \"$BATON_CHECKPOINT_DIR\" > {}; echo {i} > \"$BATON_CHECKPOINT_DIR/step\"", out(i).display())
    };
    let mut old = assignment(1, 1, Action::Run, &write(1));
    old.job = "train".into();
    gw.set(1, vec![old]);
    wait_for(5, "the old job ended", || (exited_of(&gw.observations(), 1) == vec![0]).then_some(())).await;
    let mut new = assignment(2, 1, Action::Run, &write(2));
    new.job = "train".into();
    gw.set(1, vec![new]);
    wait_for(5, "the new job ended", || (exited_of(&gw.observations(), 2) == vec![0]).then_some(())).await;

    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap().trim().to_string();
    let (d1, d2) = (read(out(1)), read(out(2)));
    assert_ne!(d1, d2, "one checkpoint directory per job");
    assert_eq!(read(std::path::Path::new(&d1).join("step")), "1", "the old job's checkpoint is its own");
    assert!(d2.ends_with("job-2"), "{d2}");
    agent.shutdown().await.unwrap();
}

/// Issue 9, hole 7: grace is a duration the agent counts from when it first acts on the
/// STOP. A later leader whose clock runs ahead would think less grace is left and resend the
/// STOP with less (here none): the agent keeps the deadline it started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_stop_with_less_grace_does_not_shorten_it() {
    let Looping { gw, agent, pid, run, _dir, _reaper } = looping("trap '' TERM; ").await;
    let mut stop = run;
    stop.action = Action::Stop as i32;
    stop.grace_ms = 1_500;
    let sent = std::time::Instant::now();
    gw.set(1, vec![stop.clone()]);
    wait_for(5, "reported stopping", || {
        gw.last_report().filter(|r| r.running.iter().any(|x| x.job_id == 1 && x.phase() == ReplicaPhase::Stopping))
    })
    .await;
    let mut hurried = stop;
    hurried.grace_ms = 0;
    gw.set(2, vec![hurried]);
    wait_for(5, "Stopped", || (!stopped_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    assert!(sent.elapsed() >= Duration::from_millis(1_500), "killed after {:?}, before its grace", sent.elapsed());
    assert!(!alive(pid), "killed");
    agent.shutdown().await.unwrap();
}

/// The leader compares what an agent reports running with what it placed there, so a
/// replica held back for its GPUs is listed too, as waiting for them (docs/protocol.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waiting_for_its_gpus_is_listed_as_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.kill_grace_ms = 5_000;
    let agent = start_agent(c).await;
    let pid_file = dir.path().join("pid");
    let _reaper = Reaper(vec![pid_file.clone()]);
    let slow = format!("trap 'sleep 1; exit 0' TERM; echo $$ > {}; while :; do sleep 0.05; done", pid_file.display());
    gw.set(1, vec![assignment(1, 1, Action::Run, &slow)]);
    wait_for(5, "the first replica runs", || read_pid(&pid_file)).await;
    let mut moved = assignment(2, 1, Action::Run, "exit 0");
    moved.gpus = vec![3, 1];
    gw.set(1, vec![moved]);
    wait_for(5, "job 2 listed as waiting for its GPUs", || {
        gw.last_report()
            .filter(|r| r.running.iter().any(|x| x.job_id == 2 && x.phase() == ReplicaPhase::WaitingForGpus))
    })
    .await;
    wait_for(5, "job 2 ran once its GPUs were free", || exited_of(&gw.observations(), 2).first().copied()).await;
    agent.shutdown().await.unwrap();
}

/// The agent's own environment (credentials, tokens, its configuration) is not the job's:
/// a replica sees only a short list of host basics plus what its job asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_does_not_inherit_the_agents_environment() {
    // cargo sets CARGO_MANIFEST_DIR for the test process, so the agent (in this process) has it.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some(), "cargo runs this test");
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let env_file = dir.path().join("env.txt");
    gw.set(1, vec![assignment(1, 1, Action::Run, &format!("env > {}", env_file.display()))]);
    wait_for(5, "the exit reported", || (exited_of(&gw.observations(), 1).len() == 1).then_some(())).await;

    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(!env.contains("CARGO_MANIFEST_DIR="), "the agent's environment leaked into the job:\n{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "PATH is kept so the job finds its tools:\n{env}");
    agent.shutdown().await.unwrap();
}
