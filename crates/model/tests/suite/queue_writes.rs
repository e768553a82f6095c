//! Queue writes from clients that read first: two writers who read the same queue must not
//! both land, or the second silently undoes the first one's change (a lost update); and of
//! two creates of one name, exactly one lands.

use baton_model::command::{Command, Op};
use baton_model::queue::{QueueOrdering, QueueSpec, Visibility};
use baton_model::{ApplyError, Name, State};

fn apply(s: &mut State, op: Op) -> Result<(), ApplyError> {
    s.apply(Command { now_ms: 1_000, op }).map(|_| ())
}

#[test]
fn two_updates_from_one_read_cannot_both_land() {
    let mut s = State::default();
    apply(&mut s, Op::CreateQueue(QueueSpec::named("q"))).unwrap();
    let name = Name::lit("q");
    let read = s.queues()[&name].clone();
    let revision = s.queue_revision(&name).unwrap();
    // Writer A raises the weight; writer B, from the same read, makes the queue strict.
    let a = QueueSpec { weight: 2.0, ..read.clone() };
    let b = QueueSpec { ordering: QueueOrdering::StrictFIFO, ..read };
    apply(&mut s, Op::UpdateQueue { spec: a, revision }).unwrap();
    let now = s.queue_revision(&name).unwrap();
    assert!(now > revision, "a write moves the revision on ({revision} -> {now})");
    let second = apply(&mut s, Op::UpdateQueue { spec: b.clone(), revision });
    assert_eq!(
        second,
        Err(ApplyError::Conflict { kind: "queue".into(), name: "q".into(), read: revision, current: now })
    );
    assert_eq!(
        second.unwrap_err().to_string(),
        format!(
            "queue \"q\" changed since it was read: the write was based on revision {revision}, it is now at \
             revision {now}; read it again and redo the change"
        )
    );
    assert_eq!(s.queues()[&name].weight, 2.0, "A's change is kept");
    // B reads again and redoes its change: both land.
    apply(&mut s, Op::UpdateQueue { spec: QueueSpec { weight: 2.0, ..b }, revision: now }).unwrap();
    assert_eq!((s.queues()[&name].weight, s.queues()[&name].ordering), (2.0, QueueOrdering::StrictFIFO));
}

#[test]
fn a_create_of_a_taken_name_is_refused_and_changes_nothing() {
    let mut s = State::default();
    apply(&mut s, Op::CreateQueue(QueueSpec { weight: 3.0, ..QueueSpec::named("q") })).unwrap();
    let e = apply(&mut s, Op::CreateQueue(QueueSpec::named("q"))).unwrap_err();
    assert_eq!(e, ApplyError::Exists { kind: "queue".into(), name: "q".into() });
    assert_eq!(s.queues()[&Name::lit("q")].weight, 3.0);
}

#[test]
fn revisions_are_never_reused_and_an_update_needs_the_queue() {
    let mut s = State::default();
    let name = Name::lit("q");
    assert_eq!(s.queue_revision(&name), None);
    let e = apply(&mut s, Op::UpdateQueue { spec: QueueSpec::named("q"), revision: 0 }).unwrap_err();
    assert_eq!(e, ApplyError::unknown("queue", "q"));
    apply(&mut s, Op::CreateQueue(QueueSpec::named("q"))).unwrap();
    let first = s.queue_revision(&name).unwrap();
    // An unconditional PutQueue moves the revision too, so a reader of `first` is refused.
    apply(&mut s, Op::PutQueue(QueueSpec::named("q"))).unwrap();
    let put = s.queue_revision(&name).unwrap();
    assert!(put > first);
    // Deleted and made again: a stale update naming an old revision still fails.
    apply(&mut s, Op::DeleteQueue { name: name.clone() }).unwrap();
    apply(&mut s, Op::CreateQueue(QueueSpec::named("q"))).unwrap();
    let again = s.queue_revision(&name).unwrap();
    assert!(again > put, "{again} after {put}");
    let e = apply(&mut s, Op::UpdateQueue { spec: QueueSpec::named("q"), revision: first }).unwrap_err();
    assert!(matches!(e, ApplyError::Conflict { read, current, .. } if read == first && current == again));
}

#[test]
fn a_queue_keeps_its_visibility_through_writes_without_one_and_a_new_queue_starts_at_all() {
    let mut s = State::default();
    let name = Name::lit("q");
    apply(&mut s, Op::CreateQueueVisible { spec: QueueSpec::named("q"), visibility: Visibility::Own }).unwrap();
    assert_eq!(s.queue_visibility(&name), Visibility::Own);
    // A write that says nothing of it (an older client's) leaves it as it is.
    let revision = s.queue_revision(&name).unwrap();
    apply(&mut s, Op::UpdateQueue { spec: QueueSpec { weight: 2.0, ..QueueSpec::named("q") }, revision }).unwrap();
    apply(&mut s, Op::PutQueue(QueueSpec::named("q"))).unwrap();
    assert_eq!(s.queue_visibility(&name), Visibility::Own);
    let revision = s.queue_revision(&name).unwrap();
    let spec = QueueSpec::named("q");
    apply(&mut s, Op::UpdateQueueVisible { spec, revision, visibility: Visibility::Names }).unwrap();
    assert_eq!(s.queue_visibility(&name), Visibility::Names);
    // A refused update (stale revision) changes neither the queue nor its visibility.
    let e =
        apply(&mut s, Op::UpdateQueueVisible { spec: QueueSpec::named("q"), revision, visibility: Visibility::All });
    assert!(matches!(e, Err(ApplyError::Conflict { .. })), "{e:?}");
    assert_eq!(s.queue_visibility(&name), Visibility::Names);
    // Deleted and made again, the queue starts at the default, as every new queue does.
    apply(&mut s, Op::DeleteQueue { name: name.clone() }).unwrap();
    assert_eq!(s.queue_visibility(&name), Visibility::All);
    apply(&mut s, Op::CreateQueue(QueueSpec::named("q"))).unwrap();
    assert_eq!(s.queue_visibility(&name), Visibility::All);
    // A refused create (the name is taken) sets nothing.
    let e = apply(&mut s, Op::CreateQueueVisible { spec: QueueSpec::named("q"), visibility: Visibility::Own });
    assert!(matches!(e, Err(ApplyError::Exists { .. })), "{e:?}");
    assert_eq!(s.queue_visibility(&name), Visibility::All);
}

#[test]
fn only_an_admin_sets_a_queues_visibility() {
    let mut s = State::default();
    apply(&mut s, Op::PutQueue(QueueSpec::named("p"))).unwrap();
    let spec = baton_model::access::TokenSpec {
        user: Name::lit("ann"),
        roles: Default::default(),
        queues: [Name::lit("p")].into_iter().collect(),
    };
    apply(&mut s, Op::AddToken { hash: [1; 32], spec }).unwrap();
    let op = Op::CreateQueueVisible { spec: QueueSpec::named("q"), visibility: Visibility::Own };
    let e = apply(&mut s, Op::As { token: [1; 32], op: Box::new(op) }).unwrap_err();
    assert!(e.to_string().contains("CreateQueueVisible needs role admin"), "{e}");
    assert!(!s.queues().contains_key(&Name::lit("q")));
}
