//! The format gate: which data format introduced each command, and the refusal of a command
//! that a member of the cluster cannot decode yet.

use std::collections::BTreeSet;

use baton_model::access::TokenSpec;
use baton_model::class::PriorityClass;
use baton_model::command::Observed;
use baton_model::fixture::{gpu_job, gpu_node};
use baton_model::format::{self, DATA_FORMAT, FormatBehind, Reads};
use baton_model::node::NodeStatus;
use baton_model::queue::{Cohort, QueueSpec, Visibility};
use baton_model::scheduler::SchedulerSettings;
use baton_model::tenancy::TenancySettings;
use baton_model::{Name, Op, Plan};

/// What each format number's builds read, frozen once a build of that format exists: every
/// `Op` variant, in declaration order (the encoding's tag), with the format that introduced
/// it. A variant added later needs a format newer than every one listed in `RELEASED`.
const OP_FORMATS: &[(&str, u32)] = &[
    ("PutClass", 1),
    ("DeleteClass", 1),
    ("PutCohort", 1),
    ("DeleteCohort", 1),
    ("PutQueue", 1),
    ("DeleteQueue", 1),
    ("RegisterNode", 1),
    ("RegisterNodes", 1),
    ("SetNodeStatus", 1),
    ("Cordon", 1),
    ("Submit", 1),
    ("Cancel", 1),
    ("Pause", 1),
    ("Resume", 1),
    ("JobExited", 1),
    ("JobStopped", 1),
    ("JobCheckpointed", 1),
    ("Report", 1),
    ("ApplyPlan", 1),
    ("SetScheduler", 1),
    ("Tick", 1),
    ("As", 1),
    ("AddToken", 1),
    ("RevokeToken", 1),
    ("GrantQueue", 1),
    ("SubmitRunAs", 3),
    ("SetTenancy", 3),
    ("GrantQueueAdmin", 4),
    ("CreateQueue", 4),
    ("UpdateQueue", 4),
    ("CreateCohort", 4),
    ("CreateClass", 4),
    ("CreateQueueVisible", 6),
    ("UpdateQueueVisible", 6),
    ("SubmitAfter", 7),
    ("CreateMaintenance", 7),
    ("DeleteMaintenance", 7),
    ("ReportGpu", 8),
    ("SetGpuHealth", 8),
    ("SubmitArray", 9),
    ("CancelArray", 9),
    ("SubmitElastic", 9),
    ("SetUsage", 9),
    ("SetUserLimit", 9),
    ("SetAccounting", 9),
    ("StartAccounting", 9),
    ("SetBehaviour", 10),
    ("StateDigest", 11),
    ("SetTopologyLevels", 12),
    ("SetNodeDomains", 12),
];

const OBSERVED_FORMATS: &[(&str, u32)] = &[
    ("Exited", 1),
    ("Stopped", 1),
    ("Checkpointed", 1),
    ("Unkillable", 1),
    ("Stray", 1),
    ("Vanished", 1),
    ("LeaseExpired", 1),
    ("NotStarted", 3),
    ("LeaseStopped", 4),
    ("KilledHere", 5),
    ("Suspended", 9),
    ("RankCheckpointed", 11),
    ("Unrecorded", 18),
];

/// The newest format a command needs for what it carries rather than for its variant: the
/// raise to behaviour 8 (`SetBehaviour(ENDED_RANKS_OUTLAST_LOST_SUSPENSION)`, format 19; to
/// behaviour 7, 17; to behaviour 6, 16; to behaviour 5, 15; to behaviour 4, 14); a submit
/// whose job asks a fraction of a shared GPU needs 13.
const NEWEST_CONTENT_FORMAT: u32 = 19;

/// The newest format some build has been released with, and how many `Op` and `Observed`
/// variants it reads. Raise it (add a line) when a build of a newer format exists.
const RELEASED: (u32, usize, usize) = (11, 48, 12);

fn obs(i: usize) -> Observed {
    let all = vec![
        Observed::Exited { job: 1, attempt: 1, rank: 0, exit_code: 0 },
        Observed::Stopped { job: 1, attempt: 1, rank: 0, checkpointed: true },
        Observed::Checkpointed { job: 1, attempt: 1 },
        Observed::Unkillable { job: 1, attempt: 1, rank: 0, reason: "d state".into() },
        Observed::Stray { job: 1, attempt: 1, rank: 0 },
        Observed::Vanished { job: 1, attempt: 1, rank: 0, missing_ms: 5 },
        Observed::LeaseExpired { job: 1, attempt: 1, rank: 0, checkpointed: false },
        Observed::NotStarted { job: 1, attempt: 1, rank: 0, exit_code: 127, reason: "no user".into() },
        Observed::LeaseStopped { job: 1, attempt: 1, rank: 0, checkpointed: false, rank_saved: true },
        Observed::KilledHere { job: 1, attempt: 1, rank: 0, rank_saved: false },
        Observed::Suspended { job: 1, attempt: 1, rank: 0, by: 2, requested_ms: 5_000 },
        Observed::RankCheckpointed { job: 1, attempt: 1, rank: 0 },
        Observed::Unrecorded { job: 1, attempt: 1, rank: 0, reason: "disk full".into() },
    ];
    all[i].clone()
}

fn class() -> PriorityClass {
    PriorityClass { name: Name::lit("c"), value: 1, preemptible: true }
}

fn cohort() -> Cohort {
    Cohort { name: Name::lit("co"), parent: None, fair_sharing: false }
}

fn token() -> TokenSpec {
    TokenSpec { user: Name::lit("u"), roles: BTreeSet::new(), queues: BTreeSet::new() }
}

/// One value of every `Op` variant.
fn ops() -> Vec<Op> {
    let q = Name::lit("q");
    vec![
        Op::PutClass(class()),
        Op::DeleteClass { name: q.clone() },
        Op::PutCohort(cohort()),
        Op::DeleteCohort { name: q.clone() },
        Op::PutQueue(QueueSpec::named("q")),
        Op::DeleteQueue { name: q.clone() },
        Op::RegisterNode(gpu_node("n", 1)),
        Op::RegisterNodes(vec![gpu_node("n", 1)]),
        Op::SetNodeStatus { node: q.clone(), status: NodeStatus::Lost },
        Op::Cordon { node: q.clone(), cordoned: true },
        Op::Submit { spec: gpu_job("j", "q", 1), request_id: None },
        Op::Cancel { job: 1 },
        Op::Pause { job: 1 },
        Op::Resume { job: 1 },
        Op::JobExited { job: 1, attempt: 1, exit_code: 0 },
        Op::JobStopped { job: 1, attempt: 1, checkpointed: true },
        Op::JobCheckpointed { job: 1, attempt: 1 },
        Op::Report { node: q.clone(), observations: vec![obs(0)] },
        Op::ApplyPlan(Plan::default()),
        Op::SetScheduler(SchedulerSettings::default()),
        Op::Tick,
        Op::As { token: [0; 32], op: Box::new(Op::Cancel { job: 1 }) },
        Op::AddToken { hash: [0; 32], spec: token() },
        Op::RevokeToken { id: "abc".into() },
        Op::GrantQueue { id: "abc".into(), queue: q.clone(), granted: true },
        Op::SubmitRunAs { spec: gpu_job("j", "q", 1), request_id: None, run_as: None },
        Op::SetTenancy(TenancySettings::default()),
        Op::GrantQueueAdmin { id: "abc".into(), queue: q.clone(), granted: true },
        Op::CreateQueue(QueueSpec::named("q")),
        Op::UpdateQueue { spec: QueueSpec::named("q"), revision: 1 },
        Op::CreateCohort(cohort()),
        Op::CreateClass(class()),
        Op::CreateQueueVisible { spec: QueueSpec::named("q"), visibility: Visibility::Own },
        Op::UpdateQueueVisible { spec: QueueSpec::named("q"), revision: 1, visibility: Visibility::Names },
        Op::SubmitAfter { spec: gpu_job("j", "q", 1), request_id: None, run_as: None, after: Vec::new() },
        Op::CreateMaintenance(baton_model::maintenance::WindowSpec {
            name: q.clone(),
            nodes: vec![q.clone()],
            start_ms: 1,
            end_ms: 2,
        }),
        Op::DeleteMaintenance { name: q.clone() },
        Op::ReportGpu { node: q.clone(), gpu: 0, fault: Some("XID 79".into()), by_check: false },
        Op::SetGpuHealth { node: q.clone(), gpu: 0, fault: None },
        Op::SubmitArray {
            spec: gpu_job("j", "q", 1),
            array: baton_model::array::ArraySpec { first: 0, count: 10, max_running: Some(2) },
            request_id: None,
            run_as: None,
            after: vec![],
        },
        Op::CancelArray { array: 1 },
        Op::SubmitElastic {
            spec: gpu_job("j", "q", 1),
            elastic: baton_model::elastic::ElasticSpec { task: 0, min_replicas: 1 },
            request_id: None,
            run_as: None,
            after: vec![],
        },
        Op::SetUsage(baton_model::usage::UsageSettings { half_life_ms: Some(86_400_000), ..Default::default() }),
        Op::SetUserLimit { queue: q.clone(), limit: baton_model::resources::Resources::of(&[("gpu", 8)]) },
        Op::SetAccounting(baton_model::accounting::AccountingSettings::default()),
        Op::StartAccounting,
        Op::SetBehaviour(baton_model::behaviour::PER_USER_REQUEST_IDS),
        Op::StateDigest(Some(baton_model::digest::DigestAt { index: 7, format: DATA_FORMAT, sha256: [1; 32] })),
        Op::SetTopologyLevels(vec![level("nvlink"), level("rack")]),
        Op::SetNodeDomains(vec![(Name::lit("n1"), [(level("nvlink"), Name::lit("nvl-1"))].into())]),
    ]
}

fn level(name: &str) -> baton_model::topology::LevelName {
    baton_model::topology::LevelName::new(name).unwrap()
}

/// The newest format a cluster has used, when it has used nothing past the oldest
/// reported one: what a member not heard from is taken to read is then that format.
const NOTHING_NEWER_USED: u32 = baton_model::format::UNREPORTED_FORMAT;

#[test]
fn a_submit_naming_topology_levels_needs_format_12_and_the_shorthand_does_not() {
    let submit = |topology: &str| {
        let mut spec = baton_model::fixture::gpu_job("j", "q", 1);
        spec.topology = baton_model::topology::LevelNeed::parse(topology).unwrap();
        Op::Submit { spec, request_id: None }
    };
    assert_eq!(submit("required=nvlink").format(), 12);
    assert_eq!(submit("preferred=rack").format(), 12);
    assert_eq!(submit("rack").format(), 1);
    assert_eq!(submit("required=node").format(), 1);
}

/// The variant's name as `Debug` writes it.
fn variant(debug: String) -> String {
    debug.chars().take_while(|c| c.is_ascii_alphanumeric()).collect()
}

/// The variant names serde knows, in declaration order: the list the encoding uses.
fn serde_variants<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    format::variant_names::<T>()
}

#[test]
fn every_op_variant_has_a_format_in_declaration_order() {
    let declared = serde_variants::<Op>();
    let listed: Vec<&str> = OP_FORMATS.iter().map(|(n, _)| *n).collect();
    assert_eq!(declared, listed, "a new Op variant goes at the end and gets a line in OP_FORMATS");
    let samples = ops();
    let sampled: Vec<String> = samples.iter().map(|op| variant(format!("{op:?}"))).collect();
    assert_eq!(sampled, listed, "ops() has one value of each variant, in order");
    for (op, (name, want)) in samples.iter().zip(OP_FORMATS) {
        assert_eq!(op.format(), *want, "{name}");
    }
}

#[test]
fn every_observation_has_a_format_in_declaration_order() {
    let declared = serde_variants::<Observed>();
    let listed: Vec<&str> = OBSERVED_FORMATS.iter().map(|(n, _)| *n).collect();
    assert_eq!(declared, listed, "a new Observed variant goes at the end and gets a line in OBSERVED_FORMATS");
    for (i, (name, want)) in OBSERVED_FORMATS.iter().enumerate() {
        assert_eq!(variant(format!("{:?}", obs(i))), *name);
        assert_eq!(obs(i).format(), *want, "{name}");
    }
}

#[test]
fn a_variant_newer_than_a_released_format_needs_a_newer_format() {
    let (released, ops_then, observed_then) = RELEASED;
    for (name, f) in OP_FORMATS.iter().skip(ops_then).chain(OBSERVED_FORMATS.iter().skip(observed_then)) {
        assert!(
            *f > released,
            "{name} came after builds of format {released} existed: it needs format {}",
            released + 1
        );
    }
    let newest = OP_FORMATS.iter().chain(OBSERVED_FORMATS).map(|(_, f)| *f).max().unwrap();
    assert_eq!(DATA_FORMAT, newest.max(NEWEST_CONTENT_FORMAT), "DATA_FORMAT is the newest format anything needs");
}

#[test]
fn a_command_takes_the_newest_format_of_what_it_carries() {
    let wrapped = Op::As { token: [0; 32], op: Box::new(Op::CreateQueue(QueueSpec::named("q"))) };
    assert_eq!(wrapped.format(), 4);
    let report = Op::Report { node: Name::lit("n"), observations: vec![obs(0), obs(7)] };
    assert_eq!(report.format(), 3);
    // A plan needs the newest format of its decisions: a growth (section 13) needs 9.
    let wait = baton_model::plan::Decision::Wait { job: 1, reason: "r".into() };
    let grow = baton_model::plan::Decision::Grow { job: 1, attempt: 1, replicas: vec![] };
    let plan = |decisions| Op::ApplyPlan(Plan { based_on: 0, decisions });
    assert_eq!(plan(vec![wait.clone()]).format(), 1);
    assert_eq!(plan(vec![wait, grow]).format(), 9);
}

#[test]
fn a_command_newer_than_a_members_format_is_refused_naming_it() {
    let create = Op::CreateQueue(QueueSpec::named("q"));
    let members = [(1, Reads::Format(4)), (2, Reads::Format(3)), (3, Reads::Format(4))];
    let err = format::check(&create, members, NOTHING_NEWER_USED).unwrap_err();
    assert_eq!(err, FormatBehind { op: "CreateQueue".into(), needs: 4, behind: vec![(2, Reads::Format(3))] });
    let text = err.to_string();
    assert!(text.contains("CreateQueue needs data format 4"), "{text}");
    assert!(text.contains("replica 2 (reads formats up to 3)"), "{text}");

    // What the oldest member reads still goes through.
    let submit = Op::SubmitRunAs { spec: gpu_job("j", "q", 1), request_id: None, run_as: None };
    assert_eq!(format::check(&submit, members, NOTHING_NEWER_USED), Ok(()));
    // Once every member reads it, so does the newer command.
    assert_eq!(format::check(&create, [(1, Reads::Format(4)), (2, Reads::Format(4))], NOTHING_NEWER_USED), Ok(()));
}

#[test]
fn a_lease_stop_goes_as_a_lease_expiry_to_members_of_format_3() {
    let stop = Observed::LeaseStopped { job: 7, attempt: 2, rank: 1, checkpointed: true, rank_saved: true };
    assert_eq!(stop.clone().for_format(4), Some(stop.clone()));
    let older = Observed::LeaseExpired { job: 7, attempt: 2, rank: 1, checkpointed: true };
    assert_eq!(stop.for_format(3), Some(older));
    // Every observation comes out readable by the format it was given.
    for (i, _) in OBSERVED_FORMATS.iter().enumerate() {
        assert!(obs(i).for_format(3).is_none_or(|o| o.format() <= 3), "{:?}", obs(i));
    }
}

#[test]
fn a_rank_killed_here_goes_as_a_vanished_one_to_members_of_format_4() {
    let killed = Observed::KilledHere { job: 7, attempt: 2, rank: 1, rank_saved: false };
    assert_eq!(killed.clone().for_format(5), Some(killed.clone()));
    let older = Observed::Vanished { job: 7, attempt: 2, rank: 1, missing_ms: 0 };
    assert_eq!(killed.for_format(4), Some(older));
    for (i, _) in OBSERVED_FORMATS.iter().enumerate() {
        assert!(obs(i).for_format(4).is_none_or(|o| o.format() <= 4), "{:?}", obs(i));
    }
}

/// A suspension that names itself goes to members of format 8 as the plain stop it was
/// before (counted for whichever suspension is in progress).
#[test]
fn a_named_suspension_goes_as_a_stop_to_members_of_format_8() {
    let suspended = Observed::Suspended { job: 7, attempt: 2, rank: 1, by: 8, requested_ms: 9_000 };
    assert_eq!(suspended.clone().for_format(9), Some(suspended.clone()));
    assert_eq!(suspended.for_format(8), Some(Observed::Stopped { job: 7, attempt: 2, rank: 1, checkpointed: false }));
    for (i, _) in OBSERVED_FORMATS.iter().enumerate() {
        assert!(obs(i).for_format(8).is_none_or(|o| o.format() <= 8), "{:?}", obs(i));
    }
}

/// A rank's checkpoint has no older observation: while a member reads older, the leader
/// keeps the tally and sends `Checkpointed`.
#[test]
fn a_ranks_checkpoint_goes_to_no_member_of_format_10() {
    let saved = Observed::RankCheckpointed { job: 7, attempt: 2, rank: 1 };
    assert_eq!(saved.clone().for_format(11), Some(saved.clone()));
    assert_eq!(saved.for_format(10), None);
    for (i, _) in OBSERVED_FORMATS.iter().enumerate() {
        assert!(obs(i).for_format(10).is_none_or(|o| o.format() <= 10), "{:?}", obs(i));
    }
}

/// A start its agent could not record goes to members of format 17 as a rank killed here:
/// the same requeue, the node not taken out (and below format 5, as a vanished rank).
#[test]
fn an_unrecorded_start_goes_as_a_rank_killed_here_to_members_of_format_17() {
    let unrecorded = Observed::Unrecorded { job: 7, attempt: 2, rank: 1, reason: "disk full".into() };
    assert_eq!(unrecorded.clone().for_format(18), Some(unrecorded.clone()));
    let killed = Observed::KilledHere { job: 7, attempt: 2, rank: 1, rank_saved: false };
    assert_eq!(unrecorded.clone().for_format(17), Some(killed));
    let vanished = Observed::Vanished { job: 7, attempt: 2, rank: 1, missing_ms: 0 };
    assert_eq!(unrecorded.for_format(4), Some(vanished));
    for (i, _) in OBSERVED_FORMATS.iter().enumerate() {
        assert!(obs(i).for_format(17).is_none_or(|o| o.format() <= 17), "{:?}", obs(i));
    }
}

/// What a report commits mid-upgrade: as old as the oldest member reads, but never older
/// than the committed behaviour's format (every member read it when it was raised). The
/// server's gateway and the simulated leader both convert by it.
#[test]
fn a_report_goes_as_the_oldest_member_or_the_committed_behaviour_reads() {
    let unrecorded = Observed::Unrecorded { job: 7, attempt: 2, rank: 1, reason: "disk full".into() };
    let killed = Observed::KilledHere { job: 7, attempt: 2, rank: 1, rank_saved: false };
    let v = |o: &Observed| vec![o.clone()];
    assert_eq!(format::for_members(v(&unrecorded), DATA_FORMAT, 1), v(&unrecorded));
    assert_eq!(format::for_members(v(&unrecorded), 17, 1), v(&killed));
    // A member not heard yet reads format 3 by what this replica knows; behaviour 8 says 19.
    assert_eq!(format::for_members(v(&unrecorded), 3, baton_model::behaviour::BEHAVIOUR), v(&unrecorded));
}

#[test]
fn a_member_not_heard_from_is_behind_for_a_gated_command() {
    let create = Op::As { token: [0; 32], op: Box::new(Op::CreateCohort(cohort())) };
    let err = format::check(&create, [(1, Reads::Format(4)), (5, Reads::Unknown)], NOTHING_NEWER_USED).unwrap_err();
    assert_eq!(err.op, "CreateCohort");
    assert_eq!(err.behind, vec![(5, Reads::Unknown)]);
    assert!(err.to_string().contains("replica 5 (not heard from yet)"), "{err}");
    // A command every build of the oldest reported format reads needs no answer.
    assert_eq!(format::check(&Op::Tick, [(5, Reads::Unknown)], NOTHING_NEWER_USED), Ok(()));
    // Nor does one of a format the cluster has already used: a member that could not read
    // it would have no log to follow. One newer still waits for it.
    let used = create.format();
    assert_eq!(format::check(&create, [(1, Reads::Format(4)), (5, Reads::Unknown)], used), Ok(()));
    assert_eq!(Reads::Unknown.newest(used), used);
    assert!(format::check(&create, [(5, Reads::Unknown)], used - 1).is_err());
}

#[test]
fn a_queue_write_with_a_visibility_waits_for_members_of_format_5() {
    let create = Op::As {
        token: [0; 32],
        op: Box::new(Op::CreateQueueVisible { spec: QueueSpec::named("q"), visibility: Visibility::Own }),
    };
    let err = format::check(&create, [(1, Reads::Format(6)), (2, Reads::Format(5))], NOTHING_NEWER_USED).unwrap_err();
    assert_eq!(err, FormatBehind { op: "CreateQueueVisible".into(), needs: 6, behind: vec![(2, Reads::Format(5))] });
    // The same queue written without a visibility goes through: it is format 4's command.
    let plain = Op::As { token: [0; 32], op: Box::new(Op::CreateQueue(QueueSpec::named("q"))) };
    assert_eq!(format::check(&plain, [(1, Reads::Format(6)), (2, Reads::Format(5))], NOTHING_NEWER_USED), Ok(()));
    assert_eq!(format::check(&create, [(1, Reads::Format(6)), (2, Reads::Format(6))], NOTHING_NEWER_USED), Ok(()));
}

/// A build of format 12 reads `gpu.milli` as a resource no node has and refuses the submit
/// that a build of format 13 accepts: the gate must hold it until every member reads 13.
#[test]
fn a_submit_asking_a_gpu_fraction_needs_format_13_and_whole_gpus_do_not() {
    let submit = |milli: u64| {
        let mut spec = baton_model::fixture::gpu_job("j", "q", 0);
        spec.tasks[0].resources.set_gpus_milli(milli);
        Op::Submit { spec, request_id: None }
    };
    assert_eq!(submit(500).format(), 13);
    assert_eq!(submit(2000).format(), 1);
}
