//! Bad input is refused with the file, the line and the field named, and nothing runs.

const CLUSTER: &str = "nodes:
  - {name: \"n[1-2]\", resources: {gpu: 8}}
queues:
  - {name: q, quota: {gpu: 8}}
";

/// (scenario text, expected line, text the field must contain, text the message must contain)
fn cases() -> Vec<(String, usize, &'static str, &'static str)> {
    let with = |timeline: &str| format!("{CLUSTER}timeline:\n{timeline}");
    vec![
        (format!("{CLUSTER}colour: blue\n"), 5, "colour", "unknown field"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 4x}}}\n"), 6, "timeline[0].submit.resources.gpu", "bad quantity \"4x\""),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1.5}}}\n"), 6, "timeline[0].submit.resources.gpu", "bad quantity \"1.5\" for gpu: a request of 1 GPU or more is whole GPUs"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 0.5, mig-1g.10gb: 1}}}\n"), 6, "timeline[0].submit", "never both"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu.milli: 500}}}\n"), 6, "timeline[0].submit.resources.gpu.milli", "is not written: ask gpu: 0.5"),
        ("nodes:\n  - {name: n1, resources: {gpu: 0.5}}\nqueues:\n  - {name: q, quota: {gpu: 1}}\n".to_string(), 2, "nodes[0].resources.gpu", "bad quantity \"0.5\" for gpu"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1, cpu: 0.0001}}}\n"), 6, "timeline[0].submit.resources.cpu", "bad quantity \"0.0001\" for cpu"),
        (with("  - {at: 0, submit: {name: a, queue: nope, resources: {gpu: 1}}}\n"), 6, "timeline[0].submit.queue", "queue nope is not defined"),
        (with("  - {at: 0, submit: {name: a, queue: q, pools: [gpu-pool], resources: {gpu: 1}}}\n"), 6, "timeline[0].submit.pools", "pool gpu-pool has no nodes"),
        (with("  - {at: 0, finish: ghost}\n"), 6, "timeline[0].finish", "job ghost is not submitted"),
        (with("  - {at: 0, submit: {name: a, queue: q, replicas: 3, resources: {gpu: 8}}}\n"), 6, "timeline[0].submit", "more than all nodes"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 16}}}\n"), 6, "timeline[0].submit", "more than any node"),
        (with("  - {at: -5, submit: {name: a, queue: q, resources: {gpu: 1}}}\n"), 6, "timeline[0].at", "negative"),
        (with("  - {at: 0, submit: {name: a, queue: q, replicas: -1, resources: {gpu: 1}}}\n"), 6, "timeline[0].submit.replicas", "negative"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: -2}}}\n"), 6, "timeline[0].submit.resources.gpu", "negative"),
        (with("  - {at: 0, submit: {name: a, queue: q, priority: urgent, resources: {gpu: 1}}}\n"), 6, "timeline[0].submit.priority", "priority class urgent is not defined"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, gpus: 2}}\n"), 6, "timeline[0].submit.gpus", "unknown field"),
        (with("  - {at: 5, node_down: n9}\n"), 6, "timeline[0].node_down", "node n9 is not defined"),
        (with("  - {at: 5, submit: {name: a, queue: q, resources: {gpu: 1}}}\n  - {at: 1, finish: a}\n"), 7, "timeline[1].at", "ordered by `at`"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}}}\n  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}}}\n"), 7, "timeline[1].submit.name", "submitted twice"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, time_limit: 0}}\n"), 6, "timeline[0].submit.time_limit", "above 0"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, time_limit: soon}}\n"), 6, "timeline[0].submit.time_limit", "soon"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, after: [ok:b]}}\n  - {at: 0, submit: {name: b, queue: q, resources: {gpu: 1}}}\n"), 6, "timeline[0].submit.after[0].job", "job b is not submitted before this step"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, after: [ok:a]}}\n"), 6, "timeline[0].submit.after[0].job", "cannot wait for itself"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, after: [ok:7]}}\n"), 6, "timeline[0].submit.after[0].job", "name the job"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, after: [{job: b, when: later}]}}\n"), 6, "timeline[0].submit.after[0].when", "ok, any, notok, started"),
        (with("  - {at: 0, gpu_unhealthy: {node: n9, gpu: 0, error: XID 79}}\n"), 6, "timeline[0].gpu_unhealthy.node", "node n9 is not defined"),
        (with("  - {at: 0, gpu_unhealthy: {node: n1, gpu: 8, error: XID 79}}\n"), 6, "timeline[0].gpu_unhealthy.gpu", "there is no GPU 8"),
        (with("  - {at: 0, gpu_unhealthy: {node: n1, gpu: 0}}\n"), 6, "timeline[0].gpu_unhealthy.error", "is required"),
        (with("  - {at: 0, gpu_unhealthy: {node: n1, gpu: 0, error: \"\"}}\n"), 6, "timeline[0].gpu_unhealthy.error", "what is wrong"),
        (with("  - {at: 0, gpu_healthy: {node: n1, gpu: -1}}\n"), 6, "timeline[0].gpu_healthy.gpu", "negative"),
        (format!("scheduler: {{reserve_after: soon}}\n{CLUSTER}"), 1, "scheduler.reserve_after", "soon"),
        (format!("scheduler: {{reserve_after: 99999999}}\n{CLUSTER}"), 1, "scheduler.reserve_after", "at most"),
        (format!("scheduler: {{reserve_before: 5}}\n{CLUSTER}"), 1, "scheduler.reserve_before", "unknown field"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, preemption_mode: pause}}\n"), 6, "timeline[0].submit.preemption_mode", "is not one of"),
        (with("  - {at: 0, update_queue: {name: q, quota: {gpu: 1}, colour: red}}\n"), 6, "timeline[0].update_queue.colour", "unknown field"),
        (format!("{CLUSTER}expect:\n  - {{at: 0, jobs: {{ghost: {{state: Running}}}}}}\n"), 6, "expect[0].jobs.ghost", "never submitted"),
        (format!("{CLUSTER}expect:\n  - {{at: 0, counts: {{Sleeping: 1}}}}\n"), 6, "expect[0].counts.Sleeping", "not a job state"),
        ("nodes:\n  - {name: n1, resources: {gpu: 8}}\nqueues:\n  - {name: q, cohort: lab}\n".into(), 4, "queues[0].cohort", "cohort lab is not defined"),
        ("nodes:\n  - {name: n1, resources: {gpu: 8}}\nqueues:\n  - {name: q, quotas: [{pool: a100, nominal: {gpu: 1}}]}\n".into(), 4, "queues[0].quotas", "pool a100 has no nodes"),
        ("nodes:\n  - {name: \"n[3-1]\", resources: {gpu: 8}}\n".into(), 2, "nodes[0].name", "goes backwards"),
        ("nodes:\n  - {name: n1, resources: {gpu: 8}}\n  - {name: n1, resources: {gpu: 8}}\n".into(), 3, "nodes[1].name", "defined twice"),
        ("nodes:\n  - {name: root, resources: {gpu: 8}}\n".into(), 2, "nodes[0].name", "reserved"),
        // Topology levels (decisions.md section 10).
        ("topology_levels: [nvlink, nvlink]\nnodes:\n  - {name: n1, resources: {gpu: 8}}\n".into(), 1, "topology_levels", "declared twice"),
        ("topology_levels: [NVLink]\nnodes:\n  - {name: n1, resources: {gpu: 8}}\n".into(), 1, "topology_levels[0]", "bad topology level"),
        ("nodes:\n  - {name: n1, topology: {nvlink: x}, resources: {gpu: 8}}\n".into(), 2, "nodes[0].topology.nvlink", "level nvlink is not declared"),
        ("topology_levels: [nvlink]\nnodes:\n  - {name: n1, rack: r1, topology: {nvlink: x, rack: r2}, resources: {gpu: 8}}\n".into(), 3, "nodes[0].topology.rack", "level rack is not declared"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, topology: {required: nvlink}}}\n"), 6, "timeline[0].submit.topology", "topology level nvlink is not one this cluster declares"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, topology: {preferred: node}}}\n"), 6, "timeline[0].submit.topology", "preferred: node"),
        (with("  - {at: 0, submit: {name: a, queue: q, resources: {gpu: 1}, topology: {wanted: rack}}}\n"), 6, "timeline[0].submit.topology.wanted", "unknown field"),
        ("nodes:\n  - {name: n1, resources: {gpu: 8}}\n  bad indent\n".into(), 4, "", "not valid YAML"),
    ]
}

#[test]
fn bad_input_names_file_line_and_field() {
    for (text, line, field, message) in cases() {
        let err = match baton_sim::run("bad.yaml", &text) {
            Err(baton_sim::Error::Input(e)) => e,
            other => panic!("expected an input error for:\n{text}\ngot {other:?}"),
        };
        assert_eq!(err.file, "bad.yaml");
        assert_eq!(err.line, line, "line for {err}\n{text}");
        assert!(err.field.contains(field), "field {:?} should contain {field:?}: {err}", err.field);
        assert!(err.message.contains(message), "message should contain {message:?}: {err}");
        let shown = err.to_string();
        assert!(shown.starts_with(&format!("bad.yaml:{line}:")), "{shown}");
    }
}
