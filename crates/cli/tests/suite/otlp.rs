//! OpenTelemetry export against a real collector: an OTLP/gRPC trace service in this test
//! (the `opentelemetry-proto` service, decoding the protobuf) receives the spans of a job
//! submitted to a live `baton dev --otlp-endpoint`, from its replicas and its agent, in one
//! trace, with `job`, `attempt` and `term` (docs/metrics.md, "OpenTelemetry"). A collector
//! that never answers stops nothing: the cluster runs a job and stops as usual.

use crate::dev_output;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// A span as received, with the `service.name` and `service.instance.id` of its process.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    instance: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<Value> {
        find(&self.span.attributes, key)
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key)? {
            Value::IntValue(n) => Some(n),
            _ => None,
        }
    }
}

fn find(attrs: &[KeyValue], key: &str) -> Option<Value> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()).and_then(|v| v.value)
}

fn text(v: Option<Value>) -> String {
    match v {
        Some(Value::StringValue(s)) => s,
        other => format!("{other:?}"),
    }
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Got>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for rs in request.into_inner().resource_spans {
            let attrs = rs.resource.map(|r| r.attributes).unwrap_or_default();
            let (service, instance) = (text(find(&attrs, "service.name")), text(find(&attrs, "service.instance.id")));
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                got.push(Got { service: service.clone(), instance: instance.clone(), span });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

impl Collector {
    /// Serves on a free loopback port; returns its `http://` URL.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
        });
        url
    }

    fn spans(&self) -> Vec<Got> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Stops the dev cluster when the test ends, however it ends.
struct Kill(Option<std::process::Child>);

impl Kill {
    /// SIGTERM (dev then stops its children) and the exit status.
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.0.take()?;
        // SAFETY: kill(2) on the child this test started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait().ok()
    }
}

impl Drop for Kill {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Dev {
    child: Kill,
    env: Vec<(String, String)>,
    text: String,
    _dir: tempfile::TempDir,
}

impl Dev {
    /// `baton dev` sending its spans to `otlp`; `slot` keeps the two tests' ports apart.
    fn start(otlp: &str, slot: u16) -> Dev {
        // Below Linux's ephemeral range (32768-60999), above the dashboard test's ports
        // (30,200-32,600), with room for six ports (three API, three peer) and the metrics
        // ports (+100 to +104).
        let base = 32_300 + (std::process::id() % 30) as u16 * 12 + slot * 6;
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(BATON)
            .args(["dev", "--port", &base.to_string(), "--otlp-endpoint", otlp, "--dir"])
            .arg(dir.path())
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let child = Kill(Some(child));
        let text = dev_output::until_ready(out);
        let word = |prefix: &str| dev_output::word(&text, prefix);
        let env = ["BATON_SERVER", "BATON_TLS_DIR", "BATON_TOKEN_FILE"]
            .map(|v| (v.to_string(), word(&format!("export {v}="))))
            .to_vec();
        Dev { child, env, text, _dir: dir }
    }

    fn baton(&self, args: &[&str]) -> String {
        let mut c = Command::new(BATON);
        c.args(args).env_remove("BATON_INSECURE").env_remove("BATON_TOKEN");
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        let out = c.output().unwrap();
        assert!(out.status.success(), "baton {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// The job's `state` and `id` as `baton describe -o json` shows them.
    fn job(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.baton(&["describe", name, "-o", "json"])).unwrap()
    }

    fn runs(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.job(name)["state"] != "Running" {
            assert!(Instant::now() < deadline, "{name} did not run within 60 s: {}", self.job(name));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_receives_one_trace_of_a_jobs_path_from_the_replicas_and_the_agent() {
    let collector = Collector::default();
    let url = collector.start().await;
    let dev = tokio::task::spawn_blocking(move || Dev::start(&url, 0)).await.unwrap();
    assert!(dev.text.contains("traces: sent over OTLP to http://127.0.0.1:"), "{}", dev.text);
    let dev = Arc::new(dev);
    let d = dev.clone();
    let id = tokio::task::spawn_blocking(move || {
        d.baton(&["queue", "create", "team-a", "--gpus", "8"]);
        d.baton(&["submit", "--name", "traced", "--queue", "team-a", "--gpus", "2", "--", "sleep", "600"]);
        d.runs("traced");
        d.job("traced")["id"].as_u64().unwrap_or_else(|| panic!("no id in {}", d.job("traced")))
    })
    .await
    .unwrap();

    // Every step of the path, from the processes that make it: apply on each replica.
    let path = ["submit", "commit", "plan", "directive", "agent_start"];
    let of_job = |name: &str| -> Vec<Got> {
        collector.spans().into_iter().filter(|g| g.span.name == name && g.int("job") == Some(id as i64)).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while path.iter().any(|n| of_job(n).is_empty()) || of_job("apply").len() < 3 {
        let names: Vec<String> =
            collector.spans().iter().map(|g| format!("{} {:?}", g.span.name, g.attr("job"))).collect();
        assert!(Instant::now() < deadline, "not every span of job {id} arrived within 60 s; got {names:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let submit = of_job("submit").remove(0);
    assert_eq!(submit.service, "baton-server");
    assert!(submit.span.parent_span_id.is_empty(), "the submit is the trace's root: {submit:?}");
    let trace = submit.span.trace_id.clone();
    let term = of_job("plan")[0].int("term").expect("plan has a term");
    assert!(term > 0);
    let mut applied_on: Vec<String> = Vec::new();
    for name in ["commit", "plan", "apply", "directive", "agent_start"] {
        for g in of_job(name) {
            assert_eq!(g.span.trace_id, trace, "{name} is in the job's trace: {g:?}");
            assert_eq!(g.span.parent_span_id, submit.span.span_id, "{name} is under the submit: {g:?}");
            if name != "commit" {
                assert_eq!(g.int("attempt"), Some(1), "{name} names the first attempt: {g:?}");
                assert_eq!(g.int("term"), Some(term), "{name} names the leader's term: {g:?}");
            }
            if name == "apply" {
                applied_on.push(g.instance.clone());
            }
        }
    }
    applied_on.sort();
    assert_eq!(applied_on, ["1", "2", "3"], "each replica applied the start");
    let start = of_job("agent_start").remove(0);
    assert_eq!((start.service.as_str(), text(start.attr("node"))), ("baton-agent", start.instance.clone()));
    // The plan stays reachable from the leader's cycle that made it.
    let plan = of_job("plan").remove(0);
    let cycle = &plan.span.links.first().unwrap_or_else(|| panic!("the plan links its cycle: {plan:?}")).span_id;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !collector.spans().iter().any(|g| g.span.name == "cycle" && &g.span.span_id == cycle) {
        assert!(Instant::now() < deadline, "the linked cycle span did not arrive");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(dev);
}

/// A collector that accepts connections and never answers: the dev cluster still runs a
/// job, and stops when asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_stops_nothing() {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", hole.local_addr().unwrap());
    tokio::task::spawn_blocking(move || {
        let dev = Dev::start(&url, 1);
        dev.baton(&["queue", "create", "team-a", "--gpus", "8"]);
        for i in 0..3 {
            let name = format!("j{i}");
            dev.baton(&["submit", "--name", &name, "--queue", "team-a", "--gpus", "2", "--", "sleep", "600"]);
        }
        for i in 0..3 {
            dev.runs(&format!("j{i}"));
        }
        let mut dev = dev;
        let status = dev.child.stop().unwrap();
        assert!(status.success(), "dev stopped cleanly: {status:?}");
    })
    .await
    .unwrap();
    drop(hole);
}
