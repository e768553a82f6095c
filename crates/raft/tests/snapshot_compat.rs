//! Snapshots written before tokens existed still load: the fixture is the bincode of a
//! state (a node, queue `q`, job `train` submitted with request id `r1`) made by the code
//! just before the identity part was added to the state.

use baton_model::access::Role;
use baton_model::command::{Command, Op, Outcome};
use baton_model::{Name, State};
use baton_raft::codec::{decode, decode_state, encode};

const BEFORE_TOKENS: &[u8] = include_bytes!("fixtures/state-before-tokens.bin");

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
    let spec = baton_model::access::TokenSpec {
        user: Name::lit("admin"),
        roles: [Role::Admin].into_iter().collect(),
        queues: Default::default(),
    };
    s.apply(Command { now_ms: 5_000, op: Op::AddToken { hash: [7; 32], spec } }).unwrap();
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
    let spec = baton_model::access::TokenSpec {
        user: Name::lit("admin"),
        roles: [Role::Admin].into_iter().collect(),
        queues: Default::default(),
    };
    s.apply(Command { now_ms: 5_000, op: Op::AddToken { hash: [7; 32], spec } }).unwrap();
    // The layout before tenancy is the current one without its last two parts (tenancy and
    // the queue revisions, none here): serde writes a tuple as its parts one after another.
    let bytes = encode(&s).unwrap();
    let no_revisions = encode(&std::collections::BTreeMap::<Name, u64>::new()).unwrap().len();
    let tail = encode(&baton_model::tenancy::Tenancy::default()).unwrap().len() + no_revisions;
    let before_tenancy = &bytes[..bytes.len() - tail];
    assert!(decode::<State>(before_tenancy).is_err(), "the current layout alone cannot read it");
    let back = decode_state(before_tenancy).unwrap();
    assert_eq!(back, s);
    assert!(back.access().enforced());
    assert_eq!(*back.tenancy().settings(), baton_model::tenancy::TenancySettings::default());
}

#[test]
fn a_snapshot_from_before_queue_revisions_loads_with_its_queues_at_revision_0() {
    let s = decode_state(BEFORE_TOKENS).unwrap();
    let q = Name::lit("q");
    assert_eq!(s.queue_revision(&q), Some(0));
    // The layout before revisions is the current one without its last part.
    let bytes = encode(&s).unwrap();
    let tail = encode(&std::collections::BTreeMap::<Name, u64>::new()).unwrap().len();
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
