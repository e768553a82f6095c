//! The supervisor owns every replica on this node. It reconciles each directive (the whole
//! desired state) with what runs and turns process events into observations in the
//! journal. What a directive means (fencing, attempts, the lease, deferral) and the order of
//! a stop's journal writes and signals are decided in `reconcile`, without IO; this module
//! gathers their inputs and carries out what they return. One task owns all of it, so there
//! are no locks around replica state; others see snapshots (`Running` list, live log set).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::DEFAULT_CHECKPOINT_SIGNAL;
use baton_proto::v1::observation::What;
use baton_proto::v1::{
    Assignment, Checkpointed, Directive, Exited, Observation, ReplicaPhase, Running, StopCause, Stopped, Unkillable,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;

use crate::checkpoint::{newest_rank_mtime_ms, now_unix_ms};
use crate::error::JournalError;
use crate::journal::{Journal, Outcome, Phase, ReplicaKey, ReplicaRecord};
use crate::launch::{self, EXIT_CODE_KILLED, EXIT_CODE_NOT_STARTED, LaunchDirs, Unjournaled};
use crate::lease::{Floor, Lease};
use crate::lease_file::boot_ms;
use crate::limits::{
    CHECKPOINT_POLL_MS, JOURNAL_RETRY_MAX_MS, LEASE_STOP_GRACE_MS, MAX_ASSIGNMENTS_PER_DIRECTIVE, MAX_FINISHED_RECORDS,
    MAX_PENDING_OBSERVATIONS, REAPPLY_MS, SIGNAL_AGAIN_AFTER_MS, SIGNAL_RACE_WINDOW_MS, TICK_MS, WATCHDOG_POLL_MS,
    WATCHDOG_SLACK_MS,
};
use crate::logfiles;
use crate::reconcile::{self, Act, Clock, Ended, Ending, Ignored, Known, Step};
use crate::signal::{checkpoint_signal, default_signal, group_alive, parse_signal, signal_group};
use crate::suspensions::Suspensions;
use crate::unrecorded::Unrecorded;

/// A replica's process ended (the wrapper exited with this code).
#[derive(Debug)]
pub struct ExitEvent {
    key: ReplicaKey,
    pid: u32,
    code: i32,
}

/// Replicas whose logs may still grow: (job id, attempt, rank). Read by the logs server.
pub type LiveLogs = Arc<Mutex<HashSet<(u64, u32, u32)>>>;

/// A replica whose wrapper ended while its cgroup still held processes (`Supervisor::linger`).
struct Lingering {
    cgroup: crate::cgroup::ReplicaCgroup,
    /// Held here until the cgroup is empty (its record may be pruned before).
    gpus: Vec<u32>,
    /// Thousandths of its one GPU when it shared it; 0: whole.
    gpu_milli: u32,
    slices: Vec<String>,
    since: Instant,
    /// Its end, told once the cgroup is empty (or after `Unkillable`).
    end: Option<Observation>,
    unkillable_told: bool,
}

struct Replica {
    rec: ReplicaRecord,
    /// When this agent started it (`None`: adopted after a restart).
    started: Option<Instant>,
    /// A stop signal to send once more, and when (see `SIGNAL_RACE_WINDOW_MS`).
    signal_again: Option<(Instant, i32)>,
    /// The checkpoint signal of the assignment that started it.
    signal: i32,
    /// Newest checkpoint mtime seen while running, for `Checkpointed` observations.
    newest_checkpoint_ms: u64,
}

pub struct Supervisor {
    journal: Arc<Journal>,
    /// Where each replica's cgroup goes; `None`: process groups only.
    cgroups: Option<crate::cgroup::CgroupRoot>,
    /// A lease was granted to this run, or held by a previous run in this boot: RUNs may
    /// start replicas (`reconcile::Inputs::lease_never_granted`).
    lease_granted: bool,
    /// Cgroups of ended replicas killed but not empty yet: removed by a later tick.
    dying_cgroups: Vec<crate::cgroup::ReplicaCgroup>,
    /// Replicas that ended whose cgroups still hold processes (`Lingering`), at most
    /// `MAX_DYING_CGROUPS`: their GPUs stay held here.
    lingering: BTreeMap<ReplicaKey, Lingering>,
    /// How long a replica's processes may survive SIGKILL before it is reported `Unkillable`.
    unkillable_after: Duration,
    /// Cgroups of live replicas the journal did not know, killed at start and not empty yet:
    /// nothing starts until they are gone (`reconcile::Inputs::unknown_live`).
    unknown_cgroups: Vec<crate::cgroup::ReplicaCgroup>,
    node: String,
    data_dir: PathBuf,
    checkpoint_root: PathBuf,
    run_as: crate::run_as::RunAsPolicy,
    devices: crate::devices::Devices,
    /// Why the replica being finished could not start: its Exited observation says so.
    start_failure: Option<String>,
    kill_grace_ms: u64,
    log_cap_bytes: u64,
    replicas: BTreeMap<ReplicaKey, Replica>,
    waits: JoinSet<()>,
    /// Replicas the newest directive wants started whose GPUs a replica that is still
    /// stopping holds: they start when it has exited, so no GPU ever runs two processes.
    deferred: BTreeMap<ReplicaKey, Assignment>,
    /// The state index of the directive whose plan is being carried out, or was last: what
    /// every start (and every deferred one) was asked for by, told to the replica
    /// (`BATON_STATE_INDEX`) so a checker can hold the start against the commit.
    obeyed_index: u64,
    events_tx: mpsc::Sender<ExitEvent>,
    events_rx: mpsc::Receiver<ExitEvent>,
    running_tx: watch::Sender<Vec<Running>>,
    /// `obey_from`'s state index, for the reporter (0: none).
    awaiting_tx: watch::Sender<u64>,
    observed: Arc<Notify>,
    live_logs: LiveLogs,
    last_checkpoint_poll: Instant,
    /// The lease the reporter renews; when it runs out every replica is stopped.
    lease: watch::Receiver<Lease>,
    /// The replicas were stopped for the lease that ran out; cleared by a renewal.
    fenced: bool,
    /// The lease's lapses acted on (`Lease::lapses`): one more means the lease ran out and
    /// was renewed between two ticks, unseen.
    lapses_seen: u64,
    /// After a renewal that ended a lapse: the leader state the renewal came from. No
    /// directive built from an older state is obeyed (`Lease::floor`); cleared by the first
    /// one that is as new.
    obey_from: Option<Floor>,
    /// The newest directive accepted, applied again when a renewed lease lets replicas start.
    last_directive: Option<Directive>,
    /// When the last directive was last applied (`REAPPLY_MS`).
    applied_at: Instant,
    /// The (lease_ms, heartbeat_timeout_ms) last checked against the timing argument, so a
    /// misfit is logged once, not on every directive.
    fit_checked: Option<(u64, u64)>,
    metrics: Arc<crate::metrics::AgentMetrics>,
    /// Observations made while the journal could not take them: the reporter sends them
    /// meanwhile, and those no leader took are journaled once the journal can take them.
    unjournaled: Arc<crate::unjournaled::Outbox>,
    /// When a failing journal is tried next, and the pause after that.
    journal_retry: (Instant, Duration),
    /// Suspensions reported, and whether the leader has recorded them (the reporter says).
    suspensions: Arc<Suspensions>,
    /// Starts refused while the journal fails, for the reporter to tell.
    unrecorded: Arc<Unrecorded>,
}

/// What the supervisor shares with the reporter and the logs server.
pub struct Shared {
    pub running: watch::Receiver<Vec<Running>>,
    /// The state index of the directive the supervisor waits for since its lease was
    /// renewed (0: none): the reporter asks the leader for it.
    pub awaiting: watch::Receiver<u64>,
    pub observed: Arc<Notify>,
    pub live_logs: LiveLogs,
    pub suspensions: Arc<Suspensions>,
    pub unrecorded: Arc<Unrecorded>,
    pub unjournaled: Arc<crate::unjournaled::Outbox>,
}

pub struct Settings {
    /// Where each replica's cgroup goes; `None`: process groups only.
    pub cgroups: Option<crate::cgroup::CgroupRoot>,
    /// This node's name.
    pub node: String,
    pub data_dir: PathBuf,
    pub checkpoint_root: PathBuf,
    pub kill_grace_ms: u64,
    /// How long a replica's processes may survive SIGKILL before it is reported
    /// `Unkillable` (its node then takes no new work).
    pub unkillable_after_ms: u64,
    pub log_cap_bytes: u64,
    pub lease: watch::Receiver<Lease>,
    pub metrics: Arc<crate::metrics::AgentMetrics>,
    pub run_as: crate::run_as::RunAsPolicy,
    /// The node's GPUs and MIG slices, which replicas are given.
    pub devices: crate::devices::Devices,
}

impl Supervisor {
    /// Loads the journal's replicas: adopts those still running, records how the others
    /// ended while the agent was down.
    pub fn new(journal: Arc<Journal>, settings: Settings) -> Result<(Supervisor, Shared), JournalError> {
        let (events_tx, events_rx) = mpsc::channel(crate::limits::EVENT_BUFFER);
        let (running_tx, running) = watch::channel(Vec::new());
        let (awaiting_tx, awaiting) = watch::channel(0);
        let observed = Arc::new(Notify::new());
        let live_logs: LiveLogs = Arc::default();
        // A previous run's lease of this boot (loaded from its file) binds what it left
        // running and counts as granted.
        let lease_granted = settings.lease.borrow().expires_at_ms().is_some();
        let lapses_seen = settings.lease.borrow().lapses();
        let mut sup = Supervisor {
            journal,
            cgroups: settings.cgroups,
            dying_cgroups: Vec::new(),
            unknown_cgroups: Vec::new(),
            lingering: BTreeMap::new(),
            unkillable_after: Duration::from_millis(settings.unkillable_after_ms),
            lease_granted,
            node: settings.node,
            data_dir: settings.data_dir,
            checkpoint_root: settings.checkpoint_root,
            run_as: settings.run_as,
            devices: settings.devices,
            start_failure: None,
            kill_grace_ms: settings.kill_grace_ms,
            log_cap_bytes: settings.log_cap_bytes,
            replicas: BTreeMap::new(),
            waits: JoinSet::new(),
            deferred: BTreeMap::new(),
            obeyed_index: 0,
            events_tx,
            events_rx,
            running_tx,
            awaiting_tx,
            observed: observed.clone(),
            live_logs: live_logs.clone(),
            last_checkpoint_poll: Instant::now(),
            lease: settings.lease,
            fenced: false,
            lapses_seen,
            obey_from: None,
            last_directive: None,
            applied_at: Instant::now(),
            fit_checked: None,
            metrics: settings.metrics,
            unjournaled: Arc::default(),
            journal_retry: (Instant::now(), Duration::from_millis(TICK_MS)),
            suspensions: Arc::default(),
            unrecorded: Arc::default(),
        };
        // Unknown on either side counts as a restart of the machine: the cautious reading.
        let boot = crate::procfs::boot_id();
        let same_boot = boot.is_some() && sup.journal.last_boot()? == boot;
        for mut rec in sup.journal.replicas()? {
            let key = rec.key;
            if rec.phase != Phase::Finished && rec.pid == 0 {
                match reconcile::without_pid(launch::find_unjournaled(&rec.exit_file), same_boot) {
                    Unjournaled::Running { pid, start_time } => {
                        // Spawned, then the agent went down before it journaled the pid.
                        rec.pid = pid;
                        rec.start_time = start_time;
                        let journaled = sup.journal.put_replica(&rec);
                        sup.survive(journaled)?;
                    }
                    Unjournaled::Ended => {}
                    Unjournaled::NeverStarted => {
                        // Journaled, never spawned: it never ran, so a RUN may start it.
                        tracing::info!(?key, "journaled but never started before the agent went down");
                        // Left in the journal if it fails: the next start finds it so again.
                        let removed = sup.journal.remove_replica(&key);
                        sup.survive(removed)?;
                        continue;
                    }
                }
            }
            let replica = Replica {
                signal: default_signal(),
                newest_checkpoint_ms: newest_checkpoint_ms(&sup.checkpoint_root, &key),
                rec,
                started: None,
                signal_again: None,
            };
            let finished = replica.rec.phase == Phase::Finished;
            let (pid, start) = (replica.rec.pid, replica.rec.start_time);
            sup.replicas.insert(key, replica);
            if finished {
                continue;
            }
            if pid != 0 && crate::procfs::is_same_process(pid, start) {
                tracing::info!(?key, pid, "re-adopted a replica that kept running");
                sup.set_live(&key, true);
                let steps = sup.replicas.get(&key).map(|r| reconcile::adopt_steps(&r.rec)).unwrap_or_default();
                if !steps.is_empty() {
                    tracing::info!(?key, "its stop was journaled before the agent went down: checkpoint signal sent");
                }
                sup.adopt_stop(&key, steps)?;
                if sup.replicas.get(&key).is_some_and(|r| r.rec.phase == Phase::Running) {
                    // Journaled running, it may be stopped: an agent that went down while
                    // suspending it, or after it told a suspension its failing journal could
                    // not record, left it so. A RUN of a replica held running sends nothing,
                    // so it would stay stopped for good; a SUSPEND suspends it again.
                    sup.thaw(&key);
                    signal_group(pid, libc::SIGCONT);
                }
            } else {
                let code = sup.exit_code_from_file(&key);
                // It ended while nobody watched: its pid may belong to someone else by now,
                // so its group is not signalled.
                let finished = sup.finish(&key, code, Leftovers::Leave);
                sup.survive(finished)?;
            }
        }
        if let Some(boot) = boot.filter(|_| !same_boot) {
            // Not noted, the next start in this boot reads it as a new boot: the cautious
            // reading.
            let noted = sup.journal.note_boot(&boot);
            sup.survive(noted)?;
        }
        if let Some(root) = sup.cgroups.clone() {
            let killed = sup.kill_unknown_replicas(&root);
            sup.survive(killed)?;
            root.remove_empty_children();
        }
        sup.publish();
        let (suspensions, unrecorded, unjournaled) =
            (sup.suspensions.clone(), sup.unrecorded.clone(), sup.unjournaled.clone());
        Ok((sup, Shared { running, awaiting, observed, live_logs, suspensions, unrecorded, unjournaled }))
    }

    /// Runs until `directives` closes (the agent shuts down). Processes keep running.
    pub async fn run(mut self, mut directives: mpsc::Receiver<Directive>) -> Result<(), JournalError> {
        let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let done = tokio::select! {
                d = directives.recv() => match d {
                    Some(d) => self.on_directive(d),
                    None => break,
                },
                Some(ev) = self.events_rx.recv() => self.on_exit(ev),
                _ = tick.tick() => self.on_tick(),
                Some(_) = self.waits.join_next(), if !self.waits.is_empty() => Ok(()),
            };
            self.survive(done)?;
        }
        self.waits.abort_all();
        // Replicas outlive the agent in their cgroups; an agent that leaves none removes its
        // root (rmdir(2) refuses one that still has children).
        if let Some(root) = &self.cgroups {
            root.remove_empty_children();
            let _ = std::fs::remove_dir(root.dir());
        }
        Ok(())
    }

    /// Live replicas whose cgroups the journal does not know (it was deleted or lost while
    /// they ran) are killed, not adopted: nothing says what they hold or how far their stop
    /// went. Each is remembered as ended here, so a RUN of it is answered with its end
    /// (`KilledHere`: the leader places the job again, from its newest checkpoint) instead of
    /// starting a second copy; and nothing starts until they are gone.
    fn kill_unknown_replicas(&mut self, root: &crate::cgroup::CgroupRoot) -> Result<(), JournalError> {
        for (key, cgroup) in root.populated_children(crate::limits::MAX_DYING_CGROUPS) {
            match self.replicas.get(&key).map(|r| r.rec.phase) {
                Some(Phase::Finished) => {
                    // Ended, its processes not gone when the agent went down: what it held is
                    // known (its GPUs stay held), its end was told or is lost with the journal's
                    // copy (then the leader finds it vanished).
                    let _ = self.linger(&key, cgroup, None);
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            tracing::error!(
                ?key,
                cgroup = %cgroup.dir().display(),
                "a live replica the journal does not know (was the journal removed?): killed; nothing starts until it is gone"
            );
            if let Err(e) = cgroup.kill() {
                tracing::warn!("{e}");
            }
            self.unknown_cgroups.push(cgroup.clone());
            if !self.replicas.contains_key(&key) {
                self.record_unrecorded(key, Outcome::Killed)?;
            }
            // Also lingering: holding every device (what it holds is not known), and reported
            // `Unkillable` if its processes survive the kill past the bound, so that the node
            // is taken out and fixed rather than refusing every start unseen.
            let _ = self.linger(&key, cgroup, None);
        }
        Ok(())
    }

    /// Whether this replica already ran here although no record says so (the journal was
    /// wiped or lost after it started): its exit file, its markers or its live wrapper are
    /// there. A live one is killed; either way it is recorded as ended and its end is what
    /// the RUN, STOP or SUSPEND is answered with (`reconcile::end_of_unrecorded`), never a
    /// second run of the attempt, nor "never ran" for one that did. A chaos run found one:
    /// a replica that ended as its agent was killed and its journal wiped ran again, whole,
    /// when the restarted agent got its RUN.
    fn ran_here_before(&mut self, key: &ReplicaKey) -> Result<bool, JournalError> {
        let exit_file = launch::exit_file(&self.data_dir, key.job_id, key.attempt, key.rank);
        // Its files first, a few stats: every start passes here, and a scan of /proc is not
        // cheap. A wrapper that wrote none yet was spawned an instant before the agent went
        // down; a journal that outlives it knows it (journaled with pid 0 before the spawn).
        if !launch::left_traces(&exit_file) {
            return Ok(false);
        }
        let outcome = match launch::find_unjournaled(&exit_file) {
            Unjournaled::NeverStarted => return Ok(false),
            Unjournaled::Running { pid, .. } => {
                tracing::error!(
                    ?key,
                    pid,
                    "a live replica the journal does not know (was the journal removed?): killed"
                );
                signal_group(pid, libc::SIGKILL);
                Outcome::Killed
            }
            Unjournaled::Ended => reconcile::unrecorded_ending(reconcile::Traces {
                code: launch::read_exit_file(&exit_file),
                watchdog_stopped: launch::lease_marker(&exit_file).exists(),
                stop_sent: launch::stop_marker(&exit_file).exists(),
                started_unix_ms: crate::checkpoint::mtime_ms(&launch::started_marker(&exit_file)),
                newest_checkpoint_unix_ms: newest_checkpoint_ms(&self.checkpoint_root, key),
            }),
        };
        tracing::warn!(?key, ?outcome, "ran here before, unrecorded (was the journal removed?): not started again");
        self.record_unrecorded(*key, outcome)?;
        self.act(reconcile::end_of_unrecorded(*key, outcome), &BTreeMap::new())?;
        Ok(true)
    }

    /// Journals and keeps a replica that ended here while no record knew it, as `outcome`.
    /// Remembered even when the journal fails (it is journaled with the others once the
    /// journal takes writes): forgotten, a RUN of the replica would start a second run.
    fn record_unrecorded(&mut self, key: ReplicaKey, outcome: Outcome) -> Result<(), JournalError> {
        let exit_file = launch::exit_file(&self.data_dir, key.job_id, key.attempt, key.rank);
        let rec = ReplicaRecord::ended_unrecorded(key, exit_file, outcome);
        let journaled = self.journal.put_replica(&rec);
        let replica =
            Replica { rec, signal: default_signal(), newest_checkpoint_ms: 0, started: None, signal_again: None };
        self.replicas.insert(key, replica);
        journaled
    }

    /// Carries out the stop a previous run journaled and did not signal (`adopt_steps`).
    /// A journal that fails meanwhile keeps its record in memory, journaled with the others
    /// once the journal takes writes: an agent restarted on a full disk still supervises
    /// what runs, where before it refused to start.
    fn adopt_stop(&mut self, key: &ReplicaKey, steps: Vec<Step>) -> Result<(), JournalError> {
        let records: Vec<Step> = steps.iter().filter(|s| matches!(s, Step::Journal(_))).cloned().collect();
        let done = self.run_steps(key, steps, Record::Journal);
        if matches!(done, Err(JournalError::Io { .. })) {
            self.run_steps(key, records, Record::InMemory)?;
        }
        self.survive(done)
    }

    /// A journal that cannot be written (a full disk, an I/O error) does not stop the
    /// supervisor: what runs stays supervised, nothing new starts (`reconcile`), and what
    /// could not be journaled is done again once the journal takes writes (`on_tick`). A
    /// journal that cannot be read correctly does stop it.
    fn survive(&mut self, done: Result<(), JournalError>) -> Result<(), JournalError> {
        match done {
            Err(e @ JournalError::Io { .. }) => {
                self.metrics.journal_failing(true);
                tracing::warn!("{e}; retried once the journal takes writes again");
                Ok(())
            }
            other => other,
        }
    }

    /// Once a failing journal takes writes again: journals what runs here as the supervisor
    /// knows it (the journal lost what it could not write), the observations made meanwhile,
    /// the stops the lease asked for, and applies the newest directive again.
    fn recover_journal(&mut self) -> Result<(), JournalError> {
        let (at, pause) = self.journal_retry;
        if self.journal.failing().is_none() {
            self.journal_retry = (at, Duration::from_millis(TICK_MS));
            return Ok(());
        }
        if Instant::now() < at {
            return Ok(());
        }
        self.journal_retry = (Instant::now() + pause, (pause * 2).min(Duration::from_millis(JOURNAL_RETRY_MAX_MS)));
        if !self.journal.recover()? {
            return Ok(());
        }
        let records: Vec<ReplicaRecord> = self.replicas.values().map(|r| r.rec.clone()).collect();
        for rec in &records {
            self.journal.put_replica(rec)?;
        }
        self.unjournaled.drain(|obs| self.journal.push_observation(obs))?;
        self.observed.notify_one();
        self.metrics.journal_failing(false);
        self.unrecorded.clear();
        if self.fenced && self.lease_expired() {
            self.stop_for_the_lease()?;
        }
        if self.fenced { Ok(()) } else { self.apply_last() }
    }

    fn on_directive(&mut self, d: Directive) -> Result<(), JournalError> {
        let result = self.apply(&d);
        self.last_directive = Some(d);
        result
    }

    fn apply(&mut self, d: &Directive) -> Result<(), JournalError> {
        self.applied_at = Instant::now();
        if let Some(floor) = self.obey_from {
            let built = Floor { term: d.term, state_index: d.state_index };
            if built < floor {
                tracing::info!(?built, ?floor, "waits for a directive as new as the state its lease was renewed from");
                return Ok(());
            }
            self.set_obey_from(None);
        }
        // Read before the lease is: a directive obeyed under a lease was obeyed no later
        // than this instant, which a test compares with when a leader was deposed.
        let at_unix_ms = now_unix_ms();
        let inputs = self.inputs(d)?;
        let plan = match reconcile::plan(d, &inputs) {
            Ok(plan) => plan,
            Err(why) => {
                tracing::warn!(term = d.term, leader_id = d.leader_id, "refused a directive: {why}");
                return Ok(());
            }
        };
        // Which leader this node obeys, directive by directive (`leased`: under a lease, so
        // its RUNs count; without one only its stops do). Off by default: one line per resend.
        tracing::debug!(
            target: DIRECTIVES_LOG,
            term = d.term,
            leader_id = d.leader_id,
            leased = !inputs.lease_expired,
            assignments = d.assignments.len(),
            at_unix_ms,
            "obeys a directive"
        );
        if let Some(fence) = plan.remember {
            self.journal.remember(fence)?;
        }
        if self.fit_checked != Some((d.lease_ms, d.heartbeat_timeout_ms)) {
            self.fit_checked = Some((d.lease_ms, d.heartbeat_timeout_ms));
            warn_if_the_lease_does_not_fit(d);
        }
        let assignments: BTreeMap<ReplicaKey, &Assignment> =
            d.assignments.iter().map(|a| (reconcile::key_of(a), a)).collect();
        for key in &plan.deferred {
            if !self.deferred.contains_key(key)
                && let Some(a) = assignments.get(key)
            {
                let holder = self.gpus_busy(key, a);
                tracing::info!(
                    ?key,
                    ?holder,
                    "waits for a replica still stopping: it holds its GPUs, or is an older attempt of its job"
                );
            }
        }
        self.deferred = plan.deferred.iter().filter_map(|k| assignments.get(k).map(|a| (*k, (*a).clone()))).collect();
        // Every deferred replica is this directive's now: its later start is asked for by it.
        self.obeyed_index = d.state_index;
        for act in plan.acts {
            self.act(act, &assignments)?;
        }
        self.prune_finished(&plan.wanted);
        self.unrecorded.retain(&plan.wanted);
        self.publish();
        Ok(())
    }

    /// What `reconcile::plan` needs to know, read from the journal and the replica table.
    fn inputs(&self, d: &Directive) -> Result<reconcile::Inputs, JournalError> {
        let mut inputs = reconcile::Inputs {
            fence: self.journal.fence()?,
            // Fenced until the tick takes in a renewal with its floor (`check_lease`): a
            // directive read in between was sent before the lease ran out (`tests/suite/lease.rs`,
            // `a_directive_read_between_a_renewal_and_the_agents_next_tick_starts_nothing`).
            lease_expired: self.lease_bars_starts(),
            lease_never_granted: self.lease.borrow().expires_at_ms().is_none(),
            replicas: self
                .replicas
                .iter()
                .map(|(k, r)| {
                    (
                        *k,
                        Known {
                            phase: r.rec.phase,
                            outcome: r.rec.outcome,
                            gpus: r.rec.gpus.clone(),
                            gpu_milli: r.rec.gpu_milli,
                        },
                    )
                })
                .collect(),
            deferred: self.deferred.keys().copied().collect(),
            journal_failing: self.journal.failing(),
            unknown_live: self.unknown_cgroups.len(),
            lingering: self.lingering.iter().map(|(k, l)| (*k, (l.gpus.clone(), l.gpu_milli))).collect(),
            suspensions: self
                .suspensions
                .held(|k| self.replicas.get(k).is_some_and(|r| r.rec.phase == Phase::Suspended)),
            ..Default::default()
        };
        // Bounded by MAX_ASSIGNMENTS_PER_DIRECTIVE; a longer directive is refused by `plan`.
        for a in d.assignments.iter().take(MAX_ASSIGNMENTS_PER_DIRECTIVE + 1) {
            if let Some(max) = self.journal.max_attempt(a.job_id)? {
                inputs.max_attempts.insert(a.job_id, max);
            }
            let key = reconcile::key_of(a);
            if !self.replicas.contains_key(&key) && self.journal.was_pruned(&key)? {
                inputs.pruned.insert(key);
            }
        }
        Ok(inputs)
    }

    /// Carries out one act of a plan.
    fn act(&mut self, act: Act, assignments: &BTreeMap<ReplicaKey, &Assignment>) -> Result<(), JournalError> {
        let assignment = |key: &ReplicaKey| assignments.get(key).copied();
        match act {
            Act::Kill(key) => self.begin_kill(&key),
            Act::Start(key) => match assignment(&key) {
                Some(a) => self.start(&key, a),
                None => Ok(()),
            },
            Act::Resume(key) => self.resume(&key),
            Act::Stop(key) => {
                let (Some(a), Some(r)) = (assignment(&key), self.replicas.get(&key)) else { return Ok(()) };
                let signal = parse_signal(&a.checkpoint_signal).unwrap_or(r.signal);
                self.begin_stop(&key, signal, a.grace_ms, StopCause::Directed)
            }
            Act::StopNeverRan(key) => match assignment(&key) {
                // No record knows it, but it may have run (the journal was lost): its end,
                // not "never ran", is what the leader needs.
                Some(_) if self.ran_here_before(&key)? => Ok(()),
                Some(a) => self.stop_never_ran(&key, a, StopCause::Directed),
                None => Ok(()),
            },
            Act::ReportStopped { key, checkpointed } => self.observe(stopped(&key, checkpointed, StopCause::Directed)),
            Act::KilledCountsAsStopped(key) => {
                let Some(r) = self.replicas.get_mut(&key) else { return Ok(()) };
                r.rec.outcome = Some(Outcome::Stopped { checkpointed: false });
                let rec = r.rec.clone();
                self.journal.put_replica(&rec)?;
                self.observe(stopped(&key, false, StopCause::Directed))
            }
            Act::ReportKilledHere { key, checkpointed } => {
                tracing::warn!(
                    ?key,
                    "a RUN or SUSPEND of a replica that ended here without its own exit; reporting its end"
                );
                self.observe(stopped(&key, checkpointed, StopCause::KilledHere))
            }
            Act::ReportExited { key, code } => {
                tracing::warn!(?key, code, "a replica's exit the leader has not heard of; reporting it (again)");
                self.observe(Observation {
                    what: Some(What::Exited(Exited {
                        job_id: key.job_id,
                        attempt: key.attempt,
                        rank: key.rank,
                        exit_code: code,
                        reason: String::new(),
                    })),
                })
            }
            Act::Suspend(key) => self.suspend(&key, Suspension::of(assignment(&key))),
            Act::ReportSuspended(key) => {
                tracing::info!(?key, "a new suspension of a replica already suspended here; reporting it suspended");
                self.report_suspended(key, Suspension::of(assignment(&key)))
            }
            // Ended here as a STOP of it would be: a RUN of it that comes later (sent
            // before the SUSPEND, or the leader resuming what it counts as suspended) must
            // not start a process the leader holds stopped (`tests/suite/fencing.rs`,
            // `a_run_after_a_suspend_of_a_replica_that_never_ran_starts_nothing`).
            Act::SuspendNeverRan(key) => match assignment(&key) {
                Some(_) if self.ran_here_before(&key)? => Ok(()),
                Some(a) => {
                    tracing::warn!(?key, "asked to suspend a replica that never ran here; it ends here unstarted");
                    self.stop_never_ran(&key, a, StopCause::KilledHere)
                }
                None => Ok(()),
            },
            Act::Unrecorded { key, why } => {
                self.metrics.run_refused();
                if self.unrecorded.refused(key, &why) {
                    tracing::warn!(?key, "not started, and the leader is told: the journal takes no writes: {why}");
                    self.observed.notify_one();
                }
                Ok(())
            }
            Act::Ignore { key, why: why @ Ignored::LeaseExpired } => {
                tracing::debug!(?key, "{why}");
                Ok(())
            }
            Act::Ignore { key, why: why @ Ignored::JournalFailing(_) } => {
                self.metrics.run_refused();
                tracing::warn!(?key, "{why}");
                Ok(())
            }
            Act::Ignore { key, why } => {
                tracing::warn!(?key, "ignored an assignment: {why}");
                Ok(())
            }
        }
    }

    fn resume(&mut self, key: &ReplicaKey) -> Result<(), JournalError> {
        self.thaw(key);
        let Some(r) = self.replicas.get_mut(key) else { return Ok(()) };
        signal_group(r.rec.pid, libc::SIGCONT);
        r.rec.phase = Phase::Running;
        let rec = r.rec.clone();
        self.journal.put_replica(&rec)?;
        tracing::info!(?key, "resumed a suspended replica (SIGCONT)");
        Ok(())
    }

    /// Never ran here: nothing to checkpoint. Remembered as stopped so a later RUN of the
    /// same attempt does not start it and a repeated STOP re-reports the same. Reported with
    /// `cause`: `KilledHere` for a SUSPEND (there is nothing to resume in place).
    fn stop_never_ran(&mut self, key: &ReplicaKey, a: &Assignment, cause: StopCause) -> Result<(), JournalError> {
        self.note_attempt(key)?;
        let rec = self.record(key, a, Phase::Finished);
        let rec = ReplicaRecord { outcome: Some(Outcome::Stopped { checkpointed: false }), ..rec };
        self.journal.put_replica(&rec)?;
        self.replicas.insert(
            *key,
            Replica { rec, signal: default_signal(), newest_checkpoint_ms: 0, started: None, signal_again: None },
        );
        self.observe(stopped(key, false, cause))
    }

    fn suspend(&mut self, key: &ReplicaKey, which: Suspension) -> Result<(), JournalError> {
        let cgroup = cgroup_of(&self.cgroups, key);
        let Some(r) = self.replicas.get_mut(key) else { return Ok(()) };
        match cgroup {
            // Every process of the replica, also one that left its group; its guard is
            // outside the cgroup and goes on watching the lease.
            Some(c) => freeze_replica(key, &c),
            // Not its watchdog: it stops the replica if this agent dies while it is suspended.
            None => launch::suspend_replica(r.rec.pid, &r.rec.exit_file),
        }
        r.rec.phase = Phase::Suspended;
        let rec = r.rec.clone();
        self.journal.put_replica(&rec)?;
        tracing::info!(?key, "suspended");
        self.report_suspended(*key, which)
    }

    /// Thaws the replica's cgroup, if it has one: a frozen process acts on no signal but
    /// SIGKILL, so every SIGCONT (a resume, a stop's) thaws first.
    fn thaw(&self, key: &ReplicaKey) {
        if let Some(c) = cgroup_of(&self.cgroups, key)
            && let Err(e) = c.freeze(false)
            && c.dir().exists()
        {
            tracing::warn!(?key, "cannot thaw the replica's cgroup: {e}");
        }
    }

    /// Noted before it is journaled, so the reporter's acknowledgement finds it.
    /// The report names the suspension it answers (`which`), so the leader takes a late
    /// repeat of it for no later one.
    fn report_suspended(&mut self, key: ReplicaKey, which: Suspension) -> Result<(), JournalError> {
        self.suspensions.reported(key);
        let mut o = stopped(&key, false, StopCause::Directed);
        if let Some(What::Stopped(s)) = &mut o.what {
            (s.suspension_by, s.suspension_ms) = (which.by, which.at_ms);
        }
        self.observe(o)
    }

    fn record(&self, key: &ReplicaKey, a: &Assignment, phase: Phase) -> ReplicaRecord {
        ReplicaRecord {
            key: *key,
            job: a.job.clone(),
            task: a.task,
            replica: a.replica,
            pid: 0,
            start_time: 0,
            phase,
            stop: None,
            kill_deadline_unix_ms: 0,
            kill_deadline_boot_ms: 0,
            outcome: None,
            exit_file: launch::exit_file(&self.data_dir, key.job_id, key.attempt, key.rank),
            gpus: a.gpus.clone(),
            gpu_milli: a.gpu_milli,
            slices: Vec::new(),
            started_unix_ms: now_unix_ms(),
            // Scanned before the intent is journaled, so before the replica can write.
            newest_checkpoint_at_start_unix_ms: Some(newest_checkpoint_ms(&self.checkpoint_root, key)),
        }
    }

    /// A replica other than `key` that has not ended, or whose processes live on, holds one
    /// of `gpus`.
    fn gpus_busy(&self, key: &ReplicaKey, a: &Assignment) -> Option<ReplicaKey> {
        let held: Vec<reconcile::Hold> = self
            .replicas
            .values()
            .filter(|r| r.rec.phase != Phase::Finished)
            .map(|r| reconcile::Hold { key: r.rec.key, gpus: &r.rec.gpus, milli: r.rec.gpu_milli })
            .chain(self.lingering.iter().map(|(&key, l)| reconcile::Hold { key, gpus: &l.gpus, milli: l.gpu_milli }))
            .collect();
        reconcile::blocker(&reconcile::Hold { key: *key, gpus: &a.gpus, milli: a.gpu_milli }, &held)
    }

    /// The devices for `a`'s replica: its GPUs by device index and slices no replica that
    /// has not ended (or whose processes live on) holds.
    fn give_devices(
        &self,
        key: &ReplicaKey,
        a: &Assignment,
    ) -> Result<crate::devices::Given, crate::devices::TooFewSlices> {
        let held: Vec<&str> = self
            .replicas
            .values()
            .filter(|r| r.rec.phase != Phase::Finished && r.rec.key != *key)
            .flat_map(|r| r.rec.slices.iter())
            .chain(self.lingering.values().flat_map(|l| l.slices.iter()))
            .map(String::as_str)
            .collect();
        self.devices.give(&a.gpus, a.gpu_milli, &a.slices, &held)
    }

    /// Starts the deferred replicas whose GPUs are free now.
    fn start_deferred(&mut self) -> Result<(), JournalError> {
        if self.lease_bars_starts() || self.journal.failing().is_some() {
            // The next tick stops everything and forgets what waits; an exit noticed in
            // between must not start anything meanwhile. Nor does anything start while the
            // journal cannot record it first.
            return Ok(());
        }
        let ready: Vec<ReplicaKey> = self
            .deferred
            .iter()
            .filter(|(k, a)| self.gpus_busy(k, a).is_none() && self.give_devices(k, a).is_ok())
            .map(|(k, _)| *k)
            .collect();
        for key in ready {
            if let Some(a) = self.deferred.remove(&key) {
                tracing::info!(?key, "its GPUs and slices are free now");
                self.start(&key, &a)?;
            }
        }
        Ok(())
    }

    fn note_attempt(&self, key: &ReplicaKey) -> Result<(), JournalError> {
        if self.journal.max_attempt(key.job_id)?.is_none_or(|m| m < key.attempt) {
            self.journal.set_max_attempt(key.job_id, key.attempt)?;
        }
        Ok(())
    }

    fn start(&mut self, key: &ReplicaKey, a: &Assignment) -> Result<(), JournalError> {
        if self.ran_here_before(key)? {
            return Ok(());
        }
        // The last step of the job's decision path (docs/metrics.md, "Tracing"); the term
        // is that of the leader whose directive this agent follows.
        let term = self.journal.fence()?.term;
        let _span = tracing::info_span!("agent_start", job = a.job_id, attempt = a.attempt, rank = a.rank, term, node = %self.node)
            .entered();
        let given = match self.give_devices(key, a) {
            Ok(given) => given,
            Err(short) => {
                // A replica still stopping here holds them: it starts when that one is gone.
                tracing::info!(?key, "waits for MIG slices: {short}");
                self.deferred.insert(*key, a.clone());
                return Ok(());
            }
        };
        self.note_attempt(key)?;
        // Journal the intent first (pid 0). After a crash between here and the next write,
        // a restarted agent finds the wrapper by its exit file path and adopts it, or finds
        // its traces (it ran and ended), or none (never spawned: it may start then).
        let mut rec = self.record(key, a, Phase::Running);
        rec.slices = given.slice_uuids();
        self.journal.put_replica(&rec)?;
        let (signal, signal_name) = checkpoint_signal(&a.checkpoint_signal).unwrap_or_else(|e| {
            tracing::warn!(job = a.job, "{e}; using {DEFAULT_CHECKPOINT_SIGNAL}");
            (default_signal(), DEFAULT_CHECKPOINT_SIGNAL.to_string())
        });
        let active: HashSet<u64> =
            self.replicas.values().filter(|r| r.rec.phase != Phase::Finished).map(|r| r.rec.key.job_id).collect();
        logfiles::retain(&self.data_dir, a.job_id, &active);
        let dirs = LaunchDirs {
            data_dir: &self.data_dir,
            checkpoint_root: &self.checkpoint_root,
            node: &self.node,
            run_as: &self.run_as,
            cgroup: cgroup_of(&self.cgroups, key),
            given: &given,
            state_index: self.obeyed_index,
        };
        // Live before it starts: its output is on disk from its first instruction, while the
        // start is still being journaled (a sync), and a follow asked for meanwhile waits for
        // more rather than ending with what is there
        // (`a_follow_asked_while_the_start_is_journaled_waits_for_more`).
        self.mark_live(key, true);
        match launch::start(a, &dirs, &signal_name, signal) {
            Ok(started) => {
                rec.pid = started.pid;
                rec.start_time = crate::procfs::start_time(started.pid).unwrap_or(0);
                // It runs now: supervised whether or not its pid is journaled (a restarted
                // agent finds it by its exit file path; a recovered journal gets the record).
                let journaled = self.journal.put_replica(&rec);
                tracing::info!(?key, job = a.job, pid = started.pid, "started");
                let tx = self.events_tx.clone();
                let (key2, pid) = (*key, started.pid);
                let mut child = started.child;
                self.waits.spawn(async move {
                    let code = match child.wait().await {
                        Ok(status) => launch::exit_code(status),
                        Err(_) => EXIT_CODE_KILLED,
                    };
                    let _ = tx.send(ExitEvent { key: key2, pid, code }).await;
                });
                let newest = newest_checkpoint_ms(&self.checkpoint_root, key);
                let started = Some(Instant::now());
                self.replicas
                    .insert(*key, Replica { rec, signal, newest_checkpoint_ms: newest, started, signal_again: None });
                self.set_live(key, true);
                journaled
            }
            Err(e) => {
                self.mark_live(key, false);
                tracing::warn!(?key, job = a.job, "cannot start: {e}");
                self.replicas
                    .insert(*key, Replica { rec, signal, newest_checkpoint_ms: 0, started: None, signal_again: None });
                self.start_failure = Some(e.to_string());
                let finished = self.finish(key, EXIT_CODE_NOT_STARTED, Leftovers::Leave);
                self.start_failure = None;
                finished
            }
        }
    }

    fn begin_stop(
        &mut self,
        key: &ReplicaKey,
        signal: i32,
        grace_ms: u64,
        cause: StopCause,
    ) -> Result<(), JournalError> {
        let Some(r) = self.replicas.get_mut(key) else { return Ok(()) };
        let before = newest_checkpoint_ms(&self.checkpoint_root, key);
        let now = Clock { unix_ms: now_unix_ms(), boot_ms: boot_ms() };
        let lease_expired = cause == StopCause::LeaseExpired;
        let mut steps = reconcile::stop_steps(&r.rec, signal, grace_ms, lease_expired, before, now);
        r.signal_again = signal_again(r.started, signal);
        let exit_file = r.rec.exit_file.clone();
        if self.journal.failing().is_some() {
            if !self.stop_unjournaled(key, &exit_file) {
                return Ok(());
            }
            tracing::info!(?key, signal, grace_ms, "checkpoint-then-stop: signal sent (its stop not journaled)");
            return self.run_steps(key, steps, Record::InMemory);
        }
        // The intent is journaled before the marker: a marker left for a stop that was
        // never signalled would make the replica's own later exit read as a stop.
        let signals = steps.split_off(1);
        self.run_steps(key, steps, Record::Journal)?;
        leave_stop_marker(key, &exit_file, false);
        tracing::info!(?key, signal, grace_ms, "checkpoint-then-stop: signal sent");
        self.run_steps(key, signals, Record::Journal)
    }

    /// Whether a stop or a kill of `key` may be signalled while the journal takes no writes:
    /// only once its stop marker is on stable storage, where it stands in for the journal
    /// (a restarted agent reads the replica's end as a stop, `reconcile::ending`). Before,
    /// such a stop waited for the journal: on a node whose disk was full a preemption's
    /// victim, or a cancelled job, ran on for as long as the disk failed.
    fn stop_unjournaled(&self, key: &ReplicaKey, exit_file: &Path) -> bool {
        let marked = leave_stop_marker(key, exit_file, true);
        if !marked {
            tracing::warn!(?key, "its stop waits for the journal: neither it nor the stop marker takes writes");
        }
        marked
    }

    /// Carries out journal writes and signals in their order; the replica's record follows
    /// each journal write (`Record::InMemory`: only the record, journaled with the others
    /// once the journal takes writes, `recover_journal`).
    fn run_steps(&mut self, key: &ReplicaKey, steps: Vec<Step>, how: Record) -> Result<(), JournalError> {
        for step in steps {
            match step {
                Step::Journal(rec) => {
                    if how == Record::Journal {
                        self.journal.put_replica(&rec)?;
                    }
                    if let Some(r) = self.replicas.get_mut(key) {
                        r.rec = rec;
                    }
                }
                Step::Signal { pid, signal } => {
                    if signal == libc::SIGCONT {
                        self.thaw(key);
                    }
                    signal_group(pid, signal)
                }
            }
        }
        Ok(())
    }

    fn begin_kill(&mut self, key: &ReplicaKey) -> Result<(), JournalError> {
        let Some(r) = self.replicas.get_mut(key) else { return Ok(()) };
        if r.rec.phase == Phase::Killing {
            return Ok(());
        }
        // Journaled first, as a stop is: the deadline's SIGKILL covers a crash before SIGTERM.
        let rec = ReplicaRecord {
            phase: Phase::Killing,
            kill_deadline_unix_ms: now_unix_ms() + self.kill_grace_ms,
            kill_deadline_boot_ms: boot_ms() + self.kill_grace_ms,
            ..r.rec.clone()
        };
        if self.journal.failing().is_some() {
            if !self.stop_unjournaled(key, &rec.exit_file) {
                return Ok(());
            }
        } else {
            self.journal.put_replica(&rec)?;
            leave_stop_marker(key, &rec.exit_file, false);
        }
        let Some(r) = self.replicas.get_mut(key) else { return Ok(()) };
        r.rec = rec.clone();
        r.signal_again = signal_again(r.started, libc::SIGTERM);
        // Also when journaled running: an agent that died while suspending it may have
        // stopped (or frozen) some of its processes and journaled nothing.
        self.thaw(key);
        signal_group(rec.pid, libc::SIGTERM);
        signal_group(rec.pid, libc::SIGCONT);
        tracing::info!(?key, "no longer wanted here: SIGTERM, SIGKILL after {} ms", self.kill_grace_ms);
        Ok(())
    }

    fn on_exit(&mut self, ev: ExitEvent) -> Result<(), JournalError> {
        let Some(r) = self.replicas.get(&ev.key) else { return Ok(()) };
        if r.rec.pid != ev.pid || r.rec.phase == Phase::Finished {
            return Ok(());
        }
        self.finish(&ev.key, ev.code, Leftovers::Kill)?;
        self.start_deferred()?;
        self.publish();
        Ok(())
    }

    fn exit_code_from_file(&self, key: &ReplicaKey) -> i32 {
        self.replicas.get(key).and_then(|r| launch::read_exit_file(&r.rec.exit_file)).unwrap_or(EXIT_CODE_KILLED)
    }

    /// Records how a replica ended and what to tell the leader about it.
    fn finish(&mut self, key: &ReplicaKey, code: i32, leftovers: Leftovers) -> Result<(), JournalError> {
        let Some(r) = self.replicas.get_mut(key) else { return Ok(()) };
        if leftovers == Leftovers::Kill && r.rec.phase != Phase::Finished {
            // Whatever the job left behind in its group (children) goes with it. The group
            // id cannot have been reused while members of it remain.
            signal_group(r.rec.pid, libc::SIGKILL);
        }
        // And whatever left the group (setsid, a double fork): its cgroup holds it. The cgroup
        // is this replica's alone, so unlike a pid it is safe to kill even after a restart.
        let lingers = cgroup_of(&self.cgroups, key).filter(|c| !c.kill_and_remove());
        let seen = Ended {
            code,
            watchdog_stopped: launch::lease_marker(&r.rec.exit_file).exists(),
            stop_sent: launch::stop_marker(&r.rec.exit_file).exists(),
            newest_checkpoint_unix_ms: newest_checkpoint_ms(&self.checkpoint_root, key),
            now_unix_ms: now_unix_ms(),
        };
        let Some(ending) = reconcile::ending(&r.rec, seen) else { return Ok(()) };
        if r.rec.phase == Phase::Stopping {
            let stop = r.rec.stop;
            let took_ms = seen.now_unix_ms.saturating_sub(stop.map_or(seen.now_unix_ms, |s| s.signal_unix_ms));
            self.metrics.stopped(stop.is_some_and(|s| s.lease_expired), took_ms as f64 / 1000.0);
        } else if let Ending::Stopped { .. } = ending {
            tracing::warn!(?key, "its watchdog stopped it: the lease ran out");
        }
        let obs = match ending {
            Ending::Exited { code } => {
                r.rec.outcome = Some(Outcome::Exited { code });
                Some(Observation {
                    what: Some(What::Exited(Exited {
                        job_id: key.job_id,
                        attempt: key.attempt,
                        rank: key.rank,
                        exit_code: code,
                        reason: self.start_failure.take().unwrap_or_default(),
                    })),
                })
            }
            Ending::Stopped { checkpointed, lease_expired } => {
                r.rec.outcome = Some(Outcome::Stopped { checkpointed });
                let cause = if lease_expired { StopCause::LeaseExpired } else { StopCause::Directed };
                Some(stopped(key, checkpointed, cause))
            }
            Ending::Killed => {
                r.rec.outcome = Some(Outcome::Killed);
                None
            }
        };
        r.rec.phase = Phase::Finished;
        let rec = r.rec.clone();
        tracing::info!(?key, code, outcome = ?rec.outcome, "replica ended");
        // Its exit file and markers stay until its record is pruned: a journal lost or wiped
        // meanwhile, a RUN of it (its end not yet committed) finds them and starts no second
        // run of the attempt (`start`).
        let journaled = self.journal.put_replica(&rec);
        self.set_live(key, false);
        let obs = match lingers {
            Some(cgroup) => self.linger(key, cgroup, obs),
            None => obs,
        };
        let observed = match obs {
            Some(obs) => self.observe(obs),
            None => Ok(()),
        };
        journaled.and(observed)
    }

    /// A replica whose wrapper ended while its cgroup still holds processes has not ended:
    /// its GPUs stay held here, and its end (`obs`) is told only once the cgroup is empty,
    /// or once its processes have survived SIGKILL past `unkillable_after` (then after
    /// `Unkillable`). Returns the end to tell now: past the bound on lingering replicas, at
    /// once, as before.
    fn linger(
        &mut self,
        key: &ReplicaKey,
        cgroup: crate::cgroup::ReplicaCgroup,
        obs: Option<Observation>,
    ) -> Option<Observation> {
        if self.lingering.len() >= crate::limits::MAX_DYING_CGROUPS {
            if !self.dying_cgroups.contains(&cgroup) && self.dying_cgroups.len() < crate::limits::MAX_DYING_CGROUPS {
                self.dying_cgroups.push(cgroup);
            }
            return obs;
        }
        tracing::info!(?key, "its processes outlive its wrapper: killed; its end is told once they are gone");
        let (gpus, gpu_milli, slices) = match self.replicas.get(key) {
            Some(r) if !r.rec.is_unrecorded() => (r.rec.gpus.clone(), r.rec.gpu_milli, r.rec.slices.clone()),
            // What it holds is not known (its journal was lost while it ran): every device
            // of the node, until its processes are gone (`tests/cgroups.rs`,
            // `a_replica_the_journal_lost_holds_every_gpu_while_it_lives_also_after_a_restart`).
            _ => (self.devices.every_gpu(), 0, self.devices.every_slice()),
        };
        let l = Lingering { cgroup, gpus, gpu_milli, slices, since: Instant::now(), end: obs, unkillable_told: false };
        self.lingering.insert(*key, l);
        None
    }

    /// Tells the end of each lingering replica whose cgroup is now empty; reports
    /// `Unkillable` (then its end, so its job moves on) for one whose processes survived
    /// SIGKILL past the bound, whose GPUs stay held here while the node takes no new work.
    fn settle_lingering(&mut self) -> Result<(), JournalError> {
        let mut tell = Vec::new();
        for (key, l) in self.lingering.iter_mut() {
            if l.cgroup.kill_and_remove() {
                tell.push((*key, None, l.end.take(), true));
            } else if !l.unkillable_told && l.since.elapsed() >= self.unkillable_after {
                l.unkillable_told = true;
                let reason = format!(
                    "its processes survived SIGKILL for {} s: {}",
                    l.since.elapsed().as_secs(),
                    l.cgroup.describe_processes()
                );
                tell.push((*key, Some(reason), l.end.take(), false));
            }
        }
        let freed = tell.iter().any(|(_, _, _, gone)| *gone);
        for (key, unkillable, end, gone) in tell {
            if gone {
                self.lingering.remove(&key);
            }
            if let Some(reason) = unkillable {
                tracing::error!(
                    ?key,
                    reason,
                    "a replica cannot be killed: its GPUs stay held, its node takes no new work"
                );
                self.metrics.unkillable();
                self.observe(Observation {
                    what: Some(What::Unkillable(Unkillable {
                        job_id: key.job_id,
                        attempt: key.attempt,
                        rank: key.rank,
                        reason,
                    })),
                })?;
            }
            if let Some(end) = end {
                self.observe(end)?;
            }
        }
        if freed {
            // What waited for their GPUs starts now, not at the next directive.
            self.start_deferred()?;
        }
        Ok(())
    }

    /// Applies the last directive again once `REAPPLY_MS` has passed without one.
    fn reapply(&mut self) -> Result<(), JournalError> {
        if self.fenced || self.applied_at.elapsed() < Duration::from_millis(REAPPLY_MS) {
            return Ok(());
        }
        self.apply_last()
    }

    /// Applies the newest directive again, if there is one.
    fn apply_last(&mut self) -> Result<(), JournalError> {
        let Some(d) = self.last_directive.take() else { return Ok(()) };
        let result = self.apply(&d);
        self.last_directive = Some(d);
        result
    }

    /// Obeys from now on only directives built from a state at least `floor`; the reporter
    /// asks the leader for one, since an unchanged directive is not sent again unasked.
    fn set_obey_from(&mut self, floor: Option<Floor>) {
        self.obey_from = floor;
        self.awaiting_tx.send_replace(floor.map_or(0, |f| f.state_index));
    }

    fn lease_expired(&self) -> bool {
        self.lease.borrow().expired(boot_ms())
    }

    /// Nothing may start: the lease ran out, or it lapsed and was renewed before a tick
    /// acted on the lapse (stop 66, seed 19003: a whole node thawed, its agent's renewal
    /// came first, and a replica deferred before the freeze started on a GPU freed at the
    /// thaw, beside its job's next attempt elsewhere), or the fence still holds.
    fn lease_bars_starts(&self) -> bool {
        self.fenced || self.lease_expired() || self.lapse_unseen()
    }

    /// The lease ran out and was renewed since the last tick, which saw it held.
    fn lapse_unseen(&self) -> bool {
        self.lease.borrow().lapses() > self.lapses_seen
    }

    /// Stops every replica once the lease has run out; once a leader renews it, applies the
    /// newest directive again so that what it wants starts.
    fn check_lease(&mut self) -> Result<(), JournalError> {
        if !self.lease_granted && self.lease.borrow().expires_at_ms().is_some() {
            // The first grant: what the newest directive wants may start now.
            self.lease_granted = true;
            tracing::info!("a lease is granted");
            self.apply_last()?;
        }
        let expired = self.lease_expired();
        // A lapse renewed before this tick is acted on as an expiry: what ran past the
        // lease stops, and the renewal's floor holds off directives built before it.
        let lapsed = self.lapse_unseen();
        self.lapses_seen = self.lease.borrow().lapses();
        if (expired || lapsed) && !self.fenced {
            self.fenced = true;
            self.metrics.lease_expired();
            self.deferred.clear();
            self.stop_for_the_lease()?;
        }
        if !expired && self.fenced {
            self.fenced = false;
            let floor = self.lease.borrow().floor();
            self.set_obey_from(Some(floor));
            tracing::info!("the lease is renewed");
            self.apply_last()?;
        }
        Ok(())
    }

    /// Checkpoint-then-stop of every replica still running or suspended here.
    fn stop_for_the_lease(&mut self) -> Result<(), JournalError> {
        let running: Vec<(ReplicaKey, i32)> = self
            .replicas
            .iter()
            .filter(|(_, r)| matches!(r.rec.phase, Phase::Running | Phase::Suspended))
            .map(|(k, r)| (*k, r.signal))
            .collect();
        if !running.is_empty() {
            tracing::warn!(replicas = running.len(), "the lease ran out: checkpoint-then-stop of everything here");
        }
        let now = boot_ms();
        let grace_ms = reconcile::lease_stop_grace_ms(self.lease.borrow().ran_out_at_ms(now), now);
        for (key, signal) in running {
            if grace_ms == 0 {
                self.kill_for_the_lease(&key)?;
            } else {
                self.begin_stop(&key, signal, grace_ms, StopCause::LeaseExpired)?;
            }
        }
        Ok(())
    }

    /// Kills a replica at once for its lease: the stop's deadline passed while this agent
    /// could not act (`reconcile::lease_stop_grace_ms`). Its cgroup first, before anything
    /// thaws it (a frozen process dies of SIGKILL too), then its group, journaled as a stop
    /// for the lease with no grace. Killing before the journal write is safe here: a replica
    /// whose lease ran out must not run, whatever the journal says after a crash.
    fn kill_for_the_lease(&mut self, key: &ReplicaKey) -> Result<(), JournalError> {
        if let Some(c) = cgroup_of(&self.cgroups, key)
            && let Err(e) = c.kill()
            && c.dir().exists()
        {
            tracing::warn!(?key, "cannot kill the replica's cgroup: {e}");
        }
        tracing::warn!(?key, "the lease ran out past its stop's deadline: killed, no checkpoint signal");
        self.begin_stop(key, libc::SIGKILL, 0, StopCause::LeaseExpired)
    }

    fn on_tick(&mut self) -> Result<(), JournalError> {
        if let Err(e) = self.recover_journal() {
            tracing::debug!("the journal still cannot be written: {e}");
        }
        // The reporter's writes fail there too: the gauge follows the journal, not the errors
        // this task saw.
        self.metrics.journal_failing(self.journal.failing().is_some());
        self.check_lease()?;
        self.reapply()?;
        // Killed on the replica's end; gone once their last process has died.
        self.dying_cgroups.retain(|c| !c.kill_and_remove());
        self.unknown_cgroups.retain(|c| !c.kill_and_remove());
        self.settle_lingering()?;
        let (now, now_boot) = (now_unix_ms(), boot_ms());
        let mut gone = Vec::new();
        let mut again = Vec::new();
        for (key, r) in &self.replicas {
            let rec = &r.rec;
            if rec.phase == Phase::Finished {
                continue;
            }
            if !crate::procfs::is_same_process(rec.pid, rec.start_time) {
                // Adopted replicas are not our children: notice their end through /proc. Our
                // own end by their wait task, which has the exact status: between the exit
                // and its event the exit file is all /proc leaves, and a job may have
                // removed it (`a_replica_this_agent_started_ends_with_its_waits_status_not_a_guess_from_proc`).
                if r.started.is_none() {
                    gone.push(*key);
                }
                continue;
            }
            let past_deadline = match rec.phase {
                // Deadlines count on CLOCK_BOOTTIME: a wall-clock step must not cut a grace.
                Phase::Stopping => rec.stop.is_some_and(|s| s.past(now_boot, now)),
                Phase::Killing if rec.kill_deadline_boot_ms > 0 => now_boot >= rec.kill_deadline_boot_ms,
                Phase::Killing => now >= rec.kill_deadline_unix_ms,
                _ => false,
            };
            if past_deadline && group_alive(rec.pid) {
                signal_group(rec.pid, libc::SIGKILL);
            }
            if past_deadline && let Some(c) = cgroup_of(&self.cgroups, key) {
                // Also the processes that left the group: only the cgroup still holds them.
                let _ = c.kill();
            }
            if let Some((at, sig)) = r.signal_again
                && Instant::now() >= at
                && matches!(rec.phase, Phase::Stopping | Phase::Killing)
            {
                again.push((*key, sig));
            }
            for stream in ["stdout", "stderr"] {
                let path = logfiles::log_path(&self.data_dir, key.job_id, key.attempt, key.rank, stream);
                if let Err(e) = logfiles::enforce_cap(&path, self.log_cap_bytes) {
                    tracing::debug!(path = %path.display(), "cannot check the log size: {e}");
                }
            }
        }
        for (key, sig) in again {
            if let Some(r) = self.replicas.get_mut(&key) {
                r.signal_again = None;
                if group_alive(r.rec.pid) {
                    tracing::info!(?key, sig, "stop signal sent again (the first came right after its start)");
                    signal_group(r.rec.pid, sig);
                }
            }
        }
        for key in gone {
            let code = self.exit_code_from_file(&key);
            self.finish(&key, code, Leftovers::Kill)?;
        }
        self.start_deferred()?;
        if self.last_checkpoint_poll.elapsed() >= Duration::from_millis(CHECKPOINT_POLL_MS) {
            self.last_checkpoint_poll = Instant::now();
            self.poll_checkpoints()?;
        }
        self.publish();
        Ok(())
    }

    fn poll_checkpoints(&mut self) -> Result<(), JournalError> {
        // Per rank, on the rank's own files: the job counts as checkpointed once every rank
        // has reported one, and another rank's save must not count as this one's.
        let mut fresh: HashSet<ReplicaKey> = HashSet::new();
        for r in self.replicas.values_mut() {
            if r.rec.phase != Phase::Running {
                continue;
            }
            let newest = newest_checkpoint_ms(&self.checkpoint_root, &r.rec.key);
            if newest > r.newest_checkpoint_ms {
                r.newest_checkpoint_ms = newest;
                fresh.insert(r.rec.key);
            }
        }
        let mut fresh: Vec<_> = fresh.into_iter().collect();
        fresh.sort_unstable();
        for ReplicaKey { job_id, attempt, rank } in fresh {
            self.observe(Observation { what: Some(What::Checkpointed(Checkpointed { job_id, attempt, rank })) })?;
        }
        Ok(())
    }

    /// Journals an observation for the reporter; one the journal cannot take now waits in
    /// memory until it can (an agent restarted meanwhile finds the replica's end again).
    fn observe(&mut self, obs: Observation) -> Result<(), JournalError> {
        if self.journal.failing().is_some() {
            self.keep_unjournaled(obs);
            return Ok(());
        }
        match self.journal.push_observation(&obs) {
            Ok(()) => {
                self.observed.notify_one();
                Ok(())
            }
            Err(e) => {
                self.keep_unjournaled(obs);
                Err(e)
            }
        }
    }

    /// Keeps `obs` in memory for the reporter to send at once (`unjournaled`).
    fn keep_unjournaled(&mut self, obs: Observation) {
        if self.unjournaled.keep(obs) {
            tracing::warn!("more than {MAX_PENDING_OBSERVATIONS} observations wait for the journal; the oldest goes");
        }
        self.observed.notify_one();
    }

    fn set_live(&self, key: &ReplicaKey, live: bool) {
        if self.replicas.contains_key(key) {
            self.mark_live(key, live);
        }
    }

    /// Whether a follow of `key`'s logs waits for more.
    fn mark_live(&self, key: &ReplicaKey, live: bool) {
        let id = (key.job_id, key.attempt, key.rank);
        let mut set = self.live_logs.lock().unwrap_or_else(|p| p.into_inner());
        if live {
            set.insert(id);
        } else {
            set.remove(&id);
        }
    }

    /// Keeps the finished records bounded: past the bound, those the current directive does
    /// not mention go (the journal remembers their keys, so they never start again).
    fn prune_finished(&mut self, wanted: &BTreeSet<ReplicaKey>) {
        let finished = self.replicas.values().filter(|r| r.rec.phase == Phase::Finished).count();
        if finished <= MAX_FINISHED_RECORDS {
            return;
        }
        let drop: Vec<ReplicaKey> = self
            .replicas
            .iter()
            .filter(|(k, r)| r.rec.phase == Phase::Finished && !wanted.contains(k))
            .map(|(k, _)| *k)
            .take(finished - MAX_FINISHED_RECORDS)
            .collect();
        for key in drop {
            if self.journal.prune_replica(&key).is_ok()
                && let Some(r) = self.replicas.remove(&key)
            {
                launch::remove_markers(&r.rec.exit_file);
            }
        }
    }

    fn publish(&self) {
        // Held back for their GPUs: listed too, since the leader compares this list with
        // what it placed here.
        let waiting = self.deferred.iter().map(|(k, a)| Running {
            job_id: k.job_id,
            attempt: k.attempt,
            task: a.task,
            replica: a.replica,
            rank: k.rank,
            phase: ReplicaPhase::WaitingForGpus as i32,
        });
        let running: Vec<Running> = self
            .replicas
            .values()
            .filter_map(|r| {
                let phase = match r.rec.phase {
                    Phase::Running => ReplicaPhase::Running,
                    Phase::Stopping | Phase::Killing => ReplicaPhase::Stopping,
                    Phase::Suspended => ReplicaPhase::Suspended,
                    // Its processes live on and its end is not told yet: still there.
                    Phase::Finished if self.lingering.get(&r.rec.key).is_some_and(|l| l.end.is_some()) => {
                        ReplicaPhase::Stopping
                    }
                    Phase::Finished => return None,
                };
                Some(Running {
                    job_id: r.rec.key.job_id,
                    attempt: r.rec.key.attempt,
                    task: r.rec.task,
                    replica: r.rec.replica,
                    rank: r.rec.key.rank,
                    phase: phase as i32,
                })
            })
            .chain(waiting)
            .collect();
        self.running_tx.send_if_modified(|cur| {
            if *cur == running {
                false
            } else {
                *cur = running;
                true
            }
        });
    }
}

/// What to do with processes a replica left in its group when its wrapper ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftovers {
    Kill,
    Leave,
}

/// The newest file that counts as `key`'s rank's checkpoint (0: none).
/// Freezes a replica's cgroup and waits a moment for it to be frozen: a process in
/// uninterruptible sleep freezes only once it wakes, and is then frozen by the kernel
/// without more from the agent.
fn freeze_replica(key: &ReplicaKey, c: &crate::cgroup::ReplicaCgroup) {
    if let Err(e) = c.freeze(true) {
        tracing::warn!(?key, "cannot freeze the replica's cgroup: {e}");
        return;
    }
    for _ in 0..FREEZE_CHECKS {
        if c.frozen() {
            return;
        }
        std::thread::sleep(Duration::from_millis(FREEZE_CHECK_MS));
    }
    tracing::warn!(?key, "the replica's cgroup is not frozen yet (a process in uninterruptible sleep?)");
}

/// How long `freeze_replica` waits for the kernel, in checks of `FREEZE_CHECK_MS`.
const FREEZE_CHECKS: u32 = 20;
const FREEZE_CHECK_MS: u64 = 5;

/// The cgroup of replica `key` under `root`, if replicas have cgroups here.
fn cgroup_of(root: &Option<crate::cgroup::CgroupRoot>, key: &ReplicaKey) -> Option<crate::cgroup::ReplicaCgroup> {
    root.as_ref().map(|r| r.replica(key.job_id, key.attempt, key.rank))
}

/// Leaves the marker that says this agent signalled the replica to stop (`launch::stop_marker`),
/// before the signal; whether it is there. One that cannot be written is said, not fatal
/// when the journal says it too. `synced`: on stable storage (the file and its directory),
/// for a stop the journal cannot record.
fn leave_stop_marker(key: &ReplicaKey, exit_file: &Path, synced: bool) -> bool {
    let marker = launch::stop_marker(exit_file);
    let written = if synced { crate::launch::write_synced(&marker, b"") } else { std::fs::write(&marker, b"") };
    if let Err(e) = &written {
        tracing::warn!(?key, "cannot leave the stop marker beside {}: {e}", exit_file.display());
    }
    written.is_ok()
}

/// How `Supervisor::run_steps` records a step's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    Journal,
    InMemory,
}

fn newest_checkpoint_ms(checkpoint_root: &Path, key: &ReplicaKey) -> u64 {
    newest_rank_mtime_ms(&launch::checkpoint_dir(checkpoint_root, key.job_id), key.rank)
}

fn stopped(key: &ReplicaKey, checkpointed: bool, cause: StopCause) -> Observation {
    Observation {
        what: Some(What::Stopped(Stopped {
            job_id: key.job_id,
            attempt: key.attempt,
            checkpointed,
            rank: key.rank,
            cause: cause as i32,
            suspension_by: 0,
            suspension_ms: 0,
        })),
    }
}

/// Which suspension a SUSPEND is part of, as its assignment names it (0 and 0 from a leader
/// before it): its report carries it back.
#[derive(Debug, Clone, Copy, Default)]
struct Suspension {
    by: u64,
    at_ms: u64,
}

impl Suspension {
    fn of(a: Option<&Assignment>) -> Suspension {
        a.map_or_else(Suspension::default, |a| Suspension { by: a.suspension_by, at_ms: a.suspension_ms })
    }
}

/// A stop signal sent within `SIGNAL_RACE_WINDOW_MS` of the replica's start may have landed
/// between the wrapper's fork and the job's exec, where the wrapper's own handler runs and
/// the job never sees it: send it once more a little later. Older replicas get it once.
fn signal_again(started: Option<Instant>, sig: i32) -> Option<(Instant, i32)> {
    let young = started.is_some_and(|t| t.elapsed() < Duration::from_millis(SIGNAL_RACE_WINDOW_MS));
    young.then(|| (Instant::now() + Duration::from_millis(SIGNAL_AGAIN_AFTER_MS), sig))
}

/// Log target of the line each obeyed directive writes at debug level (its term, leader,
/// whether under a lease): `RUST_LOG=info,baton_agent::directives=debug` shows which leader
/// a node obeyed and when, as the deposed-leader test reads it.
pub const DIRECTIVES_LOG: &str = "baton_agent::directives";

/// The stop bound of the timing argument (docs/protocol.md, "Agent lease and watchdog"): the
/// watchdog's slack and poll interval, then the stop's grace.
pub const LEASE_STOP_BOUND_MS: u64 = WATCHDOG_SLACK_MS + WATCHDOG_POLL_MS + LEASE_STOP_GRACE_MS;

// The leader checks its lease settings against the stop bound it knows; this agent's must not
// be longer.
const _: () = assert!(LEASE_STOP_BOUND_MS <= baton_proto::AGENT_STOP_BOUND_MS);

/// Says so (loudly) when the leader's lease and heartbeat timeout leave no room for this
/// agent to stop its work before its node is declared lost.
fn warn_if_the_lease_does_not_fit(d: &Directive) {
    if d.lease_ms == 0 || d.heartbeat_timeout_ms == 0 {
        return;
    }
    if let Err(e) = baton_proto::lease_fits(d.lease_ms, LEASE_STOP_BOUND_MS, d.heartbeat_timeout_ms) {
        tracing::error!("{e}: a job could run on two nodes at once; shorten the server's --lease-ms");
    }
}

#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;
