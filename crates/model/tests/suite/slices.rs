//! MIG slices (decisions.md section 11) through `State::apply`: a profile is a resource of
//! its own, counted as `gpu` is, and a request naming a profile no node offers is refused at
//! submit, naming the field and the profiles there are.

use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
use baton_model::resources::Resources;
use baton_model::{ApplyError, Op, Outcome, State};

use crate::common;

use common::apply;

/// `n1` with 2 whole GPUs, `m1` with 7 slices of `mig-1g.10gb` (its GPU is in MIG mode);
/// queue `q` guaranteed both.
fn cluster() -> State {
    let mut s = State::default();
    let mut m1 = gpu_node("m1", 0);
    m1.resources = Resources::of(&[("mig-1g.10gb", 7)]);
    apply(&mut s, 0, Op::RegisterNodes(vec![gpu_node("n1", 2), m1])).unwrap();
    let mut q = gpu_queue("q", 2);
    let quota = q.quotas.values_mut().next().unwrap();
    quota.nominal.set("mig-1g.10gb", 7);
    apply(&mut s, 0, Op::PutQueue(q)).unwrap();
    s
}

fn submit(s: &mut State, resources: Resources) -> Result<Outcome, ApplyError> {
    let mut spec = gpu_job("infer", "q", 0);
    spec.tasks[0].resources = resources;
    apply(s, 0, Op::Submit { spec, request_id: None })
}

#[test]
fn an_unknown_profile_is_refused_naming_the_field_and_the_profiles_offered() {
    let mut s = cluster();
    let err = submit(&mut s, Resources::of(&[("mig-3g.40gb", 1)])).unwrap_err();
    assert_eq!(
        err,
        ApplyError::invalid(
            "tasks[0].resources.mig-3g.40gb",
            "unknown MIG profile mig-3g.40gb: the cluster's nodes offer mig-1g.10gb"
        )
    );
    assert!(s.jobs().is_empty(), "nothing was kept of the refused request");
    assert!(matches!(submit(&mut s, Resources::of(&[("mig-1g.10gb", 2)])), Ok(Outcome::Submitted { .. })));
}

#[test]
fn more_slices_of_a_profile_than_any_node_has_are_impossible() {
    let mut s = cluster();
    let err = submit(&mut s, Resources::of(&[("mig-1g.10gb", 8)])).unwrap_err();
    assert!(err.to_string().contains("more than any node in its pools has"), "{err}");
}
