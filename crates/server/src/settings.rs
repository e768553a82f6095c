//! The server's tunables (the raft ones live in `baton_raft::RaftSettings`).

/// Every timing of the leader loop and the agent gateway, with its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// The leader runs a cycle at least this often (time alone can make work placeable:
    /// `min_runtime` ends, reservations expire), and at once on every state change.
    pub cycle_interval_ms: u64,
    /// An agent silent for this long has its node declared lost (its jobs are requeued).
    pub heartbeat_timeout_ms: u64,
    /// The leader re-sends each agent its directive at least this often.
    pub resend_ms: u64,
    /// Jobs returned by one list call at most.
    pub max_list_jobs: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            cycle_interval_ms: 1_000,
            heartbeat_timeout_ms: 5_000,
            resend_ms: 2_000,
            max_list_jobs: 10_000,
        }
    }
}

impl ServerSettings {
    /// Refuses settings that cannot work, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("cycle_interval_ms", self.cycle_interval_ms),
            ("heartbeat_timeout_ms", self.heartbeat_timeout_ms),
            ("resend_ms", self.resend_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be above 0"));
        }
        if self.resend_ms >= self.heartbeat_timeout_ms {
            return Err(format!(
                "resend_ms ({}) must be below heartbeat_timeout_ms ({}): agents beat as often as they hear",
                self.resend_ms, self.heartbeat_timeout_ms
            ));
        }
        if self.max_list_jobs == 0 {
            return Err("max_list_jobs must be above 0".into());
        }
        Ok(())
    }
}
