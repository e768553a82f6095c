//! The simulator's output: `-o json` (docs/scenario-format.md, "Output") and the readable
//! timeline.

use std::collections::BTreeMap;
use std::fmt::Write;

use baton_model::event::{Event, EventKind};
use baton_model::job::JobState;
use baton_model::name::Name;
use baton_model::quantity::Human;
use baton_model::state::State;
use serde::{Serialize, Serializer};

/// Virtual seconds: a whole number when whole, else a decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Secs(pub u64);

impl Serialize for Secs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 % 1000 == 0 { s.serialize_u64(self.0 / 1000) } else { s.serialize_f64(self.0 as f64 / 1000.0) }
    }
}

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 % 1000 == 0 { write!(f, "{}", self.0 / 1000) } else { write!(f, "{}", self.0 as f64 / 1000.0) }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub name: String,
    /// Configuration an operator should look at (oversubscribed guarantees).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub steps: Vec<StepOut>,
    pub summary: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct StepOut {
    pub at: Secs,
    pub events: Vec<EventOut>,
    pub jobs: BTreeMap<Name, JobOut>,
    pub queues: BTreeMap<Name, QueueOut>,
    /// Each user's decayed usage over all queues (decisions.md section 12), while a
    /// half-life is set.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, UserOut>,
}

#[derive(Debug, Clone, Serialize)]
pub struct UserOut {
    /// Decayed resource-seconds per resource, in whole units (GPU-seconds, CPU-seconds).
    pub usage: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventOut {
    pub at: Secs,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<Name>,
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<BTreeMap<Name, Vec<u32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpointed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<Name>,
    pub message: String,
}

impl EventOut {
    pub fn of(e: &Event) -> EventOut {
        let mut out = EventOut {
            at: Secs(e.at_ms),
            job: e.job.clone(),
            node: e.node.clone(),
            kind: e.kind.type_name(),
            by: None,
            attempt: None,
            nodes: None,
            checkpointed: None,
            exit_code: None,
            queue: None,
            message: e.message.clone(),
        };
        match &e.kind {
            EventKind::Started { attempt, nodes } => {
                out.attempt = Some(*attempt);
                out.nodes = Some(nodes.clone());
            }
            EventKind::Preempted { by } | EventKind::Suspended { by } => out.by = Some(by.clone()),
            EventKind::Stopped { checkpointed } => out.checkpointed = Some(*checkpointed),
            EventKind::Failed { exit_code } => out.exit_code = Some(*exit_code),
            EventKind::QueueUpdated { queue } => out.queue = Some(queue.clone()),
            _ => {}
        }
        out
    }

    /// A step the simulator could not carry out (say, `finish` for a job not running).
    pub fn refused(at_ms: u64, job: Option<Name>, message: String) -> EventOut {
        EventOut {
            at: Secs(at_ms),
            job,
            node: None,
            kind: "StepRefused",
            by: None,
            attempt: None,
            nodes: None,
            checkpointed: None,
            exit_code: None,
            queue: None,
            message,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct JobOut {
    pub state: &'static str,
    pub queue: Name,
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<Name>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<BTreeMap<Name, Vec<u32>>>,
    /// Whole GPUs, or a fraction for a job on a shared GPU (`0.5`; decisions.md section 11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<serde_json::Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<Name>,
}

/// Per resource, in its smallest unit (CPUs in thousandths).
pub type Amounts = BTreeMap<String, u64>;

#[derive(Debug, Clone, Serialize)]
pub struct PoolOut {
    #[serde(serialize_with = "in_units")]
    pub usage: Amounts,
    #[serde(serialize_with = "in_units")]
    pub nominal: Amounts,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueOut {
    #[serde(serialize_with = "in_units")]
    pub usage: Amounts,
    #[serde(serialize_with = "in_units")]
    pub nominal: Amounts,
    pub pools: BTreeMap<Name, PoolOut>,
}

/// A JSON amount in the resource's own unit: `"cpu": 2.5` means two and a half CPUs, as a
/// scenario file would write it, not 2500 thousandths.
#[derive(Serialize)]
#[serde(untagged)]
enum Amount {
    Whole(u64),
    Decimal(f64),
}

/// Each resource in its own unit; a shared GPU's thousandths (`gpu.milli`) are shown with
/// the whole GPUs (`"gpu": 1.5`).
fn in_units<S: serde::Serializer>(amounts: &Amounts, s: S) -> Result<S::Ok, S::Error> {
    use baton_model::resources::{GPU, GPU_FRACTION};
    let fraction = amounts.get(GPU_FRACTION).copied().unwrap_or(0);
    let mut shown: BTreeMap<&str, u64> = amounts.iter().map(|(k, &v)| (k.as_str(), v)).collect();
    shown.remove(GPU_FRACTION);
    if fraction > 0 {
        *shown.entry(GPU).or_insert(0) = shown.get(GPU).copied().unwrap_or(0) * 1000 + fraction;
    }
    s.collect_map(shown.into_iter().map(|(k, v)| {
        let per_one = if k == GPU && fraction > 0 { 1000 } else { baton_model::quantity::units_per_one(k) };
        let amount =
            if v % per_one == 0 { Amount::Whole(v / per_one) } else { Amount::Decimal(v as f64 / per_one as f64) };
        (k, amount)
    }))
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub preemptions: u64,
    /// Jobs that ran to their end (Succeeded or Failed).
    pub finished: u64,
    /// GPU-seconds used over GPU-seconds available, from the first instant to the last.
    pub gpu_utilization: f64,
    pub end: Secs,
}

pub fn jobs(state: &State) -> BTreeMap<Name, JobOut> {
    let mut out = BTreeMap::new();
    for j in state.jobs().values() {
        let held = !j.replicas.is_empty();
        let pool = j.replicas.first().and_then(|r| state.nodes().get(&r.node)).map(|n| n.spec.pool.clone());
        let job = JobOut {
            state: j.state.as_str(),
            queue: j.spec.queue.clone(),
            attempt: j.attempt,
            reason: (!j.reason.is_empty()).then(|| j.reason.clone()),
            preempted_by: j.preempted_by.and_then(|p| state.job(p)).map(|p| p.spec.name.clone()),
            nodes: held.then(|| j.nodes()),
            gpus: held.then(|| gpu_number(j.gpus_milli())),
            pool,
        };
        out.insert(j.spec.name.clone(), job);
    }
    out
}

/// GPUs held as a JSON number: whole ones as an integer, a fraction as a decimal.
fn gpu_number(milli: u64) -> serde_json::Number {
    if milli % 1000 == 0 {
        serde_json::Number::from(milli / 1000)
    } else {
        serde_json::Number::from_f64(milli as f64 / 1000.0).unwrap_or_else(|| serde_json::Number::from(0))
    }
}

/// Each user's decayed usage at `now_ms` (the simulated instant: the state's clock is its
/// last command's), summed over the queues (section 12).
pub fn users(state: &State, now_ms: u64) -> BTreeMap<String, UserOut> {
    let usage = state.usage();
    let mut out: BTreeMap<String, UserOut> = BTreeMap::new();
    for key in usage.accounts().keys() {
        let at = baton_model::usage::in_units(&usage.usage_at(key, now_ms.max(state.now_ms())));
        let user = out.entry(key.1.clone()).or_insert_with(|| UserOut { usage: BTreeMap::new() });
        for (r, v) in at {
            *user.usage.entry(r).or_insert(0.0) += v;
        }
    }
    out
}

pub fn queues(state: &State) -> BTreeMap<Name, QueueOut> {
    let l = state.ledger();
    let mut out = BTreeMap::new();
    // The same numbers `queue list` serves (`Ledger::queue_usage`).
    for (qi, q) in l.queues.iter().enumerate() {
        let mut usage = Amounts::new();
        let mut nominal = Amounts::new();
        let mut pools = BTreeMap::new();
        for (p, used, nom) in l.queue_usage(qi) {
            let pool = &l.pools[p];
            let (u, n) = (l.kinds.resources(&used), l.kinds.resources(&nom));
            let amounts =
                |r: &baton_model::Resources| -> Amounts { r.iter().map(|(k, v)| (k.to_string(), v)).collect() };
            for (k, v) in u.iter() {
                *usage.entry(k.to_string()).or_insert(0) += v;
            }
            for (k, v) in n.iter() {
                *nominal.entry(k.to_string()).or_insert(0) += v;
            }
            pools.insert(pool.name.clone(), PoolOut { usage: amounts(&u), nominal: amounts(&n) });
        }
        // A resource with a guarantee shows 0 usage rather than nothing.
        for k in nominal.keys() {
            usage.entry(k.clone()).or_insert(0);
        }
        out.insert(q.name.clone(), QueueOut { usage, nominal, pools });
    }
    out
}

fn amounts_text(a: &Amounts, of: &Amounts) -> String {
    use baton_model::resources::{GPU, GPU_FRACTION};
    let mut keys: Vec<&str> = a.keys().chain(of.keys()).map(String::as_str).collect();
    for k in keys.iter_mut() {
        // A shared GPU's fraction shows with the whole GPUs (`0.5/2 gpu`).
        if *k == GPU_FRACTION {
            *k = GPU;
        }
    }
    keys.sort_by_key(|k| (*k != GPU, k.to_string()));
    keys.dedup();
    if keys.is_empty() {
        return "nothing".into();
    }
    let get = |m: &Amounts, k: &str| m.get(k).copied().unwrap_or(0);
    keys.iter()
        .map(|&k| {
            let h = |m: &Amounts| match k {
                GPU => baton_model::quantity::thousandths(get(m, GPU) * 1000 + get(m, GPU_FRACTION)),
                _ => Human { resource: k, value: get(m, k) }.to_string(),
            };
            format!("{}/{} {k}", h(a), h(of))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn event_text(e: &EventOut) -> String {
    let who = e.job.as_ref().or(e.node.as_ref()).map(Name::to_string).unwrap_or_default();
    let mut detail = e.message.clone();
    if let Some(nodes) = &e.nodes {
        let on: Vec<String> = nodes
            .iter()
            .map(|(n, g)| if g.is_empty() { n.to_string() } else { format!("{n}[gpu {}]", ranges(g)) })
            .collect();
        detail = format!("{detail} on {}", on.join(" "));
    }
    if let Some(by) = &e.by {
        detail = format!("by {by}: {detail}");
    }
    format!("  {:<11} {who:<20} {detail}", e.kind)
}

/// The readable timeline: events per instant, queues and waiting jobs when they change.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== {} ==", report.name);
    for w in &report.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let mut last_queues = String::new();
    for step in &report.steps {
        let _ = writeln!(out, "t={}s", step.at);
        for e in &step.events {
            let _ = writeln!(out, "{}", event_text(e));
        }
        let q: Vec<String> =
            step.queues.iter().map(|(n, q)| format!("{n} {}", amounts_text(&q.usage, &q.nominal))).collect();
        let q = q.join("; ");
        if q != last_queues && !q.is_empty() {
            let _ = writeln!(out, "  queues: {q}");
            last_queues = q;
        }
        for (name, j) in &step.jobs {
            if j.state == JobState::Pending.as_str()
                && let Some(r) = &j.reason
            {
                let _ = writeln!(out, "  waiting: {name}: {r}");
            }
        }
    }
    let s = &report.summary;
    let plural = if s.preemptions == 1 { "" } else { "s" };
    let _ = writeln!(
        out,
        "summary: {} preemption{plural}, {} finished, GPU utilization {:.1}% until t={}s",
        s.preemptions,
        s.finished,
        s.gpu_utilization * 100.0,
        s.end
    );
    out
}

/// `[0, 1, 2, 5]` as `0-2,5`.
fn ranges(gpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < gpus.len() {
        let mut j = i;
        while j + 1 < gpus.len() && gpus[j + 1] == gpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { gpus[i].to_string() } else { format!("{}-{}", gpus[i], gpus[j]) });
        i = j + 1;
    }
    parts.join(",")
}
