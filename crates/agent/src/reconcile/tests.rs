use std::collections::BTreeSet;

use baton_proto::v1::{Action, Assignment, Directive};
use proptest::prelude::*;

use super::*;
use crate::fence::{Fence, Refused};
use crate::journal::{Outcome, Phase, ReplicaKey, ReplicaRecord};
use crate::suspensions::Answer;

fn key(job_id: u64, attempt: u32) -> ReplicaKey {
    ReplicaKey { job_id, attempt, rank: 0 }
}

fn assign(job_id: u64, attempt: u32, action: Action, gpus: &[u32]) -> Assignment {
    Assignment {
        job_id,
        job: format!("job-{job_id}"),
        attempt,
        action: action as i32,
        gpus: gpus.to_vec(),
        grace_ms: 1_000,
        ..Default::default()
    }
}

fn directive(term: u64, assignments: Vec<Assignment>) -> Directive {
    Directive { term, leader_id: 1, assignments, heartbeat_timeout_ms: 5_000, lease_ms: 2_000, state_index: 0 }
}

fn known(phase: Phase, outcome: Option<Outcome>, gpus: &[u32]) -> Known {
    Known { phase, outcome, gpus: gpus.to_vec(), gpu_milli: 0 }
}

/// Term 1 led by leader 1, already remembered: a directive of that leader changes no fence.
fn inputs(replicas: Vec<(ReplicaKey, Known)>) -> Inputs {
    Inputs {
        fence: Fence { term: 1, leader_id: Some(1) },
        replicas: replicas.into_iter().collect(),
        ..Default::default()
    }
}

fn acts(d: &Directive, i: &Inputs) -> Vec<Act> {
    plan(d, i).expect("accepted").acts
}

#[test]
fn directives_of_deposed_or_other_leaders_are_refused_whole() {
    let i = Inputs { fence: Fence { term: 5, leader_id: Some(1) }, ..Default::default() };
    let run = vec![assign(1, 1, Action::Run, &[0])];
    assert_eq!(plan(&directive(4, run.clone()), &i), Err(Refused::LowerTerm { term: 4, seen: 5 }.into()));
    let earlier = Directive { leader_id: 0, ..directive(5, run.clone()) };
    assert_eq!(plan(&earlier, &i), Err(Refused::EarlierLeader { term: 5, leader_id: 0, seen: 1 }.into()));
    let later = plan(&Directive { leader_id: 2, ..directive(5, run.clone()) }, &i).unwrap();
    assert_eq!(later.remember, Some(Fence { term: 5, leader_id: Some(2) }), "a later leader of the term is journaled");
    let p = plan(&directive(6, run), &i).unwrap();
    assert_eq!(p.remember, Some(Fence { term: 6, leader_id: Some(1) }), "a new term is journaled first");
    assert_eq!(p.acts, vec![Act::Start(key(1, 1))]);
    let same = plan(&directive(5, vec![]), &i).unwrap();
    assert_eq!(same.remember, None, "nothing new to journal");
}

/// A RUN before any lease was granted starts nothing, and resumes nothing.
#[test]
fn nothing_starts_or_resumes_before_a_lease_is_granted() {
    let suspended = vec![(key(2, 1), known(Phase::Suspended, None, &[1]))];
    let mut ins = inputs(suspended);
    ins.lease_never_granted = true;
    let d = directive(1, vec![assign(1, 1, Action::Run, &[0]), assign(2, 1, Action::Run, &[1])]);
    let got = plan(&d, &ins).unwrap();
    assert_eq!(
        got.acts,
        vec![
            Act::Ignore { key: key(1, 1), why: Ignored::NoLease },
            Act::Ignore { key: key(2, 1), why: Ignored::NoLease }
        ]
    );
}

#[test]
fn too_many_assignments_are_refused() {
    let many = (0..=MAX_ASSIGNMENTS_PER_DIRECTIVE as u64).map(|j| assign(j + 1, 1, Action::Run, &[])).collect();
    let got = plan(&directive(1, many), &inputs(vec![]));
    assert_eq!(got, Err(DirectiveRefused::TooManyAssignments { count: MAX_ASSIGNMENTS_PER_DIRECTIVE + 1 }));
}

/// (replicas tracked, lease expired, assignments) and the acts expected, in order.
type Case = (Vec<(ReplicaKey, Known)>, bool, Vec<Assignment>, Vec<Act>);

#[test]
fn table() {
    use Action::{Run, Stop, Suspend};
    let running = |gpus: &[u32]| known(Phase::Running, None, gpus);
    let rank1 = ReplicaKey { rank: 1, ..key(1, 1) };
    let cases: Vec<Case> = vec![
        // A new RUN on free GPUs starts.
        (vec![], false, vec![assign(1, 1, Run, &[0, 1])], vec![Act::Start(key(1, 1))]),
        // Running already: nothing.
        (vec![(key(1, 1), running(&[0]))], false, vec![assign(1, 1, Run, &[0])], vec![]),
        // Not wanted any more: killed first, then the rest.
        (
            vec![(key(1, 1), running(&[0]))],
            false,
            vec![assign(2, 1, Run, &[1])],
            vec![Act::Kill(key(1, 1)), Act::Start(key(2, 1))],
        ),
        // A finished replica not wanted any more is left alone.
        (vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Exited { code: 0 }), &[0]))], false, vec![], vec![]),
        // Its GPU is held by a replica still stopping: it waits (no act).
        (
            vec![(key(1, 1), known(Phase::Stopping, None, &[0]))],
            false,
            vec![assign(1, 1, Stop, &[0]), assign(2, 1, Run, &[0])],
            vec![],
        ),
        // Suspended and RUN again: resumed; not while the lease has run out.
        (
            vec![(key(1, 1), known(Phase::Suspended, None, &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::Resume(key(1, 1))],
        ),
        (
            vec![(key(1, 1), known(Phase::Suspended, None, &[0]))],
            true,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::Ignore { key: key(1, 1), why: Ignored::LeaseExpired }],
        ),
        (vec![], true, vec![assign(1, 1, Run, &[0])], vec![Act::Ignore { key: key(1, 1), why: Ignored::LeaseExpired }]),
        // A RUN of a replica being stopped does not restart it.
        (
            vec![(key(1, 1), known(Phase::Killing, None, &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::Ignore { key: key(1, 1), why: Ignored::BeingStopped }],
        ),
        // STOP, by what the replica is.
        (vec![], false, vec![assign(1, 1, Stop, &[0])], vec![Act::StopNeverRan(key(1, 1))]),
        (vec![(key(1, 1), running(&[0]))], false, vec![assign(1, 1, Stop, &[0])], vec![Act::Stop(key(1, 1))]),
        (
            vec![(key(1, 1), known(Phase::Killing, None, &[0]))],
            false,
            vec![assign(1, 1, Stop, &[0])],
            vec![Act::Stop(key(1, 1))],
        ),
        (vec![(key(1, 1), known(Phase::Stopping, None, &[0]))], false, vec![assign(1, 1, Stop, &[0])], vec![]),
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Stopped { checkpointed: true }), &[0]))],
            false,
            vec![assign(1, 1, Stop, &[0])],
            vec![Act::ReportStopped { key: key(1, 1), checkpointed: true }],
        ),
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Killed), &[0]))],
            false,
            vec![assign(1, 1, Stop, &[0])],
            vec![Act::KilledCountsAsStopped(key(1, 1))],
        ),
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Exited { code: 3 }), &[0]))],
            false,
            vec![assign(1, 1, Stop, &[0])],
            vec![],
        ),
        // A RUN of a replica that ended here (killed as no longer wanted by a directive from
        // a stale state, then RUN again once the leader caught up; a chaos run with leader
        // kills found it, chaos/README.md, "Found so far"): the leader is told it ended, not
        // left to hold the job Running.
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Killed), &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::ReportKilledHere { key: key(1, 1), checkpointed: false }],
        ),
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Stopped { checkpointed: true }), &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::ReportKilledHere { key: key(1, 1), checkpointed: true }],
        ),
        (
            vec![(key(1, 1), known(Phase::Finished, None, &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::ReportKilledHere { key: key(1, 1), checkpointed: false }],
        ),
        // Its own exit that ends the job is said again; rank 1's exit 0 is done by design.
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Exited { code: 3 }), &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::ReportExited { key: key(1, 1), code: 3 }],
        ),
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Exited { code: 0 }), &[0]))],
            false,
            vec![assign(1, 1, Run, &[0])],
            vec![Act::ReportExited { key: key(1, 1), code: 0 }],
        ),
        (
            vec![(rank1, known(Phase::Finished, Some(Outcome::Exited { code: 0 }), &[0]))],
            false,
            vec![Assignment { rank: 1, ..assign(1, 1, Run, &[0]) }],
            vec![Act::Ignore { key: rank1, why: Ignored::FinishedHere }],
        ),
        // A stop is carried out also after the lease ran out.
        (vec![(key(1, 1), running(&[0]))], true, vec![assign(1, 1, Stop, &[0])], vec![Act::Stop(key(1, 1))]),
        // SUSPEND.
        (vec![], false, vec![assign(1, 1, Suspend, &[0])], vec![Act::SuspendNeverRan(key(1, 1))]),
        (vec![(key(1, 1), running(&[0]))], false, vec![assign(1, 1, Suspend, &[0])], vec![Act::Suspend(key(1, 1))]),
        (vec![(key(1, 1), known(Phase::Suspended, None, &[0]))], false, vec![assign(1, 1, Suspend, &[0])], vec![]),
        // A suspension the leader still awaits, of a replica held suspended here: a resume
        // in place between two suspensions may have been missed, so it is said again
        // (`a_suspend_the_leader_awaits_is_answered_again_only_if_it_is_a_new_suspension`),
        // also after the lease ran out.
        (
            vec![(key(1, 1), known(Phase::Suspended, None, &[0]))],
            true,
            vec![Assignment { awaiting_suspended: true, ..assign(1, 1, Suspend, &[0]) }],
            vec![Act::ReportSuspended(key(1, 1))],
        ),
        // Being stopped, it is not suspended: its stop ends in its own report.
        (
            vec![(key(1, 1), known(Phase::Stopping, None, &[0]))],
            false,
            vec![Assignment { awaiting_suspended: true, ..assign(1, 1, Suspend, &[0]) }],
            vec![],
        ),
        // A SUSPEND of a replica that already ended here (its lease stop, say, whose report
        // the leader missed) is answered with its end, as killed here, not as suspended: the
        // leader holds the job Preempting until it hears (a chaos partitions run found it
        // waiting until the node was lost; chaos/README.md, "Found so far"), and would hold
        // it Suspended with no process if told it was stopped in place.
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Stopped { checkpointed: true }), &[0]))],
            false,
            vec![assign(1, 1, Suspend, &[0])],
            vec![Act::ReportKilledHere { key: key(1, 1), checkpointed: true }],
        ),
        (
            vec![(key(1, 1), known(Phase::Finished, Some(Outcome::Killed), &[0]))],
            true,
            vec![assign(1, 1, Suspend, &[0])],
            vec![Act::ReportKilledHere { key: key(1, 1), checkpointed: false }],
        ),
        // An unknown action.
        (
            vec![],
            false,
            vec![Assignment { action: 99, ..assign(1, 1, Run, &[0]) }],
            vec![Act::Ignore { key: key(1, 1), why: Ignored::UnknownAction(99) }],
        ),
    ];
    for (replicas, lease_expired, assignments, want) in cases {
        let i = Inputs { lease_expired, ..inputs(replicas.clone()) };
        let d = directive(1, assignments.clone());
        assert_eq!(acts(&d, &i), want, "replicas {replicas:?}, lease expired {lease_expired}, {assignments:?}");
    }
}

/// Found by a chaos run with leader kills (chaos/README.md, "Found so far"): a SUSPEND the
/// leader awaits of a replica held suspended here is a new suspension only if the directive
/// was built once the earlier report was recorded. One built before, or while that report
/// is on its way, is answered by it: a repeat would come later, and could count as whatever
/// stop of the job is in progress then.
#[test]
fn a_suspend_the_leader_awaits_is_answered_again_only_if_it_is_a_new_suspension() {
    let held = vec![(key(1, 1), known(Phase::Suspended, None, &[0]))];
    let awaited = vec![Assignment { awaiting_suspended: true, ..assign(1, 1, Action::Suspend, &[0]) }];
    let at = |state_index: u64, answer: Option<Answer>| {
        let mut i = inputs(held.clone());
        i.suspensions.extend(answer.map(|a| (key(1, 1), a)));
        acts(&Directive { state_index, ..directive(1, awaited.clone()) }, &i)
    };
    let again = vec![Act::ReportSuspended(key(1, 1))];
    assert_eq!(at(5, None), again, "not reported since this agent started");
    assert_eq!(at(5, Some(Answer::InFlight)), vec![], "its report is on its way");
    let recorded = Some(Answer::Recorded { state_index: 10 });
    assert_eq!(at(9, recorded), vec![], "built before the report was recorded");
    assert_eq!(at(10, recorded), again, "built from a state that had recorded it, and still awaiting");
    assert_eq!(at(12, recorded), again);
    let not_awaited = Directive { state_index: 12, ..directive(1, vec![assign(1, 1, Action::Suspend, &[0])]) };
    assert_eq!(acts(&not_awaited, &inputs(held.clone())), vec![], "recorded: nothing to say");
}

#[test]
fn older_attempts_and_pruned_finished_ones_are_not_started_and_a_pruned_ones_end_is_reported() {
    let mut i = inputs(vec![]);
    i.max_attempts.insert(1, 3);
    i.pruned.insert(key(2, 1));
    let d = directive(
        1,
        vec![assign(1, 2, Action::Run, &[0]), assign(2, 1, Action::Run, &[1]), assign(1, 3, Action::Run, &[2])],
    );
    let p = plan(&d, &i).unwrap();
    assert_eq!(
        p.acts,
        vec![
            Act::Ignore { key: key(1, 2), why: Ignored::OlderAttempt { newest: 3 } },
            Act::Start(key(1, 3)),
            // It finished here and its record is gone: a RUN of it is answered with its end.
            Act::ReportKilledHere { key: key(2, 1), checkpointed: false },
        ]
    );
    assert!(!p.wanted.contains(&key(1, 2)), "an older attempt is not wanted (a running one is killed)");
}

/// Section 11: replicas sharing one GPU by fractions start side by side while their shares
/// add up to at most the GPU; one whose share does not fit, or a whole-GPU one, waits.
#[test]
fn fractions_of_one_gpu_start_together_while_they_fit() {
    let share = |job_id, gpu_milli| Assignment { gpu_milli, ..assign(job_id, 1, Action::Run, &[2]) };
    let running = (key(9, 1), Known { gpu_milli: 250, ..known(Phase::Running, None, &[2]) });
    let d = directive(9, vec![share(9, 250), share(1, 500), share(2, 250), share(3, 250), share(4, 0)]);
    let p = plan(&d, &inputs(vec![running.clone()])).unwrap();
    assert_eq!(p.acts.iter().filter(|a| matches!(a, Act::Start(_))).count(), 2, "{:?}", p.acts);
    assert!(p.acts.contains(&Act::Start(key(1, 1))) && p.acts.contains(&Act::Start(key(2, 1))), "{:?}", p.acts);
    assert_eq!(p.deferred, BTreeSet::from([key(3, 1), key(4, 1)]), "0.25 over the whole, and a whole GPU");
    // A replica holding the GPU whole keeps every fraction off it.
    let whole = (key(9, 1), known(Phase::Stopping, None, &[2]));
    let p = plan(&directive(9, vec![share(1, 250)]), &inputs(vec![whole])).unwrap();
    assert_eq!(p.deferred, BTreeSet::from([key(1, 1)]));
}

/// Chaos seed 22502: a CPU job's attempt 2 started beside its attempt 1, which a node's thaw
/// had run again, and started from zero 150 ms before attempt 1 saved its checkpoint as it
/// stopped. A newer attempt now waits for an older one of its job still here, GPUs or none.
#[test]
fn a_newer_attempt_waits_for_an_older_attempt_of_its_job_still_here() {
    let older = (key(1, 1), known(Phase::Running, None, &[]));
    let p = plan(&directive(1, vec![assign(1, 2, Action::Run, &[])]), &inputs(vec![older.clone()])).unwrap();
    assert_eq!(p.acts, vec![Act::Kill(key(1, 1))]);
    assert_eq!(p.deferred, BTreeSet::from([key(1, 2)]));
    // Another job's replica, on no GPU it wants, keeps nothing back.
    let other = (key(9, 1), known(Phase::Running, None, &[]));
    let d = directive(1, vec![assign(9, 1, Action::Run, &[]), assign(1, 2, Action::Run, &[])]);
    let p = plan(&d, &inputs(vec![other])).unwrap();
    assert_eq!(p.acts, vec![Act::Start(key(1, 2))]);
    assert!(p.deferred.is_empty(), "{:?}", p.deferred);
}

#[test]
fn the_newest_directive_decides_what_waits() {
    let stopping = (key(9, 1), known(Phase::Stopping, None, &[0, 1]));
    // Two replicas share GPU 2 with nothing running: the first starts, the second waits for it.
    let mut i = inputs(vec![stopping.clone()]);
    let d = directive(
        1,
        vec![assign(1, 1, Action::Run, &[0]), assign(2, 1, Action::Run, &[2]), assign(3, 1, Action::Run, &[2])],
    );
    let p = plan(&d, &i).unwrap();
    assert_eq!(p.acts, vec![Act::Kill(key(9, 1)), Act::Start(key(2, 1))]);
    assert_eq!(p.deferred, BTreeSet::from([key(1, 1), key(3, 1)]));
    // The next directive no longer wants job 3 and stops job 1: nothing waits any more.
    i.deferred = p.deferred;
    let d = directive(1, vec![assign(1, 1, Action::Stop, &[0])]);
    let p = plan(&d, &i).unwrap();
    assert!(p.deferred.is_empty(), "{:?}", p.deferred);
    assert_eq!(p.acts, vec![Act::Kill(key(9, 1)), Act::StopNeverRan(key(1, 1))]);
}

fn record(phase: Phase) -> ReplicaRecord {
    ReplicaRecord {
        key: key(1, 1),
        job: "job-1".into(),
        task: 0,
        replica: 0,
        pid: 42,
        start_time: 7,
        phase,
        stop: None,
        kill_deadline_unix_ms: 0,
        kill_deadline_boot_ms: 0,
        outcome: None,
        exit_file: "exit".into(),
        gpus: vec![0],
        gpu_milli: 0,
        slices: Vec::new(),
        started_unix_ms: 1,
        newest_checkpoint_at_start_unix_ms: None,
    }
}

const NOW: Clock = Clock { unix_ms: 1_000_000, boot_ms: 5_000 };

/// Issue 9, hole 5b: a crash between the signal and the journal write left a replica that
/// was told to stop journaled as running, so its exit was reported as the job's own. The
/// stop is journaled first, then signalled, then marked signalled.
#[test]
fn a_stop_is_journaled_before_its_signal() {
    let steps = stop_steps(&record(Phase::Running), libc::SIGUSR1, 3_000, false, 77, NOW);
    let Step::Journal(intent) = &steps[0] else { panic!("the journal first: {steps:?}") };
    assert_eq!(intent.phase, Phase::Stopping);
    let stop = intent.stop.expect("the stop");
    assert!(!stop.signalled);
    assert_eq!((stop.signal, stop.newest_before_unix_ms, stop.lease_expired), (libc::SIGUSR1, 77, false));
    assert_eq!((stop.deadline_unix_ms, stop.deadline_boot_ms), (NOW.unix_ms + 3_000, NOW.boot_ms + 3_000));
    assert_eq!(steps[1], Step::Signal { pid: 42, signal: libc::SIGUSR1 });
    // Continued also when journaled running: an agent that died while suspending it may
    // have stopped it and journaled nothing (`tests/suite/lease.rs`,
    // `the_watchdog_stops_a_suspended_replica_whose_agent_is_gone`).
    assert_eq!(steps[2], Step::Signal { pid: 42, signal: libc::SIGCONT });
    let Step::Journal(done) = &steps[3] else { panic!("marked signalled last: {steps:?}") };
    assert!(done.stop.unwrap().signalled);
    assert_eq!(steps.len(), 4);
}

#[test]
fn a_suspended_replica_is_continued_after_its_signal_and_grace_is_bounded() {
    let steps = stop_steps(&record(Phase::Suspended), libc::SIGTERM, u64::MAX, true, 0, NOW);
    assert_eq!(
        steps[1..3],
        [Step::Signal { pid: 42, signal: libc::SIGTERM }, Step::Signal { pid: 42, signal: libc::SIGCONT }]
    );
    let Step::Journal(rec) = &steps[0] else { panic!() };
    assert_eq!(rec.stop.unwrap().deadline_boot_ms, NOW.boot_ms + MAX_GRACE_MS);
    assert!(rec.stop.unwrap().lease_expired);
}

#[test]
fn a_restarted_agent_signals_a_stop_that_may_not_have_gone_out() {
    let steps = stop_steps(&record(Phase::Running), libc::SIGUSR1, 3_000, false, 0, NOW);
    let (Step::Journal(intent), Step::Journal(done)) = (&steps[0], &steps[3]) else { panic!() };
    let again = adopt_steps(intent);
    assert_eq!(
        again,
        vec![
            Step::Signal { pid: 42, signal: libc::SIGUSR1 },
            Step::Signal { pid: 42, signal: libc::SIGCONT },
            Step::Journal(done.clone()),
        ]
    );
    assert!(adopt_steps(done).is_empty(), "signalled already: not again");
    assert!(adopt_steps(&record(Phase::Running)).is_empty());
}

fn arb_phase() -> impl Strategy<Value = Phase> {
    prop_oneof![
        Just(Phase::Running),
        Just(Phase::Stopping),
        Just(Phase::Suspended),
        Just(Phase::Killing),
        Just(Phase::Finished)
    ]
}

fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![Just(Action::Run), Just(Action::Stop), Just(Action::Suspend)]
}

fn arb_gpus() -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(0u32..6, 0..3)
}

prop_compose! {
    fn arb_case()(
        replicas in proptest::collection::btree_map((1u64..6, 1u32..4), (arb_phase(), arb_gpus()), 0..6),
        assignments in proptest::collection::vec((1u64..6, 1u32..4, arb_action(), arb_gpus(), any::<bool>()), 0..8),
        max_attempts in proptest::collection::btree_map(1u64..6, 1u32..4, 0..4),
        lease_expired in any::<bool>(),
    ) -> (Inputs, Directive) {
        let mut i = inputs(vec![]);
        i.lease_expired = lease_expired;
        i.max_attempts = max_attempts;
        for ((job, attempt), (phase, gpus)) in replicas {
            i.replicas.insert(key(job, attempt), known(phase, None, &gpus));
        }
        let assignments = assignments
            .into_iter()
            .map(|(j, a, act, g, awaiting_suspended)| Assignment { awaiting_suspended, ..assign(j, a, act, &g) });
        let d = directive(1, assignments.collect());
        (i, d)
    }
}

proptest! {
    /// Whatever runs and whatever is asked: nothing starts or resumes once the lease has
    /// run out; a started replica never shares a GPU with one that has not ended nor with
    /// another started one; nothing older than the newest attempt starts; a replica already
    /// tracked is never started again; each replica gets at most one act besides the
    /// refusal of an older attempt.
    #[test]
    fn plans_keep_the_protocol_rules((i, d) in arb_case()) {
        let p = plan(&d, &i).unwrap();
        let mut taken: Vec<u32> = i.replicas.values().filter(|k| k.phase != Phase::Finished).flat_map(|k| k.gpus.clone()).collect();
        let mut seen = BTreeSet::new();
        for act in &p.acts {
            let key = match act {
                Act::Kill(k) | Act::Start(k) | Act::Resume(k) | Act::Stop(k) | Act::StopNeverRan(k)
                | Act::KilledCountsAsStopped(k) | Act::Suspend(k) | Act::SuspendNeverRan(k)
                | Act::ReportSuspended(k) => *k,
                Act::ReportStopped { key, .. }
                | Act::ReportKilledHere { key, .. }
                | Act::ReportExited { key, .. }
                | Act::Unrecorded { key, .. }
                | Act::Ignore { key, .. } => *key,
            };
            // An older attempt is refused, and killed if it runs here: two acts, one key.
            if matches!(act, Act::Ignore { why: Ignored::OlderAttempt { .. }, .. }) {
                continue;
            }
            prop_assert!(seen.insert(key), "two acts for {:?}: {:?}", key, p.acts);
            match act {
                Act::Start(k) => {
                    prop_assert!(!i.lease_expired);
                    prop_assert!(!i.replicas.contains_key(k));
                    prop_assert!(i.max_attempts.get(&k.job_id).is_none_or(|m| k.attempt >= *m));
                    let a = d.assignments.iter().rev().find(|a| key_of(a) == *k).unwrap();
                    prop_assert!(a.gpus.iter().all(|g| !taken.contains(g)), "GPU {:?} taken: {:?}", a.gpus, taken);
                    taken.extend(&a.gpus);
                }
                Act::Resume(_) => prop_assert!(!i.lease_expired),
                // Said only of a replica held suspended, and only while the leader awaits it.
                Act::ReportSuspended(k) => {
                    prop_assert_eq!(i.replicas[k].phase, Phase::Suspended);
                    let a = d.assignments.iter().rev().find(|a| key_of(a) == *k).unwrap();
                    prop_assert!(a.awaiting_suspended && a.action == Action::Suspend as i32);
                }
                Act::Kill(k) => prop_assert!(!p.wanted.contains(k)),
                _ => {}
            }
        }
        // What waits is wanted and not started.
        for k in &p.deferred {
            prop_assert!(p.wanted.contains(k) && !seen.contains(k), "{:?} waits: {:?}", k, p.acts);
        }
    }

    /// Crashing after any step of a stop and restarting leaves the replica signalled at
    /// least once and journaled as signalled: no stop is lost, whatever step the crash hits.
    #[test]
    fn a_stop_survives_a_crash_after_any_step(crash_after in 0usize..4, suspended in any::<bool>()) {
        let phase = if suspended { Phase::Suspended } else { Phase::Running };
        let steps = stop_steps(&record(phase), libc::SIGUSR1, 3_000, false, 0, NOW);
        let crash_after = crash_after.min(steps.len());
        let mut journal = record(phase);
        let mut signalled = false;
        let mut run = |steps: &[Step], journal: &mut ReplicaRecord| {
            for s in steps {
                match s {
                    Step::Journal(rec) => *journal = rec.clone(),
                    Step::Signal { signal, .. } => signalled |= *signal == libc::SIGUSR1,
                }
            }
        };
        run(&steps[..crash_after], &mut journal);
        if journal.phase == Phase::Stopping {
            let again = adopt_steps(&journal);
            run(&again, &mut journal);
            prop_assert!(signalled, "crash after {} steps: never signalled", crash_after);
            prop_assert!(journal.stop.unwrap().signalled);
        } else {
            // Nothing journaled yet: the replica was not signalled either.
            prop_assert!(!signalled);
        }
    }
}

#[test]
fn how_an_ended_replica_is_recorded() {
    let stopping = |lease_expired| {
        let steps = stop_steps(&record(Phase::Running), libc::SIGTERM, 3_000, lease_expired, 500_000, NOW);
        let Step::Journal(rec) = steps.last().unwrap().clone() else { panic!() };
        rec
    };
    let seen = |code, watchdog_stopped, newest| Ended {
        code,
        watchdog_stopped,
        stop_sent: false,
        newest_checkpoint_unix_ms: newest,
        now_unix_ms: NOW.unix_ms + 1_000,
    };
    let started_at = |ms| ReplicaRecord { started_unix_ms: ms, ..record(Phase::Running) };
    let cases: Vec<(ReplicaRecord, Ended, Option<Ending>)> = vec![
        // Its own exit.
        (record(Phase::Running), seen(3, false, 0), Some(Ending::Exited { code: 3 })),
        (record(Phase::Suspended), seen(0, false, 9), Some(Ending::Exited { code: 0 })),
        // Its watchdog stopped it: a lease stop, checkpointed if this attempt wrote one.
        (started_at(10_000), seen(0, true, 20_000), Some(Ending::Stopped { checkpointed: true, lease_expired: true })),
        (started_at(10_000), seen(0, true, 5_000), Some(Ending::Stopped { checkpointed: false, lease_expired: true })),
        (started_at(10_000), seen(0, true, 0), Some(Ending::Stopped { checkpointed: false, lease_expired: true })),
        // A stop: checkpointed if this attempt wrote a file (a record without the newest at
        // its start, as these: since the signal).
        (
            stopping(false),
            seen(0, false, NOW.unix_ms + 10),
            Some(Ending::Stopped { checkpointed: true, lease_expired: false }),
        ),
        (stopping(false), seen(0, false, 500_000), Some(Ending::Stopped { checkpointed: false, lease_expired: false })),
        (
            stopping(true),
            seen(0, false, NOW.unix_ms + 10),
            Some(Ending::Stopped { checkpointed: true, lease_expired: true }),
        ),
        // The exit code of a stopped replica says nothing: a stop is never an exit.
        (stopping(false), seen(0, true, 0), Some(Ending::Stopped { checkpointed: false, lease_expired: false })),
        (record(Phase::Killing), seen(0, false, NOW.unix_ms), Some(Ending::Killed)),
        (record(Phase::Finished), seen(0, false, 0), None),
        // Journaled running, its stop marker there: signalled to stop while its journal
        // took no writes (or the agent went down before it journaled the stop), so its
        // exit 0 after a checkpoint is no success.
        (
            started_at(10_000),
            Ended { stop_sent: true, ..seen(0, false, 20_000) },
            Some(Ending::Stopped { checkpointed: true, lease_expired: false }),
        ),
        (
            started_at(10_000),
            Ended { stop_sent: true, ..seen(0, false, 0) },
            Some(Ending::Stopped { checkpointed: false, lease_expired: false }),
        ),
        (
            started_at(10_000),
            Ended { stop_sent: true, ..seen(0, true, 20_000) },
            Some(Ending::Stopped { checkpointed: true, lease_expired: true }),
        ),
    ];
    for (rec, e, want) in cases {
        assert_eq!(ending(&rec, e), want, "{:?} {:?}", rec.phase, e);
    }
}

/// File times are on the file system's clock, the stop's signal time on the agent's wall
/// clock. An agent 5 s ahead (the e2e partitions run with the agents' clocks offset:
/// "started from zero although every rank wrote a checkpoint") reported a stop whose
/// checkpoint was written right after the signal as a stop without one; one 5 s behind must
/// not count a file that was there before the signal either.
#[test]
fn a_stops_checkpoint_is_judged_on_file_times_alone() {
    let before_ms = NOW.unix_ms - 60_000;
    let stopping = stop_steps(&record(Phase::Running), libc::SIGTERM, 3_000, false, before_ms, NOW);
    let Step::Journal(rec) = stopping.last().unwrap().clone() else { panic!() };
    let ended = |newest_ms| Ended {
        code: 0,
        watchdog_stopped: false,
        stop_sent: false,
        newest_checkpoint_unix_ms: newest_ms,
        now_unix_ms: NOW.unix_ms + 1_000,
    };
    let saved = Some(Ending::Stopped { checkpointed: true, lease_expired: false });
    let unsaved = Some(Ending::Stopped { checkpointed: false, lease_expired: false });
    // Written 0.1 s after the signal, by a file system clock 5 s behind the agent's.
    assert_eq!(ending(&rec, ended(NOW.unix_ms - 5_000 + 100)), saved);
    // By one 5 s ahead.
    assert_eq!(ending(&rec, ended(NOW.unix_ms + 5_000 + 100)), saved);
    // Nothing newer than what was there when the signal went out.
    assert_eq!(ending(&rec, ended(before_ms)), unsaved);
}

/// A replica its watchdog stopped (the agent was gone for a whole lease) counts as
/// checkpointed when a file of its rank's is newer than the newest one when it started:
/// file times against file times. Its start time is on the agent's wall clock, which may be
/// off from the file system's (a shared file system's server, an NTP step); with the agent
/// 5 s ahead, a save 1 s after the start looked older than the start, and with it 5 s
/// behind, an earlier attempt's file looked newer.
#[test]
fn a_watchdog_stops_checkpoint_is_judged_on_file_times_alone() {
    let started = |newest_at_start| ReplicaRecord {
        started_unix_ms: NOW.unix_ms,
        newest_checkpoint_at_start_unix_ms: Some(newest_at_start),
        ..record(Phase::Running)
    };
    let watchdog_stopped = |newest_ms| Ended {
        code: 143,
        watchdog_stopped: true,
        stop_sent: false,
        newest_checkpoint_unix_ms: newest_ms,
        now_unix_ms: NOW.unix_ms + 2_000,
    };
    let saved = Some(Ending::Stopped { checkpointed: true, lease_expired: true });
    let unsaved = Some(Ending::Stopped { checkpointed: false, lease_expired: true });
    // The file system's clock 5 s behind the agent's: saved 1 s after the start, an earlier
    // attempt's file 10 s before it.
    let behind = NOW.unix_ms - 5_000;
    assert_eq!(ending(&started(behind - 10_000), watchdog_stopped(behind + 1_000)), saved);
    assert_eq!(ending(&started(0), watchdog_stopped(behind + 1_000)), saved, "the rank's first file");
    // 5 s ahead: nothing written since the start, the earlier attempt's file 1 s before it.
    let ahead = NOW.unix_ms + 5_000;
    assert_eq!(ending(&started(ahead - 1_000), watchdog_stopped(ahead - 1_000)), unsaved);
    assert_eq!(ending(&started(0), watchdog_stopped(0)), unsaved, "no file at all");
    // A record journaled before the newest file at the start was: the start time, as then.
    let old = ReplicaRecord { started_unix_ms: NOW.unix_ms, ..record(Phase::Running) };
    assert_eq!(ending(&old, watchdog_stopped(NOW.unix_ms + 100)), saved);
    assert_eq!(ending(&old, watchdog_stopped(NOW.unix_ms - 1_000)), unsaved);
}

/// Issue 10: an agent whose journal cannot be written starts and resumes nothing (it could
/// not record the start first), and still stops, suspends and kills what runs. A start it
/// refuses is told to the leader (`Unrecorded`); a resume is not (the replica is there,
/// suspended, and resumes once the journal takes writes).
#[test]
fn nothing_starts_or_resumes_while_the_journal_fails() {
    let failing = Some("cannot write the agent journal at j: No space left on device (os error 28)".to_string());
    let failing_why = failing.clone().unwrap();
    let why = Ignored::JournalFailing(failing_why.clone());
    let i = Inputs {
        journal_failing: failing,
        ..inputs(vec![
            (key(1, 1), known(Phase::Suspended, None, &[0])),
            (key(2, 1), known(Phase::Running, None, &[1])),
            (key(3, 1), known(Phase::Running, None, &[2])),
            (key(4, 1), known(Phase::Running, None, &[3])),
        ])
    };
    let d = directive(
        1,
        vec![
            assign(1, 1, Action::Run, &[0]),
            assign(2, 1, Action::Run, &[1]),
            assign(3, 1, Action::Stop, &[2]),
            assign(5, 1, Action::Run, &[4]),
        ],
    );
    assert_eq!(
        acts(&d, &i),
        vec![
            Act::Kill(key(4, 1)),
            Act::Ignore { key: key(1, 1), why: why.clone() },
            Act::Stop(key(3, 1)),
            Act::Unrecorded { key: key(5, 1), why: failing_why },
        ]
    );
}

/// Issue 10: a record without a pid and no trace of its wrapper means "never started" only
/// if the machine has not restarted since: a power cut loses the unsynced start marker.
#[test]
fn no_trace_after_a_reboot_is_no_proof_that_a_replica_never_started() {
    use crate::launch::Unjournaled::{Ended, NeverStarted, Running};
    let running = Running { pid: 7, start_time: 9 };
    for (traces, same_boot, want) in [
        (NeverStarted, true, NeverStarted),
        (NeverStarted, false, Ended),
        (Ended, true, Ended),
        (Ended, false, Ended),
        (running, true, running),
    ] {
        assert_eq!(super::without_pid(traces, same_boot), want, "{traces:?}, same boot {same_boot}");
    }
}

/// Found by a chaos run with leader kills (chaos/README.md, "Found so far"): rank 0 of a
/// gang saved its last checkpoint and exited 0, and a preemption's stop reached its agent
/// 4 ms later. The stop counted only files newer than the newest when its signal went out, so
/// the rank was reported stopped without a checkpoint, and the model started the whole gang
/// again from zero although every rank had saved in that attempt. What the model needs to
/// know is whether this attempt left a checkpoint to resume from: a file newer than the
/// newest at its start.
#[test]
fn a_stop_counts_every_checkpoint_this_attempt_wrote() {
    let at_start_ms = NOW.unix_ms - 120_000;
    let saved_before_signal_ms = NOW.unix_ms - 4;
    let running = ReplicaRecord { newest_checkpoint_at_start_unix_ms: Some(at_start_ms), ..record(Phase::Running) };
    let steps = stop_steps(&running, libc::SIGTERM, 3_000, false, saved_before_signal_ms, NOW);
    let Step::Journal(stopping) = steps.last().unwrap().clone() else { panic!() };
    let ended = |newest_ms| Ended {
        code: 0,
        watchdog_stopped: false,
        stop_sent: false,
        newest_checkpoint_unix_ms: newest_ms,
        now_unix_ms: NOW.unix_ms + 10,
    };
    let saved = Some(Ending::Stopped { checkpointed: true, lease_expired: false });
    let unsaved = Some(Ending::Stopped { checkpointed: false, lease_expired: false });
    assert_eq!(ending(&stopping, ended(saved_before_signal_ms)), saved, "saved 4 ms before the signal");
    assert_eq!(ending(&stopping, ended(NOW.unix_ms + 5)), saved, "saved after the signal");
    // Only what an earlier attempt left: nothing to resume this attempt's work from.
    assert_eq!(ending(&stopping, ended(at_start_ms)), unsaved);
    assert_eq!(ending(&stopping, ended(0)), unsaved);
    // A record journaled before the newest file at the start was: files since the signal.
    let old = ReplicaRecord { newest_checkpoint_at_start_unix_ms: None, ..stopping };
    assert_eq!(ending(&old, ended(saved_before_signal_ms)), unsaved);
    assert_eq!(ending(&old, ended(NOW.unix_ms + 5)), saved);
}

/// A replica that ended while its agent was down and whose journal was then lost: its end
/// is told whatever its rank (a rank 1 that exited 0 was ignored, and the leader held its
/// GPUs for ever), and a watchdog's lease stop is a stop, not the exit 0 the workload gives
/// after the checkpoint its stop asked for (a job counted Succeeded at step 81 of 133).
#[test]
fn an_unrecorded_end_is_told_whatever_its_rank_and_a_lease_stop_is_no_exit() {
    let rank1 = ReplicaKey { job_id: 9, attempt: 2, rank: 1 };
    assert_eq!(end_of_unrecorded(rank1, Outcome::Exited { code: 0 }), Act::ReportExited { key: rank1, code: 0 });
    assert_eq!(
        run_of_finished(rank1, Some(Outcome::Exited { code: 0 })),
        Some(Act::Ignore { key: rank1, why: Ignored::FinishedHere }),
        "a recorded rank's exit 0 was told when it ended"
    );
    let traces = |code, watchdog_stopped, newest_checkpoint_unix_ms| Traces {
        code,
        watchdog_stopped,
        stop_sent: false,
        started_unix_ms: 50_000,
        newest_checkpoint_unix_ms,
    };
    let agent_stopped = Traces { stop_sent: true, ..traces(Some(0), false, 60_000) };
    assert_eq!(unrecorded_ending(agent_stopped), Outcome::Stopped { checkpointed: true }, "the agent's stop");
    assert_eq!(unrecorded_ending(traces(Some(0), false, 0)), Outcome::Exited { code: 0 });
    assert_eq!(unrecorded_ending(traces(None, false, 0)), Outcome::Killed);
    assert_eq!(unrecorded_ending(traces(Some(0), true, 60_000)), Outcome::Stopped { checkpointed: true });
    assert_eq!(unrecorded_ending(traces(Some(0), true, 0)), Outcome::Stopped { checkpointed: false });
    assert_eq!(
        unrecorded_ending(traces(None, true, 1_000)),
        Outcome::Stopped { checkpointed: false },
        "a checkpoint from before it started is an earlier attempt's"
    );
    assert_eq!(
        end_of_unrecorded(rank1, Outcome::Stopped { checkpointed: true }),
        Act::ReportKilledHere { key: rank1, checkpointed: true }
    );
}

/// A stop for the lease ends by the lease's end plus the slack and the grace: a late look
/// has what is left of the grace, none past that moment, and the whole grace when the end
/// is unknown.
#[test]
fn a_stop_for_the_lease_has_what_is_left_of_its_grace() {
    let end = 10_000;
    let deadline = end + WATCHDOG_SLACK_MS + LEASE_STOP_GRACE_MS;
    assert_eq!(lease_stop_grace_ms(Some(end), end), LEASE_STOP_GRACE_MS);
    assert_eq!(lease_stop_grace_ms(Some(end), deadline - 400), 400);
    assert_eq!(lease_stop_grace_ms(Some(end), deadline), 0);
    assert_eq!(lease_stop_grace_ms(Some(end), deadline + 60_000), 0);
    assert_eq!(lease_stop_grace_ms(None, 5), LEASE_STOP_GRACE_MS);
}
