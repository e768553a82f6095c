//! What a replica reports about itself and the cluster.

use std::collections::{BTreeMap, BTreeSet};

use openraft::ServerState;
use serde::{Deserialize, Serialize};

use crate::addrs::Addrs;
use crate::types::{NodeId, RaftMetrics};

/// A replica's role in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    Shutdown,
}

/// A point-in-time view of one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaMetrics {
    pub node_id: NodeId,
    pub role: Role,
    pub term: u64,
    pub leader_id: Option<NodeId>,
    /// The leader's API address: where clients and agents are redirected.
    pub leader_addr: Option<String>,
    /// The leader's peer address: where this replica forwards writes and reads.
    pub leader_peer_addr: Option<String>,
    /// Every member (voters and learners) and its addresses.
    pub members: BTreeMap<NodeId, Addrs>,
    pub voters: BTreeSet<NodeId>,
    pub learners: BTreeSet<NodeId>,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    /// Last entry covered by the latest snapshot.
    pub snapshot_index: Option<u64>,
    /// Last entry removed from the log.
    pub purged_index: Option<u64>,
}

impl ReplicaMetrics {
    pub(crate) fn from_raft(m: &RaftMetrics) -> ReplicaMetrics {
        let membership = m.membership_config.membership();
        let members: BTreeMap<NodeId, Addrs> = membership.nodes().map(|(id, n)| (*id, Addrs::parse(&n.addr))).collect();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
        let role = match m.state {
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        };
        ReplicaMetrics {
            node_id: m.id,
            role,
            term: m.current_term,
            leader_id: m.current_leader,
            leader_addr: m.current_leader.and_then(|l| members.get(&l)).map(|a| a.api.clone()),
            leader_peer_addr: m.current_leader.and_then(|l| members.get(&l)).map(|a| a.peer.clone()),
            members,
            voters,
            learners,
            last_log_index: m.last_log_index,
            last_applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
        }
    }
}
