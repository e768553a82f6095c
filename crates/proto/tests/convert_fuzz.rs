//! The proto-to-model conversions take whatever a network caller sends: messages decoded
//! from arbitrary bytes, valid messages with bytes changed, and arbitrary field values
//! convert to a model value or to an error naming the field, and never panic.

use baton_model::{Command, Op, State};
use baton_proto::convert::{
    class_from_proto, cohort_from_proto, job_spec_from_proto, node_domains_from_agent, node_from_agent,
    queue_from_proto,
};
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1;
use proptest::prelude::*;
use prost::Message;

fn job_bytes() -> Vec<u8> {
    let mut j = gpu_job("train-1", "q", "train", 2, 4, vec!["python".into(), "train.py".into()]);
    j.env.insert("A".into(), "1".into());
    j.pools.push("default".into());
    j.topology = v1::Topology::Node.into();
    j.checkpoint_signal = "SIGUSR1".into();
    j.encode_to_vec()
}

fn queue_bytes() -> Vec<u8> {
    let mut q = gpu_queue("q", 8);
    q.cohort = "lab".into();
    q.ordering = v1::QueueOrdering::StrictFifo.into();
    q.max_priority_threshold = Some(10);
    q.encode_to_vec()
}

fn node_bytes() -> Vec<u8> {
    v1::NodeInfo {
        name: "n1".into(),
        pool: "default".into(),
        rack: "r1".into(),
        labels: [("zone".to_string(), "a".to_string())].into(),
        resources: [("gpu".to_string(), 8), ("cpu".to_string(), 64)].into(),
        gpus: Vec::new(),
        agent_addr: "10.0.0.1:7001".into(),
        domains: [("nvlink".to_string(), "nvl-1".to_string())].into(),
    }
    .encode_to_vec()
}

/// Converts whatever `bytes` decode to, as each message type the API and gateway take.
fn convert_all(bytes: &[u8]) {
    if let Ok(m) = v1::JobSpec::decode(bytes) {
        let _ = job_spec_from_proto(&m);
    }
    if let Ok(m) = v1::Queue::decode(bytes) {
        let _ = queue_from_proto(&m);
    }
    if let Ok(m) = v1::NodeInfo::decode(bytes) {
        let _ = node_from_agent(&m);
        let _ = node_domains_from_agent(&m);
    }
    if let Ok(m) = v1::Cohort::decode(bytes) {
        let _ = cohort_from_proto(&m);
    }
    if let Ok(m) = v1::PriorityClass::decode(bytes) {
        let _ = class_from_proto(&m);
    }
}

fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    proptest::collection::vec((0..len, any::<u8>()), 1..6).prop_map(move |edits| {
        let mut b = base.clone();
        for (i, v) in edits {
            b[i] = v;
        }
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        convert_all(&bytes);
    }

    #[test]
    fn changed_messages_never_panic(
        bytes in prop_oneof![mutated(job_bytes()), mutated(queue_bytes()), mutated(node_bytes())]
    ) {
        convert_all(&bytes);
    }

    #[test]
    fn arbitrary_field_values_never_panic(
        name in prop_oneof!["[a-z][a-z0-9-]{0,10}", ".{0,70}"],
        queue in prop_oneof![Just("q".to_string()), "[a-z.\\-/]{0,4}"],
        replicas in prop_oneof![0..4u32, any::<u32>()],
        gpus in prop_oneof![0..10u64, any::<u64>()],
        grace_ms in proptest::option::of(any::<u64>()),
        min_runtime_ms in any::<u64>(),
        priority_value in proptest::option::of(any::<i32>()),
        topology in prop_oneof![0..4i32, any::<i32>()],
        mode in prop_oneof![0..6i32, any::<i32>()],
        env_key in ".{0,8}",
        resource in prop_oneof![Just("gpu".to_string()), Just("default".to_string()), ".{0,8}"],
        weight in any::<f64>(),
    ) {
        let mut j = gpu_job(&name, &queue, "", replicas, gpus, vec![name.clone()]);
        j.priority_class = if priority_value.is_some() { String::new() } else { "train".into() };
        j.grace_ms = grace_ms;
        j.min_runtime_ms = min_runtime_ms;
        j.priority_value = priority_value;
        j.topology = topology;
        j.preemption_mode = mode;
        j.env.insert(env_key, name.clone());
        j.tasks[0].resources.as_mut().unwrap().amounts.insert(resource.clone(), gpus);
        if let Ok(spec) = job_spec_from_proto(&j) {
            // What the API does next: the state machine checks it against a cluster.
            let _ = cluster().apply(Command { now_ms: 2_000, op: Op::Submit { spec, request_id: None } });
        }
        let mut q = gpu_queue(&name, gpus);
        q.weight = weight;
        q.quotas[0].pool = resource;
        if let Ok(q) = queue_from_proto(&q) {
            let _ = cluster().apply(Command { now_ms: 2_000, op: Op::PutQueue(q) });
        }
    }
}

/// A node with 8 GPUs in pool `default` and a queue `q` on it.
fn cluster() -> State {
    let mut s = State::default();
    let node = node_from_agent(&v1::NodeInfo::decode(node_bytes().as_slice()).unwrap()).unwrap();
    s.apply(Command { now_ms: 1_000, op: Op::RegisterNode(node) }).unwrap();
    let q = queue_from_proto(&gpu_queue("q", 8)).unwrap();
    s.apply(Command { now_ms: 1_000, op: Op::PutQueue(q) }).unwrap();
    s
}
