//! Accounting records into PostgreSQL (`baton server --accounting-postgres URL`), for sites
//! that want SQL and Grafana on them (issue 34).
//!
//! While this replica leads, it copies the records of its own store that the table lacks:
//! it asks the table for the newest number it holds for this cluster, then inserts what
//! comes after, a bounded batch per transaction, each row keyed by (cluster, number) so that
//! a row written twice (a new leader starting from the same number, a retried batch) stays
//! one. Only the leader writes, so the database gets one writer, not one per replica; a
//! replica that takes over goes on from where the table stands. PostgreSQL down or
//! unreachable costs nothing but the copy, retried every `RETRY_MS`: records wait in the
//! stores.

use std::sync::Arc;
use std::time::Duration;

use baton_accounting::RecordStore;
use baton_model::accounting::AttemptRecord;
use tokio_postgres::{Client, NoTls};

use crate::Ctx;

/// How often a leader looks for records the table lacks.
pub const EXPORT_EVERY_MS: u64 = 2_000;
/// How long after a failure (no connection, a refused statement) the next try comes.
pub const RETRY_MS: u64 = 10_000;
/// Rows one transaction inserts at most.
pub const BATCH_ROWS: usize = 500;
/// How long connecting may take.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The table, created if absent. Times are UTC; GPU time in seconds.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS baton_attempts (
    cluster_id     TEXT NOT NULL,
    seq            BIGINT NOT NULL,
    job            BIGINT NOT NULL,
    name           TEXT NOT NULL,
    attempt        INTEGER NOT NULL,
    user_name      TEXT NOT NULL,
    queue          TEXT NOT NULL,
    pool           TEXT NOT NULL,
    nodes          TEXT[] NOT NULL,
    gpus           BIGINT NOT NULL,
    resources      TEXT NOT NULL,
    start_at       TIMESTAMPTZ NOT NULL,
    end_at         TIMESTAMPTZ NOT NULL,
    ending         TEXT NOT NULL,
    exit_code      INTEGER,
    preempted_by   TEXT,
    detail         TEXT NOT NULL,
    gpu_seconds    DOUBLE PRECISION NOT NULL,
    lost_seconds   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (cluster_id, seq)
);
CREATE INDEX IF NOT EXISTS baton_attempts_user_end ON baton_attempts (user_name, end_at);
CREATE INDEX IF NOT EXISTS baton_attempts_queue_end ON baton_attempts (queue, end_at);
CREATE INDEX IF NOT EXISTS baton_attempts_end ON baton_attempts (end_at);
";

const INSERT: &str = "
INSERT INTO baton_attempts (cluster_id, seq, job, name, attempt, user_name, queue, pool, nodes, gpus,
    resources, start_at, end_at, ending, exit_code, preempted_by, detail, gpu_seconds, lost_seconds)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
    to_timestamp($12), to_timestamp($13),
    $14, $15, $16, $17, $18, $19)
ON CONFLICT (cluster_id, seq) DO NOTHING";

/// Why a round of the copy failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("connecting to PostgreSQL took over {0} ms")]
    ConnectTimeout(u64),
    #[error("{0}")]
    Store(#[from] baton_accounting::AccountingError),
    #[error("reading the record store stopped: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Connects, runs `SCHEMA`, and drives the connection on a task of its own.
pub async fn connect(url: &str) -> Result<Client, ExportError> {
    let connecting = tokio_postgres::connect(url, NoTls);
    let (client, connection) = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connecting)
        .await
        .map_err(|_| ExportError::ConnectTimeout(CONNECT_TIMEOUT_MS))??;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection ended");
        }
    });
    client.batch_execute(SCHEMA).await?;
    Ok(client)
}

/// Copies what `store` holds beyond the table's newest row of `cluster_id`; how many rows
/// it inserted.
pub async fn copy_new(client: &mut Client, store: Arc<RecordStore>, cluster_id: &str) -> Result<u64, ExportError> {
    // The newest row, and when it ended: the store's records after it start there.
    let newest = client
        .query_opt(
            "SELECT seq, (extract(epoch FROM end_at) * 1000)::bigint FROM baton_attempts
             WHERE cluster_id = $1 ORDER BY seq DESC LIMIT 1",
            &[&cluster_id],
        )
        .await?;
    let (mut seq, mut end_ms) = newest.map_or((0, 0), |r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64));
    let mut inserted = 0;
    loop {
        let reading = store.clone();
        let batch = tokio::task::spawn_blocking(move || reading.after(end_ms, seq, BATCH_ROWS)).await??;
        let Some(last) = batch.last().map(|r| (r.seq, r.end_ms)) else { return Ok(inserted) };
        let tx = client.transaction().await?;
        let statement = tx.prepare(INSERT).await?;
        for r in &batch {
            inserted += tx.execute(&statement, &params(cluster_id, r).as_refs()).await?;
        }
        tx.commit().await?;
        (seq, end_ms) = last;
    }
}

/// One record's row, in `INSERT`'s order.
struct Row {
    cluster_id: String,
    seq: i64,
    job: i64,
    name: String,
    attempt: i32,
    user: String,
    queue: String,
    pool: String,
    nodes: Vec<String>,
    gpus: i64,
    resources: String,
    /// Seconds since the Unix epoch, to the millisecond (what `to_timestamp` takes).
    start_s: f64,
    end_s: f64,
    ending: String,
    exit_code: Option<i32>,
    preempted_by: Option<String>,
    detail: String,
    gpu_seconds: f64,
    lost_seconds: f64,
}

impl Row {
    fn as_refs(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 19] {
        [
            &self.cluster_id,
            &self.seq,
            &self.job,
            &self.name,
            &self.attempt,
            &self.user,
            &self.queue,
            &self.pool,
            &self.nodes,
            &self.gpus,
            &self.resources,
            &self.start_s,
            &self.end_s,
            &self.ending,
            &self.exit_code,
            &self.preempted_by,
            &self.detail,
            &self.gpu_seconds,
            &self.lost_seconds,
        ]
    }
}

fn params(cluster_id: &str, r: &AttemptRecord) -> Row {
    // Numbers past i64 are not real (times in ms until the year 292 million): clamped.
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Row {
        cluster_id: cluster_id.to_string(),
        seq: i(r.seq),
        job: i(r.job),
        name: r.name.clone(),
        attempt: i32::try_from(r.attempt).unwrap_or(i32::MAX),
        user: r.user.clone(),
        queue: r.queue.clone(),
        pool: r.pool.clone(),
        nodes: r.nodes.clone(),
        gpus: i(r.gpus),
        resources: r.resources.to_string(),
        start_s: r.start_ms as f64 / 1000.0,
        end_s: r.end_ms as f64 / 1000.0,
        ending: r.ending.word().to_string(),
        exit_code: r.ending.exit_code(),
        preempted_by: r.ending.preempted_by().map(str::to_string),
        detail: r.detail.clone(),
        gpu_seconds: r.gpu_ms() as f64 / 1000.0,
        lost_seconds: r.lost_ms as f64 / 1000.0,
    }
}

/// The copy, on every replica started with a URL: it works only while the replica leads.
pub(crate) async fn run(ctx: Arc<Ctx>, url: String, mut closing: tokio::sync::watch::Receiver<bool>) {
    let mut client: Option<Client> = None;
    loop {
        let wait =
            if ctx.hub.leading().borrow().is_some() { round(&ctx, &url, &mut client).await } else { EXPORT_EVERY_MS };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = closing.wait_for(|c| *c) => return,
        }
    }
}

/// One round; how long to wait before the next.
async fn round(ctx: &Ctx, url: &str, client: &mut Option<Client>) -> u64 {
    if client.as_ref().is_none_or(Client::is_closed) {
        match connect(url).await {
            Ok(c) => {
                tracing::info!("accounting: copying records into PostgreSQL");
                *client = Some(c);
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_ms = RETRY_MS, "accounting: cannot reach PostgreSQL");
                return RETRY_MS;
            }
        }
    }
    let c = client.as_mut().expect("connected above");
    match copy_new(c, ctx.replica.records(), ctx.replica.cluster_id()).await {
        Ok(n) => {
            if n > 0 {
                tracing::debug!(rows = n, "accounting: records copied into PostgreSQL");
            }
            EXPORT_EVERY_MS
        }
        Err(e) => {
            tracing::warn!(error = %e, retry_ms = RETRY_MS, "accounting: copying into PostgreSQL failed");
            *client = None;
            RETRY_MS
        }
    }
}
