//! What `baton agent` is told on its command line.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::limits::{DEFAULT_KILL_GRACE_MS, DEFAULT_LOG_CAP_BYTES};

/// The agent's configuration. `AgentConfig::new` fills in the defaults.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Replica addresses ("host:port" or "http://host:port"); any of them, the agent finds
    /// the leader.
    pub servers: Vec<String>,
    /// Node name, unique in the cluster.
    pub name: String,
    pub pool: String,
    pub rack: String,
    /// Its domain at topology levels other than the rack (`--topology nvlink=nvl72-3`).
    pub domains: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// Development GPUs and MIG slices used when NVML is unavailable (`--gpus N`,
    /// `--mig PROFILE=N`).
    pub dev: crate::inventory::DevDevices,
    /// CPUs offered; `None`: the machine's.
    pub cpu: Option<u64>,
    /// Memory offered in bytes; `None`: the machine's.
    pub memory_bytes: Option<u64>,
    /// Journal and logs.
    pub data_dir: PathBuf,
    /// Where each job's checkpoint directory lives (`<root>/<job>`); `None`:
    /// `<data_dir>/checkpoints`. Shared storage in a real cluster, so a job resumes elsewhere.
    pub checkpoint_root: Option<PathBuf>,
    /// Address for the AgentLogs service ("127.0.0.1:0" picks a port).
    pub listen: String,
    /// Address advertised to the leader for logs; `None`: the bound address.
    pub advertise: Option<String>,
    /// Where to serve `GET /metrics` ("127.0.0.1:0" picks a port) over the agent's transport
    /// (mutual TLS under TLS); `None`: not served.
    pub metrics_listen: Option<String>,
    /// Where to serve `GET /metrics` over plain HTTP whatever the transport; `None`: not served.
    pub metrics_plain_listen: Option<String>,
    pub heartbeat_ms: u64,
    /// Grace for replicas no longer wanted here: SIGTERM, then SIGKILL after this long.
    pub kill_grace_ms: u64,
    /// How long a replica's processes may survive SIGKILL before it is reported
    /// `Unkillable`.
    pub unkillable_after_ms: u64,
    /// Size of one log file after which output is dropped with a note.
    pub log_cap_bytes: u64,
    /// Mutual TLS for the gateway it dials and the logs it serves, or plain TCP.
    pub transport: baton_proto::tls::Transport,
    /// Who replicas run as. `new` gives the agent's own user (what tests and development
    /// want); `baton agent` makes the operator choose (`--run-as-allow` or `--run-as-self`).
    pub run_as: crate::run_as::RunAsPolicy,
    /// How replicas are held: a cgroup each, or process groups (`--containment`).
    pub containment: crate::cgroup::ContainmentMode,
    /// Where the replicas' cgroups go; `None`: beside the agent's own cgroup.
    pub cgroup_root: Option<PathBuf>,
    /// The operator's health-check program (`--health-check`), if any.
    pub health_check: Option<crate::health::HealthCheck>,
}

impl AgentConfig {
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>) -> AgentConfig {
        AgentConfig {
            servers: vec!["127.0.0.1:7070".to_string()],
            name: name.into(),
            pool: "default".to_string(),
            rack: String::new(),
            domains: BTreeMap::new(),
            labels: BTreeMap::new(),
            dev: Default::default(),
            cpu: None,
            memory_bytes: None,
            data_dir: data_dir.into(),
            checkpoint_root: None,
            listen: "127.0.0.1:0".to_string(),
            advertise: None,
            metrics_listen: None,
            metrics_plain_listen: None,
            heartbeat_ms: 500,
            kill_grace_ms: DEFAULT_KILL_GRACE_MS,
            unkillable_after_ms: crate::limits::DEFAULT_UNKILLABLE_AFTER_MS,
            log_cap_bytes: DEFAULT_LOG_CAP_BYTES,
            transport: baton_proto::tls::Transport::Insecure,
            run_as: crate::run_as::RunAsPolicy::AgentUser,
            containment: crate::cgroup::ContainmentMode::Auto,
            cgroup_root: None,
            health_check: None,
        }
    }

    pub fn checkpoint_root(&self) -> PathBuf {
        self.checkpoint_root.clone().unwrap_or_else(|| self.data_dir.join("checkpoints"))
    }

    /// Refuses what cannot work, naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.servers.iter().all(|s| s.trim().is_empty()) {
            return Err("--server: at least one replica address is needed".into());
        }
        if self.name.trim().is_empty() {
            return Err("--name: the node name is empty".into());
        }
        if self.name.contains('/') || self.name.chars().any(char::is_whitespace) {
            return Err(format!("--name {:?}: no '/' or spaces allowed", self.name));
        }
        if self.heartbeat_ms == 0 || self.heartbeat_ms > 60_000 {
            return Err(format!("--heartbeat-ms {}: must be between 1 and 60000", self.heartbeat_ms));
        }
        if let Some(h) = &self.health_check {
            if h.command.trim().is_empty() {
                return Err("--health-check: the command is empty".into());
            }
            if !(100..=86_400_000).contains(&h.interval_ms) {
                return Err(format!("--health-check-interval-ms {}: must be between 100 and 86400000", h.interval_ms));
            }
        }
        let unkillable = crate::limits::UNKILLABLE_AFTER_MS;
        if !unkillable.contains(&self.unkillable_after_ms) {
            return Err(format!(
                "--unkillable-after-ms {}: must be between {} and {}",
                self.unkillable_after_ms,
                unkillable.start(),
                unkillable.end()
            ));
        }
        if self.log_cap_bytes < 1024 {
            return Err(format!("log cap {} bytes: must be at least 1024", self.log_cap_bytes));
        }
        Ok(())
    }
}
