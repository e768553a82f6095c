//! Starting replica hosts: the voters and spares a run begins with, and each new machine
//! the operator brings in mid-run under a new id (`operator`). Every host's clock offset
//! and rate are drawn from generators of their own, so the draws of the hosts a run begins
//! with do not depend on what comes later.

use baton_raft::net::sim::host_name;
use baton_raft::store::PowerLossDisk;
use baton_raft::types::NodeId;
use baton_rng::SplitMix64;

use crate::agent::Directory;
use crate::clocks::Rate;
use crate::replica::{Handles, Jump};
use crate::truth::Shared;

/// What a new replica host needs, and the generators its clock is drawn from.
pub struct ReplicaHosts {
    /// Voters the cluster was bootstrapped with (replica 1 bootstraps them).
    voters: u64,
    clock_offset_ms: u64,
    clock_drift_ppm: u64,
    offsets: SplitMix64,
    rates: SplitMix64,
    handles: Handles,
    truth: Shared,
    /// The replicas agents beat to.
    pub directory: Directory,
}

impl ReplicaHosts {
    pub fn new(seed: u64, opts: &crate::Options, handles: &Handles, truth: &Shared) -> ReplicaHosts {
        ReplicaHosts {
            voters: opts.replicas,
            clock_offset_ms: opts.clock_offset_ms,
            clock_drift_ppm: opts.clock_drift_ppm,
            offsets: SplitMix64::new(seed ^ 0x636c_6f63_6b73),
            // Rates from a generator of their own: the offsets drawn stay what they were.
            rates: SplitMix64::new(seed ^ 0x0064_7269_6674),
            handles: handles.clone(),
            truth: truth.clone(),
            directory: Directory::default(),
        }
    }

    /// The generator the agents' clock rates are drawn from, after the replicas' (as the
    /// hosts a run begins with always drew them).
    pub fn rates(&mut self) -> &mut SplitMix64 {
        &mut self.rates
    }

    /// Starts replica `id` on a new host with `disk`, its clock drawn, and lists it for the
    /// agents; returns its clock jump (set by faults).
    pub fn start(&mut self, sim: &mut turmoil::Sim<'_>, id: NodeId, disk: PowerLossDisk) -> Jump {
        let jump = Jump::default();
        let spread = 2 * self.clock_offset_ms + 1;
        let offset_ms = self.offsets.below(spread) as i64 - self.clock_offset_ms as i64;
        let rate = Rate::draw(&mut self.rates, self.clock_drift_ppm);
        self.truth.record(format!("r{id}'s clock is off by {offset_ms} ms and runs {rate}"));
        let (n, handles, truth, host_jump) = (self.voters, self.handles.clone(), self.truth.clone(), jump.clone());
        sim.host(host_name(id), move || {
            let (disk, handles, truth) = (disk.clone(), handles.clone(), truth.clone());
            crate::replica::run(id, n, offset_ms, rate, host_jump.clone(), disk, handles, truth)
        });
        self.directory.add(sim.lookup(host_name(id)));
        jump
    }

    /// Replica `id`'s machine went away: the agents no longer beat to it.
    pub fn unlist(&self, sim: &turmoil::Sim<'_>, id: NodeId) {
        self.directory.remove(sim.lookup(host_name(id)));
    }
}
