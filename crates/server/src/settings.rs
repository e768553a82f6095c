//! The server's tunables (the raft ones live in `baton_raft::RaftSettings`).

/// The shortest interval between two state digests.
pub const MIN_STATE_DIGEST_INTERVAL_MS: u64 = 1_000;

/// Every timing of the leader loop and the agent gateway, with its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// The leader runs a cycle at least this often (time alone can make work placeable:
    /// `min_runtime` ends, reservations expire), and at once on every state change.
    pub cycle_interval_ms: u64,
    /// An agent silent for this long has its node declared lost (its jobs are requeued).
    pub heartbeat_timeout_ms: u64,
    /// How long a report may lag the directive that changed what the node runs: a replica
    /// still reported this long after its directive dropped it is a stray (`strays`).
    /// (It was also how often an unchanged directive was sent again; it is now sent when it
    /// changes or the agent asks: `gateway::UNCHANGED_RESEND_MS`.)
    pub resend_ms: u64,
    /// How long a report the leader acknowledges keeps the agent's lease (proto/agent.proto).
    /// At most half the heartbeat timeout: the other half bounds how long the agent's own
    /// checkpoint-then-stop may take once the lease runs out, before the node is declared lost.
    pub lease_ms: u64,
    /// Jobs returned by one list call at most.
    pub max_list_jobs: usize,
    /// Watch streams open on this replica at once; each holds a task and a buffer.
    pub max_watch_streams: usize,
    /// Watch streams one client identity (a token's user, or a certificate's name without
    /// tokens) may hold open on this replica at once.
    pub max_watch_streams_per_client: usize,
    /// Events one `Watch { replay }` sends at most: the newest, after an event saying how
    /// many older ones it left out (the cluster keeps up to 64 per job, for every job kept).
    pub max_replay_events: usize,
    /// Log streams (`JobLogs`) read through this replica at once.
    pub max_log_streams: usize,
    /// Log streams one client identity may read through this replica at once: one user
    /// following many logs cannot take every slot of `max_log_streams`.
    pub max_log_streams_per_client: usize,
    /// Writes a second one queue user may send through this replica (bursts of twice as
    /// many): one user's script cannot fill the log for everyone. Admins and operators are
    /// not bounded.
    pub max_user_writes_per_s: u32,
    /// Bytes of log one `JobLogs` stream relays at most; then it ends with RESOURCE_EXHAUSTED
    /// naming the bound and where the log goes on. A followed log of a chatty job would
    /// otherwise hold a slot and this replica's bandwidth for as long as the job writes.
    pub max_log_stream_bytes: u64,
    /// How often the leader writes a state digest (`baton_model::digest`): each replica
    /// hashes its state there and compares the leader's hash of the one before; 0: never.
    /// Each one hashes the whole state on every replica, while its applies wait (58 ms at
    /// 10,000 nodes and 50,000 jobs, BENCHMARKS.md).
    pub state_digest_interval_ms: u64,
    /// Whether client calls need a token (`--auth`).
    pub auth: crate::auth::AuthMode,
    /// SHA-256 of a token this replica makes the cluster's first admin (user `admin`) if the
    /// cluster has no token yet (`--bootstrap-admin-token-file`).
    pub bootstrap_admin: Option<baton_model::access::TokenHash>,
    /// Where the leader copies accounting records (`--accounting-postgres`): a PostgreSQL
    /// connection string; `None`: nowhere (they stay in the replicas' stores).
    pub accounting_postgres: Option<String>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            cycle_interval_ms: 1_000,
            heartbeat_timeout_ms: 5_000,
            resend_ms: 2_000,
            lease_ms: 2_000,
            max_list_jobs: 10_000,
            max_watch_streams: 1_024,
            max_watch_streams_per_client: 64,
            max_replay_events: 100_000,
            max_log_streams: 256,
            max_log_streams_per_client: 32,
            max_user_writes_per_s: 200,
            max_log_stream_bytes: 1 << 30,
            state_digest_interval_ms: 300_000,
            auth: crate::auth::AuthMode::default(),
            bootstrap_admin: None,
            accounting_postgres: None,
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
            ("lease_ms", self.lease_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be above 0"));
        }
        if self.resend_ms >= self.heartbeat_timeout_ms {
            return Err(format!(
                "resend_ms ({}) must be below heartbeat_timeout_ms ({}): a stray is told apart before its node could be declared lost",
                self.resend_ms, self.heartbeat_timeout_ms
            ));
        }
        if self.lease_ms > self.heartbeat_timeout_ms / 2 {
            return Err(format!(
                "lease_ms ({}) must be at most half of heartbeat_timeout_ms ({}): an agent whose lease ran out needs the rest to stop its work before its node is declared lost",
                self.lease_ms, self.heartbeat_timeout_ms
            ));
        }
        baton_proto::lease_fits(self.lease_ms, baton_proto::AGENT_STOP_BOUND_MS, self.heartbeat_timeout_ms)?;
        if self.max_log_stream_bytes == 0 {
            return Err("max_log_stream_bytes must be above 0".into());
        }
        if self.max_user_writes_per_s == 0 {
            return Err("max_user_writes_per_s must be above 0".into());
        }
        if (1..MIN_STATE_DIGEST_INTERVAL_MS).contains(&self.state_digest_interval_ms) {
            return Err(format!(
                "state_digest_interval_ms ({}) must be 0 (off) or at least {MIN_STATE_DIGEST_INTERVAL_MS}: each digest hashes the whole state on every replica",
                self.state_digest_interval_ms
            ));
        }
        if self.max_list_jobs == 0 {
            return Err("max_list_jobs must be above 0".into());
        }
        for (name, v) in [
            ("max_watch_streams", self.max_watch_streams),
            ("max_watch_streams_per_client", self.max_watch_streams_per_client),
            ("max_replay_events", self.max_replay_events),
            ("max_log_streams", self.max_log_streams),
            ("max_log_streams_per_client", self.max_log_streams_per_client),
        ] {
            if v == 0 {
                return Err(format!("{name} must be above 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ServerSettings::default().validate().unwrap();
    }

    #[test]
    fn a_state_digest_interval_is_off_or_at_least_a_second() {
        let with = |ms| ServerSettings { state_digest_interval_ms: ms, ..ServerSettings::default() }.validate();
        assert_eq!(with(0), Ok(()));
        assert_eq!(with(1_000), Ok(()));
        let e = with(10).unwrap_err();
        assert!(e.contains("state_digest_interval_ms (10)") && e.contains("at least 1000"), "{e}");
    }

    #[test]
    fn a_lease_that_leaves_no_time_to_stop_before_the_node_is_lost_is_refused() {
        // Half the timeout, as the old check allowed, but 1500 + 1500 + 30 >= 3000.
        let s = ServerSettings { heartbeat_timeout_ms: 3_000, lease_ms: 1_500, ..ServerSettings::default() };
        let e = s.validate().unwrap_err();
        assert!(
            e.contains("lease_ms (1500)") && e.contains("3030 ms") && e.contains("heartbeat_timeout_ms (3000)"),
            "{e}"
        );
        let s = ServerSettings { heartbeat_timeout_ms: 3_100, lease_ms: 1_500, ..ServerSettings::default() };
        s.validate().unwrap();
    }

    #[test]
    fn a_lease_longer_than_half_the_heartbeat_timeout_is_refused_by_name() {
        let s = ServerSettings { heartbeat_timeout_ms: 4_000, lease_ms: 2_001, ..ServerSettings::default() };
        let e = s.validate().unwrap_err();
        assert!(e.contains("lease_ms (2001)") && e.contains("heartbeat_timeout_ms (4000)"), "{e}");
        let s = ServerSettings { heartbeat_timeout_ms: 4_000, lease_ms: 2_000, ..ServerSettings::default() };
        s.validate().unwrap();
    }

    #[test]
    fn a_zero_lease_is_refused_by_name() {
        let e = ServerSettings { lease_ms: 0, ..ServerSettings::default() }.validate().unwrap_err();
        assert!(e.contains("lease_ms"), "{e}");
    }
}
