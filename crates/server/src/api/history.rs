//! Accounting (issue 34): `baton history` and `baton usage` from this replica's records,
//! and `cluster set --accounting-retention`.
//!
//! A read first waits, as every read here, until this replica has applied every write
//! acknowledged before the call; the state machine writes each entry's records before the
//! next is applied, so the store then holds every record those writes made.

use std::sync::Arc;

use baton_accounting::{AccountingError, By, MAX_PAGE, Query, RecordStore, Series, SeriesRow, Total, Totals};
use baton_model::State;
use baton_model::accounting::{AccountingSettings, AttemptRecord};
use baton_model::command::Op;
use baton_model::job::Job;
use baton_model::name::Name;
use baton_proto::convert::resources_to_proto;
use baton_proto::v1::{self, Ack, HistoryReply, HistoryRequest, UsageTotalsReply, UsageTotalsRequest};
use tonic::{Response, Status};

use super::Api;
use crate::auth::Caller;

/// Records a history answers when the caller names no limit.
pub const DEFAULT_LIMIT: usize = 1_000;

/// Who may see which user's usage and records: their own user's, their queues' as admin,
/// all as operator or admin (or without tokens). `baton usage --decayed` shows the same.
#[derive(Clone)]
pub(crate) struct Sees(pub(crate) Option<baton_model::access::Token>);

impl Sees {
    pub(crate) fn of(&self, queue: &Name, user: &str) -> bool {
        match &self.0 {
            None => true,
            Some(t) => t.any_job() || t.spec.user.as_str() == user || t.administers(queue),
        }
    }

    /// [`Sees::of`] for a record, whose queue is a string: made a name only when it decides.
    fn record(&self, user: &str, queue: &str) -> bool {
        match &self.0 {
            Some(t) if !t.any_job() && t.spec.user.as_str() != user => {
                Name::new(queue).is_ok_and(|q| t.administers(&q))
            }
            _ => true,
        }
    }
}

/// Each attempt running now that `sees` lets through, with the key `by` counts it under.
fn each_running(s: &State, by: By, sees: &Sees, mut f: impl FnMut(String, &Job)) {
    for j in s.jobs().values().filter(|j| j.state.is_active()) {
        if sees.of(&j.spec.queue, s.user_name(j)) {
            let key = match by {
                By::User => s.user_name(j).to_string(),
                By::Queue => j.spec.queue.to_string(),
                By::Pool => s.pools_of(j),
            };
            f(key, j);
        }
    }
}

fn from_accounting(e: AccountingError) -> Status {
    match e {
        AccountingError::Query(m) => Status::invalid_argument(m),
        other => Status::internal(other.to_string()),
    }
}

/// Runs a store call off the async workers: on disk, it reads files.
async fn on_store<T: Send + 'static>(
    store: Arc<RecordStore>,
    f: impl FnOnce(&RecordStore) -> Result<T, AccountingError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| Status::internal(format!("accounting query stopped: {e}")))?
        .map_err(from_accounting)
}

pub async fn set_accounting(api: &Api, who: &Caller, s: v1::AccountingSettings) -> Result<Response<Ack>, Status> {
    api.ack(who, Op::SetAccounting(AccountingSettings { retention_ms: s.retention_ms })).await
}

/// The time range asked, `until` defaulting to now; a reversed one is refused by flag.
fn range(since_ms: u64, until_ms: Option<u64>, now_ms: u64) -> Result<(u64, u64), Status> {
    let until_ms = until_ms.unwrap_or(now_ms.saturating_add(1));
    if since_ms >= until_ms {
        return Err(Status::invalid_argument(format!(
            "--since ({since_ms} ms) must be before --until ({until_ms} ms): the time range is empty or reversed"
        )));
    }
    Ok((since_ms, until_ms))
}

pub async fn history(api: &Api, who: &Caller, r: HistoryRequest) -> Result<Response<HistoryReply>, Status> {
    let (since_ms, until_ms) = range(r.since_ms, r.until_ms, crate::clock::now_ms())?;
    let limit = match r.limit as usize {
        0 => DEFAULT_LIMIT,
        n => n.min(MAX_PAGE),
    };
    let q = Query { user: r.user.clone(), queue: r.queue.clone(), since_ms, until_ms, ending: r.state, limit };
    q.check().map_err(from_accounting)?;
    let queue_known = api
        .read(move |s| r.queue.as_ref().is_none_or(|q| Name::new(q).is_ok_and(|n| s.queues().contains_key(&n))))
        .await?;
    let sees = Sees(who.token().cloned());
    let store = api.ctx.replica.records();
    let query = q.clone();
    let page = on_store(store, move |st| st.query(&query, |rec| sees.record(&rec.user, &rec.queue))).await?;
    let note = if !page.records.is_empty() {
        String::new()
    } else if !queue_known {
        format!("no queue is named {}; no records", q.queue.unwrap_or_default())
    } else {
        empty_note(&q)
    };
    Ok(Response::new(HistoryReply {
        records: page.records.iter().map(record_to_proto).collect(),
        more: page.more,
        note,
        answered_by: api.ctx.replica.id(),
    }))
}

/// Why a history is empty, in words.
fn empty_note(q: &Query) -> String {
    let whose = match (&q.user, &q.queue) {
        (Some(u), Some(queue)) => format!(" of user {u} in queue {queue}"),
        (Some(u), None) => format!(" of user {u}"),
        (None, Some(queue)) => format!(" in queue {queue}"),
        (None, None) => String::new(),
    };
    let state = q.ending.as_ref().map(|e| format!(" that ended {e}")).unwrap_or_default();
    format!("no records{whose}{state} in this time range that you may see")
}

pub fn record_to_proto(r: &AttemptRecord) -> v1::AttemptRecord {
    v1::AttemptRecord {
        seq: r.seq,
        job: r.job,
        name: r.name.clone(),
        attempt: r.attempt,
        user: r.user.clone(),
        queue: r.queue.clone(),
        pool: r.pool.clone(),
        nodes: r.nodes.clone(),
        gpus: r.gpus,
        resources: Some(resources_to_proto(&r.resources)),
        start_ms: r.start_ms,
        end_ms: r.end_ms,
        ending: r.ending.word().to_string(),
        exit_code: r.ending.exit_code(),
        preempted_by: r.ending.preempted_by().unwrap_or_default().to_string(),
        detail: r.detail.clone(),
        gpu_ms: r.gpu_ms(),
        lost_ms: r.lost_ms,
    }
}

pub(crate) fn by_from(word: &str) -> Result<By, Status> {
    By::from_word(word).map_err(from_accounting)
}

pub async fn usage_totals(
    api: &Api,
    who: &Caller,
    r: UsageTotalsRequest,
) -> Result<Response<UsageTotalsReply>, Status> {
    let by = by_from(&r.by)?;
    let now_ms = crate::clock::now_ms();
    let (since_ms, until_ms) = range(r.since_ms, r.until_ms, now_ms)?;
    let sees = Sees(who.token().cloned());
    let seen = sees.clone();
    let totals = api
        .read(move |s| {
            let (mut t, at_ms) = (Totals::new(by, since_ms, until_ms), now_ms.max(s.now_ms()));
            each_running(s, by, &seen, |key, j| t.add_running(&key, j.id, j.gpus(), j.started_ms, at_ms));
            t
        })
        .await?;
    let store = api.ctx.replica.records();
    let rows = on_store(store, move |st| {
        let mut totals = totals;
        st.add_totals(&mut totals, |rec| sees.record(&rec.user, &rec.queue))?;
        Ok(totals.finish())
    })
    .await?;
    let note = if rows.is_empty() { "no GPU time in this time range that you may see".into() } else { String::new() };
    Ok(Response::new(UsageTotalsReply { rows: rows.iter().map(total_to_proto).collect(), since_ms, until_ms, note }))
}

fn total_to_proto(t: &Total) -> v1::UsageTotal {
    v1::UsageTotal {
        key: t.key.clone(),
        gpu_ms: t.gpu_ms,
        attempts: t.attempts,
        jobs: t.jobs,
        preempted_gpu_ms: t.preempted_gpu_ms,
        lost_gpu_ms: t.lost_gpu_ms,
        running: t.running as u32,
    }
}

/// The dashboard's usage page: GPU time per user, queue or pool in each bucket of a window.
#[derive(Debug, serde::Serialize)]
pub struct SeriesReply {
    pub by: &'static str,
    pub since_ms: u64,
    pub bucket_ms: u64,
    pub rows: Vec<SeriesRow>,
}

/// GPU time per `by` in `buckets` buckets from `since_ms` to `until_ms`: ended attempts
/// from the records, running ones from the state, what `who` may see.
pub async fn series(
    api: &Api,
    who: &Caller,
    by: By,
    since_ms: u64,
    until_ms: u64,
    buckets: usize,
) -> Result<SeriesReply, Status> {
    let mut series = Series::new(by, since_ms, until_ms, buckets).map_err(from_accounting)?;
    let bucket_ms = series.bucket_ms();
    let sees = Sees(who.token().cloned());
    let seen = sees.clone();
    let now_ms = crate::clock::now_ms();
    let series = api
        .read(move |s| {
            let at_ms = now_ms.max(s.now_ms());
            each_running(s, by, &seen, |key, j| series.add_span(&key, j.gpus(), j.started_ms, at_ms));
            series
        })
        .await?;
    let rows = on_store(api.ctx.replica.records(), move |st| {
        let mut series = series;
        st.add_series(&mut series, |rec| sees.record(&rec.user, &rec.queue))?;
        Ok(series.finish())
    })
    .await?;
    Ok(SeriesReply { by: by.word(), since_ms, bucket_ms, rows })
}

/// `cluster info`'s accounting line.
pub fn info(s: &State, (oldest_here_ms, newest_here): (u64, u64)) -> v1::AccountingInfo {
    let a = s.accounting();
    v1::AccountingInfo {
        on: a.settings().is_some(),
        retention_ms: a.settings().map_or(0, |s| s.retention_ms),
        records_made: a.made(),
        oldest_here_ms,
        newest_here,
    }
}
