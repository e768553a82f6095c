//! What one state digest costs each replica (`baton_raft::digest`): hashing the whole state
//! of a 10,000-node cluster with a 50,000-job backlog, one cycle placed (the leader's steady
//! state with a long backlog), and the clone the apply task takes of it under the lock.

#[path = "../../sched/benches/cluster.rs"]
mod cluster;

use criterion::{Criterion, criterion_group, criterion_main};

fn digest(c: &mut Criterion) {
    let state = cluster::with_backlog(10_000);
    let bytes = baton_raft::codec::encoded_len(&state).expect("the state encodes");
    println!("state: {} jobs, {} nodes, {bytes} bytes encoded", state.jobs().len(), state.nodes().len());
    let mut g = c.benchmark_group("state_digest");
    g.sample_size(10);
    g.bench_function("hash 10k nodes 50k jobs", |b| b.iter(|| baton_raft::digest::hash_state(&state).unwrap()));
    g.bench_function("clone under the lock", |b| b.iter(|| state.clone()));
    g.finish();
}

criterion_group!(benches, digest);
criterion_main!(benches);
