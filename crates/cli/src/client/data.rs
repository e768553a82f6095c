//! Messages as data for `-o json` and `-o yaml`: every field of the proto message under its
//! proto name (snake_case), defaults included, absent optionals as null, maps with sorted
//! keys, so scripts can rely on the shape. Hand-written because the generated types carry no
//! serde derives.

use std::collections::HashMap;

use baton_proto::v1;
use baton_proto::words::Word;
use serde_json::{Map, Value, json};

pub trait ToData {
    fn to_data(&self) -> Value;
}

impl<T: ToData> ToData for [T] {
    fn to_data(&self) -> Value {
        Value::Array(self.iter().map(ToData::to_data).collect())
    }
}

impl<T: ToData> ToData for Option<T> {
    fn to_data(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToData::to_data)
    }
}

fn map<V: Into<Value> + Clone>(m: &HashMap<String, V>) -> Value {
    // serde_json's Map sorts its keys, which keeps the output stable.
    Value::Object(m.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect::<Map<_, _>>())
}

impl ToData for v1::Resources {
    fn to_data(&self) -> Value {
        json!({ "amounts": map(&self.amounts) })
    }
}

impl ToData for v1::TaskSpec {
    fn to_data(&self) -> Value {
        json!({
            "name": self.name,
            "replicas": self.replicas,
            "resources": self.resources.to_data(),
            "pools": self.pools,
        })
    }
}

impl ToData for v1::JobSpec {
    fn to_data(&self) -> Value {
        json!({
            "name": self.name,
            "queue": self.queue,
            "priority_class": self.priority_class,
            "priority_value": self.priority_value,
            "tasks": self.tasks.to_data(),
            "pools": self.pools,
            "topology": self.topology().word(),
            "preemption_mode": self.preemption_mode().word(),
            "grace_ms": self.grace_ms,
            "min_runtime_ms": self.min_runtime_ms,
            "command": self.command,
            "env": map(&self.env),
            "checkpoint_signal": self.checkpoint_signal,
        })
    }
}

impl ToData for v1::Placement {
    fn to_data(&self) -> Value {
        json!({ "node": self.node, "gpus": self.gpus })
    }
}

impl ToData for v1::Event {
    fn to_data(&self) -> Value {
        json!({
            "at_ms": self.at_ms,
            "job": self.job,
            "node": self.node,
            "kind": v1::EventKind::word_of(self.kind),
            "message": self.message,
            "nodes": self.nodes,
            "attempt": self.attempt,
        })
    }
}

impl ToData for v1::Job {
    fn to_data(&self) -> Value {
        json!({
            "id": self.id,
            "spec": self.spec.to_data(),
            "state": self.state().word(),
            "priority": self.priority,
            "preemptible": self.preemptible,
            "attempt": self.attempt,
            "placements": self.placements.to_data(),
            "reason": self.reason,
            "has_checkpoint": self.has_checkpoint,
            "exit_code": self.exit_code,
            "submitted_ms": self.submitted_ms,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "events": self.events.to_data(),
            "preempted_by": self.preempted_by,
        })
    }
}

impl ToData for v1::ListJobsReply {
    fn to_data(&self) -> Value {
        json!({ "jobs": self.jobs.to_data(), "truncated": self.truncated })
    }
}

impl ToData for v1::SubmitReply {
    fn to_data(&self) -> Value {
        json!({ "id": self.id, "name": self.name, "duplicate": self.duplicate })
    }
}

impl ToData for v1::PoolQuota {
    fn to_data(&self) -> Value {
        json!({
            "pool": self.pool,
            "nominal": self.nominal.to_data(),
            "borrow_limit": map(&self.borrow_limit),
            "lend_limit": map(&self.lend_limit),
        })
    }
}

impl ToData for v1::Queue {
    fn to_data(&self) -> Value {
        json!({
            "name": self.name,
            "cohort": self.cohort,
            "quotas": self.quotas.to_data(),
            "weight": self.weight,
            "ordering": self.ordering().word(),
            "within_queue": self.within_queue().word(),
            "reclaim_within_cohort": self.reclaim_within_cohort().word(),
            "borrow_within_cohort": self.borrow_within_cohort,
            "max_priority_threshold": self.max_priority_threshold,
        })
    }
}

impl ToData for v1::PoolUsage {
    fn to_data(&self) -> Value {
        json!({ "pool": self.pool, "used": self.used.to_data(), "capacity": self.capacity.to_data() })
    }
}

impl ToData for v1::QueueUsage {
    fn to_data(&self) -> Value {
        json!({
            "queue": self.queue.to_data(),
            "pools": self.pools.to_data(),
            "pending": self.pending,
            "running": self.running,
            "revision": self.revision,
        })
    }
}

impl ToData for v1::Cohort {
    fn to_data(&self) -> Value {
        json!({ "name": self.name, "parent": self.parent, "fair_sharing": self.fair_sharing })
    }
}

impl ToData for v1::PriorityClass {
    fn to_data(&self) -> Value {
        json!({ "name": self.name, "value": self.value, "preemptible": self.preemptible })
    }
}

impl ToData for v1::Gpu {
    fn to_data(&self) -> Value {
        json!({
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "memory_bytes": self.memory_bytes,
            "healthy": self.healthy,
        })
    }
}

impl ToData for v1::Node {
    fn to_data(&self) -> Value {
        json!({
            "name": self.name,
            "pool": self.pool,
            "rack": self.rack,
            "labels": map(&self.labels),
            "resources": self.resources.to_data(),
            "gpus": self.gpus.to_data(),
            "status": self.status().word(),
            "cordoned": self.cordoned,
            "used": self.used.to_data(),
            "jobs": self.jobs,
            "last_seen_ms_ago": self.last_seen_ms_ago,
            "agent_addr": self.agent_addr,
        })
    }
}

impl ToData for v1::Replica {
    fn to_data(&self) -> Value {
        json!({
            "id": self.id,
            "addr": self.addr,
            "peer_addr": self.peer_addr,
            "role": self.role().word(),
            "failure": self.failure,
            "rack": self.rack,
            "version": self.version,
            "format": self.format,
        })
    }
}

impl ToData for v1::ClusterInfoReply {
    fn to_data(&self) -> Value {
        json!({
            "cluster_id": self.cluster_id,
            "replicas": self.replicas.to_data(),
            "leader_id": self.leader_id,
            "leader_addr": self.leader_addr,
            "term": self.term,
            "applied_index": self.applied_index,
            "answered_by": self.answered_by,
            "pools": self.pools.to_data(),
            "queues": self.queues.to_data(),
            "jobs_pending": self.jobs_pending,
            "jobs_running": self.jobs_running,
            "insecure": self.insecure,
        })
    }
}

impl ToData for v1::Ack {
    fn to_data(&self) -> Value {
        json!({ "events": self.events.to_data() })
    }
}
