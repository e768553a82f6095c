//! Shared GPUs (decisions.md section 11) through `State::apply`: a request of a fraction is
//! checked at submit, naming the field; the plan checker never lets the fractions on one GPU
//! add up to more than one, nor gives a GPU that holds a fraction whole; quota counts the
//! fraction exactly.

use baton_model::alloc::ReplicaAlloc;
use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::job::JobId;
use baton_model::name::Name;
use baton_model::plan::{Decision, Plan};
use baton_model::rejection::Rejection;
use baton_model::resources::Resources;
use baton_model::{ApplyError, Op, Outcome, State};

use crate::common;

use common::apply;

/// `n1` with 2 GPUs; queue `q` guaranteed both.
fn cluster() -> State {
    let mut s = State::default();
    apply(&mut s, 0, Op::RegisterNodes(vec![gpu_node("n1", 2)])).unwrap();
    apply(&mut s, 0, Op::PutQueue(gpu_queue("q", 2))).unwrap();
    s
}

fn fraction(milli: u64) -> Resources {
    let mut r = Resources::new();
    r.set_gpus_milli(milli);
    r
}

fn submit(s: &mut State, name: &str, resources: Resources) -> Result<JobId, ApplyError> {
    let mut spec = gpu_job(name, "q", 0);
    spec.tasks[0].resources = resources;
    match apply(s, 0, Op::Submit { spec, request_id: None })? {
        Outcome::Submitted { job, .. } => Ok(job),
        other => panic!("{other:?}"),
    }
}

fn place(s: &mut State, job: JobId, gpus: Vec<u32>) -> Vec<(u32, Rejection)> {
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus }];
    let attempt = s.job(job).unwrap().attempt + 1;
    let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt, replicas }] };
    match apply(s, s.now_ms(), Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => rejected,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bad_fraction_is_refused_at_submit_naming_the_field() {
    let mut s = cluster();
    let mut whole_and_part = fraction(500);
    whole_and_part.set("gpu", 1);
    let err = submit(&mut s, "j", whole_and_part).unwrap_err();
    assert_eq!(
        err,
        ApplyError::invalid("tasks[0].resources.gpu", "a replica asks whole GPUs or a fraction of one, never both")
    );
    let mut sliced = fraction(500);
    sliced.set("mig-1g.10gb", 1);
    let err = submit(&mut s, "j", sliced).unwrap_err();
    assert!(err.to_string().contains("tasks[0].resources.gpu") && err.to_string().contains("MIG slices"), "{err}");
    let err = submit(&mut s, "j", Resources::of(&[("gpu.milli", 1500)])).unwrap_err();
    assert!(err.to_string().contains("less than 1"), "{err}");
    assert!(s.jobs().is_empty(), "nothing was kept of the refused requests");
    assert!(submit(&mut s, "j", fraction(500)).is_ok());
}

#[test]
fn fractions_on_one_gpu_never_add_up_to_more_than_one() {
    let mut s = cluster();
    let a = submit(&mut s, "a", fraction(600)).unwrap();
    let b = submit(&mut s, "b", fraction(500)).unwrap();
    let c = submit(&mut s, "c", fraction(400)).unwrap();
    let whole = submit(&mut s, "whole", Resources::of(&[("gpu", 1)])).unwrap();
    assert_eq!(place(&mut s, a, vec![0]), []);
    let refused = place(&mut s, b, vec![0]);
    assert!(matches!(refused.as_slice(), [(_, Rejection::NoLongerFits { .. })]), "0.6 + 0.5 on GPU 0: {refused:?}");
    assert_eq!(place(&mut s, c, vec![0]), [], "0.6 + 0.4 fills GPU 0 exactly");
    let refused = place(&mut s, whole, vec![0]);
    assert!(matches!(refused.as_slice(), [(_, Rejection::NoLongerFits { .. })]), "GPU 0 is shared: {refused:?}");
    assert_eq!(place(&mut s, whole, vec![1]), []);
    // Quota counts the fractions exactly: 0.6 + 0.4 + 1.
    let l = s.ledger();
    let q = l.queue("q").unwrap();
    assert_eq!(l.kinds.resources(&l.queues[q].usage[0]), Resources::of(&[("gpu", 2)]));
    assert_eq!(s.job(a).unwrap().gpus_milli(), 600);
}

#[test]
fn a_fraction_names_one_gpu_and_a_gpu_the_node_has() {
    let mut s = cluster();
    let a = submit(&mut s, "a", fraction(500)).unwrap();
    let refused = place(&mut s, a, vec![0, 1]);
    assert!(matches!(refused.as_slice(), [(_, Rejection::WrongGpus { .. })]), "{refused:?}");
    let refused = place(&mut s, a, vec![2]);
    assert!(matches!(refused.as_slice(), [(_, Rejection::WrongGpus { .. })]), "{refused:?}");
    assert_eq!(place(&mut s, a, vec![1]), []);
}
