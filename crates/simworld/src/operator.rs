//! The operator: now and then it replaces a voter, as one replaces a machine that is going
//! away, while the faults go on. A cluster of three voters cannot lose one first (a replica
//! refuses to leave fewer than three), so it adds a spare replica as a learner (which
//! returns once the spare has caught up), makes it a voter, removes a voter drawn from the
//! seed (not the leader, which `remove_replica` refuses), and retires that one's machine:
//! its host goes down for good, the agents stop beating to it, and a new machine joins as
//! the next spare under a new id, as docs/ops.md asks (a removed id is refused: a leader of
//! an older configuration may still count it as a voter). Each change is asked of the
//! replica that leads when it is asked, on that replica's host, as `baton cluster` would; a
//! change that fails (a leader lost, a timeout) is asked again a second later.

use std::collections::VecDeque;

use baton_raft::net::sim::host_name;
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use baton_raft::{MembershipError, Replica};
use baton_rng::SplitMix64;
use futures::FutureExt;

use crate::faults::Faults;
use crate::hosts::ReplicaHosts;
use crate::replica::{Handles, RAFT_PORT};

/// Simulated milliseconds between two replacements, at least and at most.
pub const GAP_MS: (u64, u64) = (60_000, 180_000);
/// How long after a failed change it is asked again.
const RETRY_MS: u64 = 1_000;
/// Replacements one run makes, at most: each leaves a host down for good, which the
/// simulation keeps (a day of replacements every two minutes on average is 720).
pub const MAX_REPLACEMENTS: u64 = 1_024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The spare joins as a learner.
    Add,
    /// The learner becomes a voter.
    Promote,
    /// A voter leaves.
    Remove,
}

type Task = tokio::task::JoinHandle<Result<(), String>>;

/// One replacement under way: its stage, the replica that stage is about, the change asked
/// (if one is in flight) and when to ask again.
struct Change {
    stage: Stage,
    id: NodeId,
    /// The replica this replacement adds.
    joined: NodeId,
    task: Option<Task>,
    retry_at_ms: u64,
}

pub struct Operator {
    rng: SplitMix64,
    hosts: ReplicaHosts,
    /// Replicas up and members of nothing, oldest first: the next replacement adds the first.
    spares: VecDeque<NodeId>,
    /// The id the next new machine gets: above every id the run has used.
    next_id: NodeId,
    next_ms: u64,
    change: Option<Change>,
    /// Replacements completed.
    pub replaced: u64,
}

impl Operator {
    /// An operator whose spares are `spares`, starting new machines with `hosts`.
    pub fn new(seed: u64, spares: Vec<NodeId>, hosts: ReplicaHosts) -> Operator {
        let mut rng = SplitMix64::new(seed ^ 0x6f70_6572_6174_6f72);
        let next_ms = rng.range(GAP_MS.0, GAP_MS.1);
        let next_id = spares.iter().max().map_or(1, |id| id + 1);
        Operator { rng, hosts, spares: spares.into(), next_id, next_ms, change: None, replaced: 0 }
    }

    /// Whether no replacement is under way: the members are the voters of one configuration.
    pub fn idle(&self) -> bool {
        self.change.is_none()
    }

    /// Moves the replacement under way on, or starts one when it is time (`starting`: the
    /// load still runs); returns lines for the history.
    pub fn step(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        handles: &Handles,
        faults: &mut Faults,
        now_ms: u64,
        starting: bool,
    ) -> Vec<String> {
        let Some(leader) = crate::world::leader_of(sim, handles).and_then(|id| handles.get(id)) else {
            return Vec::new();
        };
        let Some(mut c) = self.change.take() else {
            if starting && now_ms >= self.next_ms && self.replaced < MAX_REPLACEMENTS {
                return self.begin(&leader, handles, now_ms);
            }
            return Vec::new();
        };
        let mut lines = Vec::new();
        match c.task.take() {
            Some(task) if !task.is_finished() => c.task = Some(task),
            Some(task) => match finished(task) {
                Ok(()) => return self.advance(c, sim, faults, &leader, now_ms),
                Err(e) => {
                    lines.push(format!("operator: {:?} of r{} failed ({e}); asking again", c.stage, c.id));
                    c.retry_at_ms = now_ms + RETRY_MS;
                    if c.stage == Stage::Remove && c.id == leader.id() {
                        // It leads by now, which `remove_replica` refuses: draw the voter
                        // to remove again. Only then: a removal that failed may have gone
                        // through all the same (asked again, it is found done), and one
                        // drawn again besides would leave too few voters.
                        c.id = self.draw_voter(&leader, c.joined).unwrap_or(c.id);
                    }
                }
            },
            None if now_ms >= c.retry_at_ms => {
                c.task = ask(handles, &leader, c.stage, c.id);
                c.retry_at_ms = now_ms + RETRY_MS;
            }
            None => {}
        }
        self.change = Some(c);
        lines
    }

    /// Starts a replacement with the oldest spare, if it is up and a member of nothing.
    fn begin(&mut self, leader: &Replica, handles: &Handles, now_ms: u64) -> Vec<String> {
        let m = leader.metrics();
        let spare = self.spares.front().copied().filter(|id| !m.members.contains_key(id));
        let Some(spare) = spare.filter(|id| handles.get(*id).is_some()) else { return Vec::new() };
        self.change = Some(Change { stage: Stage::Add, id: spare, joined: spare, task: None, retry_at_ms: now_ms });
        vec![format!("operator: replaces a voter; r{spare} joins as a learner")]
    }

    /// A voter to remove, drawn from the seed: neither the one that joined nor the leader,
    /// which `remove_replica` refuses (hand leadership over first).
    fn draw_voter(&mut self, leader: &Replica, joined: NodeId) -> Option<NodeId> {
        let voters: Vec<NodeId> =
            leader.metrics().voters.into_iter().filter(|v| *v != joined && *v != leader.id()).collect();
        let drawn = self.rng.below(voters.len().max(1) as u64) as usize;
        voters.get(drawn).copied()
    }

    /// After a change went through: the next stage, or the end of the replacement.
    fn advance(
        &mut self,
        c: Change,
        sim: &mut turmoil::Sim<'_>,
        faults: &mut Faults,
        leader: &Replica,
        now_ms: u64,
    ) -> Vec<String> {
        let joined = c.joined;
        let next = |stage, id| Some(Change { stage, id, joined, task: None, retry_at_ms: now_ms });
        match c.stage {
            Stage::Add => {
                self.change = next(Stage::Promote, c.id);
                vec![format!("operator: r{} caught up as a learner", c.id)]
            }
            Stage::Promote => {
                let Some(gone) = self.draw_voter(leader, c.id) else {
                    // No other voter seen yet (the configuration is changing): ask again.
                    self.change = Some(Change { retry_at_ms: now_ms + RETRY_MS, ..c });
                    return Vec::new();
                };
                self.change = next(Stage::Remove, gone);
                vec![format!("operator: r{} is a voter; r{gone} leaves", c.id)]
            }
            Stage::Remove => {
                self.spares.retain(|id| *id != c.joined);
                self.replaced += 1;
                self.next_ms = now_ms + self.rng.range(GAP_MS.0, GAP_MS.1);
                let new = self.retire(sim, faults, c.id);
                vec![format!(
                    "operator: r{} left; its machine goes away for good, and a new one joins as spare r{new}",
                    c.id
                )]
            }
        }
    }

    /// Replica `gone`'s machine goes away for good, and a new machine starts as a spare
    /// under a new id (returned), on a new disk.
    fn retire(&mut self, sim: &mut turmoil::Sim<'_>, faults: &mut Faults, gone: NodeId) -> NodeId {
        faults.retire(sim, gone);
        self.hosts.unlist(sim, gone);
        let id = self.next_id;
        self.next_id += 1;
        let disk = PowerLossDisk::new(format!("disk of r{id}"));
        let jump = self.hosts.start(sim, id, disk.clone());
        faults.add_replica(id, disk, jump);
        self.spares.push_back(id);
        id
    }
}

/// Asks `leader` for `stage` of replica `id`, on the leader's host (`None` when that host is
/// gone). A change found already made (one that timed out before it completed) counts as
/// done.
fn ask(handles: &Handles, leader: &Replica, stage: Stage, id: NodeId) -> Option<Task> {
    let r = leader.clone();
    let work = async move {
        let done = match stage {
            Stage::Add => match r.add_learner(id, &format!("{}:{RAFT_PORT}", host_name(id))).await {
                Err(MembershipError::DuplicateId { .. }) => Ok(()),
                other => other,
            },
            Stage::Promote => r.promote(id).await,
            Stage::Remove => match r.remove_replica(id).await {
                Err(MembershipError::UnknownNode(_)) => Ok(()),
                other => other,
            },
        };
        done.map_err(|e| e.to_string())
    };
    let host = handles.hosted().into_iter().find(|h| h.replica.id() == leader.id())?;
    Some(host.spawn(work))
}

/// What a finished task returned; one whose host went down meanwhile failed.
fn finished(task: Task) -> Result<(), String> {
    match task.now_or_never() {
        Some(Ok(done)) => done,
        Some(Err(e)) => Err(format!("its host went down: {e}")),
        None => Err("not finished".into()),
    }
}
