//! The faults of a chaos run, one at a time, each healed before the next: the cluster keeps
//! a quorum throughout, and an agent is down for less than the heartbeat timeout (a longer
//! outage gets its node declared lost; see the note in `README.md`).

use std::time::Duration;

use crate::cluster::{Cluster, REPLICAS};
use crate::rng::Rng;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a replica (the leader, when `leader`), restart it after the outage.
    KillReplica { replica: usize, leader: bool },
    /// SIGSTOP a replica (the leader, when `leader`), SIGCONT after the outage.
    PauseReplica { replica: usize, leader: bool },
    /// SIGKILL an agent, restart it after the outage.
    KillAgent { name: String },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let role = |leader: &bool| if *leader { " (the leader)" } else { "" };
        match self {
            Fault::KillReplica { replica, leader } => write!(f, "killed replica {}{}", replica + 1, role(leader)),
            Fault::PauseReplica { replica, leader } => write!(f, "paused replica {}{}", replica + 1, role(leader)),
            Fault::KillAgent { name } => write!(f, "killed agent {name}"),
        }
    }
}

pub struct Faults {
    rng: Rng,
    /// Longest an agent stays down: well under the heartbeat timeout.
    max_agent_outage_ms: u64,
}

impl Faults {
    pub fn new(seed: u64, heartbeat_timeout_ms: u64) -> Faults {
        Faults { rng: Rng::new(seed ^ 0xfa17), max_agent_outage_ms: heartbeat_timeout_ms / 2 }
    }

    /// Time between the end of one fault and the start of the next.
    pub fn pause_before_next(&mut self) -> Duration {
        Duration::from_millis(self.rng.range(1_000, 2_500))
    }

    /// Injects one fault, waits out its outage and heals it; returns what it did.
    pub async fn inject(&mut self, c: &mut Cluster) -> Fault {
        let agents = c.agent_names();
        let roll = self.rng.range(0, 99);
        let fault = if roll < 30 {
            let leader = c.leader().await;
            Fault::KillReplica { replica: leader, leader: true }
        } else if roll < 45 {
            let leader = c.leader().await;
            let other = (leader + 1 + self.rng.range(0, 1) as usize) % REPLICAS;
            Fault::KillReplica { replica: other, leader: false }
        } else if roll < 70 {
            let leader = c.leader().await;
            Fault::PauseReplica { replica: leader, leader: true }
        } else {
            Fault::KillAgent { name: agents[self.rng.range(0, agents.len() as u64 - 1) as usize].clone() }
        };
        match &fault {
            Fault::KillReplica { replica, .. } => {
                c.kill_replica(*replica);
                tokio::time::sleep(Duration::from_millis(self.rng.range(500, 2_000))).await;
                c.start_replica(*replica);
            }
            Fault::PauseReplica { replica, .. } => {
                c.pause_replica(*replica, true);
                tokio::time::sleep(Duration::from_millis(self.rng.range(500, 2_000))).await;
                c.pause_replica(*replica, false);
            }
            Fault::KillAgent { name } => {
                c.kill_agent(name);
                tokio::time::sleep(Duration::from_millis(self.rng.range(200, self.max_agent_outage_ms))).await;
                c.start_agent(name);
            }
        }
        fault
    }
}
