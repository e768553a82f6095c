//! A replica whose disk fills up or fails: it refuses writes with the disk's error, keeps
//! serving local reads, resumes by itself once the disk takes writes again, and its log is
//! intact.

use crate::common;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_raft::error::WriteError;
use baton_raft::metrics::Role;
use baton_raft::replica::{Replica, ReplicaConfig, SharedStore, Storage};
use baton_raft::settings::RaftSettings;
use baton_raft::store::{KvError, KvStore, LogStore, MemKv, Space, Write};
use common::{CLUSTER, WAIT, has, put};

/// A disk that can be told to fail every write (or only syncs) with an OS error.
#[derive(Default)]
struct FaultyKv {
    inner: MemKv,
    /// The OS error every write fails with while set.
    fail_writes: Mutex<Option<i32>>,
    /// The OS error every flush fails with while set.
    fail_flushes: Mutex<Option<i32>>,
}

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

impl FaultyKv {
    fn fault(&self, slot: &Mutex<Option<i32>>) -> Result<(), KvError> {
        match *slot.lock().unwrap() {
            Some(code) => Err(KvError {
                location: "faulty disk (log)".into(),
                message: std::io::Error::from_raw_os_error(code).to_string(),
            }),
            None => Ok(()),
        }
    }
}

impl KvStore for FaultyKv {
    fn get(&self, space: Space, key: u64) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(space, key)
    }
    fn scan(&self, space: Space, keys: Range<u64>, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, KvError> {
        self.inner.scan(space, keys, limit)
    }
    fn last(&self, space: Space) -> Result<Option<(u64, Vec<u8>)>, KvError> {
        self.inner.last(space)
    }
    fn write(&self, batch: &[Write]) -> Result<(), KvError> {
        self.fault(&self.fail_writes)?;
        self.inner.write(batch)
    }
    fn flush(&self) -> Result<(), KvError> {
        self.fault(&self.fail_flushes)
    }
    fn close(&self) -> Result<(), KvError> {
        Ok(())
    }
    fn is_durable(&self) -> bool {
        true
    }
    fn location(&self, space: Space) -> String {
        format!("faulty disk ({})", space.name())
    }
}

/// A single replica on `disk`, leading its one-member cluster.
async fn single(disk: Arc<FaultyKv>) -> Replica {
    let config = ReplicaConfig {
        node_id: 1,
        cluster_id: CLUSTER.into(),
        advertise_addr: "127.0.0.1:1".into(),
        storage: Storage::Store(SharedStore(disk)),
        // Short, so the write caught by the fault gives up waiting quickly.
        settings: RaftSettings { request_timeout_ms: 500, ..RaftSettings::default() },
        rack: None,
        max_format: baton_raft::identity::DATA_FORMAT,
        clock: baton_raft::replica::WallClock::system(),
    };
    let replica = Replica::open(config).await.expect("open replica");
    replica.bootstrap(BTreeMap::from([(1, "127.0.0.1:1".to_string())])).await.unwrap();
    common::wait_for("the replica to lead", || (replica.metrics().role == Role::Leader).then_some(())).await;
    replica
}

/// Writes until one is refused for the disk (the first may only time out: it reached the
/// log before the disk failed).
async fn refusal(replica: &Replica) -> String {
    for i in 0..20 {
        match replica.write(put(&format!("refused-{i}"))).await {
            Err(e @ WriteError::DiskFailing { .. }) => return e.to_string(),
            Err(_) => {}
            Ok(r) => panic!("a write succeeded on a failing disk: {r:?}"),
        }
    }
    panic!("no write was refused for the disk");
}

/// Waits until a write succeeds again.
async fn resumed(replica: &Replica, name: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match replica.write(put(name)).await {
            Ok(r) => return assert!(r.is_ok(), "{r:?}"),
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("writes did not resume: {e}"),
        }
    }
}

#[tokio::test]
async fn a_full_disk_refuses_writes_serves_reads_and_resumes() {
    let disk = Arc::new(FaultyKv::default());
    let replica = single(disk.clone()).await;
    replica.write(put("before")).await.unwrap().unwrap();

    *disk.fail_writes.lock().unwrap() = Some(ENOSPC);
    let err = refusal(&replica).await;
    assert!(err.contains("No space left on device") && err.contains("faulty disk (log)"), "{err}");
    // Local reads still work. A linearizable read here may time out (openraft's core waits
    // for the stalled log flush before it confirms leadership), but never answers wrongly.
    assert!(replica.read_local(|s| has(s, "before")));
    if let Ok(seen) = replica.read(|s| has(s, "before")).await {
        assert!(seen);
    }

    *disk.fail_writes.lock().unwrap() = None;
    resumed(&replica, "after").await;
    assert!(replica.read(|s| has(s, "before") && has(s, "after")).await.unwrap());
    replica.shutdown().await;

    // Nothing was corrupted: the log opens and holds both writes.
    assert!(LogStore::open(disk.clone(), 16).is_ok());
    let replica = Replica::open(ReplicaConfig {
        node_id: 1,
        cluster_id: CLUSTER.into(),
        advertise_addr: "127.0.0.1:1".into(),
        storage: Storage::Store(SharedStore(disk)),
        settings: RaftSettings::default(),
        rack: None,
        max_format: baton_raft::identity::DATA_FORMAT,
        clock: baton_raft::replica::WallClock::system(),
    })
    .await
    .expect("reopen");
    common::wait_for("the reopened replica to apply both writes", || {
        replica.read_local(|s| has(s, "before") && has(s, "after")).then_some(())
    })
    .await;
    replica.shutdown().await;
}

/// A failed sync is not retried (a second fsync may report success for lost pages): the
/// replica refuses writes with the error and stops; a restart finds every acknowledged write.
#[tokio::test]
async fn a_failed_sync_stops_the_replica_and_a_restart_recovers() {
    let disk = Arc::new(FaultyKv::default());
    let replica = single(disk.clone()).await;
    replica.write(put("before")).await.unwrap().unwrap();
    *disk.fail_flushes.lock().unwrap() = Some(EIO);
    let err = refusal(&replica).await;
    assert!(err.contains("Input/output error") && err.contains("faulty disk (log)"), "{err}");
    assert!(replica.read_local(|s| has(s, "before")));
    replica.shutdown().await;

    *disk.fail_flushes.lock().unwrap() = None;
    let replica = Replica::open(ReplicaConfig {
        node_id: 1,
        cluster_id: CLUSTER.into(),
        advertise_addr: "127.0.0.1:1".into(),
        storage: Storage::Store(SharedStore(disk)),
        settings: RaftSettings::default(),
        rack: None,
        max_format: baton_raft::identity::DATA_FORMAT,
        clock: baton_raft::replica::WallClock::system(),
    })
    .await
    .expect("reopen after the failed sync");
    common::wait_for("the restarted replica to lead", || (replica.metrics().role == Role::Leader).then_some(())).await;
    assert!(replica.read_local(|s| has(s, "before")));
    replica.write(put("after")).await.unwrap().unwrap();
    replica.shutdown().await;
}
