//! Maintenance windows (decisions.md section 14) through `State::apply`: bad windows are
//! refused naming the field and change nothing; a window starts with the clock (its nodes
//! leave the capacity, what runs there begins to stop) and ends with it; a deleted started
//! window gives its nodes back; snapshots keep windows and use format 6's layout without.

use baton_model::alloc::ReplicaAlloc;
use baton_model::fixture::gpu_job;
use baton_model::job::StopWhy;
use baton_model::maintenance::WindowSpec;
use baton_model::plan::{Decision, Plan};
use baton_model::rejection::Rejection;
use baton_model::{ApplyError, JobId, JobState, Name, Op, Outcome, State};

use crate::common;

use common::{apply, two_nodes_one_queue as cluster};

fn window(name: &str, nodes: &[&str], start_ms: u64, end_ms: u64) -> WindowSpec {
    WindowSpec { name: Name::lit(name), nodes: nodes.iter().map(|n| Name::lit(n)).collect(), start_ms, end_ms }
}

fn capacity_gpus(s: &State) -> u64 {
    baton_model::ledger::whole_gpus(s.ledger().pools[0].capacity[0])
}

fn running_on_n1(s: &mut State, name: &str, time_limit_ms: Option<u64>) -> (JobId, Vec<(u32, Rejection)>) {
    let spec = baton_model::JobSpec { time_limit_ms, ..gpu_job(name, "q", 8) };
    let Outcome::Submitted { job, .. } = apply(s, s.now_ms(), Op::Submit { spec, request_id: None }).unwrap() else {
        panic!()
    };
    let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: (0..8).collect() }];
    let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt: 1, replicas }] };
    match apply(s, s.now_ms(), Op::ApplyPlan(plan)).unwrap() {
        Outcome::PlanApplied { rejected, .. } => (job, rejected),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_windows_are_refused_naming_the_field_and_change_nothing() {
    let mut s = cluster();
    apply(&mut s, 5_000, Op::CreateMaintenance(window("fw", &["n1"], 10_000, 20_000))).unwrap();
    for (w, field) in [
        (window("a", &["n2"], 30_000, 30_000), "end"),
        (window("a", &["n2"], 30_000, 20_000), "end"),
        (window("a", &["n2"], 1_000, 4_000), "end"),
        (window("a", &["n9"], 30_000, 40_000), "nodes[0]"),
        (window("a", &["n2", "n2"], 30_000, 40_000), "nodes[1]"),
        (window("a", &["n2", "n1"], 15_000, 40_000), "nodes[1]"),
        (window("a", &[], 30_000, 40_000), "nodes"),
    ] {
        let e = apply(&mut s, 5_000, Op::CreateMaintenance(w.clone())).unwrap_err();
        assert!(matches!(&e, ApplyError::Invalid { field: f, .. } if f == field), "{w:?}: {e}");
    }
    let e = apply(&mut s, 5_000, Op::CreateMaintenance(window("fw", &["n2"], 30_000, 40_000))).unwrap_err();
    assert!(matches!(e, ApplyError::Exists { .. }), "{e}");
    assert_eq!(s.windows().len(), 1);
    // Touching windows do not overlap.
    apply(&mut s, 5_000, Op::CreateMaintenance(window("next", &["n1"], 20_000, 25_000))).unwrap();
    let e = apply(&mut s, 5_000, Op::DeleteMaintenance { name: Name::lit("nope") }).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn a_window_takes_its_nodes_out_at_its_start_stops_what_runs_there_and_gives_them_back_at_its_end() {
    let mut s = cluster();
    let (early, rejected) = running_on_n1(&mut s, "early", None);
    assert!(rejected.is_empty());
    apply(&mut s, 1_000, Op::CreateMaintenance(window("fw", &["n1"], 10_000, 20_000))).unwrap();
    assert!(!s.window_due(9_999) && s.window_due(10_000));
    assert_eq!(s.next_window_change_ms(1_000), Some(10_000));
    assert_eq!(capacity_gpus(&s), 16);
    apply(&mut s, 10_000, Op::Tick).unwrap();
    assert_eq!(capacity_gpus(&s), 8, "n1 left the pool's capacity");
    let j = s.job(early).unwrap();
    assert_eq!((j.state, j.stopping.map(|x| x.why)), (JobState::Preempting, Some(StopWhy::Maintenance)));
    assert!(j.reason.contains("maintenance: window fw"), "{}", j.reason);
    apply(&mut s, 11_000, Op::JobStopped { job: early, attempt: 1, checkpointed: true }).unwrap();
    let j = s.job(early).unwrap();
    assert_eq!((j.state, j.has_checkpoint, j.preempted_by), (JobState::Pending, true, None), "requeued, no preemptor");
    assert!(j.reason.contains("maintenance: window fw"), "{}", j.reason);
    assert_eq!(s.next_window_change_ms(11_000), Some(20_000));
    apply(&mut s, 20_000, Op::Tick).unwrap();
    assert!(s.windows().is_empty(), "forgotten at its end");
    assert_eq!(capacity_gpus(&s), 16);
}

#[test]
fn before_its_start_a_window_takes_only_jobs_that_end_by_then_and_a_deleted_one_gives_its_nodes_back() {
    let mut s = cluster();
    apply(&mut s, 1_000, Op::CreateMaintenance(window("fw", &["n1"], 100_000, 200_000))).unwrap();
    let (_, rejected) = running_on_n1(&mut s, "no-limit", None);
    assert!(matches!(rejected.as_slice(), [(0, Rejection::MaintenanceAhead { .. })]), "{rejected:?}");
    let (_, rejected) = running_on_n1(&mut s, "too-long", Some(100_000));
    assert!(matches!(rejected.as_slice(), [(0, Rejection::MaintenanceAhead { .. })]), "{rejected:?}");
    let (fits, rejected) = running_on_n1(&mut s, "fits", Some(99_000));
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(s.job(fits).unwrap().state, JobState::Running);
    apply(&mut s, 100_000, Op::Tick).unwrap();
    assert_eq!(capacity_gpus(&s), 8);
    apply(&mut s, 100_500, Op::DeleteMaintenance { name: Name::lit("fw") }).unwrap();
    assert_eq!(capacity_gpus(&s), 16, "a deleted started window gives its nodes back at once");
}

#[test]
fn snapshots_keep_windows_and_use_format_6s_layout_without_any() {
    let config = bincode::config::standard();
    let mut s = cluster();
    let before = bincode::serde::encode_to_vec(&s, config).unwrap();
    let (_, _) =
        bincode::serde::decode_from_slice::<baton_model::state::PreVisibilityState, _>(&before, config).unwrap();
    apply(&mut s, 1_000, Op::CreateMaintenance(window("fw", &["n1"], 5_000, 9_000))).unwrap();
    apply(&mut s, 5_000, Op::Tick).unwrap();
    let with = bincode::serde::encode_to_vec(&s, config).unwrap();
    // Format 7's layout while no GPU is unhealthy (format 8's reader is tried first and
    // wants the part of unhealthy GPUs; the raft codec falls back to this one).
    let (back, _) =
        bincode::serde::decode_from_slice::<baton_model::state::PreGpuFaultsState, _>(&with, config).unwrap();
    let back = back.0;
    assert_eq!(back, s);
    assert_eq!(capacity_gpus(&back), 8, "a started window's nodes stay out after a restore");
    // The older layout's reader cannot take it whole (the codec refuses trailing bytes).
    let old = bincode::serde::decode_from_slice::<baton_model::state::PreWaitsState, _>(&with, config);
    assert!(old.is_err() || old.is_ok_and(|(_, read)| read < with.len()));
}
