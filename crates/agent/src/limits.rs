//! Every bound the agent keeps, in one place, units last.

/// First step of the delay between failed attaches; doubles up to `MAX_BACKOFF_MS`, and each
/// wait is half its step plus a random share of the other half (`backoff`).
pub const MIN_BACKOFF_MS: u64 = 50;
/// Longest delay between attach attempts, so a new leader is found within about a second.
pub const MAX_BACKOFF_MS: u64 = 1_000;
/// After an attached stream is lost, the first dial again waits a random 0 to this many ms,
/// so that the agents of a whole cluster, which lose a dead leader in the same instant, reach
/// the new one spread over this window rather than at once. Small against the lease (at
/// least 1 s in practice) and the heartbeat timeout, so no node is declared lost for it.
pub const REATTACH_SPREAD_MS: u64 = 250;
/// How long dialing one replica may take before the next one is tried.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// How long a replica may take to answer an attach (the leader answers at once, a follower
/// refuses at once); one that accepts and stays silent (paused, or still starting) is left
/// for the next after this.
pub const ATTACH_TIMEOUT_MS: u64 = 1_000;
/// Hints followed in a row without backing off: stale hints between followers must not spin.
pub const MAX_HINTS_IN_A_ROW: u32 = 3;
/// How long one Report call may take; a stuck leader must not stall the heartbeat forever.
pub const REPORT_TIMEOUT_MS: u64 = 1_000;
/// Reports in a row that fail (time out or are refused) before the agent leaves the replica
/// it is attached to and looks for the leader again: a leader cut off from its quorum keeps
/// the directive stream open, and staying would get the node declared lost by the new one.
pub const REATTACH_AFTER_FAILED_REPORTS: u32 = 2;
/// Observations kept until the leader acknowledges them; beyond this the oldest progress
/// notes (`Checkpointed`) go. Exits and stops are never dropped (see `push_observation`).
pub const MAX_PENDING_OBSERVATIONS: usize = 10_000;
/// Observations sent in one Report, so the message stays small; the rest follow next beat.
pub const MAX_OBSERVATIONS_PER_REPORT: usize = 256;
/// Assignments accepted in one directive; a node never runs more replicas than this.
pub const MAX_ASSIGNMENTS_PER_DIRECTIVE: usize = 4_096;
/// Longest grace the agent honours for one STOP, whatever the leader sent.
pub const MAX_GRACE_MS: u64 = 3_600_000;
/// Default grace for a replica that is no longer wanted here (SIGTERM, then SIGKILL).
pub const DEFAULT_KILL_GRACE_MS: u64 = 5_000;
/// A stop signal sent this soon after a replica started may have reached it between fork
/// and exec, where the wrapper's handler swallows it; it is sent once more.
pub const SIGNAL_RACE_WINDOW_MS: u64 = 1_000;
/// When that second signal goes, after the first.
pub const SIGNAL_AGAIN_AFTER_MS: u64 = 200;
/// Opening the journal waits for its file lock up to `JOURNAL_LOCK_TRIES` times
/// `JOURNAL_LOCK_RETRY_MS` (2 s): a previous holder releases it a moment after it is done.
pub const JOURNAL_LOCK_TRIES: u32 = 100;
pub const JOURNAL_LOCK_RETRY_MS: u64 = 20;
/// A journal that cannot be written is reopened and tried again after a pause that doubles
/// from one tick up to this: reopening sled reads its whole log.
pub const JOURNAL_RETRY_MAX_MS: u64 = 5_000;
/// How often the supervisor looks at deadlines, adopted processes and log sizes.
pub const TICK_MS: u64 = 100;
/// How often the supervisor applies its last directive again on its own. A leader sends a
/// node's directive when it changes (or when the agent asks for a newer one), not on a
/// timer; what a directive left for later (a RUN that came while its replica was still
/// being killed, ...) is decided again this often, as a resend from the leader did.
pub const REAPPLY_MS: u64 = 2_000;
/// How often running replicas' checkpoint directories are scanned for new files.
pub const CHECKPOINT_POLL_MS: u64 = 1_000;
/// Entries looked at in one scan of a checkpoint directory (recursive), so a huge one
/// cannot stall the agent.
pub const MAX_CHECKPOINT_SCAN_ENTRIES: usize = 10_000;
/// Directory depth of a checkpoint scan.
pub const MAX_CHECKPOINT_SCAN_DEPTH: usize = 4;
/// Coarse file timestamps can lag the wall clock by a tick: for a replica its watchdog
/// stopped, journaled before the newest checkpoint file at its start was recorded, a file
/// newer than this much before the replica's start counts as this attempt's. (Otherwise a
/// stop's checkpoint is judged on file times alone: `checkpoint::written_after`.)
pub const MTIME_SLACK_MS: u64 = 20;
/// Default size of one log file after which output is dropped with a note.
pub const DEFAULT_LOG_CAP_BYTES: u64 = 64 * 1024 * 1024;
/// Attempts whose logs are kept per job (newest first).
pub const MAX_LOG_ATTEMPTS_PER_JOB: usize = 5;
/// Jobs whose logs are kept (by last change); older job directories are removed.
pub const MAX_LOG_JOBS: usize = 500;
/// Largest chunk of a log sent in one message.
pub const MAX_LOG_CHUNK_BYTES: usize = 64 * 1024;
/// How often a followed log is checked for growth.
pub const LOG_FOLLOW_POLL_MS: u64 = 200;
/// Chunks buffered per log stream before the reader waits for the client.
pub const LOG_STREAM_BUFFER_CHUNKS: usize = 4;
/// Finished replica records kept in the journal (so a repeated STOP re-reports and nothing
/// starts twice); beyond this, those of jobs absent from the current directive are pruned.
pub const MAX_FINISHED_RECORDS: usize = 4_096;
/// Keys of pruned finished replicas remembered, so a stale RUN of one is refused.
pub const MAX_PRUNED_KEYS: usize = 65_536;
/// Jobs whose highest attempt is remembered for attempt fencing.
pub const MAX_ATTEMPT_RECORDS: usize = 65_536;
/// Directives buffered between the leader stream and the supervisor; only the newest
/// matters (each is the whole desired state), so a small buffer is enough.
pub const DIRECTIVE_BUFFER: usize = 16;
/// Process events (exits) buffered for the supervisor.
pub const EVENT_BUFFER: usize = 1_024;
/// Most command arguments, and most environment entries, of one assignment.
pub const MAX_COMMAND_ARGS: usize = 4_096;
/// Longest gRPC message the agent decodes: the bound every client and server shares.
pub use baton_proto::MAX_MESSAGE_BYTES;
/// Grace of the checkpoint-then-stop a lease that ran out forces on every replica (agent or
/// watchdog): short, since the whole stop must end before the leader's heartbeat timeout
/// (see "Agent lease and watchdog" in docs/protocol.md).
pub const LEASE_STOP_GRACE_MS: u64 = 1_000;
/// The watchdog acts this long after the lease ends, so that a live agent, which acts at the
/// end itself and keeps its journal straight, goes first.
pub const WATCHDOG_SLACK_MS: u64 = 300;
/// How often a replica's watchdog reads the lease file.
pub const WATCHDOG_POLL_MS: u64 = 200;

/// Cgroups of ended replicas the supervisor keeps trying to remove; more wait for the sweep
/// at the agent's next start (a cgroup holding a process in uninterruptible sleep stays).
pub const MAX_DYING_CGROUPS: usize = 1_024;
/// How long a replica's processes may survive SIGKILL (a process in uninterruptible sleep,
/// often a driver or file system hang) before the agent reports it `Unkillable`: its node then
/// takes no new work and its GPUs stay held. Slurm's UnkillableStepTimeout defaults to 60 s.
pub const DEFAULT_UNKILLABLE_AFTER_MS: u64 = 60_000;
/// The range `--unkillable-after-ms` may take: long enough for a loaded machine to reap a
/// killed cgroup, short enough that a hung node is named within the hour.
pub const UNKILLABLE_AFTER_MS: std::ops::RangeInclusive<u64> = 1_000..=3_600_000;
