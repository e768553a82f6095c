//! An agent's report, applied as one command. Each observation is first checked against
//! the placement (the job's current attempt runs that rank on the reporting node); one
//! that is stale or misplaced is ignored, with the reason in the outcome, and changes
//! nothing. Then the gang rules say what it means for the job:
//! - rank 0's exit code is the job's; any rank exiting non-zero fails the job;
//! - another rank exiting 0 has ended (its work is done) and counts as stopped, with its
//!   work saved, for a stop that arrives later;
//! - a stop completes once every rank has stopped or ended, and the job counts as
//!   checkpointed only if every one of them left its work saved.
//!
//! The tally lives in the job (`Job::ended_ranks`), so it survives a failover. An
//! observation of a rank left completing by an ended attempt frees its share first
//! (`completing.rs`).

use super::State;
use super::lifecycle::clip;
use crate::command::{Observed, Outcome};
use crate::error::ApplyError;
use crate::event::{Event, EventKind};
use crate::job::{JobId, JobState, PreemptionMode, StopWhy};
use crate::limits::MAX_OBSERVATIONS_PER_REPORT;
use crate::name::Name;

/// How a rank was lost without its own exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    /// Its agent's lease ran out and it was stopped.
    LeaseExpired,
    /// Its agent killed it (or stopped it) when not asked by the leader that holds it
    /// running, and reports so when asked to run it.
    KilledHere,
    /// Its agent never started it: it could not record the start first.
    Unrecorded,
}

/// A rank's lease stop as reported: `checkpointed`, the whole job has a checkpoint (by what
/// the leader knew); `rank_saved`, this rank's stop saved its work.
#[derive(Debug, Clone, Copy)]
struct LeaseStop {
    attempt: u32,
    rank: u32,
    checkpointed: bool,
    rank_saved: bool,
}

impl State {
    pub(crate) fn report(
        &mut self,
        node: &Name,
        observations: Vec<Observed>,
        ev: &mut Vec<Event>,
    ) -> Result<Outcome, ApplyError> {
        if !self.d.nodes.contains_key(node) {
            return Err(ApplyError::unknown("node", node));
        }
        if observations.len() > MAX_OBSERVATIONS_PER_REPORT {
            return Err(ApplyError::invalid(
                "observations",
                format!("{} in one report; at most {MAX_OBSERVATIONS_PER_REPORT}", observations.len()),
            ));
        }
        // The ranks whose lease stop saved their work count before any of them is judged:
        // the ranks of a gang on one node come in one report (behaviour 3; before it the
        // leader's memory did this and sent the verdict in `checkpointed`).
        if self.behaviour >= crate::behaviour::RANK_SAVES {
            for o in &observations {
                if let Observed::LeaseStopped { job, attempt, rank, rank_saved: true, .. } = *o
                    && self.check_rank_placed(node, job, attempt, rank).is_ok()
                {
                    self.note_rank_saved(job, attempt, rank);
                }
            }
        }
        let mut ignored = Vec::new();
        for (i, o) in observations.into_iter().enumerate() {
            if let Err(why) = self.observe(node, o, ev) {
                ignored.push((i as u32, clip(why.to_string())));
            }
        }
        Ok(Outcome::Reported { ignored })
    }

    fn observe(&mut self, node: &Name, o: Observed, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        // A late report of the checkpoint a stop of the job's last attempt wrote, or of its
        // rank 0's exit 0.
        let late = self.late_checkpoint(node, &o, ev) || self.late_exit(node, &o, ev);
        // A rank of an attempt that has ended in the model, reported gone: its share is free.
        if !matches!(o, Observed::Unkillable { .. })
            && let Some(done) = self.observe_completing(node, &o)
        {
            // A late save of an older attempt whose newer one is completing counted above.
            return if late { Ok(()) } else { done };
        }
        if late {
            return Ok(());
        }
        match o {
            Observed::Exited { job, attempt, rank, exit_code } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                if rank == 0 || exit_code != 0 {
                    self.check_active(job, "exiting")?;
                    self.note_gone(job, rank);
                    return self.exited(job, attempt, exit_code, ev);
                }
                self.check_active(job, "exiting")?;
                self.rank_ended(job, rank, true, ev)
            }
            Observed::Stopped { job, attempt, rank, checkpointed } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                self.check_stopping(job)?;
                self.rank_ended(job, rank, checkpointed, ev)
            }
            Observed::Suspended { job, attempt, rank, by, requested_ms } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                let stopping = self.check_stopping(job)?;
                let current = match stopping.why {
                    StopWhy::Preempted { by, mode: PreemptionMode::Suspend } => Some((by, stopping.requested_ms)),
                    _ => None,
                };
                if current != Some((by, requested_ms)) {
                    let now = current.map_or("a stop".into(), |(b, t)| format!("the suspension for job {b} of {t} ms"));
                    return Err(ApplyError::invalid(
                        "observations",
                        format!(
                            "rank {rank} of job {job}: an answer to its suspension for job {by} of {requested_ms} ms, while {now} is in progress"
                        ),
                    ));
                }
                self.rank_ended(job, rank, false, ev)
            }
            Observed::Checkpointed { job, attempt } => {
                self.check_attempt(job, attempt)?;
                if !self.d.jobs[&job].replicas.iter().any(|r| r.node == *node) {
                    return Err(not_placed(job, attempt, "replica".into(), node));
                }
                self.checkpointed(job, attempt)
            }
            Observed::RankCheckpointed { job, attempt, rank } => self.rank_checkpointed(node, job, attempt, rank),
            Observed::Vanished { job, attempt, rank, missing_ms } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                let j = &self.d.jobs[&job];
                if j.state != JobState::Running {
                    return Err(self.wrong_state(job, "requeueing a vanished replica"));
                }
                if j.ended_ranks.contains_key(&rank) {
                    // It exited 0 and was reported: gone by design, not lost.
                    return Err(ApplyError::invalid("observations", format!("rank {rank} of job {job} already ended")));
                }
                let why = format!(
                    "rank {rank} of attempt {attempt}: its agent on node {node} no longer reports it running ({missing_ms} ms) and reported no exit"
                );
                self.note_gone(job, rank);
                self.requeue_running(job, why, ev);
                Ok(())
            }
            Observed::LeaseExpired { job, attempt, rank, checkpointed } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                let stop = LeaseStop { attempt, rank, checkpointed, rank_saved: checkpointed };
                self.lease_expired(node, job, stop, ev)
            }
            Observed::LeaseStopped { job, attempt, rank, checkpointed, rank_saved } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                self.lease_expired(node, job, LeaseStop { attempt, rank, checkpointed, rank_saved }, ev)
            }
            Observed::KilledHere { job, attempt, rank, rank_saved } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                let j = &self.d.jobs[&job];
                if j.state == JobState::Running && j.ended_ranks.contains_key(&rank) {
                    // It exited 0 and was reported: gone by design, not lost.
                    return Err(ApplyError::invalid("observations", format!("rank {rank} of job {job} already ended")));
                }
                self.rank_lost(
                    node,
                    job,
                    Lost::KilledHere,
                    LeaseStop { attempt, rank, checkpointed: false, rank_saved },
                    ev,
                )
            }
            Observed::Stray { job, attempt, rank } => {
                if !self.d.jobs.contains_key(&job) {
                    return Err(ApplyError::unknown("job", job));
                }
                let message = format!(
                    "attempt {attempt} rank {rank} still runs on node {node}, where it is not placed; its agent is told to stop it"
                );
                self.job_event(job, EventKind::Stray, message, ev);
                Ok(())
            }
            Observed::Unkillable { job, attempt, rank, ref reason } => {
                // The agent knows its own processes, so the node is taken out whatever the
                // process is; but only a job placed here is named, or any agent could put
                // any job's name in a public event.
                let placed = self.check_rank_placed(node, job, attempt, rank).is_ok()
                    || self.completing_rank_on(node, job, attempt, rank);
                self.mark_unhealthy(node, placed.then_some(job), attempt, rank, reason, ev);
                // The node takes no new work, so what the stuck process holds is given to
                // nobody: a completing rank is let go (the bound on completing).
                let _ = self.observe_completing(node, &o);
                Ok(())
            }
            Observed::Unrecorded { job, attempt, rank, ref reason } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                // The node first: whatever became of the job, its agent starts nothing.
                self.take_out(node, format!("its agent cannot record a start in its journal: {reason}"), ev);
                let stop = LeaseStop { attempt, rank, checkpointed: false, rank_saved: false };
                self.rank_lost(node, job, Lost::Unrecorded, stop, ev)
            }
            Observed::NotStarted { job, attempt, rank, exit_code, reason } => {
                self.check_rank_placed(node, job, attempt, rank)?;
                self.check_active(job, "failing")?;
                self.note_gone(job, rank);
                let why = format!("rank {rank} could not start on node {node}: {reason}");
                self.failed_with(job, attempt, exit_code, why, ev)
            }
        }
    }

    /// A rank its agent stopped because the agent's lease ran out. In a stop already in
    /// progress it is that rank's stop. A job that runs (or is suspended) has lost a rank
    /// the leader did not ask to stop, as when its node is lost: it goes back to the queue,
    /// from its checkpoint if it has one.
    fn lease_expired(
        &mut self,
        node: &Name,
        job: JobId,
        stop: LeaseStop,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        self.rank_lost(node, job, Lost::LeaseExpired, stop, ev)
    }

    /// A rank gone without its own exit and without a stop the leader asked for (`cause`
    /// says how): in a stop in progress it is that rank's stop; a job that runs (or is
    /// suspended) goes back to the queue, from its checkpoint if it has one.
    fn rank_lost(
        &mut self,
        node: &Name,
        job: JobId,
        cause: Lost,
        stop: LeaseStop,
        ev: &mut Vec<Event>,
    ) -> Result<(), ApplyError> {
        let LeaseStop { attempt, rank, checkpointed, rank_saved } = stop;
        let j = &self.d.jobs[&job];
        if j.state == JobState::Preempting && j.stopping.is_some() && !self.being_suspended(job) {
            // The stop's own tally asks every rank whether it saved its work.
            return self.rank_ended(job, rank, rank_saved, ev);
        }
        // A job being suspended cannot resume in place without this rank's process: it goes
        // back to the queue, not to Suspended, where it would wait with no process behind it
        // (`tests::a_rank_lost_while_its_job_was_being_suspended_requeues_the_job`). Its ranks
        // already suspended keep their processes, so they are completing, not gone.
        self.forget_suspension_tally(job);
        let j = &self.d.jobs[&job];
        if !matches!(j.state, JobState::Running | JobState::Suspended | JobState::Preempting) {
            let action = match cause {
                Lost::LeaseExpired => "stopping for an expired lease",
                Lost::KilledHere => "requeueing a replica killed on its node",
                Lost::Unrecorded => "requeueing a replica its agent could not start",
            };
            return Err(self.wrong_state(job, action));
        }
        // Gone; whether it saved its work counts for a late report of the other ranks'
        // (`late_checkpoint` reads it back once the job is requeued).
        let j = self.d.jobs.get_mut(&job).expect("checked");
        j.ended_ranks.insert(rank, rank_saved);
        // The same tally as a stop's: once every rank of the attempt has ended saved (a rank
        // killed here after its lease stop saved, whose own report was lost), the job has
        // its checkpoint, whatever this report says of the whole job.
        let world = j.replicas.len().max(1);
        let all_saved = j.ended_ranks.len() >= world && j.ended_ranks.values().all(|s| *s);
        // Behaviour 3: every other rank saved since the last complete checkpoint, by the
        // replicated tally (the leader's memory said so in `checkpointed` before).
        let tallied = self.behaviour >= crate::behaviour::RANK_SAVES
            && rank_saved
            && self.others_saved(job, attempt, rank, world as u32);
        let j = self.d.jobs.get_mut(&job).expect("checked");
        if checkpointed || all_saved || tallied {
            j.has_checkpoint = true;
        }
        let saved = if rank_saved { "after a checkpoint" } else { "without a checkpoint" };
        let why = match cause {
            Lost::LeaseExpired => format!(
                "rank {rank} of attempt {attempt}: its agent on node {node} was cut off from the leader for a whole lease and stopped it {saved}"
            ),
            Lost::KilledHere => format!(
                "rank {rank} of attempt {attempt}: its agent on node {node} ended it without its own exit (killed as no longer wanted there, by a directive that did not place it) and cannot run that attempt again"
            ),
            Lost::Unrecorded => format!(
                "rank {rank} of attempt {attempt}: its agent on node {node} could not record its start (its journal takes no writes), so it never ran; node {node} takes no new work until it is uncordoned"
            ),
        };
        self.requeue_running(job, why, ev);
        Ok(())
    }

    /// The node keeps its jobs' accounting as it is but takes no new work.
    /// Takes `node` out of scheduling for a process that survived SIGKILL.
    fn mark_unhealthy(
        &mut self,
        node: &Name,
        placed: Option<JobId>,
        attempt: u32,
        rank: u32,
        reason: &str,
        ev: &mut Vec<Event>,
    ) {
        let what = match placed.and_then(|job| self.d.jobs.get(&job)) {
            Some(j) => format!("job {} attempt {attempt} rank {rank}", j.spec.name),
            None => "a process not placed here".to_string(),
        };
        self.take_out(node, format!("{what} could not be killed: {reason}"), ev);
    }

    /// Takes `node` out of scheduling until a person clears it, saying `why`. A node already
    /// out keeps its first reason: one report may name thousands of stuck processes (or
    /// refused starts), and each would otherwise rebuild the ledger and add an event.
    fn take_out(&mut self, node: &Name, why: String, ev: &mut Vec<Event>) {
        if self.d.nodes.get(node).expect("checked by report").unhealthy.is_some() {
            return;
        }
        let why = clip(why);
        let n = self.d.nodes.get_mut(node).expect("checked by report");
        n.unhealthy = Some(why.clone());
        let message = clip(format!("node {node} is unhealthy: {why}; `baton uncordon {node}` once it is fixed"));
        ev.push(Event {
            at_ms: self.d.now_ms,
            job: None,
            job_id: None,
            node: Some(node.clone()),
            kind: EventKind::NodeUnhealthy,
            message,
        });
        self.rebuild_ledger();
    }

    /// The job's current attempt is `attempt` and runs `rank` on `node`.
    pub(super) fn check_rank_placed(&self, node: &Name, job: JobId, attempt: u32, rank: u32) -> Result<(), ApplyError> {
        self.check_attempt(job, attempt)?;
        match self.d.jobs[&job].replica_at(rank) {
            Some(r) if r.node == *node => Ok(()),
            _ => Err(not_placed(job, attempt, format!("rank {rank}"), node)),
        }
    }

    /// Records that `rank` ended; completes a stop in progress once every rank has (the
    /// tally is cleared as the job lets go of its shares, or is suspended).
    fn rank_ended(&mut self, id: JobId, rank: u32, saved: bool, ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        let job = self.d.jobs.get_mut(&id).expect("checked by the caller");
        job.ended_ranks.insert(rank, saved);
        let world = job.replicas.len().max(1);
        if job.state != JobState::Preempting || job.ended_ranks.len() < world {
            return Ok(());
        }
        let all_saved = job.ended_ranks.values().all(|s| *s);
        let attempt = job.attempt;
        self.stopped(id, attempt, all_saved, ev)
    }

    /// `rank`'s process is gone (it ended the job's attempt, or was lost): it does not
    /// become completing when the attempt ends. Whether it saved its work does not matter
    /// then: the attempt is over.
    pub(super) fn note_gone(&mut self, id: JobId, rank: u32) {
        if let Some(job) = self.d.jobs.get_mut(&id) {
            job.ended_ranks.entry(rank).or_insert(false);
        }
    }

    /// Every rank of the job's attempt is gone (a whole-job report of the agent era).
    pub(super) fn note_all_gone(&mut self, id: JobId) {
        let world = self.d.jobs.get(&id).map_or(0, |j| j.replicas.len() as u32);
        for rank in 0..world {
            self.note_gone(id, rank);
        }
    }
}

fn not_placed(job: JobId, attempt: u32, what: String, node: &Name) -> ApplyError {
    ApplyError::NotPlaced { job, attempt, what, node: node.to_string() }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::alloc::ReplicaAlloc;
    use crate::command::{Command, Op};
    use crate::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec};
    use crate::node::NodeSpec;
    use crate::plan::{Decision, Plan};
    use crate::resources::Resources;
    use crate::scheduler::SchedulerSettings;

    fn apply(s: &mut State, op: Op) -> Outcome {
        s.apply(Command { now_ms: 1_000, op }).unwrap_or_else(|e| panic!("refused: {e}")).outcome
    }

    fn node(name: &str) -> NodeSpec {
        NodeSpec {
            name: Name::lit(name),
            pool: Name::lit("default"),
            rack: None,
            labels: BTreeMap::new(),
            resources: Resources::of(&[("gpu", 8)]),
            gpus: Vec::new(),
            agent_addr: String::new(),
        }
    }

    /// A two-rank gang running with rank 0 on n1 and rank 1 on n2.
    fn gang() -> (State, JobId) {
        gang_limited(None)
    }

    /// `gang()` with a time limit; it starts at 1 s.
    fn gang_limited(time_limit_ms: Option<u64>) -> (State, JobId) {
        let mut s = State::default();
        apply(&mut s, Op::RegisterNodes(vec![node("n1"), node("n2")]));
        apply(&mut s, Op::PutQueue(crate::fixture::gpu_queue("q", 16)));
        let spec = JobSpec {
            name: Name::lit("g"),
            queue: Name::lit("q"),
            priority: PriorityRef::Class(Name::lit("train")),
            tasks: vec![TaskSpec {
                name: Name::lit("main"),
                replicas: 2,
                resources: Resources::of(&[("gpu", 8)]),
                pools: None,
            }],
            pools: None,
            topology: None,
            preemption_mode: PreemptionMode::Checkpoint,
            grace_ms: 5_000,
            min_runtime_ms: 0,
            time_limit_ms,
            command: Vec::new(),
            env: BTreeMap::new(),
            checkpoint_signal: None,
        };
        let Outcome::Submitted { job, .. } = apply(&mut s, Op::Submit { spec, request_id: None }) else { panic!() };
        let replicas = crate::fixture::one_rank_per_node(2, 8);
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt: 1, replicas }] };
        apply(&mut s, Op::ApplyPlan(plan));
        assert_eq!(s.job(job).unwrap().state, JobState::Running);
        (s, job)
    }

    fn report(s: &mut State, node: &str, observations: Vec<Observed>) -> Vec<(u32, String)> {
        match apply(s, Op::Report { node: Name::lit(node), observations }) {
            Outcome::Reported { ignored } => ignored,
            other => panic!("{other:?}"),
        }
    }

    fn stopped(job: JobId, rank: u32) -> Observed {
        Observed::Stopped { job, attempt: 1, rank, checkpointed: true }
    }

    fn time_limit(s: &mut State, job: JobId, now_ms: u64) -> Outcome {
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::TimeLimit { job, attempt: 1 }] };
        s.apply(Command { now_ms, op: Op::ApplyPlan(plan) }).unwrap().outcome
    }

    #[test]
    fn a_job_stopped_at_its_time_limit_ends_failed_and_keeps_its_checkpoint() {
        let (mut s, job) = gang_limited(Some(100_000));
        let Outcome::PlanApplied { rejected, .. } = time_limit(&mut s, job, 100_999) else { panic!() };
        assert_eq!(rejected.len(), 1, "refused before the limit: {rejected:?}");
        assert_eq!(s.job(job).unwrap().state, JobState::Running);
        let Outcome::PlanApplied { rejected, .. } = time_limit(&mut s, job, 101_000) else { panic!() };
        assert!(rejected.is_empty(), "{rejected:?}");
        assert_eq!(s.job(job).unwrap().state, JobState::Preempting);
        assert!(report(&mut s, "n1", vec![stopped(job, 0)]).is_empty());
        assert!(report(&mut s, "n2", vec![stopped(job, 1)]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!(j.state, JobState::Failed, "not requeued");
        assert_eq!(j.reason, "time limit");
        assert!(j.has_checkpoint, "the checkpoint written on the way is kept");
        assert!(j.replicas.is_empty());
    }

    /// A pending 8-GPU job `name` beside the running gang.
    fn pending(s: &mut State, name: &str) -> JobId {
        let mut spec = s.job(1).unwrap().spec.clone();
        spec.name = Name::lit(name);
        spec.tasks[0].replicas = 1;
        let Outcome::Submitted { job, .. } = apply(s, Op::Submit { spec, request_id: None }) else { panic!() };
        job
    }

    fn reserve(s: &mut State, job: JobId, node: &str) -> Vec<(u32, crate::rejection::Rejection)> {
        let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit(node), gpus: (0..8).collect() }];
        let d = Decision::Reserve { job, pool: Name::lit("default"), replicas, waits_for: vec![1] };
        let Outcome::PlanApplied { rejected, .. } =
            apply(s, Op::ApplyPlan(Plan { based_on: s.applied(), decisions: vec![d] }))
        else {
            panic!()
        };
        rejected
    }

    #[test]
    fn one_reservation_per_pool_and_never_drops_them() {
        let (mut s, _) = gang();
        let (w, x) = (pending(&mut s, "w"), pending(&mut s, "x"));
        assert!(reserve(&mut s, w, "n1").is_empty());
        assert_eq!(s.pool_reservation_of(w).unwrap().pool.as_str(), "default");
        let refused = reserve(&mut s, x, "n2");
        let (pool, holder) = (Name::lit("default"), Name::lit("w"));
        assert_eq!(refused[0].1, crate::rejection::Rejection::PoolAlreadyReserved { pool, holder });
        assert!(refused[0].1.to_string().contains("already holds a reservation for w"), "{refused:?}");
        apply(&mut s, Op::SetScheduler(SchedulerSettings { reserve_after_ms: None }));
        assert!(s.pool_reservations().is_empty());
        let refused = reserve(&mut s, x, "n2");
        assert_eq!(refused[0].1, crate::rejection::Rejection::ReservationsOff);
    }

    #[test]
    fn a_reservation_ends_when_its_job_is_cancelled_or_paused() {
        let (mut s, _) = gang();
        let (w, x) = (pending(&mut s, "w"), pending(&mut s, "x"));
        assert!(reserve(&mut s, w, "n1").is_empty());
        apply(&mut s, Op::Cancel { job: w });
        assert!(s.pool_reservations().is_empty());
        assert!(reserve(&mut s, x, "n1").is_empty());
        apply(&mut s, Op::Pause { job: x });
        assert!(s.pool_reservations().is_empty());
    }

    #[test]
    fn reserve_after_out_of_bounds_is_refused_by_name() {
        let mut s = State::default();
        let big = SchedulerSettings { reserve_after_ms: Some(crate::limits::MAX_RESERVE_AFTER_MS + 1) };
        let e = s.apply(Command { now_ms: 0, op: Op::SetScheduler(big) }).unwrap_err().to_string();
        assert!(e.contains("reserve_after"), "{e}");
        assert_eq!(s.scheduler().reserve_after_ms, Some(300_000), "unchanged");
    }

    #[test]
    fn a_job_without_a_time_limit_is_not_stopped_for_one() {
        let (mut s, job) = gang();
        let Outcome::PlanApplied { rejected, .. } = time_limit(&mut s, job, crate::limits::MAX_CLOCK_MS) else {
            panic!()
        };
        assert_eq!(rejected.len(), 1);
        assert_eq!(s.job(job).unwrap().state, JobState::Running);
    }

    #[test]
    fn a_stop_completes_when_every_rank_has_stopped_or_exited_0() {
        let (mut s, job) = gang();
        assert!(report(&mut s, "n2", vec![Observed::Exited { job, attempt: 1, rank: 1, exit_code: 0 }]).is_empty());
        assert_eq!(s.job(job).unwrap().state, JobState::Running, "rank 1's exit 0 does not end the job");
        apply(&mut s, Op::Pause { job });
        assert!(report(&mut s, "n1", vec![stopped(job, 0)]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Paused, true));
    }

    #[test]
    fn a_stop_waits_for_every_rank_and_misplaced_or_stale_ones_are_ignored_with_a_reason() {
        let (mut s, job) = gang();
        apply(&mut s, Op::Pause { job });
        let ignored = report(
            &mut s,
            "n2",
            vec![stopped(job, 0), Observed::Stopped { job, attempt: 7, rank: 1, checkpointed: true }],
        );
        assert_eq!(ignored.len(), 2, "{ignored:?}");
        assert!(ignored[0].1.contains("rank 0 on node \"n2\""), "{}", ignored[0].1);
        assert!(ignored[1].1.contains("stale"), "{}", ignored[1].1);
        assert!(report(&mut s, "n1", vec![stopped(job, 0)]).is_empty());
        assert_eq!(s.job(job).unwrap().state, JobState::Preempting, "rank 1 has not stopped yet");
        assert!(report(&mut s, "n2", vec![stopped(job, 1)]).is_empty());
        assert_eq!(s.job(job).unwrap().state, JobState::Paused);
    }

    #[test]
    fn a_vanished_rank_requeues_the_job_unless_it_already_exited_0() {
        let (mut s, job) = gang();
        report(&mut s, "n2", vec![Observed::Exited { job, attempt: 1, rank: 1, exit_code: 0 }]);
        let ignored = report(&mut s, "n2", vec![Observed::Vanished { job, attempt: 1, rank: 1, missing_ms: 9_000 }]);
        assert!(ignored.len() == 1 && ignored[0].1.contains("already ended"), "{ignored:?}");
        assert_eq!(s.job(job).unwrap().state, JobState::Running);
        assert!(
            report(&mut s, "n1", vec![Observed::Vanished { job, attempt: 1, rank: 0, missing_ms: 9_000 }]).is_empty()
        );
        let j = s.job(job).unwrap();
        assert_eq!(j.state, JobState::Pending);
        assert!(j.reason.contains("node n1 no longer reports it running"), "{}", j.reason);
    }

    fn lease_expired(job: JobId, rank: u32, checkpointed: bool) -> Observed {
        Observed::LeaseExpired { job, attempt: 1, rank, checkpointed }
    }

    /// Found by a chaos run with leader kills (issue 9; chaos/README.md, "Found so far"):
    /// an agent killed a rank as no longer wanted (told so from a stale state) and, asked
    /// to run that attempt again, reports it ended there. The job goes back to the queue
    /// from its checkpoint, with an event saying why; it is not the job's failure. A rank
    /// that already exited 0, or a stale attempt, changes nothing; in a stop in progress it
    /// counts as that rank's stop.
    #[test]
    fn a_rank_killed_here_requeues_the_job_from_its_checkpoint() {
        let killed = |job, attempt, rank| Observed::KilledHere { job, attempt, rank, rank_saved: false };
        let (mut s, job) = gang();
        assert!(report(&mut s, "n1", vec![Observed::Checkpointed { job, attempt: 1 }]).is_empty());
        report(&mut s, "n2", vec![Observed::Exited { job, attempt: 1, rank: 1, exit_code: 0 }]);
        let ignored = report(&mut s, "n2", vec![killed(job, 1, 1), killed(job, 7, 0)]);
        assert!(ignored.len() == 2 && ignored[0].1.contains("already ended"), "{ignored:?}");
        assert_eq!(s.job(job).unwrap().state, JobState::Running);

        let op = Op::Report { node: Name::lit("n1"), observations: vec![killed(job, 1, 0)] };
        let applied = s.apply(Command { now_ms: 1_000, op }).unwrap();
        assert_eq!(applied.outcome, Outcome::Reported { ignored: Vec::new() });
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true), "{}", j.reason);
        assert!(j.reason.contains("killed") && j.reason.contains("n1"), "{}", j.reason);
        let ev = applied.events.last().expect("an event");
        assert!(matches!(ev.kind, EventKind::Requeued) && ev.message.contains("no longer wanted"), "{ev:?}");

        let (mut s, job) = gang();
        apply(&mut s, Op::Pause { job });
        assert!(report(&mut s, "n1", vec![stopped(job, 0)]).is_empty());
        assert!(report(&mut s, "n2", vec![killed(job, 1, 1)]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Paused, false), "rank 1 saved nothing");
    }

    /// An agent whose journal takes no writes starts nothing, and says so per refused start
    /// (`Unrecorded`): the job goes back to the queue from its checkpoint, not failed, and
    /// the node takes no new work until a person uncordons it, naming why. Before it the
    /// agent said nothing: the job stayed Running with no process for as long as the disk
    /// failed, and the node kept taking work it never started. A stale or misplaced report
    /// changes nothing, not even the node.
    #[test]
    fn a_start_its_agent_could_not_record_requeues_the_job_and_takes_the_node_out() {
        let unrecorded = |job, attempt, rank| Observed::Unrecorded {
            job,
            attempt,
            rank,
            reason: "No space left on device (os error 28)".into(),
        };
        let (mut s, job) = gang();
        assert!(report(&mut s, "n1", vec![Observed::Checkpointed { job, attempt: 1 }]).is_empty());
        let ignored = report(&mut s, "n1", vec![unrecorded(job, 7, 0), unrecorded(job, 1, 1)]);
        assert_eq!(ignored.len(), 2, "{ignored:?}");
        assert!(s.nodes()[&Name::lit("n1")].schedulable(), "a misplaced report takes no node out");

        let op = Op::Report { node: Name::lit("n2"), observations: vec![unrecorded(job, 1, 1)] };
        let applied = s.apply(Command { now_ms: 1_000, op }).unwrap();
        assert_eq!(applied.outcome, Outcome::Reported { ignored: Vec::new() });
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true), "{}", j.reason);
        assert!(j.reason.contains("could not record its start") && j.reason.contains("n2"), "{}", j.reason);
        let n2 = &s.nodes()[&Name::lit("n2")];
        let why = n2.unhealthy.as_deref().unwrap_or_default();
        assert!(!n2.schedulable() && why.contains("No space left"), "{why}");
        assert!(s.nodes()[&Name::lit("n1")].schedulable());
        let kinds: Vec<EventKind> = applied.events.iter().map(|e| e.kind.clone()).collect();
        assert!(kinds.contains(&EventKind::NodeUnhealthy) && kinds.contains(&EventKind::Requeued), "{kinds:?}");
        // The next cycle places nothing on n2; uncordoning clears it.
        apply(&mut s, Op::Cordon { node: Name::lit("n2"), cordoned: false });
        assert!(s.nodes()[&Name::lit("n2")].schedulable());
    }

    /// Found by the e2e partitions run (chaos/README.md, "Found so far"): an agent whose
    /// lease ran out stopped a job's only rank with a checkpoint; asked by a new leader to
    /// run that attempt again, it reported the rank ended there (`KilledHere`) with its
    /// save. The model ignored the save and the job started again from zero. A rank killed
    /// here that saved its work counts as saved: once every rank of the attempt has, the
    /// job resumes from it.
    #[test]
    fn a_rank_killed_here_after_saving_its_work_gives_the_job_its_checkpoint() {
        let killed_saved = |job, rank| Observed::KilledHere { job, attempt: 1, rank, rank_saved: true };
        let (mut s, job) = gang();
        report(&mut s, "n2", vec![Observed::Exited { job, attempt: 1, rank: 1, exit_code: 0 }]);
        assert!(report(&mut s, "n1", vec![killed_saved(job, 0)]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true), "{}", j.reason);

        // Only one rank saved: not a checkpoint of the job (yet).
        let (mut s, job) = gang();
        assert!(report(&mut s, "n1", vec![killed_saved(job, 0)]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, false), "{}", j.reason);
    }

    /// An agent whose lease ran out stopped its rank (issue 9): the job must not stay
    /// Running with its GPUs held; it goes back to the queue from its checkpoint, and says why.
    #[test]
    fn a_lease_expired_stop_requeues_a_running_job_from_its_checkpoint() {
        let (mut s, job) = gang();
        let op = Op::Report { node: Name::lit("n1"), observations: vec![lease_expired(job, 0, true)] };
        let applied = s.apply(Command { now_ms: 1_000, op }).unwrap();
        assert_eq!(applied.outcome, Outcome::Reported { ignored: Vec::new() });
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true));
        assert!(j.reason.contains("lease") && j.reason.contains("n1"), "{}", j.reason);
        let ev = applied.events.last().expect("an event");
        assert!(matches!(ev.kind, EventKind::Requeued) && ev.message.contains("lease"), "{ev:?}");
        // The other rank's stop, coming later, only frees its GPUs (it was completing).
        assert_eq!(s.completing_ranks(job), 1);
        assert!(report(&mut s, "n2", vec![lease_expired(job, 1, true)]).is_empty());
        assert_eq!(s.completing_ranks(job), 0);
        assert_eq!(s.job(job).unwrap().state, JobState::Pending);

        // Without a checkpoint written, it starts over.
        let (mut s, job) = gang();
        report(&mut s, "n2", vec![lease_expired(job, 1, false)]);
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, false));
    }

    /// During a stop, a lease-expired stop counts as that rank's stop.
    #[test]
    fn a_lease_expired_stop_counts_in_a_stop_in_progress() {
        let (mut s, job) = gang();
        apply(&mut s, Op::Pause { job });
        assert!(report(&mut s, "n1", vec![stopped(job, 0)]).is_empty());
        assert!(report(&mut s, "n2", vec![lease_expired(job, 1, true)]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Paused, true));
    }

    /// A job of one 8-GPU replica on n1 (of the gang's cluster), in the given mode.
    fn one_replica(s: &mut State, name: &str, mode: PreemptionMode, gpus: u64) -> JobId {
        let spec = one_replica_spec(name, mode, gpus);
        let Outcome::Submitted { job, .. } = apply(s, Op::Submit { spec, request_id: None }) else { panic!() };
        job
    }

    fn one_replica_spec(name: &str, mode: PreemptionMode, gpus: u64) -> JobSpec {
        JobSpec {
            name: Name::lit(name),
            queue: Name::lit("q"),
            priority: PriorityRef::Class(Name::lit("train")),
            tasks: vec![TaskSpec {
                name: Name::lit("main"),
                replicas: 1,
                resources: if gpus > 0 { Resources::of(&[("gpu", gpus)]) } else { Resources::of(&[("cpu", 1)]) },
                pools: None,
            }],
            pools: None,
            topology: None,
            preemption_mode: mode,
            grace_ms: 5_000,
            min_runtime_ms: 0,
            command: Vec::new(),
            env: BTreeMap::new(),
            checkpoint_signal: None,
            time_limit_ms: None,
        }
    }

    fn on_n1(gpus: u64) -> Vec<ReplicaAlloc> {
        vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: (0..gpus as u32).collect() }]
    }

    /// Suspend mode on GPUs (issue 9, hole 3): a SIGSTOPped CUDA process keeps its GPU
    /// memory, so its GPUs cannot be lent to the preemptor (the agent would hold the
    /// preemptor back forever). A GPU job preempted in mode suspend is checkpointed and
    /// stopped instead, and its GPUs go to the preemptor once it has.
    #[test]
    fn a_gpu_job_in_suspend_mode_is_checkpointed_and_stopped_not_suspended() {
        let mut s = State::default();
        apply(&mut s, Op::RegisterNodes(vec![node("n1")]));
        apply(&mut s, Op::PutQueue(crate::fixture::gpu_queue("q", 16)));
        let low = one_replica(&mut s, "low", PreemptionMode::Suspend, 8);
        let plan = Plan {
            based_on: s.applied(),
            decisions: vec![Decision::Place { job: low, attempt: 1, replicas: on_n1(8) }],
        };
        apply(&mut s, Op::ApplyPlan(plan));
        let high = one_replica(&mut s, "high", PreemptionMode::Checkpoint, 8);
        let preempt = Decision::Preempt {
            job: high,
            victims: vec![crate::plan::Victim { job: low, attempt: 1 }],
            replicas: on_n1(8),
            message: "test".into(),
        };
        let plan = Plan { based_on: s.applied(), decisions: vec![preempt] };
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
        assert!(rejected.is_empty(), "{rejected:?}");
        assert!(report(&mut s, "n1", vec![stopped(low, 0)]).is_empty());
        let j = s.job(low).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true), "{}", j.reason);
        assert!(j.suspended_for.is_none());
        // Its GPUs are free for the preemptor: it is placed on them.
        let plan = Plan {
            based_on: s.applied(),
            decisions: vec![Decision::Place { job: high, attempt: 1, replicas: on_n1(8) }],
        };
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
        assert!(rejected.is_empty(), "{rejected:?}");
        assert_eq!(s.job(high).unwrap().state, JobState::Running);

        // Without GPUs, suspend still means suspend in place.
        let b = crate::behaviour::BEHAVIOUR;
        let cpu_only = one_replica_spec("cpu", PreemptionMode::Suspend, 0);
        assert_eq!(cpu_only.preemption_mode_when_preempted(b), PreemptionMode::Suspend);
        let gpu = one_replica_spec("gpu", PreemptionMode::Suspend, 1);
        assert_eq!(gpu.preemption_mode_when_preempted(b), PreemptionMode::Checkpoint);
        let requeue = one_replica_spec("gpu", PreemptionMode::Requeue, 1);
        assert_eq!(requeue.preemption_mode_when_preempted(b), PreemptionMode::Requeue);
        // MIG slices are GPUs from behaviour 4 on (decisions.md section 7); before it, a job
        // on slices alone was suspended in place, and a log of then replays so.
        let mut slices = one_replica_spec("infer", PreemptionMode::Suspend, 0);
        slices.tasks[0].resources = Resources::of(&[("mig-1g.10gb", 2)]);
        assert_eq!(slices.preemption_mode_when_preempted(b), PreemptionMode::Checkpoint);
        let before = crate::behaviour::SLICES_ARE_GPUS - 1;
        assert_eq!(slices.preemption_mode_when_preempted(before), PreemptionMode::Suspend);
    }

    fn decide(s: &mut State, d: Decision) {
        let plan = Plan { based_on: s.applied(), decisions: vec![d] };
        let Outcome::PlanApplied { rejected, .. } = apply(s, Op::ApplyPlan(plan)) else { panic!() };
        assert!(rejected.is_empty(), "{rejected:?}");
    }

    /// Node n1 with `cpus` CPUs (no GPUs), and queue `q` with as many.
    fn cpu_node_n1(cpus: u64) -> State {
        let mut s = State::default();
        let n1 = NodeSpec { resources: Resources::of(&[("cpu", cpus)]), ..node("n1") };
        apply(&mut s, Op::RegisterNodes(vec![n1]));
        let mut q = crate::queue::QueueSpec::named("q");
        let quota = crate::queue::PoolQuota { nominal: Resources::of(&[("cpu", cpus)]), ..Default::default() };
        q.quotas.insert(Name::lit("default"), quota);
        apply(&mut s, Op::PutQueue(q));
        s
    }

    /// A CPU job `low` in mode suspend placed on n1, then preempted by `high` (one CPU each)
    /// and suspended in place there: it lends `high` its CPU. Returns (low, high).
    fn low_suspended_for_high(s: &mut State) -> (JobId, JobId) {
        let low = one_replica(s, "low", PreemptionMode::Suspend, 0);
        decide(s, Decision::Place { job: low, attempt: 1, replicas: on_n1(0) });
        let high = one_replica(s, "high", PreemptionMode::Checkpoint, 0);
        let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
        decide(s, Decision::Preempt { job: high, victims, replicas: on_n1(0), message: "test".into() });
        let suspended = Observed::Stopped { job: low, attempt: 1, rank: 0, checkpointed: false };
        assert!(report(s, "n1", vec![suspended]).is_empty());
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);
        (low, high)
    }

    /// Behaviour 4 (MIG slices are GPUs, decisions.md section 7): a job on slices suspended
    /// in place under behaviour 3 stays suspended across the raise, holding its slices (its
    /// processes keep them), and the ledger the raise makes is what a restore makes; the next
    /// preemption of such a job checkpoints it.
    #[test]
    fn a_slice_job_suspended_before_behaviour_4_stays_suspended_across_the_raise() {
        let mut s = State::default();
        apply(&mut s, Op::SetBehaviour(crate::behaviour::RANK_SAVES));
        let slices = Resources::of(&[("mig-1g.10gb", 7), ("cpu", 4)]);
        apply(&mut s, Op::RegisterNodes(vec![NodeSpec { resources: slices.clone(), ..node("n1") }]));
        let mut q = crate::queue::QueueSpec::named("q");
        let quota = crate::queue::PoolQuota { nominal: slices, ..Default::default() };
        q.quotas.insert(Name::lit("default"), quota);
        apply(&mut s, Op::PutQueue(q));
        let submit = |s: &mut State, name: &str, amounts: &[(&str, u64)]| {
            let mut spec = one_replica_spec(name, PreemptionMode::Suspend, 0);
            spec.tasks[0].resources = Resources::of(amounts);
            let Outcome::Submitted { job, .. } = apply(s, Op::Submit { spec, request_id: None }) else { panic!() };
            job
        };
        let low = submit(&mut s, "low", &[("mig-1g.10gb", 6), ("cpu", 2)]);
        decide(&mut s, Decision::Place { job: low, attempt: 1, replicas: on_n1(0) });
        // Placed under behaviour 3 and running at the raise: its preemption would now stop it.
        let other = submit(&mut s, "other", &[("mig-1g.10gb", 1)]);
        decide(&mut s, Decision::Place { job: other, attempt: 1, replicas: on_n1(0) });
        let high = submit(&mut s, "high", &[("cpu", 4)]);
        let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
        decide(&mut s, Decision::Preempt { job: high, victims, replicas: on_n1(0), message: "test".into() });
        assert!(report(&mut s, "n1", vec![stopped(low, 0)]).is_empty());
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended, "behaviour 3 suspends a job on slices");
        let held = |s: &State| s.ledger().nodes[0].free[s.ledger().kinds.index("mig-1g.10gb").unwrap()];
        assert_eq!(held(&s), 0, "its 6 slices stay taken");

        apply(&mut s, Op::SetBehaviour(crate::behaviour::SLICES_ARE_GPUS));
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);
        assert_eq!(held(&s), 0, "still taken after the raise");
        let mut restored = s.clone();
        restored.rebuild_ledger();
        assert_eq!(restored.ledger().digest(), s.ledger().digest(), "the raise's ledger is a restore's");
        let spec = &s.job(low).unwrap().spec;
        assert_eq!(spec.preemption_mode_when_preempted(s.behaviour()), PreemptionMode::Checkpoint);
    }

    /// Issue 31: a report of a suspension names its preemption (preemptor and time), so an
    /// answer to an earlier suspension, resent late once the job was resumed in place and is
    /// being suspended again, is refused; as a plain `Stopped` it counted for the new
    /// suspension while the rank might run. Both preemptions here are decided at one
    /// replicated time: the preemptor tells them apart.
    #[test]
    fn an_answer_to_an_earlier_suspension_does_not_count_for_the_next() {
        let mut s = cpu_node_n1(1);
        let low = one_replica(&mut s, "low", PreemptionMode::Suspend, 0);
        decide(&mut s, Decision::Place { job: low, attempt: 1, replicas: on_n1(0) });
        let preempt = |s: &mut State, name: &str| {
            let by = one_replica(s, name, PreemptionMode::Checkpoint, 0);
            let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
            decide(s, Decision::Preempt { job: by, victims, replicas: on_n1(0), message: "test".into() });
            let answer = |by| Observed::Suspended {
                job: low,
                attempt: 1,
                rank: 0,
                by,
                requested_ms: s.job(low).unwrap().stopping.expect("being suspended").requested_ms,
            };
            (by, answer(by))
        };
        let (high, first) = preempt(&mut s, "high");
        assert!(report(&mut s, "n1", vec![first.clone()]).is_empty());
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);
        decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1(0) });
        assert!(
            report(&mut s, "n1", vec![Observed::Exited { job: high, attempt: 1, rank: 0, exit_code: 0 }]).is_empty()
        );
        decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });

        let (_, second) = preempt(&mut s, "urgent");
        let ignored = report(&mut s, "n1", vec![first]);
        assert_eq!(ignored.len(), 1, "the late answer counted");
        assert!(ignored[0].1.contains("an answer to its suspension for job"), "{ignored:?}");
        assert_eq!(s.job(low).unwrap().state, JobState::Preempting, "still being suspended");
        assert!(report(&mut s, "n1", vec![second]).is_empty());
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);
    }

    /// Under `behaviour`: nodes n1..n`ranks` with one CPU each, queue `q` with as many, and
    /// gang `low` (mode suspend, one CPU per rank) running a rank on each node.
    fn suspendable_gang(behaviour: u32, ranks: u32) -> (State, JobId) {
        let mut s = State::default();
        apply(&mut s, Op::SetBehaviour(behaviour));
        let cpu_node = |i: u32| NodeSpec { resources: Resources::of(&[("cpu", 1)]), ..node(&format!("n{i}")) };
        apply(&mut s, Op::RegisterNodes((1..=ranks).map(cpu_node).collect()));
        let mut q = crate::queue::QueueSpec::named("q");
        let nominal = Resources::of(&[("cpu", u64::from(ranks))]);
        q.quotas.insert(Name::lit("default"), crate::queue::PoolQuota { nominal, ..Default::default() });
        apply(&mut s, Op::PutQueue(q));
        let mut spec = one_replica_spec("low", PreemptionMode::Suspend, 0);
        spec.tasks[0].replicas = ranks;
        let Outcome::Submitted { job: low, .. } = apply(&mut s, Op::Submit { spec, request_id: None }) else {
            panic!()
        };
        let replicas = crate::fixture::one_rank_per_node(ranks, 0);
        decide(&mut s, Decision::Place { job: low, attempt: 1, replicas });
        (s, low)
    }

    /// A gang rank that exited 0 while its gang went on (done by design), then the gang
    /// suspended in place, resumed, and suspended again: its agent never answers a SUSPEND
    /// of that rank (`reconcile::run_of_finished`: nothing to say of a rank done by design),
    /// so the second suspension completes only if the state still knows the rank ended.
    /// Before behaviour 7 the first suspension forgot it: the state held the rank suspended
    /// and then running with no process, and the second suspension waited for it for good
    /// (found by the simulator's liveness check, stop 84: `the state keeps it suspended there,
    /// and no process of it is there`).
    #[test]
    fn a_rank_that_ended_before_its_gang_was_suspended_stays_ended() {
        for (behaviour, outlasts) in [(crate::behaviour::PASSED_LENDS_HOLD, false), (crate::behaviour::BEHAVIOUR, true)]
        {
            let (mut s, low) = suspendable_gang(behaviour, 2);
            let done = Observed::Exited { job: low, attempt: 1, rank: 1, exit_code: 0 };
            assert!(report(&mut s, "n2", vec![done]).is_empty());
            let suspend = |s: &mut State, name: &str| {
                let by = one_replica(s, name, PreemptionMode::Checkpoint, 0);
                let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
                decide(s, Decision::Preempt { job: by, victims, replicas: on_n1(0), message: "test".into() });
                let requested_ms = s.job(low).unwrap().stopping.expect("being suspended").requested_ms;
                let answer = Observed::Suspended { job: low, attempt: 1, rank: 0, by, requested_ms };
                assert!(report(s, "n1", vec![answer]).is_empty());
                by
            };
            let high = suspend(&mut s, "high");
            assert_eq!(s.job(low).unwrap().state, JobState::Suspended, "rank 0 suspended, rank 1 done");
            assert_eq!(s.job(low).unwrap().ended_ranks.contains_key(&1), outlasts, "behaviour {behaviour}");
            decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1(0) });
            let high_done = Observed::Exited { job: high, attempt: 1, rank: 0, exit_code: 0 };
            assert!(report(&mut s, "n1", vec![high_done]).is_empty());
            decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });

            suspend(&mut s, "urgent");
            let want = if outlasts { JobState::Suspended } else { JobState::Preempting };
            assert_eq!(s.job(low).unwrap().state, want, "behaviour {behaviour}: the second suspension");
        }
    }

    /// A gang rank that exited 0 while its gang went on, then the gang's suspension cut
    /// short by the loss of another rank's node: the job goes back to the queue, and its
    /// ranks whose processes live on (rank 0, being suspended on n1) are completing until
    /// their agents stop them. The rank that ended is not: its agent never answers a STOP of
    /// a rank whose own exit ended it (`reconcile::plan_stop`), so before behaviour 8 it
    /// stayed completing for good, holding its share of n3 (found by the simulator's
    /// liveness check, stop 85, seed 14 of 10 minutes: `its stop there is not complete, and
    /// no process of it runs`).
    #[test]
    fn a_rank_that_ended_before_its_gangs_suspension_was_cut_short_is_not_completing() {
        for (behaviour, outlasts) in
            [(crate::behaviour::ENDED_RANKS_OUTLAST_SUSPENSION, false), (crate::behaviour::BEHAVIOUR, true)]
        {
            let (mut s, low) = suspendable_gang(behaviour, 3);
            let done = Observed::Exited { job: low, attempt: 1, rank: 2, exit_code: 0 };
            assert!(report(&mut s, "n3", vec![done]).is_empty());
            let by = one_replica(&mut s, "high", PreemptionMode::Checkpoint, 0);
            let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
            decide(&mut s, Decision::Preempt { job: by, victims, replicas: on_n1(0), message: "test".into() });
            assert_eq!(s.job(low).unwrap().state, JobState::Preempting, "being suspended");

            apply(&mut s, Op::SetNodeStatus { node: Name::lit("n2"), status: crate::node::NodeStatus::Lost });
            assert_eq!(s.job(low).unwrap().state, JobState::Pending, "requeued");
            let completing: Vec<u32> = s.completing(low).expect("rank 0 lives on").ranks.keys().copied().collect();
            let want = if outlasts { vec![0] } else { vec![0, 2] };
            assert_eq!(completing, want, "behaviour {behaviour}");
        }
    }

    /// Two jobs being suspended for one preemptor lend it their CPUs, in job order, up to
    /// what it reserved: `a` (2 CPUs) lends 2, `b` (2 CPUs) the 1 left. `a` then ends on its
    /// own before its suspension: its share goes, and `b` now lends 2, as a rebuild of the
    /// ledger says. The incremental path left `b` lending 1, so the replicas' ledgers
    /// differed from their rebuilds (the simulator, seed 8 of 10 minutes: `incremental:
    /// node n12 ... lent_amount: [0, 0, ...]` against `rebuilt: ... [0, 4, ...]`).
    #[test]
    fn a_lender_that_leaves_passes_what_it_lent_to_the_next() {
        let mut s = cpu_node_n1(4);
        let cpus = |s: &mut State, name: &str, n: u64, mode: PreemptionMode, priority: &str| {
            let mut spec = one_replica_spec(name, mode, 0);
            spec.tasks[0].resources = Resources::of(&[("cpu", n)]);
            spec.priority = PriorityRef::Class(Name::lit(priority));
            let Outcome::Submitted { job, .. } = apply(s, Op::Submit { spec, request_id: None }) else { panic!() };
            job
        };
        let a = cpus(&mut s, "a", 2, PreemptionMode::Suspend, "train");
        let b = cpus(&mut s, "b", 2, PreemptionMode::Suspend, "train");
        for job in [a, b] {
            decide(&mut s, Decision::Place { job, attempt: 1, replicas: on_n1(0) });
        }
        let high = cpus(&mut s, "high", 3, PreemptionMode::Checkpoint, "interactive");
        let victims = vec![crate::plan::Victim { job: a, attempt: 1 }, crate::plan::Victim { job: b, attempt: 1 }];
        decide(&mut s, Decision::Preempt { job: high, victims, replicas: on_n1(0), message: "test".into() });
        s.ledger_consistent().expect("both lend");
        let done = Observed::Exited { job: a, attempt: 1, rank: 0, exit_code: 0 };
        assert!(report(&mut s, "n1", vec![done]).is_empty());
        assert_eq!(s.job(a).unwrap().state, JobState::Succeeded);
        s.ledger_consistent().expect("b lends what a no longer does");
    }

    /// A CPU job `low` in mode suspend, preempted by `high` on n1 (one CPU), suspended in
    /// place, and resumed in place once `high` ended: attempt 1 runs again.
    fn resumed_in_place() -> (State, JobId) {
        let mut s = cpu_node_n1(1);
        let (low, high) = low_suspended_for_high(&mut s);
        decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1(0) });
        let done = Observed::Exited { job: high, attempt: 1, rank: 0, exit_code: 0 };
        assert!(report(&mut s, "n1", vec![done]).is_empty());
        decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });
        let j = s.job(low).unwrap();
        assert_eq!((j.state, j.attempt), (JobState::Running, 1));
        (s, low)
    }

    /// A suspended victim does not resume in place on a node whose maintenance window has
    /// started (decisions.md section 14: nothing runs there until its end), even once its
    /// preemptor is gone; it does once the window ends. Found while writing section 14's
    /// scenarios: the plan checker asked only that the node be Ready.
    #[test]
    fn a_suspended_victim_does_not_resume_in_place_during_a_maintenance_window() {
        let mut s = cpu_node_n1(1);
        let (low, high) = low_suspended_for_high(&mut s);
        decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1(0) });
        let now = s.now_ms();
        let window = crate::maintenance::WindowSpec {
            name: Name::lit("fw"),
            nodes: vec![Name::lit("n1")],
            start_ms: now,
            end_ms: now + 10_000,
        };
        apply(&mut s, Op::CreateMaintenance(window));
        let stopped = Observed::Stopped { job: high, attempt: 1, rank: 0, checkpointed: true };
        assert!(report(&mut s, "n1", vec![stopped]).is_empty());
        assert!(!s.holds(high), "high was stopped for the window and requeued");
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::ResumeInPlace { job: low, attempt: 1 }] };
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
        assert_eq!(rejected.len(), 1, "n1 is in window fw");
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);
        s.apply(Command { now_ms: now + 10_000, op: Op::Tick }).unwrap();
        decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });
        assert_eq!(s.job(low).unwrap().state, JobState::Running);
    }

    /// A job suspended and resumed in place runs the same attempt again: its agent's lease
    /// stop (with its work saved) requeues it, and in a later preemption counts as its stop,
    /// not as a late save of an ended attempt (`late_checkpoint`). Written while looking for
    /// why chaos runs held suspend-mode jobs Preempting until their node was lost
    /// (chaos/README.md, "Found so far"); it passed before any change, so that is not the
    /// cause.
    #[test]
    fn a_lease_stop_of_an_attempt_resumed_in_place_requeues_it() {
        let (mut s, low) = resumed_in_place();
        let lease_stop = Observed::LeaseStopped { job: low, attempt: 1, rank: 0, checkpointed: true, rank_saved: true };
        assert!(report(&mut s, "n1", vec![lease_stop]).is_empty());
        let j = s.job(low).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true), "{}", j.reason);

        // Preempted again after its resumption, its stop (a checkpoint-then-stop here) ends
        // the preemption.
        let (mut s, low) = resumed_in_place();
        let high = one_replica(&mut s, "high2", PreemptionMode::Checkpoint, 0);
        let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
        decide(&mut s, Decision::Preempt { job: high, victims, replicas: on_n1(0), message: "again".into() });
        let expired = Observed::LeaseExpired { job: low, attempt: 1, rank: 0, checkpointed: true };
        assert!(report(&mut s, "n1", vec![expired]).is_empty());
        assert_ne!(s.job(low).unwrap().state, JobState::Preempting, "the stop was not counted");
    }

    /// n1 with two CPUs, one of them `filler`'s; `low` (mode suspend, one CPU) suspended in
    /// place for `high` (one CPU), which runs on the CPU `low` lent it. Returns (low, high,
    /// filler).
    fn preemptor_on_lent_cpu() -> (State, JobId, JobId, JobId) {
        let mut s = cpu_node_n1(2);
        let filler = one_replica(&mut s, "filler", PreemptionMode::Checkpoint, 0);
        decide(&mut s, Decision::Place { job: filler, attempt: 1, replicas: on_n1(0) });
        let (low, high) = low_suspended_for_high(&mut s);
        decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1(0) });
        assert_eq!(s.job(high).unwrap().lent_from.len(), 1, "high runs on low's CPU");
        (s, low, high, filler)
    }

    /// A preemptor running on what its suspended victim lent it is cancelled: its rank,
    /// until reported gone, still runs on that CPU, so the victim stays suspended until
    /// then. Found by `scheduling_keeps_every_invariant` run with more cases: the victim
    /// resumed in place at once, and n1's CPU was given to both.
    #[test]
    fn a_suspended_victim_resumes_only_once_its_cancelled_preemptors_ranks_are_gone() {
        let (mut s, low, high, _) = preemptor_on_lent_cpu();
        apply(&mut s, Op::Cancel { job: high });
        assert_eq!(s.completing_ranks(high), 1);
        assert!(s.holds(high), "its rank being stopped holds what it ran on");
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::ResumeInPlace { job: low, attempt: 1 }] };
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
        assert_eq!(rejected.len(), 1, "high's rank still runs on low's CPU");
        assert_eq!(s.job(low).unwrap().state, JobState::Suspended);

        let gone = Observed::Stopped { job: high, attempt: 1, rank: 0, checkpointed: false };
        assert!(report(&mut s, "n1", vec![gone]).is_empty());
        assert!(s.job(high).unwrap().lent_from.is_empty(), "the lend ended with the rank");
        decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });
        assert_eq!(s.job(low).unwrap().state, JobState::Running);
    }

    /// A suspended victim whose preemptor runs on its lent CPU is cancelled: its rank, a
    /// stopped process until reported gone, holds only what it did not lend. Counted whole,
    /// the lent CPU was charged to n1 twice, and n1 looked full to a job that fits beside.
    #[test]
    fn a_cancelled_suspended_victims_rank_being_stopped_goes_on_lending_its_preemptor() {
        let (mut s, low, high, filler) = preemptor_on_lent_cpu();
        apply(&mut s, Op::Cancel { job: low });
        assert_eq!(s.completing_ranks(low), 1, "its stopped process is still there");
        assert!(
            report(&mut s, "n1", vec![Observed::Exited { job: filler, attempt: 1, rank: 0, exit_code: 0 }]).is_empty()
        );
        let next = one_replica(&mut s, "next", PreemptionMode::Checkpoint, 0);
        // n1: high's CPU (lent by low's stopped rank) and the CPU filler left.
        decide(&mut s, Decision::Place { job: next, attempt: 1, replicas: on_n1(0) });

        let gone = Observed::Stopped { job: low, attempt: 1, rank: 0, checkpointed: false };
        assert!(report(&mut s, "n1", vec![gone]).is_empty());
        assert!(s.job(high).unwrap().lent_from.is_empty(), "the lend ended with the rank");
        assert_eq!(s.job(high).unwrap().state, JobState::Running);
    }

    /// A job of `replicas` ranks of `cpus` CPUs each, in mode `mode`, submitted.
    fn cpu_job(s: &mut State, name: &str, mode: PreemptionMode, replicas: u32, cpus: u64) -> JobId {
        let mut spec = one_replica_spec(name, mode, 0);
        spec.tasks[0].replicas = replicas;
        spec.tasks[0].resources = Resources::of(&[("cpu", cpus)]);
        let Outcome::Submitted { job, .. } = apply(s, Op::Submit { spec, request_id: None }) else { panic!() };
        job
    }

    /// `ranks` replicas of task 0, all on n1.
    fn ranks_on_n1(ranks: u32) -> Vec<ReplicaAlloc> {
        (0..ranks).map(|index| ReplicaAlloc { task: 0, index, node: Name::lit("n1"), gpus: Vec::new() }).collect()
    }

    /// `victim` (running on n1) preempted by `by` (placed on n1 with `ranks` ranks), and
    /// suspended in place: it lends `by` its CPUs.
    fn suspend_for(s: &mut State, victim: JobId, by: JobId, ranks: u32) {
        let victims = vec![crate::plan::Victim { job: victim, attempt: 1 }];
        decide(s, Decision::Preempt { job: by, victims, replicas: ranks_on_n1(ranks), message: "test".into() });
        let suspended = Observed::Stopped { job: victim, attempt: 1, rank: 0, checkpointed: false };
        assert!(report(s, "n1", vec![suspended]).is_empty());
        assert_eq!(s.job(victim).unwrap().state, JobState::Suspended);
        decide(s, Decision::Place { job: by, attempt: 1, replicas: ranks_on_n1(ranks) });
    }

    /// Behaviour 5: a preemptor of two ranks ran on the two CPUs its suspended victim lent
    /// it; its rank 0 crashed, so it failed, and its rank 1 is being stopped. That rank
    /// borrows one CPU, not two: under behaviour 4 the lend of two was kept, n1 counted a
    /// CPU free that the victim will take back, and a job placed on it left n1
    /// over-allocated once the rank was gone (simulator seed 2 of 10 minutes, stop 76).
    #[test]
    fn a_failed_preemptors_rank_being_stopped_borrows_only_what_it_holds() {
        for behaviour in [crate::behaviour::SLICES_ARE_GPUS, crate::behaviour::LENDS_FOLLOW_RANKS] {
            let mut s = cpu_node_n1(4);
            apply(&mut s, Op::SetBehaviour(behaviour));
            let low = cpu_job(&mut s, "low", PreemptionMode::Suspend, 1, 2);
            decide(&mut s, Decision::Place { job: low, attempt: 1, replicas: on_n1(0) });
            let high = cpu_job(&mut s, "high", PreemptionMode::Checkpoint, 2, 1);
            suspend_for(&mut s, low, high, 2);
            let crash = Observed::Exited { job: high, attempt: 1, rank: 0, exit_code: 3 };
            assert!(report(&mut s, "n1", vec![crash]).is_empty());
            assert_eq!((s.job(high).unwrap().state, s.completing_ranks(high)), (JobState::Failed, 1));
            let borrowed = s.job(high).unwrap().lent_from.clone();
            let next = cpu_job(&mut s, "next", PreemptionMode::Checkpoint, 1, 3);
            let plan = Plan {
                based_on: s.applied(),
                decisions: vec![Decision::Place { job: next, attempt: 1, replicas: on_n1(0) }],
            };
            if behaviour < crate::behaviour::LENDS_FOLLOW_RANKS {
                assert_eq!(borrowed[0].resources, Resources::of(&[("cpu", 2)]), "behaviour 4 is kept as it was");
                continue;
            }
            assert_eq!(borrowed[0].resources, Resources::of(&[("cpu", 1)]));
            let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
            assert_eq!(rejected.len(), 1, "n1 has two CPUs free: low's own, and what crashed rank 0 held");
            s.ledger_consistent().unwrap();
        }
    }

    /// On n1 of 3 CPUs under `behaviour`: `mid` ran on the CPU `low` lent it, then was
    /// suspended for `high`, to which it lent that CPU on (and, with `filler`, a job of 2
    /// CPUs runs beside); `mid` is cancelled and its stopped rank is gone while `high` still
    /// runs. Returns (the state, low, high).
    fn middle_gone(behaviour: u32, filler: bool) -> (State, JobId, JobId) {
        let mut s = cpu_node_n1(3);
        apply(&mut s, Op::SetBehaviour(behaviour));
        let low = cpu_job(&mut s, "low", PreemptionMode::Suspend, 1, 1);
        decide(&mut s, Decision::Place { job: low, attempt: 1, replicas: on_n1(0) });
        let mid = cpu_job(&mut s, "mid", PreemptionMode::Suspend, 1, 1);
        suspend_for(&mut s, low, mid, 1);
        let high = cpu_job(&mut s, "high", PreemptionMode::Checkpoint, 1, 1);
        suspend_for(&mut s, mid, high, 1);
        if filler {
            let filler = cpu_job(&mut s, "filler", PreemptionMode::Checkpoint, 1, 2);
            decide(&mut s, Decision::Place { job: filler, attempt: 1, replicas: on_n1(0) });
        }
        apply(&mut s, Op::Cancel { job: mid });
        let gone = Observed::Stopped { job: mid, attempt: 1, rank: 0, checkpointed: false };
        assert!(report(&mut s, "n1", vec![gone]).is_empty());
        (s, low, high)
    }

    /// Behaviour 5: `mid` ran on the CPU `low` lent it, then was suspended for `high`, to
    /// which it lent that CPU on. `mid` is cancelled and its stopped rank is gone while
    /// `high` still runs: `low` lends `high` the CPU directly, and stays suspended until
    /// `high` is gone. Under behaviour 4 `low` counted its CPU whole again beside `high`
    /// (simulator seed 26 of 10 minutes, stop 76: a node over-allocated).
    #[test]
    fn a_lend_passed_on_stays_lent_once_the_job_in_the_middle_is_gone() {
        let (mut s, low, high) = middle_gone(crate::behaviour::LENDS_FOLLOW_RANKS, true);
        let lends: Vec<JobId> = s.job(high).unwrap().lent_from.iter().map(|l| l.from).collect();
        assert_eq!(lends, vec![low], "high runs on low's CPU, lent to it directly now");
        s.ledger_consistent().unwrap();
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::ResumeInPlace { job: low, attempt: 1 }] };
        let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
        assert_eq!(rejected.len(), 1, "high still runs on low's CPU");
    }

    /// Behaviour 6: once `mid` is gone, `low` lends `high` its CPU directly, and is
    /// suspended for `high` now: it does not resume while `high` runs on that CPU. Under
    /// behaviour 5 `mid`'s end released `low` (it was suspended for `mid`), a cycle resumed
    /// it beside `high`, and `high`'s record still held the lend, so a rebuilt ledger parted
    /// from the incremental one (simulator seed 36 of 10 minutes, stop 78). The queue has
    /// room for both here: only the suspension holds `low` back.
    #[test]
    fn a_lender_whose_lend_was_passed_on_stays_suspended_for_the_borrower() {
        for behaviour in [crate::behaviour::LENDS_FOLLOW_RANKS, crate::behaviour::PASSED_LENDS_HOLD] {
            let (mut s, low, high) = middle_gone(behaviour, false);
            let resume = Decision::ResumeInPlace { job: low, attempt: 1 };
            let plan = Plan { based_on: s.applied(), decisions: vec![resume] };
            let Outcome::PlanApplied { rejected, .. } = apply(&mut s, Op::ApplyPlan(plan)) else { panic!() };
            if behaviour < crate::behaviour::PASSED_LENDS_HOLD {
                assert!(rejected.is_empty(), "behaviour 5 is kept as it was");
                continue;
            }
            assert_eq!(s.job(low).unwrap().suspended_for, Some(high));
            assert!(
                matches!(&rejected[..], [(0, crate::rejection::Rejection::StillRunsOnItsResources { .. })]),
                "{rejected:?}"
            );
            s.ledger_consistent().unwrap();
            // Once `high` is gone, `low` resumes.
            apply(&mut s, Op::Cancel { job: high });
            let gone = Observed::Stopped { job: high, attempt: 1, rank: 0, checkpointed: false };
            assert!(report(&mut s, "n1", vec![gone]).is_empty());
            decide(&mut s, Decision::ResumeInPlace { job: low, attempt: 1 });
            s.ledger_consistent().unwrap();
        }
    }

    /// A CPU job `low` of `ranks` replicas, one CPU on each of n1.., in mode suspend,
    /// preempted by `high` on n1: its ranks are being suspended (Preempting).
    fn being_suspended(ranks: u32) -> (State, JobId, JobId) {
        let mut s = State::default();
        let cpu_node = |i: u32| NodeSpec { resources: Resources::of(&[("cpu", 1)]), ..node(&format!("n{}", i + 1)) };
        apply(&mut s, Op::RegisterNodes((0..ranks).map(cpu_node).collect()));
        let mut q = crate::queue::QueueSpec::named("q");
        let quota = crate::queue::PoolQuota { nominal: Resources::of(&[("cpu", ranks as u64)]), ..Default::default() };
        q.quotas.insert(Name::lit("default"), quota);
        apply(&mut s, Op::PutQueue(q));
        let mut spec = one_replica_spec("low", PreemptionMode::Suspend, 0);
        spec.tasks[0].replicas = ranks;
        let Outcome::Submitted { job: low, .. } = apply(&mut s, Op::Submit { spec, request_id: None }) else {
            panic!()
        };
        let replicas = (0..ranks)
            .map(|i| ReplicaAlloc { task: 0, index: i, node: Name::lit(&format!("n{}", i + 1)), gpus: Vec::new() })
            .collect();
        decide(&mut s, Decision::Place { job: low, attempt: 1, replicas });
        let high = one_replica(&mut s, "high", PreemptionMode::Checkpoint, 0);
        let victims = vec![crate::plan::Victim { job: low, attempt: 1 }];
        decide(&mut s, Decision::Preempt { job: high, victims, replicas: on_n1(0), message: "test".into() });
        assert_eq!(s.job(low).unwrap().state, JobState::Preempting);
        (s, low, high)
    }

    /// A rank of a job being suspended that its agent stopped for an expired lease (or
    /// reports killed there) is gone, not suspended: the job cannot resume in place, so it
    /// goes back to the queue, from the checkpoint its lease stop wrote, and its preemptor
    /// is placed. Found by a chaos partitions run (chaos/README.md, "Found so far"): the
    /// lease stop completed the suspension, and the job was held Suspended with no process,
    /// and Preempting when preempted again.
    #[test]
    fn a_rank_lost_while_its_job_was_being_suspended_requeues_the_job() {
        let lease_stop =
            |low| Observed::LeaseStopped { job: low, attempt: 1, rank: 0, checkpointed: true, rank_saved: true };
        let killed = |low| Observed::KilledHere { job: low, attempt: 1, rank: 0, rank_saved: false };
        for (gone, saved) in [(lease_stop as fn(JobId) -> Observed, true), (killed, false)] {
            let (mut s, low, high) = being_suspended(1);
            assert!(report(&mut s, "n1", vec![gone(low)]).is_empty());
            let j = s.job(low).unwrap();
            assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, saved), "{:?}: {}", gone(low), j.reason);
            assert!(j.reason.contains("node n1"), "{}", j.reason);
            assert_eq!(s.completing_ranks(low), 0, "its process is gone");
            decide(&mut s, Decision::Place { job: high, attempt: 1, replicas: on_n1(0) });
            assert_eq!(s.job(high).unwrap().state, JobState::Running);
        }
    }

    /// A gang being suspended whose other rank is lost (its lease stop, or its node): the
    /// ranks already suspended keep their processes (stopped, not gone), so they stay
    /// completing, holding their share, until their agents report them gone.
    #[test]
    fn a_gang_being_suspended_that_loses_a_rank_keeps_its_suspended_ranks_completing() {
        let suspended = |low| Observed::Stopped { job: low, attempt: 1, rank: 0, checkpointed: false };
        let (mut s, low, _) = being_suspended(2);
        assert!(report(&mut s, "n1", vec![suspended(low)]).is_empty());
        let lease_stop =
            Observed::LeaseStopped { job: low, attempt: 1, rank: 1, checkpointed: false, rank_saved: true };
        assert!(report(&mut s, "n2", vec![lease_stop]).is_empty());
        assert_eq!(s.job(low).unwrap().state, JobState::Pending);
        let c = s.completing(low).expect("rank 0 is suspended on n1, not gone");
        assert_eq!(c.ranks.keys().copied().collect::<Vec<_>>(), vec![0]);

        let (mut s, low, _) = being_suspended(2);
        assert!(report(&mut s, "n1", vec![suspended(low)]).is_empty());
        apply(&mut s, Op::SetNodeStatus { node: Name::lit("n2"), status: crate::node::NodeStatus::Lost });
        assert_eq!(s.job(low).unwrap().state, JobState::Pending);
        let c = s.completing(low).expect("rank 0 is suspended on n1, not gone");
        assert_eq!(c.ranks.keys().copied().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn a_rank_that_could_not_start_fails_the_job_and_its_event_says_why() {
        let (mut s, job) = gang();
        let reason = "cannot run as the job's user: Unix user bob is not allowed to run jobs on this node".to_string();
        let not_started = Observed::NotStarted { job, attempt: 1, rank: 1, exit_code: 127, reason };
        assert!(report(&mut s, "n1", vec![not_started.clone()]).len() == 1, "rank 1 runs on n2, not n1");
        assert!(report(&mut s, "n2", vec![not_started]).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.exit_code), (JobState::Failed, Some(127)));
        let last = &j.events.back().unwrap().message;
        assert!(
            last.contains("rank 1 could not start on node n2") && last.contains("Unix user bob is not allowed"),
            "{last}"
        );
    }

    #[test]
    fn any_rank_exiting_non_zero_fails_the_job_and_rank_0_exit_ends_it() {
        let (mut s, job) = gang();
        report(&mut s, "n2", vec![Observed::Exited { job, attempt: 1, rank: 1, exit_code: 3 }]);
        assert_eq!(s.job(job).unwrap().state, JobState::Failed);
        let (mut s, job) = gang();
        report(&mut s, "n1", vec![Observed::Exited { job, attempt: 1, rank: 0, exit_code: 0 }]);
        assert_eq!(s.job(job).unwrap().state, JobState::Succeeded);
    }

    #[test]
    #[should_panic(expected = "would over-allocate node n1")]
    fn a_start_that_would_over_allocate_panics_in_every_build() {
        let (mut s, _) = gang();
        let mut spec = s.job_by_name("g").unwrap().spec.clone();
        spec.name = Name::lit("second");
        spec.tasks[0].replicas = 1;
        spec.tasks[0].resources = Resources::of(&[("gpu", 1)]);
        let Outcome::Submitted { job, .. } = apply(&mut s, Op::Submit { spec, request_id: None }) else { panic!() };
        // Past the plan checker, which would refuse it: GPU 0 of n1 is the gang's.
        let replicas = vec![ReplicaAlloc { task: 0, index: 0, node: Name::lit("n1"), gpus: vec![0] }];
        s.start_job(job, 1, replicas, &mut Vec::new());
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "the ledger drifted")]
    fn a_ledger_that_drifts_from_the_state_is_caught_at_the_next_command() {
        let (mut s, job) = gang();
        // The state says the gang runs; the ledger forgets it.
        s.ledger.vacate(job);
        apply(&mut s, Op::Tick);
    }

    #[test]
    fn without_sees_the_jobs_gone_and_puts_their_usage_back() {
        let (mut s, job) = gang();
        let before = s.ledger.digest();
        let q = s.ledger.queue("q").unwrap();
        let inside = s.ledger.without([job], |l| l.queues[q].usage[0][crate::ledger::GPU_KIND]);
        assert_eq!(inside, 0, "the gang's 16 GPUs are not charged inside");
        assert_eq!(s.ledger.queues[q].usage[0][crate::ledger::GPU_KIND], crate::ledger::gpus_milli(16));
        assert_eq!(s.ledger.digest(), before, "put back exactly");
    }
}
