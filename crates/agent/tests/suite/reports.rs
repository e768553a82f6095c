//! Observations are retried until a leader of the current term acknowledges them.

use crate::common;

use baton_proto::v1::Action;
use baton_proto::v1::observation::What;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observations_are_resent_until_acknowledged_by_the_current_leader() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    gw.set(4, vec![assignment(1, 1, Action::Run, "exit 0")]);
    wait_for(5, "the exit reported", || (!exited_of(&gw.observations(), 1).is_empty()).then_some(())).await;
    // Acknowledged: later reports no longer carry it.
    let after = gw.report_count();
    wait_for(5, "a report without observations", || {
        let seen = gw.fake.seen.lock().unwrap();
        seen.reports[after..].iter().any(|r| r.observations.is_empty()).then_some(())
    })
    .await;

    // A leader answering with an older term than the agent has seen is deposed: nothing it
    // answers acknowledges anything, and the agent looks for the real leader.
    gw.set_reply_term(2);
    let attaches = gw.attaches();
    gw.send_raw(4, vec![assignment(2, 1, Action::Run, "exit 6")]);
    wait_for(5, "the exit sent at least twice", || (exited_of(&gw.observations(), 2).len() >= 2).then_some(())).await;
    wait_for(5, "a reattach", || (gw.attaches() > attaches).then_some(())).await;
    gw.set_reply_term(4);
    let after = gw.report_count();
    wait_for(5, "acknowledged at last", || {
        let seen = gw.fake.seen.lock().unwrap();
        seen.reports[after..].iter().any(|r| r.observations.is_empty()).then_some(())
    })
    .await;
    // The journal drops what was acknowledged off the heartbeat's path (reports leave it out
    // at once): a few heartbeats more give the drop its time on a busy machine (it had not
    // run yet in 1 of 2 full runs beside a simulation).
    let acked_at = gw.report_count();
    wait_for(5, "three more reports", || (gw.report_count() >= acked_at + 3).then_some(())).await;
    agent.shutdown().await.unwrap();
    let journal = baton_agent::journal::Journal::open(&dir.path().join("journal")).unwrap();
    assert_eq!(journal.pending_len(), 0, "acknowledged observations leave the journal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_written_while_running_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let pid = dir.path().join("pid");
    let go = dir.path().join("go");
    let _reaper = Reaper(vec![pid.clone()]);
    let cmd = format!(
        "echo $$ > {pid}; while [ ! -e {go} ]; do sleep 0.02; done; echo 1 > $BATON_CHECKPOINT_DIR/c; while :; do sleep 0.05; done",
        pid = pid.display(),
        go = go.display()
    );
    gw.set(1, vec![assignment(1, 3, Action::Run, &cmd)]);
    let p = wait_for(5, "started", || read_pid(&pid)).await;
    std::fs::write(&go, b"").unwrap();
    wait_for(5, "Checkpointed", || {
        gw.observations().iter().find_map(|o| match &o.what {
            Some(What::Checkpointed(c)) if c.job_id == 1 && c.attempt == 3 => Some(()),
            _ => None,
        })
    })
    .await;
    gw.set(1, vec![]);
    wait_for(5, "killed", || (!alive(p)).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// Found by a chaos run with leader kills (chaos/README.md, "Found so far"): the ranks of a
/// gang share the job's checkpoint directory (one file system for all nodes). Rank 0 was
/// killed before it saved anything, and its stop was reported as checkpointed because rank
/// 1, on another node, saved into that directory right after rank 0's signal; the next
/// attempt told rank 0 to resume from nothing. A stop counts only the rank's own files:
/// those in `$BATON_RANK_CHECKPOINT_DIR`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_counts_only_the_ranks_own_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let (pid1, pid2) = (dir.path().join("pid1"), dir.path().join("pid2"));
    let _reaper = Reaper(vec![pid1.clone(), pid2.clone()]);
    // Job 1's rank 0 saves nothing of its own; what appears after its signal is rank 1's.
    let others = format!(
        "trap 'mkdir -p \"$BATON_CHECKPOINT_DIR/rank-1\"; echo 5 > \"$BATON_CHECKPOINT_DIR/rank-1/ckpt\"; exit 0' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid1.display()
    );
    // Job 2's rank 0 saves into its own directory.
    let own = format!(
        "trap 'echo 5 > \"$BATON_RANK_CHECKPOINT_DIR/ckpt\"; exit 0' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid2.display()
    );
    let runs = vec![assignment(1, 1, Action::Run, &others), assignment(2, 1, Action::Run, &own)];
    gw.set(1, runs.clone());
    wait_for(5, "started", || read_pid(&pid1).zip(read_pid(&pid2))).await;
    let stops = runs
        .into_iter()
        .map(|mut a| {
            a.action = Action::Stop as i32;
            a
        })
        .collect();
    gw.set(1, stops);
    wait_for(10, "both stopped", || {
        let obs = gw.observations();
        (!stopped_of(&obs, 1).is_empty() && !stopped_of(&obs, 2).is_empty()).then_some(())
    })
    .await;
    let obs = gw.observations();
    assert_eq!(stopped_of(&obs, 1), vec![false], "another rank's checkpoint is not this rank's");
    assert_eq!(stopped_of(&obs, 2), vec![true], "its own is");
    let rank_dir = dir.path().join("checkpoints/job-2/rank-0/ckpt");
    assert!(rank_dir.exists(), "BATON_RANK_CHECKPOINT_DIR is job-<id>/rank-<r> under the root");
    agent.shutdown().await.unwrap();
}
