//! A replica host: the real replica on its simulated disk, its gRPC server on the simulated
//! network, and its leader (`leader`). Replica 1 bootstraps the cluster; a restarted host
//! finds it initialized on its disk. When its raft stops the host ends, as `baton server`
//! does, and `Faults::supervise` starts it again; a stop its disk did not cause (no write or
//! sync of it failed in this life) is a violation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use baton_model::state::State;
use baton_model::{Command, Response};
use baton_raft::net::sim::{SimStream, host_name, sim_dialer};
use baton_raft::replica::{ReplicaConfig, SharedStore, Storage, WallClock};
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use baton_raft::{RaftSettings, ReadError, Replica, WriteError};

use crate::truth::Shared;

/// The port replicas serve gRPC on.
pub const RAFT_PORT: u16 = 9000;
pub const CLUSTER: &str = "sim";

/// The running replicas, by id (a crashed one stays until its host starts again).
#[derive(Clone, Default)]
pub struct Handles(Arc<Mutex<BTreeMap<NodeId, Hosted>>>);

impl Handles {
    pub fn get(&self, id: NodeId) -> Option<Replica> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(&id).map(|h| h.replica.clone())
    }

    /// The replicas, for reading their local state from outside any host.
    pub fn all(&self) -> Vec<Replica> {
        self.hosted().into_iter().map(|h| h.replica).collect()
    }

    /// The replicas with their hosts, for asking them as a client would.
    pub fn hosted(&self) -> Vec<Hosted> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    fn put(&self, r: Replica) {
        let hosted = Hosted { replica: r.clone(), host: tokio::runtime::Handle::current() };
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(r.id(), hosted);
    }
}

/// A replica and the runtime of the host it runs on.
#[derive(Clone)]
pub struct Hosted {
    pub replica: Replica,
    host: tokio::runtime::Handle,
}

impl Hosted {
    /// Runs `work` on the replica's own host, as a request that reached it over the network
    /// would run: what it sends (a forwarded write, a read's round of heartbeats) leaves from
    /// that host, on that host's clock. Run on the client's host, a follower's forwarded
    /// write dialed the leader from there; the replica cached that connection, and its raft
    /// traffic to that peer later went over it, past the replica's own partitions, and timed
    /// on another runtime's clock, on which the connection was never old enough to be dialed
    /// afresh: a follower got nothing for good after a slow spell (seed 204 of 10 minutes).
    /// `None` when the host is down (its runtime is gone).
    pub async fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> Option<T> {
        run_on(&self.host, work).await
    }

    /// Starts `work` on the replica's host (from outside any host: the step loop), to be
    /// looked at once finished.
    pub fn spawn<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.host.spawn(work)
    }

    /// `Replica::write` on the replica's host; `None` when the host is down.
    pub async fn write(&self, cmd: Command) -> Option<Result<Response, WriteError>> {
        let r = self.replica.clone();
        self.run(async move { r.write(cmd).await }).await
    }

    /// `Replica::read` on the replica's host; `None` when the host is down.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&State) -> T + Send + 'static,
    ) -> Option<Result<T, ReadError>> {
        let r = self.replica.clone();
        self.run(async move { r.read(f).await }).await
    }
}

/// Runs `work` on the host whose runtime `host` is, and waits for it from this one.
async fn run_on<T: Send + 'static>(
    host: &tokio::runtime::Handle,
    work: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    host.spawn(work).await.ok()
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
/// `jump`: how far a fault has moved it besides (`faults`: a clock days ahead), read at
/// every call.
pub fn clock(offset_ms: i64, jump: Jump) -> WallClock {
    WallClock(Arc::new(move || crate::wall_ms().saturating_add_signed(offset_ms + jump.load(Ordering::SeqCst))))
}

/// How far a fault has moved one replica's clock, in milliseconds (0: not at all).
pub type Jump = Arc<AtomicI64>;

pub fn members(n: u64) -> BTreeMap<NodeId, String> {
    (1..=n).map(|id| (id, format!("{}:{RAFT_PORT}", host_name(id)))).collect()
}

/// Runs replica `id` on `disk` until its host is crashed; its host's wall clock is off by
/// `offset_ms` (and `jump`), and its oscillator runs at `rate` (what its leader times).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    id: NodeId,
    n: u64,
    offset_ms: i64,
    rate: crate::clocks::Rate,
    jump: Jump,
    disk: PowerLossDisk,
    handles: Handles,
    truth: Shared,
) -> turmoil::Result {
    let members = members(n);
    let (sabotaged, parted) = {
        let t = truth.lock();
        (t.sabotage == Some(crate::Sabotage::PartedState), t.parted)
    };
    if sabotaged && !parted {
        part_the_state(id, &disk, &truth);
    }
    let config = ReplicaConfig {
        node_id: id,
        cluster_id: CLUSTER.into(),
        advertise_addr: format!("{}:{RAFT_PORT}", host_name(id)),
        storage: Storage::Store(SharedStore(Arc::new(disk.open()))),
        // Snapshots often, so that a replica restarts from one.
        settings: if sabotaged { RaftSettings { snapshot_every_entries: 100, ..settings(id) } } else { settings(id) },
        rack: None,
        // An older build says so: the leader holds back what it could not decode.
        max_format: truth.lock().reads(id),
        clock: clock(offset_ms, jump.clone()),
    };
    // Errors the disk returned before this life: one returned since is a cause to stop.
    let errors_before = disk.errors();
    let replica = match Replica::open_with(config, sim_dialer()).await {
        Ok(replica) => replica,
        Err(e) if disk.caused(errors_before, &e.to_string()) => {
            truth.record(format!("r{id} cannot start: {e}; its supervisor will start it again"));
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    handles.put(replica.clone());
    truth.record(format!("r{id} starts"));
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", RAFT_PORT)).await?;
    let incoming = futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| SimStream(s));
        Some((next, l))
    });
    if id == 1 && replica.applied_index().is_none() {
        // Refused harmlessly when the disk already holds the cluster. A replaced machine
        // never comes back (`operator`): replica 1 never starts on a new disk.
        let _ = replica.bootstrap(members.clone()).await;
    }
    tokio::spawn(crate::leader::run(replica.clone(), clock(offset_ms, jump), rate, truth.clone()));
    tokio::select! {
        served = replica.serve_incoming(incoming, std::future::pending::<()>()) => served?,
        why = replica.failed() => {
            // As `baton server` does: a replica whose raft stopped ends, and its supervisor
            // starts it again (`Faults::supervise`).
            if disk.caused(errors_before, &why) {
                truth.record(format!("r{id} stops after its disk failed: {why}"));
            } else {
                truth.lock().violation(crate::now_ms(), format!("r{id} stopped: {why}"));
            }
            replica.shutdown().await;
        }
    }
    Ok(())
}

/// `Sabotage::PartedState`: gives the snapshot on `disk`, if there is one, a priority class
/// no command made, once per run.
fn part_the_state(id: NodeId, disk: &PowerLossDisk, truth: &Shared) {
    use baton_raft::store::{KvStore, StoredSnapshot};
    let kv = disk.open();
    let Ok(Some(mut stored)) = StoredSnapshot::load(&kv) else { return };
    let Ok(mut state) = baton_raft::codec::decode_state(&stored.data) else { return };
    let class =
        baton_model::class::PriorityClass { name: baton_model::Name::lit("forged"), value: 1, preemptible: true };
    let _ = state.apply(Command { now_ms: 1, op: baton_model::Op::PutClass(class) });
    let Ok(data) = baton_raft::codec::encode(&state) else { return };
    stored.data = data;
    if stored.save(&kv).is_ok() && kv.flush().is_ok() {
        truth.lock().parted = true;
        truth.record(format!("r{id}'s snapshot is changed (sabotage)"));
    }
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Work run on another host's runtime connects from that host: the server sees the
    /// connection come from the replica's address, not the client's.
    #[test]
    fn work_run_on_a_replicas_host_dials_from_that_host() {
        let mut sim = turmoil::Builder::new().simulation_duration(Duration::from_secs(10)).build();
        let seen = Arc::new(Mutex::new(None));
        let seen_by_server = seen.clone();
        sim.host("server", move || {
            let seen = seen_by_server.clone();
            async move {
                let l = turmoil::net::TcpListener::bind(("0.0.0.0", 7)).await?;
                loop {
                    let (_, from) = l.accept().await?;
                    *seen.lock().unwrap() = Some(from.ip());
                }
            }
        });
        let slot: Arc<Mutex<Option<tokio::runtime::Handle>>> = Arc::default();
        let slot_of_replica = slot.clone();
        sim.host("replica", move || {
            let slot = slot_of_replica.clone();
            async move {
                *slot.lock().unwrap() = Some(tokio::runtime::Handle::current());
                std::future::pending::<()>().await;
                Ok(())
            }
        });
        sim.client("load", async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let host = slot.lock().unwrap().clone().expect("the replica's host runs");
            let dialed = super::run_on(&host, async { turmoil::net::TcpStream::connect("server:7").await.is_ok() });
            assert_eq!(dialed.await, Some(true));
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(*seen.lock().unwrap(), Some(turmoil::lookup("replica")), "load is {}", turmoil::lookup("load"));
            Ok(())
        });
        sim.run().unwrap();
    }
}
