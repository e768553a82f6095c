//! One seeded run: the hosts, the step loop, and the checks after each step. Every
//! `CHECK_EVERY_MS` of simulated time each running replica's state is encoded and hashed
//! (less often once a state encodes to more than `timing::DEEP_CHECK_BYTES`):
//! two replicas at one applied log index must hold one state, every state must hold the
//! scheduler's invariants (`baton_sched::invariants`), and no replica's committed leader id
//! may ever fall below one it held (across restarts too: the vote is durable). The processes' checks run as they start
//! (`truth`), the client's as it reads (`load`). Once the load ends and the faults heal,
//! the leader's state is held against the processes every `progress::LOOK_EVERY_MS`, and
//! the run goes on after its final checks until each disagreement is told or has ended
//! (`progress`: liveness).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use baton_raft::net::sim::host_name;
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;

use crate::clocks::Rate;
use crate::faults::{self, Faults, agent_host};
use crate::hosts::ReplicaHosts;
use crate::load::Load;
use crate::operator::Operator;
use crate::progress::{LIVENESS_BOUND_MS, MAX_DRAIN_BOUNDS, Progress};
use crate::replica::{Handles, Jump};
use crate::timing::{CHECK_EVERY_MS, SETTLE_MS};
use crate::truth::{Ending, Sabotage, Shared};
use crate::upgrades::Upgrades;

/// Applied log indexes whose state digest a run remembers, to compare replicas that reach them
/// at different times.
const MAX_DIGESTS_KEPT: usize = 100_000;
/// Spare replicas one run may have, at most.
pub const MAX_SPARES: u64 = 2;
/// Spare replicas a run has by default: voters are replaced (`operator`).
pub const SPARES: u64 = 1;
/// Seeds in a hundred whose replicas start on an older build and are upgraded (`upgrades`),
/// by default.
pub const UPGRADE_PERCENT: u64 = 50;
/// Nodes one run simulates, at most (each is a host with an agent).
pub const MAX_NODES: u64 = 1_000;
/// Ports a host's outgoing connections take (turmoil's default is 49152..=65535).
const EPHEMERAL_PORTS: std::ops::RangeInclusive<u16> = 10_000..=65_535;
/// Jobs in a hundred whose processes misbehave, by default: enough that a seed of ten
/// minutes meets dozens, few enough that most preemptions still meet cooperative ones.
pub const ADVERSARIAL_PERCENT: u64 = 10;
/// Simulated minutes of load one run takes, at most (a week).
pub const MAX_MINUTES: u64 = 7 * 24 * 60;

#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated minutes of load under faults (the settling comes on top).
    pub minutes: u64,
    /// Voters the cluster starts with.
    pub replicas: u64,
    /// Replicas besides them, members of nothing at first: the operator replaces voters by
    /// them (`operator`); 0: no replacements.
    pub spares: u64,
    /// Of every hundred seeds, how many start their replicas on an older build and upgrade
    /// them one at a time (`upgrades`); 0: every replica runs this build.
    pub upgrade_percent: u64,
    pub nodes: u64,
    pub faults: bool,
    /// Stop at the first violation, so the history's tail ends there.
    pub stop_at_violation: bool,
    /// Simulated time one step advances: the clock's resolution.
    pub tick_ms: u64,
    /// A bug to plant (the checks must find it).
    pub sabotage: Option<Sabotage>,
    /// Each replica's wall clock is off by up to this much, either way (drawn per seed).
    pub clock_offset_ms: u64,
    /// Each host's clock runs fast or slow by up to this many parts per million (drawn per
    /// seed; `clocks`). Past `clocks::DRIFT_PPM` it breaks what the timing argument assumes.
    pub clock_drift_ppm: u64,
    /// Of every hundred jobs, how many have processes that misbehave: crash partway with a
    /// code, or ignore the stop signal (`truth::Adversity`); 0: every process cooperates.
    pub adversarial_percent: u64,
    /// History lines kept to print (`History::keeping`): a failing seed's whole story when
    /// large enough.
    pub history_lines: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            minutes: 10,
            replicas: 3,
            spares: SPARES,
            upgrade_percent: UPGRADE_PERCENT,
            nodes: 16,
            faults: true,
            stop_at_violation: true,
            tick_ms: 10,
            sabotage: None,
            clock_offset_ms: 5_000,
            clock_drift_ppm: crate::clocks::DRIFT_PPM,
            adversarial_percent: ADVERSARIAL_PERCENT,
            history_lines: crate::history::KEPT_LINES,
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub seed: u64,
    /// Of the whole history and the final state: equal for two runs of one seed.
    pub digest: u64,
    pub violations: Vec<String>,
    /// The history's last lines (around the first violation when the run stopped there).
    pub tail: Vec<String>,
    pub applied: u64,
    pub starts: u64,
    /// Acknowledged maintenance windows and submits with dependencies: how much of
    /// decisions.md sections 13 and 14 the seed exercised.
    pub windows: u64,
    pub waiting_submits: u64,
    /// GPUs marked unhealthy (section 14).
    pub gpu_faults: u64,
    /// Starts the agents refused, their journal full, and told the leader of.
    #[serde(default)]
    pub unrecorded: u64,
    /// Decisions refused of a plan applied to the state it was made from (`leader::check_plan`).
    #[serde(default)]
    pub refused: u64,
    /// Acknowledged arrays and elastic gangs (section 13).
    pub arrays: u64,
    pub elastic: u64,
    /// Ranks suspended in place by their agents (section 7).
    #[serde(default)]
    pub suspensions: u64,
    /// Ranks started on MIG slices (section 11).
    #[serde(default)]
    pub slice_starts: u64,
    /// Ranks started on a fraction of a shared GPU (section 11).
    #[serde(default)]
    pub shared_starts: u64,
    /// Processes that crashed (exited nonzero; `truth::Adversity`).
    #[serde(default)]
    pub crashes: u64,
    /// Accounting records made (issue 34): every replica's store holds each of them.
    pub records: u64,
    /// State digests the replicas compared with the leader's and found equal (stop 53).
    #[serde(default)]
    pub digest_checks: u64,
    /// The longest a disagreement between the state and the processes lasted after the
    /// faults healed, among those that ended (`progress`; the bound is
    /// `progress::LIVENESS_BOUND_MS`).
    #[serde(default)]
    pub settled_ms: u64,
    pub faults: BTreeMap<String, u64>,
    pub simulated_ms: u64,
    pub wall_ms: u64,
}

/// What the step loop checks across replicas.
#[derive(Default)]
struct Checks {
    /// The log index each replica's state was last deep-checked at.
    last_applied: BTreeMap<NodeId, u64>,
    /// When the next deep check is due (`timing::deep_check_every_ms`).
    next_deep_ms: u64,
    digests: BTreeMap<u64, (u64, NodeId)>,
    /// The newest committed leader id `(term, node_id)` each replica has held. openraft's
    /// default leader ids may elect two leaders in one term (the higher node id supersedes),
    /// so "one leader per term" is not a property of this build; a vote that goes back is.
    leaders: BTreeMap<NodeId, (u64, NodeId)>,
    reported: BTreeSet<String>,
    /// Accounting records made, as the replicas' states say after the load.
    records: u64,
    /// Per replica, the agreed state digest checks it counts now (since its last start).
    digest_checks: BTreeMap<NodeId, u64>,
    /// Those counted by replicas before they restarted.
    digest_checks_before: u64,
    /// The most the replicated clock may run ahead of true time (`clock_ahead_bound_ms`).
    clock_ahead_bound_ms: u64,
    /// Jobs whose end a replica's state told and the truth checked (`Truth::check_ending`):
    /// each is judged once, as the replicas' states are compared besides.
    ended: BTreeSet<u64>,
    /// Broken invariants whose jobs' events the history has told (`events_of_jobs_named`).
    stories: BTreeSet<String>,
}

/// The most a state's clock may run ahead of true time: the replicas' clocks are off by up to
/// `clock_offset_ms`, a leader stamps at most `MAX_CLOCK_SKEW_MS` past the quorum's time,
/// and a check runs a little after the state was stamped. A leader whose clock a fault moved
/// days ahead must not move the replicated clock with it (a time limit would end jobs, a
/// maintenance window begin, days early).
fn clock_ahead_bound_ms(opts: &Options) -> u64 {
    opts.clock_offset_ms + baton_raft::skew::MAX_CLOCK_SKEW_MS + 1_000
}

/// Runs one seed on a thread of its own: what a thread keeps from an earlier run (the
/// thread-local state of the runtime and of its libraries) must not change this one's
/// history, or a seed run after another would not replay alone.
pub fn run_seed(seed: u64, opts: &Options) -> Outcome {
    let opts = opts.clone();
    std::thread::Builder::new()
        .name(format!("sim-seed-{seed}"))
        .spawn(move || run_seed_here(seed, &opts))
        .expect("a thread for the seed")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn run_seed_here(seed: u64, opts: &Options) -> Outcome {
    let began = Instant::now();
    let load_ms = opts.minutes * 60_000;
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(opts.tick_ms))
        .simulation_duration(Duration::from_millis(
            load_ms + 2 * SETTLE_MS + 60_000 + changes_after_load_ms(opts) + MAX_DRAIN_BOUNDS * LIVENESS_BOUND_MS,
        ))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(faults::BASE_LATENCY_MS))
        // Every port a host does not listen on. Why: turmoil's TCP has no sequence numbers,
        // so once a host's ports wrap, a dead connection's segment can reach a new
        // connection on the same ports; the wider the range, the later that happens.
        .ephemeral_ports(EPHEMERAL_PORTS)
        .build();
    let truth = Shared::default();
    truth.lock().sabotage = opts.sabotage;
    truth.lock().history = crate::history::History::keeping(opts.history_lines);
    let handles = Handles::default();
    let hosts = opts.replicas + opts.spares;
    let disks: Vec<PowerLossDisk> = (1..=hosts).map(|id| PowerLossDisk::new(format!("disk of r{id}"))).collect();
    let percent = if opts.faults { opts.upgrade_percent } else { 0 };
    let mut upgrades = Upgrades::draw(seed, percent, (1..=hosts).collect(), &truth);
    let mut replica_hosts = ReplicaHosts::new(seed, opts, &handles, &truth);
    let jumps: Vec<Jump> =
        (1..=hosts).zip(&disks).map(|(id, d)| replica_hosts.start(&mut sim, id, d.clone())).collect();
    add_agents(&mut sim, opts, &mut replica_hosts, &truth);
    let ended = Arc::new(AtomicBool::new(false));
    let load = Load {
        handles: handles.clone(),
        truth: truth.clone(),
        seed,
        nodes: opts.nodes,
        load_ms,
        adversarial_percent: opts.adversarial_percent,
        ended: ended.clone(),
    };
    sim.client("load", load.run());

    let copies = truth.lock().copies.clone();
    let mut faults = Faults::new(seed, hosts, opts.nodes, jumps, copies, disks.clone());
    let spares = (opts.replicas + 1..=hosts).collect();
    let mut operator = (opts.faults && opts.spares > 0).then(|| Operator::new(seed, spares, replica_hosts));
    let mut checks = Checks { clock_ahead_bound_ms: clock_ahead_bound_ms(opts), ..Checks::default() };
    let mut next_check_ms = 0;
    let mut healed = false;
    // Judges from when the load ends and the faults heal (`progress`).
    let mut progress = Progress::default();
    // Who leads, as of the last check (looked up every `CHECK_EVERY_MS`, not every step).
    let mut leader = None;
    loop {
        let done = match sim.step() {
            Ok(done) => done,
            Err(e) => {
                let at = crate::now_ms_of(&sim);
                truth.lock().violation(at, format!("a host failed: {e}"));
                break;
            }
        };
        let now = crate::now_ms_of(&sim);
        truth.lock().watchdog(now);
        if opts.faults && !healed {
            let lines = if ended.load(Ordering::SeqCst) {
                healed = true;
                faults.heal_all(&mut sim)
            } else {
                faults.step(&mut sim, leader, now)
            };
            record(&truth, now, lines);
        }
        record(&truth, now, faults.supervise(&mut sim, now));
        if now >= next_check_ms || done {
            if let Some(o) = operator.as_mut() {
                record(&truth, now, o.step(&mut sim, &handles, &mut faults, now, !ended.load(Ordering::SeqCst)));
            }
            if let Some(u) = upgrades.as_mut() {
                record(&truth, now, u.step(&mut sim, &faults, &truth, now));
            }
            check_replicas(&mut sim, &handles, &truth, &mut checks, now);
            leader = leader_of(&mut sim, &handles);
            next_check_ms = now + CHECK_EVERY_MS;
        }
        if ended.load(Ordering::SeqCst) {
            progress.healed(now);
        }
        look(&mut sim, &handles, &truth, &mut progress, now);
        if done || (opts.stop_at_violation && !truth.lock().violations.is_empty()) {
            break;
        }
    }
    let index = if truth.lock().violations.is_empty() {
        let changes = Changes { operator: operator.as_mut(), upgrades: upgrades.as_mut() };
        let mut after =
            AfterLoad { handles: &handles, truth: &truth, c: &mut checks, f: &mut faults, progress: &mut progress };
        let index = converge(&mut sim, &mut after, changes);
        check_records(&mut sim, &handles, &truth, after.c);
        drain(&mut sim, &mut after);
        if let Some((ms, what)) = &progress.slowest {
            let line = format!("slowest to settle after healing: {what} ({ms} ms)");
            record(&truth, crate::now_ms_of(&sim), vec![line]);
        }
        index
    } else {
        checks.last_applied.values().copied().max().unwrap_or(0)
    };
    let applied = handles.all().iter().map(|r| r.read_local(|s| s.applied())).max().unwrap_or(0);
    let t = truth.lock();
    let digest = t.history.digest() ^ checks.digests.get(&index).map_or(0, |d| d.0).rotate_left(17);
    Outcome {
        seed,
        digest,
        violations: t.violations.clone(),
        tail: t.history.tail(),
        applied,
        starts: t.starts,
        windows: t.windows,
        waiting_submits: t.waiting_submits,
        gpu_faults: t.gpu_faults,
        unrecorded: t.unrecorded,
        refused: t.refused,
        arrays: t.arrays,
        elastic: t.elastic,
        suspensions: t.suspensions,
        slice_starts: t.slice_starts,
        shared_starts: t.shared_starts,
        crashes: t.crashes,
        records: checks.records,
        digest_checks: checks.digest_checks_total(),
        settled_ms: progress.settled_ms(),
        faults: faults
            .counts
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .chain(operator.as_ref().map(|o| ("replace-replica".to_string(), o.replaced)))
            .collect(),
        simulated_ms: crate::now_ms_of(&sim),
        wall_ms: began.elapsed().as_millis() as u64,
    }
}

/// How long changes may go on after the load: every replica still to be upgraded, each up
/// to `upgrades::GAP_MS.1` after the one before, and as long again for a replacement under
/// way to finish (the operator begins none after the load). `converge` settles after them;
/// one that takes longer ends the simulation, which it reports as not converged.
fn changes_after_load_ms(opts: &Options) -> u64 {
    2 * (opts.replicas + opts.spares) * crate::upgrades::GAP_MS.1
}

/// The agents' hosts, one per node, beating to the replicas `replica_hosts` lists.
fn add_agents(sim: &mut turmoil::Sim<'_>, opts: &Options, replica_hosts: &mut ReplicaHosts, truth: &Shared) {
    for i in 1..=opts.nodes {
        let (directory, truth) = (replica_hosts.directory.clone(), truth.clone());
        let rate = Rate::draw(replica_hosts.rates(), opts.clock_drift_ppm);
        truth.record(format!("{}'s clock runs {rate}", agent_host(i)));
        sim.host(agent_host(i), move || crate::agent::run(agent_host(i), rate, directory.clone(), truth.clone()));
    }
}

impl Checks {
    fn digest_checks_total(&self) -> u64 {
        self.digest_checks_before + self.digest_checks.values().sum::<u64>()
    }
}

/// Compares every running replica's state with what others held at the same log index,
/// checks its invariants, and checks that committed leader ids never go back.
fn check_replicas(sim: &mut turmoil::Sim<'_>, handles: &Handles, truth: &Shared, c: &mut Checks, now: u64) {
    let deep = now >= c.next_deep_ms;
    // The most bytes a state checked now encodes to.
    let mut largest = 0;
    for r in handles.all() {
        let id = r.id();
        if !sim.is_host_running(host_name(id).as_str()) {
            continue;
        }
        // What an older build could not decode must never reach it (the format gate): a
        // real one would stop at the first such entry or snapshot.
        let (reads, used) = (truth.lock().reads(id), r.format_used());
        if used > reads {
            let what = format!("r{id}'s build reads data formats up to {reads}, but its state holds format {used}");
            report(truth, c, now, what);
        }
        let agreed = r.digest_counts().agreed;
        let seen = c.digest_checks.insert(id, agreed).unwrap_or(0);
        if agreed < seen {
            c.digest_checks_before += seen;
        }
        let vote = r.raft().metrics().borrow().vote;
        if vote.is_committed() {
            if let Some(leader) = vote.leader_id().voted_for() {
                let held = (vote.leader_id().term, leader);
                let newest = *c.leaders.entry(id).or_insert(held);
                if held < newest {
                    let (t, l) = newest;
                    report(
                        truth,
                        c,
                        now,
                        format!("r{id}'s committed leader went back from r{l} of term {t} to {held:?}"),
                    );
                }
                c.leaders.insert(id, held.max(newest));
            }
        }
        // By log index, not by commands applied: a membership entry changes the state too
        // (behaviour 6 records the replicas it removes) without being a command.
        let index = r.applied_index().unwrap_or(0);
        if !deep || c.last_applied.get(&id) == Some(&index) {
            continue;
        }
        c.last_applied.insert(id, index);
        let (digest, bytes) = r.read_local(state_digest);
        largest = largest.max(bytes);
        // A state another replica held at this index was judged then: what `judge_state`
        // checks is read from the state alone, so it would find the same.
        let judged = matches!(c.digests.get(&index), Some(&(d, _)) if d == digest);
        if !judged {
            judge_state(&r, truth, c, now);
        }
        match c.digests.get(&index) {
            Some(&(d, other)) if d != digest => {
                report(truth, c, now, format!("r{id} and r{other} hold different states at log index {index}"));
            }
            Some(_) => {}
            None => {
                c.digests.insert(index, (digest, id));
                while c.digests.len() > MAX_DIGESTS_KEPT {
                    c.digests.pop_first();
                }
            }
        }
    }
    if deep {
        c.next_deep_ms = now + crate::timing::deep_check_every_ms(largest);
    }
}

/// Checks replica `r`'s state: the scheduler's invariants, its stamp against true time, and
/// the ends of its jobs against what ran.
fn judge_state(r: &baton_raft::Replica, truth: &Shared, c: &mut Checks, now: u64) {
    let id = r.id();
    let (applied, broken, stamped_ms) =
        r.read_local(|s| (s.applied(), baton_sched::invariants::check_state(s).err(), s.now_ms()));
    if let Some(e) = broken {
        // Told once, by the first replica that breaks it: the others hold the same state.
        if c.stories.len() < crate::truth::MAX_VIOLATIONS && c.stories.insert(e.to_string()) {
            let story = r.read_local(|s| events_of_jobs_named(s, &e.to_string()));
            let mut t = truth.lock();
            story.into_iter().for_each(|l| t.history.record(now, l));
        }
        report(truth, c, now, format!("r{id}'s state at applied {applied} breaks an invariant: {e}"));
    }
    // Outside any host `wall_ms` has no simulated time: the step loop's is `now`.
    let true_ms = crate::timing::EPOCH_MS + now;
    if stamped_ms > true_ms + c.clock_ahead_bound_ms {
        let ahead_ms = stamped_ms - true_ms;
        let bound_ms = c.clock_ahead_bound_ms;
        report(
            truth,
            c,
            now,
            format!(
                "r{id}'s state at applied {applied} is stamped {ahead_ms} ms ahead of true time (at most {bound_ms})"
            ),
        );
    }
    check_endings(r, truth, c, now);
}

/// Events a job keeps, at most, that a broken invariant's story shows of it.
const STORY_EVENTS_PER_JOB: usize = 30;
/// Jobs a broken invariant's story shows, at most.
const STORY_JOBS: usize = 8;

/// The events the state keeps of each job that `what` names ("job 12"), oldest first: the
/// story of a broken invariant, which the history of processes alone does not tell (why a
/// job was placed, preempted, requeued).
fn events_of_jobs_named(s: &baton_model::state::State, what: &str) -> Vec<String> {
    let ids: BTreeSet<u64> = what
        .split("job ")
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    let mut lines = Vec::new();
    for id in ids.into_iter().take(STORY_JOBS) {
        let Some(job) = s.job(id) else { continue };
        let skip = job.events.len().saturating_sub(STORY_EVENTS_PER_JOB);
        for e in job.events.iter().skip(skip) {
            let node = e.node.as_ref().map(|n| format!(" on {n}")).unwrap_or_default();
            lines.push(format!("  job {id} event at {} ms{node}: {:?}: {}", e.at_ms, e.kind, e.message));
        }
    }
    lines
}

/// Holds the end of every job that replica `r`'s state says ended, and no check judged
/// yet, against what really ran (`Truth::check_ending`).
fn check_endings(r: &baton_raft::Replica, truth: &Shared, c: &mut Checks, now: u64) {
    use baton_model::job::JobState;
    let endings: Vec<Ending> = r.read_local(|s| {
        let ended = s.jobs().iter().filter(|(id, _)| !c.ended.contains(*id));
        ended
            .filter_map(|(id, j)| match (j.state, j.exit_code) {
                (JobState::Succeeded, _) => Some(Ending::Succeeded { job: *id }),
                (JobState::Failed, Some(code)) => Some(Ending::Failed { job: *id, attempt: j.attempt, code }),
                _ => None,
            })
            .collect()
    });
    if endings.is_empty() {
        return;
    }
    let replica = format!("r{}", r.id());
    let mut t = truth.lock();
    for e in endings {
        t.check_ending(now, &replica, &e);
        c.ended.insert(e.job());
    }
}

/// Holds the leader's state against the processes (`progress`): a disagreement that outlasts
/// the bound is a violation, told with the events of its job. Looks only every
/// `LOOK_EVERY_MS`, from when the faults healed (`Progress::due`).
fn look(sim: &mut turmoil::Sim<'_>, handles: &Handles, truth: &Shared, progress: &mut Progress, now: u64) {
    if !progress.due(now) {
        return;
    }
    let Some(r) = leader_of(sim, handles).and_then(|id| handles.get(id)) else { return };
    let (late, stories) = {
        let t = truth.lock();
        r.read_local(|s| {
            let late = progress.look(now, s, &t);
            let stories: Vec<String> = late.iter().flat_map(|l| events_of_jobs_named(s, l)).collect();
            (late, stories)
        })
    };
    if late.is_empty() {
        return;
    }
    let mut t = truth.lock();
    stories.into_iter().for_each(|l| t.history.record(now, l));
    late.into_iter().for_each(|l| t.violation(now, l));
}

/// What the steps after the load check with.
struct AfterLoad<'a> {
    handles: &'a Handles,
    truth: &'a Shared,
    c: &'a mut Checks,
    f: &'a mut Faults,
    progress: &'a mut Progress,
}

/// After the final checks: runs on until every disagreement has been judged or has ended
/// (`Progress::judged_all`), still checking the replicas.
fn drain(sim: &mut turmoil::Sim<'_>, a: &mut AfterLoad<'_>) {
    let mut next_ms = 0;
    loop {
        let now = crate::now_ms_of(sim);
        if a.progress.judged_all(now) || !a.truth.lock().violations.is_empty() {
            return;
        }
        record(a.truth, now, a.f.supervise(sim, now));
        if now >= next_ms {
            check_replicas(sim, a.handles, a.truth, a.c, now);
            next_ms = now + CHECK_EVERY_MS;
        }
        look(sim, a.handles, a.truth, a.progress, now);
        if sim.step().is_err() {
            return;
        }
    }
}

/// Lines for the history, at `now`.
fn record(truth: &Shared, now: u64, lines: Vec<String>) {
    if !lines.is_empty() {
        let mut t = truth.lock();
        lines.into_iter().for_each(|l| t.history.record(now, l));
    }
}

/// The members (voters and learners) as the leader sees them; every replica while none
/// leads (then they cannot have converged anyway).
fn members(sim: &mut turmoil::Sim<'_>, handles: &Handles) -> BTreeSet<NodeId> {
    match leader_of(sim, handles).and_then(|id| handles.get(id)) {
        Some(leader) => leader.metrics().members.keys().copied().collect(),
        None => handles.all().iter().map(|r| r.id()).collect(),
    }
}

/// The running replica that leads, if one does.
pub(crate) fn leader_of(sim: &mut turmoil::Sim<'_>, handles: &Handles) -> Option<NodeId> {
    handles
        .all()
        .iter()
        .filter(|r| r.metrics().role == baton_raft::Role::Leader)
        .map(|r| r.id())
        .find(|id| sim.is_host_running(host_name(*id).as_str()))
}

fn report(truth: &Shared, c: &mut Checks, now: u64, what: String) {
    if c.reported.insert(what.clone()) {
        truth.lock().violation(now, what);
    }
}

/// `history::hash` of the state's encoding, hashed as it is encoded, and the encoding's
/// length in bytes.
fn state_digest(s: &baton_model::state::State) -> (u64, u64) {
    let mut h = Counted::default();
    baton_raft::codec::encode_into(s, &mut h).expect("a state always encodes");
    (h.hasher.finish(), h.bytes)
}

/// A hasher that counts what it was given.
#[derive(Default)]
struct Counted {
    hasher: crate::history::Hasher,
    bytes: u64,
}

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes += bytes.len() as u64;
        std::io::Write::write(&mut self.hasher, bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// After the load, with every replica at one applied log index: each replica's accounting store
/// holds every record the state made, and the same ones (issue 34). A replica's store here
/// lives in memory: one restarted rebuilt it from its snapshot's newest records and its log,
/// which hold them all while fewer than `RECENT_RECORDS` were made.
fn check_records(sim: &mut turmoil::Sim<'_>, handles: &Handles, truth: &Shared, c: &mut Checks) {
    let now = crate::now_ms_of(sim);
    let mut seen: Option<(u64, NodeId)> = None;
    // A spare (a member of nothing) holds what it held when it was replaced, or nothing.
    let members = members(sim, handles);
    for r in handles.all().into_iter().filter(|r| members.contains(&r.id())) {
        let id = r.id();
        let made = r.read_local(|s| s.accounting().made());
        c.records = c.records.max(made);
        let store = r.records();
        let all = store.query(&baton_accounting::Query::default(), |_| true);
        let Ok(page) = all else {
            report(truth, c, now, format!("r{id}'s accounting store cannot be read: {all:?}"));
            continue;
        };
        let seqs: Vec<u64> = page.records.iter().map(|x| x.seq).collect();
        let whole = seqs.len() as u64 == made && seqs.iter().copied().eq(1..=made);
        if made as usize <= baton_model::accounting::RECENT_RECORDS && !page.more && !whole {
            let held = seqs.len();
            report(truth, c, now, format!("r{id}'s accounting store holds {held} of the {made} records made"));
        }
        let digest = crate::history::hash(format!("{:?}", page.records).as_bytes());
        match seen {
            Some((d, other)) if d != digest => {
                report(truth, c, now, format!("r{id} and r{other} hold different accounting records"));
            }
            Some(_) => {}
            None => seen = Some((digest, id)),
        }
    }
}

/// What an operator changes while the load runs, and completes after it.
struct Changes<'a> {
    operator: Option<&'a mut Operator>,
    upgrades: Option<&'a mut Upgrades>,
}

/// After the load: steps until every replica holds one applied log index (or `SETTLE_MS`
/// passes after the last replacement or upgrade ended, a violation), then returns it. Why
/// from the last change: a short seed may end its load with upgrades still to come, each
/// `upgrades::GAP_MS` after the one before, and the cluster settles only after them.
fn converge(sim: &mut turmoil::Sim<'_>, a: &mut AfterLoad<'_>, mut changes: Changes<'_>) -> u64 {
    let AfterLoad { handles, truth, c, f, progress } = a;
    let (handles, truth) = (*handles, *truth);
    let mut deadline = crate::now_ms_of(sim) + SETTLE_MS;
    loop {
        let now = crate::now_ms_of(sim);
        record(truth, now, f.supervise(sim, now));
        if let Some(o) = changes.operator.as_deref_mut() {
            record(truth, now, o.step(sim, handles, f, now, false));
        }
        if let Some(u) = changes.upgrades.as_deref_mut() {
            record(truth, now, u.step(sim, f, truth, now));
        }
        let members = members(sim, handles);
        let applied: BTreeSet<u64> =
            members.iter().filter_map(|id| handles.get(*id)).map(|r| r.applied_index().unwrap_or(0)).collect();
        let replacing = changes.operator.as_ref().is_some_and(|o| !o.idle());
        let upgrading = changes.upgrades.as_ref().is_some_and(|u| !u.idle());
        let converged = applied.len() == 1 && !replacing && !upgrading;
        if converged {
            // The index the replicas converge on is deep-checked however large the states.
            c.next_deep_ms = 0;
        }
        check_replicas(sim, handles, truth, c, now);
        look(sim, handles, truth, progress, now);
        if converged {
            return applied.into_iter().next().unwrap_or(0);
        }
        if replacing || upgrading {
            deadline = now + SETTLE_MS;
        }
        // The client has finished (so `step` says done): the hosts still run.
        if now >= deadline || sim.step().is_err() {
            let replicas = crate::replica::describe(handles);
            truth
                .lock()
                .violation(now, format!("replicas did not converge: applied log indexes {applied:?}; {replicas}"));
            return applied.into_iter().max().unwrap_or(0);
        }
    }
}
