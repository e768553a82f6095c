//! The agent's journal through power cuts (issue 10): a simulated disk keeps what was synced
//! and a seeded prefix of what was not, the power goes out after a seeded number of disk
//! operations (also between a change's writes and its sync), and the agent starts again on
//! what the disk kept, many times per seed.
//!
//! The agent is modelled by the order in which the supervisor talks to the journal and to
//! the world: a start journals the attempt and the intent before the spawn and the pid
//! after it; a stop runs `reconcile::stop_steps` (journal, then signal); an adopted stop
//! runs `reconcile::adopt_steps`; the fence is remembered before a directive is obeyed; an
//! observation is journaled before it can be reported, and dropped only once the leader
//! acknowledged it. What the world saw (spawns, signals, obeyed terms, acknowledgements) is
//! recorded only after the journal call it depends on returned. After every cut the checks
//! are the protocol's promises:
//! - the journal opens (it is never left unreadable);
//! - the term is at least every term obeyed, and the attempt at least every one started;
//! - every replica that was spawned has its record (or its pruned key), so no RUN of that
//!   attempt starts it again, also one whose pid was never journaled;
//! - every replica that was sent its stop signal is journaled as stopping (or finished), so
//!   the stop is not forgotten;
//! - every observation journaled and not acknowledged is still pending.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use baton_agent::journal::{Journal, Phase, ReplicaKey, ReplicaRecord};
use baton_agent::journal_store::SimDisk;
use baton_agent::launch::Unjournaled;
use baton_agent::reconcile::{self, Clock, Step};
use baton_proto::v1::observation::What;
use baton_proto::v1::{Exited, Observation};
use baton_rng::SplitMix64;

/// Seeds run; each goes through `LIVES` power cuts.
const SEEDS: u64 = 1_000;
const LIVES: u64 = 6;
/// Operations of the agent per life, at most (the power usually goes out before).
const OPS_PER_LIFE: u64 = 40;

/// What the world outside the journal has seen.
#[derive(Default)]
struct World {
    /// Every replica ever spawned, over every life.
    spawned: BTreeSet<ReplicaKey>,
    /// Replicas sent their stop signal.
    signalled: BTreeSet<ReplicaKey>,
    /// The highest term whose directive the agent obeyed.
    obeyed_term: u64,
    /// The highest attempt started per job.
    started_attempt: BTreeMap<u64, u32>,
    /// Observations journaled (by job id: one exit per replica here) and not yet acknowledged.
    unacked: BTreeSet<u64>,
    /// The pid of the next spawn.
    next_pid: u32,
}

/// The power went out during an operation: this life is over.
struct PowerOut;

type Life = Result<(), PowerOut>;

fn out<T, E>(r: Result<T, E>) -> Result<T, PowerOut> {
    r.map_err(|_| PowerOut)
}

fn record(key: ReplicaKey) -> ReplicaRecord {
    ReplicaRecord {
        key,
        job: format!("job-{}", key.job_id),
        task: 0,
        replica: key.rank,
        pid: 0,
        start_time: 0,
        phase: Phase::Running,
        stop: None,
        kill_deadline_unix_ms: 0,
        kill_deadline_boot_ms: 0,
        outcome: None,
        exit_file: Path::new("/nonexistent/exit").to_path_buf(),
        gpus: vec![key.rank],
        gpu_milli: 0,
        slices: Vec::new(),
        started_unix_ms: 1,
        newest_checkpoint_at_start_unix_ms: None,
    }
}

fn exited(job_id: u64) -> Observation {
    Observation {
        what: Some(What::Exited(Exited { job_id, attempt: 1, rank: 0, exit_code: 0, reason: String::new() })),
    }
}

/// The supervisor's start: attempt and intent journaled, spawn, pid journaled.
fn start(j: &Journal, w: &mut World, key: ReplicaKey) -> Life {
    if j.max_attempt(key.job_id).ok().flatten().is_none_or(|m| m < key.attempt) {
        out(j.set_max_attempt(key.job_id, key.attempt))?;
    }
    let mut rec = record(key);
    out(j.put_replica(&rec))?;
    assert!(w.spawned.insert(key), "{key:?} spawned twice");
    let best = w.started_attempt.entry(key.job_id).or_default();
    *best = (*best).max(key.attempt);
    w.next_pid += 1;
    rec.pid = w.next_pid;
    out(j.put_replica(&rec))
}

/// Carries out the journal writes and signals of `steps` in order.
fn run_steps(j: &Journal, w: &mut World, steps: Vec<Step>) -> Life {
    for step in steps {
        match step {
            Step::Journal(rec) => out(j.put_replica(&rec))?,
            Step::Signal { pid, .. } => {
                let rec = out(j.replicas())?.into_iter().find(|r| r.pid == pid).expect("a journaled replica");
                w.signalled.insert(rec.key);
            }
        }
    }
    Ok(())
}

/// One life of the agent: restart on what the disk kept, then random operations until the
/// power goes out or the operations run out.
fn life(j: &Journal, w: &mut World, rng: &mut SplitMix64) -> Life {
    // Restart, after a power cut: every process is gone. A stop journaled but maybe not
    // signalled is signalled now (to no effect). A replica journaled without its pid left
    // no trace the cut did not take (the wrapper's marker was in the page cache): the
    // supervisor asks `reconcile::without_pid` and drops the record of one never started.
    for rec in out(j.replicas())? {
        if rec.phase == Phase::Stopping && rec.pid != 0 {
            run_steps(j, w, reconcile::adopt_steps(&rec))?;
        }
        if rec.phase != Phase::Finished && rec.pid == 0 {
            match reconcile::without_pid(Unjournaled::NeverStarted, false) {
                Unjournaled::NeverStarted => out(j.remove_replica(&rec.key))?,
                _ => out(j.put_replica(&ReplicaRecord { phase: Phase::Finished, ..rec }))?,
            }
        }
    }
    for _ in 0..OPS_PER_LIFE {
        let job_id = rng.below(12) + 1;
        let key = ReplicaKey { job_id, attempt: 1, rank: 0 };
        let known = out(j.replicas())?.into_iter().find(|r| r.key == key);
        match rng.below(6) {
            0 => {
                let term = w.obeyed_term + rng.below(2);
                let fence = baton_agent::fence::Fence { term, leader_id: Some(term % 3 + 1) };
                out(j.remember(fence))?;
                w.obeyed_term = w.obeyed_term.max(term);
            }
            1 if known.is_none() && !out(j.was_pruned(&key))? => start(j, w, key)?,
            2 if known.as_ref().is_some_and(|r| r.phase == Phase::Running && r.pid != 0) => {
                let rec = known.expect("checked");
                let now = Clock { unix_ms: 1_000, boot_ms: 1_000 };
                run_steps(j, w, reconcile::stop_steps(&rec, libc::SIGTERM, 1_000, false, 0, now))?;
            }
            3 if known.as_ref().is_some_and(|r| r.phase != Phase::Finished) => {
                let mut rec = known.expect("checked");
                rec.phase = Phase::Finished;
                out(j.put_replica(&rec))?;
                out(j.push_observation(&exited(job_id)))?;
                w.unacked.insert(job_id);
            }
            4 => {
                // A report the leader acknowledged: it has the observations from then on.
                let pending = out(j.pending(usize::MAX))?;
                let seqs: Vec<u64> = pending.iter().map(|(s, _)| *s).collect();
                for (_, o) in &pending {
                    if let Some(What::Exited(e)) = &o.what {
                        w.unacked.remove(&e.job_id);
                    }
                }
                out(j.ack(&seqs))?;
            }
            5 if known.as_ref().is_some_and(|r| r.phase == Phase::Finished) => out(j.prune_replica(&key))?,
            _ => {}
        }
    }
    Ok(())
}

/// The promises, checked on what a power cut left.
fn check(j: &Journal, w: &World, seed: u64) {
    let fence = j.fence().unwrap();
    assert!(fence.term >= w.obeyed_term, "seed {seed}: term {} < obeyed {}", fence.term, w.obeyed_term);
    let records: BTreeMap<ReplicaKey, ReplicaRecord> = j.replicas().unwrap().into_iter().map(|r| (r.key, r)).collect();
    for key in &w.spawned {
        let kept = records.contains_key(key) || j.was_pruned(key).unwrap();
        assert!(kept, "seed {seed}: spawned {key:?} is forgotten: a RUN would start it twice");
    }
    for (job, attempt) in &w.started_attempt {
        assert!(j.max_attempt(*job).unwrap() >= Some(*attempt), "seed {seed}: attempt of job {job} went back");
    }
    for key in &w.signalled {
        let stopping = records.get(key).is_none_or(|r| matches!(r.phase, Phase::Stopping | Phase::Finished));
        let stopping = stopping && (records.contains_key(key) || j.was_pruned(key).unwrap());
        assert!(stopping, "seed {seed}: {key:?} was signalled to stop and its stop is forgotten");
    }
    let pending: BTreeSet<u64> = j
        .pending(usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(|(_, o)| match o.what {
            Some(What::Exited(e)) => Some(e.job_id),
            _ => None,
        })
        .collect();
    for job in &w.unacked {
        assert!(pending.contains(job), "seed {seed}: the unacknowledged exit of job {job} is lost");
    }
}

#[test]
fn the_journal_keeps_its_promises_through_power_cuts() {
    let mut cuts = 0u64;
    let mut lost_writes = 0u64;
    for seed in 0..SEEDS {
        let mut rng = SplitMix64::new(seed);
        let disk = SimDisk::new();
        let mut world = World::default();
        for _ in 0..LIVES {
            let journal = Journal::with_store(Path::new("sim-journal"), Box::new(disk.open()))
                .unwrap_or_else(|e| panic!("seed {seed}: the journal does not open after a power cut: {e}"));
            check(&journal, &world, seed);
            disk.power_out_after(rng.below(OPS_PER_LIFE * 3));
            let _ = life(&journal, &mut world, &mut rng);
            lost_writes += disk.power_loss(rng.next_u64()) as u64;
            cuts += 1;
        }
        let journal = Journal::with_store(Path::new("sim-journal"), Box::new(disk.open())).unwrap();
        check(&journal, &world, seed);
    }
    // Seeds where nothing unsynced was ever lost would test nothing.
    assert!(lost_writes >= SEEDS / 2, "only {lost_writes} unsynced writes lost in {cuts} cuts");
    println!("{SEEDS} seeds, {cuts} power cuts survived, {lost_writes} unsynced writes lost");
}
