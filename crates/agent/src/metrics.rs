//! Every metric an agent exposes on `GET /metrics` (`--metrics-listen`), defined in one
//! place; docs/metrics.md lists them and a test keeps the two equal.
//!
//! Counters are bumped where things happen (supervisor: stops, lease expiries; reporter:
//! reports); gauges are read at each scrape (what runs, the lease, the GPUs through NVML).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use baton_proto::v1::Running;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::lease::{Lease, Standing};
use crate::lease_file::boot_ms;

type Labels = Vec<(&'static str, String)>;

/// The per-GPU families, present only where NVML is (queried names, as a scrape shows them).
pub const GPU_METRIC_NAMES: [&str; 5] = [
    "baton_agent_gpu_utilization_ratio",
    "baton_agent_gpu_memory_used_bytes",
    "baton_agent_gpu_memory_total_bytes",
    "baton_agent_gpu_temperature_celsius",
    "baton_agent_gpu_throttle_reasons",
];
/// The certificates' expiry, present only under TLS (not under `--insecure`).
pub const TLS_METRIC_NAME: &str = "baton_agent_tls_not_after_seconds";
type GaugeF = Gauge<f64, AtomicU64>;

/// Counters the agent's tasks bump.
pub struct AgentMetrics {
    registry: Registry,
    replicas_running: Gauge,
    lease_seconds_left: GaugeF,
    lease_expiries: Counter,
    stops: Family<Labels, Counter>,
    stop_seconds: Histogram,
    reports_sent: Counter,
    reports_failed: Counter,
    journal_failing: Gauge,
    process_group_only: Gauge,
    runs_refused: Counter,
    unkillable: Counter,
    tls_not_after: Family<Labels, Gauge>,
    gpu_utilization_ratio: Family<Labels, GaugeF>,
    gpu_memory_used_bytes: Family<Labels, Gauge>,
    gpu_memory_total_bytes: Family<Labels, Gauge>,
    gpu_temperature_celsius: Family<Labels, Gauge>,
    gpu_throttle_reasons: Family<Labels, Gauge>,
    gpu_faults: Family<Labels, Counter>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new()
    }
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let mut m = AgentMetrics {
            registry: Registry::default(),
            replicas_running: Gauge::default(),
            lease_seconds_left: GaugeF::default(),
            lease_expiries: Counter::default(),
            stops: Family::default(),
            // 50 ms .. about 3.6 min: a stop takes from a moment to a long checkpoint.
            stop_seconds: Histogram::new(exponential_buckets(0.05, 3.0, 10)),
            reports_sent: Counter::default(),
            reports_failed: Counter::default(),
            journal_failing: Gauge::default(),
            process_group_only: Gauge::default(),
            tls_not_after: Family::default(),
            runs_refused: Counter::default(),
            unkillable: Counter::default(),
            gpu_utilization_ratio: Family::default(),
            gpu_memory_used_bytes: Family::default(),
            gpu_memory_total_bytes: Family::default(),
            gpu_temperature_celsius: Family::default(),
            gpu_throttle_reasons: Family::default(),
            gpu_faults: Family::default(),
        };
        m.register();
        m
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "baton_agent_replicas_running",
            "Job replicas this agent runs (running, suspended or stopping)",
            self.replicas_running.clone(),
        );
        r.register(
            "baton_agent_lease_seconds_left",
            "Seconds left on the lease the leader granted (0: expired or never granted)",
            self.lease_seconds_left.clone(),
        );
        r.register(
            "baton_agent_lease_expiries",
            "Times the lease ran out and every replica here was stopped",
            self.lease_expiries.clone(),
        );
        r.register(
            "baton_agent_replica_stops",
            "Replicas stopped after a checkpoint signal, by cause (directed, lease_expired)",
            self.stops.clone(),
        );
        r.register(
            "baton_agent_replica_stop_seconds",
            "From the checkpoint signal to the replica's exit",
            self.stop_seconds.clone(),
        );
        r.register("baton_agent_reports_sent", "Reports the leader accepted", self.reports_sent.clone());
        r.register(
            "baton_agent_reports_failed",
            "Reports refused, timed out or answered by a replica that does not lead",
            self.reports_failed.clone(),
        );
        r.register(
            TLS_METRIC_NAME,
            "When the certificate this agent serves (cert=own) and the first CA certificate of its bundle to expire (cert=ca) expire, in Unix seconds, as of the latest reload; absent under --insecure",
            self.tls_not_after.clone(),
        );
        r.register(
            "baton_agent_journal_failing",
            "1 while the journal cannot be written (a full disk, an I/O error): nothing new starts here",
            self.journal_failing.clone(),
        );
        r.register(
            "baton_agent_process_group_only",
            "1 when replicas are held by process groups only (no cgroup v2 here, or --containment process-group): a process that leaves its group escapes stops and kills",
            self.process_group_only.clone(),
        );
        r.register(
            "baton_agent_runs_refused",
            "RUNs not started or resumed because the journal could not be written",
            self.runs_refused.clone(),
        );
        r.register(
            "baton_agent_unkillable_replicas",
            "Replicas whose processes survived SIGKILL past the bound, reported Unkillable",
            self.unkillable.clone(),
        );
        r.register(
            GPU_METRIC_NAMES[0],
            "GPU busy fraction over NVML's last sample period (0..1)",
            self.gpu_utilization_ratio.clone(),
        );
        r.register(GPU_METRIC_NAMES[1], "GPU memory in use", self.gpu_memory_used_bytes.clone());
        r.register(GPU_METRIC_NAMES[2], "GPU memory in all", self.gpu_memory_total_bytes.clone());
        r.register(GPU_METRIC_NAMES[3], "GPU core temperature", self.gpu_temperature_celsius.clone());
        r.register(
            GPU_METRIC_NAMES[4],
            "Why the GPU's clocks are held down, as NVML's bitmask (0: not throttled; 0x20 software thermal, 0x40 hardware slowdown, 0x80 sync boost, ...)",
            self.gpu_throttle_reasons.clone(),
        );
        r.register(
            "baton_agent_gpu_faults",
            "GPU faults found and reported to the leader (XID, ECC, lost, health check, injected), by GPU",
            self.gpu_faults.clone(),
        );
    }

    /// A fault was found on `gpu` (bounded: one series per GPU of the node).
    pub fn gpu_fault(&self, gpu: u32) {
        self.gpu_faults.get_or_create(&vec![("gpu", gpu.to_string())]).inc();
    }

    pub fn lease_expired(&self) {
        self.lease_expiries.inc();
    }

    /// A replica that was sent its checkpoint signal exited `seconds` later.
    pub fn stopped(&self, lease_expired: bool, seconds: f64) {
        let cause = if lease_expired { "lease_expired" } else { "directed" };
        self.stops.get_or_create(&vec![("cause", cause.to_string())]).inc();
        self.stop_seconds.observe(seconds);
    }

    /// Says that replicas here are held by process groups only (the weaker mode).
    pub fn process_group_only(&self, weak: bool) {
        self.process_group_only.set(i64::from(weak));
    }

    pub fn journal_failing(&self, failing: bool) {
        self.journal_failing.set(i64::from(failing));
    }

    pub fn run_refused(&self) {
        self.runs_refused.inc();
    }

    pub fn unkillable(&self) {
        self.unkillable.inc();
    }

    pub fn report(&self, accepted: bool) {
        if accepted {
            self.reports_sent.inc();
        } else {
            self.reports_failed.inc();
        }
    }

    fn refresh(&self, view: &View) {
        self.replicas_running.set(view.running.borrow().len() as i64);
        let left_ms = match view.lease.borrow().standing(boot_ms()) {
            Standing::Held { left_ms } => left_ms,
            Standing::NeverGranted | Standing::Expired { .. } => 0,
        };
        self.lease_seconds_left.set(left_ms as f64 / 1000.0);
        // Read at each scrape, so that a reload (SIGHUP) shows at once.
        if let Some(n) = view.transport.not_after() {
            self.tls_not_after.get_or_create(&vec![("cert", "own".to_string())]).set(n.own_unix_s);
            self.tls_not_after.get_or_create(&vec![("cert", "ca".to_string())]).set(n.ca_unix_s);
        }
        if let Some(nvml) = &view.nvml {
            self.refresh_gpus(nvml);
        }
    }

    /// One series per GPU (bounded by `MAX_GPUS_PER_NODE` in the model); a GPU whose
    /// query fails is left out of this scrape.
    fn refresh_gpus(&self, nvml: &nvml_wrapper::Nvml) {
        let count = nvml.device_count().unwrap_or(0);
        for index in 0..count {
            let Ok(dev) = nvml.device_by_index(index) else { continue };
            let l: Labels = vec![("gpu", index.to_string()), ("uuid", dev.uuid().unwrap_or_default())];
            if let Ok(u) = dev.utilization_rates() {
                self.gpu_utilization_ratio.get_or_create(&l).set(f64::from(u.gpu) / 100.0);
            }
            if let Ok(mem) = dev.memory_info() {
                self.gpu_memory_used_bytes.get_or_create(&l).set(i64::try_from(mem.used).unwrap_or(i64::MAX));
                self.gpu_memory_total_bytes.get_or_create(&l).set(i64::try_from(mem.total).unwrap_or(i64::MAX));
            }
            let sensor = nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu;
            if let Ok(t) = dev.temperature(sensor) {
                self.gpu_temperature_celsius.get_or_create(&l).set(i64::from(t));
            }
            if let Ok(r) = dev.current_throttle_reasons() {
                self.gpu_throttle_reasons.get_or_create(&l).set(i64::try_from(r.bits()).unwrap_or(i64::MAX));
            }
        }
    }
}

/// What a scrape reads besides the counters.
pub struct View {
    pub running: watch::Receiver<Vec<Running>>,
    pub lease: watch::Receiver<Lease>,
    /// `None` without an NVIDIA driver: the GPU metrics are then absent.
    pub nvml: Option<nvml_wrapper::Nvml>,
    /// The certificates in force, for their expiry.
    pub transport: baton_proto::tls::Transport,
}

/// NVML if a driver is present; says once why the GPU metrics are absent otherwise.
pub fn open_nvml() -> Option<nvml_wrapper::Nvml> {
    match nvml_wrapper::Nvml::init() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::info!("no GPU metrics on /metrics: NVML is not available ({e})");
            None
        }
    }
}

/// The scrape text.
pub fn render(metrics: &AgentMetrics, view: &View) -> String {
    metrics.refresh(view);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &metrics.registry);
    out
}

/// Serves `GET /metrics` on `listener` until `closing` turns true.
pub async fn serve(
    transport: baton_proto::tls::Transport,
    listener: tokio::net::TcpListener,
    metrics: Arc<AgentMetrics>,
    view: Arc<View>,
    closing: watch::Receiver<bool>,
) {
    let text = Arc::new(move || render(&metrics, &view));
    baton_proto::scrape::serve(transport, listener, text, closing).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_are_counted_by_cause_with_their_durations() {
        let m = AgentMetrics::new();
        m.stopped(false, 0.3);
        m.stopped(true, 1.0);
        m.stopped(true, 2.0);
        let (_, running) = watch::channel(vec![Running::default()]);
        let (_, lease) = watch::channel(Lease::default());
        let text = render(&m, &View { running, lease, nvml: None, transport: baton_proto::tls::Transport::Insecure });
        for want in [
            "baton_agent_replica_stops_total{cause=\"directed\"} 1",
            "baton_agent_replica_stops_total{cause=\"lease_expired\"} 2",
            "baton_agent_replica_stop_seconds_count 3",
            "baton_agent_replica_stop_seconds_sum 3.3",
            "baton_agent_replicas_running 1",
            "baton_agent_lease_seconds_left 0.0",
        ] {
            assert!(text.lines().any(|l| l == want), "no line {want:?} in\n{text}");
        }
    }
}
