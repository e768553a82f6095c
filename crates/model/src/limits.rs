//! Every bound the model enforces, in one place (TigerBeetle style: put a limit on everything).

/// Longest name of a node, pool, cohort, queue, class, job or task (docs/policy.md section 7).
pub const MAX_NAME_LEN: usize = 63;
/// Distinct resource names a cluster may use. Keeps per-node accounting in fixed-size arrays.
pub const MAX_RESOURCE_KINDS: usize = 8;
/// GPUs on one node; GPU indices are tracked in a 64-bit mask.
pub const MAX_GPUS_PER_NODE: u64 = 64;
/// Replicas in one job (all task groups together).
pub const MAX_REPLICAS_PER_JOB: u32 = 4096;
/// Task groups in one job.
pub const MAX_TASKS_PER_JOB: usize = 64;
/// Dependencies one job may wait for (decisions.md section 13): workflows chain a few
/// steps; a wider fan-in belongs to an array.
pub const MAX_DEPENDENCIES_PER_JOB: usize = 64;
/// Elements of one array (decisions.md section 13). Not created until they come within
/// reach of running, so the bound is on indices, not on memory.
pub const MAX_ARRAY_ELEMENTS: u32 = 1_000_000;
/// Elements of one array created and never started yet, at most: enough for a cycle to
/// start that many of them; each start makes room for the next (`state/arrays.rs`).
pub const ARRAY_PENDING_WINDOW: u32 = 64;
/// Arrays a cluster keeps at once, unfinished and finished.
pub const MAX_ARRAYS: usize = 10_000;
/// Finished arrays kept for `list` and dependencies; the oldest is forgotten first.
pub const RETAINED_FINISHED_ARRAYS: usize = 1_000;
/// Maintenance windows a cluster holds at once (decisions.md section 14); past ones are
/// forgotten at their end.
pub const MAX_WINDOWS: usize = 1_000;
/// Events kept per job; older ones are dropped first.
pub const MAX_EVENTS_PER_JOB: usize = 64;
/// Client request ids remembered for idempotent submission; the oldest is forgotten first.
pub const MAX_REMEMBERED_REQUEST_IDS: usize = 100_000;
/// Request ids remembered per user (behaviour 2 on, see `behaviour`): a user's own oldest
/// is forgotten first, so one user's submissions cannot push others' ids out of the window
/// above. A retry comes within minutes; 10,000 submissions is more than a user makes then.
pub const MAX_REMEMBERED_REQUEST_IDS_PER_USER: usize = 10_000;
/// Finished jobs (Succeeded, Failed, Cancelled) kept in the state by default; oldest pruned first.
pub const DEFAULT_RETAINED_FINISHED_JOBS: usize = 10_000;
/// Jobs that may exist at once (pending, running, finished and retained).
pub const MAX_JOBS: usize = 1_000_000;
/// Nodes, queues and cohorts a cluster may define.
pub const MAX_NODES: usize = 100_000;
/// Nodes one registration command may carry (bounds a log entry).
pub const MAX_NODES_PER_COMMAND: usize = 10_000;
pub const MAX_QUEUES: usize = 10_000;
pub const MAX_COHORTS: usize = 10_000;
/// Depth of the cohort tree (a cohort's chain of parents), which also rules out cycles.
pub const MAX_COHORT_DEPTH: usize = 16;
/// Labels per node and the length of a label key or value. Keys hold no `=` and neither
/// holds control characters, so `key=value` selectors and logs stay unambiguous.
pub const MAX_LABELS_PER_NODE: usize = 64;
pub const MAX_LABEL_LEN: usize = 253;
/// Length of a pending reason or an event message.
pub const MAX_MESSAGE_LEN: usize = 512;
/// Arguments of a job's command, the length of one, and all of them together: bounds a log
/// entry and stays well under the kernel's exec limit (ARG_MAX, 2 MiB on Linux, which
/// counts the environment too).
pub const MAX_COMMAND_ARGS: usize = 256;
pub const MAX_ARG_LEN: usize = 4096;
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;
/// Variables in a job's environment, the length of one `KEY=value`, and all of them together.
pub const MAX_ENV_VARS: usize = 256;
pub const MAX_ENV_VAR_LEN: usize = 4096;
pub const MAX_ENV_BYTES: usize = 128 * 1024;
/// The latest time a command may carry: 2200-01-01T00:00:00Z in milliseconds since the Unix
/// epoch. No real clock reads past it, so a stamp beyond is forged or broken; refusing it
/// keeps one bad stamp from pinning the replicated clock (it only ever moves forward) and
/// keeps `now + MAX_DURATION_MS` arithmetic far from overflow. There is deliberately no
/// bound on how far one command may move the clock: a cluster left idle for months
/// legitimately jumps by that much with its next command, and refusing it would wedge the
/// cluster for good. Forwarded commands are re-stamped by the leader, so only a leader's
/// own clock sets the time.
pub const MAX_CLOCK_MS: u64 = 7_258_118_400_000;
/// Length of a client request id.
pub const MAX_REQUEST_ID_LEN: usize = 128;
/// Observations one agent report commits in one command (bounds a log entry); a longer
/// report is committed in several commands of this size.
pub const MAX_OBSERVATIONS_PER_REPORT: usize = 4_096;
/// Observations and running replicas one agent report may list: far above what one node
/// produces between two reports, and it bounds what one request makes the leader do.
pub const MAX_REPORT_OBSERVATIONS: usize = 65_536;
pub const MAX_REPORT_RUNNING: usize = 65_536;
/// Decisions in one plan: bounds the size of one replicated log entry.
pub const MAX_DECISIONS_PER_PLAN: usize = 100_000;
/// A grace period, checkpoint time or minimum runtime may not exceed a week.
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;
/// A job's time limit may not exceed a year (a bound, not a policy: longer runs go unlimited).
pub const MAX_TIME_LIMIT_MS: u64 = 365 * 24 * 3600 * 1000;
/// The longest `reserve_after` (a starving job waits at most this before it reserves).
pub const MAX_RESERVE_AFTER_MS: u64 = 30 * 24 * 3600 * 1000;
/// Grace a victim gets by default before it is killed (Kubernetes' termination default).
pub const DEFAULT_GRACE_MS: u64 = 30_000;
/// API tokens the cluster keeps, revoked ones included (the oldest revoked is forgotten first
/// when room is needed).
pub const MAX_TOKENS: usize = 10_000;
/// Queues one token may be granted.
pub const MAX_GRANTS_PER_TOKEN: usize = 256;
