//! A replica host: the real replica on its simulated disk, its gRPC server on the simulated
//! network, and its leader (`leader`). Replica 1 bootstraps the cluster; a restarted host
//! finds it initialized on its disk.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use baton_raft::net::sim::{SimStream, host_name, sim_dialer};
use baton_raft::replica::{ReplicaConfig, SharedStore, Storage, WallClock};
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use baton_raft::{RaftSettings, Replica};

use crate::truth::Shared;

/// The port replicas serve gRPC on.
pub const RAFT_PORT: u16 = 9000;
pub const CLUSTER: &str = "sim";

/// The running replicas, by id (a crashed one stays until its host starts again).
#[derive(Clone, Default)]
pub struct Handles(Arc<Mutex<BTreeMap<NodeId, Replica>>>);

impl Handles {
    pub fn get(&self, id: NodeId) -> Option<Replica> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(&id).cloned()
    }

    pub fn all(&self) -> Vec<Replica> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    fn put(&self, r: Replica) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(r.id(), r);
    }
}

/// Election timeouts differ per replica but are fixed: openraft draws a timeout from the
/// thread's generator, which no seed reaches, so each range is one millisecond wide. Votes
/// split less often than with equal timeouts, and the network's seeded delays vary the rest.
pub fn settings(id: NodeId) -> RaftSettings {
    let min = 150 + 40 * id;
    RaftSettings { election_timeout_min_ms: min, election_timeout_max_ms: min + 1, ..RaftSettings::default() }
}

/// A replica's wall clock: true simulated time shifted by `offset_ms` (drawn per replica
/// from the seed; its rate is true).
pub fn clock(offset_ms: i64) -> WallClock {
    WallClock(Arc::new(move || crate::wall_ms().saturating_add_signed(offset_ms)))
}

pub fn members(n: u64) -> BTreeMap<NodeId, String> {
    (1..=n).map(|id| (id, format!("{}:{RAFT_PORT}", host_name(id)))).collect()
}

/// Runs replica `id` on `disk` until its host is crashed.
pub async fn run(
    id: NodeId,
    n: u64,
    offset_ms: i64,
    disk: PowerLossDisk,
    handles: Handles,
    truth: Shared,
) -> turmoil::Result {
    let members = members(n);
    let config = ReplicaConfig {
        node_id: id,
        cluster_id: CLUSTER.into(),
        advertise_addr: members[&id].clone(),
        storage: Storage::Store(SharedStore(Arc::new(disk.open()))),
        settings: settings(id),
        rack: None,
        max_format: baton_raft::identity::DATA_FORMAT,
        clock: clock(offset_ms),
    };
    let replica = Replica::open_with(config, sim_dialer()).await?;
    handles.put(replica.clone());
    truth.record(format!("r{id} starts"));
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", RAFT_PORT)).await?;
    let incoming = futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| SimStream(s));
        Some((next, l))
    });
    if id == 1 && replica.applied_index().is_none() {
        // Refused harmlessly when the disk already holds the cluster.
        let _ = replica.bootstrap(members.clone()).await;
    }
    tokio::spawn(crate::leader::run(replica.clone(), clock(offset_ms), truth));
    replica.serve_incoming(incoming, std::future::pending::<()>()).await?;
    Ok(())
}

/// Where every replica stands (role, term, leader, log and applied index), for a report.
pub fn describe(handles: &Handles) -> String {
    let states: Vec<String> = handles
        .all()
        .iter()
        .map(|r| {
            let m = r.metrics();
            let raft = r.raft().metrics().borrow().clone();
            format!(
                "r{}: {:?} term {} leader {:?} log {:?} applied {:?} vote {} replication {:?}",
                m.node_id,
                m.role,
                m.term,
                m.leader_id,
                m.last_log_index,
                m.last_applied_index,
                raft.vote,
                raft.replication
            )
        })
        .collect();
    format!("replicas: {}", states.join("; "))
}
