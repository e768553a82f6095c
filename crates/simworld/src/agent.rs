//! A node's agent: every `BEAT_MS` it beats to every replica with what it observed, and
//! acts on the grants of the leaders its fence lets it obey. What a directive means for the
//! node's ranks is the real agent's rule (`baton_agent::reconcile::plan`: the fence, the
//! attempt fence, deferral behind GPUs still held, what an ended rank's RUN or STOP is told);
//! this module only carries the plan out on simulated processes: it starts a rank, stops it
//! within its grace (checkpointed if the checkpoint fits in it), suspends and resumes it,
//! kills ranks the directive no longer names, and re-sends each observation until a leader
//! says it is committed. The node's watchdog (`Truth::watchdog`) stops every process once
//! the lease runs out, whether the agent runs or not.
//!
//! The node times its lease and its beats on its own clock (`clocks::Rate`), which may drift
//! from the leaders'; its processes' work takes true time.
//!
//! Its processes, the ranks that ended and how, its lease and its fence live in its journal
//! (`truth::Journal`): a restarted agent finds them again, as the real one does. While the
//! load has its journal full (`Truth::full_journals`), it starts and resumes nothing, by the
//! real agent's rule, and tells the leader of each start it refuses (`Observed::Unrecorded`).
//! It still stops, kills and reports what ends, as the real agent does since stop 86 (on a
//! synced stop marker, its ends told from memory); a stop whose marker cannot be written
//! either, which the real agent holds back, is not modelled.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use baton_agent::journal::{Outcome, Phase, ReplicaKey};
use baton_agent::lease::Floor;
use baton_agent::reconcile::{self, Act, Inputs, Known};
use baton_agent::suspensions::Answer;
use baton_model::command::Observed;
use baton_proto::v1::{Assignment, Directive, ReplicaPhase};
use turmoil::net::UdpSocket;

use crate::clocks::Rate;
use crate::timing::BEAT_MS;
use crate::truth::{Devices, Journal, Rank, Shared, Truth};
use crate::wire::{self, Beat, Grant};

/// Beats whose send time an agent remembers (a grant for an older one is ignored).
const MAX_BEATS_REMEMBERED: usize = 64;
/// Observations waiting for a commit; beyond it the oldest are dropped (the leader then
/// learns of the rank from the directive's next round: it stops naming it, or the node is
/// declared lost).
const MAX_PENDING: usize = 1_024;

struct Agent {
    node: String,
    boot: u64,
    /// The node's clock: the lease is timed on it.
    clock: Rate,
    seq: u64,
    /// When each remembered beat was sent, on the node's clock.
    sent_ms: BTreeMap<u64, u64>,
    /// Observations not yet committed, each with the first beat that carried it.
    pending: Vec<(u64, Observed)>,
    /// Ranks being stopped: when the stop completes and whether it checkpointed.
    stopping: BTreeMap<Rank, (u64, bool)>,
    /// Ranks a directive wants started whose GPUs a rank here still holds.
    deferred: BTreeSet<ReplicaKey>,
    /// Where the report of each rank held suspended stands (`reconcile`'s `suspensions`).
    suspensions: BTreeMap<ReplicaKey, Answer>,
    /// The newest directive obeyed, while ranks wait for their GPUs: what they start by.
    directive: Option<Directive>,
    /// The newest leader state a directive obeyed was built from: an older one is not obeyed.
    obeyed: Floor,
    /// What runs here as of the last tick, for the beats.
    running: Vec<wire::Listed>,
    /// Starts refused while the journal is full and told to the leader (once each while a
    /// directive names them, as the real agent's `unrecorded`).
    told: BTreeSet<ReplicaKey>,
}

/// The replicas agents beat to, as the operator's configuration lists them: a replaced
/// replica leaves the list and its successor joins it (`operator`). Read at every beat.
#[derive(Clone, Default)]
pub struct Directory(Arc<std::sync::Mutex<Vec<SocketAddr>>>);

impl Directory {
    /// The replica host at `ip` joins the list.
    pub fn add(&self, ip: std::net::IpAddr) {
        self.lock().push(SocketAddr::new(ip, wire::LEADER_PORT));
    }

    /// The replica host at `ip` leaves the list.
    pub fn remove(&self, ip: std::net::IpAddr) {
        self.lock().retain(|a| a.ip() != ip);
    }

    fn addrs(&self) -> Vec<SocketAddr> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SocketAddr>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The agent of `node`, whose clock runs at `clock`, beating to the replicas `directory`
/// lists.
pub async fn run(node: String, clock: Rate, directory: Directory, truth: Shared) -> turmoil::Result {
    let sock = Arc::new(UdpSocket::bind(("0.0.0.0", wire::AGENT_PORT)).await?);
    let copies = truth.lock().copies.clone();
    let boot = {
        let mut t = truth.lock();
        let j = t.journals.entry(node.clone()).or_default();
        j.boots += 1;
        // The watchdog reads the lease on the node's clock.
        j.clock = clock;
        j.boots
    };
    truth.record(format!("{node} agent starts (boot {boot})"));
    let mut a = Agent::new(node, boot, clock);
    let mut buf = vec![0u8; wire::MAX_DATAGRAM_BYTES];
    loop {
        let until = tokio::time::Instant::now() + clock.wait(BEAT_MS);
        while let Ok(got) = tokio::time::timeout_at(until, sock.recv_from(&mut buf)).await {
            let (n, _) = got?;
            if let Some(g) = wire::decode::<Grant>(&buf[..n]) {
                a.on_grant(&truth, g);
            }
        }
        a.tick(&truth);
        a.beat(&sock, &directory.addrs(), &copies).await;
    }
}

/// What a full journal's writes fail with, as the real agent's journal words it.
const JOURNAL_FULL: &str = "cannot write the agent journal: No space left on device (os error 28)";

/// Whether `node`'s agent journal is full now (a fault the load draws).
fn journal_full(t: &Truth, node: &str) -> bool {
    t.full_journals.contains_key(node)
}

/// The leader state `d` was built from: what orders directives.
fn built_from(d: &Directive) -> Floor {
    Floor { term: d.term, state_index: d.state_index }
}

fn key_of(r: Rank) -> ReplicaKey {
    ReplicaKey { job_id: r.job, attempt: r.attempt, rank: r.rank }
}

fn rank_of(k: ReplicaKey) -> Rank {
    Rank { job: k.job_id, attempt: k.attempt, rank: k.rank }
}

impl Agent {
    fn new(node: String, boot: u64, clock: Rate) -> Agent {
        Agent {
            node,
            boot,
            clock,
            seq: 0,
            sent_ms: BTreeMap::new(),
            pending: Vec::new(),
            stopping: BTreeMap::new(),
            deferred: BTreeSet::new(),
            suspensions: BTreeMap::new(),
            directive: None,
            obeyed: Floor::default(),
            running: Vec::new(),
            told: BTreeSet::new(),
        }
    }

    fn observe(&mut self, o: Observed) {
        if self.pending.len() == MAX_PENDING {
            self.pending.remove(0);
        }
        self.pending.push((u64::MAX, o));
    }

    fn on_grant(&mut self, truth: &Shared, g: Grant) {
        if g.boot != self.boot {
            return;
        }
        let Some(&sent) = self.sent_ms.get(&g.seq) else { return };
        let Ok(d) = <Directive as prost::Message>::decode(g.directive.as_slice()) else { return };
        let (now, local) = (crate::now_ms(), self.clock.now_ms());
        let held = {
            let mut t = truth.lock();
            let j = t.journals.entry(self.node.clone()).or_default();
            // A deposed leader's grant renews nothing and acknowledges nothing.
            let Ok(fence) = j.fence.check(g.term, g.leader) else { return };
            j.fence = fence;
            j.lease.grant(sent, g.lease_ms);
            j.holds_lease_at(local)
        };
        self.acknowledged(g.acked_seq, d.state_index);
        // The real agent reads its directives in order off one stream; grants may arrive in
        // any order (a copy late, a slow datagram), and one built from an older state than a
        // directive already obeyed would undo it: kill what the newer one started.
        let built = built_from(&d);
        if held && built >= self.obeyed {
            self.obeyed = built;
            self.act(truth, &d, now);
        }
    }

    /// The observations of beats up to `acked_seq` are committed, in a state that had applied
    /// `state_index` commands by the time the grant's directive was built.
    fn acknowledged(&mut self, acked_seq: u64, state_index: u64) {
        for (_, o) in self.pending.iter().filter(|(first, _)| *first <= acked_seq) {
            let (Observed::Suspended { job, attempt, rank, .. } | Observed::Stopped { job, attempt, rank, .. }) = o
            else {
                continue;
            };
            let key = ReplicaKey { job_id: *job, attempt: *attempt, rank: *rank };
            if let Some(a) = self.suspensions.get_mut(&key) {
                *a = Answer::Recorded { state_index };
            }
        }
        self.pending.retain(|(first, _)| *first > acked_seq);
    }

    /// Brings the node's processes to what the directive `d` says, by the real agent's plan.
    fn act(&mut self, truth: &Shared, d: &Directive, now: u64) {
        let mut t = truth.lock();
        let full = journal_full(&t, &self.node);
        let journal = t.journals.entry(self.node.clone()).or_default();
        let inputs = self.inputs(journal, d, full);
        // Refused (too many assignments; the fence was checked with the grant): nothing is done.
        let Ok(plan) = reconcile::plan(d, &inputs) else { return };
        if inputs.journal_failing.is_none() {
            self.told.clear();
        }
        self.told.retain(|k| plan.wanted.contains(k));
        self.deferred = plan.deferred;
        let named: BTreeMap<ReplicaKey, &Assignment> =
            d.assignments.iter().map(|a| (reconcile::key_of(a), a)).collect();
        for act in plan.acts {
            self.carry_out(&mut t, act, &named, built_from(d), now);
        }
        // Kept only while something waits for its GPUs: a grant comes every beat.
        self.directive = (!self.deferred.is_empty()).then(|| d.clone());
    }

    /// Starts the deferred ranks whose GPUs are free now, under a lease, as the real agent
    /// does when a rank ends (`start_deferred`), rather than at the next grant.
    fn start_deferred(&mut self, t: &mut Truth, now: u64) {
        let Some(d) = self.directive.take() else { return };
        let full = journal_full(t, &self.node);
        let journal = t.journals.entry(self.node.clone()).or_default();
        if journal.holds_lease_at(self.clock.now_ms()) {
            let inputs = self.inputs(journal, &d, full);
            if let Ok(plan) = reconcile::plan(&d, &inputs) {
                let named: BTreeMap<ReplicaKey, &Assignment> =
                    d.assignments.iter().map(|a| (reconcile::key_of(a), a)).collect();
                for act in plan.acts {
                    if let Act::Start(k) = act
                        && self.deferred.remove(&k)
                    {
                        self.carry_out(t, Act::Start(k), &named, built_from(&d), now);
                    }
                }
            }
        }
        if !self.deferred.is_empty() {
            self.directive = Some(d);
        }
    }

    /// What `reconcile::plan` reads, from the journal: every rank with a process, and the
    /// ended ranks of the jobs the directive names (the others play no part in it).
    fn inputs(&mut self, j: &Journal, d: &Directive, full: bool) -> Inputs {
        let mut replicas = BTreeMap::new();
        for (r, p) in &j.processes {
            let phase = match (self.stopping.contains_key(r), p.suspended) {
                (true, _) => Phase::Stopping,
                (false, true) => Phase::Suspended,
                (false, false) => Phase::Running,
            };
            replicas.insert(key_of(*r), Known { phase, outcome: None, gpus: p.gpus.clone(), gpu_milli: p.gpu_milli });
        }
        let mut max_attempts = BTreeMap::new();
        let jobs: BTreeSet<u64> = d.assignments.iter().map(|a| a.job_id).collect();
        for job in jobs {
            let of_job = Rank { job, attempt: 0, rank: 0 }..=Rank { job, attempt: u32::MAX, rank: u32::MAX };
            for (r, o) in j.ended.range(of_job.clone()) {
                let known = Known { phase: Phase::Finished, outcome: Some(*o), gpus: Vec::new(), gpu_milli: 0 };
                replicas.entry(key_of(*r)).or_insert(known);
            }
            let attempts = j.ended.range(of_job.clone()).map(|(r, _)| r.attempt);
            let newest = attempts.chain(j.processes.range(of_job).map(|(r, _)| r.attempt)).max();
            if let Some(newest) = newest {
                max_attempts.insert(job, newest);
            }
        }
        self.suspensions.retain(|k, _| j.processes.get(&rank_of(*k)).is_some_and(|p| p.suspended));
        Inputs {
            fence: j.fence,
            replicas,
            max_attempts,
            deferred: self.deferred.clone(),
            suspensions: self.suspensions.clone(),
            journal_failing: full.then(|| JOURNAL_FULL.to_string()),
            ..Inputs::default()
        }
    }

    /// Carries out one act of a plan on the simulated processes, as the real supervisor does
    /// on real ones (`baton_agent::supervisor`), and reports what it reports; `by`: the
    /// leader state the plan's directive was built from.
    fn carry_out(&mut self, t: &mut Truth, act: Act, named: &BTreeMap<ReplicaKey, &Assignment>, by: Floor, now: u64) {
        let node = self.node.clone();
        match act {
            Act::Kill(k) => {
                t.kill(now, &node, rank_of(k), by);
                self.stopping.remove(&rank_of(k));
            }
            Act::Start(k) => {
                let Some(a) = named.get(&k) else { return };
                let (runs_ms, exit_code) = t.work.get(&a.job).copied().unwrap_or_default().run_of(k.rank);
                let devices = Devices { gpus: &a.gpus, gpu_milli: a.gpu_milli, slices: a.slices.values().sum() };
                t.start(now, &node, rank_of(k), devices, a.memory_bytes, now + runs_ms);
                if let Some(p) = t.journals.get_mut(&node).and_then(|j| j.processes.get_mut(&rank_of(k))) {
                    p.started_by = by;
                    p.exit_code = exit_code;
                }
            }
            Act::Resume(k) => {
                if let Some(p) = t.journals.get_mut(&node).and_then(|j| j.processes.get_mut(&rank_of(k))) {
                    p.suspended = false;
                }
                t.history.record(now, format!("{node} resumes {}", rank_of(k)));
            }
            Act::Stop(k) => {
                let Some(a) = named.get(&k) else { return };
                let stop = t.work.get(&a.job).copied().unwrap_or_default().stop_of(now, a.grace_ms);
                self.stopping.insert(rank_of(k), stop);
            }
            Act::StopNeverRan(k) => {
                t.history.record(now, format!("{node} never ran {}, asked to stop it", rank_of(k)));
                // Remembered stopped, so that a later RUN of it starts nothing; its GPUs are freed.
                t.journals.entry(node).or_default().ended.insert(rank_of(k), Outcome::Stopped { checkpointed: false });
                self.observe(stopped(k, false));
            }
            Act::ReportStopped { key, checkpointed } => self.observe(stopped(key, checkpointed)),
            Act::KilledCountsAsStopped(k) => {
                t.journals.entry(node).or_default().ended.insert(rank_of(k), Outcome::Stopped { checkpointed: false });
                self.observe(stopped(k, false));
            }
            Act::ReportKilledHere { key, checkpointed } => {
                t.history.record(now, format!("{node} tells that {} ended here without its exit", rank_of(key)));
                self.observe(killed_here(key, checkpointed));
            }
            Act::ReportExited { key, code } => {
                t.history.record(now, format!("{node} tells again that {} exited {code}", rank_of(key)));
                self.observe(Observed::Exited {
                    job: key.job_id,
                    attempt: key.attempt,
                    rank: key.rank,
                    exit_code: code,
                });
            }
            Act::Suspend(k) => {
                if let Some(p) = t.journals.get_mut(&node).and_then(|j| j.processes.get_mut(&rank_of(k))) {
                    p.suspended = true;
                }
                t.suspensions += 1;
                t.history.record(now, format!("{node} suspends {}", rank_of(k)));
                self.report_suspended(k, named.get(&k).copied());
            }
            Act::ReportSuspended(k) => self.report_suspended(k, named.get(&k).copied()),
            Act::SuspendNeverRan(k) => {
                t.history.record(now, format!("{node} never ran {}, asked to suspend it", rank_of(k)));
                t.journals.entry(node).or_default().ended.insert(rank_of(k), Outcome::Stopped { checkpointed: false });
                self.observe(killed_here(k, false));
            }
            Act::Unrecorded { key, why } => {
                if self.told.insert(key) {
                    t.unrecorded += 1;
                    t.history.record(now, format!("{node} cannot record the start of {}: {why}", rank_of(key)));
                    let (job, attempt, rank) = (key.job_id, key.attempt, key.rank);
                    self.observe(Observed::Unrecorded { job, attempt, rank, reason: why });
                }
            }
            Act::Ignore { .. } => {}
        }
    }

    /// Named as the real agent names it (a leader before it sends 0).
    fn report_suspended(&mut self, k: ReplicaKey, a: Option<&Assignment>) {
        let (by, requested_ms) = a.map_or((0, 0), |a| (a.suspension_by, a.suspension_ms));
        self.suspensions.insert(k, Answer::InFlight);
        self.observe(match by {
            0 => stopped(k, false),
            by => Observed::Suspended { job: k.job_id, attempt: k.attempt, rank: k.rank, by, requested_ms },
        });
    }

    /// Exits, completed stops, and what the watchdog stopped.
    fn tick(&mut self, truth: &Shared) {
        let now = crate::now_ms();
        let mut t = truth.lock();
        let journal = t.journals.entry(self.node.clone()).or_default();
        let lapsed = std::mem::take(&mut journal.unreported);
        let processes = journal.processes.clone();
        for o in lapsed {
            self.observe(o);
        }
        self.stopping.retain(|r, _| processes.contains_key(r));
        for (r, p) in &processes {
            let exits = !p.suspended && p.exits_ms <= now;
            match self.stopping.get(r).copied() {
                // It exits on its own before its save is done. The real agent reports a rank
                // that ends while it stops as stopped, saved only if it wrote a checkpoint
                // since the signal (`reconcile::ending`): this one did not.
                Some((done, _)) if exits && p.exits_ms < done => {
                    t.exited(*r, p.exit_code);
                    let why = format!("exited {} while stopping, unsaved", p.exit_code);
                    t.end(now, &self.node, *r, Outcome::Stopped { checkpointed: false }, &why);
                    self.stopping.remove(r);
                    self.observe(stopped(key_of(*r), false));
                }
                Some((done, checkpointed)) if done <= now => {
                    let why = if checkpointed { "stopped, checkpointed" } else { "stopped" };
                    t.end(now, &self.node, *r, Outcome::Stopped { checkpointed }, why);
                    self.stopping.remove(r);
                    self.observe(stopped(key_of(*r), checkpointed));
                }
                None if exits => {
                    let code = p.exit_code;
                    t.exited(*r, code);
                    let told = if t.sabotage == Some(crate::Sabotage::LostExitCodes) { 0 } else { code };
                    t.end(now, &self.node, *r, Outcome::Exited { code: told }, &format!("exited {code}"));
                    self.observe(Observed::Exited { job: r.job, attempt: r.attempt, rank: r.rank, exit_code: told });
                }
                _ => {}
            }
        }
        if !self.deferred.is_empty() {
            self.start_deferred(&mut t, now);
        }
        let processes = &t.journals.entry(self.node.clone()).or_default().processes;
        self.running = self.listed(processes);
    }

    /// Every rank with processes here and every rank waiting for its GPUs, with its phase,
    /// as the real agent lists them in a report (at most `MAX_LISTED`).
    fn listed(&self, processes: &BTreeMap<Rank, crate::truth::Process>) -> Vec<wire::Listed> {
        let phase = |r: &Rank, p: &crate::truth::Process| match () {
            () if self.stopping.contains_key(r) => ReplicaPhase::Stopping,
            () if p.suspended => ReplicaPhase::Suspended,
            () => ReplicaPhase::Running,
        };
        let with = |r: Rank, phase: ReplicaPhase| wire::Listed {
            job: r.job,
            attempt: r.attempt,
            rank: r.rank,
            phase: phase as i32,
        };
        let waiting = self.deferred.iter().map(|k| with(rank_of(*k), ReplicaPhase::WaitingForGpus));
        processes.iter().map(|(r, p)| with(*r, phase(r, p))).chain(waiting).take(wire::MAX_LISTED).collect()
    }

    async fn beat(&mut self, sock: &Arc<UdpSocket>, replicas: &[SocketAddr], copies: &wire::Copies) {
        self.seq += 1;
        let seq = self.seq;
        self.sent_ms.insert(seq, self.clock.now_ms());
        while self.sent_ms.len() > MAX_BEATS_REMEMBERED {
            self.sent_ms.pop_first();
        }
        for (first, _) in self.pending.iter_mut().take(wire::MAX_OBSERVATIONS) {
            *first = (*first).min(seq);
        }
        let observations = self.pending.iter().take(wire::MAX_OBSERVATIONS).map(|(_, o)| o.clone()).collect();
        let running = self.running.clone();
        let bytes = wire::encode(&Beat { node: self.node.clone(), boot: self.boot, seq, observations, running });
        for (i, r) in replicas.iter().enumerate() {
            let salt = wire::salt(&[self.boot, seq, i as u64], &self.node);
            copies.send(sock, bytes.clone(), *r, salt).await;
        }
    }
}

fn stopped(k: ReplicaKey, checkpointed: bool) -> Observed {
    Observed::Stopped { job: k.job_id, attempt: k.attempt, rank: k.rank, checkpointed }
}

/// A RUN or SUSPEND of a rank that ended here without its own exit (the real agent's
/// `StopCause::KilledHere`).
fn killed_here(k: ReplicaKey, rank_saved: bool) -> Observed {
    Observed::KilledHere { job: k.job_id, attempt: k.attempt, rank: k.rank, rank_saved }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_agent::fence::Fence;
    use baton_proto::v1::Action;

    use crate::truth::Process;

    const NODE: &str = "n1";

    fn rank(job: u64) -> Rank {
        Rank { job, attempt: 1, rank: 0 }
    }

    fn assignment(job: u64, action: Action, gpus: &[u32]) -> Assignment {
        Assignment {
            job_id: job,
            job: format!("j{job}"),
            attempt: 1,
            rank: 0,
            action: action as i32,
            gpus: gpus.to_vec(),
            grace_ms: 3_000,
            ..Assignment::default()
        }
    }

    /// A grant of `(term, leader)` answering the agent's first beat, with `assignments`.
    fn grant(term: u64, leader: u64, assignments: Vec<Assignment>) -> Grant {
        grant_of(1, 7, term, leader, assignments)
    }

    /// A grant answering beat `seq`, its directive built from a state at `state_index`.
    fn grant_of(seq: u64, state_index: u64, term: u64, leader: u64, assignments: Vec<Assignment>) -> Grant {
        let d = Directive { term, leader_id: leader, assignments, state_index, ..Directive::default() };
        Grant {
            term,
            leader,
            boot: 1,
            seq,
            acked_seq: 0,
            lease_ms: 3_000,
            directive: prost::Message::encode_to_vec(&d),
        }
    }

    /// An agent that beat once (at simulated time 0, as outside a simulation).
    fn agent() -> Agent {
        let mut a = Agent::new(NODE.into(), 1, Rate::default());
        a.sent_ms.insert(1, 0);
        a
    }

    fn running_on(truth: &Shared, r: Rank, gpus: &[u32]) {
        let p = Process {
            exits_ms: u64::MAX,
            gpus: gpus.to_vec(),
            gpu_milli: 0,
            memory_bytes: 0,
            slices: 0,
            suspended: false,
            started_by: Floor::default(),
            exit_code: 0,
        };
        truth.lock().journals.entry(NODE.into()).or_default().processes.insert(r, p);
    }

    fn observed(a: &Agent) -> Vec<Observed> {
        a.pending.iter().map(|(_, o)| o.clone()).collect()
    }

    /// The real agent's rule, which this simulation's own copy lacked: a RUN of a rank that
    /// was stopped here is not started again, and its end is told (as killed here, with its
    /// save), or a leader that missed the stop would hold the job Running with no process.
    #[test]
    fn a_run_of_a_rank_stopped_here_is_told_its_end_and_starts_nothing() {
        let truth = Shared::default();
        let ended = Outcome::Stopped { checkpointed: true };
        truth.lock().journals.entry(NODE.into()).or_default().ended.insert(rank(1), ended);
        let mut a = agent();
        a.on_grant(&truth, grant(2, 1, vec![assignment(1, Action::Run, &[0])]));
        assert_eq!(truth.lock().starts, 0, "an ended rank never starts again");
        let told = Observed::KilledHere { job: 1, attempt: 1, rank: 0, rank_saved: true };
        assert_eq!(observed(&a), vec![told]);
    }

    /// The real agent's deferral: a RUN whose GPU a rank being stopped still holds waits
    /// until that rank is gone, and starts as soon as it is.
    #[test]
    fn a_run_waits_for_its_gpu_until_the_rank_that_holds_it_has_stopped() {
        let truth = Shared::default();
        running_on(&truth, rank(1), &[0]);
        truth
            .lock()
            .work
            .insert("j1".into(), crate::truth::JobWork { work_ms: 60_000, checkpoint_ms: 500, ..Default::default() });
        let mut a = agent();
        let both = || vec![assignment(1, Action::Stop, &[0]), assignment(2, Action::Run, &[0])];
        a.on_grant(&truth, grant(2, 1, both()));
        assert_eq!(truth.lock().starts, 0, "GPU 0 is still held by the rank being stopped");
        assert!(a.deferred.contains(&key_of(rank(2))));

        // The stop completes (simulated time 0, its end set due now): the rank waiting for
        // its GPU starts then, not at the next grant.
        a.stopping.insert(rank(1), (0, true));
        a.tick(&truth);
        assert_eq!(truth.lock().starts, 1, "started once its GPU was free");
        assert!(a.deferred.is_empty());
        assert!(truth.lock().journals[NODE].processes.contains_key(&rank(2)));
        assert!(truth.lock().violations.is_empty(), "{:?}", truth.lock().violations);
    }

    /// The fence is the real agent's, kept in the journal: a grant of an earlier leader of
    /// the term it obeys renews no lease and starts nothing.
    #[test]
    fn a_grant_from_an_earlier_leader_of_the_term_is_refused() {
        let truth = Shared::default();
        truth.lock().journals.entry(NODE.into()).or_default().fence = Fence { term: 5, leader_id: Some(3) };
        let mut a = agent();
        a.on_grant(&truth, grant(5, 2, vec![assignment(1, Action::Run, &[0])]));
        let t = truth.lock();
        assert_eq!((t.starts, t.journals[NODE].lease.expires_at_ms()), (0, None));
    }

    /// Grants may arrive out of order (a duplicated datagram's copy, a slow one): a
    /// directive built from an older state than one obeyed is not obeyed, or it would kill
    /// what the newer one started (seed 3 of 10 minutes, once datagrams were duplicated:
    /// `killed by a directive of term 2 index 80, older than the one that started it`).
    #[test]
    fn a_directive_older_than_one_obeyed_is_not_obeyed() {
        let truth = Shared::default();
        truth
            .lock()
            .work
            .insert("j2".into(), crate::truth::JobWork { work_ms: 60_000, checkpoint_ms: 500, ..Default::default() });
        let mut a = agent();
        a.sent_ms.insert(2, 0);
        a.on_grant(&truth, grant_of(2, 9, 2, 1, vec![assignment(2, Action::Run, &[0])]));
        assert_eq!(truth.lock().starts, 1);
        // The grant of the first beat, late: its directive (index 7) does not name job 2 yet.
        a.on_grant(&truth, grant_of(1, 7, 2, 1, vec![assignment(1, Action::Run, &[1])]));
        let t = truth.lock();
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        assert_eq!(t.starts, 1, "nothing of the older directive is carried out");
        assert!(t.journals[NODE].processes.contains_key(&rank(2)), "the newer directive's rank still runs");
    }

    /// A crashing rank is told with its code, as the real agent tells a rank's own exit
    /// while it runs; one that exits while it stops, before its save is done, is told as
    /// stopped and unsaved, as the real agent tells any end of a rank it was stopping
    /// (`reconcile::ending`). The truth keeps both exits, which a job's end must match.
    #[test]
    fn a_crash_is_told_with_its_code_and_an_exit_during_a_stop_as_an_unsaved_stop() {
        use crate::truth::{Adversity, Crash, JobWork};
        let truth = Shared::default();
        let crash = Crash { rank: 0, after_ms: 0, code: 137 };
        let crashing = JobWork {
            work_ms: 60_000,
            checkpoint_ms: 500,
            adversity: Adversity { crash: Some(crash), ignores_stops: false },
        };
        truth.lock().work.insert("j1".into(), crashing);
        let mut a = agent();
        a.on_grant(&truth, grant(2, 1, vec![assignment(1, Action::Run, &[0])]));
        assert_eq!(truth.lock().starts, 1);
        a.tick(&truth);
        let crashed = Observed::Exited { job: 1, attempt: 1, rank: 0, exit_code: 137 };
        assert_eq!(observed(&a), vec![crashed]);

        let r = Rank { job: 2, attempt: 1, rank: 0 };
        running_on(&truth, r, &[1]);
        truth.lock().journals.get_mut(NODE).unwrap().processes.get_mut(&r).unwrap().exits_ms = 0;
        a.stopping.insert(r, (5, true));
        a.tick(&truth);
        assert_eq!(observed(&a)[1], Observed::Stopped { job: 2, attempt: 1, rank: 0, checkpointed: false });
        let t = truth.lock();
        assert_eq!(t.journals[NODE].ended[&r], Outcome::Stopped { checkpointed: false });
        assert_eq!(t.exits[&1], BTreeSet::from([(1, 0, 137)]));
        assert_eq!(t.exits[&2], BTreeSet::from([(1, 0, 0)]));
        assert_eq!(t.crashes, 1);
    }
}
