//! Unhealthy GPUs (decisions.md section 14) through `State::apply`: a marked GPU leaves the
//! capacity and takes no new work; the job on it stops as in mode checkpoint whatever its
//! mode and is requeued from its checkpoint (not a preemption) while the job on the node's
//! other GPUs keeps running; bad marks are refused naming the field; a passing health check
//! clears only what a check found; only operators mark by hand.

use baton_model::alloc::ReplicaAlloc;
use baton_model::fixture::gpu_job;
use baton_model::job::{PreemptionMode, StopWhy};
use baton_model::plan::{Decision, Plan};
use baton_model::rejection::Rejection;
use baton_model::{ApplyError, JobId, JobState, Name, Op, Outcome, State};

use crate::common;

use common::{apply, two_nodes_one_queue as cluster};

fn submit(s: &mut State, name: &str, gpus: u64, mode: PreemptionMode) -> JobId {
    let spec = baton_model::JobSpec { preemption_mode: mode, ..gpu_job(name, "q", gpus) };
    match apply(s, s.now_ms(), Op::Submit { spec, request_id: None }).unwrap() {
        Outcome::Submitted { job, .. } => job,
        other => panic!("{other:?}"),
    }
}

fn place(s: &mut State, job: JobId, node: &str, gpus: Vec<u32>) -> Vec<(u32, Rejection)> {
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit(node), gpus }];
    let attempt = s.job(job).unwrap().attempt + 1;
    let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt, replicas }] };
    match apply(s, s.now_ms(), Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => rejected,
        other => panic!("{other:?}"),
    }
}

fn mark(node: &str, gpu: u32, error: &str) -> Op {
    Op::SetGpuHealth { node: Name::lit(node), gpu, fault: Some(error.into()) }
}

fn report(node: &str, gpu: u32, fault: Option<&str>, by_check: bool) -> Op {
    Op::ReportGpu { node: Name::lit(node), gpu, fault: fault.map(String::from), by_check }
}

fn capacity_gpus(s: &State) -> u64 {
    baton_model::ledger::whole_gpus(s.ledger().pools[0].capacity[0])
}

#[test]
fn a_failed_gpu_stops_its_job_as_in_mode_checkpoint_and_leaves_the_jobs_on_other_gpus_running() {
    let mut s = cluster();
    // A suspend-mode job is still stopped (signal, grace, kill), not suspended.
    let hit = submit(&mut s, "hit", 4, PreemptionMode::Suspend);
    let spared = submit(&mut s, "spared", 4, PreemptionMode::Checkpoint);
    assert!(place(&mut s, hit, "n1", vec![0, 1, 2, 3]).is_empty());
    assert!(place(&mut s, spared, "n1", vec![4, 5, 6, 7]).is_empty());
    apply(&mut s, 1_000, report("n1", 2, Some("XID 79: fallen off the bus"), false)).unwrap();
    assert_eq!(capacity_gpus(&s), 15, "the GPU left the pool's capacity");
    let j = s.job(hit).unwrap();
    assert_eq!((j.state, j.stopping.map(|x| x.why)), (JobState::Preempting, Some(StopWhy::GpuFault)));
    assert!(j.reason.contains("GPU 2 of node n1 is unhealthy (XID 79"), "{}", j.reason);
    assert_eq!(s.job(spared).unwrap().state, JobState::Running, "the job on the other GPUs keeps running");
    apply(&mut s, 2_000, Op::JobStopped { job: hit, attempt: 1, checkpointed: true }).unwrap();
    let j = s.job(hit).unwrap();
    assert_eq!((j.state, j.has_checkpoint, j.preempted_by), (JobState::Pending, true, None), "requeued, no preemptor");
    assert!(j.reason.contains("waiting to be placed on healthy GPUs"), "{}", j.reason);
    assert!(!j.events.iter().any(|e| e.kind.type_name() == "Preempted"), "not counted as a preemption");
    // Nothing is placed on the failed GPU; the rest of the node takes work.
    assert!(matches!(place(&mut s, hit, "n1", vec![0, 1, 2, 3]).as_slice(), [(0, _)]));
    assert!(place(&mut s, hit, "n2", vec![0, 1, 2, 3]).is_empty());
    let late = submit(&mut s, "late", 3, PreemptionMode::Checkpoint);
    assert!(place(&mut s, late, "n1", vec![0, 1, 3]).is_empty());
}

#[test]
fn only_an_operator_or_a_check_that_found_it_clears_a_fault() {
    let mut s = cluster();
    apply(&mut s, 1_000, report("n1", 0, Some("uncorrectable ECC errors: 2"), false)).unwrap();
    apply(&mut s, 2_000, report("n1", 0, None, true)).unwrap();
    assert!(s.gpu_fault(&Name::lit("n1"), 0).is_some(), "a passing check does not clear an ECC error");
    apply(&mut s, 3_000, report("n1", 1, Some("health check: dcgmi diag failed"), true)).unwrap();
    assert_eq!(capacity_gpus(&s), 14);
    apply(&mut s, 4_000, report("n1", 1, None, true)).unwrap();
    assert!(s.gpu_fault(&Name::lit("n1"), 1).is_none(), "the check clears its own finding");
    apply(&mut s, 5_000, Op::SetGpuHealth { node: Name::lit("n1"), gpu: 0, fault: None }).unwrap();
    assert!(s.gpu_faults().is_empty());
    assert_eq!(capacity_gpus(&s), 16);
    // The same fault again changes nothing; a new error is recorded.
    apply(&mut s, 6_000, mark("n2", 7, "XID 48")).unwrap();
    let since = s.gpu_fault(&Name::lit("n2"), 7).unwrap().since_ms;
    apply(&mut s, 7_000, mark("n2", 7, "XID 48")).unwrap();
    assert_eq!(s.gpu_fault(&Name::lit("n2"), 7).unwrap().since_ms, since);
}

#[test]
fn bad_marks_are_refused_naming_the_field_and_change_nothing() {
    let mut s = cluster();
    for (op, field) in
        [(mark("n9", 0, "XID 79"), "node"), (mark("n1", 8, "XID 79"), "gpu"), (mark("n1", 0, "  "), "error")]
    {
        let e = apply(&mut s, 1_000, op.clone()).unwrap_err();
        assert!(matches!(&e, ApplyError::Invalid { field: f, .. } if f == field), "{op:?}: {e}");
    }
    let e = apply(&mut s, 1_000, report("n1", 64, Some("XID 79"), false)).unwrap_err();
    assert!(e.to_string().contains("8 GPUs, indices 0 to 7"), "{e}");
    assert!(s.gpu_faults().is_empty());
    assert_eq!(capacity_gpus(&s), 16);
}

#[test]
fn a_starving_jobs_reservation_on_a_failed_gpus_node_is_dropped() {
    let mut s = cluster();
    apply(&mut s, 0, Op::SetScheduler(baton_model::scheduler::SchedulerSettings { reserve_after_ms: Some(0) }))
        .unwrap();
    let busy = submit(&mut s, "busy", 2, PreemptionMode::Checkpoint);
    assert!(place(&mut s, busy, "n1", vec![0, 1]).is_empty());
    let big = submit(&mut s, "big", 8, PreemptionMode::Checkpoint);
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: (0..8).collect() }];
    let reserve = Decision::Reserve { job: big, pool: Name::lit("default"), replicas, waits_for: vec![busy] };
    let plan = Plan { based_on: s.applied(), decisions: vec![reserve] };
    match apply(&mut s, 0, Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => assert!(rejected.is_empty(), "{rejected:?}"),
        other => panic!("{other:?}"),
    }
    assert!(s.pool_reservation_of(big).is_some());
    apply(&mut s, 1_000, mark("n1", 5, "XID 79")).unwrap();
    assert!(s.pool_reservation_of(big).is_none(), "its node can no longer hold it whole");
    assert_eq!(s.job(busy).unwrap().state, JobState::Running, "busy is not on GPU 5");
}

/// Found by the scheduler's property test: the plan checker judged a GPU index against the
/// node's healthy count, so with GPU 0 unhealthy GPU 7 of an 8-GPU node was "wrong", and a
/// job that fit on the healthy ones was refused at every cycle.
#[test]
fn the_healthy_gpus_above_an_unhealthy_one_take_work() {
    let mut s = cluster();
    apply(&mut s, 1_000, mark("n1", 0, "XID 79")).unwrap();
    let seven = submit(&mut s, "seven", 7, PreemptionMode::Checkpoint);
    assert_eq!(place(&mut s, seven, "n1", (1..8).collect()), vec![]);
    let one = submit(&mut s, "one", 1, PreemptionMode::Checkpoint);
    let refused = place(&mut s, one, "n1", vec![0]);
    assert!(matches!(refused.as_slice(), [(0, Rejection::NoLongerFits { .. })]), "{refused:?}");
}
