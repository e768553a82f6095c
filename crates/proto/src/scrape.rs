//! The scrape endpoint replicas and agents serve: a minimal HTTP/1.1 `GET /metrics` and
//! nothing else (docs/metrics.md). A scrape is a single short request, so this reads one
//! bounded request head and closes the connection; a full HTTP stack would add nothing here.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Largest request head read; a scrape's is a few hundred bytes.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Scrapes served at once (their request read); more wait for a slot.
pub const MAX_CONCURRENT_SCRAPES: usize = 16;
/// A client that does not read the answer within this of sending its request is dropped.
pub const SCRAPE_TIMEOUT_MS: u64 = 5_000;
/// Connections open at once that have not sent their request yet; one more is closed at
/// once. A connection holds a slot to be answered only once its request is read, so clients
/// that connect and send nothing cannot keep a scrape from being answered.
pub const MAX_OPEN_CONNECTIONS: usize = 256;
/// A client must send its request head within this of connecting.
pub const HEAD_TIMEOUT_MS: u64 = 1_000;

/// Connection and answer slots, shared by every connection of one listener.
#[derive(Clone)]
pub struct Slots {
    open: Arc<Semaphore>,
    answering: Arc<Semaphore>,
}

impl Default for Slots {
    fn default() -> Self {
        Slots {
            open: Arc::new(Semaphore::new(MAX_OPEN_CONNECTIONS)),
            answering: Arc::new(Semaphore::new(MAX_CONCURRENT_SCRAPES)),
        }
    }
}

/// A connection whose request head was read in time, holding a slot to be answered.
pub struct Admitted {
    pub stream: TcpStream,
    pub head: String,
    pub slot: tokio::sync::OwnedSemaphorePermit,
}

impl Slots {
    /// Takes a connection slot for a stream just accepted; `None`: too many open, the
    /// stream is dropped (closed) at once.
    pub fn open(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.open.clone().try_acquire_owned().ok()
    }

    /// Reads the request head within [`HEAD_TIMEOUT_MS`], then waits for a slot to answer
    /// it; `None`: the client sent nothing in time, or the server is closing.
    pub async fn admit(&self, mut stream: TcpStream, open: tokio::sync::OwnedSemaphorePermit) -> Option<Admitted> {
        let within = Duration::from_millis(HEAD_TIMEOUT_MS);
        let head = tokio::time::timeout(within, read_head(&mut stream)).await.ok()?.ok()?;
        drop(open);
        let slot = self.answering.clone().acquire_owned().await.ok()?;
        Some(Admitted { stream, head, slot })
    }
}

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `render()` on `GET /metrics` until `closing` turns true.
pub async fn serve(
    listener: TcpListener,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Slots::default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = closing.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let Some(open) = slots.open() else { continue };
        let (render, slots) = (render.clone(), slots.clone());
        tokio::spawn(async move {
            let Some(admitted) = slots.admit(stream, open).await else { return };
            let timeout = Duration::from_millis(SCRAPE_TIMEOUT_MS);
            let _ = tokio::time::timeout(timeout, answer(admitted.stream, &admitted.head, render)).await;
            drop(admitted.slot);
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    head: &str,
    render: Arc<dyn Fn() -> String + Send + Sync>,
) -> std::io::Result<()> {
    let (status, kind, body) = match route(head) {
        Route::Metrics => ("200 OK", CONTENT_TYPE, render()),
        Route::NotFound => ("404 Not Found", "text/plain", "only /metrics is served here\n".to_string()),
        Route::BadMethod => ("405 Method Not Allowed", "text/plain", "only GET is served here\n".to_string()),
        Route::Bad => ("400 Bad Request", "text/plain", "not an HTTP/1 request line\n".to_string()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

/// Reads one request head (up to the blank line), at most [`MAX_REQUEST_HEAD_BYTES`].
pub async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST_HEAD_BYTES {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
    Bad,
}

fn route(head: &str) -> Route {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1") {
        return Route::Bad;
    }
    if method != "GET" {
        return Route::BadMethod;
    }
    // A query string (`?name[]=...`) is accepted and ignored.
    match target.split('?').next() {
        Some("/metrics") => Route::Metrics,
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(route("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Route::Metrics);
        assert_eq!(route("GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
        assert_eq!(route("GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route("POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route("hello"), Route::Bad);
    }
}
