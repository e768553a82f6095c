//! The ranks of each running attempt that saved their work since the job's last complete
//! checkpoint (`Observed::RankCheckpointed`). A gang has a checkpoint to resume from only
//! once every rank has saved: one rank's file does not make the gang resumable. The tally is
//! replicated (it was the leader's memory before format 11, and a failover forgot it: every
//! rank had to save again before the job counted as checkpointed, and a stop meanwhile
//! resumed from an older checkpoint).
//!
//! Bounded by the jobs the state keeps: an entry goes with its job, and one of an older
//! attempt counts for nothing and is replaced.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::State;
use crate::error::ApplyError;
use crate::job::JobId;
use crate::name::Name;

/// One job's tally: the attempt and the ranks of it that saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saves {
    pub attempt: u32,
    pub ranks: BTreeSet<u32>,
}

pub type RankSaves = BTreeMap<JobId, Saves>;

impl State {
    /// `rank` of the job's running attempt, on `node`, saved its work: once every rank has,
    /// the job has a checkpoint and the tally starts over.
    pub(super) fn rank_checkpointed(
        &mut self,
        node: &Name,
        job: JobId,
        attempt: u32,
        rank: u32,
    ) -> Result<(), ApplyError> {
        self.check_rank_placed(node, job, attempt, rank)?;
        self.check_active(job, "checkpointing")?;
        let world = self.d.jobs[&job].replicas.len().max(1);
        if self.note_rank_saved(job, attempt, rank) < world {
            return Ok(());
        }
        self.rank_saves.remove(&job);
        self.checkpointed(job, attempt)
    }

    /// Adds `rank` to the tally of `attempt`; how many ranks it holds now.
    pub(super) fn note_rank_saved(&mut self, job: JobId, attempt: u32, rank: u32) -> usize {
        let saves = self.rank_saves.entry(job).or_default();
        if saves.attempt != attempt {
            *saves = Saves { attempt, ranks: BTreeSet::new() };
        }
        saves.ranks.insert(rank);
        saves.ranks.len()
    }

    /// Whether every rank of `attempt` but `rank` has saved since the last complete
    /// checkpoint (`world` ranks in all).
    pub(super) fn others_saved(&self, job: JobId, attempt: u32, rank: u32, world: u32) -> bool {
        let saves = self.rank_saves.get(&job).filter(|s| s.attempt == attempt);
        (0..world).filter(|r| *r != rank).all(|r| saves.is_some_and(|s| s.ranks.contains(&r)))
    }

    /// The tally as the state holds it (for `baton describe` and tests).
    pub fn rank_saves(&self) -> &RankSaves {
        &self.rank_saves
    }

    /// Every tally names a job the state keeps, with ranks of that job's attempt.
    pub(super) fn restore_rank_saves<E: serde::de::Error>(&mut self, saves: RankSaves) -> Result<(), E> {
        for (job, s) in &saves {
            let Some(j) = self.d.jobs.get(job) else {
                return Err(E::custom(format!(
                    "inconsistent state: a checkpoint tally of job {job}, which is not kept"
                )));
            };
            if s.ranks.iter().any(|r| *r as usize >= j.replicas.len().max(1)) && s.attempt == j.attempt {
                return Err(E::custom(format!(
                    "inconsistent state: job {job}'s checkpoint tally names a rank it lacks"
                )));
            }
        }
        self.rank_saves = saves;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, Observed, Op, Outcome};
    use crate::fixture::{gpu_job, gpu_node, gpu_queue};
    use crate::job::{JobId, JobState};
    use crate::name::Name;
    use crate::plan::{Decision, Plan};
    use crate::state::State;

    fn apply(s: &mut State, op: Op) -> Outcome {
        s.apply(Command { now_ms: 1_000, op }).unwrap_or_else(|e| panic!("refused: {e}")).outcome
    }

    /// A 3-rank gang running on n1, n2, n3, at behaviour `behaviour`.
    fn gang(behaviour: u32) -> (State, JobId) {
        let mut s = State::new();
        apply(&mut s, Op::SetBehaviour(behaviour));
        apply(&mut s, Op::RegisterNodes(vec![gpu_node("n1", 8), gpu_node("n2", 8), gpu_node("n3", 8)]));
        apply(&mut s, Op::PutQueue(gpu_queue("q", 24)));
        let mut spec = gpu_job("g", "q", 8);
        spec.tasks[0].replicas = 3;
        let Outcome::Submitted { job, .. } = apply(&mut s, Op::Submit { spec, request_id: None }) else { panic!() };
        let replicas = crate::fixture::one_rank_per_node(3, 8);
        let plan = Plan { based_on: s.applied(), decisions: vec![Decision::Place { job, attempt: 1, replicas }] };
        apply(&mut s, Op::ApplyPlan(plan));
        assert_eq!(s.job(job).unwrap().state, JobState::Running);
        (s, job)
    }

    fn report(s: &mut State, node: u32, o: Observed) -> Vec<(u32, String)> {
        match apply(s, Op::Report { node: Name::lit(&format!("n{node}")), observations: vec![o] }) {
            Outcome::Reported { ignored } => ignored,
            other => panic!("{other:?}"),
        }
    }

    fn saved(job: JobId, rank: u32) -> Observed {
        Observed::RankCheckpointed { job, attempt: 1, rank }
    }

    /// The state's encoding read back, as a new leader (or a replica from a snapshot) has it.
    fn through_a_snapshot(s: &State) -> State {
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(s, config).unwrap();
        // Without a topology level declared it is format 11's layout, as the codec reads it.
        bincode::serde::decode_from_slice::<crate::state::PreTopologyState, _>(&bytes, config).unwrap().0.0
    }

    #[test]
    fn a_gang_has_a_checkpoint_once_every_rank_saved_and_the_tally_starts_over() {
        let (mut s, job) = gang(crate::behaviour::BEHAVIOUR);
        assert!(report(&mut s, 1, saved(job, 0)).is_empty());
        assert!(report(&mut s, 1, saved(job, 0)).is_empty(), "the same rank twice is still one");
        assert!(report(&mut s, 3, saved(job, 2)).is_empty());
        assert!(!s.job(job).unwrap().has_checkpoint);
        // Kept through a snapshot: the leader that takes over has the tally.
        let mut s = through_a_snapshot(&s);
        assert_eq!(s.rank_saves()[&job].ranks.len(), 2);
        assert!(report(&mut s, 2, saved(job, 1)).is_empty());
        assert!(s.job(job).unwrap().has_checkpoint);
        assert!(s.rank_saves().is_empty(), "the tally starts over");
        let ignored = report(&mut s, 1, saved(job, 1));
        assert!(ignored[0].1.contains("rank 1") && ignored[0].1.contains("n1"), "{ignored:?}");
    }

    #[test]
    fn a_lease_stop_that_saved_completes_the_gangs_checkpoint_from_the_tally() {
        let stop = |job, rank| Observed::LeaseStopped { job, attempt: 1, rank, checkpointed: false, rank_saved: true };
        let (mut s, job) = gang(crate::behaviour::BEHAVIOUR);
        report(&mut s, 1, saved(job, 0));
        report(&mut s, 2, saved(job, 1));
        let mut s = through_a_snapshot(&s);
        assert!(report(&mut s, 3, stop(job, 2)).is_empty());
        let j = s.job(job).unwrap();
        assert_eq!((j.state, j.has_checkpoint), (JobState::Pending, true), "{}", j.reason);
        assert!(s.rank_saves().is_empty(), "the attempt is over");

        // At behaviour 2 the lease stop says what the leader knew (`checkpointed`): the
        // state's tally does not decide, as before it.
        let (mut s, job) = gang(crate::behaviour::PER_USER_REQUEST_IDS);
        report(&mut s, 1, saved(job, 0));
        report(&mut s, 2, saved(job, 1));
        assert!(report(&mut s, 3, stop(job, 2)).is_empty());
        assert!(!s.job(job).unwrap().has_checkpoint, "the lease stop said what the leader knew");
    }

    #[test]
    fn an_empty_tally_keeps_the_older_layout() {
        let (s, _) = gang(crate::behaviour::BEHAVIOUR);
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&s, config).unwrap();
        let old = bincode::serde::decode_from_slice::<crate::state::PreRankSavesState, _>(&bytes, config);
        assert!(old.is_ok(), "format 10's reader reads it");
    }
}
