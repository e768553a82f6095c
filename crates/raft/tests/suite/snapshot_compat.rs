//! Snapshots written before tokens existed still load: the fixture is the bincode of a
//! state (a node, queue `q`, job `train` submitted with request id `r1`) made by the code
//! just before the identity part was added to the state.

use baton_model::access::Role;
use baton_model::command::{Command, Op, Outcome};
use baton_model::{Name, State};
use baton_raft::codec::{decode, decode_state, encode};

const BEFORE_TOKENS: &[u8] = include_bytes!("../fixtures/state-before-tokens.bin");

/// Bootstraps the admin token (hash `[7; 32]`) that `as_admin` writes with.
fn add_admin_token(s: &mut State) {
    let spec = baton_model::access::TokenSpec {
        user: Name::lit("admin"),
        roles: [Role::Admin].into_iter().collect(),
        queues: Default::default(),
    };
    s.apply(Command { now_ms: 5_000, op: Op::AddToken { hash: [7; 32], spec } }).unwrap();
}

#[test]
fn a_snapshot_from_before_tokens_loads_with_no_tokens() {
    assert!(decode::<State>(BEFORE_TOKENS).is_err(), "the current layout alone cannot read it");
    let s = decode_state(BEFORE_TOKENS).unwrap();
    assert!(s.job_by_name("train").is_some());
    assert!(s.queues().contains_key(&Name::lit("q")));
    assert!(!s.access().enforced(), "an old cluster stays open until its first token");
}

#[test]
fn a_state_with_tokens_round_trips_and_old_request_ids_still_answer() {
    let mut s = decode_state(BEFORE_TOKENS).unwrap();
    add_admin_token(&mut s);
    let bytes = encode(&s).unwrap();
    let back = decode_state(&bytes).unwrap();
    assert_eq!(back, s);
    assert!(back.access().enforced());
    // The old, unscoped request id is remembered across the upgrade (for token-less writes).
    let mut open = decode_state(BEFORE_TOKENS).unwrap();
    let job = open.job_by_name("train").unwrap().spec.clone();
    let again = open.apply(Command { now_ms: 5_000, op: Op::Submit { spec: job, request_id: Some("r1".into()) } });
    assert!(matches!(again.unwrap().outcome, Outcome::Submitted { duplicate: true, .. }));
}

#[test]
fn a_snapshot_from_before_tenancy_loads_with_default_settings() {
    let mut s = decode_state(BEFORE_TOKENS).unwrap();
    add_admin_token(&mut s);
    // The layout before tenancy is the current one without its last four parts (tenancy, the
    // completing ranks, the queue admins, the queue revisions): serde writes a tuple as its
    // parts one after another.
    let bytes = encode(&s).unwrap();
    let tail = encode(&baton_model::tenancy::Tenancy::default()).unwrap().len()
        + encode(&baton_model::state::Aftermath::default()).unwrap().len()
        + encode(&baton_model::access::QueueAdmins::default()).unwrap().len()
        + encode(&std::collections::BTreeMap::<Name, u64>::new()).unwrap().len();
    let before_tenancy = &bytes[..bytes.len() - tail];
    assert!(decode::<State>(before_tenancy).is_err(), "the current layout alone cannot read it");
    let back = decode_state(before_tenancy).unwrap();
    assert_eq!(back, s);
    assert!(back.access().enforced());
    assert_eq!(*back.tenancy().settings(), baton_model::tenancy::TenancySettings::default());
}

/// A state with tokens and one token administering queue `q`.
fn with_a_queue_admin() -> (State, String) {
    let mut s = decode_state(BEFORE_TOKENS).unwrap();
    add_admin_token(&mut s);
    let carol = baton_model::access::TokenSpec {
        user: Name::lit("carol"),
        roles: Default::default(),
        queues: [Name::lit("q")].into(),
    };
    s.apply(Command { now_ms: 5_000, op: as_admin(Op::AddToken { hash: [8; 32], spec: carol }) }).unwrap();
    let id = baton_model::access::token_id(&[8; 32]);
    let grant = Op::GrantQueueAdmin { id: id.clone(), queue: Name::lit("q"), granted: true };
    s.apply(Command { now_ms: 5_000, op: as_admin(grant) }).unwrap();
    (s, id)
}

fn as_admin(op: Op) -> Op {
    Op::As { token: [7; 32], op: Box::new(op) }
}

#[test]
fn queue_admin_grants_round_trip_through_a_snapshot() {
    let (s, id) = with_a_queue_admin();
    let back = decode_state(&encode(&s).unwrap()).unwrap();
    assert_eq!(back, s);
    let carol = back.access().tokens().find(|t| t.id == id).unwrap();
    assert!(carol.administers(&Name::lit("q")), "the grant is in the snapshot");
    let json: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(json, s, "JSON (the simulator's format) keeps it too");
}

/// Snapshots of data format 2 end with the tenancy part; format 3 adds the completing ranks,
/// the queue admin grants and the queue revisions after it. A format-2 snapshot loads with nothing completing;
/// a state with a completing job round trips with it.
#[test]
fn a_snapshot_from_before_the_completing_state_loads_with_nothing_completing() {
    let mut s = decode_state(BEFORE_TOKENS).unwrap();
    let job = s.job_by_name("train").unwrap().id;
    let node = s.nodes().keys().next().unwrap().clone();
    let gpus = s.job(job).unwrap().spec.tasks[0].resources.gpus() as u32;
    let replicas = vec![baton_model::alloc::ReplicaAlloc { task: 0, index: 0, node, gpus: (0..gpus).collect() }];
    let place = baton_model::plan::Decision::Place { job, attempt: 1, replicas };
    let plan = baton_model::plan::Plan { based_on: s.applied(), decisions: vec![place] };
    let placed = s.apply(Command { now_ms: 5_000, op: Op::ApplyPlan(plan) }).unwrap();
    assert!(matches!(placed.outcome, Outcome::PlanApplied { accepted: 1, .. }), "{:?}", placed.outcome);
    s.apply(Command { now_ms: 6_000, op: Op::Cancel { job } }).unwrap();
    assert_eq!(s.completing_ranks(job), 1, "cancelled, its rank not reported gone yet");

    let bytes = encode(&s).unwrap();
    let back = decode_state(&bytes).unwrap();
    assert_eq!(back, s);
    assert_eq!(back.completing_ranks(job), 1);
    assert_eq!(back.ledger().digest(), s.ledger().digest(), "the rank's GPUs are held after a restore too");

    // The layout before: the same without its last three parts (each empty one is one byte).
    let mut before = s.clone();
    let gone = baton_model::command::Observed::Stopped { job, attempt: 1, rank: 0, checkpointed: false };
    let node = back.completing(job).unwrap().ranks[&0].node.clone();
    before.apply(Command { now_ms: 7_000, op: Op::Report { node, observations: vec![gone] } }).unwrap();
    let bytes = encode(&before).unwrap();
    let tail = encode(&baton_model::state::Aftermath::default()).unwrap().len()
        + encode(&baton_model::access::QueueAdmins::default()).unwrap().len()
        + encode(&std::collections::BTreeMap::<Name, u64>::new()).unwrap().len();
    let format_2 = &bytes[..bytes.len() - tail];
    assert!(decode::<State>(format_2).is_err(), "the current layout alone cannot read it");
    let back = decode_state(format_2).unwrap();
    assert_eq!(back, before);
    assert_eq!(back.completing_ranks(job), 0);
}

#[test]
fn a_snapshot_from_before_queue_revisions_loads_with_its_queues_at_revision_0() {
    let s = decode_state(BEFORE_TOKENS).unwrap();
    let q = Name::lit("q");
    assert_eq!(s.queue_revision(&q), Some(0));
    // The layout before revisions (data format 2) is the current one without its last three
    // parts.
    let bytes = encode(&s).unwrap();
    let tail = encode(&baton_model::state::Aftermath::default()).unwrap().len()
        + encode(&baton_model::access::QueueAdmins::default()).unwrap().len()
        + encode(&std::collections::BTreeMap::<Name, u64>::new()).unwrap().len();
    let before_revisions = &bytes[..bytes.len() - tail];
    assert!(decode::<State>(before_revisions).is_err(), "the current layout alone cannot read it");
    let mut back = decode_state(before_revisions).unwrap();
    assert_eq!(back, s);
    // An update that read revision 0 lands, and moves the queue past 0.
    let spec = back.queues()[&q].clone();
    back.apply(Command { now_ms: 5_000, op: Op::UpdateQueue { spec, revision: 0 } }).unwrap();
    assert!(back.queue_revision(&q).unwrap() > 0);
    let again = decode_state(&encode(&back).unwrap()).unwrap();
    assert_eq!(again.queue_revision(&q), back.queue_revision(&q));
}

/// Data format 6 adds the queues' visibility after the revisions, written only while some
/// queue has one set: a state with none is format 5's layout, which a format-5 follower
/// reads; one with a visibility set round trips with it, and the older layout's reader
/// refuses it rather than drop it.
#[test]
fn queue_visibility_round_trips_and_a_state_without_one_keeps_the_older_layout() {
    use baton_model::queue::Visibility;
    use baton_model::state::PreVisibilityState;
    let (mut s, _) = with_a_queue_admin();
    let without = encode(&s).unwrap();
    assert!(decode::<PreVisibilityState>(&without).is_ok(), "no visibility set: format 5's layout");
    assert_eq!(decode_state(&without).unwrap(), s);
    let revision = s.queue_revision(&Name::lit("q")).unwrap();
    let op =
        Op::UpdateQueueVisible { spec: s.queues()[&Name::lit("q")].clone(), revision, visibility: Visibility::Own };
    s.apply(Command { now_ms: 5_000, op: as_admin(op) }).unwrap();
    let with = encode(&s).unwrap();
    assert!(decode::<PreVisibilityState>(&with).is_err(), "the older layout's reader cannot drop the setting");
    let back = decode_state(&with).unwrap();
    assert_eq!(back, s);
    assert_eq!(back.queue_visibility(&Name::lit("q")), Visibility::Own);
    let json: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(json.queue_visibility(&Name::lit("q")), Visibility::Own, "JSON keeps it too");
}

/// Data format 7 adds the held jobs' dependencies after the visibility, written only while a
/// job waits: with none waiting a snapshot keeps format 6's layout (with or without a
/// visibility set); with one waiting it round trips with the wait, and the older layouts'
/// readers refuse it rather than release the job.
#[test]
fn waiting_jobs_round_trip_and_a_state_without_one_keeps_the_older_layout() {
    use baton_model::after::{After, JobRef, When};
    use baton_model::fixture::gpu_job;
    use baton_model::queue::Visibility;
    use baton_model::state::{PreVisibilityState, PreWaitsState};
    let (mut s, _) = with_a_queue_admin();
    let submit = |name: &str, after: Vec<After>| {
        as_admin(Op::SubmitAfter { spec: gpu_job(name, "q", 1), request_id: None, run_as: None, after })
    };
    s.apply(Command { now_ms: 5_000, op: submit("wf-prep", Vec::new()) }).unwrap();
    let revision = s.queue_revision(&Name::lit("q")).unwrap();
    let op =
        Op::UpdateQueueVisible { spec: s.queues()[&Name::lit("q")].clone(), revision, visibility: Visibility::Names };
    s.apply(Command { now_ms: 5_000, op: as_admin(op) }).unwrap();
    let none_waits = encode(&s).unwrap();
    assert!(decode::<PreWaitsState>(&none_waits).is_ok(), "nothing waits: format 6's layout");
    let ok_prep = After { job: JobRef::Name(Name::lit("wf-prep")), when: When::Ok };
    s.apply(Command { now_ms: 5_000, op: submit("wf-train", vec![ok_prep]) }).unwrap();
    let train = s.job_by_name("wf-train").unwrap().id;
    assert!(s.held(train));
    let waiting = encode(&s).unwrap();
    assert!(decode::<PreWaitsState>(&waiting).is_err(), "the older layout's reader cannot drop the wait");
    assert!(decode::<PreVisibilityState>(&waiting).is_err());
    let back = decode_state(&waiting).unwrap();
    assert_eq!(back, s);
    assert!(back.held(train));
    let json: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert!(json.held(train), "JSON keeps it too");
}

/// Data format 7 also adds maintenance windows after the waits, written only while there is
/// one: a state with windows round trips through `decode_state` (a started one keeps its
/// nodes out of the capacity), and one without keeps the layout before windows.
#[test]
fn maintenance_windows_round_trip_and_a_state_without_one_keeps_the_older_layout() {
    use baton_model::maintenance::WindowSpec;
    use baton_model::state::PreWindowsState;
    let (mut s, _) = with_a_queue_admin();
    let node = s.nodes().keys().next().unwrap().clone();
    let without = encode(&s).unwrap();
    assert_eq!(decode_state(&without).unwrap(), s);
    let w = WindowSpec { name: Name::lit("fw"), nodes: vec![node.clone()], start_ms: 6_000, end_ms: 9_000 };
    s.apply(Command { now_ms: 5_000, op: as_admin(Op::CreateMaintenance(w)) }).unwrap();
    s.apply(Command { now_ms: 6_000, op: Op::Tick }).unwrap();
    assert!(s.active_window_on(&node).is_some());
    let with = encode(&s).unwrap();
    assert!(decode::<PreWindowsState>(&with).is_err(), "the older layout's reader cannot drop the window");
    let back = decode_state(&with).unwrap();
    assert_eq!(back, s);
    assert!(back.active_window_on(&node).is_some());
    assert_eq!(back.ledger().pools[0].capacity, s.ledger().pools[0].capacity);
}

/// Data format 8 adds the unhealthy GPUs after the windows, written only while there is
/// one: a state with one round trips through `decode_state` (the GPU stays out of the
/// capacity), and one without keeps format 7's layout.
#[test]
fn unhealthy_gpus_round_trip_and_a_state_without_one_keeps_the_older_layout() {
    use baton_model::state::PreGpuFaultsState;
    let (mut s, _) = with_a_queue_admin();
    let node = s.nodes().keys().next().unwrap().clone();
    let capacity = s.ledger().pools[0].capacity;
    let without = encode(&s).unwrap();
    assert!(decode::<PreGpuFaultsState>(&without).is_err(), "nothing else written: format 5's layout");
    assert_eq!(decode_state(&without).unwrap(), s);
    let fault = Op::SetGpuHealth { node: node.clone(), gpu: 1, fault: Some("XID 79".into()) };
    s.apply(Command { now_ms: 5_000, op: as_admin(fault) }).unwrap();
    assert!(s.gpu_fault(&node, 1).is_some());
    let with = encode(&s).unwrap();
    assert!(decode::<PreGpuFaultsState>(&with).is_err(), "the older layout's reader cannot drop the fault");
    let back = decode_state(&with).unwrap();
    assert_eq!(back, s);
    assert_eq!(back.gpu_fault(&node, 1).unwrap().error, "XID 79");
    assert_eq!(
        back.ledger().pools[0].capacity[0],
        capacity[0] - baton_model::ledger::GPU_MILLI,
        "the GPU stays out of the capacity"
    );
    let clear = Op::SetGpuHealth { node: node.clone(), gpu: 1, fault: None };
    s.apply(Command { now_ms: 6_000, op: as_admin(clear) }).unwrap();
    assert_eq!(s.ledger().pools[0].capacity, capacity);
    assert_eq!(decode_state(&encode(&s).unwrap()).unwrap(), s);
}

/// Data format 9 adds the arrays after the unhealthy GPUs, written only while there is one:
/// a state with an array round trips through `decode_state` (its elements not created yet
/// with it), one written by format 8 with an unhealthy GPU (ten parts) still loads, and one
/// without an array keeps format 8's layout.
#[test]
fn arrays_round_trip_and_a_state_without_one_keeps_the_older_layout() {
    use baton_model::state::{PreArraysState, PreGpuFaultsState};
    let (mut s, _) = with_a_queue_admin();
    let node = s.nodes().keys().next().unwrap().clone();
    let fault = Op::SetGpuHealth { node, gpu: 1, fault: Some("XID 79".into()) };
    s.apply(Command { now_ms: 5_000, op: as_admin(fault) }).unwrap();
    let format_8 = encode(&s).unwrap();
    assert!(decode::<PreArraysState>(&format_8).is_ok(), "format 8's ten parts");
    assert_eq!(decode_state(&format_8).unwrap(), s, "a snapshot of format 8 loads");

    let queue = s.queues().keys().next().unwrap().clone();
    let spec = baton_model::fixture::gpu_job("sweep", queue.as_str(), 1);
    let array = baton_model::array::ArraySpec { first: 0, count: 1000, max_running: Some(2) };
    let op = Op::SubmitArray { spec, array, request_id: None, run_as: None, after: vec![] };
    s.apply(Command { now_ms: 6_000, op: as_admin(op) }).unwrap();
    let with = encode(&s).unwrap();
    assert!(decode::<PreArraysState>(&with).is_err(), "the older layout's reader cannot drop the array");
    assert!(decode::<PreGpuFaultsState>(&with).is_err());
    let back = decode_state(&with).unwrap();
    assert_eq!(back, s);
    let a = back.array_by_name("sweep").unwrap();
    assert_eq!((a.created, a.not_created()), (2, 998));
    assert!(
        back.job_by_name("sweep-1").is_some() && back.element_of(back.job_by_name("sweep-1").unwrap().id).is_some()
    );
}

/// Data format 10 adds the behaviour version after the workflows, written only once it is
/// raised: at the baseline a snapshot keeps format 9's layout; raised, it round trips with
/// the version (also as JSON), and format 9's reader refuses it rather than apply the old
/// behaviour to it.
#[test]
fn the_behaviour_version_round_trips_and_the_baseline_keeps_the_older_layout() {
    use baton_model::behaviour::{BASELINE, BEHAVIOUR};
    use baton_model::state::PreBehaviourState;
    let (mut s, _) = with_a_queue_admin();
    s.apply(Command { now_ms: 5_000, op: Op::StartAccounting }).unwrap();
    let baseline = encode(&s).unwrap();
    assert!(decode::<PreBehaviourState>(&baseline).is_ok(), "at the baseline: format 9's layout");
    assert_eq!(decode_state(&baseline).unwrap().behaviour(), BASELINE);
    s.apply(Command { now_ms: 5_000, op: Op::SetBehaviour(BEHAVIOUR) }).unwrap();
    let raised = encode(&s).unwrap();
    assert!(decode::<PreBehaviourState>(&raised).is_err(), "format 9's reader cannot drop the version");
    let back = decode_state(&raised).unwrap();
    assert_eq!((back.behaviour(), &back), (BEHAVIOUR, &s));
    let json: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(json.behaviour(), BEHAVIOUR, "JSON keeps it too");
}

/// Data format 11 adds the tally of the ranks' checkpoints after the behaviour, written only
/// while it holds one: empty, a snapshot keeps format 10's layout; holding one, it round trips
/// (also as JSON), and format 10's reader refuses it rather than lose the tally.
#[test]
fn the_rank_checkpoint_tally_round_trips_and_an_empty_one_keeps_the_older_layout() {
    use baton_model::command::Observed;
    use baton_model::fixture::{gpu_job, gpu_node, gpu_queue};
    use baton_model::state::PreRankSavesState;
    let mut s = State::new();
    let apply = |s: &mut State, op| {
        s.apply(Command { now_ms: 5_000, op }).unwrap();
    };
    apply(&mut s, Op::SetBehaviour(baton_model::behaviour::BEHAVIOUR));
    apply(&mut s, Op::RegisterNodes(vec![gpu_node("n1", 8), gpu_node("n2", 8)]));
    apply(&mut s, Op::PutQueue(gpu_queue("q", 16)));
    let mut spec = gpu_job("g", "q", 8);
    spec.tasks[0].replicas = 2;
    apply(&mut s, Op::Submit { spec, request_id: None });
    let job = s.job_by_name("g").unwrap().id;
    let replicas = baton_model::fixture::one_rank_per_node(2, 8);
    let place = baton_model::plan::Decision::Place { job, attempt: 1, replicas };
    let based_on = s.applied();
    apply(&mut s, Op::ApplyPlan(baton_model::plan::Plan { based_on, decisions: vec![place] }));
    let empty = encode(&s).unwrap();
    assert!(decode::<PreRankSavesState>(&empty).is_ok(), "no tally: format 10's layout");
    let saved = Observed::RankCheckpointed { job, attempt: 1, rank: 0 };
    apply(&mut s, Op::Report { node: Name::lit("n1"), observations: vec![saved] });
    assert_eq!(s.rank_saves()[&job].ranks.len(), 1);
    let holding = encode(&s).unwrap();
    assert!(decode::<PreRankSavesState>(&holding).is_err(), "format 10's reader cannot drop the tally");
    assert_eq!(decode_state(&holding).unwrap(), s);
    let json: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(json.rank_saves(), s.rank_saves(), "JSON keeps it too");
}

/// The replica ids a cluster removed (behaviour 6) are a part of the state of their own,
/// written only while one is recorded: without one, a state with topology levels keeps
/// format 15's layout and the codec reads it; with one it round trips (also as JSON), and
/// format 15's reader refuses it rather than forget which ids are never taken back.
#[test]
fn the_retired_replicas_round_trip_and_none_keeps_the_older_layout() {
    use baton_model::state::PreRetiredState;
    use baton_model::topology::LevelName;
    let mut s = State::new();
    let apply = |s: &mut State, op| {
        s.apply(Command { now_ms: 5_000, op }).unwrap();
    };
    apply(&mut s, Op::SetBehaviour(baton_model::behaviour::BEHAVIOUR));
    apply(&mut s, Op::SetTopologyLevels(vec![LevelName::new("rack").unwrap()]));
    let none = encode(&s).unwrap();
    assert!(decode::<PreRetiredState>(&none).is_ok(), "no replica removed: format 15's layout");
    assert_eq!(decode_state(&none).unwrap(), s);
    s.replicas_removed([4]);
    let holding = encode(&s).unwrap();
    assert!(decode::<PreRetiredState>(&holding).is_err(), "format 15's reader cannot drop the record");
    let back = decode_state(&holding).unwrap();
    assert_eq!(back, s);
    assert!(back.retired_replicas().contains(4));
    let json: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(json.retired_replicas(), s.retired_replicas(), "JSON keeps it too");
}
