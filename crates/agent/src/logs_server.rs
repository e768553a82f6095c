//! The AgentLogs service: a replica's stdout or stderr from an offset, in chunks of at most
//! 64 KiB; with `follow`, more as the file grows, until the attempt has ended and the file
//! is drained, or the client goes.

use std::io::SeekFrom;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use baton_proto::v1::agent_logs_server::AgentLogs;
use baton_proto::v1::{LogChunk, LogsRequest};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::limits::{LOG_FOLLOW_POLL_MS, LOG_STREAM_BUFFER_CHUNKS, MAX_LOG_CHUNK_BYTES};
use crate::logfiles;
use crate::supervisor::LiveLogs;

pub struct LogsService {
    pub data_dir: PathBuf,
    pub live: LiveLogs,
}

/// A resolved request: which file, and whether it may still grow.
struct Target {
    path: PathBuf,
    job_id: u64,
    attempt: u32,
    rank: u32,
}

impl LogsService {
    fn resolve(&self, req: &LogsRequest) -> Result<Target, Status> {
        if req.job_id == 0 {
            return Err(Status::invalid_argument(
                "job_id is missing: logs are kept by job id (a client older than this agent sends only the name)",
            ));
        }
        let job = if req.job.is_empty() { format!("id {}", req.job_id) } else { req.job.clone() };
        let stream = match req.stream.as_str() {
            "" | "stdout" => "stdout",
            "stderr" => "stderr",
            other => return Err(Status::invalid_argument(format!("stream {other:?}: use \"stdout\" or \"stderr\""))),
        };
        let attempt = if req.attempt == 0 {
            *logfiles::attempts(&self.data_dir, req.job_id)
                .last()
                .ok_or_else(|| Status::not_found(format!("no logs of job {job} on this node")))?
        } else {
            req.attempt
        };
        let path = logfiles::log_path(&self.data_dir, req.job_id, attempt, req.rank, stream);
        if !path.is_file() {
            return Err(Status::not_found(format!(
                "no {stream} log of job {job} attempt {attempt} rank {} on this node",
                req.rank
            )));
        }
        Ok(Target { path, job_id: req.job_id, attempt, rank: req.rank })
    }
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<LogChunk, Status>> + Send>>;

#[tonic::async_trait]
impl AgentLogs for LogsService {
    type LogsStream = ChunkStream;

    async fn logs(&self, request: Request<LogsRequest>) -> Result<Response<Self::LogsStream>, Status> {
        let req = request.into_inner();
        let target = self.resolve(&req)?;
        let mut file = tokio::fs::File::open(&target.path)
            .await
            .map_err(|e| Status::internal(format!("cannot open {}: {e}", target.path.display())))?;
        let (tx, rx) = mpsc::channel(LOG_STREAM_BUFFER_CHUNKS);
        let live = self.live.clone();
        let is_live = move |t: &Target| {
            let set = live.lock().unwrap_or_else(|p| p.into_inner());
            set.contains(&(t.job_id, t.attempt, t.rank))
        };
        tokio::spawn(async move {
            let mut offset = req.offset;
            let mut buf = vec![0u8; MAX_LOG_CHUNK_BYTES];
            loop {
                // Whether it may still grow, read before the file so the last bytes written
                // before the end are not missed.
                let live = req.follow && is_live(&target);
                let n = match read_at(&mut file, offset, &mut buf).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ =
                            tx.send(Err(Status::internal(format!("cannot read {}: {e}", target.path.display())))).await;
                        return;
                    }
                };
                if n > 0 {
                    let chunk = LogChunk { attempt: target.attempt, offset, data: buf[..n].to_vec() };
                    if tx.send(Ok(chunk)).await.is_err() {
                        return; // the client went away
                    }
                    offset += n as u64;
                    continue;
                }
                if !live {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(LOG_FOLLOW_POLL_MS)) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

async fn read_at(file: &mut tokio::fs::File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    file.seek(SeekFrom::Start(offset)).await?;
    file.read(buf).await
}
