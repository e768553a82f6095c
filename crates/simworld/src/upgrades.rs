//! Rolling upgrades: some seeds start every replica on an older build, one that reads data
//! formats only up to a drawn one (as `baton server --max-format` says), and upgrade them one
//! at a time while the load and the faults go on: each replica's process stops and starts
//! again on this build. New machines the operator brings in run this build from the start.
//! Meanwhile the leader must hold back every command an older member could not decode
//! (the format gate), and raise the apply behaviour only once every member applies it; the
//! checker holds each replica to it: no replica applies a command, or takes a snapshot,
//! of a format newer than its build reads (`world::check_replicas`).

use std::collections::VecDeque;

use baton_raft::identity::DATA_FORMAT;
use baton_raft::net::sim::host_name;
use baton_raft::types::NodeId;
use baton_rng::SplitMix64;

use crate::faults::Faults;
use crate::truth::Shared;

/// The oldest format a seed's older build reads: the first with the state digest, which
/// the checker's planted bugs rely on; every newer command and behaviour is held back.
pub const OLDEST_FORMAT: u32 = 11;
/// Simulated milliseconds between two upgrades (the first after the start), at least and
/// at most: each replica is upgraded within the first few minutes of a seed.
pub const GAP_MS: (u64, u64) = (10_000, 40_000);

pub struct Upgrades {
    rng: SplitMix64,
    /// The replicas still on the older build, in the order they are upgraded.
    pending: VecDeque<NodeId>,
    next_ms: u64,
}

impl Upgrades {
    /// For `percent` of the seeds, replicas `ids` start on an older build (its format drawn)
    /// and are upgraded one by one; `None` for the others.
    pub fn draw(seed: u64, percent: u64, ids: Vec<NodeId>, truth: &Shared) -> Option<Upgrades> {
        let mut rng = SplitMix64::new(seed ^ 0x7570_6772_6164_6573);
        if !rng.chance(percent) {
            return None;
        }
        let reads = rng.range(u64::from(OLDEST_FORMAT), u64::from(DATA_FORMAT - 1)) as u32;
        let mut t = truth.lock();
        ids.iter().for_each(|id| {
            t.builds.insert(*id, reads);
        });
        t.history.record(0, format!("replicas {ids:?} start on an older build, reading formats up to {reads}"));
        drop(t);
        let next_ms = rng.range(GAP_MS.0, GAP_MS.1);
        Some(Upgrades { rng, pending: ids.into(), next_ms })
    }

    /// Whether every replica runs this build.
    pub fn idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Upgrades the next replica when it is time; returns lines for the history. A replica
    /// whose host is down (a fault) starts on this build when it comes back; one whose
    /// machine went away for good (`operator`) is not started again by it.
    pub fn step(&mut self, sim: &mut turmoil::Sim<'_>, faults: &Faults, truth: &Shared, now_ms: u64) -> Vec<String> {
        if now_ms < self.next_ms {
            return Vec::new();
        }
        let Some(id) = self.pending.pop_front() else { return Vec::new() };
        self.next_ms = now_ms + self.rng.range(GAP_MS.0, GAP_MS.1);
        truth.lock().builds.remove(&id);
        let host = host_name(id);
        if faults.retired(id) {
            return vec![format!("upgrade: r{id}'s machine went away before its upgrade")];
        }
        if !sim.is_host_running(host.as_str()) {
            return vec![format!(
                "upgrade: r{id} is down; it starts on this build (format {DATA_FORMAT}) when it is back"
            )];
        }
        sim.bounce(host.as_str());
        vec![format!("upgrade: r{id} stops and starts again on this build (format {DATA_FORMAT})")]
    }
}
