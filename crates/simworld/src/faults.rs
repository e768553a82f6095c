//! The fault schedule, drawn from the seed: every few seconds of simulated time one fault,
//! healed after a drawn while: a replica cut off from every host, a one-way cut between two
//! replicas, an agent cut off from the replicas (past the heartbeat timeout or not), a
//! replica's power cut (its disk keeps what was synced and a drawn part of the rest) and a
//! later restart, the leader's power blinking (back at once), an agent crash and restart, a
//! rack's switch failing (a replica and a rack's agents cut off from the rest), a slow
//! network, the leader's clock jumping days ahead (half the time as it reboots; one clock at a time), the agents'
//! and leaders' datagrams duplicated (a copy trailing its original by up to seconds), a
//! replica's disk syncing slowly (often the leader's), a replica's disk full for a while or
//! failing one sync (which loses what it had not synced; the replica stops, and its
//! supervisor starts it again: `Faults::supervise`). When the load ends, every fault heals
//! at once.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_raft::net::sim::host_name;
use baton_raft::store::PowerLossDisk;
use baton_rng::SplitMix64;

use crate::replica::Jump;
use crate::wire::{Copies, MAX_COPY_DELAY_MS};

/// Simulated milliseconds between two faults, at least and at most.
pub const GAP_MS: (u64, u64) = (2_000, 20_000);
/// Faults healing at once, at most (each drawn fault waits while this many are active).
pub const MAX_ACTIVE: usize = 4;
/// The network's usual largest delay, and the largest a slow spell draws.
pub const BASE_LATENCY_MS: u64 = 10;
pub const SLOW_LATENCY_MS: u64 = 400;
/// How far a clock jump moves the leader's wall clock: two days, as an NTP step or a wrong
/// RTC after a reboot would.
pub const CLOCK_JUMP_MS: i64 = 2 * 24 * 3_600_000;
/// The longest a sync takes on a slow disk: ten election timeouts, as a drive that retries a
/// failing sector or a saturated network volume stalls.
pub const MAX_SLOW_SYNC_MS: u64 = 2_000;
/// How long after a replica ended on its own its supervisor starts it again (systemd's
/// `RestartSec`, as the shipped unit sets it).
pub const SUPERVISOR_RESTART_MS: u64 = 1_000;

#[derive(Debug, Clone)]
enum Heal {
    Repair(String, String),
    RepairOneWay(String, String),
    Restart(String),
    Latency,
    /// Replica `id`'s clock back to true (its jump undone).
    Clock(u64),
    /// Datagrams no longer duplicated.
    Copies,
    /// Replica `id`'s disk syncs at once again.
    Disk(u64),
    /// Replica `id`'s disk has room again.
    Room(u64),
}

pub struct Faults {
    rng: SplitMix64,
    /// The replicas faults may hit, by id, ascending: every replica host but those the
    /// operator retired (`retire`).
    live: Vec<u64>,
    nodes: u64,
    next_ms: u64,
    active: Vec<(u64, Heal)>,
    /// Each replica's clock jump, by id - 1.
    jumps: Vec<Jump>,
    copies: Copies,
    /// Each replica's disk, by id - 1.
    disks: Vec<PowerLossDisk>,
    pub counts: BTreeMap<&'static str, u64>,
    /// Replicas that ended on their own, by id, with when their supervisor starts them.
    ended: BTreeMap<u64, u64>,
    /// Each replica's host name, by id - 1: `supervise` looks at them every step.
    replica_hosts: Vec<String>,
}

pub fn agent_host(i: u64) -> String {
    format!("n{i}")
}

/// Racks the nodes are spread over (node `i` is in rack `i % RACKS`).
pub const RACKS: u64 = 4;

fn in_rack(host: &str, rack: u64) -> bool {
    host.strip_prefix('n').and_then(|i| i.parse::<u64>().ok()).is_some_and(|i| i % RACKS == rack)
}

impl Faults {
    pub fn new(
        seed: u64,
        replicas: u64,
        nodes: u64,
        jumps: Vec<Jump>,
        copies: Copies,
        disks: Vec<PowerLossDisk>,
    ) -> Faults {
        let mut rng = SplitMix64::new(seed);
        let next_ms = 5_000 + rng.range(GAP_MS.0, GAP_MS.1);
        let active = Vec::new();
        Faults {
            rng,
            live: (1..=replicas).collect(),
            nodes,
            next_ms,
            active,
            jumps,
            copies,
            disks,
            counts: BTreeMap::new(),
            ended: BTreeMap::new(),
            replica_hosts: (1..=replicas).map(host_name).collect(),
        }
    }

    /// A live replica's id, drawn.
    fn replica_id(&mut self) -> u64 {
        self.live[self.rng.below(self.live.len() as u64) as usize]
    }

    fn replica(&mut self) -> String {
        host_name(self.replica_id())
    }

    /// Replica `id`, on a new host with `disk` and `jump`, joins the replicas faults hit;
    /// ids come in order, each after every id before it.
    pub fn add_replica(&mut self, id: u64, disk: PowerLossDisk, jump: Jump) {
        assert_eq!(id as usize, self.replica_hosts.len() + 1, "replica ids are added in order");
        self.disks.push(disk);
        self.jumps.push(jump);
        self.replica_hosts.push(host_name(id));
        self.live.push(id);
    }

    /// Whether replica `id`'s machine went away for good (`retire`).
    pub fn retired(&self, id: u64) -> bool {
        id as usize <= self.replica_hosts.len() && !self.live.contains(&id)
    }

    /// Whether `host` is a retired replica's (an agent's never is).
    fn retired_host(&self, host: &str) -> bool {
        self.replica_hosts.iter().position(|h| h == host).is_some_and(|i| self.retired(i as u64 + 1))
    }

    /// Replica `id` left the cluster and its machine went away: its host goes down for good
    /// (no fault's heal and no supervisor starts it again).
    pub fn retire(&mut self, sim: &mut turmoil::Sim<'_>, id: u64) {
        sim.crash(self.replica_hosts[(id - 1) as usize].as_str());
        self.live.retain(|i| *i != id);
        self.ended.remove(&id);
        // Its records go with it: a day of replacements would otherwise keep hundreds of
        // replicas' disks in memory, for hosts that never start again.
        self.disks[(id - 1) as usize].wipe();
    }

    fn agent(&mut self) -> String {
        agent_host(1 + self.rng.below(self.nodes))
    }

    fn all_hosts(&self) -> Vec<String> {
        self.live.iter().map(|i| host_name(*i)).chain((1..=self.nodes).map(agent_host)).collect()
    }

    /// Heals what is due, then injects the next fault if it is time; returns lines for the
    /// history.
    pub fn step(&mut self, sim: &mut turmoil::Sim<'_>, leader: Option<u64>, now_ms: u64) -> Vec<String> {
        let mut lines = Vec::new();
        let due: Vec<Heal> = self.active.iter().filter(|(at, _)| *at <= now_ms).map(|(_, h)| h.clone()).collect();
        self.active.retain(|(at, _)| *at > now_ms);
        for h in due {
            lines.push(self.heal(sim, h));
        }
        if now_ms >= self.next_ms && self.active.len() < MAX_ACTIVE {
            lines.push(self.inject(sim, leader, now_ms));
            self.next_ms = now_ms + self.rng.range(GAP_MS.0, GAP_MS.1);
        }
        lines
    }

    /// Starts again, `SUPERVISOR_RESTART_MS` after it ended, a replica whose software ended
    /// on its own (its raft stopped: `replica::run`), as the shipped systemd unit does; a
    /// replica a fault crashed waits for that fault's heal. Returns lines for the history.
    pub fn supervise(&mut self, sim: &mut turmoil::Sim<'_>, now_ms: u64) -> Vec<String> {
        let mut lines = Vec::new();
        for &i in &self.live {
            let host = &self.replica_hosts[(i - 1) as usize];
            let crashed = || self.active.iter().any(|(_, h)| matches!(h, Heal::Restart(x) if x == host));
            if sim.is_host_running(host.as_str()) || crashed() {
                self.ended.remove(&i);
                continue;
            }
            let at = *self.ended.entry(i).or_insert(now_ms + SUPERVISOR_RESTART_MS);
            if now_ms >= at {
                sim.bounce(host.as_str());
                self.ended.remove(&i);
                lines.push(format!("{host}'s supervisor starts it again"));
            }
        }
        lines
    }

    /// Heals everything now.
    pub fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>) -> Vec<String> {
        std::mem::take(&mut self.active).into_iter().map(|(_, h)| self.heal(sim, h)).collect()
    }

    /// Replica `i` loses power: its host stops, and its disk keeps what was synced and a
    /// drawn part of the rest.
    fn cut_power(&mut self, sim: &mut turmoil::Sim<'_>, i: u64) -> (String, baton_raft::store::PowerCut) {
        let r = host_name(i);
        sim.crash(r.as_str());
        let cut = self.disks[(i - 1) as usize].power_loss(self.rng.next_u64());
        (r, cut)
    }

    fn inject(&mut self, sim: &mut turmoil::Sim<'_>, leader: Option<u64>, now_ms: u64) -> String {
        let (kind, line) = match self.rng.below(12) {
            0 => {
                let r = self.replica();
                let hosts = self.all_hosts();
                let for_ms = self.rng.range(500, 15_000);
                for h in hosts.iter().filter(|h| **h != r) {
                    sim.partition(r.as_str(), h.as_str());
                    self.active.push((now_ms + for_ms, Heal::Repair(r.clone(), h.clone())));
                }
                ("isolate-replica", format!("{r} cut off from every host for {for_ms} ms"))
            }
            1 => {
                let (a, b) = (self.replica(), self.replica());
                if a == b {
                    return "no fault (one-way cut drew one replica)".into();
                }
                let for_ms = self.rng.range(500, 10_000);
                sim.partition_oneway(a.as_str(), b.as_str());
                self.active.push((now_ms + for_ms, Heal::RepairOneWay(a.clone(), b.clone())));
                ("one-way-cut", format!("{a} -> {b} cut for {for_ms} ms"))
            }
            2 => {
                let n = self.agent();
                let for_ms = self.rng.range(500, 20_000);
                for r in self.live.clone() {
                    sim.partition(n.as_str(), host_name(r).as_str());
                    self.active.push((now_ms + for_ms, Heal::Repair(n.clone(), host_name(r))));
                }
                ("isolate-agent", format!("{n} cut off from the replicas for {for_ms} ms"))
            }
            3 => {
                let i = self.replica_id();
                let (r, cut) = self.cut_power(sim, i);
                let down_ms = self.rng.range(0, 5_000);
                self.active.push((now_ms + down_ms, Heal::Restart(r.clone())));
                ("power-cut", format!("{r} loses power ({cut:?}), back in {down_ms} ms"))
            }
            4 => {
                let n = self.agent();
                sim.crash(n.as_str());
                let down_ms = self.rng.range(0, 10_000);
                self.active.push((now_ms + down_ms, Heal::Restart(n.clone())));
                ("agent-crash", format!("{n}'s agent crashes, back in {down_ms} ms"))
            }
            6 if leader.is_some() => {
                // The leader's power blinks: back within an election timeout, it may find its
                // own committed vote and lead again in the same term.
                let i = leader.unwrap_or(1);
                let (r, cut) = self.cut_power(sim, i);
                // At once, or within the election timeouts (Docker restarts a container
                // after 100 ms): either way before the followers give up on it.
                let down_ms = self.rng.below(3) * 100;
                if down_ms == 0 {
                    sim.bounce(r.as_str());
                } else {
                    self.active.push((now_ms + down_ms, Heal::Restart(r.clone())));
                }
                ("leader-blink", format!("{r}, the leader, loses power ({cut:?}) and is back in {down_ms} ms"))
            }
            7 if leader.is_some() && !self.active.iter().any(|(_, h)| matches!(h, Heal::Clock(_))) => {
                // The leader's clock steps two days ahead (NTP, a wrong RTC): it must not
                // take the replicated clock with it. One clock at a time: two wrong clocks
                // of three voters are a quorum's time, which no replica can tell from the
                // truth (seed 67 of 10 minutes, once voters were replaced: the state was
                // stamped two days ahead).
                let i = leader.unwrap_or(1);
                let for_ms = self.rng.range(1_000, 20_000);
                self.jumps[(i - 1) as usize].store(CLOCK_JUMP_MS, std::sync::atomic::Ordering::SeqCst);
                self.active.push((now_ms + for_ms, Heal::Clock(i)));
                // Half the time it is a reboot's wrong clock: the replica starts again with
                // it, knowing nothing of its peers' clocks, and may lead at once.
                let how = if self.rng.chance(50) {
                    let (r, cut) = self.cut_power(sim, i);
                    sim.bounce(r.as_str());
                    format!("r{i}, the leader, reboots ({cut:?}) with its clock")
                } else {
                    format!("r{i}'s clock, the leader's, jumps")
                };
                ("clock-jump", format!("{how} {CLOCK_JUMP_MS} ms ahead for {for_ms} ms"))
            }
            5 => {
                // A rack's switch fails: one replica and a rack's agents on one side.
                let r = self.replica();
                let rack = self.rng.below(RACKS);
                let (inside, outside): (Vec<String>, Vec<String>) =
                    self.all_hosts().into_iter().filter(|h| *h != r).partition(|h| in_rack(h, rack));
                let for_ms = self.rng.range(1_000, 20_000);
                for a in inside.iter().chain(std::iter::once(&r)) {
                    for b in &outside {
                        sim.partition(a.as_str(), b.as_str());
                        self.active.push((now_ms + for_ms, Heal::Repair(a.clone(), b.clone())));
                    }
                }
                ("rack-split", format!("{r} and rack {rack}'s agents cut off from the rest for {for_ms} ms"))
            }
            8 => {
                // A retried request, a second path: every datagram arrives twice, the copy
                // after newer ones.
                let max_ms = self.rng.range(100, MAX_COPY_DELAY_MS);
                let for_ms = self.rng.range(1_000, 20_000);
                self.copies.set(max_ms);
                self.active.push((now_ms + for_ms, Heal::Copies));
                ("duplicates", format!("datagrams arrive twice, copies up to {max_ms} ms late, for {for_ms} ms"))
            }
            9 => {
                // A disk that syncs slowly: the replica acknowledges appends, and saves its
                // vote, only as fast as it syncs. Half the time the leader's, whose slow
                // syncs hold back its own acknowledgements and its campaigns.
                let i = match leader {
                    Some(l) if self.rng.chance(50) => l,
                    _ => self.replica_id(),
                };
                let sync_ms = self.rng.range(20, MAX_SLOW_SYNC_MS);
                let for_ms = self.rng.range(1_000, 20_000);
                self.disks[(i - 1) as usize].set_sync_ms(sync_ms);
                self.active.push((now_ms + for_ms, Heal::Disk(i)));
                ("slow-disk", format!("r{i}'s syncs take {sync_ms} ms for {for_ms} ms"))
            }
            11 => {
                // A failing disk, often the leader's: full for a while (writes are retried,
                // client writes refused meanwhile), or one sync fails as `fsync` does on an
                // I/O error, dropping what was not synced: the replica must stop then.
                let i = match leader {
                    Some(l) if self.rng.chance(50) => l,
                    _ => self.replica_id(),
                };
                let disk = &self.disks[(i - 1) as usize];
                if self.rng.chance(50) {
                    let for_ms = self.rng.range(1_000, 20_000);
                    disk.set_full(true);
                    self.active.push((now_ms + for_ms, Heal::Room(i)));
                    ("full-disk", format!("r{i}'s disk is full for {for_ms} ms"))
                } else {
                    disk.fail_next_sync();
                    ("failed-sync", format!("r{i}'s next sync fails, losing what it had not synced"))
                }
            }
            _ => {
                let max_ms = self.rng.range(BASE_LATENCY_MS, SLOW_LATENCY_MS);
                let for_ms = self.rng.range(1_000, 20_000);
                sim.set_max_message_latency(Duration::from_millis(max_ms));
                self.active.push((now_ms + for_ms, Heal::Latency));
                ("slow-network", format!("messages take up to {max_ms} ms for {for_ms} ms"))
            }
        };
        *self.counts.entry(kind).or_default() += 1;
        format!("fault: {line}")
    }
}

impl Faults {
    fn heal(&self, sim: &mut turmoil::Sim<'_>, h: Heal) -> String {
        match h {
            Heal::Clock(i) => {
                self.jumps[(i - 1) as usize].store(0, std::sync::atomic::Ordering::SeqCst);
                format!("heal: r{i}'s clock is true again")
            }
            Heal::Repair(a, b) => {
                sim.repair(a.as_str(), b.as_str());
                format!("heal: {a} <-> {b}")
            }
            Heal::RepairOneWay(a, b) => {
                sim.repair_oneway(a.as_str(), b.as_str());
                format!("heal: {a} -> {b}")
            }
            Heal::Restart(h) if self.retired_host(&h) => format!("heal: {h} stays down (retired)"),
            Heal::Restart(h) => {
                if !sim.is_host_running(h.as_str()) {
                    sim.bounce(h.as_str());
                }
                format!("heal: {h} restarts")
            }
            Heal::Disk(i) => {
                self.disks[(i - 1) as usize].set_sync_ms(0);
                format!("heal: r{i}'s disk syncs at once again")
            }
            Heal::Room(i) => {
                self.disks[(i - 1) as usize].set_full(false);
                format!("heal: r{i}'s disk has room again")
            }
            Heal::Copies => {
                self.copies.set(0);
                "heal: datagrams arrive once".into()
            }
            Heal::Latency => {
                sim.set_max_message_latency(Duration::from_millis(BASE_LATENCY_MS));
                "heal: messages fast again".into()
            }
        }
    }
}
