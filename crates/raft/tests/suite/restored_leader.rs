//! A leader killed and restarted at once finds its own committed vote and leads again in the
//! same term, without an election (openraft restores it). Its committed index is the one
//! it had stored before the kill, which may lag: the store saves it without waiting for a
//! flush. A linearizable read on it must still see every write acknowledged before the kill.
//!
//! Deterministic on turmoil, on simulated disks that keep only synced writes:
//! 1. replica L leads; L is cut off from follower F1, and write A commits on L and F2;
//! 2. L's process dies with its unsynced writes (the commit index that covers A) and is
//!    started again at once, still cut off from F1 and now from F2 too: it leads in the
//!    same term, and has applied less than A;
//! 3. once L's replication to F1 has failed and backs off, the link to F1 comes back and a
//!    read starts on L at once: its leadership check is answered by F1 in one round trip,
//!    while A commits on L only when the replication to F1 resumes, later. The read must
//!    wait for A.
//!
//! Election timeouts are long, so nobody campaigns while the test runs.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_raft::metrics::Role;
use baton_raft::net::sim::{SimStream, host_name, sim_dialer};
use baton_raft::replica::{Replica, ReplicaConfig, SharedStore, Storage};
use baton_raft::settings::RaftSettings;
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use common::{has, put};

const PORT: u16 = 9000;
const REPLICAS: u64 = 3;

/// Each replica's handle in its latest life, and how many times it has opened.
type Handles = Arc<Mutex<BTreeMap<NodeId, (u32, Replica)>>>;

/// What the client asks of the main loop, which alone can crash and restart hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Run,
    /// Kill replica `leader`, losing its unsynced writes, and restart it cut off from
    /// `cut` too.
    Restart {
        leader: NodeId,
        cut: NodeId,
    },
    Restarted,
}

fn settings() -> RaftSettings {
    RaftSettings {
        heartbeat_interval_ms: 100,
        // Far longer than the test's steps: no follower campaigns while the leader is away.
        election_timeout_min_ms: 5_000,
        election_timeout_max_ms: 6_000,
        request_timeout_ms: 5_000,
        ..RaftSettings::default()
    }
}

fn add_replicas(sim: &mut turmoil::Sim<'_>, disks: &[PowerLossDisk], handles: &Handles) {
    let members: BTreeMap<NodeId, String> =
        (1..=REPLICAS).map(|id| (id, format!("{}:{PORT}", host_name(id)))).collect();
    for id in 1..=REPLICAS {
        let handles = handles.clone();
        let members = members.clone();
        let disk = disks[(id - 1) as usize].clone();
        sim.host(host_name(id), move || {
            let handles = handles.clone();
            let members = members.clone();
            let store = SharedStore(Arc::new(disk.open()));
            async move {
                let config = ReplicaConfig {
                    node_id: id,
                    cluster_id: common::CLUSTER.into(),
                    advertise_addr: members[&id].clone(),
                    storage: Storage::Store(store),
                    settings: settings(),
                    rack: None,
                    max_format: baton_raft::identity::DATA_FORMAT,
                    clock: baton_raft::replica::WallClock::system(),
                };
                let replica = Replica::open_with(config, sim_dialer()).await?;
                {
                    let mut h = handles.lock().unwrap();
                    let lives = h.get(&id).map_or(0, |(n, _)| *n);
                    h.insert(id, (lives + 1, replica.clone()));
                }
                let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
                let incoming = futures::stream::unfold(listener, |l| async move {
                    let next = l.accept().await.map(|(s, _)| SimStream(s));
                    Some((next, l))
                });
                if id == 1 {
                    replica.bootstrap(members.clone()).await?;
                }
                replica.serve_incoming(incoming, std::future::pending::<()>()).await?;
                Ok(())
            }
        });
    }
}

/// Polls `f` every 10 ms of simulated time until it returns `Some`, up to 30 s.
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..3_000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting for {what}");
}

async fn client(handles: Handles, step: Arc<Mutex<Step>>) -> turmoil::Result {
    let (leader, lead) = until("a leader", || {
        handles
            .lock()
            .unwrap()
            .iter()
            .find(|(_, (_, r))| r.metrics().role == Role::Leader)
            .map(|(id, (_, r))| (*id, r.clone()))
    })
    .await;
    let others: Vec<NodeId> = (1..=REPLICAS).filter(|id| *id != leader).collect();
    let (behind, cut) = (others[0], others[1]);

    // 1. A commits without `behind`, which therefore lacks it.
    until("every replica to know the leader", || {
        handles.lock().unwrap().values().all(|(_, r)| r.metrics().leader_id == Some(leader)).then_some(())
    })
    .await;
    turmoil::partition(host_name(leader), host_name(behind));
    let answer = lead.write_on_leader(put("A")).await.map_err(|e| format!("write A: {e:?}"))?;
    answer.map_err(|e| format!("write A refused: {e:?}"))?;
    let a_index = lead.applied_index().expect("A is applied on the leader");
    let term = lead.term();
    // Heartbeats only from here: nothing syncs the commit index that covers A.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 2. Killed and restarted at once.
    *step.lock().unwrap() = Step::Restart { leader, cut };
    until("the leader's restart", || (*step.lock().unwrap() == Step::Restarted).then_some(())).await;
    let restored = until("the restarted leader", || {
        let h = handles.lock().unwrap();
        let (lives, r) = &h[&leader];
        (*lives == 2 && r.metrics().role == Role::Leader).then(|| r.clone())
    })
    .await;
    // What makes the case: the same term without an election, and a commit index, lost
    // with the unsynced writes, that leaves A unapplied.
    assert_eq!(restored.term(), term, "the restarted leader leads in the term it left");
    let applied = restored.applied_index();
    assert!(applied < Some(a_index), "the restarted leader applied {applied:?}, A is at {a_index}: nothing to test");

    // 3. Once the replication to `behind` has failed and backs off (openraft waits 500 ms
    // after an unreachable peer), the link comes back and a read starts at once.
    tokio::time::sleep(Duration::from_millis(250)).await;
    turmoil::repair(host_name(leader), host_name(behind));
    let reading = restored.clone();
    let read = tokio::spawn(async move { reading.read(|s| has(s, "A")).await });
    let seen = read.await?.map_err(|e| format!("read: {e}"))?;
    assert!(seen, "a linearizable read on the restarted leader misses write A, acknowledged before the kill");
    Ok(())
}

#[test]
fn a_leader_restarted_in_its_term_reads_every_write_acknowledged_before() {
    common::init_tracing();
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(60))
        .max_message_latency(Duration::from_millis(2))
        .build();
    let disks: Vec<PowerLossDisk> = (1..=REPLICAS).map(|id| PowerLossDisk::new(format!("disk of r{id}"))).collect();
    let handles: Handles = Arc::default();
    add_replicas(&mut sim, &disks, &handles);
    let step = Arc::new(Mutex::new(Step::Run));
    sim.client("client", client(handles.clone(), step.clone()));
    loop {
        let done = sim.step().unwrap_or_else(|e| panic!("{e}"));
        if done {
            break;
        }
        let now = *step.lock().unwrap();
        if let Step::Restart { leader, cut } = now {
            sim.crash(host_name(leader));
            // Keeps only what was synced.
            disks[(leader - 1) as usize].power_loss(0);
            sim.partition(host_name(leader), host_name(cut));
            sim.bounce(host_name(leader));
            *step.lock().unwrap() = Step::Restarted;
        }
    }
}
