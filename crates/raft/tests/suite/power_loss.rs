//! Power cuts: three replicas on turmoil, each on a simulated disk that keeps only what was
//! synced (plus a random prefix of what was not) when its power is cut. A seeded schedule
//! cuts the power of one replica at a time (a minority), then of all three at once, while a
//! client keeps writing. No acknowledged write may be lost, and no replica's established
//! (committed) leader id may ever go back, across its power cuts too. (openraft's default
//! leader ids `(term, node_id)` may establish two leaders in one term, the higher node id
//! superseding the other, so "one leader per term" is not a property of this build.)
//!
//! CI runs a few seeds. A longer run:
//! `BATON_POWER_LOSS_SEEDS=200 cargo test -p baton-raft --release --test suite power_loss::`
//! (each seed cuts the power `CUTS_PER_SEED` times).

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_raft::metrics::Role;
use baton_raft::net::sim::{SimStream, host_name, sim_dialer};
use baton_raft::replica::{Replica, ReplicaConfig, SharedStore, Storage};
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use baton_rng::SplitMix64;
use common::{has, put, settings};

const PORT: u16 = 9000;
const REPLICAS: u64 = 3;
/// Power cuts per seed: the first half hit one replica, the second half all three.
const CUTS_PER_SEED: usize = 6;
/// Seeds in a plain `cargo test` run; `BATON_POWER_LOSS_SEEDS` asks for more.
const CI_SEEDS: u64 = 3;
/// Concurrent writers: enough that entries batch and a cut finds unsynced writes.
const WRITERS: usize = 8;
/// Simulated pause of a writer after each acknowledged write.
const WRITE_PAUSE_MS: u64 = 20;
/// Simulated milliseconds between two power cuts, at least and at most.
const CUT_GAP_MS: (u64, u64) = (300, 1_500);

type Handles = Arc<Mutex<BTreeMap<NodeId, Replica>>>;

/// Replicas 1..=3 as turmoil hosts on their own disks; replica 1 bootstraps (a restart
/// finds the cluster already initialized).
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
                handles.lock().unwrap().insert(id, replica.clone());
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

fn leader(handles: &Handles) -> Option<Replica> {
    handles.lock().unwrap().values().find(|r| r.metrics().role == Role::Leader).cloned()
}

/// Records the newest established leader id `(term, node_id)` each replica has held; one
/// that goes back (a vote lost in a power cut, or granted to an older leader) fails the run.
fn check_votes_never_go_back(handles: &Handles, newest: &mut BTreeMap<NodeId, (u64, NodeId)>) -> Result<(), String> {
    for r in handles.lock().unwrap().values() {
        let vote = r.raft().metrics().borrow().vote;
        if !vote.is_committed() {
            continue;
        }
        let held = (vote.leader_id().term, vote.leader_id().voted_for().expect("a committed vote names its leader"));
        let before = *newest.entry(r.id()).or_insert(held);
        if held < before {
            return Err(format!("replica {}'s established leader went back from {before:?} to {held:?}", r.id()));
        }
        newest.insert(r.id(), held);
    }
    Ok(())
}

/// Writes `w{writer}-{n}` until told to stop, recording what was acknowledged.
async fn write_until_stopped(writer: usize, handles: Handles, acked: Arc<Mutex<Vec<String>>>, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let Some(lead) = leader(&handles) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        n += 1;
        let name = format!("w{writer}-{n}");
        let attempt = tokio::time::timeout(Duration::from_secs(2), lead.write_on_leader(put(&name))).await;
        match attempt {
            Ok(Ok(Ok(_))) => {
                acked.lock().unwrap().push(name);
                // Paced, so a CI run stays in seconds of wall time.
                tokio::time::sleep(Duration::from_millis(WRITE_PAUSE_MS)).await;
            }
            // Not acknowledged (no leader, a crashed one, a timeout): it may or may not land.
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Runs `WRITERS` writers until told to stop; then checks, on a leader, that every
/// acknowledged write is in the state.
async fn write_then_verify(handles: Handles, acked: Arc<Mutex<Vec<String>>>, stop: Arc<AtomicBool>) -> turmoil::Result {
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write_until_stopped(w, handles.clone(), acked.clone(), stop.clone())))
        .collect();
    for w in writers {
        w.await?;
    }
    let acked = acked.lock().unwrap().clone();
    let mut last_error = String::from("no leader");
    for _ in 0..300 {
        if let Some(lead) = leader(&handles) {
            let expected = acked.clone();
            match lead.read(move |s| expected.iter().filter(|w| !has(s, w)).cloned().collect::<Vec<_>>()).await {
                Ok(lost) => {
                    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?} of {}", acked.len());
                    return Ok(());
                }
                Err(e) => last_error = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no linearizable read within 30 s of simulated time after the last cut: {last_error}");
}

/// One seeded run; returns how many acknowledged writes it checked.
fn run_seed(seed: u64) -> usize {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(300))
        // Short network delays, so a run commits many writes between cuts.
        .max_message_latency(Duration::from_millis(5))
        .build();
    let disks: Vec<PowerLossDisk> = (1..=REPLICAS).map(|id| PowerLossDisk::new(format!("disk of r{id}"))).collect();
    let handles: Handles = Arc::default();
    add_replicas(&mut sim, &disks, &handles);
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    sim.client("writer", write_then_verify(handles.clone(), acked.clone(), stop.clone()));

    // The seeded schedule of power cuts and what each cut keeps.
    let mut rng = SplitMix64::new(seed);
    let mut leaders = BTreeMap::new();
    let mut cuts = 0;
    let mut next_cut_ms = 2_000 + rng.range(CUT_GAP_MS.0, CUT_GAP_MS.1);
    loop {
        let done = sim.step().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        check_votes_never_go_back(&handles, &mut leaders).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        if done {
            break;
        }
        let now_ms = sim.elapsed().as_millis() as u64;
        if cuts < CUTS_PER_SEED && now_ms >= next_cut_ms {
            let victims: Vec<NodeId> =
                if cuts < CUTS_PER_SEED / 2 { vec![1 + rng.next_u64() % REPLICAS] } else { (1..=REPLICAS).collect() };
            for &v in &victims {
                sim.crash(host_name(v));
                disks[(v - 1) as usize].power_loss(rng.next_u64());
            }
            for &v in &victims {
                sim.bounce(host_name(v));
            }
            cuts += 1;
            next_cut_ms = now_ms + rng.range(CUT_GAP_MS.0, CUT_GAP_MS.1);
        } else if cuts == CUTS_PER_SEED && now_ms >= next_cut_ms {
            stop.store(true, Ordering::SeqCst);
        }
    }
    let checked = acked.lock().unwrap().len();
    assert!(checked > 0, "seed {seed}: no write was acknowledged, so nothing was checked");
    checked
}

#[test]
fn power_cuts_lose_no_acknowledged_write_and_no_vote_goes_back() {
    let seeds = std::env::var("BATON_POWER_LOSS_SEEDS")
        .ok()
        .map(|s| s.parse::<u64>().expect("BATON_POWER_LOSS_SEEDS must be a whole number of seeds"))
        .unwrap_or(CI_SEEDS);
    let mut writes = 0;
    for seed in 0..seeds {
        writes += run_seed(seed);
    }
    println!(
        "{seeds} seeds, {} power cuts, {writes} acknowledged writes checked, none lost",
        seeds as usize * CUTS_PER_SEED
    );
}
