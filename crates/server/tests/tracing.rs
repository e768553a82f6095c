//! One job's decision path as spans, in one process (three replicas and a real agent): a
//! submit, its commit, the cycle that planned it, the plan decision, the apply that started
//! it on every replica, the directive that told the agent, and the agent's start. Each
//! step's span carries the job's id, the attempt and the term, so a trace of the job is
//! the spans with its id (docs/metrics.md, "Tracing").
//!
//! Its own test binary: the capturing subscriber is global (spans open on any runtime thread).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::v1::*;
use common::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as captured: its name, its parent's name and its fields as text.
#[derive(Debug, Clone, Default)]
struct Captured {
    name: String,
    parent: Option<String>,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<BTreeMap<u64, Captured>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}").trim_matches('"').to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        // baton's own spans; the libraries' (h2, tower, ...) are many and say nothing here.
        if !attrs.metadata().target().starts_with("baton") {
            return;
        }
        let mut c = Captured { name: attrs.metadata().name().to_string(), ..Default::default() };
        c.parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name().to_string());
        attrs.record(&mut Fields(&mut c.fields));
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id.into_u64(), c);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(c) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut c.fields));
        }
    }
}

impl Capture {
    /// Spans named `name` whose `job` field is `job`.
    fn of(&self, name: &str, job: u64) -> Vec<Captured> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.values().filter(|c| c.name == name && c.fields.get("job") == Some(&job.to_string())).cloned().collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_submit_to_start_path_is_one_chain_of_spans_carrying_job_attempt_and_term() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("research", 8)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = baton_agent::AgentConfig::new("n1", dir.path());
    config.servers = cluster.addrs();
    config.heartbeat_ms = 50;
    let inventory = baton_agent::inventory::development_inventory("n1", 8);
    let _agent = baton_agent::start_with_inventory(config, inventory).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // A read may find no quorum for a moment on a loaded machine; it is asked again.
    while !c.list_nodes(Empty {}).await.is_ok_and(|r| !r.into_inner().nodes.is_empty()) {
        assert!(Instant::now() < deadline, "the agent did not register within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut spec = gpu_job("traced", "research", "train", 2);
    spec.command = vec!["sleep".into(), "30".into()];
    let id = c.submit(submit_of(spec)).await.unwrap().into_inner().id;
    wait_state(&mut c, "traced", JobState::Running).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while capture.of("agent_start", id).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no agent_start span for job {id}: {:#?}",
            capture.0.lock().unwrap_or_else(|p| p.into_inner())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let one = |name: &str| {
        let spans = capture.of(name, id);
        assert!(
            !spans.is_empty(),
            "no {name} span carries job {id}: {:#?}",
            capture.0.lock().unwrap_or_else(|p| p.into_inner())
        );
        spans[0].clone()
    };
    let submit = one("submit");
    let commit = one("commit");
    assert_eq!(commit.parent.as_deref(), Some("submit"), "the submit's commit is its child: {commit:?}");
    assert_eq!(commit.fields.get("op").map(String::as_str), Some("Submit"), "{commit:?}");
    let plan = one("plan");
    assert_eq!(plan.parent.as_deref(), Some("cycle"), "a plan decision is a child of its cycle: {plan:?}");
    assert_eq!(plan.fields.get("decision").map(String::as_str), Some("place"), "{plan:?}");
    // The agent may start the job before the third replica applies the start: a quorum's
    // commit sends the directive (the leader publishes once its plan is applied).
    let deadline = Instant::now() + Duration::from_secs(10);
    while capture.of("apply", id).len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let apply = capture.of("apply", id);
    assert_eq!(apply.len(), 3, "each replica applies the start: {apply:#?}");
    let directive = one("directive");
    let start = one("agent_start");
    let term = plan.fields["term"].clone();
    assert_ne!(term, "0");
    for span in [&submit, &plan, &apply[0], &directive, &start] {
        assert_eq!(span.fields.get("term"), Some(&term), "one term along the path: {span:?}");
    }
    for span in [&plan, &apply[0], &directive, &start] {
        assert_eq!(span.fields.get("attempt").map(String::as_str), Some("1"), "the first attempt: {span:?}");
    }
    assert_eq!(directive.fields.get("node").map(String::as_str), Some("n1"), "{directive:?}");
}
