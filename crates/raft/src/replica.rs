//! A replica: one member of the raft cluster, with its storage, its transport and the API
//! the server uses (write, read, membership, metrics).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_model::format::{self, DATA_FORMAT, Reads, UNREPORTED_FORMAT};
use baton_model::{Command, Op, Response, State};
use baton_proto::v1::raft_transport_server::RaftTransportServer;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpIncoming};

use crate::addrs::Addrs;
use crate::batcher::{self, Pending};
use crate::campaign::{self, Campaign};
use crate::codec::encoded_len;
use crate::datadir;
use crate::error::{MembershipError, OpenError, ReadError, ServeError, WriteError};
use crate::forwarder::{self, Forward};
use crate::identity::check_cluster_id;
use crate::metrics::ReplicaMetrics;
use crate::net::dialer::Dialer;
use crate::net::peers::Peers;
use crate::net::raft_network::NetworkFactory;
use crate::net::service::RaftService;
use crate::racks::{self, Racks};
use crate::settings::RaftSettings;
use crate::stats::{SharedStats, WriteCounts};
use crate::store::{DiskHealth, KvStore, LogStore, MemKv, SmShared, StateMachineStore};
use crate::types::{LogId, NodeId, Raft, RaftMetrics};

/// How many leadership checks one linearizable read may take (see `read_index_here`): a
/// check that misses its quorum by chance misses five in a row only when something is
/// really wrong (7% of checks missed on the slow links of `tests/suite/partition.rs`).
pub const READ_CHECK_ATTEMPTS: u32 = 5;

/// This build's version, reported to the other replicas and shown by `cluster info`.
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Longest a write of a newer format waits to hear which formats members not heard from
/// yet read (they are asked at once; an answer takes one round trip).
pub const FORMAT_WAIT_MS: u64 = 3_000;
/// The accounting store's directory inside a data directory.
pub const ACCOUNTING_DIR: &str = "accounting";
/// How often such a write looks again.
const FORMAT_POLL_MS: u64 = 20;

/// What openraft answers to a membership change.
type MembershipWrite = Result<
    openraft::raft::ClientWriteResponse<crate::types::TypeConfig>,
    RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
>;

/// Where a replica keeps its log and snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// A data directory (created on first start).
    Disk(PathBuf),
    /// Nothing survives the process: for tests and simulations.
    Memory,
    /// A store the caller built (a simulated disk in power-loss and fault tests).
    Store(SharedStore),
}

/// A caller's store, shared with the replica. Compared by identity.
#[derive(Clone)]
pub struct SharedStore(pub Arc<dyn KvStore>);

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedStore({})", self.0.location(crate::store::Space::Log))
    }
}

impl PartialEq for SharedStore {
    fn eq(&self, other: &SharedStore) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedStore {}

/// How to start a replica.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub node_id: NodeId,
    /// Shared by every replica of one cluster; stored in the data directory and carried on
    /// every RPC.
    pub cluster_id: String,
    /// Where others reach this replica, as the membership records it: `API` (raft on the
    /// API port) or `API/PEER` (a peer port of its own; see [`crate::addrs`]).
    pub advertise_addr: String,
    pub storage: Storage,
    pub settings: RaftSettings,
    /// The rack this replica runs in (`--rack`), reported to the others; None: not given.
    pub rack: Option<String>,
    /// The newest data format this replica says it reads: [`DATA_FORMAT`], or lower to act
    /// as an older build for tests and upgrade rehearsals (`--max-format`); from
    /// [`UNREPORTED_FORMAT`] to [`DATA_FORMAT`]. It changes what the leader holds back, not
    /// what this build decodes.
    pub max_format: u32,
    /// The clock a forwarded write is stamped with on the leader.
    pub clock: WallClock,
}

/// Milliseconds since the Unix epoch as this replica reads them: the system's clock, or a
/// simulation's (whose runs must not depend on when they ran).
#[derive(Clone)]
pub struct WallClock(pub Arc<dyn Fn() -> u64 + Send + Sync>);

impl WallClock {
    pub fn system() -> WallClock {
        WallClock(Arc::new(|| {
            // 0 if the clock reads before 1970.
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
        }))
    }

    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }
}

impl std::fmt::Debug for WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WallClock({})", self.now_ms())
    }
}

impl ReplicaConfig {
    /// A replica with its data in `data_dir` and default settings.
    pub fn new(
        node_id: NodeId,
        cluster_id: impl Into<String>,
        advertise_addr: impl Into<String>,
        data_dir: impl Into<PathBuf>,
    ) -> ReplicaConfig {
        ReplicaConfig {
            node_id,
            cluster_id: cluster_id.into(),
            advertise_addr: advertise_addr.into(),
            storage: Storage::Disk(data_dir.into()),
            settings: RaftSettings::default(),
            rack: None,
            max_format: DATA_FORMAT,
            clock: WallClock::system(),
        }
    }
}

/// The outcome of [`Replica::bootstrap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    Initialized,
    /// The cluster already had a membership; nothing was changed.
    AlreadyInitialized,
}

/// What the gRPC service and the public handle share.
pub(crate) struct Core {
    pub(crate) id: NodeId,
    pub(crate) cluster_id: String,
    pub(crate) addr: String,
    pub(crate) rack: Option<String>,
    /// The newest data format this replica says it reads ([`ReplicaConfig::max_format`]).
    pub(crate) max_format: u32,
    pub(crate) clock: WallClock,
    pub(crate) settings: RaftSettings,
    pub(crate) raft: Raft,
    sm: Arc<SmShared>,
    kv: Arc<dyn KvStore>,
    disk: DiskHealth,
    pub(crate) campaign: Arc<Campaign>,
    pub(crate) peers: Arc<Peers>,
    racks: Arc<Racks>,
    /// While leadership is handed to this replica, writes are refused.
    transferring: Mutex<Option<NodeId>>,
    /// The last snapshot this replica refused because it needs a newer data format than it
    /// reads (why, in words), for operators and tests; None: none refused since it started.
    pub(crate) snapshot_refused: Mutex<Option<String>>,
    write_slots: Semaphore,
    /// Writes forwarded here by other replicas (their clients') and not yet answered.
    pub(crate) forwarded_waiting: crate::in_flight::InFlight,
    batcher: mpsc::Sender<Pending>,
    forwarder: mpsc::Sender<Forward>,
    stats: SharedStats,
    /// The last log id in this replica's log when it opened: no linearizable read served
    /// here waits for less (see [`Core::read_index_here`]).
    read_floor: Option<LogId>,
    /// When (on the held-back clock) a stamp held back by the quorum's time was last logged.
    skew_warned_ms: std::sync::atomic::AtomicU64,
    /// The replicated clock as this replica saw it: its bound without samples (see `skew`).
    anchor: crate::skew::Anchor,
    /// Judges membership changes forwarded here (see `membership`).
    pub(crate) membership_gate: std::sync::OnceLock<crate::membership::MembershipGate>,
}

/// A replica whose clock runs ahead says so in its log at most this often.
const SKEW_WARN_EVERY_MS: u64 = 60_000;

/// One member of the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Replica {
    core: Arc<Core>,
}

/// Whether `m` names a leader whose address this replica knows. A follower learns of a new
/// leader from its first message, and a heartbeat can come before the entries that carry the
/// membership; until those arrive it knows the leader's id and not where it is.
fn knows_a_reachable_leader(m: &RaftMetrics) -> bool {
    m.current_leader.is_some_and(|id| m.membership_config.membership().get_node(&id).is_some())
}

/// The leader `raft` knows of, and its addresses.
pub(crate) fn known_leader(raft: &Raft) -> Option<(NodeId, Option<Addrs>)> {
    let m = raft.metrics();
    let m = m.borrow();
    let id = m.current_leader?;
    let addrs = m.membership_config.membership().get_node(&id).map(|n| Addrs::parse(&n.addr));
    Some((id, addrs))
}

/// How long a request that finds no leader waits for an election to end before it is
/// answered "no leader yet". An election at the default timings takes one to a few
/// election timeouts (150-300 ms each), more on a loaded machine; a client that heard "no
/// leader" only retries, so holding the request spares it that round trip (Consul and
/// Nomad hold RPCs the same way). Past 5 s a quorum is likely lost, and the client should
/// hear so.
pub const LEADER_HOLD_MS: u64 = 5_000;

impl Core {
    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.settings.request_timeout_ms)
    }

    /// The leader this replica knows of, and its addresses.
    fn leader(&self) -> Option<(NodeId, Option<Addrs>)> {
        known_leader(&self.raft)
    }

    /// The leader, waiting for one while an election runs, and for its address while the
    /// membership is on its way: at most [`LEADER_HOLD_MS`], and never past the request's own
    /// deadline. Nothing was sent yet, so waiting is safe for writes too.
    async fn leader_after_election(&self) -> Option<(NodeId, Option<Addrs>)> {
        if let known @ Some((_, Some(_))) = self.leader() {
            return known;
        }
        let hold = Duration::from_millis(LEADER_HOLD_MS.min(self.settings.request_timeout_ms));
        // A timeout or a stopped raft leave no leader, or one without an address, which the
        // caller reports.
        let _ = self.raft.wait(Some(hold)).metrics(knows_a_reachable_leader, "a leader with an address").await;
        self.leader()
    }

    /// The latest time this replica may stamp into a command, and whether the other voters'
    /// clocks set it: their time plus `skew::MAX_CLOCK_SKEW_MS`; without a quorum of samples,
    /// the replicated clock as first seen plus the time since (see `skew`).
    fn stamp_ceiling(&self) -> (u64, bool) {
        let voters: std::collections::BTreeSet<NodeId> =
            self.raft.metrics().borrow().membership_config.membership().voter_ids().collect();
        let local = self.clock.now_ms();
        let replicated_ms = || self.sm.read(|s| s.now_ms());
        let now = tokio::time::Instant::now();
        crate::skew::stamp_ceiling_at(&self.peers.skew, &self.anchor, self.id, &voters, local, replicated_ms, now)
    }

    /// This replica's time as it stamps commands: its clock, held back to the quorum's when
    /// it runs ahead of it.
    pub(crate) fn now_ms(&self) -> u64 {
        let local = self.clock.now_ms();
        local.min(self.stamp_ceiling().0)
    }

    /// `cmd` stamped no later than the quorum's time allows: a leader whose clock runs ahead
    /// must not move the replicated clock with it (it never goes back).
    fn held_to_the_quorums_time(&self, mut cmd: Command) -> Command {
        let (ceiling, by_samples) = self.stamp_ceiling();
        if cmd.now_ms > ceiling {
            let ahead_ms = cmd.now_ms - ceiling;
            let last = self.skew_warned_ms.load(std::sync::atomic::Ordering::Relaxed);
            // Held back by less than the bound without samples: its clock is about right, it
            // only waits for its peers' replies.
            let far = by_samples || ahead_ms > crate::skew::MAX_CLOCK_SKEW_MS;
            if far && ceiling.saturating_sub(last) >= SKEW_WARN_EVERY_MS {
                self.skew_warned_ms.store(ceiling, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    ahead_ms,
                    "this replica's clock runs ahead of the other voters'; commands are stamped with theirs (fix its time)"
                );
            }
            cmd.now_ms = ceiling;
        }
        cmd
    }

    /// Proposes `cmd` on this replica, which must be the leader. Never forwards.
    pub(crate) async fn write_here(&self, cmd: Command) -> Result<Response, WriteError> {
        let cmd = self.held_to_the_quorums_time(cmd);
        let limit = self.settings.max_command_bytes;
        let bytes = encoded_len(&cmd).map_err(|e| WriteError::Encode(e.to_string()))?;
        if bytes > limit {
            return Err(WriteError::TooLarge { bytes, limit });
        }
        let _slot = self
            .write_slots
            .try_acquire()
            .map_err(|_| WriteError::Overloaded { limit: self.settings.max_pending_writes })?;
        if let Some(e) = self.disk.failing() {
            return Err(WriteError::DiskFailing { location: e.location, reason: e.message });
        }
        if let Some(to) = self.transferring() {
            return Err(WriteError::Transferring { to });
        }
        if !self.is_leader() {
            return Err(match self.leader() {
                Some((leader_id, Some(at))) => WriteError::NotLeader { leader_id, leader_addr: at.api },
                _ => WriteError::NoLeader,
            });
        }
        if cmd.op.format() > UNREPORTED_FORMAT {
            self.formats_allow(&cmd.op).await?;
        }
        let (reply, answer) = oneshot::channel();
        let pending = Pending { cmd, bytes, reply };
        let timeout_ms = self.settings.request_timeout_ms;
        let wait = async {
            self.batcher.send(pending).await.map_err(|_| WriteError::Stopped)?;
            self.stats.queued();
            answer.await.map_err(|_| WriteError::Stopped)?
        };
        tokio::time::timeout(self.request_timeout(), wait).await.map_err(|_| WriteError::Timeout { timeout_ms })?
    }

    /// What every member (voters and learners: a learner that cannot decode an entry never
    /// catches up to vote) reads, as this replica last heard it.
    ///
    /// A member this replica's process never heard (down or cut off since before it started)
    /// is [`Reads::Unknown`], whether or not it was asked: the gate takes it as reading the
    /// newest format the cluster has already used, and nothing newer ([`Reads::newest`]).
    /// Leaving it out instead let an upgraded, restarted leader raise the behaviour past an
    /// older replica that had lost power (simulator seed 800 of one minute). Only commands of
    /// a format the cluster never used wait for it, so the one failure a cluster survives
    /// costs no write it could make before. It is asked every second.
    fn member_formats(&self) -> Vec<(NodeId, Reads)> {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.membership_config
            .membership()
            .nodes()
            .map(|(id, n)| {
                if *id == self.id {
                    return (*id, Reads::Format(self.max_format));
                }
                let peer = Addrs::parse(&n.addr).peer;
                (*id, self.racks.get(*id, &peer).map_or(Reads::Unknown, |h| Reads::Format(h.format)))
            })
            .collect()
    }

    /// Refuses `op` if some member cannot decode it ([`baton_model::format`]). A member not
    /// heard yet (just after this replica started, or down) is asked at once and waited for, up to
    /// [`FORMAT_WAIT_MS`]; one that reads an older format refuses the write at once.
    async fn formats_allow(&self, op: &baton_model::Op) -> Result<(), WriteError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(FORMAT_WAIT_MS);
        loop {
            let err = match format::check(op, self.member_formats(), self.format_used()) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let waiting = err.behind.iter().all(|(_, r)| *r == Reads::Unknown);
            if !waiting || tokio::time::Instant::now() >= deadline {
                return Err(WriteError::FormatBehind(err));
            }
            self.racks.ask_now();
            tokio::time::sleep(Duration::from_millis(FORMAT_POLL_MS)).await;
        }
    }

    /// The applied state encoded, its index, and the data format it needs.
    pub(crate) fn sm_snapshot(&self) -> (u64, u32, Result<Vec<u8>, crate::codec::CodecError>) {
        self.sm.encode_state()
    }

    /// The data format the applied state needs: the newest this cluster has used (see
    /// `store::snapshot_record`).
    pub(crate) fn format_used(&self) -> u32 {
        self.sm.format_used()
    }

    pub(crate) fn set_transferring(&self, to: Option<NodeId>) {
        *self.transferring.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }

    fn transferring(&self) -> Option<NodeId> {
        *self.transferring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_leader(&self) -> bool {
        self.leader().is_some_and(|(id, _)| id == self.id)
    }

    /// On the leader: the log id a linearizable read must wait for, once a quorum confirmed
    /// this replica still leads.
    ///
    /// openraft gives each leadership check one heartbeat interval to hear from a quorum; on
    /// a loaded machine or a slow link a check misses that now and then although this
    /// replica leads, so a missed check is tried again, up to [`READ_CHECK_ATTEMPTS`] in
    /// all. Each try is a fresh round of heartbeats, so a retry proves leadership as well as
    /// the first try would; a leader that really lost its quorum misses every one.
    ///
    /// The index is never below [`Core::read_floor`], the last log id this replica held when
    /// it opened. openraft answers max(first entry of this leader's term, committed), which
    /// is not enough for a leader restarted quickly: it finds its own committed vote and
    /// leads again in the same term without an election, so the first entry of its term is
    /// old, and its committed index is the one stored before it stopped, which may lag (the
    /// log store saves it without waiting for a flush). Entries of its term that were
    /// committed, acknowledged and applied before the stop may lie above both, and a read
    /// would miss them. Such entries are in its log: a leader appends what it proposes to
    /// its own log, and an append is acknowledged only once flushed.
    ///
    /// Taking the larger of the two log ids (compared term first, then index) is safe:
    /// - The floor's leader id is never above the vote's: a replica stores a leader's vote
    ///   before that leader's entries, and votes only grow.
    /// - The floor of the same leader id (the restored leader): entries this leader
    ///   proposed, which no one truncates while it leads; it commits them by leading, so
    ///   the wait ends, and every entry acknowledged in its term before the stop is at or
    ///   below its last log entry, hence covered.
    /// - A floor of an earlier leader (any replica elected since it opened, including a
    ///   follower whose uncommitted tail a later leader truncated): the new leader's first
    ///   entry has a higher leader id and wins, whatever the indexes, so the read waits for
    ///   nothing that may have been truncated; openraft's own argument covers it (an entry
    ///   of its own term committed means everything before it is).
    pub(crate) async fn read_index_here(&self) -> Result<Option<LogId>, ReadError> {
        let mut attempt = 1;
        loop {
            match self.check_leadership().await {
                Err(ReadError::QuorumLost(why)) if attempt < READ_CHECK_ATTEMPTS => {
                    tracing::debug!(attempt, %why, "leadership check missed a quorum; checking again");
                    attempt += 1;
                }
                other => return other.map(|read_log_id| read_log_id.max(self.read_floor)),
            }
        }
    }

    async fn check_leadership(&self) -> Result<Option<LogId>, ReadError> {
        use openraft::error::CheckIsLeaderError;
        match self.raft.get_read_log_id().await {
            Ok((read_log_id, _applied)) => Ok(read_log_id),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(match (f.leader_id, f.leader_node) {
                    (Some(leader_id), Some(node)) => {
                        ReadError::NotLeader { leader_id, leader_addr: Addrs::parse(&node.addr).api }
                    }
                    _ => ReadError::NoLeader,
                })
            }
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(e))) => {
                Err(ReadError::QuorumLost(e.to_string()))
            }
            Err(RaftError::Fatal(_)) => Err(ReadError::Stopped),
        }
    }
}

impl Replica {
    /// Opens the replica's storage and starts raft, reaching peers over TCP. It serves RPCs
    /// once [`Replica::run`] (or [`Replica::serve_incoming`]) is called.
    pub async fn open(config: ReplicaConfig) -> Result<Replica, OpenError> {
        let dialer = Dialer::tcp(Duration::from_millis(config.settings.rpc_timeout_ms));
        Replica::open_with(config, dialer).await
    }

    /// Like [`Replica::open`], reaching peers through `dialer`.
    pub async fn open_with(config: ReplicaConfig, dialer: Dialer) -> Result<Replica, OpenError> {
        check_cluster_id(&config.cluster_id)?;
        if !(UNREPORTED_FORMAT..=DATA_FORMAT).contains(&config.max_format) {
            return Err(OpenError::MaxFormat {
                given: config.max_format,
                oldest: UNREPORTED_FORMAT,
                newest: DATA_FORMAT,
            });
        }
        let raft_config = config.settings.to_openraft(&config.cluster_id)?;
        let kv: Arc<dyn KvStore> = match &config.storage {
            Storage::Disk(dir) => datadir::open(dir, &config.cluster_id, config.node_id)?,
            Storage::Memory => Arc::new(MemKv::new()),
            Storage::Store(s) => s.0.clone(),
        };
        let log = LogStore::open(kv.clone(), config.settings.log_write_queue_len)?;
        let stats = log.stats();
        let disk = log.disk_health();
        let last_log = log.last_log();
        let read_floor = last_log.get();
        let records = Arc::new(match &config.storage {
            Storage::Disk(dir) => baton_accounting::RecordStore::open(&dir.join(ACCOUNTING_DIR))
                .map_err(|e| OpenError::Accounting(e.to_string()))?,
            Storage::Memory | Storage::Store(_) => baton_accounting::RecordStore::memory(),
        });
        let sm = StateMachineStore::open_with(kv.clone(), records)?;
        let shared = sm.shared();
        let max_message_bytes = config.settings.max_message_bytes;
        let clock = config.clock.clone();
        let peers = Arc::new(Peers::new(config.cluster_id.clone(), config.node_id, max_message_bytes, dialer, clock));
        let network = NetworkFactory { peers: peers.clone(), stats: stats.clone() };
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log, sm)
            .await
            .map_err(|e| OpenError::Raft(e.to_string()))?;
        let batcher = batcher::start(raft.clone(), &config.settings, stats.clone());
        let forwarder = forwarder::start(raft.clone(), peers.clone(), &config.settings, stats.clone());
        // Each replica draws its own prompts (`campaign`), the same ones in every run.
        let campaign = Arc::new(Campaign::new(&config.settings, config.node_id, last_log));
        let guard_every = Duration::from_millis(config.settings.heartbeat_interval_ms);
        campaign::start(raft.clone(), campaign.clone(), peers.clone(), config.node_id, guard_every);
        let racks = Arc::new(Racks::default());
        racks::start(raft.clone(), racks.clone(), peers.clone(), config.node_id);
        tracing::info!(
            node_id = config.node_id,
            cluster_id = %config.cluster_id,
            addr = %config.advertise_addr,
            "replica started"
        );
        Ok(Replica {
            core: Arc::new(Core {
                id: config.node_id,
                cluster_id: config.cluster_id,
                addr: config.advertise_addr,
                rack: config.rack,
                max_format: config.max_format,
                clock: config.clock.clone(),
                write_slots: Semaphore::new(config.settings.max_pending_writes),
                forwarded_waiting: crate::in_flight::InFlight::default(),
                batcher,
                forwarder,
                stats,
                settings: config.settings,
                raft,
                sm: shared,
                kv,
                disk,
                campaign,
                peers,
                racks,
                transferring: Mutex::new(None),
                snapshot_refused: Mutex::new(None),
                read_floor,
                skew_warned_ms: std::sync::atomic::AtomicU64::new(0),
                anchor: crate::skew::Anchor::default(),
                membership_gate: std::sync::OnceLock::new(),
            }),
        })
    }

    pub fn id(&self) -> NodeId {
        self.core.id
    }

    /// The state digest this replica writes when it leads (see `digest`): a mark, carrying
    /// its own hash of the newest mark it applied, which every replica compares with its own.
    pub fn state_digest_op(&self) -> Op {
        Op::StateDigest(self.core.sm.newest_mark())
    }

    /// What this replica made of the state digests since it started.
    pub fn digest_counts(&self) -> crate::store::DigestCounts {
        self.core.sm.digest_counts()
    }

    /// This replica's accounting records (issue 34).
    pub fn records(&self) -> Arc<baton_accounting::RecordStore> {
        self.core.sm.records().clone()
    }

    pub fn cluster_id(&self) -> &str {
        &self.core.cluster_id
    }

    pub fn addr(&self) -> &str {
        &self.core.addr
    }

    /// This replica's rack (`--rack`), if it was given one.
    pub fn rack(&self) -> Option<&str> {
        self.core.rack.as_deref()
    }

    /// Each member's rack as last heard from it: `Some("")` for a member that has none,
    /// `None` for one not heard from yet (unreachable, or just started).
    pub fn racks(&self) -> BTreeMap<NodeId, Option<String>> {
        let m = self.metrics();
        m.members
            .iter()
            .map(|(id, addr)| {
                let rack = if *id == self.core.id {
                    Some(self.core.rack.clone().unwrap_or_default())
                } else {
                    self.core.racks.get(*id, &addr.peer).map(|h| h.rack)
                };
                (*id, rack)
            })
            .collect()
    }

    /// Each member's build as last heard from it: the newest data format it reads, and its
    /// version (empty from a build that does not say).
    pub fn builds(&self) -> BTreeMap<NodeId, Option<(u32, String)>> {
        let m = self.metrics();
        m.members
            .iter()
            .map(|(id, addr)| {
                let build = if *id == self.core.id {
                    Some((self.core.max_format, BUILD_VERSION.to_string()))
                } else {
                    self.core.racks.get(*id, &addr.peer).map(|h| (h.format, h.version))
                };
                (*id, build)
            })
            .collect()
    }

    /// The oldest data format a member reads, as the format gate sees it now (a member not
    /// heard from yet counts as reading the newest format the cluster has used, and at least
    /// [`UNREPORTED_FORMAT`]): what the leader can commit without waiting for an upgrade.
    pub fn oldest_format(&self) -> u32 {
        let used = self.core.format_used();
        let reads = self.core.member_formats().into_iter().map(|(_, r)| r.newest(used));
        reads.min().unwrap_or(self.core.max_format)
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    pub(crate) fn from_core(core: Arc<Core>) -> Replica {
        Replica { core }
    }

    pub fn settings(&self) -> &RaftSettings {
        &self.core.settings
    }

    /// The underlying openraft handle, for what this API does not cover.
    pub fn raft(&self) -> &Raft {
        &self.core.raft
    }

    /// The raft transport as a tonic service, with the message bounds applied, for a server
    /// that hosts other services on the same port.
    pub fn service(&self) -> RaftTransportServer<RaftService> {
        let max = self.core.settings.max_message_bytes;
        RaftTransportServer::new(RaftService::new(self.core.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }

    /// Serves raft RPCs on `listener` until `shutdown` completes.
    pub async fn run(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        self.serve_incoming(incoming, shutdown).await
    }

    /// Serves raft RPCs on any stream of connections until `shutdown` completes.
    pub async fn serve_incoming<I, IO, IE>(
        &self,
        incoming: I,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError>
    where
        I: Stream<Item = Result<IO, IE>>,
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        tonic::transport::Server::builder()
            // Bounds what one peer connection can have in flight.
            .concurrency_limit_per_connection(1_024)
            .add_service(self.service())
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await?;
        Ok(())
    }

    /// Makes `members` the first membership of a new cluster. Call it on one replica, once;
    /// on a cluster that already has a membership it changes nothing.
    pub async fn bootstrap(&self, members: BTreeMap<NodeId, String>) -> Result<Bootstrap, MembershipError> {
        let nodes: BTreeMap<NodeId, BasicNode> =
            members.into_iter().map(|(id, addr)| (id, BasicNode::new(addr))).collect();
        match self.core.raft.initialize(nodes).await {
            Ok(()) => Ok(Bootstrap::Initialized),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(Bootstrap::AlreadyInitialized),
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => Err(MembershipError::Refused(e.to_string())),
            Err(RaftError::Fatal(_)) => Err(MembershipError::Stopped),
        }
    }

    /// Applies `cmd` through the log and returns what the state machine answered. On a
    /// follower the write is forwarded to the leader; if the leader cannot be reached the
    /// error carries its address. While an election runs it waits for its leader first.
    pub async fn write(&self, cmd: Command) -> Result<Response, WriteError> {
        match self.core.leader_after_election().await {
            None => Err(WriteError::NoLeader),
            Some((id, _)) if id == self.core.id => self.core.write_here(cmd).await,
            Some((leader_id, None)) => Err(WriteError::ForwardFailed {
                leader_id,
                leader_addr: String::new(),
                reason: "the leader's address is not in the membership".into(),
            }),
            // The leader refuses a forwarded leader-only operation (`admit_forwarded`):
            // sending it would only cost the leader a refusal. A deposed leader's loops
            // (liveness, registrations) meet this at each write until they see the new term.
            Some((leader_id, Some(at))) if cmd.op.leader_only() => {
                Err(WriteError::NotLeader { leader_id, leader_addr: at.api })
            }
            Some((_, Some(_))) => {
                let limit = self.core.settings.max_command_bytes;
                let bytes = encoded_len(&cmd).map_err(|e| WriteError::Encode(e.to_string()))?;
                if bytes > limit {
                    return Err(WriteError::TooLarge { bytes, limit });
                }
                // Forwarded writes count against this replica's bound too.
                let _slot = self
                    .core
                    .write_slots
                    .try_acquire()
                    .map_err(|_| WriteError::Overloaded { limit: self.core.settings.max_pending_writes })?;
                self.core.stats.forwarded();
                // To the forwarder, which sends the writes waiting together in one call (to
                // the leader it knows then).
                let (reply, answer) = oneshot::channel();
                let timeout_ms = self.core.settings.request_timeout_ms;
                let wait = async {
                    self.core.forwarder.send(Forward { cmd, bytes, reply }).await.map_err(|_| WriteError::Stopped)?;
                    answer.await.map_err(|_| WriteError::Stopped)?
                };
                tokio::time::timeout(self.core.request_timeout(), wait)
                    .await
                    .map_err(|_| WriteError::Timeout { timeout_ms })?
            }
        }
    }

    /// Applies `cmd` only if this replica is the leader; otherwise refuses with the leader's
    /// address (for a server that redirects its clients instead of forwarding).
    pub async fn write_on_leader(&self, cmd: Command) -> Result<Response, WriteError> {
        self.core.write_here(cmd).await
    }

    /// Runs `f` on a state that reflects every write acknowledged before the call
    /// (linearizable). Works on any replica: a follower asks the leader for the read index
    /// and waits until it has applied that far.
    pub async fn read<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, ReadError> {
        let timeout_ms = self.core.settings.request_timeout_ms;
        tokio::time::timeout(self.core.request_timeout(), self.catch_up_to_read_index())
            .await
            .map_err(|_| ReadError::Timeout { timeout_ms })??;
        Ok(self.core.sm.read(f))
    }

    async fn catch_up_to_read_index(&self) -> Result<(), ReadError> {
        let read_index = match self.core.leader_after_election().await {
            None => return Err(ReadError::NoLeader),
            Some((id, _)) if id == self.core.id => self.core.read_index_here().await?,
            Some((leader_id, None)) => {
                return Err(ReadError::ForwardFailed {
                    leader_id,
                    leader_addr: String::new(),
                    reason: "the leader's address is not in the membership".into(),
                });
            }
            Some((leader_id, Some(at))) => {
                self.core.peers.read_index(leader_id, &at.peer, self.core.request_timeout()).await?
            }
        };
        if let Some(id) = read_index {
            self.core
                .raft
                .wait(None)
                .applied_index_at_least(Some(id.index), "linearizable read")
                .await
                .map_err(|_| ReadError::Stopped)?;
        }
        Ok(())
    }

    /// This replica's time as it stamps commands: its wall clock, held back to the other
    /// voters' when it runs ahead of theirs (`skew`). The leader decides by it.
    pub fn now_ms(&self) -> u64 {
        self.core.now_ms()
    }

    /// Runs `f` on this replica's applied state, without asking anyone: fast, possibly stale.
    pub fn read_local<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        self.core.sm.read(f)
    }

    /// Events of the commands this replica applies from now on (bounded; a receiver that
    /// falls behind gets `RecvError::Lagged`).
    pub fn subscribe_events(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<[baton_model::event::Event]>> {
        self.core.sm.subscribe_events()
    }

    /// Has `observer` told how long each command this replica applies from now on took, by
    /// kind (for an apply-time histogram).
    pub fn observe_applies(&self, observer: crate::store::ApplyObserver) {
        self.core.sm.observe_applies(observer);
    }

    /// The data format this replica's applied state needs: the newest format of anything
    /// the cluster committed into it, never below the snapshot layout's.
    pub fn format_used(&self) -> u32 {
        self.core.format_used()
    }

    /// Why this replica last refused a snapshot from the leader (it needs a newer data
    /// format than this replica reads); None if it refused none since it started.
    pub fn snapshot_refused(&self) -> Option<String> {
        self.core.snapshot_refused.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The index of the last entry applied to this replica's state.
    pub fn applied_index(&self) -> Option<u64> {
        self.core.sm.last_applied().map(|l| l.index)
    }

    pub(crate) fn require_leader(&self) -> Result<(), MembershipError> {
        match self.core.leader() {
            Some((id, _)) if id == self.core.id => Ok(()),
            Some((leader_id, at)) => {
                Err(MembershipError::NotLeader { leader_id, leader_addr: at.map(|a| a.api).unwrap_or_default() })
            }
            None => Err(MembershipError::NoLeader),
        }
    }

    fn membership_result(
        &self,
        r: Result<MembershipWrite, tokio::time::error::Elapsed>,
    ) -> Result<(), MembershipError> {
        match r {
            Err(_) => Err(MembershipError::Timeout { timeout_ms: self.core.settings.membership_timeout_ms }),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(match (f.leader_id, f.leader_node) {
                    (Some(leader_id), Some(n)) => {
                        MembershipError::NotLeader { leader_id, leader_addr: Addrs::parse(&n.addr).api }
                    }
                    _ => MembershipError::NoLeader,
                })
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                Err(MembershipError::Refused(e.to_string()))
            }
            Ok(Err(RaftError::Fatal(_))) => Err(MembershipError::Stopped),
        }
    }

    /// Adds replica `id` at `addr` (`API` or `API/PEER`) as a learner and waits until it has
    /// caught up. The replica is asked who it is first, at its peer address: one of another
    /// cluster, or another replica at that address, is refused.
    pub async fn add_learner(&self, id: NodeId, addr: &str) -> Result<(), MembershipError> {
        self.require_leader()?;
        // A leader of an older configuration may still count a removed id as its voter.
        if self.core.sm.read(|s| s.retired_replicas().contains(id)) {
            return Err(MembershipError::Retired { id });
        }
        let peer = Addrs::check_member(addr).map_err(MembershipError::Refused)?.peer;
        let timeout = Duration::from_millis(self.core.settings.rpc_timeout_ms);
        let who = self
            .core
            .peers
            .identify(&peer, timeout)
            .await
            .map_err(|e| MembershipError::Unreachable { addr: addr.to_string(), reason: e.to_string() })?;
        if who.cluster_id != self.core.cluster_id {
            return Err(MembershipError::ForeignCluster {
                addr: addr.to_string(),
                theirs: who.cluster_id,
                ours: self.core.cluster_id.clone(),
            });
        }
        if who.node_id != id {
            return Err(MembershipError::WrongNode { addr: addr.to_string(), expected: id, found: who.node_id });
        }
        // Checked before any change: a member that cannot read what the cluster committed
        // would stop at the first such entry or snapshot, and the gate would then hold back
        // every newer command for it.
        let reads = if who.max_format == 0 { UNREPORTED_FORMAT } else { who.max_format };
        let used = self.format_used();
        if reads < used {
            return Err(MembershipError::FormatBehind { id, addr: addr.to_string(), reads, used });
        }
        let r = tokio::time::timeout(
            Duration::from_millis(self.core.settings.membership_timeout_ms),
            self.core.raft.add_learner(id, BasicNode::new(addr), true),
        )
        .await;
        self.membership_result(r)
    }

    /// Makes learner `id` a voter.
    pub async fn promote(&self, id: NodeId) -> Result<(), MembershipError> {
        self.require_leader()?;
        if !self.metrics().members.contains_key(&id) {
            return Err(MembershipError::UnknownNode(id));
        }
        self.change(ChangeMembers::AddVoterIds(BTreeSet::from([id]))).await
    }

    /// Removes replica `id` (voter or learner) from the cluster.
    pub async fn remove(&self, id: NodeId) -> Result<(), MembershipError> {
        self.require_leader()?;
        let m = self.metrics();
        if m.voters.contains(&id) {
            // `retain = false` in `change` drops it as a learner too.
            self.change(ChangeMembers::RemoveVoters(BTreeSet::from([id]))).await
        } else if m.learners.contains(&id) {
            self.change(ChangeMembers::RemoveNodes(BTreeSet::from([id]))).await
        } else {
            Err(MembershipError::UnknownNode(id))
        }
    }

    async fn change(&self, changes: ChangeMembers<NodeId, BasicNode>) -> Result<(), MembershipError> {
        let r = tokio::time::timeout(
            Duration::from_millis(self.core.settings.membership_timeout_ms),
            self.core.raft.change_membership(changes, false),
        )
        .await;
        self.membership_result(r)
    }

    /// What this replica's write path has done since it started (see [`WriteCounts`]).
    pub fn write_counts(&self) -> WriteCounts {
        self.core.stats.counts()
    }

    /// This replica's current term: [`Replica::metrics`]' `term` without copying the
    /// membership, for a caller that needs nothing else (one per request).
    pub fn term(&self) -> u64 {
        self.core.raft.metrics().borrow().current_term
    }

    /// Whether writes forwarded here by other replicas wait for their answer now: on the
    /// leader, the clients of the other replicas.
    pub fn forwarded_writes_wait(&self) -> bool {
        self.core.forwarded_waiting.any()
    }

    /// Whether the leader this replica follows is heard from: an AppendEntries of its
    /// within two heartbeat intervals. Followers keep naming a leader that died until they
    /// elect another; one not heard from this long is likely gone.
    pub fn leader_heard_recently(&self) -> bool {
        let within = Duration::from_millis(self.core.settings.heartbeat_interval_ms.saturating_mul(2));
        self.core.campaign.leader_heard_within(within)
    }

    /// This replica's view of itself and the cluster, now.
    pub fn metrics(&self) -> ReplicaMetrics {
        ReplicaMetrics::from_raft(&self.core.raft.metrics().borrow())
    }

    /// Completes when raft stops on its own (a log it could not write or sync, a panic in
    /// its core), with the reason; never for a requested shutdown. A replica whose raft
    /// stopped serves nothing but stale local reads, so its owner should end and be
    /// restarted rather than keep answering UNAVAILABLE.
    pub async fn failed(&self) -> String {
        let mut metrics = self.core.raft.metrics();
        loop {
            if let Some(reason) = self.failure(&metrics.borrow_and_update().running_state) {
                return reason;
            }
            if metrics.changed().await.is_err() {
                // The core is gone without reporting a failure: a shutdown.
                return std::future::pending().await;
            }
        }
    }

    /// Why this replica cannot take writes right now, if it cannot: its raft stopped, or its
    /// disk refuses writes (while the log writer retries). `None` when healthy.
    pub fn failure_now(&self) -> Option<String> {
        let stopped = self.failure(&self.core.raft.metrics().borrow().running_state);
        stopped.or_else(|| self.core.disk.failing().map(|e| format!("disk failing: {}: {}", e.location, e.message)))
    }

    fn failure(&self, state: &Result<(), openraft::error::Fatal<NodeId>>) -> Option<String> {
        match state {
            Ok(()) | Err(openraft::error::Fatal::Stopped) => None,
            Err(fatal) => Some(match self.core.disk.failing() {
                Some(disk) => format!("{}: {} ({fatal})", disk.location, disk.message),
                None => fatal.to_string(),
            }),
        }
    }

    /// openraft's metrics, to wait on changes.
    pub fn watch(&self) -> watch::Receiver<RaftMetrics> {
        self.core.raft.metrics()
    }

    /// Stops raft, flushes and releases the storage, so the data directory can be opened
    /// again. The RPC server stops with the `shutdown` future given to `run`. Reads of the
    /// local state still work afterwards; everything else fails.
    pub async fn shutdown(&self) {
        if let Err(e) = self.core.raft.shutdown().await {
            tracing::warn!(error = %e, "raft task ended with an error");
        }
        if let Err(e) = self.core.kv.close() {
            tracing::warn!(error = %e, "closing storage failed");
        }
        if let Err(e) = self.core.sm.records().close() {
            tracing::warn!(error = %e, "closing the accounting store failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn follower_of(leader: Option<NodeId>, members: &[NodeId]) -> RaftMetrics {
        let mut m = RaftMetrics::new_initial(2);
        m.current_leader = leader;
        let ids: BTreeSet<NodeId> = members.iter().copied().collect();
        let nodes: BTreeMap<NodeId, crate::types::Node> =
            members.iter().map(|id| (*id, crate::types::Node::new(format!("10.0.0.{id}:7000")))).collect();
        let membership = openraft::Membership::new(vec![ids], nodes);
        m.membership_config = Arc::new(crate::types::StoredMembership::new(None, membership));
        m
    }

    /// A follower that heard the new leader's heartbeat before the entry that carries the
    /// membership knows the leader's id and not its address: a request there waits on, as it
    /// does while no leader is known (CI once saw "the leader's address is not in the
    /// membership" from a follower of a cluster just started).
    #[test]
    fn a_leader_is_reachable_only_once_the_membership_names_it() {
        assert!(!knows_a_reachable_leader(&follower_of(None, &[1, 2, 3])), "no leader yet");
        assert!(!knows_a_reachable_leader(&follower_of(Some(1), &[])), "the membership has not arrived");
        assert!(!knows_a_reachable_leader(&follower_of(Some(1), &[2, 3])), "the leader is not a member");
        assert!(knows_a_reachable_leader(&follower_of(Some(1), &[1, 2, 3])));
    }
}
