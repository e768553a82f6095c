//! Every metric a replica exposes on `GET /metrics` (Prometheus/OpenMetrics text), defined
//! in one place. docs/metrics.md lists them; a test keeps the two equal.
//!
//! Three sources:
//! - state gauges (`refresh_state`): recomputed from the applied state at each scrape, so
//!   every replica answers the same for the same applied index;
//! - counters of what the log did (`count_events`): each replica counts the events its own
//!   applies produce, so replicas that applied the same entries since they started agree;
//! - the leader loop's activity (`observe_cycle`): only the leader runs cycles;
//! - this replica's write path (`refresh_writes`, from the raft crate's counters) and the
//!   time each applied command took (`observe_apply`).

mod events;
mod state;

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use events::count_events;

/// Labels of one series, as name/value pairs.
pub type Labels = Vec<(&'static str, String)>;

/// At most this many (queue, pool) series per family: the model allows 10,000 queues
/// (`MAX_QUEUES`) times any number of pools, more than a scrape should carry. Queues past
/// the bound (in name order) are left out and counted in `baton_metrics_series_dropped`.
pub const MAX_QUEUE_POOL_SERIES: usize = 2_000;

type GaugeF = Gauge<f64, AtomicU64>;

/// The certificates' expiry, present only under TLS (not under `--insecure`).
pub const TLS_METRIC_NAME: &str = "baton_tls_not_after_seconds";

/// A replica's metrics.
pub struct Metrics {
    registry: Registry,
    /// Held from refresh to encode: the state families are cleared and refilled at each
    /// scrape, and a concurrent scrape must not encode one half-refilled.
    rendering: std::sync::Mutex<()>,
    // State.
    queue_gpus_nominal: Family<Labels, Gauge>,
    queue_gpus_used: Family<Labels, Gauge>,
    queue_gpu_milli_used: Family<Labels, Gauge>,
    queue_gpus_borrowed: Family<Labels, Gauge>,
    queue_gpus_lent: Family<Labels, Gauge>,
    queue_pending_jobs: Family<Labels, Gauge>,
    queue_held_jobs: Family<Labels, Gauge>,
    queue_array_waiting: Family<Labels, Gauge>,
    arrays: Family<Labels, Gauge>,
    queue_elastic_replicas: Family<Labels, Gauge>,
    maintenance_windows: Family<Labels, Gauge>,
    gpus_unhealthy: Gauge,
    queue_pending_gpus: Family<Labels, Gauge>,
    queue_running_jobs: Family<Labels, Gauge>,
    pool_gpus_capacity: Family<Labels, Gauge>,
    pool_mig_slices: Family<Labels, Gauge>,
    pool_shared_gpus: Family<Labels, Gauge>,
    pool_shared_gpu_milli_held: Family<Labels, Gauge>,
    nodes: Family<Labels, Gauge>,
    series_dropped: Gauge,
    state_applied_index: Gauge,
    // This process's certificates.
    tls_not_after: Family<Labels, Gauge>,
    // Raft.
    raft_term: Gauge,
    raft_is_leader: Gauge,
    raft_leader_id: Gauge,
    raft_last_log_index: Gauge,
    raft_applied_index: Gauge,
    raft_apply_lag_entries: Gauge,
    raft_snapshot_index: Gauge,
    raft_term_changes: Counter,
    // The write path.
    raft_writes_queued: Counter,
    raft_batches_proposed: Counter,
    raft_batch_commands: Counter,
    raft_batches_in_flight: Gauge,
    raft_log_appends: Counter,
    raft_log_entries_appended: Counter,
    raft_log_flushes: Counter,
    raft_writes_forwarded: Counter,
    raft_forward_calls: Counter,
    raft_entries_delivered: Counter,
    raft_append_probes: Counter,
    apply_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    // The state digests (`baton_raft::digest`).
    state_digest_marks: Counter,
    state_digest_checks: Family<Labels, Counter>,
    // Counted from applied events.
    admissions: Family<Labels, Counter>,
    preemptions: Family<Labels, Counter>,
    checkpoints_written: Counter,
    preemption_uncheckpointed_gpu_seconds: Counter<f64, AtomicU64>,
    job_wait_seconds: Histogram,
    nodes_lost: Counter,
    events_missed: Counter,
    // The leader loop.
    cycle_seconds: Histogram,
    cycle_jobs_considered: GaugeF,
    cycle_decisions: Family<Labels, Counter>,
    plans_proposed: Counter,
    placements_accepted: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            rendering: std::sync::Mutex::new(()),
            queue_gpus_nominal: Family::default(),
            queue_gpus_used: Family::default(),
            queue_gpu_milli_used: Family::default(),
            queue_gpus_borrowed: Family::default(),
            queue_gpus_lent: Family::default(),
            queue_pending_jobs: Family::default(),
            queue_held_jobs: Family::default(),
            queue_array_waiting: Family::default(),
            arrays: Family::default(),
            queue_elastic_replicas: Family::default(),
            maintenance_windows: Family::default(),
            gpus_unhealthy: Gauge::default(),
            queue_pending_gpus: Family::default(),
            queue_running_jobs: Family::default(),
            pool_gpus_capacity: Family::default(),
            pool_mig_slices: Family::default(),
            pool_shared_gpus: Family::default(),
            pool_shared_gpu_milli_held: Family::default(),
            nodes: Family::default(),
            series_dropped: Gauge::default(),
            tls_not_after: Family::default(),
            state_applied_index: Gauge::default(),
            raft_term: Gauge::default(),
            raft_is_leader: Gauge::default(),
            raft_leader_id: Gauge::default(),
            raft_last_log_index: Gauge::default(),
            raft_applied_index: Gauge::default(),
            raft_apply_lag_entries: Gauge::default(),
            raft_snapshot_index: Gauge::default(),
            raft_term_changes: Counter::default(),
            raft_writes_queued: Counter::default(),
            raft_batches_proposed: Counter::default(),
            raft_batch_commands: Counter::default(),
            raft_batches_in_flight: Gauge::default(),
            raft_log_appends: Counter::default(),
            raft_log_entries_appended: Counter::default(),
            raft_log_flushes: Counter::default(),
            raft_writes_forwarded: Counter::default(),
            raft_forward_calls: Counter::default(),
            raft_entries_delivered: Counter::default(),
            raft_append_probes: Counter::default(),
            apply_seconds: Family::new_with_constructor(apply_histogram),
            state_digest_marks: Counter::default(),
            state_digest_checks: Family::default(),
            admissions: Family::default(),
            preemptions: Family::default(),
            checkpoints_written: Counter::default(),
            preemption_uncheckpointed_gpu_seconds: Counter::default(),
            // 0.1 s .. about 28 h: jobs wait from moments to a day.
            job_wait_seconds: Histogram::new(exponential_buckets(0.1, 4.0, 10)),
            nodes_lost: Counter::default(),
            events_missed: Counter::default(),
            // 100 us .. about 6.5 s: a cycle over a large state takes up to seconds.
            cycle_seconds: Histogram::new(exponential_buckets(0.0001, 4.0, 9)),
            cycle_jobs_considered: GaugeF::default(),
            cycle_decisions: Family::default(),
            plans_proposed: Counter::default(),
            placements_accepted: Counter::default(),
        };
        m.register();
        m
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "baton_queue_gpus_nominal",
            "GPUs guaranteed to the queue in the pool (its nominal quota)",
            self.queue_gpus_nominal.clone(),
        );
        r.register(
            "baton_queue_gpus_used",
            "Whole GPUs the queue's running and stopping jobs hold in the pool",
            self.queue_gpus_used.clone(),
        );
        r.register(
            "baton_queue_gpu_milli_used",
            "Thousandths of GPUs the queue's running and stopping jobs hold in the pool, fractions of shared GPUs included",
            self.queue_gpu_milli_used.clone(),
        );
        r.register(
            "baton_queue_gpus_borrowed",
            "GPUs the queue uses in the pool beyond its nominal quota",
            self.queue_gpus_borrowed.clone(),
        );
        r.register(
            "baton_queue_gpus_lent",
            "GPUs of the queue's unused nominal quota in the pool that other queues of its cohort use",
            self.queue_gpus_lent.clone(),
        );
        r.register("baton_queue_pending_jobs", "Jobs waiting in the queue", self.queue_pending_jobs.clone());
        r.register(
            "baton_gpus_unhealthy",
            "GPUs marked unhealthy (an agent's finding or an operator's mark): out of their pools' capacity until cleared",
            self.gpus_unhealthy.clone(),
        );
        r.register(
            "baton_maintenance_windows",
            "Maintenance windows by state: ahead, or started (their nodes take no work)",
            self.maintenance_windows.clone(),
        );
        r.register(
            "baton_queue_array_elements_waiting",
            "Elements of the queue's arrays not created as jobs yet (pending, not in baton_queue_pending_jobs)",
            self.queue_array_waiting.clone(),
        );
        r.register("baton_arrays", "Job arrays by state: unfinished, or finished and kept", self.arrays.clone());
        r.register(
            "baton_queue_elastic_replicas",
            "Replicas of the queue's running elastic gangs: running (what they run with), missing (up to their replicas: what growing would add)",
            self.queue_elastic_replicas.clone(),
        );
        r.register(
            "baton_queue_held_jobs",
            "Pending jobs of the queue held by their dependencies (never considered until they hold)",
            self.queue_held_jobs.clone(),
        );
        r.register(
            "baton_queue_pending_gpus",
            "GPUs the queue's waiting jobs ask for",
            self.queue_pending_gpus.clone(),
        );
        r.register(
            "baton_queue_running_jobs",
            "Jobs of the queue running or stopping",
            self.queue_running_jobs.clone(),
        );
        r.register("baton_pool_gpus_capacity", "GPUs of the pool's ready nodes", self.pool_gpus_capacity.clone());
        r.register(
            "baton_pool_mig_slices",
            "MIG slices of the pool's ready nodes by profile: offered, and held by jobs (running, stopping or suspended there)",
            self.pool_mig_slices.clone(),
        );
        r.register(
            "baton_pool_shared_gpus",
            "GPUs of the pool's ready nodes that fractions share (held by running, stopping or suspended jobs)",
            self.pool_shared_gpus.clone(),
        );
        r.register(
            "baton_pool_shared_gpu_milli_held",
            "Thousandths of the pool's shared GPUs the fractions hold, added up",
            self.pool_shared_gpu_milli_held.clone(),
        );
        r.register("baton_nodes", "Nodes by status", self.nodes.clone());
        r.register(
            TLS_METRIC_NAME,
            "When the certificate this replica serves (cert=own) and the first CA certificate of its bundle to expire (cert=ca) expire, in Unix seconds, as of the latest reload; absent under --insecure",
            self.tls_not_after.clone(),
        );
        r.register(
            "baton_metrics_series_dropped",
            "Queue and pool series left out of this scrape by the series bound",
            self.series_dropped.clone(),
        );
        r.register(
            "baton_state_applied_index",
            "Log index of the state these gauges were computed from",
            self.state_applied_index.clone(),
        );
        r.register("baton_raft_term", "This replica's current raft term", self.raft_term.clone());
        r.register("baton_raft_is_leader", "1 if this replica leads, else 0", self.raft_is_leader.clone());
        r.register(
            "baton_raft_leader_id",
            "Id of the replica this one believes leads (0: none known)",
            self.raft_leader_id.clone(),
        );
        r.register(
            "baton_raft_last_log_index",
            "Index of the last entry in this replica's log",
            self.raft_last_log_index.clone(),
        );
        r.register(
            "baton_raft_applied_index",
            "Index of the last entry this replica applied",
            self.raft_applied_index.clone(),
        );
        r.register(
            "baton_raft_apply_lag_entries",
            "Entries in this replica's log not yet applied",
            self.raft_apply_lag_entries.clone(),
        );
        r.register(
            "baton_raft_snapshot_index",
            "Last log index the latest snapshot covers (0: none)",
            self.raft_snapshot_index.clone(),
        );
        r.register(
            "baton_raft_term_changes",
            "Term changes this replica has seen since it started (elections)",
            self.raft_term_changes.clone(),
        );
        r.register(
            "baton_raft_writes_queued",
            "Client writes this replica took to propose as leader (its own and forwarded ones)",
            self.raft_writes_queued.clone(),
        );
        r.register(
            "baton_raft_batches_proposed",
            "Batches of client writes this replica proposed as leader, one log entry each",
            self.raft_batches_proposed.clone(),
        );
        r.register(
            "baton_raft_batch_commands",
            "Commands the proposed batches carried",
            self.raft_batch_commands.clone(),
        );
        r.register(
            "baton_raft_batches_in_flight",
            "Batches proposed and not yet answered",
            self.raft_batches_in_flight.clone(),
        );
        r.register(
            "baton_raft_log_appends",
            "Appends to this replica's raft log (a leader's proposals, a follower's replicated entries)",
            self.raft_log_appends.clone(),
        );
        r.register(
            "baton_raft_log_entries_appended",
            "Entries appended to this replica's raft log",
            self.raft_log_entries_appended.clone(),
        );
        r.register(
            "baton_raft_log_flushes",
            "Flushes of this replica's raft log to stable storage (fsync)",
            self.raft_log_flushes.clone(),
        );
        r.register(
            "baton_raft_writes_forwarded",
            "Client writes this replica forwarded to the leader",
            self.raft_writes_forwarded.clone(),
        );
        r.register(
            "baton_raft_forward_calls",
            "Calls that carried this replica's forwarded writes to the leader",
            self.raft_forward_calls.clone(),
        );
        r.register(
            "baton_raft_entries_delivered",
            "Log entries this replica sent its peers as leader, counted once answered",
            self.raft_entries_delivered.clone(),
        );
        r.register(
            "baton_raft_append_probes",
            "Probes without entries a new leader sent to learn what a peer already holds",
            self.raft_append_probes.clone(),
        );
        r.register(
            "baton_apply_seconds",
            "Time one command took to apply to this replica's state, by kind",
            self.apply_seconds.clone(),
        );
        r.register(
            "baton_state_digest_marks",
            "State digest marks this replica hashed its state at",
            self.state_digest_marks.clone(),
        );
        r.register(
            "baton_state_digest_checks",
            "The leader's state digests this replica compared with its own, by result (agreed, not_compared); a disagreement stops the replica",
            self.state_digest_checks.clone(),
        );
        r.register("baton_admissions", "Job attempts started (placed or resumed), by queue", self.admissions.clone());
        r.register(
            "baton_preemptions",
            "Jobs chosen as preemption victims, by reason and mode",
            self.preemptions.clone(),
        );
        r.register(
            "baton_checkpoints_written",
            "Checkpoints written by jobs stopped after a preemption or pause",
            self.checkpoints_written.clone(),
        );
        r.register("baton_preemption_uncheckpointed_gpu_seconds", "GPU-seconds each preemption victim had run since its last checkpoint or start when chosen: the work lost if it cannot checkpoint", self.preemption_uncheckpointed_gpu_seconds.clone());
        r.register(
            "baton_job_wait_seconds",
            "Time from submit to the first start of a job",
            self.job_wait_seconds.clone(),
        );
        r.register("baton_nodes_lost", "Nodes declared lost", self.nodes_lost.clone());
        r.register(
            "baton_metrics_events_missed",
            "Applied events this replica's counters missed because it fell behind",
            self.events_missed.clone(),
        );
        r.register("baton_cycle_seconds", "Duration of one scheduling cycle on the leader", self.cycle_seconds.clone());
        r.register(
            "baton_cycle_jobs_considered",
            "Jobs waiting or stopping when the leader's last cycle ran",
            self.cycle_jobs_considered.clone(),
        );
        r.register(
            "baton_cycle_decisions",
            "Decisions the leader's cycles made, by kind (place, preempt, resume, wait)",
            self.cycle_decisions.clone(),
        );
        r.register("baton_plans_proposed", "Plans the leader proposed to the log", self.plans_proposed.clone());
        r.register(
            "baton_plan_decisions_accepted",
            "Decisions of proposed plans that apply accepted",
            self.placements_accepted.clone(),
        );
    }

    /// The text a scrape returns, with the state gauges recomputed from `state`.
    pub fn render(
        &self,
        state: &baton_model::State,
        raft: &baton_raft::ReplicaMetrics,
        writes: &baton_raft::WriteCounts,
    ) -> String {
        // A scrape that panicked mid-render left nothing inconsistent that refresh does not redo.
        let _one_at_a_time = self.rendering.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh_state(state);
        self.refresh_raft(raft);
        self.refresh_writes(writes);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// The expiry of the certificates in force (`Transport::not_after`, read at each scrape
    /// so that a reload shows at once); `None` under `--insecure` leaves the family empty.
    pub fn set_tls_not_after(&self, not_after: Option<baton_proto::tls::NotAfter>) {
        let Some(n) = not_after else { return };
        self.tls_not_after.get_or_create(&vec![("cert", "own".to_string())]).set(n.own_unix_s);
        self.tls_not_after.get_or_create(&vec![("cert", "ca".to_string())]).set(n.ca_unix_s);
    }

    /// What this replica made of the state digests (read at each scrape).
    pub fn set_digest_counts(&self, c: baton_raft::store::DigestCounts) {
        use std::sync::atomic::Ordering::Relaxed;
        self.state_digest_marks.inner().store(c.marks, Relaxed);
        for (result, n) in [("agreed", c.agreed), ("not_compared", c.not_compared)] {
            self.state_digest_checks.get_or_create(&vec![("result", result.to_string())]).inner().store(n, Relaxed);
        }
    }

    fn refresh_raft(&self, m: &baton_raft::ReplicaMetrics) {
        let last = m.last_log_index.unwrap_or(0);
        let applied = m.last_applied_index.unwrap_or(0);
        self.raft_term.set(to_i64(m.term));
        self.raft_is_leader.set(i64::from(m.role == baton_raft::Role::Leader));
        self.raft_leader_id.set(to_i64(m.leader_id.unwrap_or(0)));
        self.raft_last_log_index.set(to_i64(last));
        self.raft_applied_index.set(to_i64(applied));
        self.raft_apply_lag_entries.set(to_i64(last.saturating_sub(applied)));
        self.raft_snapshot_index.set(to_i64(m.snapshot_index.unwrap_or(0)));
    }

    /// The raft crate counts (atomics on the write path, no lock); a scrape copies them.
    fn refresh_writes(&self, w: &baton_raft::WriteCounts) {
        use std::sync::atomic::Ordering::Relaxed;
        self.raft_writes_queued.inner().store(w.writes_queued, Relaxed);
        self.raft_batches_proposed.inner().store(w.batches_proposed, Relaxed);
        self.raft_batch_commands.inner().store(w.commands_proposed, Relaxed);
        self.raft_batches_in_flight.set(to_i64(w.batches_in_flight));
        self.raft_log_appends.inner().store(w.log_appends, Relaxed);
        self.raft_log_entries_appended.inner().store(w.log_entries_appended, Relaxed);
        self.raft_log_flushes.inner().store(w.log_flushes, Relaxed);
        self.raft_writes_forwarded.inner().store(w.writes_forwarded, Relaxed);
        self.raft_forward_calls.inner().store(w.forward_calls, Relaxed);
        self.raft_entries_delivered.inner().store(w.entries_delivered, Relaxed);
        self.raft_append_probes.inner().store(w.append_probes, Relaxed);
    }

    /// One command of kind `kind` (an operation's name: a few dozen values) took `seconds`
    /// to apply.
    pub fn observe_apply(&self, kind: &'static str, seconds: f64) {
        self.apply_seconds.get_or_create(&vec![("kind", kind.to_string())]).observe(seconds);
    }

    /// One leader cycle: how long it took, how many jobs it looked at, what it decided.
    pub fn observe_cycle(&self, seconds: f64, considered: usize, decisions: &[baton_model::plan::Decision]) {
        self.cycle_seconds.observe(seconds);
        self.cycle_jobs_considered.set(considered as f64);
        for d in decisions {
            self.cycle_decisions.get_or_create(&vec![("kind", d.kind().to_string())]).inc();
        }
    }

    /// A plan went to the log; `accepted` of its decisions applied.
    pub fn observe_plan(&self, accepted: u64) {
        self.plans_proposed.inc();
        self.placements_accepted.inc_by(accepted);
    }
}

/// 1 us .. about 8 s, doubling: a submit applies in microseconds, a plan over a large state
/// in milliseconds, and a walk over every job (a bug) shows up in the top buckets. Doubling
/// (not quadrupling) so that a p99 reads to within a factor of two (8 ms, 16 ms, ...).
fn apply_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000001, 2.0, 24))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
