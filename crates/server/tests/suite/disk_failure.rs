//! A replica whose log cannot be synced stops raft; the server must then stop too, with
//! an error naming the disk's failure, so a supervisor restarts it and an operator sees
//! why, instead of answering UNAVAILABLE forever.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_proto::make::gpu_queue;
use baton_proto::v1::Empty;
use baton_proto::v1::baton_client::BatonClient;
use baton_raft::replica::{ReplicaConfig, SharedStore, Storage};
use baton_raft::settings::RaftSettings;
use baton_raft::store::{KvError, KvStore, MemKv, Space, Write};
use baton_server::{ServerConfig, ServerError, ServerSettings};
use tokio::task::JoinHandle;
use tonic::transport::Channel;

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// A disk whose writes or syncs can be told to fail with an OS error.
#[derive(Default)]
struct FaultyKv {
    inner: MemKv,
    fail_writes: Mutex<Option<i32>>,
    fail_flushes: Mutex<Option<i32>>,
}

fn fault(slot: &Mutex<Option<i32>>) -> Result<(), KvError> {
    match *slot.lock().unwrap() {
        Some(code) => Err(KvError {
            location: "faulty disk (log)".into(),
            message: std::io::Error::from_raw_os_error(code).to_string(),
        }),
        None => Ok(()),
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
        fault(&self.fail_writes)?;
        self.inner.write(batch)
    }
    fn flush(&self) -> Result<(), KvError> {
        fault(&self.fail_flushes)
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

/// A one-replica server on `disk`, leading, with a queue; returns its address, an API
/// client and the server's task.
async fn serve(disk: Arc<FaultyKv>) -> (String, BatonClient<Channel>, JoinHandle<Result<(), ServerError>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = ServerConfig {
        replica: ReplicaConfig {
            node_id: 1,
            cluster_id: "disk".into(),
            advertise_addr: addr.clone(),
            storage: Storage::Store(SharedStore(disk)),
            settings: RaftSettings { request_timeout_ms: 500, ..RaftSettings::default() },
            rack: None,
            max_format: baton_raft::identity::DATA_FORMAT,
            clock: baton_raft::replica::WallClock::system(),
        },
        bootstrap: Some(BTreeMap::from([(1, addr.clone())])),
        settings: ServerSettings { auth: baton_server::auth::AuthMode::None, ..ServerSettings::default() },
        scheduler: None,
        transport: baton_proto::tls::Transport::Insecure,
    };
    let server = tokio::spawn(baton_server::run(config, listener, std::future::pending()));
    let mut api = BatonClient::connect(format!("http://{addr}")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while api.put_queue(gpu_queue("q", 8)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the replica did not start leading");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (addr, api, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_log_sync_stops_the_server_with_the_disks_error() {
    let disk = Arc::new(FaultyKv::default());
    let (_, mut api, server) = serve(disk.clone()).await;

    *disk.fail_flushes.lock().unwrap() = Some(EIO);
    // This write reaches the log, whose sync fails: raft stops.
    let _ = api.put_queue(gpu_queue("after", 8)).await;

    let ended = tokio::time::timeout(Duration::from_secs(20), server)
        .await
        .expect("the server kept running on a replica whose raft had stopped")
        .unwrap();
    let err = ended.expect_err("a server whose replica failed must end with an error");
    assert!(matches!(err, ServerError::ReplicaFailed(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("Input/output error") && text.contains("faulty disk (log)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_info_names_a_full_disk_and_clears_once_it_recovers() {
    let disk = Arc::new(FaultyKv::default());
    let (_, mut api, server) = serve(disk.clone()).await;

    *disk.fail_writes.lock().unwrap() = Some(ENOSPC);
    // The first write reaches the log and waits on the disk; it marks the disk failing.
    let _ = api.put_queue(gpu_queue("waits", 8)).await;
    let info = api.cluster_info(Empty {}).await.expect("a replica with a full disk still answers").into_inner();
    let me = info.replicas.iter().find(|r| r.id == info.answered_by).expect("the answering replica is listed");
    assert!(me.failure.contains("No space left on device") && me.failure.contains("faulty disk (log)"), "{me:?}");

    *disk.fail_writes.lock().unwrap() = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let info = api.cluster_info(Empty {}).await.unwrap().into_inner();
        if info.replicas.iter().all(|r| r.failure.is_empty()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the failure was never cleared: {info:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.abort();
}
