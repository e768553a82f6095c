//! The faults of a chaos run, one at a time, each healed before the next. Most keep a
//! quorum of replicas and keep agents away for less than the heartbeat timeout; two keep an
//! agent away for longer (SIGSTOP or SIGKILL), so that its node is declared lost and its jobs
//! are placed elsewhere while the agent's lease and the replicas' watchdogs must already have
//! stopped their processes.
//!
//! Network faults (in a partitionable cluster, `cluster::Cluster::start_partitionable`) cut
//! links by dropping packets in the switch between the processes' namespaces: a replica cut
//! off from everyone; the leader cut off from its peers but not from its agents nor clients
//! (it is deposed without knowing it, and agents must stop obeying it within their lease); an
//! agent cut off past the heartbeat timeout; a whole rack (a replica and its agents) cut off;
//! one-way cuts; a link that loses a share of its packets. Which of the two families a run
//! draws from is its [`Mix`].
//!
//! A slow disk (with `Faults::slow_disks`, among the process faults) throttles one replica's
//! writes to a few a second for a few seconds (`crate::disk`): its fsyncs, raft's appends and
//! votes, take tens of milliseconds each, so a slow leader commits slowly and a slow
//! follower falls behind.
//!
//! A fault is either injected when its turn comes, or timed by protocol state: the harness
//! watches the jobs through the API and injects when it sees the state it waits for
//! (`Moment`), within `MOMENT_WAIT_MS`. Every fault is labelled with the moment it landed in.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use baton_proto::v1::{Empty, JobState, ListJobsRequest};

use crate::cluster::{Cluster, REPLICAS, Servers, Topology, agent_label, connect_any, connect_leader, replica_label};
use crate::disk::SlowDisk;
use crate::net::{Rule, cut_between, one_way};
use crate::rng::Rng;

/// How long a fault timed by protocol state waits for its moment before it is injected
/// anyway (labelled with what was seen then).
const MOMENT_WAIT_MS: u64 = 4_000;
/// The same for a leader kill of `Mix::PreemptionKills`: long enough that nearly every kill
/// lands right after a preemption (the load preempts every few seconds).
const PREEMPTION_WAIT_MS: u64 = 20_000;
/// Between two looks at the jobs while waiting for a moment.
const WATCH_POLL_MS: u64 = 10;
/// Bound on one look at the jobs.
const WATCH_CALL_MS: u64 = 500;
/// Share of faults timed by protocol state rather than by the clock alone.
const TIMED_PERCENT: u64 = 50;
/// Share of network faults in a run that mixes both families.
const NETWORK_PERCENT: u64 = 50;
/// With `Faults::brisk`: how long to wait, at most, for the cluster to be whole again after
/// a fault is healed (every replica answering, one leader, every node ready) before the
/// next; and the pause after that. Together at most the 2.5 s of the usual pause: on a
/// loaded machine a cluster may take long to look whole (a look opens a connection to each
/// replica), and brisk faults are never sparser than the usual ones.
const WHOLE_WAIT_MS: u64 = 2_000;
const BRISK_PAUSE_MS: (u64, u64) = (200, 500);
/// `Mix::PreemptionKills`: how long the killed leader stays down. From 0: a leader restarted
/// at once often takes up its own term again before its followers campaign (its vote was
/// committed), a different failover from one where another replica takes over, which a
/// longer outage lets happen; the old 0.5-2 s drew only the second kind.
const PREEMPTION_KILL_OUTAGE_MS: (u64, u64) = (0, 2_000);
/// Share of process faults that are slow disks, when a run has them (the other process
/// faults keep their shares among the rest).
const SLOW_DISK_PERCENT: u64 = 12;
/// A short kill of `agent`, which also wipes its journal `WIPE_JOURNAL_PERCENT` of the time
/// where agents hold their replicas in cgroups (`contained`).
fn short_agent_kill(rng: &mut Rng, contained: bool, agent: String) -> Fault {
    if contained && rng.chance(WIPE_JOURNAL_PERCENT) {
        Fault::WipeJournal { name: agent }
    } else {
        Fault::KillAgent { name: agent }
    }
}

/// A long kill of `agent`, which is a reboot of its whole node `REBOOT_PERCENT` of the time
/// where agents hold their replicas in cgroups (`contained`): only there can the harness
/// kill every process of a node's replicas at once, as a reboot does.
fn long_agent_kill(rng: &mut Rng, contained: bool, agent: String) -> Fault {
    if contained && rng.chance(REBOOT_PERCENT) {
        Fault::RebootNode { name: agent }
    } else {
        Fault::KillAgentLong { name: agent }
    }
}

/// A stall of `agent` past the heartbeat timeout, which freezes its whole node
/// `FREEZE_PERCENT` of the time where agents hold their replicas in cgroups (`contained`):
/// only there can the harness freeze every process of a node's replicas at once.
fn long_agent_stall(rng: &mut Rng, contained: bool, agent: String) -> Fault {
    if contained && rng.chance(FREEZE_PERCENT) {
        Fault::FreezeNode { name: agent }
    } else {
        Fault::StallAgent { name: agent }
    }
}

/// Share of the long agent stalls that freeze the whole node (`long_agent_stall`).
const FREEZE_PERCENT: u64 = 30;

/// How many days ahead the leader's clock steps, `CLOCK_AHEAD_PERCENT` of the process faults
/// where the replicas' clocks can be stepped (`leader_clocks`); none otherwise.
fn clock_jump_days(rng: &mut Rng, leader_clocks: bool) -> Option<u32> {
    if !leader_clocks || !rng.chance(CLOCK_AHEAD_PERCENT) {
        return None;
    }
    Some(rng.range(CLOCK_AHEAD_DAYS.0, CLOCK_AHEAD_DAYS.1) as u32)
}

/// Share of the long agent kills that reboot the whole node (`long_agent_kill`).
const REBOOT_PERCENT: u64 = 30;

/// Share of the short agent kills that also wipe the agent's journal, where the agents hold
/// their replicas in cgroups (`Faults::contained`).
const WIPE_JOURNAL_PERCENT: u64 = 30;
/// A slow disk's write IOs a second (each fsync is at least one), and how long it lasts.
const SLOW_DISK_IOPS: (u64, u64) = (10, 20);
const SLOW_DISK_MS: (u64, u64) = (2_000, 5_000);
const SLOW_DISK_BRISK_MS: (u64, u64) = (2_000, 3_500);

/// `Fault::kind` of a single leader kill (the kind counted right after a preemption).
pub const LEADER_KILL: &str = "kill leader";
/// `Fault::kind` of a leader's clock stepped days ahead.
pub const LEADER_CLOCK_AHEAD: &str = "leader's clock days ahead";
/// Share of process faults that step the leader's clock days ahead, when the run's replicas
/// run on steppable clocks (`Faults::leader_clocks`); how many days; how long it stays
/// ahead (libfaketime reads the step within a second; the rest is seconds of cycles and
/// commands stamped by a leader whose clock says days later).
const CLOCK_AHEAD_PERCENT: u64 = 10;
const CLOCK_AHEAD_DAYS: (u64, u64) = (1, 5);
const CLOCK_AHEAD_MS: (u64, u64) = (3_000, 8_000);
const CLOCK_AHEAD_BRISK_MS: (u64, u64) = (3_000, 5_000);

/// The `Fault::kind`s of the fault kinds issue 31 adds (`Mix::NewKinds` draws only these).
pub const NEW_KINDS: [&str; 4] = [
    "kill agent, wipe its journal",
    "reboot a node past the heartbeat timeout",
    LEADER_CLOCK_AHEAD,
    "freeze a whole node past the heartbeat timeout",
];

/// The partition kinds issue 9 lists, each with the `Fault::kind`s it counts.
pub const PARTITION_KINDS: [(&str, &[&str]); 5] = [
    ("a replica cut off (the leader or a follower)", &["cut off the leader", "cut off a follower"]),
    ("the leader cut from its peers, not its agents", &["cut the leader from its peers, not its agents"]),
    ("an agent cut off past the heartbeat timeout", &["cut off an agent past the heartbeat timeout"]),
    ("a whole rack cut off", &["cut off a rack (a replica and its agents)"]),
    ("a one-way cut", &["one-way cut"]),
];

/// A fault kind of issue 31 (`Mix::NewKinds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewKind {
    WipeJournal,
    Reboot,
    ClockAhead,
    Freeze,
}

/// The fault kinds of issue 31 a run can make: journal wipes, reboots and whole nodes
/// frozen where every agent holds its replicas in cgroups (`contained`), clock jumps where
/// the replicas' clocks step.
fn new_kinds(contained: bool, leader_clocks: bool) -> Vec<NewKind> {
    let mut kinds = Vec::new();
    if contained {
        kinds.extend([NewKind::WipeJournal, NewKind::Reboot]);
    }
    if leader_clocks {
        kinds.push(NewKind::ClockAhead);
    }
    if contained {
        kinds.push(NewKind::Freeze);
    }
    kinds
}

/// Which faults a run draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Process faults and network faults, half and half.
    All,
    /// Process faults only (kills and pauses): no network namespaces needed.
    Processes,
    /// Network faults only.
    Partitions,
    /// The five partition kinds of issue 9 only, a fifth each: a replica cut off, the leader
    /// cut from its peers, an agent cut off past the heartbeat timeout, a rack cut off, a
    /// one-way cut. No lossy link, no process fault.
    Cuts,
    /// Leader kills only, each as soon as a preemption is seen committed (within
    /// `PREEMPTION_WAIT_MS`), one after another: the count of kills landing mid-preemption grows
    /// as fast as the load preempts. No network namespaces needed.
    PreemptionKills,
    /// Slow disks only (a replica's writes throttled for a while, leader or follower).
    SlowDisks,
    /// The fault kinds of issue 31 only, drawn alike: an agent killed and its journal wiped
    /// while its processes live, a node rebooted past the heartbeat timeout (both where
    /// every agent holds its replicas in cgroups), the leader's clock stepped days ahead
    /// (where the replicas' clocks can be stepped). No network namespaces needed.
    NewKinds,
}

impl Mix {
    pub fn partitions(self) -> bool {
        matches!(self, Mix::All | Mix::Partitions | Mix::Cuts)
    }

    /// Whether the run draws process faults (kills, pauses, slow disks).
    pub fn process_faults(self) -> bool {
        matches!(self, Mix::All | Mix::Processes | Mix::SlowDisks)
    }

    /// Whether the run may step the leader's clock days ahead (where libfaketime is).
    pub fn clock_jumps(self) -> bool {
        matches!(self, Mix::All | Mix::Processes | Mix::NewKinds)
    }

    /// How a run's summary says which faults it drew from.
    pub fn describe(self) -> &'static str {
        match self {
            Mix::All => "process faults and network partitions",
            Mix::Processes => "process faults only: network partitions were off (--no-partitions)",
            Mix::Partitions => "network partitions only (--only-partitions)",
            Mix::Cuts => "the five partition kinds of issue 9 only, a fifth each (--only-cuts)",
            Mix::PreemptionKills => "leader kills right after preemptions commit only (--preemption-kills)",
            Mix::SlowDisks => "slow disks only (--only-slow-disks)",
            Mix::NewKinds => {
                "journal wipes, node reboots, leader clock jumps and whole nodes frozen only (--only-new-kinds)"
            }
        }
    }
}

/// A one-way cut: who stops hearing whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OneWay {
    /// The leader receives nothing from its peers; they still receive from it.
    LeaderDeaf { replica: usize },
    /// The leader's peers receive nothing from it; it still receives from them.
    LeaderMute { replica: usize },
    /// An agent receives nothing from the replicas; its reports still reach them.
    AgentDeaf { name: String },
    /// No replica receives the agent's reports; it still receives from them.
    AgentMute { name: String },
}

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
    /// The node reboots: its agent and every process of its replicas are killed at once
    /// (`cgroup.kill` of the agent's cgroup tree), and the agent starts again past the
    /// heartbeat timeout with its journal as it was: its node is lost, its jobs move on.
    RebootNode { name: String },
    /// SIGKILL an agent, delete its journal while its replicas' processes live on, restart
    /// it before its node could be declared lost: it must find them by their cgroups and
    /// settle them before it starts anything.
    WipeJournal { name: String },
    /// SIGSTOP an agent past the heartbeat timeout (its processes keep running unless its
    /// lease and their watchdog stop them), then SIGCONT.
    StallAgent { name: String },
    /// The whole node stops past the heartbeat timeout, as a paused virtual machine: its
    /// agent and its replicas' guards (SIGSTOP) and every process of its replicas
    /// (`cgroup.freeze` of the agent's cgroup tree), all running again at once. Nothing of
    /// the node can act while its job is placed elsewhere; once thawed, its replicas must be
    /// gone within `THAW_BOUND_MS` without saving anything.
    FreezeNode { name: String },
    /// Cut a replica (the leader, when `leader`) off from everyone: peers, agents, clients.
    Isolate { replica: usize, leader: bool },
    /// Cut the leader off from its peers only: its agents and clients still reach it.
    DeposeLeader { replica: usize },
    /// Cut an agent off from every replica past the heartbeat timeout: its node is lost.
    CutAgent { name: String },
    /// Cut replica `replica` and the agents of its rack off from everyone else.
    CutRack { replica: usize },
    /// An asymmetric cut.
    OneWay(OneWay),
    /// `percent` of the packets to and from a replica or an agent (by network label) lost.
    Lossy { who: String, percent: u32 },
    /// Replica `replica`'s disk (the leader's, when `leader`) allows `iops` writes a second
    /// for the outage, then is restored.
    SlowDisk { replica: usize, leader: bool, iops: u32 },
    /// The leader's wall clock steps `days` ahead for the outage, then back (an NTP server
    /// gone wrong, an operator's typo). Its stamps must stay with its peers' time: a
    /// replicated clock moved days ahead never comes back, and every job's time limit ends.
    LeaderClockAhead { replica: usize, days: u32 },
}

impl Fault {
    /// The fault's kind, for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::KillReplica { leader: true, .. } => LEADER_KILL,
            Fault::KillReplica { leader: false, .. } => "kill follower",
            Fault::PauseReplica { .. } => "pause leader",
            Fault::KillNewLeader { .. } => "kill leader, then the new leader",
            Fault::KillAgent { .. } => "kill agent (short)",
            Fault::KillAgentLong { .. } => "kill agent past the heartbeat timeout",
            Fault::WipeJournal { .. } => NEW_KINDS[0],
            Fault::RebootNode { .. } => NEW_KINDS[1],
            Fault::StallAgent { .. } => "stop agent past the heartbeat timeout",
            Fault::FreezeNode { .. } => NEW_KINDS[3],
            Fault::Isolate { leader: true, .. } => "cut off the leader",
            Fault::Isolate { leader: false, .. } => "cut off a follower",
            Fault::DeposeLeader { .. } => "cut the leader from its peers, not its agents",
            Fault::CutAgent { .. } => "cut off an agent past the heartbeat timeout",
            Fault::CutRack { .. } => "cut off a rack (a replica and its agents)",
            Fault::OneWay(_) => "one-way cut",
            Fault::Lossy { .. } => "lossy link",
            Fault::SlowDisk { leader: true, .. } => "slow disk of the leader",
            Fault::SlowDisk { leader: false, .. } => "slow disk of a follower",
            Fault::LeaderClockAhead { .. } => LEADER_CLOCK_AHEAD,
        }
    }

    /// The network rules that make this fault (none for a process fault).
    pub fn rules(&self, t: &Topology) -> Vec<Rule> {
        let others = |me: &[String]| -> Vec<String> { t.everyone().into_iter().filter(|l| !me.contains(l)).collect() };
        let peers = |r: usize| -> Vec<String> { t.replicas.iter().filter(|l| **l != t.replicas[r]).cloned().collect() };
        let me = |r: usize| vec![t.replicas[r].clone()];
        match self {
            Fault::Isolate { replica, .. } => cut_between(&me(*replica), &others(&me(*replica))),
            Fault::DeposeLeader { replica } => cut_between(&me(*replica), &peers(*replica)),
            Fault::CutAgent { name } => cut_between(&[agent_label(name)], &t.replicas),
            Fault::CutRack { replica } => {
                let rack = t.rack_of(*replica);
                cut_between(&rack, &others(&rack))
            }
            Fault::OneWay(OneWay::LeaderDeaf { replica }) => one_way(&peers(*replica), &me(*replica)),
            Fault::OneWay(OneWay::LeaderMute { replica }) => one_way(&me(*replica), &peers(*replica)),
            Fault::OneWay(OneWay::AgentDeaf { name }) => one_way(&t.replicas, &[agent_label(name)]),
            Fault::OneWay(OneWay::AgentMute { name }) => one_way(&[agent_label(name)], &t.replicas),
            Fault::Lossy { who, percent } => vec![Rule::Loss { who: who.clone(), percent: *percent }],
            Fault::KillReplica { .. }
            | Fault::PauseReplica { .. }
            | Fault::KillNewLeader { .. }
            | Fault::KillAgent { .. }
            | Fault::KillAgentLong { .. }
            | Fault::WipeJournal { .. }
            | Fault::RebootNode { .. }
            | Fault::StallAgent { .. }
            | Fault::FreezeNode { .. }
            | Fault::SlowDisk { .. }
            | Fault::LeaderClockAhead { .. } => Vec::new(),
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
            Fault::WipeJournal { name } => write!(f, "killed agent {name} and wiped its journal, its processes alive"),
            Fault::RebootNode { name } => write!(f, "rebooted node {name} past the heartbeat timeout"),
            Fault::StallAgent { name } => write!(f, "stopped agent {name} past the heartbeat timeout"),
            Fault::FreezeNode { name } => write!(f, "froze node {name} whole past the heartbeat timeout"),
            Fault::Isolate { replica, leader } => write!(f, "cut off replica {}{}", replica + 1, role(leader)),
            Fault::DeposeLeader { replica } => {
                write!(f, "cut replica {} (the leader) from its peers, not from its agents", replica + 1)
            }
            Fault::CutAgent { name } => write!(f, "cut off agent {name} past the heartbeat timeout"),
            Fault::CutRack { replica } => write!(f, "cut off rack {0} (replica {0} and its agents)", replica + 1),
            Fault::OneWay(OneWay::LeaderDeaf { replica }) => {
                write!(f, "one-way cut: replica {} (the leader) hears no peer", replica + 1)
            }
            Fault::OneWay(OneWay::LeaderMute { replica }) => {
                write!(f, "one-way cut: no peer hears replica {} (the leader)", replica + 1)
            }
            Fault::OneWay(OneWay::AgentDeaf { name }) => write!(f, "one-way cut: agent {name} hears no replica"),
            Fault::OneWay(OneWay::AgentMute { name }) => write!(f, "one-way cut: no replica hears agent {name}"),
            Fault::Lossy { who, percent } => write!(f, "{who}'s link loses {percent}% of its packets"),
            Fault::SlowDisk { replica, leader, iops } => {
                write!(f, "slowed the disk of replica {}{} to {iops} writes a second", replica + 1, role(leader))
            }
            Fault::LeaderClockAhead { replica, days } => {
                write!(f, "stepped the clock of replica {} (the leader) {days} days ahead", replica + 1)
            }
        }
    }
}

/// `Mix::Cuts`: a roll (0 to 99) moved onto the rolls of `Faults::draw_network` that draw
/// the five partition kinds, a fifth of the rolls each (the lossy link's rolls, 90 and
/// above, are never drawn).
fn cuts_roll(roll: u64) -> u64 {
    [0, 20, 40, 60, 75][(roll.min(99) / 20) as usize]
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
    /// The watcher's client, the replica it is connected to, and whether that replica led
    /// when connected (with `Mix::PreemptionKills` the watcher connects to the leader, so
    /// that the kill needs no new connection).
    watcher: Option<(crate::cluster::Client, usize, bool)>,
    mix: Mix,
    /// Shorter pauses between faults, each once the cluster is whole again after the last
    /// (see `Faults::brisk`), and shorter outages, none below the lower bounds that make
    /// the fault what it is.
    brisk: bool,
    /// The cgroup that slows a replica's disk, when the run has slow disks.
    slow_disk: Option<SlowDisk>,
    /// Whether every agent holds its replicas in cgroups: short agent kills may then wipe
    /// the journal (`Fault::WipeJournal`) and long ones reboot the node (`Fault::RebootNode`).
    contained: bool,
    /// Whether the replicas' clocks can be stepped (`Fault::LeaderClockAhead`).
    leader_clocks: bool,
}

impl Faults {
    pub fn new(seed: u64, heartbeat_timeout_ms: u64, servers: &Servers, mix: Mix) -> Faults {
        Faults {
            rng: Rng::new(seed ^ 0xfa17),
            max_agent_outage_ms: heartbeat_timeout_ms / 2,
            heartbeat_timeout_ms,
            servers: servers.clone(),
            watcher: None,
            mix,
            brisk: false,
            slow_disk: None,
            contained: false,
            leader_clocks: false,
        }
    }

    /// Where every replica runs on a clock the harness can step
    /// (`cluster::Timing::steppable_replica_clocks`), `CLOCK_AHEAD_PERCENT` of the process
    /// faults step the leader's clock days ahead for a few seconds.
    pub fn leader_clocks(mut self, steppable: bool) -> Faults {
        self.leader_clocks = steppable;
        self
    }

    /// Where every agent holds its replicas in cgroups (`contained`), some short agent kills
    /// wipe the agent's journal too (`WIPE_JOURNAL_PERCENT`) and some long ones reboot the
    /// whole node (`REBOOT_PERCENT`). An agent that holds replicas by process groups cannot
    /// find processes its journal forgot, and the harness cannot kill a node's processes at
    /// once.
    pub fn contained(mut self, contained: bool) -> Faults {
        self.contained = contained;
        self
    }

    /// Slow disks among the process faults (`SLOW_DISK_PERCENT` of them), made with `disk`.
    pub fn slow_disks(mut self, disk: Option<SlowDisk>) -> Faults {
        self.slow_disk = disk;
        self
    }

    /// Brisk faults: after each heal the next fault waits only until the cluster is whole
    /// again (every replica answers and names the same leader, every node is ready), then
    /// 0.2-0.5 s instead of 1-2.5 s; outages keep their lower bounds (past the heartbeat
    /// timeout, past the lease) and lose most of their upper ones. Each fault is still
    /// healed before the next, and what is checked is the same.
    pub fn brisk(mut self, on: bool) -> Faults {
        self.brisk = on;
        self
    }

    /// Time between the end of one fault and the start of the next. Leader kills timed by
    /// preemptions follow each other at once: the wait for the next preemption spaces them.
    pub fn pause_before_next(&mut self) -> Duration {
        if self.mix == Mix::PreemptionKills {
            return Duration::ZERO;
        }
        if self.brisk {
            return Duration::from_millis(self.rng.range(BRISK_PAUSE_MS.0, BRISK_PAUSE_MS.1));
        }
        Duration::from_millis(self.rng.range(1_000, 2_500))
    }

    /// With brisk faults, waits (at most `WHOLE_WAIT_MS`) until the cluster is whole again;
    /// without, returns at once (the fixed pause covers it).
    pub async fn settle(&self, c: &Cluster) {
        if self.brisk && self.mix != Mix::PreemptionKills && !c.wait_whole(WHOLE_WAIT_MS).await {
            eprintln!("chaos: the cluster was not whole {WHOLE_WAIT_MS} ms after a heal; the next fault goes on");
        }
    }

    /// Injects one fault, waits out its outage and heals it; returns what it did and the
    /// moment it landed in.
    pub async fn inject(&mut self, c: &mut Cluster) -> (Fault, Moment) {
        if self.mix == Mix::PreemptionKills {
            let moment = self.wait_for(Moment::AfterPreemption, PREEMPTION_WAIT_MS).await;
            // The watcher looks at the leader: kill it if it still leads (one call on the
            // open connection), else look the leader up.
            let leader = match self.watched_leader().await {
                Some(i) => i,
                None => c.leader().await,
            };
            let fault = self.strike(c, Fault::KillReplica { replica: leader, leader: true }).await;
            return (fault, moment);
        }
        let roll = self.rng.range(0, 99);
        let target = if self.rng.chance(TIMED_PERCENT) {
            [Moment::AfterPlacement, Moment::AfterPreemption, Moment::StopInFlight][self.rng.range(0, 2) as usize]
        } else {
            Moment::Idle
        };
        let moment = self.wait_for(target, MOMENT_WAIT_MS).await;
        // The leader is looked up after the wait: it may have changed meanwhile.
        let fault = self.draw(c, roll).await;
        match self.strike(c, fault).await {
            fault @ Fault::KillNewLeader { .. } => (fault, Moment::NewLeader),
            fault => (fault, moment),
        }
    }

    /// The fault for `roll` (0 to 99): the weights of the mix.
    async fn draw(&mut self, c: &Cluster, roll: u64) -> Fault {
        let network = match self.mix {
            Mix::All => self.rng.chance(NETWORK_PERCENT),
            Mix::Processes => false,
            Mix::Partitions | Mix::Cuts => true,
            Mix::PreemptionKills => false,
            Mix::SlowDisks => return self.draw_slow_disk(c).await,
            Mix::NewKinds => return self.draw_new_kind(c).await,
        };
        if !network {
            return self.draw_process(c, roll).await;
        }
        let roll = if self.mix == Mix::Cuts { cuts_roll(roll) } else { roll };
        self.draw_network(c, roll).await
    }

    /// A network fault for `roll` (0 to 99).
    async fn draw_network(&mut self, c: &Cluster, roll: u64) -> Fault {
        let agents = c.agent_names();
        let agent = agents[self.rng.range(0, agents.len() as u64 - 1) as usize].clone();
        let leader = c.leader().await;
        let replica = self.rng.range(0, REPLICAS as u64 - 1) as usize;
        let variant = self.rng.range(0, 3);
        if roll < 15 {
            Fault::Isolate { replica, leader: replica == leader }
        } else if roll < 35 {
            Fault::DeposeLeader { replica: leader }
        } else if roll < 55 {
            Fault::CutAgent { name: agent }
        } else if roll < 70 {
            Fault::CutRack { replica }
        } else if roll < 90 {
            Fault::OneWay(match variant {
                0 => OneWay::LeaderDeaf { replica: leader },
                1 => OneWay::LeaderMute { replica: leader },
                2 => OneWay::AgentDeaf { name: agent },
                _ => OneWay::AgentMute { name: agent },
            })
        } else {
            let who = if variant < 2 { replica_label(leader) } else { agent_label(&agent) };
            Fault::Lossy { who, percent: self.rng.range(20, 50) as u32 }
        }
    }

    /// A process fault for `roll` (0 to 99).
    async fn draw_process(&mut self, c: &Cluster, roll: u64) -> Fault {
        let agents = c.agent_names();
        let agent = agents[self.rng.range(0, agents.len() as u64 - 1) as usize].clone();
        // Drawn only when the run has slow disks, so that a run without draws as before.
        if self.slow_disk.is_some() && self.rng.chance(SLOW_DISK_PERCENT) {
            return self.draw_slow_disk(c).await;
        }
        // The same: drawn only when the clocks can be stepped.
        if let Some(days) = clock_jump_days(&mut self.rng, self.leader_clocks) {
            return Fault::LeaderClockAhead { replica: c.leader().await, days };
        }
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
            short_agent_kill(&mut self.rng, self.contained, agent)
        } else if roll < 85 {
            long_agent_kill(&mut self.rng, self.contained, agent)
        } else {
            long_agent_stall(&mut self.rng, self.contained, agent)
        }
    }

    /// One of the new kinds this run can make, each as likely as the others
    /// (`Faults::new_kinds`).
    async fn draw_new_kind(&mut self, c: &Cluster) -> Fault {
        let kinds = self.new_kinds();
        assert!(!kinds.is_empty(), "a run of the new kinds checks up front that it can make one");
        let agents = c.agent_names();
        let name = agents[self.rng.range(0, agents.len() as u64 - 1) as usize].clone();
        match kinds[self.rng.range(0, kinds.len() as u64 - 1) as usize] {
            NewKind::WipeJournal => Fault::WipeJournal { name },
            NewKind::Reboot => Fault::RebootNode { name },
            NewKind::Freeze => Fault::FreezeNode { name },
            NewKind::ClockAhead => {
                let days = self.rng.range(CLOCK_AHEAD_DAYS.0, CLOCK_AHEAD_DAYS.1) as u32;
                Fault::LeaderClockAhead { replica: c.leader().await, days }
            }
        }
    }

    /// The fault kinds of issue 31 this run can make: journal wipes and reboots where every
    /// agent holds its replicas in cgroups, clock jumps where the replicas' clocks step.
    pub fn new_kinds(&self) -> Vec<NewKind> {
        new_kinds(self.contained, self.leader_clocks)
    }

    /// A slow disk of any replica, the leader or a follower.
    async fn draw_slow_disk(&mut self, c: &Cluster) -> Fault {
        let leader = c.leader().await;
        let replica = self.rng.range(0, REPLICAS as u64 - 1) as usize;
        let iops = self.rng.range(SLOW_DISK_IOPS.0, SLOW_DISK_IOPS.1) as u32;
        Fault::SlowDisk { replica, leader: replica == leader, iops }
    }

    /// Does the fault, waits out its outage and heals it.
    async fn strike(&mut self, c: &mut Cluster, fault: Fault) -> Fault {
        let t = self.heartbeat_timeout_ms;
        let long_ms = self.rng.range(t + 500, if self.brisk { (t + 500).max(t * 3 / 2) } else { 2 * t });
        let outage = match self.mix {
            Mix::PreemptionKills => self.rng.range(PREEMPTION_KILL_OUTAGE_MS.0, PREEMPTION_KILL_OUTAGE_MS.1),
            _ => self.rng.range(500, 2_000),
        };
        let outage = Duration::from_millis(outage);
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
            Fault::KillAgent { ref name } | Fault::WipeJournal { ref name } => {
                c.kill_agent(name);
                if matches!(fault, Fault::WipeJournal { .. }) {
                    c.wipe_agent_journal(name);
                }
                tokio::time::sleep(Duration::from_millis(self.rng.range(200, self.max_agent_outage_ms))).await;
                c.start_agent(name);
            }
            Fault::KillAgentLong { ref name } | Fault::RebootNode { ref name } => {
                c.kill_agent(name);
                if matches!(fault, Fault::RebootNode { .. }) {
                    c.kill_agent_replicas(name);
                }
                tokio::time::sleep(Duration::from_millis(long_ms)).await;
                c.start_agent(name);
            }
            Fault::StallAgent { ref name } => {
                c.pause_agent(name, true);
                tokio::time::sleep(Duration::from_millis(long_ms)).await;
                c.pause_agent(name, false);
            }
            Fault::FreezeNode { ref name } => {
                let frozen = c.freeze_node(name);
                tokio::time::sleep(Duration::from_millis(long_ms)).await;
                c.thaw_node(name, &frozen);
                crate::freeze::judge_thaw(c, name, &frozen).await;
            }
            Fault::SlowDisk { replica, iops, .. } => {
                let (low, high) = if self.brisk { SLOW_DISK_BRISK_MS } else { SLOW_DISK_MS };
                let slow_ms = self.rng.range(low, high);
                self.slow_disk_for(c, replica, iops, slow_ms).await;
            }
            Fault::LeaderClockAhead { replica, days } => {
                let (low, high) = if self.brisk { CLOCK_AHEAD_BRISK_MS } else { CLOCK_AHEAD_MS };
                let label = replica_label(replica);
                c.step_clock(&label, i64::from(days) * 86_400);
                tokio::time::sleep(Duration::from_millis(self.rng.range(low, high))).await;
                c.step_clock(&label, 0);
            }
            ref network => {
                let cut_ms = self.cut_ms(network, long_ms);
                c.set_network(&network.rules(&c.topology()));
                tokio::time::sleep(Duration::from_millis(cut_ms)).await;
                c.set_network(&[]);
            }
        }
        fault
    }

    /// Slows replica `replica`'s disk for `slow_ms`, then restores it. Panics (the cgroup
    /// removed as the harness unwinds) when the cgroup refuses what the run's check allowed.
    async fn slow_disk_for(&self, c: &Cluster, replica: usize, iops: u32, slow_ms: u64) {
        let disk = self.slow_disk.as_ref().expect("slow disks drawn only when the run has them");
        let Some(pid) = c.replica_pid(replica) else { return };
        let before = disk.writes().unwrap_or_else(|e| panic!("{e}"));
        disk.slow(pid, iops).unwrap_or_else(|e| panic!("{e}"));
        tokio::time::sleep(Duration::from_millis(slow_ms)).await;
        disk.restore(pid).unwrap_or_else(|e| panic!("{e}"));
        // What the fault did, for the log: the writes that waited their turn.
        let through = disk.writes().unwrap_or_else(|e| panic!("{e}")) - before;
        eprintln!("chaos: replica {} wrote {through} times through its slow disk in {slow_ms} ms", replica + 1);
    }

    /// How long a network fault lasts: past the heartbeat timeout (`long_ms`) for those
    /// meant to get a node declared lost, else long enough for an election and for agents'
    /// leases to matter.
    fn cut_ms(&mut self, fault: &Fault, long_ms: u64) -> u64 {
        let t = self.heartbeat_timeout_ms;
        // Brisk: the same lower bounds, shorter upper ones.
        let (up_t, up_lossy_ms, up_ms) = if self.brisk { (t, 3_500, 2_500) } else { (2 * t, 5_000, 4_000) };
        match fault {
            Fault::CutAgent { .. } | Fault::CutRack { .. } => long_ms,
            Fault::DeposeLeader { .. } | Fault::OneWay(OneWay::AgentDeaf { .. } | OneWay::AgentMute { .. }) => {
                self.rng.range(t / 2, up_t)
            }
            Fault::Lossy { .. } => self.rng.range(2_000, up_lossy_ms),
            _ => self.rng.range(1_000, up_ms),
        }
    }

    /// Watches the jobs until `target` is seen (at once for `Idle`), or `wait_ms`
    /// passed; the moment seen last.
    async fn wait_for(&mut self, target: Moment, wait_ms: u64) -> Moment {
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
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

    /// The replica the watcher looks at, if it led when connected and still says it leads
    /// (one call on the open connection, bounded by `WATCH_CALL_MS`).
    async fn watched_leader(&mut self) -> Option<usize> {
        let (api, i, led) = self.watcher.as_mut()?;
        if !*led {
            return None;
        }
        let call = tokio::time::timeout(Duration::from_millis(WATCH_CALL_MS), api.cluster_info(Empty {}));
        let info = call.await.ok()?.ok()?.into_inner();
        (info.leader_id != 0 && info.leader_id == info.answered_by).then_some(*i)
    }

    /// The running and preempting jobs, from any replica that answers (the leader, with
    /// `Mix::PreemptionKills`).
    async fn look(&mut self) -> Option<Seen> {
        if self.watcher.is_none() {
            self.watcher = if self.mix == Mix::PreemptionKills {
                connect_leader(&self.servers).await.map(|(c, i)| (c, i, true))
            } else {
                connect_any(&self.servers).await.map(|c| (c, 0, false))
            };
        }
        let (api, _, _) = self.watcher.as_mut()?;
        let req = ListJobsRequest {
            states: vec![JobState::Running.into(), JobState::Preempting.into()],
            ..Default::default()
        };
        let reply = tokio::time::timeout(Duration::from_millis(WATCH_CALL_MS), api.list_jobs(req)).await;
        let Ok(Ok(reply)) = reply else {
            // The replica is gone or paused: the next look finds another.
            self.watcher = None;
            return None;
        };
        let mut seen = Seen::default();
        for j in reply.into_inner().jobs {
            let set = if j.state() == JobState::Preempting { &mut seen.preempting } else { &mut seen.running };
            set.insert(j.id);
        }
        Some(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::HOST;

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

    #[test]
    fn cuts_draw_each_partition_kind_a_fifth_of_the_time_and_no_lossy_link() {
        let mut counts = std::collections::BTreeMap::new();
        for roll in 0..100 {
            *counts.entry(cuts_roll(roll)).or_insert(0) += 1;
        }
        // The thresholds of `draw_network`: <15 isolate, <35 depose, <55 agent, <70 rack,
        // <90 one-way, else lossy.
        let kinds: Vec<(u64, u32)> = counts.into_iter().collect();
        assert_eq!(kinds, [(0, 20), (20, 20), (40, 20), (60, 20), (75, 20)]);
        assert!(kinds.iter().all(|(r, _)| *r < 90), "a lossy link drawn");
        assert_eq!(PARTITION_KINDS.len(), kinds.len());
    }

    #[test]
    fn the_new_kinds_are_those_the_run_can_make_and_each_counts_as_one() {
        assert_eq!(new_kinds(false, false), []);
        assert_eq!(new_kinds(false, true), [NewKind::ClockAhead]);
        assert_eq!(new_kinds(true, false), [NewKind::WipeJournal, NewKind::Reboot, NewKind::Freeze]);
        assert_eq!(
            new_kinds(true, true),
            [NewKind::WipeJournal, NewKind::Reboot, NewKind::ClockAhead, NewKind::Freeze]
        );
        let name = "n1".to_string();
        let made = [
            Fault::WipeJournal { name: name.clone() },
            Fault::RebootNode { name: name.clone() },
            Fault::LeaderClockAhead { replica: 0, days: 2 },
            Fault::FreezeNode { name },
        ];
        assert_eq!(made.iter().map(Fault::kind).collect::<Vec<_>>(), NEW_KINDS);
        assert!(Mix::NewKinds.clock_jumps() && !Mix::NewKinds.partitions() && !Mix::NewKinds.process_faults());
    }

    /// An agent kill's draw (`short_agent_kill`, `long_agent_kill`), and a kind of fault.
    type Kill = fn(&mut Rng, bool, String) -> Fault;
    type Kind = fn(&Fault) -> bool;

    /// How many of 300 agent kills drawn by `kill` (where agents hold replicas in cgroups:
    /// `contained`) are of the kind `is` says.
    fn drawn(kill: Kill, contained: bool, is: Kind) -> usize {
        let mut rng = Rng::new(3);
        (0..300).filter(|_| is(&kill(&mut rng, contained, "n1".into()))).count()
    }

    /// Journal wipes (short kills), reboots (long ones) and whole nodes frozen (long stalls)
    /// only where agents hold their replicas in cgroups, and then about 30% of those faults.
    #[test]
    fn agent_kills_wipe_journals_and_reboot_nodes_only_where_agents_hold_replicas_in_cgroups() {
        let wipes: Kind = |f| matches!(f, Fault::WipeJournal { .. });
        let reboots: Kind = |f| matches!(f, Fault::RebootNode { .. });
        let freezes: Kind = |f| matches!(f, Fault::FreezeNode { .. });
        let kinds: [(Kill, Kind, &str); 3] = [
            (short_agent_kill, wipes, "wipes"),
            (long_agent_kill, reboots, "reboots"),
            (long_agent_stall, freezes, "freezes"),
        ];
        for (kill, is, what) in kinds {
            assert_eq!(drawn(kill, false, is), 0, "{what} without cgroups");
            let n = drawn(kill, true, is);
            assert!((60..=120).contains(&n), "{n} {what} in 300 kills");
        }
    }

    /// The leader's clock jumps only where the replicas run on steppable clocks, then in
    /// about a tenth of the process faults, 1 to 5 days ahead.
    #[test]
    fn the_leaders_clock_jumps_days_ahead_only_where_replicas_clocks_can_step() {
        let mut rng = Rng::new(5);
        assert!((0..300).all(|_| clock_jump_days(&mut rng, false).is_none()));
        let days: Vec<u32> = (0..300).filter_map(|_| clock_jump_days(&mut rng, true)).collect();
        assert!((15..=50).contains(&days.len()), "{} jumps in 300 process faults", days.len());
        assert!(days.iter().all(|d| (1..=5).contains(d)), "{days:?}");
        let fault = Fault::LeaderClockAhead { replica: 1, days: 3 };
        assert_eq!(fault.kind(), LEADER_CLOCK_AHEAD);
        assert_eq!(fault.to_string(), "stepped the clock of replica 2 (the leader) 3 days ahead");
        assert!(fault.rules(&topology()).is_empty(), "a clock fault cuts no link");
    }

    fn topology() -> Topology {
        Topology {
            replicas: (0..3).map(replica_label).collect(),
            agents: (1..=3).map(|i| (agent_label(&format!("n{i}")), format!("rack-{i}"))).collect(),
            replica_racks: (1..=3).map(|i| Some(format!("rack-{i}"))).collect(),
        }
    }

    fn drops(rules: &[Rule]) -> BTreeSet<(String, String)> {
        rules
            .iter()
            .filter_map(|r| match r {
                Rule::Drop { from, to } => Some((from.clone(), to.clone())),
                Rule::Loss { .. } => None,
            })
            .collect()
    }

    fn has(rules: &[Rule], from: &str, to: &str) -> bool {
        drops(rules).contains(&(from.to_string(), to.to_string()))
    }

    #[test]
    fn a_deposed_leader_keeps_its_agents_and_clients_but_loses_its_peers() {
        let r = Fault::DeposeLeader { replica: 0 }.rules(&topology());
        for peer in ["replica-2", "replica-3"] {
            assert!(has(&r, "replica-1", peer) && has(&r, peer, "replica-1"), "{peer} still reaches the leader");
        }
        assert_eq!(r.len(), 4, "nothing else is cut: {r:?}");
    }

    #[test]
    fn a_cut_off_rack_keeps_its_own_links_and_loses_the_rest() {
        let r = Fault::CutRack { replica: 1 }.rules(&topology());
        assert!(!has(&r, "replica-2", "agent-n2") && !has(&r, "agent-n2", "replica-2"), "inside the rack");
        for outside in ["replica-1", "replica-3", "agent-n1", "agent-n3", HOST] {
            for inside in ["replica-2", "agent-n2"] {
                assert!(has(&r, inside, outside) && has(&r, outside, inside), "{inside} - {outside}");
            }
        }
        assert!(!has(&r, "replica-1", "agent-n1"), "the other racks keep their links");
    }

    #[test]
    fn an_isolated_replica_or_cut_agent_loses_what_it_should() {
        let r = Fault::Isolate { replica: 2, leader: true }.rules(&topology());
        assert_eq!(r.len(), 2 * 6, "every other process and the clients, both ways");
        assert!(has(&r, HOST, "replica-3") && has(&r, "agent-n3", "replica-3"));
        let r = Fault::CutAgent { name: "n1".into() }.rules(&topology());
        assert_eq!(r.len(), 2 * 3, "every replica, both ways: {r:?}");
        assert!(!has(&r, "agent-n1", HOST));
    }

    #[test]
    fn one_way_cuts_drop_a_single_direction() {
        let t = topology();
        let deaf = Fault::OneWay(OneWay::LeaderDeaf { replica: 0 }).rules(&t);
        assert!(has(&deaf, "replica-2", "replica-1") && !has(&deaf, "replica-1", "replica-2"));
        let mute = Fault::OneWay(OneWay::LeaderMute { replica: 0 }).rules(&t);
        assert!(has(&mute, "replica-1", "replica-2") && !has(&mute, "replica-2", "replica-1"));
        let deaf = Fault::OneWay(OneWay::AgentDeaf { name: "n2".into() }).rules(&t);
        assert!(has(&deaf, "replica-3", "agent-n2") && !has(&deaf, "agent-n2", "replica-3"));
        let mute = Fault::OneWay(OneWay::AgentMute { name: "n2".into() }).rules(&t);
        assert!(has(&mute, "agent-n2", "replica-3") && !has(&mute, "replica-3", "agent-n2"));
        assert!(Fault::KillAgent { name: "n2".into() }.rules(&t).is_empty(), "a process fault cuts nothing");
    }
}
