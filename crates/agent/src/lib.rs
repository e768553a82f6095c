//! baton's worker agent (`baton agent`), one per GPU node.
//!
//! The leader sends each agent the whole desired state of its node (a `Directive`); the
//! agent starts, checkpoints, stops and suspends job replicas to match, and reports what its
//! processes did (`Report`) until the leader acknowledges it. Everything the agent must not
//! forget (the highest leader term, every replica it started, unacknowledged observations)
//! is in a journal, so a restarted agent re-adopts running replicas and never starts one
//! twice.
//!
//! Layout:
//! - `agent`: `start`/`run`, wiring the parts below together.
//! - `config`, `error`, `limits`: configuration, typed errors, every bound.
//! - `inventory`, `node`: the GPUs and MIG slices (NVML or development devices) and the
//!   NodeInfo sent; `devices`: which GPU and slices a replica gets; `fabric`: the NVLink
//!   domain from NVML's fabric information.
//! - `leader`, `reporter`, `endpoint`: following the leader; heartbeats and observations;
//!   `dialing`: which replica to dial next, and `backoff`: the jittered waits between
//!   rounds of attach attempts, so agents that lost a leader together do not all dial the
//!   next one together.
//! - `lease`, `fence`: pure rules: how long the agent may run replicas without a proven
//!   leader, and which leader's directives it obeys; `lease_file`: the lease as replicas' watchdogs read it.
//! - `reconcile`: the supervisor's decisions, pure: what a directive means for the replicas
//!   here (fencing, the attempt fence, the lease, deferral behind a GPU still held, RUN, STOP,
//!   SUSPEND, kills), in which order a stop journals and signals, and how a replica that ended
//!   is reported. Tested with tables and properties, without processes.
//! - `supervisor`: the executor: it reads the journal, the lease and its replica table, asks
//!   `reconcile`, and does the IO (spawns, signals, /proc, files, the journal, observations).
//! - `suspensions`: which reported suspensions the leader has recorded, and as of which state
//!   (a SUSPEND it still awaits of a replica held suspended is answered only if new).
//! - `unrecorded`: starts refused while the journal takes no writes, told to the leader
//!   without being journaled (it requeues the job and takes the node out).
//! - `unjournaled`: observations made meanwhile (exits, checkpoints), sent from memory until
//!   a leader takes them, and journaled once the journal takes writes if none did.
//! - `launch`, `signal`, `procfs`, `checkpoint`: starting a replica under its exit-code
//!   wrapper, signalling its process group, telling a reused pid apart, noticing checkpoints.
//! - `cgroup`: one cgroup per replica (freeze, kill, limits, emptiness, the scan for live
//!   replicas); `devfilter`: the eBPF device program that keeps a replica from GPUs it was
//!   not given on a host with cgroup v2 alone.
//! - `tools`: the programs the wrapper runs, looked for before the agent starts.
//! - `run_as`: which Unix user a replica runs as (`--run-as-allow`, `--run-as-self`), resolved
//!   on this node, and the drop to it before exec.
//! - `journal`: the durable state; `journal_store`: where it lives (sled, synced to stable
//!   storage; a simulated disk for power-loss, full-disk and slow-disk tests).
//! - `logfiles`, `logs_server`, `logs_client`: replica logs, their retention, the AgentLogs
//!   service and the `fetch_logs` helper.
//! - `metrics`: what `GET /metrics` exposes (`--metrics-listen`).
//! - `health`: GPU faults (NVML, injected into development GPUs, the operator's health
//!   check) recorded as observations for the leader (decisions.md section 14).
//! - `workload`: the test workload behind `baton workload`.

pub mod agent;
pub mod backoff;
pub mod cgroup;
pub mod checkpoint;
pub mod config;
pub mod devfilter;
pub mod devices;
pub mod dialing;
pub mod endpoint;
pub mod error;
pub mod fabric;
pub mod fence;
pub mod health;
pub mod inventory;
pub mod journal;
pub mod journal_store;
pub mod launch;
pub mod leader;
pub mod lease;
pub mod lease_file;
pub mod limits;
pub mod logfiles;
pub mod logs_client;
pub mod logs_server;
pub mod metrics;
pub mod node;
pub mod procfs;
pub mod reconcile;
pub mod reporter;
pub mod run_as;
pub mod signal;
pub mod supervisor;
pub mod suspensions;
pub mod tools;
pub mod unjournaled;
pub mod unrecorded;
pub mod workload;

pub use agent::{Agent, run, start, start_with_inventory, start_with_journal};
pub use config::AgentConfig;
pub use error::{AgentError, InventoryError, JournalError, LogsError};
pub use logs_client::fetch_logs;
