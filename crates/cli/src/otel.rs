//! OpenTelemetry export of the decision-path spans (docs/metrics.md, "OpenTelemetry"):
//! `--otlp-endpoint http://HOST:PORT` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) on `baton server`,
//! `baton agent` and `baton dev` sends baton's INFO spans over OTLP/gRPC to a collector.
//!
//! - Export runs on a runtime of its own (one worker thread), apart from the scheduler's, and
//!   a batch processor with a bounded queue feeds it: a span that finds the queue full is
//!   dropped, so a slow or unreachable collector costs spans, never the scheduler's progress.
//! - [`JobTraces`] puts the spans of one job's path, from every process, in one trace whose
//!   id comes from the job's id: the processes share no trace context (the job id is what
//!   crosses the log, the directives and the agents), so each derives the same ids.

use std::time::Duration;

use opentelemetry::trace::{Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanProcessor,
};
use sha2::{Digest, Sha256};

/// The standard variable that names the collector when `--otlp-endpoint` is not given.
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Spans the batch processor holds while the collector is slow or away; more are dropped.
pub const MAX_QUEUED_SPANS: usize = 2048;
/// Spans sent in one export request.
pub const MAX_EXPORT_BATCH: usize = 512;
/// How often queued spans are sent.
pub const EXPORT_INTERVAL_MS: u64 = 1000;
/// How long one export (connect, send, retries) may take before its spans are given up.
pub const EXPORT_TIMEOUT_MS: u64 = 5000;
/// How long a stopping process waits for the last spans to leave.
pub const SHUTDOWN_TIMEOUT_MS: u64 = 2000;

/// Checks an `--otlp-endpoint` value: `http://HOST:PORT` (OTLP/gRPC, 4317 by convention).
pub fn parse_endpoint(text: &str) -> Result<String, String> {
    let rest = match text.strip_prefix("http://") {
        Some(rest) => rest,
        None if text.starts_with("https://") => {
            return Err(format!(
                "{text:?}: https is not supported; give the collector's plain http:// address \
                 (a collector or agent beside this host forwards over TLS)"
            ));
        }
        None => return Err(format!("{text:?} is not an http://HOST:PORT URL (OTLP over gRPC)")),
    };
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(format!("{text:?}: expected http://HOST:PORT, with no path (the gRPC service has its own)"));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// What to export, and as whom.
#[derive(Debug, Clone)]
pub struct Export {
    /// `http://HOST:PORT` of the collector.
    pub endpoint: String,
    /// `service.name`: `baton-server` or `baton-agent`.
    pub service: &'static str,
    /// `service.instance.id`: the replica id or node name.
    pub instance: String,
}

/// The running export; dropping it sends what is queued (waiting at most
/// [`SHUTDOWN_TIMEOUT_MS`]) and stops the export runtime.
pub struct Pipeline {
    provider: SdkTracerProvider,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Pipeline {
    /// The exporter and its runtime; spans reach it through [`Pipeline::tracer`].
    pub fn start(export: &Export) -> Result<Pipeline, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the OTLP export runtime: {e}"))?;
        // The gRPC channel binds to the runtime it is made on; it connects lazily, so an
        // unreachable collector is no error here, only spans not delivered later.
        let exporter = runtime
            .block_on(async {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(export.endpoint.clone())
                    .with_timeout(Duration::from_millis(EXPORT_TIMEOUT_MS))
                    .build()
            })
            .map_err(|e| format!("--otlp-endpoint {}: {e}", export.endpoint))?;
        let batch = BatchSpanProcessor::builder(exporter).with_batch_config(batch_config()).build();
        let resource = Resource::builder()
            .with_service_name(export.service)
            .with_attribute(KeyValue::new("service.instance.id", export.instance.clone()))
            .build();
        let provider =
            SdkTracerProvider::builder().with_span_processor(JobTraces::new(batch)).with_resource(resource).build();
        Ok(Pipeline { provider, runtime: Some(runtime) })
    }

    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("baton")
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_millis(SHUTDOWN_TIMEOUT_MS));
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The batch processor's bounds (fixed: the standard `OTEL_BSP_*` variables are overridden).
fn batch_config() -> opentelemetry_sdk::trace::BatchConfig {
    BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUED_SPANS)
        .with_max_export_batch_size(MAX_EXPORT_BATCH)
        .with_scheduled_delay(Duration::from_millis(EXPORT_INTERVAL_MS))
        .build()
}

/// Fields that baton records as unsigned integers, which `tracing` hands over as text:
/// exported as integers so that a collector's queries compare numbers.
const INTEGER_FIELDS: &[&str] = &["job", "attempt", "term", "rank", "index", "decisions"];

/// Puts each span that carries a `job` into that job's trace (see [`job_ids`]), then hands
/// it to the next processor:
///
/// - the `submit` span is the trace's root, with the job's root span id;
/// - every other span of the job becomes a child of that root, wherever it ran; one that had
///   a parent outside the job (a `plan` under its `cycle`) keeps a link to it. A `commit`
///   under a submit had the submit as its parent, which it keeps as the root.
///
/// Spans without a job (a `cycle`, a plan's `commit`) pass unchanged.
pub struct JobTraces<P> {
    next: P,
    namespace: String,
}

impl<P: SpanProcessor> JobTraces<P> {
    pub fn new(next: P) -> JobTraces<P> {
        JobTraces { next, namespace: String::new() }
    }
}

impl<P: SpanProcessor> std::fmt::Debug for JobTraces<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTraces").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl<P: SpanProcessor> SpanProcessor for JobTraces<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.next.on_end(into_job_trace(span, &self.namespace));
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.next.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.next.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Two clusters that export to one collector keep their job traces apart by giving
        // their processes different `service.namespace`s (OTEL_RESOURCE_ATTRIBUTES).
        self.namespace = resource.get(&Key::new("service.namespace")).map(|v| v.to_string()).unwrap_or_default();
        self.next.set_resource(resource);
    }
}

/// The trace id of job `job`'s path and the span id of its root (the submit), the same in
/// every process of a cluster: a hash of the namespace and the job id.
pub fn job_ids(namespace: &str, job: u64) -> (TraceId, SpanId) {
    let mut h = Sha256::new();
    h.update(b"baton job trace\0");
    h.update(namespace.as_bytes());
    h.update(b"\0");
    h.update(job.to_be_bytes());
    let d = h.finalize();
    let mut trace = [0u8; 16];
    trace.copy_from_slice(&d[..16]);
    let mut span = [0u8; 8];
    span.copy_from_slice(&d[16..24]);
    // All-zero ids are invalid in OTLP; a hash gives them with probability 2^-64 or less.
    trace[15] |= u8::from(trace == [0; 16]);
    span[7] |= u8::from(span == [0; 8]);
    (TraceId::from_bytes(trace), SpanId::from_bytes(span))
}

/// `span`, moved into its job's trace when it carries a `job` (see [`JobTraces`]).
pub fn into_job_trace(mut span: SpanData, namespace: &str) -> SpanData {
    for kv in &mut span.attributes {
        if INTEGER_FIELDS.contains(&kv.key.as_str())
            && let Value::String(s) = &kv.value
            && let Ok(n) = s.as_str().parse::<i64>()
        {
            kv.value = Value::I64(n);
        }
    }
    let Some(job) = int_attribute(&span, "job") else { return span };
    let (trace, root) = job_ids(namespace, job);
    let old = span.span_context.clone();
    let context = |span_id| SpanContext::new(trace, span_id, TraceFlags::SAMPLED, false, TraceState::default());
    let duplicate = matches!(attribute(&span, "duplicate"), Some(Value::Bool(true)));
    if span.name == "submit" && !duplicate {
        span.span_context = context(root);
        span.parent_span_id = SpanId::INVALID;
    } else {
        if span.parent_span_id != SpanId::INVALID && span.name != "commit" {
            let parent = SpanContext::new(
                old.trace_id(),
                span.parent_span_id,
                old.trace_flags(),
                false,
                old.trace_state().clone(),
            );
            span.links.links.push(Link::with_context(parent));
        }
        span.span_context = context(old.span_id());
        span.parent_span_id = root;
    }
    span.parent_span_is_remote = false;
    span
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn int_attribute(span: &SpanData, key: &str) -> Option<u64> {
    match attribute(span, key)? {
        Value::I64(n) => u64::try_from(*n).ok(),
        Value::String(s) => s.as_str().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::SystemTime;

    use opentelemetry::InstrumentationScope;
    use opentelemetry::trace::{SpanKind, Status, Tracer as _};
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    fn span(name: &'static str, trace: u128, id: u64, parent: u64, attributes: Vec<KeyValue>) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(trace),
                SpanId::from(id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(parent),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: SystemTime::UNIX_EPOCH,
            end_time: SystemTime::UNIX_EPOCH,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("test").build(),
        }
    }

    fn text(key: &'static str, value: &str) -> KeyValue {
        KeyValue::new(key, value.to_string())
    }

    #[test]
    fn the_spans_of_one_job_from_any_process_land_in_one_trace_under_its_submit() {
        let (trace, root) = job_ids("", 42);
        let submit = into_job_trace(span("submit", 1, 11, 0, vec![text("job", "42"), text("name", "a")]), "");
        assert_eq!((submit.span_context.trace_id(), submit.span_context.span_id()), (trace, root));
        assert_eq!(submit.parent_span_id, SpanId::INVALID, "the submit is the root");
        // The submit's commit, in the same process, had the submit as its parent.
        let commit = into_job_trace(span("commit", 1, 12, 11, vec![text("job", "42"), text("op", "Submit")]), "");
        assert_eq!((commit.span_context.trace_id(), commit.parent_span_id), (trace, root));
        assert!(commit.links.is_empty(), "{:?}", commit.links);
        // A plan under its cycle (another trace, the leader's) moves, linked to the cycle.
        let plan = into_job_trace(span("plan", 2, 21, 20, vec![text("job", "42"), text("attempt", "1")]), "");
        assert_eq!(
            (plan.span_context.trace_id(), plan.span_context.span_id(), plan.parent_span_id),
            (trace, SpanId::from(21), root)
        );
        let link = &plan.links.links[0].span_context;
        assert_eq!((link.trace_id(), link.span_id()), (TraceId::from(2), SpanId::from(20)));
        // An agent's start, a root in its own process.
        let start = into_job_trace(span("agent_start", 3, 31, 0, vec![text("job", "42")]), "");
        assert_eq!((start.span_context.trace_id(), start.parent_span_id), (trace, root));
        assert!(start.links.is_empty());
        assert!(plan.attributes.contains(&KeyValue::new("attempt", 1i64)), "numbers are exported as numbers");
    }

    #[test]
    fn spans_without_a_job_and_duplicate_submits_keep_their_place() {
        let cycle = into_job_trace(span("cycle", 2, 20, 0, vec![text("term", "3")]), "");
        assert_eq!((cycle.span_context.trace_id(), cycle.span_context.span_id()), (TraceId::from(2), SpanId::from(20)));
        assert!(cycle.attributes.contains(&KeyValue::new("term", 3i64)));
        let (trace, root) = job_ids("", 42);
        let again =
            into_job_trace(span("submit", 5, 51, 0, vec![text("job", "42"), KeyValue::new("duplicate", true)]), "");
        assert_eq!((again.span_context.trace_id(), again.span_context.span_id()), (trace, SpanId::from(51)));
        assert_eq!(again.parent_span_id, root, "a retried submit is a child of the first");
    }

    #[test]
    fn job_trace_ids_differ_by_job_and_by_namespace_and_are_valid() {
        let ids = [job_ids("", 1), job_ids("", 2), job_ids("prod", 1)];
        for (i, a) in ids.iter().enumerate() {
            assert!(a.0 != TraceId::INVALID && a.1 != SpanId::INVALID);
            for b in &ids[i + 1..] {
                assert_ne!(a.0, b.0);
            }
        }
        assert_eq!(job_ids("prod", 1), job_ids("prod", 1));
    }

    #[test]
    fn an_endpoint_is_a_plain_http_url_without_a_path() {
        assert_eq!(parse_endpoint("http://collector:4317/").unwrap(), "http://collector:4317");
        for bad in ["collector:4317", "https://c:4317", "http://", "http://c:4317/v1/traces"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
        assert!(parse_endpoint("https://c:4317").unwrap_err().contains("https is not supported"));
    }

    /// A collector that accepts connections and never answers: spans keep being made at full
    /// speed (each `end` hands the span to a bounded queue or drops it), and stopping the
    /// export waits a bounded time.
    #[test]
    fn a_collector_that_never_answers_blocks_no_span_and_no_shutdown() {
        let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", hole.local_addr().unwrap());
        let export = Export { endpoint, service: "baton-server", instance: "1".into() };
        let pipeline = Pipeline::start(&export).unwrap();
        let tracer = pipeline.tracer();
        for i in 0..(MAX_QUEUED_SPANS * 5) {
            let mut s = tracer.start("plan");
            opentelemetry::trace::Span::set_attribute(&mut s, KeyValue::new("job", i as i64));
            opentelemetry::trace::Span::end(&mut s);
        }
        drop(pipeline);
    }
}
