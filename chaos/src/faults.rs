//! The faults of a chaos run, one at a time, each healed before the next. Most keep a
//! quorum of replicas and keep agents away for less than the heartbeat timeout; two keep an
//! agent away for longer (SIGSTOP or SIGKILL), so that its node is declared lost and its jobs
//! are placed elsewhere while the agent's lease and the replicas' watchdogs must already have
//! stopped their processes.
//!
//! A fault is either injected when its turn comes, or timed by protocol state: the harness
//! watches the jobs through the API and injects when it sees the state it waits for
//! (`Moment`), within `MOMENT_WAIT_MS`. Every fault is labelled with the moment it landed in.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use baton_proto::v1::ListJobsRequest;
use baton_proto::v1::baton_client::BatonClient;
use tonic::transport::Channel;

use crate::cluster::{Cluster, REPLICAS, Servers, connect_any};
use crate::rng::Rng;

/// How long a fault timed by protocol state waits for its moment before it is injected
/// anyway (labelled with what was seen then).
const MOMENT_WAIT_MS: u64 = 4_000;
/// Between two looks at the jobs while waiting for a moment.
const WATCH_POLL_MS: u64 = 10;
/// Bound on one look at the jobs.
const WATCH_CALL_MS: u64 = 500;
/// Share of faults timed by protocol state rather than by the clock alone.
const TIMED_PERCENT: u64 = 50;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a replica (the leader, when `leader`), restart it after the outage.
    KillReplica { replica: usize, leader: bool },
    /// SIGSTOP a replica (the leader, when `leader`), SIGCONT after the outage.
    PauseReplica { replica: usize, leader: bool },
    /// SIGKILL the leader, and the next leader as soon as it is known (during its first
    /// publish); the first is restarted before the second is killed, so a quorum comes back.
    KillNewLeader { first: usize, second: usize },
    /// SIGKILL an agent, restart it before its node could be declared lost.
    KillAgent { name: String },
    /// SIGKILL an agent and keep it down past the heartbeat timeout: its node is lost.
    KillAgentLong { name: String },
    /// SIGSTOP an agent past the heartbeat timeout (its processes keep running unless its
    /// lease and their watchdog stop them), then SIGCONT.
    StallAgent { name: String },
}

impl Fault {
    /// The fault's kind, for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::KillReplica { leader: true, .. } => "kill leader",
            Fault::KillReplica { leader: false, .. } => "kill follower",
            Fault::PauseReplica { .. } => "pause leader",
            Fault::KillNewLeader { .. } => "kill leader, then the new leader",
            Fault::KillAgent { .. } => "kill agent (short)",
            Fault::KillAgentLong { .. } => "kill agent past the heartbeat timeout",
            Fault::StallAgent { .. } => "stop agent past the heartbeat timeout",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = |leader: &bool| if *leader { " (the leader)" } else { "" };
        match self {
            Fault::KillReplica { replica, leader } => write!(f, "killed replica {}{}", replica + 1, role(leader)),
            Fault::PauseReplica { replica, leader } => write!(f, "paused replica {}{}", replica + 1, role(leader)),
            Fault::KillNewLeader { first, second } => {
                write!(f, "killed replica {} (the leader), then replica {} (the new leader)", first + 1, second + 1)
            }
            Fault::KillAgent { name } => write!(f, "killed agent {name}"),
            Fault::KillAgentLong { name } => write!(f, "killed agent {name} past the heartbeat timeout"),
            Fault::StallAgent { name } => write!(f, "stopped agent {name} past the heartbeat timeout"),
        }
    }
}

/// The protocol state a fault landed in, as the harness saw the jobs just before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Moment {
    /// Nothing in flight that the harness could see.
    Idle,
    /// A job turned Running since the previous look: its placement just committed.
    AfterPlacement,
    /// A job turned Preempting since the previous look: the preemption just committed.
    AfterPreemption,
    /// A job has been Preempting for more than one look: its stop is in flight.
    StopInFlight,
    /// A new leader had just become known (its first publish).
    NewLeader,
}

impl Moment {
    pub fn name(self) -> &'static str {
        match self {
            Moment::Idle => "idle",
            Moment::AfterPlacement => "right after a placement",
            Moment::AfterPreemption => "right after a preemption",
            Moment::StopInFlight => "stop in flight",
            Moment::NewLeader => "first publish of a new leader",
        }
    }
}

/// Two consecutive looks at the running and preempting jobs (by id).
#[derive(Default)]
struct Seen {
    running: BTreeSet<u64>,
    preempting: BTreeSet<u64>,
}

/// The moment between two looks, the most specific first.
fn moment_between(before: &Seen, now: &Seen) -> Moment {
    if now.preempting.iter().any(|j| !before.preempting.contains(j)) {
        Moment::AfterPreemption
    } else if !now.preempting.is_empty() {
        Moment::StopInFlight
    } else if now.running.iter().any(|j| !before.running.contains(j)) {
        Moment::AfterPlacement
    } else {
        Moment::Idle
    }
}

pub struct Faults {
    rng: Rng,
    /// Longest a short agent outage lasts: well under the heartbeat timeout.
    max_agent_outage_ms: u64,
    heartbeat_timeout_ms: u64,
    servers: Servers,
    watcher: Option<BatonClient<Channel>>,
}

impl Faults {
    pub fn new(seed: u64, heartbeat_timeout_ms: u64, servers: &Servers) -> Faults {
        Faults {
            rng: Rng::new(seed ^ 0xfa17),
            max_agent_outage_ms: heartbeat_timeout_ms / 2,
            heartbeat_timeout_ms,
            servers: servers.clone(),
            watcher: None,
        }
    }

    /// Time between the end of one fault and the start of the next.
    pub fn pause_before_next(&mut self) -> Duration {
        Duration::from_millis(self.rng.range(1_000, 2_500))
    }

    /// Injects one fault, waits out its outage and heals it; returns what it did and the
    /// moment it landed in.
    pub async fn inject(&mut self, c: &mut Cluster) -> (Fault, Moment) {
        let roll = self.rng.range(0, 99);
        let target = if self.rng.chance(TIMED_PERCENT) {
            [Moment::AfterPlacement, Moment::AfterPreemption, Moment::StopInFlight][self.rng.range(0, 2) as usize]
        } else {
            Moment::Idle
        };
        let moment = self.wait_for(target).await;
        // The leader is looked up after the wait: it may have changed meanwhile.
        let fault = self.draw(c, roll).await;
        match self.strike(c, fault).await {
            fault @ Fault::KillNewLeader { .. } => (fault, Moment::NewLeader),
            fault => (fault, moment),
        }
    }

    /// The fault for `roll` (0 to 99): the weights of the mix.
    async fn draw(&mut self, c: &Cluster, roll: u64) -> Fault {
        let agents = c.agent_names();
        let agent = agents[self.rng.range(0, agents.len() as u64 - 1) as usize].clone();
        if roll < 50 {
            let leader = c.leader().await;
            if roll < 20 {
                Fault::KillReplica { replica: leader, leader: true }
            } else if roll < 30 {
                let other = (leader + 1 + self.rng.range(0, 1) as usize) % REPLICAS;
                Fault::KillReplica { replica: other, leader: false }
            } else if roll < 42 {
                Fault::PauseReplica { replica: leader, leader: true }
            } else {
                // The second leader is known only once the first is dead.
                Fault::KillNewLeader { first: leader, second: leader }
            }
        } else if roll < 70 {
            Fault::KillAgent { name: agent }
        } else if roll < 85 {
            Fault::KillAgentLong { name: agent }
        } else {
            Fault::StallAgent { name: agent }
        }
    }

    /// Does the fault, waits out its outage and heals it.
    async fn strike(&mut self, c: &mut Cluster, fault: Fault) -> Fault {
        let long_ms = self.rng.range(self.heartbeat_timeout_ms + 500, 2 * self.heartbeat_timeout_ms);
        let outage = Duration::from_millis(self.rng.range(500, 2_000));
        match fault {
            Fault::KillReplica { replica, .. } => {
                c.kill_replica(replica);
                tokio::time::sleep(outage).await;
                c.start_replica(replica);
            }
            Fault::PauseReplica { replica, .. } => {
                c.pause_replica(replica, true);
                tokio::time::sleep(outage).await;
                c.pause_replica(replica, false);
            }
            Fault::KillNewLeader { first, .. } => {
                c.kill_replica(first);
                let second = c.leader().await;
                c.start_replica(first);
                c.kill_replica(second);
                tokio::time::sleep(outage).await;
                c.start_replica(second);
                return Fault::KillNewLeader { first, second };
            }
            Fault::KillAgent { ref name } => {
                c.kill_agent(name);
                tokio::time::sleep(Duration::from_millis(self.rng.range(200, self.max_agent_outage_ms))).await;
                c.start_agent(name);
            }
            Fault::KillAgentLong { ref name } => {
                c.kill_agent(name);
                tokio::time::sleep(Duration::from_millis(long_ms)).await;
                c.start_agent(name);
            }
            Fault::StallAgent { ref name } => {
                c.pause_agent(name, true);
                tokio::time::sleep(Duration::from_millis(long_ms)).await;
                c.pause_agent(name, false);
            }
        }
        fault
    }

    /// Watches the jobs until `target` is seen (at once for `Idle`), or `MOMENT_WAIT_MS`
    /// passed; the moment seen last.
    async fn wait_for(&mut self, target: Moment) -> Moment {
        let deadline = Instant::now() + Duration::from_millis(MOMENT_WAIT_MS);
        let mut before = self.look().await;
        loop {
            tokio::time::sleep(Duration::from_millis(WATCH_POLL_MS)).await;
            let now = self.look().await;
            let moment = match (&before, &now) {
                (Some(b), Some(n)) => moment_between(b, n),
                _ => Moment::Idle,
            };
            if target == Moment::Idle || moment == target || Instant::now() >= deadline {
                return moment;
            }
            before = now;
        }
    }

    /// The running and preempting jobs, from any replica that answers.
    async fn look(&mut self) -> Option<Seen> {
        if self.watcher.is_none() {
            self.watcher = connect_any(&self.servers).await;
        }
        let api = self.watcher.as_mut()?;
        let req = ListJobsRequest { states: vec!["Running".into(), "Preempting".into()], ..Default::default() };
        let reply = tokio::time::timeout(Duration::from_millis(WATCH_CALL_MS), api.list_jobs(req)).await;
        let Ok(Ok(reply)) = reply else {
            // The replica is gone or paused: the next look finds another.
            self.watcher = None;
            return None;
        };
        let mut seen = Seen::default();
        for j in reply.into_inner().jobs {
            let set = if j.state == "Preempting" { &mut seen.preempting } else { &mut seen.running };
            set.insert(j.id);
        }
        Some(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(running: &[u64], preempting: &[u64]) -> Seen {
        Seen { running: running.iter().copied().collect(), preempting: preempting.iter().copied().collect() }
    }

    #[test]
    fn moments_are_told_apart_by_what_changed_between_two_looks() {
        assert_eq!(moment_between(&seen(&[1], &[]), &seen(&[1], &[])), Moment::Idle);
        assert_eq!(moment_between(&seen(&[1], &[]), &seen(&[1, 2], &[])), Moment::AfterPlacement);
        assert_eq!(moment_between(&seen(&[1], &[]), &seen(&[], &[1])), Moment::AfterPreemption);
        assert_eq!(moment_between(&seen(&[], &[1]), &seen(&[2], &[1])), Moment::StopInFlight);
        // A job that left Running is no placement.
        assert_eq!(moment_between(&seen(&[1, 2], &[]), &seen(&[1], &[])), Moment::Idle);
    }
}
