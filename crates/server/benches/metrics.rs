//! What one scrape of `/metrics` costs a replica at 10,000 nodes with 40,000 jobs running
//! and 10,000 waiting (`baton bench scale`'s cluster once its backlog is placed): every state
//! gauge recomputed, then the text written. A scrape reads a clone of the state; what it
//! holds the state machine's lock for is the clone (`metrics/10k-nodes-clone-for-a-scrape`).

mod running;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_model::command::Op;
use baton_model::fixture::gpu_job;
use baton_raft::{ReplicaMetrics, Role, WriteCounts};
use baton_server::metrics::Metrics;
use criterion::{Criterion, criterion_group, criterion_main};
use running::{NODES, apply, running_cluster};

fn leader() -> ReplicaMetrics {
    ReplicaMetrics {
        node_id: 1,
        role: Role::Leader,
        term: 2,
        leader_id: Some(1),
        leader_addr: None,
        leader_peer_addr: None,
        members: BTreeMap::new(),
        voters: BTreeSet::from([1]),
        learners: BTreeSet::new(),
        last_log_index: Some(100),
        last_applied_index: Some(100),
        snapshot_index: None,
        purged_index: None,
    }
}

fn bench(c: &mut Criterion) {
    let (mut s, _) = running_cluster();
    for i in 0..NODES {
        apply(&mut s, Op::Submit { spec: gpu_job(&format!("w{i}"), "q", 1), request_id: None });
    }
    let metrics = Metrics::new();
    let (raft, writes) = (leader(), WriteCounts::default());
    let mut g = c.benchmark_group("metrics");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("10k-nodes-40k-running-10k-waiting-scrape", |b| {
        b.iter(|| metrics.render(&s, &raft, &writes).len())
    });
    g.bench_function("10k-nodes-clone-for-a-scrape", |b| b.iter(|| s.clone()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
