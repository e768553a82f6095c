//! The supervisor driven step by step: its tick and its directives called directly, so a
//! lease can change between two ticks exactly as a test says.

use std::sync::Arc;

use baton_proto::v1::observation::What;
use baton_proto::v1::{Action, Assignment, Directive};
use tokio::sync::watch;

use super::{Settings, Supervisor};
use crate::journal::{Journal, Outcome, Phase, ReplicaKey};
use crate::journal_store::SimDisk;
use crate::lease::{Floor, Lease};
use crate::lease_file::boot_ms;

fn run(job_id: u64, command: &str) -> Assignment {
    Assignment {
        job_id,
        job: format!("job-{job_id}"),
        attempt: 1,
        world_size: 1,
        action: Action::Run as i32,
        gpus: vec![job_id as u32],
        command: vec!["sh".into(), "-c".into(), command.into()],
        grace_ms: 2_000,
        ..Default::default()
    }
}

fn built_at(state_index: u64, assignments: Vec<Assignment>) -> Directive {
    Directive { term: 1, leader_id: 1, state_index, assignments, ..Default::default() }
}

fn supervisor(dir: &std::path::Path, lease: watch::Receiver<Lease>) -> Supervisor {
    supervisor_with(Journal::open(&dir.join("journal")).unwrap(), dir, lease)
}

/// A supervisor whose journal is on `disk`, which a test can make fail.
fn supervisor_on(disk: &SimDisk, dir: &std::path::Path, lease: watch::Receiver<Lease>) -> Supervisor {
    let journal = Journal::with_store(&dir.join("journal"), Box::new(disk.open())).unwrap();
    supervisor_with(journal, dir, lease)
}

fn supervisor_with(journal: Journal, dir: &std::path::Path, lease: watch::Receiver<Lease>) -> Supervisor {
    let journal = Arc::new(journal);
    let settings = Settings {
        cgroups: None,
        node: "n1".into(),
        data_dir: dir.to_path_buf(),
        checkpoint_root: dir.join("checkpoints"),
        kill_grace_ms: 500,
        unkillable_after_ms: 1_000,
        log_cap_bytes: 1 << 20,
        lease,
        metrics: Arc::new(crate::metrics::AgentMetrics::new()),
        run_as: crate::run_as::RunAsPolicy::AgentUser,
        devices: crate::devices::Devices::of(&node_devices()),
    };
    Supervisor::new(journal, settings).unwrap().0
}

/// Four whole development GPUs and three slices of `mig-1g.10gb` (on a fifth, in MIG mode).
fn node_devices() -> crate::inventory::Inventory {
    let mut inv = crate::inventory::development_inventory("n1", 4);
    crate::inventory::add_development_slices(&mut inv, "n1", &[("mig-1g.10gb".into(), 3)]);
    inv
}

fn granted_lease(dir: &std::path::Path) -> watch::Receiver<Lease> {
    let now = boot_ms();
    let mut lease = Lease::default();
    lease.renew(now, 60_000, now);
    lease.granted_from(Floor { term: 1, state_index: 3 });
    let lease_file = crate::lease_file::path(dir);
    std::fs::create_dir_all(lease_file.parent().unwrap()).unwrap();
    crate::lease_file::write(&lease_file, &lease).unwrap();
    watch::channel(lease).1
}

fn key(job_id: u64) -> ReplicaKey {
    ReplicaKey { job_id, attempt: 1, rank: 0 }
}

/// Issue 31: a lease that ran out and was renewed between two ticks of the supervisor
/// (100 ms apart) set neither the fence nor the floor: what ran past the lease kept
/// running, and a directive built before the lapse (read off the connection after a stall)
/// started work that the leader had placed elsewhere. The renewal counts the lapse
/// (`Lease::renew`) and the next tick acts on it as on an expiry.
#[tokio::test]
async fn a_lapse_renewed_between_two_ticks_stops_what_runs_and_obeys_no_older_directive() {
    let dir = tempfile::tempdir().unwrap();
    let now = boot_ms();
    let mut lease = Lease::default();
    lease.renew(now, 60_000, now);
    lease.granted_from(Floor { term: 1, state_index: 3 });
    // The reporter writes the lease file the replicas' watchdogs read; here the test does.
    let lease_file = crate::lease_file::path(dir.path());
    std::fs::create_dir_all(lease_file.parent().unwrap()).unwrap();
    crate::lease_file::write(&lease_file, &lease).unwrap();
    let (lease_tx, lease_rx) = watch::channel(lease);
    let mut sup = supervisor(dir.path(), lease_rx);
    sup.on_directive(built_at(5, vec![run(1, "exec sleep 30")])).unwrap();
    assert_eq!(sup.replicas.get(&key(1)).map(|r| r.rec.phase), Some(Phase::Running));
    let pgid = sup.replicas[&key(1)].rec.pid;

    // Ran out 10 ms ago; the reply to a report sent just before lands before the next tick.
    let mut lapsed = Lease::until(now.saturating_sub(10));
    lapsed.granted_from(Floor { term: 1, state_index: 3 });
    lapsed.renew(now.saturating_sub(20), 60_000, boot_ms());
    lapsed.granted_from(Floor { term: 1, state_index: 7 });
    assert_eq!(lapsed.lapses(), 1);
    crate::lease_file::write(&lease_file, &lapsed).unwrap();
    lease_tx.send_replace(lapsed);
    let stale_pid = dir.path().join("stale");
    let stale = format!("echo $$ > {}; exec sleep 30", stale_pid.display());
    sup.on_directive(built_at(5, vec![run(1, "exec sleep 30"), run(2, &stale)])).unwrap();
    sup.on_tick().unwrap();
    sup.on_directive(built_at(5, vec![run(1, "exec sleep 30"), run(2, &stale)])).unwrap();

    // Stopping, or already ended by its stop on a busy machine: either way stopped for the lease.
    let stopped_for_the_lease = sup.replicas.get(&key(1)).map(|r| (r.rec.phase, r.rec.stop.map(|s| s.lease_expired)));
    let started = sup.replicas.contains_key(&key(2));
    // Leave nothing running, whatever the assertions say.
    for r in sup.replicas.values() {
        crate::signal::signal_group(r.rec.pid, libc::SIGKILL);
    }
    crate::signal::signal_group(pgid, libc::SIGKILL);
    assert!(
        matches!(stopped_for_the_lease, Some((Phase::Stopping | Phase::Finished, Some(true)))),
        "what ran past the lapse was not stopped for the lease: {stopped_for_the_lease:?}"
    );
    assert!(!started && !stale_pid.exists(), "a directive built before the lapse started work");
}

/// Issue 33 (decisions.md section 11): replicas that ask for MIG slices get distinct ones,
/// named in `CUDA_VISIBLE_DEVICES` by UUID and journaled; one that finds too few free
/// waits for them rather than sharing one.
#[tokio::test]
async fn replicas_get_distinct_slices_and_one_that_finds_too_few_waits() {
    let dir = tempfile::tempdir().unwrap();
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    let slices = |job_id: u64| {
        let seen = dir.path().join(format!("visible-{job_id}"));
        let mut a = run(job_id, &format!("echo $CUDA_VISIBLE_DEVICES > {}; exec sleep 30", seen.display()));
        a.gpus = if job_id == 1 { vec![3] } else { vec![] };
        a.slices = std::collections::HashMap::from([("mig-1g.10gb".to_string(), 2)]);
        a
    };
    sup.on_directive(built_at(5, vec![slices(1), slices(2)])).unwrap();
    let journaled = sup.journal.replicas().unwrap();
    let given: Vec<Vec<String>> = journaled.iter().map(|r| r.slices.clone()).collect();
    let (started, deferred) = (sup.replicas.contains_key(&key(2)), sup.deferred.contains_key(&key(2)));
    let seen = wait_for_file(&dir.path().join("visible-1"));
    for r in sup.replicas.values() {
        crate::signal::signal_group(r.rec.pid, libc::SIGKILL);
    }
    assert_eq!(given, [vec!["MIG-dev-n1-4-0".to_string(), "MIG-dev-n1-4-1".to_string()]]);
    assert_eq!(seen.trim(), "3,MIG-dev-n1-4-0,MIG-dev-n1-4-1");
    assert!(!started && deferred, "the second replica shares no slice: it waits for two to be free");
}

fn wait_for_file(path: &std::path::Path) -> String {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("{} never written", path.display());
}

/// Issue 33: a restarted agent knows which slices the replicas it re-adopts hold (its
/// journal says), and gives a new replica none of them.
#[tokio::test]
async fn a_restarted_agent_gives_no_new_replica_a_slice_a_re_adopted_one_holds() {
    let dir = tempfile::tempdir().unwrap();
    let slices = |job_id: u64, n: u32| {
        let seen = dir.path().join(format!("visible-{job_id}"));
        let mut a = run(job_id, &format!("echo $CUDA_VISIBLE_DEVICES > {}; exec sleep 30", seen.display()));
        a.gpus = vec![];
        a.slices = std::collections::HashMap::from([("mig-1g.10gb".to_string(), n)]);
        a
    };
    let mut first = supervisor(dir.path(), granted_lease(dir.path()));
    first.on_directive(built_at(5, vec![slices(1, 2)])).unwrap();
    let pid = first.replicas[&key(1)].rec.pid;
    drop(first);

    let mut second = supervisor(dir.path(), granted_lease(dir.path()));
    let adopted = second.replicas.get(&key(1)).map(|r| (r.rec.phase, r.rec.slices.clone()));
    second.on_directive(built_at(6, vec![slices(1, 2), slices(2, 1)])).unwrap();
    let seen = wait_for_file(&dir.path().join("visible-2"));
    for r in second.replicas.values() {
        crate::signal::signal_group(r.rec.pid, libc::SIGKILL);
    }
    crate::signal::signal_group(pid, libc::SIGKILL);
    let held = vec!["MIG-dev-n1-4-0".to_string(), "MIG-dev-n1-4-1".to_string()];
    assert_eq!(adopted, Some((Phase::Running, held)), "re-adopted with its slices");
    assert_eq!(seen.trim(), "MIG-dev-n1-4-2", "the one slice nobody holds");
}

/// A replica this agent started ends by its wait, which has the wrapper's exact status, not
/// by `/proc` (its wrapper gone, a zombie not yet reaped): the tick reported it killed (exit
/// 137) from the exit file whenever that file was missing (the compose image had no `mv`;
/// here the job removes its own run directory) and the tick came between the wrapper's exit
/// and its wait's event. The event was checked for, but the wait had not sent it yet.
#[tokio::test]
async fn a_replica_this_agent_started_ends_with_its_waits_status_not_a_guess_from_proc() {
    let dir = tempfile::tempdir().unwrap();
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    let run_dir = crate::launch::exit_file(dir.path(), 1, 1, 0).parent().unwrap().to_path_buf();
    sup.on_directive(built_at(5, vec![run(1, &format!("rm -rf {}; exit 3", run_dir.display()))])).unwrap();
    let pid = sup.replicas[&key(1)].rec.pid;
    // Nothing is awaited meanwhile, so the wrapper stays a zombie: its wait has not run.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while crate::procfs::stat(pid).is_some_and(|(_, s)| s != 'Z') {
        assert!(std::time::Instant::now() < until, "the wrapper did not end");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    sup.on_tick().unwrap();
    let ev = sup.events_rx.recv().await.unwrap();
    sup.on_exit(ev).unwrap();
    let outcome = sup.replicas[&key(1)].rec.outcome;
    assert_eq!(outcome, Some(crate::journal::Outcome::Exited { code: 3 }));
}

/// Issue 31, found by a chaos run (`--seed 13100`): a replica that ended as its agent was
/// killed, the agent's journal then wiped, ran again, whole, when the restarted agent got
/// the RUN the leader still sent (its end never reached the leader): one attempt run twice.
/// Its exit file and markers now stay until its record is pruned, and a RUN of a replica no
/// record knows looks for them first: it is recorded as ended, its exit told, nothing run.
#[tokio::test]
async fn a_replica_that_ran_before_the_journal_was_wiped_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let command = format!("echo once >> {}; exit 3", ran.display());
    {
        let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
        sup.on_directive(built_at(5, vec![run(1, &command)])).unwrap();
        let ev = sup.events_rx.recv().await.unwrap();
        sup.on_exit(ev).unwrap();
        assert_eq!(sup.replicas[&key(1)].rec.outcome, Some(crate::journal::Outcome::Exited { code: 3 }));
    }
    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();

    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    sup.on_directive(built_at(6, vec![run(1, &command)])).unwrap();
    let r = &sup.replicas[&key(1)];
    assert_eq!((r.rec.phase, r.rec.outcome), (Phase::Finished, Some(crate::journal::Outcome::Exited { code: 3 })));
    // Give a second run, had one started, the time to leave its line.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "once\n", "the attempt ran twice");
}

/// What a replica that ended while its agent was down leaves (the agent found it gone),
/// written by hand: its exit file with `code` and its start marker, and, when
/// `watchdog_stopped`, its watchdog's lease marker.
fn ended_while_away(dir: &std::path::Path, key: ReplicaKey, code: i32, watchdog_stopped: bool) {
    let exit = crate::launch::exit_file(dir, key.job_id, key.attempt, key.rank);
    std::fs::create_dir_all(exit.parent().unwrap()).unwrap();
    std::fs::write(crate::launch::started_marker(&exit), "").unwrap();
    std::fs::write(&exit, format!("{code}\n")).unwrap();
    if watchdog_stopped {
        std::fs::write(crate::launch::lease_marker(&exit), "").unwrap();
    }
}

/// Job 1's rank 0 saved its work at `step` (the test workload's checkpoint: `step attempt`).
fn saved_checkpoint(dir: &std::path::Path, step: u32) {
    let ckpt = crate::launch::checkpoint_dir(&dir.join("checkpoints"), 1).join("rank-0");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::write(ckpt.join("rank-0.ckpt"), format!("{step} 1")).unwrap();
}

/// The observations the supervisor has yet to send.
fn pending(sup: &Supervisor) -> Vec<What> {
    sup.journal.pending(usize::MAX).unwrap().into_iter().filter_map(|(_, o)| o.what).collect()
}

/// A chaos run (issue 31, `--only-new-kinds`, seed 14002): rank 1 of a gang exited 0 while
/// its agent was down, and the agent's journal was wiped. The restarted agent found the
/// replica's traces and started nothing, but told nothing either (an exit 0 of a rank other
/// than 0 "was told when it ended"), and ignored every later RUN of it: the leader held the
/// rank's GPUs for ever and a reservation waited on them until the run ended.
#[tokio::test]
async fn a_rank_that_exited_while_its_agent_was_away_is_told_after_its_journal_was_wiped() {
    let dir = tempfile::tempdir().unwrap();
    let rank1 = ReplicaKey { job_id: 1, attempt: 1, rank: 1 };
    ended_while_away(dir.path(), rank1, 0, false);
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    let mut a = run(1, "exit 0");
    (a.rank, a.world_size) = (1, 2);
    sup.on_directive(built_at(6, vec![a])).unwrap();
    let r = &sup.replicas[&rank1];
    assert_eq!((r.rec.phase, r.rec.outcome), (Phase::Finished, Some(crate::journal::Outcome::Exited { code: 0 })));
    let told = pending(&sup);
    assert!(
        told.iter().any(|w| matches!(w, What::Exited(e) if e.rank == 1 && e.exit_code == 0 && e.attempt == 1)),
        "rank 1's exit was not told: {told:?}"
    );
}

/// The same batch on the fix above, seed 15000: the agent itself sent a preemption's stop
/// signal, then was killed and its journal wiped; the replica saved its checkpoint at step
/// 57 of 74 and exited 0, and the restarted agent, finding no lease marker, read that as the
/// job's own end. The agent leaves a stop marker before it signals (`launch::stop_marker`).
#[tokio::test]
async fn a_replica_its_agent_stopped_before_its_journal_was_wiped_is_no_success() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(1);
    {
        let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
        sup.on_directive(built_at(5, vec![run(1, "sleep 30")])).unwrap();
        let mut stop = run(1, "sleep 30");
        stop.action = Action::Stop as i32;
        sup.on_directive(built_at(6, vec![stop])).unwrap();
        let exit = crate::launch::exit_file(dir.path(), 1, 1, 0);
        assert!(crate::launch::stop_marker(&exit).exists(), "no stop marker beside {}", exit.display());
        let ev = sup.events_rx.recv().await.unwrap();
        sup.on_exit(ev).unwrap();
    }
    // What the workload does with its stop signal: a checkpoint, then exit 0.
    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
    let exit = crate::launch::exit_file(dir.path(), 1, 1, 0);
    std::fs::write(&exit, "0\n").unwrap();
    saved_checkpoint(dir.path(), 57);
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    sup.on_directive(built_at(7, vec![run(1, "sleep 30")])).unwrap();
    assert_eq!(sup.replicas[&k].rec.outcome, Some(crate::journal::Outcome::Stopped { checkpointed: true }));
    let told = pending(&sup);
    assert!(!told.iter().any(|w| matches!(w, What::Exited(_))), "told as its own exit: {told:?}");
}

/// A STOP (a preemption) of a replica that ran to its end while its agent was away, its
/// journal then wiped: its exit is told, not "stopped, never ran", which had a job that
/// finished counted as preempted without a checkpoint and run again.
#[tokio::test]
async fn a_stop_of_a_replica_that_ended_while_its_agent_was_away_tells_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(1);
    ended_while_away(dir.path(), k, 0, false);
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    let mut stop = run(1, "exit 0");
    stop.action = Action::Stop as i32;
    sup.on_directive(built_at(6, vec![stop])).unwrap();
    assert_eq!(sup.replicas[&k].rec.outcome, Some(crate::journal::Outcome::Exited { code: 0 }));
    let told = pending(&sup);
    assert!(told.iter().any(|w| matches!(w, What::Exited(e) if e.exit_code == 0)), "its exit: {told:?}");
    assert!(!told.iter().any(|w| matches!(w, What::Stopped(_))), "told as stopped: {told:?}");
}

/// The same chaos batch, seed 14000: a suspended replica's agent was killed and its journal
/// wiped; the lease ran out and the watchdog stopped the replica, which saved a checkpoint at
/// step 81 of 133 and exited 0, as a workload does after its stop signal. The restarted agent
/// read the exit 0 as the job's own end, and the job counted Succeeded. A lease stop is a
/// stop (`reconcile::unrecorded_ending`), told with the checkpoint it wrote.
#[tokio::test]
async fn a_replica_its_watchdog_stopped_while_its_agent_was_away_is_no_success() {
    let dir = tempfile::tempdir().unwrap();
    let k = key(1);
    ended_while_away(dir.path(), k, 0, true);
    saved_checkpoint(dir.path(), 81);
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    sup.on_directive(built_at(6, vec![run(1, "exit 0")])).unwrap();
    let stopped = crate::journal::Outcome::Stopped { checkpointed: true };
    assert_eq!(sup.replicas[&k].rec.outcome, Some(stopped));
    let told = pending(&sup);
    assert!(!told.iter().any(|w| matches!(w, What::Exited(_))), "told as its own exit: {told:?}");
    assert!(
        told.iter().any(|w| matches!(w, What::Stopped(s) if s.checkpointed && s.rank == 0)),
        "its stop and checkpoint were not told: {told:?}"
    );
}

/// Issue 31, a whole node frozen: every process of the node, the agent among them, runs
/// again at once, long after the lease ran out and after the leader placed the job
/// elsewhere. The agent then gave the replica its stop signal and a whole grace, and the
/// job saved a checkpoint beside its next attempt. Past the stop's deadline (the lease's
/// end plus slack and grace) the replica is killed, never told to stop; also when the
/// thawed agent's renewal arrived before its tick looked.
#[tokio::test]
async fn a_replica_whose_lease_ran_out_past_its_stops_deadline_is_killed_without_its_stop_signal() {
    let dir = tempfile::tempdir().unwrap();
    let (lease_tx, lease_rx) = watch::channel(Lease::default());
    lease_tx.send_replace(*granted_lease(dir.path()).borrow());
    let mut sup = supervisor(dir.path(), lease_rx);
    let told = dir.path().join("told-to-stop");
    let job = format!("trap 'echo term > {}; exit 0' TERM; while :; do sleep 0.05; done", told.display());
    sup.on_directive(built_at(5, vec![run(1, &job)])).unwrap();
    let pgid = sup.replicas[&key(1)].rec.pid;
    // Give the job's shell time to set its trap: a stop signal before it would kill it too.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    // Ran out 5 s ago; the thawed agent's renewal lands before its tick.
    let now = boot_ms();
    let mut lapsed = Lease::until(now.saturating_sub(5_000));
    lapsed.renew(now, 60_000, now);
    lapsed.granted_from(Floor { term: 1, state_index: 7 });
    lease_tx.send_replace(lapsed);
    sup.on_tick().unwrap();
    let stop = sup.replicas.get(&key(1)).and_then(|r| r.rec.stop);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let alive = !crate::procfs::group_members(pgid).is_empty();
    crate::signal::signal_group(pgid, libc::SIGKILL);
    assert!(
        matches!(stop, Some(s) if s.lease_expired && s.signal == libc::SIGKILL),
        "not killed for the lease: {stop:?}"
    );
    assert!(!told.exists(), "the replica was told to stop and could save beside its next attempt");
    assert!(!alive, "the replica outlived its kill");
}

/// Stop 66, seed 19003 (a whole node frozen): on the thaw the agent's renewal came before
/// its tick, and a replica deferred before the freeze (its GPU busy) started as soon as an
/// exit freed the GPU, under the lapse no tick had acted on yet: it saved a checkpoint
/// beside its job's next attempt on another node. A deferred start waits for the tick.
#[tokio::test]
async fn a_deferred_replica_does_not_start_under_a_lapse_no_tick_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let (lease_tx, lease_rx) = watch::channel(*granted_lease(dir.path()).borrow());
    let mut sup = supervisor(dir.path(), lease_rx);
    let now = boot_ms();
    let mut lapsed = Lease::until(now.saturating_sub(5_000));
    lapsed.renew(now, 60_000, now);
    lapsed.granted_from(Floor { term: 1, state_index: 7 });
    lease_tx.send_replace(lapsed);
    let ran = dir.path().join("ran");
    sup.deferred.insert(key(2), run(2, &format!("touch {}", ran.display())));
    sup.start_deferred().unwrap();
    let started = sup.replicas.get(&key(2)).map(|r| r.rec.pid);
    if let Some(pid) = started {
        crate::signal::signal_group(pid, libc::SIGKILL);
    }
    assert!(started.is_none(), "a deferred replica started under a lapse no tick had acted on");
}

/// The next replica's exit, ticking the supervisor meanwhile (its deadlines' SIGKILLs) and
/// going on past the journal's errors as it does; `what` if none comes within 10 s.
async fn exit_while_ticking(sup: &mut Supervisor, what: &str) -> super::ExitEvent {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let wait = tokio::time::timeout(std::time::Duration::from_millis(100), sup.events_rx.recv());
        if let Ok(ev) = wait.await {
            return ev.expect("the supervisor's exit channel is open");
        }
        assert!(std::time::Instant::now() < deadline, "{what}");
        let ticked = sup.on_tick();
        sup.survive(ticked).unwrap();
    }
}

/// A STOP while the journal takes no writes (a full disk) was not signalled until the disk
/// took writes again: a preemption's victim, or a cancelled job, ran on for as long as the
/// disk was full. Now a synced stop marker stands in for the journal: the signal goes out,
/// the end is told from memory, and an agent restarted before the journal recorded anything
/// reads the end as a stop, not as the job's own exit 0.
#[tokio::test]
async fn a_stop_the_journal_cannot_record_is_signalled_and_its_end_read_as_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let exit = crate::launch::exit_file(dir.path(), 1, 1, 0);
    // What a workload does with its stop signal: it saves (the test writes the file), exits 0.
    let workload = "trap 'exit 0' TERM; while :; do sleep 0.05; done";
    {
        let mut sup = supervisor_on(&disk, dir.path(), granted_lease(dir.path()));
        sup.on_directive(built_at(5, vec![run(1, workload)])).unwrap();
        disk.set_fault(Some(libc::ENOSPC));
        let mut stop = run(1, workload);
        stop.action = Action::Stop as i32;
        // The first journal write finds the disk full: nothing is signalled, and no marker
        // says otherwise (the replica's own exit would read as a stop).
        assert!(sup.on_directive(built_at(6, vec![stop.clone()])).is_err());
        assert!(!crate::launch::stop_marker(&exit).exists(), "a marker for a stop never signalled");
        assert!(sup.journal.failing().is_some());
        // Applied again (as every `REAPPLY_MS`): signalled on its synced marker.
        sup.on_directive(built_at(6, vec![stop])).unwrap();
        assert_eq!(sup.replicas[&key(1)].rec.phase, Phase::Stopping);
        let ev = exit_while_ticking(&mut sup, "the stop was not signalled while the journal failed").await;
        saved_checkpoint(dir.path(), 57);
        // Its record cannot be journaled either: the supervisor goes on (`survive`).
        let done = sup.on_exit(ev);
        sup.survive(done).unwrap();
        assert_eq!(sup.replicas[&key(1)].rec.outcome, Some(Outcome::Stopped { checkpointed: true }));
        let told: Vec<What> = sup.unjournaled.outbox(usize::MAX).into_iter().filter_map(|(_, o)| o.what).collect();
        assert!(
            told.iter().any(|w| matches!(w, What::Stopped(s) if s.job_id == 1 && s.checkpointed)),
            "its end is not told from memory: {told:?}"
        );
        // The power goes out before the journal takes writes again (the stop marker was
        // synced; the journal's unsynced writes go).
    }
    disk.set_fault(None);
    disk.power_loss(0);
    let sup = supervisor_on(&disk, dir.path(), granted_lease(dir.path()));
    assert_eq!(sup.replicas[&key(1)].rec.outcome, Some(Outcome::Stopped { checkpointed: true }));
    let told = pending(&sup);
    assert!(!told.iter().any(|w| matches!(w, What::Exited(_))), "told as its own exit: {told:?}");
    assert!(told.iter().any(|w| matches!(w, What::Stopped(s) if s.checkpointed)), "{told:?}");
}

/// The same for a replica no longer wanted (a cancelled job): killed while the journal takes
/// no writes, on its synced stop marker, where before it ran on until the disk recovered.
#[tokio::test]
async fn a_kill_the_journal_cannot_record_is_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let mut sup = supervisor_on(&disk, dir.path(), granted_lease(dir.path()));
    sup.on_directive(built_at(5, vec![run(1, "while :; do sleep 0.05; done")])).unwrap();
    disk.set_fault(Some(libc::ENOSPC));
    let first = sup.on_directive(built_at(6, vec![]));
    sup.survive(first).unwrap();
    sup.on_directive(built_at(6, vec![])).unwrap();
    assert_eq!(sup.replicas[&key(1)].rec.phase, Phase::Killing);
    let exit = crate::launch::exit_file(dir.path(), 1, 1, 0);
    assert!(crate::launch::stop_marker(&exit).exists(), "killed without its stop marker");
    // SIGTERM, then SIGKILL past the kill grace (500 ms here) from the tick.
    let ev = exit_while_ticking(&mut sup, "the kill was not signalled while the journal failed").await;
    let done = sup.on_exit(ev);
    sup.survive(done).unwrap();
    assert_eq!(sup.replicas[&key(1)].rec.outcome, Some(Outcome::Killed));
}

/// A replica stopped (SIGSTOP) while its journal says it runs: its agent went down while
/// suspending it, or after it told a suspension from memory that its failing journal could
/// not record. The restarted agent adopts it running and continues it; before, a RUN of it
/// (the leader resumed the job in place) sent nothing, and it stayed stopped for good.
#[tokio::test]
async fn a_replica_journaled_running_but_stopped_is_continued_by_a_restarted_agent() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let workload = format!("echo $$ > {}; while :; do sleep 0.05; done", pid_file.display());
    {
        let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
        sup.on_directive(built_at(5, vec![run(1, &workload)])).unwrap();
    }
    let pid = wait_for_pid(&pid_file);
    crate::signal::signal_process(pid, libc::SIGSTOP);
    wait_for_state(pid, |s| s == 'T', "stopped").await;
    let mut sup = supervisor(dir.path(), granted_lease(dir.path()));
    sup.on_directive(built_at(6, vec![run(1, &workload)])).unwrap();
    wait_for_state(pid, |s| s != 'T', "continued").await;
    crate::signal::signal_group(sup.replicas[&key(1)].rec.pid, libc::SIGKILL);
}

fn wait_for_pid(file: &std::path::Path) -> u32 {
    let text = wait_for_file(file);
    text.trim().parse().unwrap_or_else(|e| panic!("no pid in {}: {text:?} ({e})", file.display()))
}

async fn wait_for_state(pid: u32, wanted: impl Fn(char) -> bool, what: &str) {
    for _ in 0..100 {
        if crate::procfs::stat(pid).is_some_and(|(_, s)| wanted(s)) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("process {pid} not {what}: {:?}", crate::procfs::stat(pid));
}

/// A stop journaled before the agent went down, its signal never sent, and the journal full
/// when the agent comes back: the restarted agent sends the signal and keeps the record
/// `signalled` in memory (journaled once the journal takes writes). Before, the agent did
/// not start at all (`Supervisor::new` returned the journal's error).
#[tokio::test]
async fn an_agent_restarted_on_a_full_disk_signals_the_stop_it_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SimDisk::new();
    let (pid_file, termed) = (dir.path().join("pid"), dir.path().join("termed"));
    let workload = format!(
        "echo $$ > {}; trap 'echo term > {}; exit 0' TERM; while :; do sleep 0.05; done",
        pid_file.display(),
        termed.display()
    );
    {
        let mut sup = supervisor_on(&disk, dir.path(), granted_lease(dir.path()));
        sup.on_directive(built_at(5, vec![run(1, &workload)])).unwrap();
        wait_for_pid(&pid_file);
        // What a stop journals first; the agent goes down before it signals.
        let now = crate::reconcile::Clock { unix_ms: crate::checkpoint::now_unix_ms(), boot_ms: boot_ms() };
        let steps = crate::reconcile::stop_steps(&sup.replicas[&key(1)].rec, libc::SIGTERM, 2_000, false, 0, now);
        let Some(crate::reconcile::Step::Journal(intent)) = steps.first() else { panic!("{steps:?}") };
        sup.journal.put_replica(intent).unwrap();
    }
    disk.set_fault(Some(libc::ENOSPC));
    let sup = supervisor_on(&disk, dir.path(), granted_lease(dir.path()));
    wait_for_file(&termed);
    let stop = sup.replicas[&key(1)].rec.stop.expect("its stop");
    assert!(stop.signalled, "its record does not say the signal went out");
    assert!(sup.journal.failing().is_some());
}
