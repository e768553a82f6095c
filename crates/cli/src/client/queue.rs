//! `baton queue list|get|create|update|delete`. `create` is refused by the replicated state
//! if the name is taken (CreateQueue). A queue is written whole, so `update` reads the queue
//! and its revision, changes only the fields given (flags or a file), and writes it back
//! naming that revision (UpdateQueue); if another write landed in between, it reads again
//! and redoes the change, up to `MAX_UPDATE_TRIES` times. The server fills the fields a new
//! queue leaves out, and `get` shows what it sent.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use baton_model::node::DEFAULT_POOL;
use baton_proto::words::Word;
use baton_proto::{convert, v1};
use clap::{Args, Subcommand};

use crate::client::cluster::queue_usage_table;
use crate::client::error::{ClientError, Subject};
use crate::client::human::{amount, parse_resource_list, parse_word, usage};
use crate::client::output::Format;
use crate::client::{Conn, ConnArgs, emit, print_ack};

#[derive(Args, Debug)]
pub struct QueueArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: QueueCmd,
}

#[derive(Subcommand, Debug)]
pub enum QueueCmd {
    /// List queues with their usage against nominal quota.
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Show one queue: quotas, policy and usage.
    Get {
        name: String,
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Create a queue from flags or a file (`-f queue.yaml`, a scenario `queues` entry).
    Create(QueueEdit),
    /// Change a queue: only the fields given change.
    Update(QueueEdit),
    /// Delete a queue (it must hold no jobs).
    Delete { name: String },
}

#[derive(Args, Debug)]
pub struct QueueEdit {
    /// The queue's name (required unless -f).
    #[arg(required_unless_present = "file")]
    pub name: Option<String>,
    /// The queue in a file, in the shape of a scenario's `queues` entry.
    #[arg(short = 'f', long = "file", conflicts_with = "name")]
    pub file: Option<PathBuf>,
    /// The cohort it lends to and borrows from ("" leaves its cohort).
    #[arg(long, conflicts_with = "file")]
    pub cohort: Option<String>,
    /// Nominal (guaranteed) GPUs in --pool.
    #[arg(long, conflicts_with = "file")]
    pub gpus: Option<u64>,
    /// The pool --gpus, --borrow-limit and --lend-limit apply to.
    #[arg(long, default_value = DEFAULT_POOL, conflicts_with = "file")]
    pub pool: String,
    /// GPUs it may borrow beyond nominal in --pool ("none": no limit).
    #[arg(long, conflicts_with = "file")]
    pub borrow_limit: Option<String>,
    /// GPUs of its nominal quota it may lend in --pool ("none": no limit).
    #[arg(long, conflicts_with = "file")]
    pub lend_limit: Option<String>,
    /// Fair-share weight.
    #[arg(long, conflicts_with = "file")]
    pub weight: Option<f64>,
    /// Order of the queue's pending jobs (BestEffortFIFO, StrictFIFO): StrictFIFO holds later
    /// jobs behind the head.
    #[arg(long, value_parser = parse_word::<v1::QueueOrdering>, conflicts_with = "file")]
    pub ordering: Option<v1::QueueOrdering>,
    /// Preemption of the queue's own jobs for a higher-priority one (Never, LowerPriority,
    /// LowerOrNewerEqualPriority).
    #[arg(long, value_parser = parse_word::<v1::WithinQueue>, conflicts_with = "file")]
    pub within_queue: Option<v1::WithinQueue>,
    /// Reclaiming its lent quota by preempting borrowers (Never, LowerPriority, Any).
    #[arg(long, value_parser = parse_word::<v1::ReclaimWithinCohort>, conflicts_with = "file")]
    pub reclaim_within_cohort: Option<v1::ReclaimWithinCohort>,
    /// Borrow by preempting lower-priority jobs in the cohort (true or false).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", conflicts_with = "file")]
    pub borrow_within_cohort: Option<bool>,
    /// With --borrow-within-cohort: only victims below this priority.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "file")]
    pub max_priority_threshold: Option<i32>,
    /// What the queue shows of others' jobs to its users (all: everything but their
    /// environment and logs; names: id, name, state and owner; own: nothing). Owners, the
    /// queue's admins, operators and admins see everything. A new queue's is all.
    #[arg(long, value_parser = parse_word::<v1::JobVisibility>)]
    pub visibility: Option<v1::JobVisibility>,
    /// Resources one user's jobs in the queue may hold at once, e.g. gpu=8 (decisions.md
    /// section 12), or `none`. A job over it waits; it preempts nobody to get under it.
    #[arg(long, value_name = "RESOURCE=AMOUNT,...|none", value_parser = parse_resource_list)]
    pub max_per_user: Option<baton_model::resources::Resources>,
}

/// Reads and writes one `queue update` tries while other writes keep landing between them;
/// past this the user is told to run it again (a queue changed this often needs a look).
pub const MAX_UPDATE_TRIES: u32 = 5;

fn usage_err(msg: impl Into<String>) -> ClientError {
    ClientError::Usage(msg.into())
}

pub async fn list_queues(conn: &Conn) -> Result<Vec<v1::QueueUsage>, ClientError> {
    Ok(conn.call(Subject::Other, "", |mut c| async move { c.list_queues(v1::Empty {}).await }).await?.queues)
}

/// The queue as it is now; there is no single-queue read, so it comes from the list.
pub async fn get_queue(conn: &Conn, name: &str) -> Result<v1::QueueUsage, ClientError> {
    list_queues(conn)
        .await?
        .into_iter()
        .find(|q| q.queue.as_ref().is_some_and(|q| q.name == name))
        .ok_or_else(|| ClientError::NotFound { what: "queue", name: name.to_string(), see: "baton queue list" })
}

/// "none" (no limit) or a whole number of GPUs.
fn limit(text: &str, flag: &str) -> Result<Option<u64>, ClientError> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    text.parse::<u64>().map(Some).map_err(|_| usage_err(format!("{flag} {text:?}: expected a number of GPUs or none")))
}

fn set_limit(m: &mut HashMap<String, u64>, value: Option<u64>) {
    match value {
        Some(v) => {
            m.insert("gpu".into(), v);
        }
        None => {
            m.remove("gpu");
        }
    }
}

/// Applies the flags given onto `q`, leaving every other field as it is.
pub fn apply_flags(q: &mut v1::Queue, e: &QueueEdit) -> Result<(), ClientError> {
    set_visibility(q, e);
    if let Some(c) = &e.cohort {
        q.cohort = c.clone();
    }
    if e.gpus.is_some() || e.borrow_limit.is_some() || e.lend_limit.is_some() {
        let idx = match q.quotas.iter().position(|p| p.pool == e.pool) {
            Some(i) => i,
            None => {
                q.quotas.push(v1::PoolQuota { pool: e.pool.clone(), ..Default::default() });
                q.quotas.len() - 1
            }
        };
        let pq = &mut q.quotas[idx];
        if let Some(g) = e.gpus {
            pq.nominal.get_or_insert_with(Default::default).amounts.insert("gpu".into(), g);
        }
        if let Some(b) = &e.borrow_limit {
            set_limit(&mut pq.borrow_limit, limit(b, "--borrow-limit")?);
        }
        if let Some(l) = &e.lend_limit {
            set_limit(&mut pq.lend_limit, limit(l, "--lend-limit")?);
        }
    }
    if let Some(w) = e.weight {
        q.weight = w;
    }
    if let Some(o) = e.ordering {
        q.set_ordering(o);
    }
    if let Some(w) = e.within_queue {
        q.set_within_queue(w);
    }
    if let Some(r) = e.reclaim_within_cohort {
        q.set_reclaim_within_cohort(r);
    }
    if let Some(b) = e.borrow_within_cohort {
        q.borrow_within_cohort = b;
        if !b {
            q.max_priority_threshold = None;
        }
    }
    if let Some(t) = e.max_priority_threshold {
        q.max_priority_threshold = Some(t);
    }
    Ok(())
}

/// `--visibility`, which also goes with a file (a scenario's queue has no such field).
fn set_visibility(q: &mut v1::Queue, e: &QueueEdit) {
    if let Some(v) = e.visibility {
        q.visibility = v.into();
    }
}

/// Checks the queue with the server's own conversion, so a mistake is reported before
/// anything is sent; the queue is sent as given, and the server fills what it leaves out.
fn checked(q: v1::Queue) -> Result<v1::Queue, ClientError> {
    convert::queue_from_proto(&q).map_err(|e| usage_err(e.to_string()))?;
    Ok(q)
}

async fn create(conn: &Conn, q: v1::Queue) -> Result<v1::Ack, ClientError> {
    let name = q.name.clone();
    conn.call(Subject::Queue, &name, |mut c| {
        let q = q.clone();
        async move { c.create_queue(q).await }
    })
    .await
}

async fn update(conn: &Conn, q: v1::Queue, revision: u64) -> Result<v1::Ack, ClientError> {
    let name = q.name.clone();
    let request = v1::UpdateQueueRequest { queue: Some(q), revision };
    conn.call(Subject::Queue, &name, |mut c| {
        let r = request.clone();
        async move { c.update_queue(r).await }
    })
    .await
}

/// What one `queue update` did.
enum Updated {
    Unchanged,
    Written(v1::Ack),
}

/// Read, change, write naming the revision read; again from the read when another write
/// landed in between.
async fn update_with_retries(conn: &Conn, name: &str, e: &QueueEdit) -> Result<Updated, ClientError> {
    let mut last = None;
    for _ in 0..MAX_UPDATE_TRIES {
        let read = get_queue(conn, name).await?;
        let current = read.queue.unwrap_or_default();
        let q = updated_queue(&current, e)?;
        if q == current {
            return Ok(Updated::Unchanged);
        }
        match update(conn, q, read.revision).await {
            Err(ClientError::Conflict(why)) => last = Some(why),
            other => return other.map(Updated::Written),
        }
    }
    Err(ClientError::KeptChanging { name: name.to_string(), tries: MAX_UPDATE_TRIES, last: last.unwrap_or_default() })
}

fn read_file(path: &std::path::Path) -> Result<(String, String), ClientError> {
    baton_spec::files::read_text(path).map_err(|e| usage_err(e.to_string()))
}

/// The queue `create` would write, checked before anything is sent.
pub fn new_queue(e: &QueueEdit) -> Result<v1::Queue, ClientError> {
    if let Some(path) = &e.file {
        let (file, text) = read_file(path)?;
        let (spec, _) = baton_spec::parse_queue(&file, &text).map_err(|e| usage_err(e.to_string()))?;
        let mut q = convert::queue_to_proto(&spec);
        set_visibility(&mut q, e);
        return Ok(q);
    }
    let name = e.name.clone().ok_or_else(|| usage_err("give the queue's name, or -f queue.yaml"))?;
    let mut q = v1::Queue { name, ..Default::default() };
    apply_flags(&mut q, e)?;
    checked(q)
}

/// The queue `update` would write: `current` with the file's or the flags' fields changed.
pub fn updated_queue(current: &v1::Queue, e: &QueueEdit) -> Result<v1::Queue, ClientError> {
    if let Some(path) = &e.file {
        let (file, text) = read_file(path)?;
        let base = convert::queue_from_proto(current).map_err(|e| usage_err(format!("the current queue: {e}")))?;
        let (spec, _) = baton_spec::parse_queue_update(&file, &text, base).map_err(|e| usage_err(e.to_string()))?;
        // The file does not say; the queue keeps what it has unless the flag says.
        let mut q = v1::Queue { visibility: current.visibility, ..convert::queue_to_proto(&spec) };
        set_visibility(&mut q, e);
        return Ok(q);
    }
    let mut q = current.clone();
    apply_flags(&mut q, e)?;
    checked(q)
}

pub async fn run(conn: &Conn, a: &QueueArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.cmd {
        QueueCmd::List { output } => {
            let queues = list_queues(conn).await?;
            emit(out, *output, queues.as_slice(), |qs| {
                if qs.is_empty() { "no queues\n".into() } else { queue_usage_table(qs, "") }
            })
        }
        QueueCmd::Get { name, output } => {
            let q = get_queue(conn, name).await?;
            emit(out, *output, &q, queue_text)
        }
        QueueCmd::Create(e) => {
            let q = new_queue(e)?;
            let name = q.name.clone();
            let ack = match create(conn, q).await {
                Err(ClientError::Exists(_)) => {
                    return Err(usage_err(format!("queue {name} already exists; change it with baton queue update")));
                }
                other => other?,
            };
            print_ack(out, &ack, &format!("queue {name} created"))?;
            set_max_per_user(conn, &name, e, out).await
        }
        QueueCmd::Update(e) => {
            let name = match (&e.name, &e.file) {
                (Some(n), _) => n.clone(),
                (None, Some(path)) => {
                    let (file, text) = read_file(path)?;
                    baton_spec::parse_queue(&file, &text).map_err(|e| usage_err(e.to_string()))?.0.name.to_string()
                }
                (None, None) => return Err(usage_err("give the queue's name, or -f queue.yaml")),
            };
            match update_with_retries(conn, &name, e).await? {
                // Only the limit given: it is all that changes.
                Updated::Unchanged if limit_of(e)?.is_some() => {}
                Updated::Unchanged => writeln!(out, "queue {name} unchanged")?,
                Updated::Written(ack) => print_ack(out, &ack, &format!("queue {name} updated"))?,
            }
            set_max_per_user(conn, &name, e, out).await
        }
        QueueCmd::Delete { name } => {
            let r = v1::NameRef { name: name.clone() };
            let ack = conn
                .call(Subject::Queue, name, |mut c| {
                    let r = r.clone();
                    async move { c.delete_queue(r).await }
                })
                .await?;
            print_ack(out, &ack, &format!("queue {name} deleted"))
        }
    }
}

/// `--max-per-user`: a command of its own (`SetUserLimit`), after the queue's write.
async fn set_max_per_user(conn: &Conn, name: &str, e: &QueueEdit, out: &mut dyn Write) -> Result<(), ClientError> {
    let Some(limit) = limit_of(e)? else { return Ok(()) };
    let limit = &limit;
    let r = v1::UserLimitRequest { queue: name.to_string(), limit: Some(convert::resources_to_proto(limit)) };
    conn.call(Subject::Queue, name, |mut c| {
        let r = r.clone();
        async move { c.set_user_limit(r).await }
    })
    .await?;
    writeln!(out, "queue {name}: max_per_user {}", limit_text(Some(&convert::resources_to_proto(limit))))?;
    Ok(())
}

/// The `max_per_user` to set: the flag's, else the file's `max_per_user`, else none.
fn limit_of(e: &QueueEdit) -> Result<Option<baton_model::resources::Resources>, ClientError> {
    if let Some(l) = &e.max_per_user {
        return Ok(Some(l.clone()));
    }
    let Some(path) = &e.file else { return Ok(None) };
    let (file, text) = read_file(path)?;
    // Read as a whole queue entry: an update's file has the same shape.
    let (_, limit) = baton_spec::parse_queue(&file, &text).map_err(|e| usage_err(e.to_string()))?;
    Ok(limit)
}

/// `gpu 8, cpu 64`, or `none`.
pub fn limit_text(r: Option<&v1::Resources>) -> String {
    let mut v: Vec<String> =
        r.map_or(Vec::new(), |r| r.amounts.iter().map(|(k, n)| format!("{k} {}", amount(k, *n))).collect());
    v.sort();
    if v.is_empty() { "none".to_string() } else { v.join(", ") }
}

/// The queue as the server sent it: the server fills every field, so nothing here stands
/// in for a default of its own.
pub fn queue_text(u: &v1::QueueUsage) -> String {
    let default = v1::Queue::default();
    let q = u.queue.as_ref().unwrap_or(&default);
    let mut s = String::new();
    let _ = writeln!(s, "Name:        {}", q.name);
    let _ = writeln!(s, "Cohort:      {}", if q.cohort.is_empty() { "-" } else { &q.cohort });
    let _ = writeln!(s, "Weight:      {}", q.weight);
    let _ = writeln!(s, "Ordering:    {}", q.ordering().word());
    let (within, reclaim) = (q.within_queue().word(), q.reclaim_within_cohort().word());
    let _ = writeln!(s, "Preemption:  within queue {within}, reclaim within cohort {reclaim}");
    let borrow = match (q.borrow_within_cohort, q.max_priority_threshold) {
        (false, _) => "never".to_string(),
        (true, None) => "yes, victims of lower priority".to_string(),
        (true, Some(t)) => format!("yes, victims below priority {t}"),
    };
    let _ = writeln!(s, "Borrow by preempting in cohort: {borrow}");
    // A server from before the setting sends none: its queues show everything (all).
    let visibility = match q.visibility() {
        v1::JobVisibility::Unspecified => "all",
        v => v.word(),
    };
    let _ = writeln!(s, "Visibility:  {visibility} (what its users see of others' jobs)");
    let _ = writeln!(s, "Jobs:        {} running, {} pending", u.running, u.pending);
    let _ = writeln!(s, "Per user:    {} (max_per_user)", limit_text(u.max_per_user.as_ref()));
    let _ = writeln!(s, "Revision:    {}", u.revision);
    s.push_str("Quotas:\n");
    for pq in &q.quotas {
        let lim = |m: &HashMap<String, u64>| {
            let mut v: Vec<String> = m.iter().map(|(k, n)| format!("{k} {}", amount(k, *n))).collect();
            v.sort();
            if v.is_empty() { "none".to_string() } else { v.join(", ") }
        };
        let used = u.pools.iter().find(|p| p.pool == pq.pool);
        let _ = writeln!(
            s,
            "  {}: used/nominal {}; borrow limit {}; lend limit {}",
            pq.pool,
            usage(used.and_then(|p| p.used.as_ref()), pq.nominal.as_ref()),
            lim(&pq.borrow_limit),
            lim(&pq.lend_limit)
        );
    }
    s
}
