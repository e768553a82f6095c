//! Input the state machine must refuse: forged clocks, names that reach a filesystem, and job
//! environments and commands an agent could not (or must not) run.

use baton_model::command::{Command, Op};
use baton_model::fixture;
use baton_model::job::JobSpec;
use baton_model::limits::MAX_CLOCK_MS;
use baton_model::name::NameError;
use baton_model::node::NodeSpec;
use baton_model::{ApplyError, Name, State};

fn apply(s: &mut State, now_ms: u64, op: Op) -> Result<(), ApplyError> {
    s.apply(Command { now_ms, op }).map(|_| ())
}

fn node(name: &str) -> NodeSpec {
    fixture::gpu_node(name, 8)
}

/// A cluster with one node and a queue `q` that may use it.
fn cluster() -> State {
    let mut s = State::default();
    apply(&mut s, 1_000, Op::RegisterNodes(vec![node("n1")])).unwrap();
    apply(&mut s, 1_000, Op::PutQueue(fixture::gpu_queue("q", 8))).unwrap();
    s
}

fn job(name: &str) -> JobSpec {
    JobSpec { command: vec!["python".into(), "train.py".into()], ..fixture::gpu_job(name, "q", 1) }
}

fn submit(s: &mut State, spec: JobSpec) -> Result<(), ApplyError> {
    apply(s, 2_000, Op::Submit { spec, request_id: None })
}

/// The field an `Invalid` refusal names, and its message.
fn invalid(r: Result<(), ApplyError>) -> (String, String) {
    match r {
        Err(ApplyError::Invalid { field, message }) => (field, message),
        other => panic!("expected an invalid-field refusal, got {other:?}"),
    }
}

#[test]
fn a_forged_clock_far_in_the_future_is_refused_and_moves_nothing() {
    let mut s = cluster();
    let before = s.now_ms();
    for op in [Op::Tick, Op::Cordon { node: Name::lit("n1"), cordoned: true }] {
        let (field, message) = invalid(apply(&mut s, u64::MAX, op));
        assert_eq!(field, "now_ms");
        assert!(message.contains(&MAX_CLOCK_MS.to_string()), "{message}");
    }
    assert_eq!(s.now_ms(), before, "a refused stamp must not move the replicated clock");
    assert!(!s.nodes()[&Name::lit("n1")].cordoned, "a refused command changes nothing");
    // A plausible stamp still works afterwards: the clock was not pinned.
    apply(&mut s, 5_000, Op::Tick).unwrap();
    assert_eq!(s.now_ms(), 5_000);
}

#[test]
fn a_tick_from_behind_the_replicated_clock_is_refused() {
    let mut s = cluster();
    apply(&mut s, 10_000, Op::Tick).unwrap();
    let (field, message) = invalid(apply(&mut s, 9_000, Op::Tick));
    assert_eq!(field, "now_ms");
    assert!(message.contains("behind") && message.contains("10000"), "{message}");
    assert_eq!(s.now_ms(), 10_000);
    // A tick at the same instant is a repeat, not a step back.
    apply(&mut s, 10_000, Op::Tick).unwrap();
}

#[test]
fn names_that_are_paths_or_options_are_refused() {
    for bad in [".", "..", "-rf", "-", "a/b", "a\0b"] {
        assert!(Name::new(bad).is_err(), "{bad:?} must be refused");
    }
    assert!(matches!(Name::new(".."), Err(NameError::Dots(_))));
    assert!(matches!(Name::new("-x"), Err(NameError::LeadingDash(_))));
    for good in ["a.b", ".hidden", "a..b", "x-", "n-1", "_x"] {
        assert!(Name::new(good).is_ok(), "{good:?} must be accepted");
    }
    let err = Name::new("..").unwrap_err().to_string();
    assert!(err.contains("\"..\""), "{err}");
}

#[test]
fn job_names_that_are_paths_never_reach_the_state() {
    // Through serde, as the simulator and a decoded log entry build names.
    for bad in ["\".\"", "\"..\"", "\"-x\""] {
        assert!(serde_json::from_str::<Name>(bad).is_err(), "{bad} must not decode");
    }
}

#[test]
fn env_keys_must_be_shell_identifiers() {
    let mut s = cluster();
    for key in ["", "A=B", "A\0", "1ABC", "A-B", "A B", "é"] {
        let mut spec = job("j");
        spec.env.insert(key.into(), "v".into());
        let (field, message) = invalid(submit(&mut s, spec));
        assert!(field.starts_with("env"), "{key:?}: {field}");
        assert!(message.contains("[A-Za-z_][A-Za-z0-9_]*"), "{key:?}: {message}");
    }
    assert!(s.jobs().is_empty());
    let mut spec = job("ok");
    spec.env.insert("CUDA_VISIBLE_DEVICES_X".into(), "1".into());
    spec.env.insert("_private".into(), "x".into());
    spec.env.insert("LD_LIBRARY_PATH".into(), "/usr/local/cuda/lib64".into());
    submit(&mut s, spec).unwrap();
}

#[test]
fn dynamic_loader_injection_is_refused() {
    let mut s = cluster();
    for key in ["LD_PRELOAD", "LD_AUDIT", "ld_preload"] {
        let mut spec = job("j");
        spec.env.insert(key.into(), "/tmp/evil.so".into());
        let (field, message) = invalid(submit(&mut s, spec));
        assert!(field.starts_with("env"), "{key}: {field}");
        assert!(message.contains(key), "{key}: {message}");
    }
}

#[test]
fn env_values_may_not_hold_nul() {
    let mut s = cluster();
    let mut spec = job("j");
    spec.env.insert("A".into(), "x\0y".into());
    let (field, message) = invalid(submit(&mut s, spec));
    assert_eq!(field, "env[A]");
    assert!(message.contains("NUL"), "{message}");
}

#[test]
fn the_environment_is_bounded_in_total_bytes() {
    use baton_model::limits::{MAX_ENV_BYTES, MAX_ENV_VARS};
    let mut s = cluster();
    let mut spec = job("j");
    // Each entry is within its own bound, together they are not.
    let per = MAX_ENV_BYTES / (MAX_ENV_VARS - 1);
    for i in 0..MAX_ENV_VARS {
        spec.env.insert(format!("V{i}"), "x".repeat(per));
    }
    let (field, message) = invalid(submit(&mut s, spec));
    assert_eq!(field, "env");
    assert!(message.contains(&MAX_ENV_BYTES.to_string()), "{message}");
}

#[test]
fn commands_are_bounded_and_hold_no_nul() {
    use baton_model::limits::MAX_COMMAND_BYTES;
    let mut s = cluster();
    let mut spec = job("j");
    spec.command = vec!["a\0b".into()];
    let (field, message) = invalid(submit(&mut s, spec));
    assert_eq!(field, "command[0]");
    assert!(message.contains("NUL"), "{message}");

    let mut spec = job("j");
    spec.command = (0..200).map(|_| "x".repeat(2_000)).collect();
    let (field, message) = invalid(submit(&mut s, spec));
    assert_eq!(field, "command");
    assert!(message.contains(&MAX_COMMAND_BYTES.to_string()), "{message}");

    let mut spec = job("j");
    spec.command = vec![String::new()];
    let (field, _) = invalid(submit(&mut s, spec));
    assert_eq!(field, "command[0]");
}

#[test]
fn node_labels_are_bounded_and_plain() {
    let mut s = State::default();
    let mut n = node("n1");
    n.labels.insert("a=b".into(), "x".into());
    let (field, _) = invalid(apply(&mut s, 1_000, Op::RegisterNode(n)));
    assert!(field.starts_with("labels"), "{field}");
    let mut n = node("n1");
    n.labels.insert("zone".into(), "a\0b".into());
    let (field, _) = invalid(apply(&mut s, 1_000, Op::RegisterNode(n)));
    assert!(field.starts_with("labels"), "{field}");
}

/// A state with a job placed on `n1`, as JSON, for tests that damage it.
fn placed_state_json() -> serde_json::Value {
    let mut s = cluster();
    submit(&mut s, job("j")).unwrap();
    let plan = baton_model::plan::Plan {
        based_on: s.applied(),
        decisions: vec![baton_model::plan::Decision::Place {
            job: 1,
            attempt: 1,
            replicas: vec![baton_model::alloc::ReplicaAlloc {
                task: 0,
                index: 0,
                node: Name::lit("n1"),
                gpus: vec![0],
            }],
        }],
    };
    s.apply(Command { now_ms: 3_000, op: Op::ApplyPlan(plan) }).unwrap();
    assert!(!s.jobs()[&1].replicas.is_empty(), "the job runs");
    serde_json::to_value(&s).unwrap()
}

/// Regression cases the snapshot fuzzer found: a snapshot whose references dangle is
/// refused when it decodes, instead of panicking while the ledger is built from it.
#[test]
fn a_snapshot_with_dangling_references_is_refused_not_a_panic() {
    type Damage = fn(&mut serde_json::Value);
    // A state serializes as [data, access]; the references checked are in the data.
    let damages: [(&str, Damage); 5] = [
        ("places task 7", |v| v[0]["jobs"]["1"]["replicas"][0]["task"] = 7.into()),
        ("queue nope, which does not exist", |v| v[0]["jobs"]["1"]["spec"]["queue"] = "nope".into()),
        ("recorded with id 9", |v| v[0]["jobs"]["1"]["id"] = 9.into()),
        ("holds GPU 200", |v| v[0]["jobs"]["1"]["replicas"][0]["gpus"][0] = 200.into()),
        ("does not carry it", |v| v[0]["job_names"]["j"] = 5.into()),
    ];
    for (what, damage) in damages {
        let mut v = placed_state_json();
        damage(&mut v);
        let err = serde_json::from_value::<State>(v).expect_err(what).to_string();
        assert!(err.contains(what), "{what}: {err}");
    }
    // The undamaged state still decodes.
    serde_json::from_value::<State>(placed_state_json()).unwrap();
}

#[test]
fn variables_the_agent_sets_per_replica_are_refused_not_silently_overridden() {
    let mut s = cluster();
    for key in ["CUDA_VISIBLE_DEVICES", "BATON_RANK", "BATON_RESUME", "BATON_ANYTHING"] {
        let mut spec = job("j");
        spec.env.insert(key.into(), "0".into());
        let (field, message) = invalid(submit(&mut s, spec));
        assert_eq!(field, format!("env[{key}]"));
        assert!(message.contains("the agent sets"), "{key}: {message}");
    }
}

#[test]
fn what_an_agent_says_of_its_node_is_bounded() {
    use baton_model::node::GpuInfo;
    let gpu =
        |index: u32, uuid: String| GpuInfo { index, uuid, model: "H100".into(), memory_bytes: 80 << 30, healthy: true };
    let cases: Vec<(&str, NodeSpec)> = vec![
        ("gpus", NodeSpec { gpus: (0..65).map(|i| gpu(i, format!("GPU-{i}"))).collect(), ..node("n1") }),
        ("gpus[0].index", NodeSpec { gpus: vec![gpu(64, "GPU-0".into())], ..node("n1") }),
        ("gpus[0].uuid", NodeSpec { gpus: vec![gpu(0, "u".repeat(1_000))], ..node("n1") }),
        ("agent_addr", NodeSpec { agent_addr: "h".repeat(1_000), ..node("n1") }),
        ("agent_addr", NodeSpec { agent_addr: "10.0.0.1:7001\n".into(), ..node("n1") }),
    ];
    for (want, spec) in cases {
        let mut s = State::default();
        let (field, _) = invalid(apply(&mut s, 1_000, Op::RegisterNode(spec)));
        assert_eq!(field, want);
        assert!(s.nodes().is_empty());
    }
}
