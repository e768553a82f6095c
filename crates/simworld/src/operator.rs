//! The operator: now and then it replaces a voter, as one replaces a machine that is going
//! away, while the faults go on. A cluster of three voters cannot lose one first (a replica
//! refuses to leave fewer than three), so it adds the spare replica as a learner (which
//! returns once the spare has caught up), makes it a voter, removes a voter drawn from the
//! seed (not the leader, which `remove_replica` refuses), and replaces that one's machine:
//! its host goes down and its disk is wiped, and its supervisor (`Faults::supervise`) starts
//! it again, empty, as the next spare. Each change is asked of the replica that leads when it
//! is asked, on that replica's host, as `baton cluster` would; a change that fails (a leader
//! lost, a timeout) is asked again a second later.
//!
//! The replaced machine comes back under its old id, which docs/ops.md forbids: a leader of
//! an older configuration still counts that id among its voters, and the empty replica takes
//! it for its leader (chaos/README.md, "Replacing voters"). So it is off by default
//! (`Options::spares`); new ids are next.

use baton_raft::net::sim::host_name;
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use baton_raft::{MembershipError, Replica};
use baton_rng::SplitMix64;
use futures::FutureExt;

use crate::replica::{Handles, RAFT_PORT};
use crate::truth::Shared;

/// Simulated milliseconds between two replacements, at least and at most.
pub const GAP_MS: (u64, u64) = (60_000, 180_000);
/// How long after a failed change it is asked again.
const RETRY_MS: u64 = 1_000;

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
    truth: Shared,
    /// Replica hosts, voters and the spare: ids 1..=hosts.
    hosts: u64,
    disks: Vec<PowerLossDisk>,
    next_ms: u64,
    change: Option<Change>,
    /// Replacements completed.
    pub replaced: u64,
}

impl Operator {
    pub fn new(seed: u64, hosts: u64, disks: Vec<PowerLossDisk>, truth: Shared) -> Operator {
        let mut rng = SplitMix64::new(seed ^ 0x6f70_6572_6174_6f72);
        let next_ms = rng.range(GAP_MS.0, GAP_MS.1);
        Operator { rng, truth, hosts, disks, next_ms, change: None, replaced: 0 }
    }

    /// Whether no replacement is under way: the members are the voters of one configuration.
    pub fn idle(&self) -> bool {
        self.change.is_none()
    }

    /// Moves the replacement under way on, or starts one when it is time (`starting`: the
    /// load still runs); returns lines for the history.
    pub fn step(&mut self, sim: &mut turmoil::Sim<'_>, handles: &Handles, now_ms: u64, starting: bool) -> Vec<String> {
        let Some(leader) = crate::world::leader_of(sim, handles).and_then(|id| handles.get(id)) else {
            return Vec::new();
        };
        let Some(mut c) = self.change.take() else {
            if starting && now_ms >= self.next_ms {
                return self.begin(&leader, handles, now_ms);
            }
            return Vec::new();
        };
        let mut lines = Vec::new();
        match c.task.take() {
            Some(task) if !task.is_finished() => c.task = Some(task),
            Some(task) => match finished(task) {
                Ok(()) => return self.advance(c, sim, &leader, now_ms),
                Err(e) => {
                    lines.push(format!("operator: {:?} of r{} failed ({e}); asking again", c.stage, c.id));
                    c.retry_at_ms = now_ms + RETRY_MS;
                    if c.stage == Stage::Remove {
                        // It may lead by now: draw the voter to remove again.
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

    /// Starts a replacement with the replica that is a member of nothing, if one is up.
    fn begin(&mut self, leader: &Replica, handles: &Handles, now_ms: u64) -> Vec<String> {
        let m = leader.metrics();
        let spare = (1..=self.hosts).find(|id| !m.members.contains_key(id));
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
    fn advance(&mut self, c: Change, sim: &mut turmoil::Sim<'_>, leader: &Replica, now_ms: u64) -> Vec<String> {
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
                // Its machine is replaced: down, and a new disk in place of the old one.
                let host = host_name(c.id);
                sim.crash(host.as_str());
                self.disks[(c.id - 1) as usize].wipe();
                self.replaced += 1;
                // No replica bootstraps a cluster again, not even replica 1 on its new disk.
                self.truth.lock().replaced = true;
                self.next_ms = now_ms + self.rng.range(GAP_MS.0, GAP_MS.1);
                vec![format!(
                    "operator: r{} left; its machine is replaced (disk wiped), to start again as the spare",
                    c.id
                )]
            }
        }
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
