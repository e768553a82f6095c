//! A job's GPUs stay held until its processes are gone (a completing state, as Slurm's CG):
//! whatever ends a job in the model (a cancel, a rank's failure, rank 0's exit, a time limit,
//! a requeue), the ranks whose agents have not reported them gone keep their GPUs, and
//! another job is not placed on them, until each is reported gone (stopped, exited, or its
//! node declared lost, or unkillable: then the node is taken out of scheduling).

use baton_model::alloc::ReplicaAlloc;
use baton_model::command::{Command, Observed, Op, Outcome};
use baton_model::fixture;
use baton_model::job::{JobId, JobSpec, JobState, PreemptionMode, TaskSpec};
use baton_model::node::NodeStatus;
use baton_model::plan::{Decision, Plan};
use baton_model::{Name, State};

fn apply(s: &mut State, op: Op) -> Outcome {
    let now_ms = s.now_ms() + 1_000;
    s.apply(Command { now_ms, op }).unwrap_or_else(|e| panic!("refused: {e}")).outcome
}

fn decide(s: &mut State, d: Decision) -> Result<(), String> {
    let based_on = s.applied();
    match apply(s, Op::ApplyPlan(Plan { based_on, decisions: vec![d] })) {
        Outcome::PlanApplied { accepted: 1, .. } => Ok(()),
        Outcome::PlanApplied { rejected, .. } => Err(rejected.into_iter().map(|(_, why)| why.to_string()).collect()),
        other => panic!("a plan gave {other:?}"),
    }
}

fn submit(s: &mut State, spec: JobSpec) -> JobId {
    match apply(s, Op::Submit { spec, request_id: None }) {
        Outcome::Submitted { job, .. } => job,
        other => panic!("{other:?}"),
    }
}

/// Nodes n1 and n2 of 4 GPUs each, queue `q`, and a two-rank gang `g` running with rank 0 on
/// all of n1 and rank 1 on all of n2.
fn gang(mode: PreemptionMode, time_limit_ms: Option<u64>) -> (State, JobId) {
    let mut s = State::new();
    apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 4), fixture::gpu_node("n2", 4)]));
    apply(&mut s, Op::PutQueue(fixture::gpu_queue("q", 16)));
    let mut spec = JobSpec { preemption_mode: mode, time_limit_ms, ..fixture::gpu_job("g", "q", 4) };
    spec.tasks = vec![TaskSpec { replicas: 2, ..spec.tasks[0].clone() }];
    let job = submit(&mut s, spec);
    let replicas = (0..2).map(|i| on(i, &format!("n{}", i + 1))).collect();
    decide(&mut s, Decision::Place { job, attempt: 1, replicas }).expect("the gang starts");
    (s, job)
}

fn on(index: u32, node: &str) -> ReplicaAlloc {
    ReplicaAlloc { task: 0, index, node: Name::lit(node), gpus: vec![0, 1, 2, 3] }
}

/// Whether `node`'s GPUs are all free in the ledger (what the scheduler plans with).
fn free(s: &State, node: &str) -> bool {
    let n = s.ledger().node(node).expect("a node");
    s.ledger().nodes[n].free_gpus == 0b1111
}

/// Tries to place a new one-replica 4-GPU job on all of `node`.
fn place_other(s: &mut State, name: &str, node: &str) -> Result<(), String> {
    let job = submit(s, fixture::gpu_job(name, "q", 4));
    decide(s, Decision::Place { job, attempt: 1, replicas: vec![on(0, node)] })
}

fn report(s: &mut State, node: &str, o: Observed) -> Vec<(u32, String)> {
    match apply(s, Op::Report { node: Name::lit(node), observations: vec![o] }) {
        Outcome::Reported { ignored } => ignored,
        other => panic!("{other:?}"),
    }
}

fn stopped(job: JobId, rank: u32) -> Observed {
    Observed::Stopped { job, attempt: 1, rank, checkpointed: false }
}

#[test]
fn a_cancelled_jobs_gpus_stay_held_until_each_rank_is_reported_stopped() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::Cancel { job: g });
    assert_eq!(s.job(g).unwrap().state, JobState::Cancelled);
    assert!(!free(&s, "n1") && !free(&s, "n2"), "its processes still run: the GPUs are not free");
    let why = place_other(&mut s, "next", "n1").expect_err("n1's GPUs are still held");
    assert!(why.contains("no longer fits on node n1"), "{why}");
    assert_eq!(s.completing_ranks(g), 2);

    assert!(report(&mut s, "n1", stopped(g, 0)).is_empty());
    assert!(free(&s, "n1") && !free(&s, "n2"));
    place_other(&mut s, "next2", "n1").expect("rank 0 is gone: n1 is free");
    assert!(report(&mut s, "n2", stopped(g, 1)).is_empty());
    assert!(free(&s, "n2"));
    assert_eq!(s.completing_ranks(g), 0);
    assert_eq!(s.job(g).unwrap().state, JobState::Cancelled, "the job's end does not change");
}

#[test]
fn a_rank_failing_leaves_the_others_completing_and_their_exit_changes_nothing() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    report(&mut s, "n2", Observed::Exited { job: g, attempt: 1, rank: 1, exit_code: 3 });
    assert_eq!(s.job(g).unwrap().state, JobState::Failed);
    assert!(free(&s, "n2"), "rank 1 exited: its GPUs are free");
    assert!(!free(&s, "n1"), "rank 0 still runs until its agent stops it");
    assert!(report(&mut s, "n1", Observed::Exited { job: g, attempt: 1, rank: 0, exit_code: 0 }).is_empty());
    assert!(free(&s, "n1"));
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.exit_code), (JobState::Failed, Some(3)), "rank 0's later exit 0 does not end it again");
}

#[test]
fn rank_0s_exit_leaves_the_other_ranks_completing() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    report(&mut s, "n1", Observed::Exited { job: g, attempt: 1, rank: 0, exit_code: 0 });
    assert_eq!(s.job(g).unwrap().state, JobState::Succeeded);
    assert!(free(&s, "n1") && !free(&s, "n2"));
    // A report from the wrong node, or of another attempt, changes nothing.
    let wrong = report(&mut s, "n1", stopped(g, 1));
    assert_eq!(wrong.len(), 1, "rank 1 runs on n2");
    let stale = report(&mut s, "n2", Observed::Stopped { job: g, attempt: 7, rank: 1, checkpointed: false });
    assert_eq!(stale.len(), 1);
    assert!(!free(&s, "n2"));
    assert!(report(&mut s, "n2", stopped(g, 1)).is_empty());
    assert!(free(&s, "n2"));
}

#[test]
fn a_requeued_job_is_placed_again_only_once_its_old_ranks_are_gone() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    report(&mut s, "n1", Observed::Vanished { job: g, attempt: 1, rank: 0, missing_ms: 9_000 });
    assert_eq!(s.job(g).unwrap().state, JobState::Pending);
    assert!(free(&s, "n1") && !free(&s, "n2"));
    let replicas = vec![on(0, "n1"), on(1, "n2")];
    let why = decide(&mut s, Decision::Place { job: g, attempt: 2, replicas: replicas.clone() })
        .expect_err("attempt 1's rank 1 still runs: attempt 2 must not start");
    assert!(why.contains("completing"), "{why}");
    assert!(report(&mut s, "n2", stopped(g, 1)).is_empty());
    decide(&mut s, Decision::Place { job: g, attempt: 2, replicas }).expect("both ranks are gone");
    assert_eq!(s.job(g).unwrap().state, JobState::Running);
}

#[test]
fn a_lost_node_releases_its_ranks_at_once_and_the_others_complete() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    assert_eq!(s.job(g).unwrap().state, JobState::Pending);
    assert_eq!(s.completing_ranks(g), 1, "rank 0's node is lost: nothing of it runs (the lease argument)");
    assert!(!free(&s, "n2"));
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n2"), status: NodeStatus::Lost });
    assert_eq!(s.completing_ranks(g), 0);
}

#[test]
fn a_time_limit_stop_cut_short_by_a_lost_node_keeps_the_other_rank_completing() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, Some(1_000));
    decide(&mut s, Decision::TimeLimit { job: g, attempt: 1 }).expect("past its limit");
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    assert_eq!(s.job(g).unwrap().state, JobState::Failed);
    assert!(!free(&s, "n2"), "rank 1 is still stopping");
    assert!(report(&mut s, "n2", stopped(g, 1)).is_empty());
    assert!(free(&s, "n2"));
}

#[test]
fn an_unkillable_completing_rank_takes_its_node_out_and_lets_the_job_go() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::Cancel { job: g });
    let stuck = Observed::Unkillable { job: g, attempt: 1, rank: 1, reason: "stuck in D state".into() };
    assert!(report(&mut s, "n2", stuck).is_empty());
    let n2 = &s.nodes()[&Name::lit("n2")];
    assert!(n2.unhealthy.as_deref().is_some_and(|w| w.contains("stuck in D state")), "{:?}", n2.unhealthy);
    assert_eq!(s.completing_ranks(g), 1, "only rank 0 is left to stop");
    let why = place_other(&mut s, "next", "n2").expect_err("an unhealthy node takes no new work");
    assert!(why.contains("not schedulable"), "{why}");
}

#[test]
fn a_stop_that_completes_leaves_nothing_completing() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::Pause { job: g });
    report(&mut s, "n1", stopped(g, 0));
    report(&mut s, "n2", stopped(g, 1));
    assert_eq!(s.job(g).unwrap().state, JobState::Paused);
    assert_eq!(s.completing_ranks(g), 0);
    assert!(free(&s, "n1") && free(&s, "n2"));
}

#[test]
fn a_requeued_job_cancelled_while_completing_keeps_its_old_ranks_held() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    assert_eq!(s.job(g).unwrap().state, JobState::Pending);
    apply(&mut s, Op::Cancel { job: g });
    assert_eq!(s.job(g).unwrap().state, JobState::Cancelled);
    assert_eq!(s.completing_ranks(g), 1);
    assert!(!free(&s, "n2"), "rank 1 still runs on n2");
    assert!(report(&mut s, "n2", stopped(g, 1)).is_empty());
    assert!(free(&s, "n2"));
}

fn lease_stop(job: JobId, rank: u32) -> Observed {
    Observed::LeaseExpired { job, attempt: 1, rank, checkpointed: true }
}

/// An agent cut off for longer than the heartbeat timeout stops its rank with a checkpoint
/// (its lease ran out) and reports it once it is back, after its node was declared lost and
/// the job requeued: the checkpoint counts for the next attempt once every rank of the
/// attempt has saved its work (issue 9).
#[test]
fn a_lease_stop_reported_after_its_node_was_lost_gives_the_next_attempt_its_checkpoint() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    assert!(!s.job(g).unwrap().has_checkpoint);
    // n2's agent stops rank 1 (it is completing) and its checkpoint signal saved its work.
    let saved = Observed::Stopped { job: g, attempt: 1, rank: 1, checkpointed: true };
    assert!(report(&mut s, "n2", saved).is_empty());
    assert!(!s.job(g).unwrap().has_checkpoint, "rank 0's work is not known to be saved yet");
    // n1's agent comes back and reports its lease stop: a rank on the wrong node is ignored.
    assert_eq!(report(&mut s, "n2", lease_stop(g, 0)).len(), 1, "rank 0 ran on n1");
    assert!(report(&mut s, "n1", lease_stop(g, 0)).is_empty());
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true));
    let e = j.events.back().unwrap();
    assert!(e.message.contains("reported late") && e.message.contains("n1"), "{}", e.message);
}

/// The gang's attempt 1 lost rank 0 with n1 (its save not reported yet) while rank 1's stop
/// on n2 saved; n1 is back and attempt 2 runs on both, from zero.
fn attempt_2_after_n1_was_lost() -> (State, JobId) {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    report(&mut s, "n2", Observed::Stopped { job: g, attempt: 1, rank: 1, checkpointed: true });
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Ready });
    decide(&mut s, Decision::Place { job: g, attempt: 2, replicas: vec![on(0, "n1"), on(1, "n2")] })
        .expect("attempt 2 starts");
    (s, g)
}

/// A late report of an older attempt's save, while a newer attempt runs from zero: the
/// running attempt is not changed (it was started as it was), but the files of the older
/// attempt's stop are on every rank's disk, at least as new as any the job had, so the
/// attempts after it resume (the model's rule for a gang: every rank holds a checkpoint of
/// that attempt or a later one). Not in mode requeue, which starts over.
#[test]
fn a_late_checkpoint_counts_for_the_attempts_after_a_newer_one_started_but_not_in_mode_requeue() {
    let (mut s, g) = attempt_2_after_n1_was_lost();
    assert!(report(&mut s, "n2", lease_stop(g, 0)).len() == 1, "rank 0 ran on n1");
    assert!(report(&mut s, "n1", lease_stop(g, 0)).is_empty());
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.attempt, j.has_checkpoint), (JobState::Running, 2, true));

    let (mut s, g) = gang(PreemptionMode::Requeue, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    report(&mut s, "n2", Observed::Stopped { job: g, attempt: 1, rank: 1, checkpointed: true });
    report(&mut s, "n1", lease_stop(g, 0));
    assert!(!s.job(g).unwrap().has_checkpoint, "mode requeue starts over");
}

/// Found by chaos partitions runs (chaos/README.md, "Found so far"): attempt 1 stopped with
/// its work saved while its agent was cut off; the node was declared lost and attempt 2
/// started from zero (the leader knew of no checkpoint: work done again, a known limit);
/// attempt 2 was preempted at once and stopped without a checkpoint of its own; the cut-off
/// agent's report of attempt 1's save came only then, and was ignored as stale, so attempt
/// 3 also started from zero although every rank's checkpoint (attempt 1's) was on disk.
#[test]
fn an_older_attempts_save_reported_after_a_newer_attempt_stopped_gives_the_next_its_checkpoint() {
    let (mut s, g) = attempt_2_after_n1_was_lost();
    assert!(!s.job(g).unwrap().has_checkpoint, "attempt 2 starts from zero");
    apply(&mut s, Op::Pause { job: g });
    let stop = |rank| Observed::Stopped { job: g, attempt: 2, rank, checkpointed: false };
    assert!(report(&mut s, "n1", stop(0)).is_empty());
    assert!(report(&mut s, "n2", stop(1)).is_empty());
    assert_eq!(s.job(g).unwrap().state, JobState::Paused);

    assert!(report(&mut s, "n1", lease_stop(g, 0)).is_empty(), "attempt 1's save, reported late");
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.has_checkpoint), (JobState::Paused, true));
    let e = j.events.back().unwrap();
    assert!(e.message.contains("attempt 1") && e.message.contains("reported late"), "{}", e.message);
}

/// Found by a chaos run of the full fault mix (chaos/README.md, "Found so far"): attempt
/// 1's rank 0 ran to its end and exited 0 while its agent was stopped; its node was
/// declared lost and the job requeued; the agent, back, reported the exit just after
/// attempt 2 was placed, and the model ignored it as stale: the job ran again from zero,
/// twice, although its work was done. A late exit 0 of rank 0 of the attempt remembered,
/// from the node it ran on, ends the job Succeeded, as rank 0's exit ends a job; the newer
/// attempt's ranks are told to stop and hold their GPUs until reported gone, as for a
/// cancel. A late failure changes nothing: the job is being retried.
#[test]
fn a_late_exit_0_of_rank_0_of_the_remembered_attempt_ends_the_job_succeeded() {
    let (mut s, g) = attempt_2_after_n1_was_lost();
    let exit = |rank, exit_code| Observed::Exited { job: g, attempt: 1, rank, exit_code };
    assert_eq!(report(&mut s, "n2", exit(0, 0)).len(), 1, "rank 0 ran on n1");
    assert_eq!(report(&mut s, "n2", exit(1, 0)).len(), 1, "rank 1's exit is not the job's");
    assert_eq!(report(&mut s, "n1", exit(0, 3)).len(), 1, "a late failure is not the job's end");
    assert_eq!(s.job(g).unwrap().state, JobState::Running);
    assert!(report(&mut s, "n1", exit(0, 0)).is_empty());
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.exit_code), (JobState::Succeeded, Some(0)));
    let e = j.events.back().unwrap();
    assert!(e.message.contains("attempt 1") && e.message.contains("reported late"), "{}", e.message);
    assert_eq!(s.completing_ranks(g), 2, "attempt 2's ranks are stopped, their GPUs held until gone");
    assert!(!report(&mut s, "n1", exit(0, 0)).is_empty(), "once finished, nothing more");

    // Reported while the job waits in the queue: it is done, and never placed again.
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    assert_eq!(s.job(g).unwrap().state, JobState::Pending);
    assert!(report(&mut s, "n1", Observed::Exited { job: g, attempt: 1, rank: 0, exit_code: 0 }).is_empty());
    assert_eq!(s.job(g).unwrap().state, JobState::Succeeded);
    assert_eq!(s.completing_ranks(g), 1, "rank 1 on n2 is still told to stop");
}

/// A newer attempt cut short by a lost node is the one whose late saves count from then on
/// (its files are the newer); an older attempt's late report changes nothing.
#[test]
fn a_newer_attempt_lost_with_its_node_replaces_the_older_one_late_reports_count_for() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Ready });
    report(&mut s, "n2", Observed::Stopped { job: g, attempt: 1, rank: 1, checkpointed: true });
    decide(&mut s, Decision::Place { job: g, attempt: 2, replicas: vec![on(0, "n1"), on(1, "n2")] }).unwrap();
    apply(&mut s, Op::SetNodeStatus { node: Name::lit("n1"), status: NodeStatus::Lost });
    assert_eq!(s.job(g).unwrap().state, JobState::Pending);
    assert!(!report(&mut s, "n1", lease_stop(g, 0)).is_empty(), "attempt 1 is no longer the one remembered");
    assert!(!s.job(g).unwrap().has_checkpoint);
    let saved = |rank| Observed::LeaseExpired { job: g, attempt: 2, rank, checkpointed: true };
    report(&mut s, "n2", Observed::Stopped { job: g, attempt: 2, rank: 1, checkpointed: true });
    assert!(report(&mut s, "n1", saved(0)).is_empty());
    assert!(s.job(g).unwrap().has_checkpoint, "every rank of attempt 2 saved its work");
}

/// Both nodes of a running gang lost their leases and each lease stop saved its rank's
/// work; the first report came before the leader knew of the other rank's save, so it says
/// the job as a whole is not checkpointed. The rank's own save is remembered, and the other
/// rank's stop, reported once the job is back in the queue, completes the checkpoint (issue
/// 9, a start from zero under load although every rank wrote a checkpoint).
#[test]
fn a_gangs_lease_stops_reported_one_by_one_give_the_next_attempt_its_checkpoint() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    let first = Observed::LeaseStopped { job: g, attempt: 1, rank: 0, checkpointed: false, rank_saved: true };
    assert!(report(&mut s, "n1", first).is_empty());
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, false), "rank 1's save is not known yet");
    let second = Observed::LeaseStopped { job: g, attempt: 1, rank: 1, checkpointed: true, rank_saved: true };
    assert!(report(&mut s, "n2", second).is_empty());
    assert!(s.job(g).unwrap().has_checkpoint, "every rank saved its work");

    // A rank whose lease stop saved nothing leaves the gang without a checkpoint.
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    let lost = Observed::LeaseStopped { job: g, attempt: 1, rank: 0, checkpointed: false, rank_saved: false };
    report(&mut s, "n1", lost);
    let saved = Observed::LeaseStopped { job: g, attempt: 1, rank: 1, checkpointed: true, rank_saved: true };
    report(&mut s, "n2", saved);
    assert!(!s.job(g).unwrap().has_checkpoint, "rank 0 saved nothing");
}

/// Whether the next attempt of a gang is told to resume (`has_checkpoint`, sent as the
/// assignments' `resume`) after the ranks' stops: only once every rank has a checkpoint of
/// the same or a later attempt than the one the job would resume from. A chaos run with
/// leader kills told a rank to resume although it had saved nothing, because another rank
/// had (chaos/README.md, "Found so far").
#[test]
fn a_gang_is_told_to_resume_only_when_every_rank_saved_its_work() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    let stop = |rank, attempt, checkpointed| Observed::Stopped { job: g, attempt, rank, checkpointed };
    apply(&mut s, Op::Pause { job: g });
    assert!(report(&mut s, "n1", stop(0, 1, false)).is_empty());
    assert!(report(&mut s, "n2", stop(1, 1, true)).is_empty());
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.has_checkpoint), (JobState::Paused, false), "rank 0 saved nothing");

    // Attempt 2: both ranks save; the next attempt resumes.
    apply(&mut s, Op::Resume { job: g });
    decide(&mut s, Decision::Place { job: g, attempt: 2, replicas: vec![on(0, "n1"), on(1, "n2")] }).unwrap();
    apply(&mut s, Op::Pause { job: g });
    report(&mut s, "n1", stop(0, 2, true));
    assert!(!s.job(g).unwrap().has_checkpoint, "rank 1 has not stopped yet");
    report(&mut s, "n2", stop(1, 2, true));
    assert!(s.job(g).unwrap().has_checkpoint, "every rank saved attempt 2");

    // Attempt 3: rank 1 saves nothing new. Each rank still has attempt 2's checkpoint (rank 0
    // a later one), so the gang still resumes, from what each rank has.
    apply(&mut s, Op::Resume { job: g });
    decide(&mut s, Decision::Place { job: g, attempt: 3, replicas: vec![on(0, "n1"), on(1, "n2")] }).unwrap();
    apply(&mut s, Op::Pause { job: g });
    report(&mut s, "n1", stop(0, 3, true));
    report(&mut s, "n2", stop(1, 3, false));
    let j = s.job(g).unwrap();
    assert_eq!((j.state, j.has_checkpoint), (JobState::Paused, true));
}

/// An agent can say anything of its own node, but not of jobs that never ran there: a stuck
/// process of a job not placed on the node still takes the node out (the agent knows its
/// processes), but the node's public event does not name that job (issue 39: an `Unkillable`
/// for any job id put the job's name in a node event every user sees).
#[test]
fn an_unkillable_report_names_only_a_job_placed_on_its_node() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n3", 4)]));
    let stuck = Observed::Unkillable { job: g, attempt: 1, rank: 0, reason: "stuck in D state".into() };
    let applied = s
        .apply(Command {
            now_ms: s.now_ms() + 1_000,
            op: Op::Report { node: Name::lit("n3"), observations: vec![stuck] },
        })
        .expect("a report of the node's own processes");
    let n3 = &s.nodes()[&Name::lit("n3")];
    let why = n3.unhealthy.as_deref().expect("a process that survived SIGKILL takes its node out");
    assert!(!why.contains(" g ") && why.contains("not placed here"), "{why}");
    assert!(applied.events.iter().all(|e| !e.message.contains("job g")), "{:?}", applied.events);
    assert_eq!(s.job(g).unwrap().state, JobState::Running, "the job placed elsewhere is untouched");
}

/// A report may name thousands of processes: once the node is out, more stuck processes
/// neither rebuild the ledger nor add events (issue 39: each distinct job rebuilt it).
#[test]
fn a_node_already_unhealthy_keeps_its_first_reason_and_adds_no_event() {
    let (mut s, g) = gang(PreemptionMode::Checkpoint, None);
    apply(&mut s, Op::Cancel { job: g });
    let first = Observed::Unkillable { job: g, attempt: 1, rank: 1, reason: "stuck in D state".into() };
    let many: Vec<Observed> = std::iter::once(first)
        .chain((0..1_000).map(|i| Observed::Unkillable {
            job: 10_000 + i,
            attempt: 1,
            rank: 0,
            reason: format!("r{i}"),
        }))
        .collect();
    let applied = s
        .apply(Command { now_ms: s.now_ms() + 1_000, op: Op::Report { node: Name::lit("n2"), observations: many } })
        .expect("a report");
    let unhealthy = applied.events.iter().filter(|e| e.message.contains("is unhealthy")).count();
    assert_eq!(unhealthy, 1, "{:?}", applied.events.iter().map(|e| &e.message).collect::<Vec<_>>());
    let n2 = &s.nodes()[&Name::lit("n2")];
    assert!(n2.unhealthy.as_deref().is_some_and(|w| w.contains("stuck in D state")), "{:?}", n2.unhealthy);
}
