//! Helpers shared by the loopback tests: replicas on 127.0.0.1 with real gRPC and sled.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_model::class::PriorityClass;
use baton_model::{Command, Name, Op, State};
use baton_raft::metrics::Role;
use baton_raft::replica::{Replica, ReplicaConfig, Storage};
use baton_raft::settings::RaftSettings;
use baton_raft::types::NodeId;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const CLUSTER: &str = "test-cluster";

/// Bound on every wait in these tests: long enough for a loaded 2-core machine, and a test
/// that needs it has failed.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn settings() -> RaftSettings {
    RaftSettings { request_timeout_ms: 5_000, ..RaftSettings::default() }
}

/// A command that records `name` in the state, so a test can tell which writes landed.
pub fn put(name: &str) -> Command {
    Command { now_ms: 1, op: Op::PutClass(PriorityClass { name: Name::lit(name), value: 1, preemptible: true }) }
}

pub fn has(state: &State, name: &str) -> bool {
    // Looked up by `Name`, not `&str`: `Name` orders naturally ("w9" < "w10") while `str`
    // orders bytewise, so a `&str` lookup in a `BTreeMap<Name, _>` can miss.
    state.classes().contains_key(&Name::lit(name))
}

/// A replica serving on loopback.
pub struct Node {
    pub id: NodeId,
    pub addr: String,
    pub dir: PathBuf,
    pub replica: Replica,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

/// Binds a fresh loopback port.
pub async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = l.local_addr().expect("local addr").to_string();
    (l, addr)
}

impl Node {
    /// Opens the replica in `dir` and serves it on `listener`.
    pub async fn start(id: NodeId, cluster: &str, dir: &Path, listener: TcpListener, settings: RaftSettings) -> Node {
        Node::start_on(id, cluster, dir, listener, settings, Storage::Disk(dir.to_path_buf())).await
    }

    /// As `start`, on `storage` (a store of the test's own).
    pub async fn start_on(
        id: NodeId,
        cluster: &str,
        dir: &Path,
        listener: TcpListener,
        settings: RaftSettings,
        storage: Storage,
    ) -> Node {
        let addr = listener.local_addr().expect("local addr").to_string();
        let mut config = ReplicaConfig::new(id, cluster, addr.clone(), dir);
        config.settings = settings;
        config.storage = storage;
        Node::serve(id, dir, listener, config).await
    }

    async fn serve(id: NodeId, dir: &Path, listener: TcpListener, config: ReplicaConfig) -> Node {
        let addr = config.advertise_addr.clone();
        let replica = Replica::open(config).await.expect("open replica");
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = replica.clone();
        let server = tokio::spawn(async move {
            serving
                .run(listener, async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve raft");
        });
        Node { id, addr, dir: dir.to_path_buf(), replica, stop: Some(stop), server: Some(server) }
    }

    /// As `start`, saying it reads data formats only up to `max_format` (`--max-format`).
    pub async fn start_reading(
        id: NodeId,
        dir: &Path,
        listener: TcpListener,
        settings: RaftSettings,
        max_format: u32,
    ) -> Node {
        let addr = listener.local_addr().expect("local addr").to_string();
        let mut config = ReplicaConfig::new(id, CLUSTER, addr.clone(), dir);
        config.settings = settings;
        config.max_format = max_format;
        Node::serve(id, dir, listener, config).await
    }

    /// Stops raft and the server, and releases the data directory.
    pub async fn stop(mut self) -> (PathBuf, String) {
        self.replica.shutdown().await;
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.server.take() {
            let _ = h.await;
        }
        (self.dir.clone(), self.addr.clone())
    }
}

/// Starts `n` replicas (ids 1..=n) in `root` and bootstraps them as one cluster.
pub async fn cluster(root: &Path, n: u64, settings: RaftSettings) -> Vec<Node> {
    let mut nodes = Vec::new();
    for id in 1..=n {
        let (l, _) = listener().await;
        nodes.push(Node::start(id, CLUSTER, &root.join(format!("r{id}")), l, settings.clone()).await);
    }
    let members: BTreeMap<NodeId, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
    nodes[0].replica.bootstrap(members).await.expect("bootstrap");
    leader_of(&nodes).await;
    nodes
}

/// Waits until every node agrees on one leader among them, and returns its id.
pub async fn leader_of(nodes: &[Node]) -> NodeId {
    wait_for("a leader all replicas agree on", || {
        let leaders: Vec<Option<NodeId>> = nodes.iter().map(|n| n.replica.metrics().leader_id).collect();
        let first = leaders[0]?;
        let agreed = leaders.iter().all(|l| *l == Some(first));
        let present = nodes.iter().any(|n| n.id == first && n.replica.metrics().role == Role::Leader);
        (agreed && present).then_some(first)
    })
    .await
}

/// Polls `f` until it returns `Some`, failing the test after [`WAIT`].
pub async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting for {what} after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `node` has applied at least `index`.
pub async fn applied(node: &Replica, index: u64) {
    wait_for(&format!("replica {} to apply {index}", node.id()), || (node.applied_index() >= Some(index)).then_some(()))
        .await
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,openraft=error".into()),
        )
        .with_test_writer()
        .try_init();
}
