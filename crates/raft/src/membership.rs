//! Membership changes an operator asks for (`baton cluster add-replica`, `remove-replica`,
//! `transfer-leader`). Any replica takes them: a follower forwards them to the leader, which
//! checks and makes them.
//!
//! Rules:
//! - a replica is added as a learner, catches up, then becomes a voter; an id or an address
//!   that is already a member's is refused, and so is a replica of another cluster;
//! - a removal may not leave fewer than [`MIN_VOTERS`] voters (to replace a dead replica,
//!   add the new one first, then remove the dead one), and the leader is not removed while
//!   it leads (hand leadership over first);
//! - leadership goes to a voter (see `transfer`);
//! - a change forwarded to the leader carries who asked (`authority`: the server's token
//!   hash, opaque here), and the leader's [`MembershipGate`] judges it before anything is
//!   changed: the raft port takes any replica certificate, so the follower's own check is
//!   not enough.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::addrs::Addrs;
use crate::error::MembershipError;
use crate::metrics::ReplicaMetrics;
use crate::replica::Replica;
use crate::types::NodeId;

/// The fewest voters a removal may leave: the smallest cluster that survives losing one.
pub const MIN_VOTERS: usize = 3;

/// Judges a change forwarded to this leader by who asked for it (`None`: the forward named
/// no one): `Err` says why it is refused. Installed by the server ([`Replica::gate_membership`]);
/// without one every forwarded change is judged by the rules above alone.
pub type MembershipGate = std::sync::Arc<dyn Fn(&Change, Option<&[u8]>) -> Result<(), String> + Send + Sync>;

/// Most bytes of a forwarded change's `authority` (a token hash is 32).
pub const MAX_AUTHORITY_BYTES: usize = 256;

/// A change as a follower forwards it to the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarded {
    pub change: Change,
    pub authority: Option<Vec<u8>>,
}

/// One change an operator asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    Add {
        id: NodeId,
        addr: String,
    },
    Remove {
        id: NodeId,
    },
    /// To this voter, or (None) to the most up-to-date other voter.
    Transfer {
        to: Option<NodeId>,
    },
}

impl Replica {
    /// Makes `change`, on the leader (forwarded there from a follower, with `authority`: who
    /// asked, for the leader's gate), and returns the leader's view once it is made. The
    /// caller has checked that `authority` may make it.
    pub async fn change_membership(
        &self,
        change: Change,
        authority: Option<Vec<u8>>,
    ) -> Result<ReplicaMetrics, MembershipError> {
        let m = self.metrics();
        let leader = m.leader_id.and_then(|id| m.members.get(&id));
        match (m.leader_id, leader) {
            (None, _) => Err(MembershipError::NoLeader),
            (Some(id), _) if id == self.id() => self.change_here(change).await,
            (Some(leader_id), None) => Err(MembershipError::ForwardFailed {
                leader_id,
                leader_addr: String::new(),
                reason: "the leader's address is not in the membership".into(),
            }),
            (Some(leader_id), Some(at)) => {
                // Adding waits for catch-up and promotion; a transfer for catch-up and an election.
                let timeout = Duration::from_millis(self.settings().membership_timeout_ms.saturating_mul(2));
                let forwarded = Forwarded { change, authority };
                self.core().peers.forward_membership(leader_id, at, &forwarded, timeout).await
            }
        }
    }

    /// Installs the gate forwarded changes pass on this replica (the first one installed
    /// holds).
    pub fn gate_membership(&self, gate: MembershipGate) {
        let _ = self.core().membership_gate.set(gate);
    }

    /// A change forwarded to this replica: judged by the gate, then made here.
    pub(crate) async fn change_forwarded(&self, f: Forwarded) -> Result<ReplicaMetrics, MembershipError> {
        if let Some(gate) = self.core().membership_gate.get() {
            gate(&f.change, f.authority.as_deref()).map_err(MembershipError::NotAllowed)?;
        }
        self.change_here(f.change).await
    }

    /// Makes `change` on this replica, which must lead.
    pub(crate) async fn change_here(&self, change: Change) -> Result<ReplicaMetrics, MembershipError> {
        match change {
            Change::Add { id, addr } => self.add_replica(id, &addr).await?,
            Change::Remove { id } => self.remove_replica(id).await?,
            Change::Transfer { to } => {
                self.transfer_leader(to).await?;
            }
        }
        Ok(self.metrics())
    }

    /// Adds replica `id` at `addr` (`API` or `API/PEER`, see [`crate::addrs`]) as a learner,
    /// waits until it caught up, makes it a voter.
    pub async fn add_replica(&self, id: NodeId, addr: &str) -> Result<(), MembershipError> {
        self.require_leader()?;
        let new = Addrs::check_member(addr).map_err(MembershipError::Refused)?;
        let m = self.metrics();
        if let Some(at) = m.members.get(&id) {
            return Err(MembershipError::DuplicateId { id, addr: at.to_string() });
        }
        if let Some((other, _)) = m.members.iter().find(|(_, at)| at.overlaps(&new)) {
            return Err(MembershipError::DuplicateAddr { addr: new.to_string(), id: *other });
        }
        self.add_learner(id, addr).await?;
        self.promote(id).await
    }

    /// Removes replica `id`, under the rules above.
    pub async fn remove_replica(&self, id: NodeId) -> Result<(), MembershipError> {
        self.require_leader()?;
        let m = self.metrics();
        if !m.members.contains_key(&id) {
            return Err(MembershipError::UnknownNode(id));
        }
        if id == self.id() {
            return Err(MembershipError::RemoveLeader(id));
        }
        if m.voters.contains(&id) && m.voters.len() - 1 < MIN_VOTERS {
            return Err(MembershipError::TooFewVoters { id, left: m.voters.len() - 1, min: MIN_VOTERS });
        }
        self.remove(id).await
    }
}
