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
    /// The request's log, opened, and what it is.
    fn resolve(&self, req: &LogsRequest) -> Result<(std::fs::File, Target), Status> {
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
        // Opened here, without following links, and read through this handle only.
        let file = logfiles::open_log(&self.data_dir, req.job_id, attempt, req.rank, stream).map_err(|e| {
            let what = format!("{stream} log of job {job} attempt {attempt} rank {} on this node", req.rank);
            match e.kind() {
                std::io::ErrorKind::NotFound => Status::not_found(format!("no {what}: {e}")),
                _ => Status::internal(format!("cannot open the {what}: {e}")),
            }
        })?;
        Ok((file, Target { path, job_id: req.job_id, attempt, rank: req.rank }))
    }
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<LogChunk, Status>> + Send>>;

#[tonic::async_trait]
impl AgentLogs for LogsService {
    type LogsStream = ChunkStream;

    async fn logs(&self, request: Request<LogsRequest>) -> Result<Response<Self::LogsStream>, Status> {
        let req = request.into_inner();
        let (file, target) = self.resolve(&req)?;
        let mut file = tokio::fs::File::from_std(file);
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use tokio_stream::StreamExt;

    use super::*;

    const SECRET: &[u8] = b"root:secret-hash\n";

    /// A logs service over a fresh data directory, and a file outside its log directory
    /// holding a secret (`/etc/shadow`, say).
    fn service() -> (LogsService, tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        std::fs::create_dir_all(data_dir.join("logs")).unwrap();
        let secret = dir.path().join("shadow");
        std::fs::write(&secret, SECRET).unwrap();
        (LogsService { data_dir, live: LiveLogs::default() }, dir, secret)
    }

    fn request(job: &str, job_id: u64, attempt: u32) -> LogsRequest {
        LogsRequest { job: job.into(), job_id, attempt, ..Default::default() }
    }

    /// What the service streams for `req`, or its refusal.
    async fn read(svc: &LogsService, req: LogsRequest) -> Result<Vec<u8>, Status> {
        let mut stream = svc.logs(Request::new(req)).await?.into_inner();
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend(chunk?.data);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_log_is_read_from_the_jobs_own_directory_whatever_name_the_request_gives() {
        let (svc, _dir, _) = service();
        std::fs::create_dir_all(logfiles::attempt_dir(&svc.data_dir, 7, 1)).unwrap();
        std::fs::write(logfiles::log_path(&svc.data_dir, 7, 1, 0, "stdout"), b"step 1\n").unwrap();
        assert_eq!(read(&svc, request("train", 7, 1)).await.unwrap(), b"step 1\n");
        // The name is only a label for messages; the path comes from the id, attempt and rank.
        for name in ["../../shadow", "/etc/shadow", "a/../../b", ".."] {
            assert_eq!(read(&svc, request(name, 7, 0)).await.unwrap(), b"step 1\n", "{name}");
        }
        let e = read(&svc, LogsRequest { stream: "../shadow".into(), ..request("train", 7, 1) }).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }

    #[tokio::test]
    async fn a_link_in_the_log_directory_is_never_followed() {
        let (svc, dir, secret) = service();
        // The log file itself a link to the secret.
        std::fs::create_dir_all(logfiles::attempt_dir(&svc.data_dir, 7, 1)).unwrap();
        symlink(&secret, logfiles::log_path(&svc.data_dir, 7, 1, 0, "stdout")).unwrap();
        // An attempt directory that is a link to a directory holding a log of the secret.
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("rank-0.stdout"), SECRET).unwrap();
        symlink(&outside, logfiles::attempt_dir(&svc.data_dir, 7, 2)).unwrap();
        // A job directory that is a link to a job directory elsewhere.
        std::fs::create_dir_all(outside.join("job-8").join("1")).unwrap();
        std::fs::write(outside.join("job-8").join("1").join("rank-0.stdout"), SECRET).unwrap();
        symlink(outside.join("job-8"), svc.data_dir.join("logs").join("job-8")).unwrap();
        for (job_id, attempt) in [(7, 1), (7, 2), (8, 1), (8, 0)] {
            match read(&svc, request("j", job_id, attempt)).await {
                Ok(bytes) => panic!("job {job_id} attempt {attempt}: served {:?}", String::from_utf8_lossy(&bytes)),
                Err(e) => assert_eq!(e.code(), tonic::Code::NotFound, "job {job_id} attempt {attempt}: {e:?}"),
            }
        }
    }
}
