//! Tokens and permissions in the state machine: once a cluster has a token, every client
//! command must carry a live one that allows it, at the log index it is applied; refused
//! commands change nothing.

use std::collections::{BTreeMap, BTreeSet};

use baton_model::access::{Role, Subject, TokenHash, TokenSpec, token_id};
use baton_model::command::{Command, Op, Outcome};
use baton_model::fixture;
use baton_model::job::JobSpec;
use baton_model::queue::QueueSpec;
use baton_model::tenancy::{TenancySettings, UnixUser};
use baton_model::{Applied, ApplyError, Name, State};

const ADMIN: TokenHash = [1; 32];
const ALICE: TokenHash = [2; 32];
const BOB: TokenHash = [3; 32];
const OPERATOR: TokenHash = [4; 32];

fn apply(s: &mut State, op: Op) -> Result<Applied, ApplyError> {
    s.apply(Command { now_ms: 1_000, op })
}

fn as_(token: TokenHash, op: Op) -> Op {
    Op::As { token, op: Box::new(op) }
}

fn spec(user: &str, roles: &[Role], queues: &[&str]) -> TokenSpec {
    TokenSpec {
        user: Name::lit(user),
        roles: roles.iter().copied().collect(),
        queues: queues.iter().map(|q| Name::lit(q)).collect::<BTreeSet<_>>(),
    }
}

fn queue(name: &str) -> QueueSpec {
    fixture::gpu_queue(name, 8)
}

fn job(name: &str, queue: &str) -> JobSpec {
    let env = BTreeMap::from([("SECRET".into(), "s3".into())]);
    JobSpec { command: vec!["python".into()], env, ..fixture::gpu_job(name, queue, 1) }
}

/// A bootstrapped cluster: an admin token added without one, queues `a` and `b`, alice and
/// bob granted `a`, an operator.
fn cluster() -> State {
    let mut s = State::default();
    apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 8)])).unwrap();
    apply(&mut s, Op::AddToken { hash: ADMIN, spec: spec("root-admin", &[Role::Admin], &[]) }).unwrap();
    for q in ["a", "b"] {
        apply(&mut s, as_(ADMIN, Op::PutQueue(queue(q)))).unwrap();
    }
    for (hash, user) in [(ALICE, "alice"), (BOB, "bob")] {
        apply(&mut s, as_(ADMIN, Op::AddToken { hash, spec: spec(user, &[], &["a"]) })).unwrap();
    }
    apply(&mut s, as_(ADMIN, Op::AddToken { hash: OPERATOR, spec: spec("ops", &[Role::Operator], &[]) })).unwrap();
    s
}

fn submit(s: &mut State, token: TokenHash, name: &str, queue: &str, rid: Option<&str>) -> Result<u64, ApplyError> {
    let op = Op::Submit { spec: job(name, queue), request_id: rid.map(str::to_string) };
    match apply(s, as_(token, op))?.outcome {
        Outcome::Submitted { job, .. } => Ok(job),
        other => panic!("submit answered {other:?}"),
    }
}

/// `op` is refused with an error matching `is`, and the state is exactly as before.
fn refused(s: &mut State, op: Op, is: fn(&ApplyError) -> bool) -> String {
    let before = s.clone();
    let e = apply(s, op).unwrap_err();
    assert!(is(&e), "{e:?}");
    // Only the count of applied commands moves for a refused one.
    assert_eq!(s.applied(), before.applied() + 1);
    let after = &*s;
    assert_eq!(after.jobs(), before.jobs());
    assert_eq!(after.queues(), before.queues());
    assert_eq!(after.access(), before.access());
    assert_eq!(after.tenancy(), before.tenancy());
    e.to_string()
}

fn unauthenticated(e: &ApplyError) -> bool {
    matches!(e, ApplyError::Unauthenticated(_))
}

fn denied(e: &ApplyError) -> bool {
    matches!(e, ApplyError::PermissionDenied(_))
}

#[test]
fn a_cluster_without_tokens_takes_commands_without_one() {
    let mut s = State::default();
    apply(&mut s, Op::PutQueue(queue("a"))).unwrap();
    assert!(!s.access().enforced());
}

#[test]
fn no_token_is_refused_once_the_cluster_has_one() {
    let mut s = cluster();
    let e = refused(&mut s, Op::Submit { spec: job("j", "a"), request_id: None }, unauthenticated);
    assert!(e.contains("requires a token") && e.contains("Submit"), "{e}");
    // Nor can a second admin be bootstrapped by anyone who reaches a port.
    let op = Op::AddToken { hash: [9; 32], spec: spec("mallory", &[Role::Admin], &[]) };
    refused(&mut s, op, unauthenticated);
}

#[test]
fn an_unknown_token_is_refused() {
    let mut s = cluster();
    let e = refused(&mut s, as_([7; 32], Op::Submit { spec: job("j", "a"), request_id: None }), unauthenticated);
    assert!(e.contains("unknown token"), "{e}");
}

#[test]
fn a_revoked_token_is_refused_from_the_next_command_on() {
    let mut s = cluster();
    submit(&mut s, ALICE, "j1", "a", None).unwrap();
    apply(&mut s, as_(ADMIN, Op::RevokeToken { id: token_id(&ALICE) })).unwrap();
    let e = refused(&mut s, as_(ALICE, Op::Submit { spec: job("j2", "a"), request_id: None }), unauthenticated);
    assert!(e.contains("revoked") && e.contains("alice"), "{e}");
    // Revoking every token does not open the cluster.
    apply(&mut s, as_(ADMIN, Op::RevokeToken { id: token_id(&ADMIN) })).unwrap();
    refused(&mut s, Op::PutQueue(queue("c")), unauthenticated);
}

#[test]
fn a_queue_user_submitting_to_a_queue_not_granted_is_refused() {
    let mut s = cluster();
    let e = refused(&mut s, as_(ALICE, Op::Submit { spec: job("j", "b"), request_id: None }), denied);
    assert!(e.contains("alice") && e.contains("no grant on queue b") && e.contains("granted: a"), "{e}");
    // Granting the queue lets the same submit through.
    apply(&mut s, as_(ADMIN, Op::GrantQueue { id: token_id(&ALICE), queue: Name::lit("b"), granted: true })).unwrap();
    submit(&mut s, ALICE, "j", "b", None).unwrap();
}

#[test]
fn cancelling_another_users_job_is_refused_but_an_operator_may() {
    let mut s = cluster();
    let id = submit(&mut s, ALICE, "j", "a", None).unwrap();
    for op in [Op::Cancel { job: id }, Op::Pause { job: id }] {
        let e = refused(&mut s, as_(BOB, op), denied);
        assert!(e.contains("job j belongs to user alice") && e.contains("bob"), "{e}");
    }
    apply(&mut s, as_(OPERATOR, Op::Cancel { job: id })).unwrap();
    let events = &s.job(id).unwrap().events;
    assert!(events.back().unwrap().message.ends_with("(by ops)"), "{events:?}");
}

#[test]
fn queue_users_need_admin_for_configuration_and_operator_for_nodes() {
    let mut s = cluster();
    let e = refused(&mut s, as_(ALICE, Op::PutQueue(queue("c"))), denied);
    assert!(e.contains("PutQueue needs role admin; user alice has no roles"), "{e}");
    let e = refused(&mut s, as_(ALICE, Op::Cordon { node: Name::lit("n1"), cordoned: true }), denied);
    assert!(e.contains("Cordon needs role operator"), "{e}");
    let op = Op::AddToken { hash: [9; 32], spec: spec("alice", &[Role::Admin], &[]) };
    refused(&mut s, as_(OPERATOR, op), denied);
    apply(&mut s, as_(OPERATOR, Op::Cordon { node: Name::lit("n1"), cordoned: true })).unwrap();
    let window = baton_model::maintenance::WindowSpec {
        name: Name::lit("fw"),
        nodes: vec![Name::lit("n1")],
        start_ms: 100_000_000,
        end_ms: 200_000_000,
    };
    let e = refused(&mut s, as_(ALICE, Op::CreateMaintenance(window.clone())), denied);
    assert!(e.contains("CreateMaintenance needs role operator"), "{e}");
    apply(&mut s, as_(OPERATOR, Op::CreateMaintenance(window))).unwrap();
    let e = refused(&mut s, as_(ALICE, Op::DeleteMaintenance { name: Name::lit("fw") }), denied);
    assert!(e.contains("DeleteMaintenance needs role operator"), "{e}");
    apply(&mut s, as_(OPERATOR, Op::DeleteMaintenance { name: Name::lit("fw") })).unwrap();
    let mark = Op::SetGpuHealth { node: Name::lit("n1"), gpu: 0, fault: Some("XID 79".into()) };
    let e = refused(&mut s, as_(ALICE, mark.clone()), denied);
    assert!(e.contains("SetGpuHealth needs role operator"), "{e}");
    apply(&mut s, as_(OPERATOR, mark)).unwrap();
    // What an agent reports comes from the leader's gateway alone, never from a client.
    let report = Op::ReportGpu { node: Name::lit("n1"), gpu: 1, fault: Some("XID 79".into()), by_check: false };
    assert!(report.leader_only() && !report.from_client());
}

#[test]
fn a_duplicate_request_id_from_another_user_never_returns_the_first_users_job() {
    let mut s = cluster();
    let first = submit(&mut s, ALICE, "ja", "a", Some("r1")).unwrap();
    assert_eq!(submit(&mut s, ALICE, "ja", "a", Some("r1")).unwrap(), first, "alice's retry finds her job");
    let other = submit(&mut s, BOB, "jb", "a", Some("r1")).unwrap();
    assert_ne!(other, first);
    assert_eq!(s.access().owner(other), Some(&Name::lit("bob")));
    assert_eq!(s.access().owner(first), Some(&Name::lit("alice")));
}

#[test]
fn writes_record_who_made_them() {
    let mut s = cluster();
    let id = submit(&mut s, ALICE, "j", "a", None).unwrap();
    assert!(s.job(id).unwrap().events[0].message.ends_with("(by alice)"));
    let applied = apply(&mut s, as_(ADMIN, Op::PutQueue(queue("a")))).unwrap();
    assert!(applied.events.iter().all(|e| e.message.ends_with("(by root-admin)")), "{:?}", applied.events);
}

#[test]
fn only_client_commands_may_be_wrapped() {
    let mut s = cluster();
    let e = refused(&mut s, as_(ADMIN, Op::Tick), |e| matches!(e, ApplyError::Invalid { .. }));
    assert!(e.contains("Tick is not one"), "{e}");
    refused(&mut s, as_(ADMIN, as_(ADMIN, Op::Tick)), |e| matches!(e, ApplyError::Invalid { .. }));
}

#[test]
fn private_data_is_for_the_owner_queue_admins_operators_and_admins() {
    let mut s = cluster();
    let id = submit(&mut s, ALICE, "j", "a", None).unwrap();
    let job = Subject::of_job(s.job(id).unwrap(), s.access().owner(id));
    let tokens: BTreeMap<&str, _> = s.access().tokens().map(|t| (t.spec.user.as_str(), t)).collect();
    assert!(tokens["alice"].may_see_private(&job));
    assert!(!tokens["bob"].may_see_private(&job));
    assert!(tokens["ops"].may_see_private(&job));
    assert!(tokens["root-admin"].may_see_private(&job));
}

const CAROL: TokenHash = [5; 32];

/// `cluster()` with carol, a user of queue `b` and the admin of queue `a`.
fn with_a_queue_admin() -> State {
    let mut s = cluster();
    apply(&mut s, as_(ADMIN, Op::AddToken { hash: CAROL, spec: spec("carol", &[], &["b"]) })).unwrap();
    let grant = Op::GrantQueueAdmin { id: token_id(&CAROL), queue: Name::lit("a"), granted: true };
    apply(&mut s, as_(ADMIN, grant)).unwrap();
    s
}

#[test]
fn a_queue_admin_sees_and_acts_on_every_job_of_that_queue_only() {
    let mut s = with_a_queue_admin();
    let in_a = submit(&mut s, ALICE, "ja", "a", None).unwrap();
    let in_b = submit(&mut s, OPERATOR, "jb", "b", None).unwrap();
    let carol = s.access().tokens().find(|t| t.spec.user.as_str() == "carol").unwrap().clone();
    let subject = |id| Subject::of_job(s.job(id).unwrap(), s.access().owner(id));
    assert!(carol.may_see_private(&subject(in_a)));
    assert!(!carol.may_see_private(&subject(in_b)), "b is only granted, not administered");
    let e = refused(&mut s, as_(CAROL, Op::Cancel { job: in_b }), denied);
    assert!(e.contains("an admin of queue b"), "{e}");
    apply(&mut s, as_(CAROL, Op::Pause { job: in_a })).unwrap();
    apply(&mut s, as_(CAROL, Op::Resume { job: in_a })).unwrap();
    apply(&mut s, as_(CAROL, Op::Cancel { job: in_a })).unwrap();
    // Administering a queue lets one submit to it without a grant.
    submit(&mut s, CAROL, "mine", "a", None).unwrap();
    // Nothing beyond the queue: no configuration, no nodes.
    refused(&mut s, as_(CAROL, Op::PutQueue(queue("a"))), denied);
    refused(&mut s, as_(CAROL, Op::Cordon { node: Name::lit("n1"), cordoned: true }), denied);
}

#[test]
fn only_admins_grant_queue_admin_and_the_grant_can_be_taken_back() {
    let mut s = with_a_queue_admin();
    let grant = |granted| Op::GrantQueueAdmin { id: token_id(&BOB), queue: Name::lit("a"), granted };
    for token in [ALICE, OPERATOR, CAROL] {
        let e = refused(&mut s, as_(token, grant(true)), denied);
        assert!(e.contains("GrantQueueAdmin needs role admin"), "{e}");
    }
    let unknown = Op::GrantQueueAdmin { id: token_id(&BOB), queue: Name::lit("nope"), granted: true };
    refused(&mut s, as_(ADMIN, unknown), |e| matches!(e, ApplyError::Unknown { .. }));
    let id = submit(&mut s, ALICE, "j", "a", None).unwrap();
    let take_back = Op::GrantQueueAdmin { id: token_id(&CAROL), queue: Name::lit("a"), granted: false };
    apply(&mut s, as_(ADMIN, take_back)).unwrap();
    refused(&mut s, as_(CAROL, Op::Cancel { job: id }), denied);
}

#[test]
fn a_token_needs_a_role_or_a_queue_and_known_queues() {
    let mut s = cluster();
    let op = as_(ADMIN, Op::AddToken { hash: [9; 32], spec: spec("carol", &[], &[]) });
    refused(&mut s, op, |e| matches!(e, ApplyError::Invalid { .. }));
    let op = as_(ADMIN, Op::AddToken { hash: [9; 32], spec: spec("carol", &[], &["nope"]) });
    refused(&mut s, op, |e| matches!(e, ApplyError::Unknown { .. }));
}

#[test]
fn a_state_with_tokens_round_trips_through_json() {
    let mut s = cluster();
    submit(&mut s, ALICE, "j", "a", Some("r1")).unwrap();
    let text = serde_json::to_string(&s).unwrap();
    let back: State = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
}

// Tenancy: the Unix user a job runs as, and the bounds on jobs per user and per queue.

fn submit_as(
    s: &mut State,
    token: TokenHash,
    name: &str,
    queue: &str,
    run_as: Option<&str>,
) -> Result<u64, ApplyError> {
    let run_as = run_as.map(|u| UnixUser::new(u).unwrap());
    let op = Op::SubmitRunAs { spec: job(name, queue), request_id: None, run_as };
    match apply(s, as_(token, op))?.outcome {
        Outcome::Submitted { job, .. } => Ok(job),
        other => panic!("submit answered {other:?}"),
    }
}

fn run_as_of(s: &State, job: u64) -> Option<&str> {
    s.tenancy().run_as(job).map(UnixUser::as_str)
}

fn limited(e: &ApplyError) -> bool {
    matches!(e, ApplyError::Limit(_))
}

#[test]
fn a_job_runs_as_its_submitters_user_unless_an_operator_names_another() {
    let mut s = cluster();
    let id = submit_as(&mut s, ALICE, "j1", "a", None).unwrap();
    assert_eq!(run_as_of(&s, id), Some("alice"));
    let id = submit_as(&mut s, ALICE, "j2", "a", Some("alice")).unwrap();
    assert_eq!(run_as_of(&s, id), Some("alice"));
    let op = Op::SubmitRunAs { spec: job("j3", "a"), request_id: None, run_as: Some(UnixUser::new("bob").unwrap()) };
    let e = refused(&mut s, as_(ALICE, op), denied);
    assert!(e.contains("as Unix user bob needs role operator") && e.contains("only as alice"), "{e}");
    let id = submit_as(&mut s, OPERATOR, "j4", "a", Some("svc-train")).unwrap();
    assert_eq!(run_as_of(&s, id), Some("svc-train"));
}

#[test]
fn a_job_asking_to_run_as_root_is_refused_at_submit_unless_the_cluster_allows_it() {
    let mut s = cluster();
    let root = Some(UnixUser::new("root").unwrap());
    let op = Op::SubmitRunAs { spec: job("j", "a"), request_id: None, run_as: root.clone() };
    let e = refused(&mut s, as_(ADMIN, op.clone()), denied);
    assert!(e.contains("may not run as root") && e.contains("allow_root_jobs is off"), "{e}");
    assert!(s.job_by_name("j").is_none());
    let allow = TenancySettings { allow_root_jobs: true, ..TenancySettings::default() };
    refused(&mut s, as_(OPERATOR, Op::SetTenancy(allow)), denied);
    apply(&mut s, as_(ADMIN, Op::SetTenancy(allow))).unwrap();
    let Outcome::Submitted { job, .. } = apply(&mut s, as_(ADMIN, op)).unwrap().outcome else { panic!() };
    assert_eq!(run_as_of(&s, job), Some("root"));
}

#[test]
fn a_submitter_whose_name_is_no_unix_user_name_must_name_one() {
    let mut s = cluster();
    const CAROL: TokenHash = [9; 32];
    apply(&mut s, as_(ADMIN, Op::AddToken { hash: CAROL, spec: spec("Carol.B", &[], &["a"]) })).unwrap();
    let op = Op::SubmitRunAs { spec: job("j", "a"), request_id: None, run_as: None };
    let e = refused(&mut s, as_(CAROL, op), |e| matches!(e, ApplyError::Invalid { .. }));
    assert!(e.contains("run_as") && e.contains("\"Carol.B\" is not a Unix user name"), "{e}");
}

#[test]
fn jobs_per_user_and_per_queue_are_bounded_and_the_refusal_names_the_bound() {
    let mut s = cluster();
    let bounds = TenancySettings { max_jobs_per_user: 2, max_jobs_per_queue: 3, ..TenancySettings::default() };
    apply(&mut s, as_(ADMIN, Op::SetTenancy(bounds))).unwrap();
    let first = submit_as(&mut s, ALICE, "a1", "a", None).unwrap();
    submit_as(&mut s, ALICE, "a2", "a", None).unwrap();
    let op = Op::SubmitRunAs { spec: job("a3", "a"), request_id: None, run_as: None };
    let e = refused(&mut s, as_(ALICE, op.clone()), limited);
    assert!(e.contains("user alice has 2 unfinished jobs") && e.contains("max_jobs_per_user (2)"), "{e}");
    // Another user still has room, until the queue is full.
    submit_as(&mut s, BOB, "b1", "a", None).unwrap();
    let e =
        refused(&mut s, as_(BOB, Op::SubmitRunAs { spec: job("b2", "a"), request_id: None, run_as: None }), limited);
    assert!(e.contains("queue a has 3 unfinished jobs") && e.contains("max_jobs_per_queue (3)"), "{e}");
    // A finished job no longer counts.
    apply(&mut s, as_(ALICE, Op::Cancel { job: first })).unwrap();
    apply(&mut s, as_(ALICE, op)).unwrap();
}

#[test]
fn tenancy_settings_out_of_bounds_are_refused_by_name() {
    let mut s = cluster();
    let zero = TenancySettings { max_jobs_per_queue: 0, ..TenancySettings::default() };
    let e = refused(&mut s, as_(ADMIN, Op::SetTenancy(zero)), |e| matches!(e, ApplyError::Invalid { .. }));
    assert!(e.contains("max_jobs_per_queue must be 1 to"), "{e}");
}

#[test]
fn unix_user_names_are_checked() {
    for ok in ["alice", "_svc", "build-bot2", "a"] {
        UnixUser::new(ok).unwrap();
    }
    for bad in ["", "Alice", "-x", "0", "1000", "a/b", "a.b", "x y", &"a".repeat(33)] {
        assert!(UnixUser::new(bad).is_err(), "{bad:?}");
    }
}

/// The unfinished jobs of each queue and user, counted by scanning every job.
fn scanned_unfinished(s: &State) -> (BTreeMap<Name, u32>, BTreeMap<Name, u32>) {
    let (mut per_queue, mut per_user) = (BTreeMap::new(), BTreeMap::new());
    for j in s.jobs().values().filter(|j| !j.state.is_finished()) {
        *per_queue.entry(j.spec.queue.clone()).or_insert(0) += 1;
        if let Some(user) = s.access().owner(j.id) {
            *per_user.entry(user.clone()).or_insert(0) += 1;
        }
    }
    (per_queue, per_user)
}

#[test]
fn the_bounds_count_unfinished_jobs_kept_up_to_date_which_match_a_scan_and_a_rebuild() {
    let mut s = cluster();
    s.set_retain_finished(1);
    let mut alices = Vec::new();
    for i in 0..4 {
        alices.push(submit_as(&mut s, ALICE, &format!("a{i}"), "a", None).unwrap());
        submit(&mut s, BOB, &format!("b{i}"), "a", None).unwrap();
    }
    submit(&mut s, ADMIN, "admin-b", "b", None).unwrap();
    // Finished jobs stop counting, and pruning them (retention 1) changes nothing.
    for id in &alices[..3] {
        apply(&mut s, as_(ALICE, Op::Cancel { job: *id })).unwrap();
    }
    let counts = s.ledger().unfinished.clone();
    assert_eq!(counts.of_user(&Name::lit("alice")), 1);
    assert_eq!(counts.of_user(&Name::lit("bob")), 4);
    assert_eq!(counts.of_queue(&Name::lit("a")), 5);
    assert_eq!(counts.of_queue(&Name::lit("b")), 1);
    assert_eq!((counts.per_queue.clone(), counts.per_user.clone()), scanned_unfinished(&s));
    s.ledger_consistent().unwrap();
    // A state read back from a snapshot counts the same.
    let back: State = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back.ledger().unfinished, counts);
    // The bound uses the count: alice, with one unfinished job, may submit one more.
    apply(&mut s, as_(ADMIN, Op::SetTenancy(TenancySettings { max_jobs_per_user: 2, ..TenancySettings::default() })))
        .unwrap();
    submit_as(&mut s, ALICE, "a-last", "a", None).unwrap();
    let op = Op::SubmitRunAs { spec: job("a-over", "a"), request_id: None, run_as: None };
    let e = refused(&mut s, as_(ALICE, op), limited);
    assert!(e.contains("user alice has 2 unfinished jobs"), "{e}");
}

/// An array is its owner's, as its elements are: another user of the queue may not submit
/// one to a queue not granted, nor cancel it; its owner and an operator may. Its elements
/// belong to its owner and run as its user.
#[test]
fn an_array_and_its_elements_are_its_submitters() {
    let mut s = cluster();
    let spec = job("sweep", "a");
    let array = baton_model::array::ArraySpec { first: 0, count: 100, max_running: Some(2) };
    let submit = |spec: JobSpec| Op::SubmitArray { spec, array, request_id: None, run_as: None, after: vec![] };
    let why = refused(&mut s, as_(BOB, submit(job("other", "b"))), denied);
    assert!(why.contains("no grant on queue b"), "{why}");
    let Outcome::Submitted { job: id, .. } = apply(&mut s, as_(ALICE, submit(spec))).unwrap().outcome else {
        panic!("not submitted")
    };
    let element = s.job_by_name("sweep-1").unwrap().id;
    assert_eq!(s.access().owner(element).map(|n| n.as_str()), Some("alice"));
    assert_eq!(s.tenancy().run_as(element).map(|u| u.as_str()), Some("alice"));
    let why = refused(&mut s, as_(BOB, Op::CancelArray { array: id }), denied);
    assert!(why.contains("belongs to user alice"), "{why}");
    apply(&mut s, as_(OPERATOR, Op::CancelArray { array: id })).unwrap();
    assert!(s.array(id).unwrap().cancelled);
}

/// Behaviour 2 (issue 39): request ids were one window of 100,000 for every user, so one
/// user's submissions pushed another's ids out and that user's retry made a second job. A
/// raise never lowers the version, and a forwarded raise is refused (the leader's alone).
#[test]
fn the_behaviour_version_is_raised_by_the_leader_only_and_never_lowered() {
    use baton_model::behaviour::{BASELINE, BEHAVIOUR};
    let mut s = State::new();
    assert_eq!(s.behaviour(), BASELINE);
    assert!(Op::SetBehaviour(BEHAVIOUR).leader_only());
    s.apply(Command { now_ms: 1, op: Op::SetBehaviour(BEHAVIOUR) }).unwrap();
    s.apply(Command { now_ms: 2, op: Op::SetBehaviour(BASELINE) }).unwrap();
    assert_eq!(s.behaviour(), BEHAVIOUR);
}
