//! The data directory's format version (`format=` in `cluster.id`): a replica refuses a
//! format newer than it reads, naming the file and the version, and reads the formats older
//! builds wrote (the rolling-upgrade rule in docs/ops.md).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use baton_raft::error::OpenError;
use baton_raft::identity::{DATA_FORMAT, IDENTITY_FILE, Identity};
use baton_raft::replica::{Replica, ReplicaConfig};
use common::*;

/// A one-replica cluster with a few committed writes, stopped; returns its data directory.
async fn stopped_replica_with_data(root: &Path) -> std::path::PathBuf {
    let dir = root.join("r1");
    let (l, _) = listener().await;
    let node = Node::start(1, CLUSTER, &dir, l, settings()).await;
    node.replica.bootstrap(BTreeMap::from([(1, node.addr.clone())])).await.unwrap();
    wait_for("the single replica to lead", || (node.replica.metrics().leader_id == Some(1)).then_some(())).await;
    for i in 0..5 {
        node.replica.write(put(&format!("w{i}"))).await.unwrap().unwrap();
    }
    node.stop().await;
    dir
}

async fn reopen(dir: &Path) -> Result<Replica, OpenError> {
    Replica::open(ReplicaConfig::new(1, CLUSTER, "127.0.0.1:1", dir)).await
}

#[tokio::test]
async fn a_new_data_directory_records_this_builds_format() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let text = std::fs::read_to_string(dir.join(IDENTITY_FILE)).unwrap();
    assert!(text.contains(&format!("\nformat={DATA_FORMAT}\n")), "{text}");
    assert_eq!(Identity::read(&dir).unwrap().unwrap().format, DATA_FORMAT);
}

#[tokio::test]
async fn a_data_directory_of_a_future_format_is_refused_naming_the_file_and_version() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    let future = DATA_FORMAT + 1;
    Identity { cluster_id: CLUSTER.into(), node_id: 1, format: future }.write(&dir).unwrap();
    let err = reopen(&dir).await.err().expect("a future format must be refused");
    let text = err.to_string();
    assert!(matches!(err, OpenError::FormatTooNew { .. }), "{text}");
    let file = dir.join(IDENTITY_FILE).display().to_string();
    assert!(text.contains(&file) && text.contains(&format!("format {future}")), "{text}");
    // Nothing was changed: the file still says the future format.
    assert_eq!(Identity::read(&dir).unwrap().unwrap().format, future);
}

/// `cluster.id` as builds before the format field wrote it (format 1): no `format=` line.
fn write_format_1_identity(dir: &Path) {
    let body = format!("baton-raft identity v1\ncluster_id={CLUSTER}\nnode_id=1\n");
    let text = format!("{body}crc32={:08x}\n", crc32fast::hash(body.as_bytes()));
    std::fs::write(dir.join(IDENTITY_FILE), text).unwrap();
}

#[tokio::test]
async fn a_data_directory_an_older_build_wrote_opens_with_its_state_and_is_marked_current() {
    let root = tempfile::tempdir().unwrap();
    let dir = stopped_replica_with_data(root.path()).await;
    write_format_1_identity(&dir);
    assert_eq!(Identity::read(&dir).unwrap().unwrap().format, 1, "no format line reads as format 1");
    let replica = reopen(&dir).await.expect("format 1 is readable");
    wait_for("the old log to be applied", || replica.read_local(|s| has(s, "w4")).then_some(())).await;
    assert_eq!(Identity::read(&dir).unwrap().unwrap().format, DATA_FORMAT);
    replica.shutdown().await;
}
