//! The HTTP/1.1 listener replicas and agents serve `/metrics` and the dashboard on, over
//! hyper. Under TLS its connections are mutual TLS, accepted by
//! [`Transport::incoming_http`] (HTTP/1.1 negotiated, the same certificates, revocation and
//! connection bounds as the gRPC listener), and a request is answered only for a caller whose
//! certificate has one of the listener's roles; plain TCP under `--insecure`, and on a plain
//! `/metrics` listener the operator asks for.
//!
//! One request per connection, so that each request is checked against the certificates in
//! force when it arrives. Every wait and size is bounded (the constants below).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::tls::{CertGuard, ConnInfo, PeerId, Role, Transport, require};

/// Largest request head read (the request line and headers); hyper answers a longer one with
/// 431. A scrape's or the dashboard's is a few hundred bytes.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Query pairs kept per request; the endpoints take one to three.
pub const MAX_QUERY_PAIRS: usize = 8;
/// Requests answered at once (their head read) on one listener; more wait for a place.
pub const MAX_CONCURRENT_ANSWERS: usize = 16;
/// An answer not ready within this is replaced by 503, and its place freed.
pub const ANSWER_TIMEOUT_MS: u64 = 5_000;
/// A client must send its request head within this of its connection being accepted, so
/// that connections that send nothing hold nothing but their place among the listener's.
pub const HEAD_TIMEOUT_MS: u64 = 1_000;

pub type Body = BoxBody<Bytes, Infallible>;

/// One request as a handler sees it: nothing else of HTTP is needed here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: Method,
    pub path: String,
    /// The query's pairs, percent-decoded, at most [`MAX_QUERY_PAIRS`].
    pub query: Vec<(String, String)>,
    /// The `Authorization` header's value (`Bearer TOKEN`), if it is text.
    pub authorization: Option<String>,
}

impl Call {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `method` on `target` (`PATH?QUERY`), without an `Authorization` header: what a request
    /// line says (and what tests build a call from).
    pub fn new(method: Method, target: &str) -> Call {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let query = query
            .split('&')
            .filter(|p| !p.is_empty())
            .take(MAX_QUERY_PAIRS)
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect();
        Call { method, path: path.to_string(), query, authorization: None }
    }

    fn of(req: &hyper::Request<Incoming>) -> Call {
        let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        let authorization =
            req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string());
        Call { authorization, ..Call::new(req.method().clone(), target) }
    }
}

/// What a handler learns of the connection besides the request: the caller's certificate
/// (under TLS), kept so that a stream can end when it is revoked.
#[derive(Clone)]
pub struct Peer {
    pub id: Option<PeerId>,
    pub cert: CertGuard,
}

/// A query component with `+` and `%XX` decoded; a malformed escape is kept as it is.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A whole answer of `status`, with headers every answer here carries: its type, no caching,
/// no sniffing.
pub fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    common_headers(&mut r, content_type);
    r
}

/// An answer whose body is what `rx` yields until it closes (an event stream).
pub fn streaming(content_type: &'static str, rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let frames = ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(StreamBody::new(frames).boxed());
    common_headers(&mut r, content_type);
    r
}

fn common_headers(r: &mut Response<Body>, content_type: &'static str) {
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
}

/// A plain-text answer (a line).
pub fn text(status: StatusCode, body: &str) -> Response<Body> {
    reply(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

/// The HTTP status a refusal of the API maps to.
pub fn status_of(code: tonic::Code) -> StatusCode {
    match code {
        tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::Unavailable | tonic::Code::ResourceExhausted => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Who a connection's certificate says the caller is, as the gRPC services judge it: under
/// TLS a certificate of one of `roles`, not revoked; plain TCP lets everyone through.
fn admit(transport: &Transport, roles: &[Role], info: ConnInfo) -> Result<Peer, Status> {
    let mut req = tonic::Request::new(());
    req.extensions_mut().insert(info);
    let cert = CertGuard::of(transport, &req);
    let req = require(transport, roles, req)?;
    Ok(Peer { id: req.extensions().get::<PeerId>().cloned(), cert })
}

/// Serves `handler` on `listener` until `closing` turns true: each connection accepted as
/// `transport` says, its caller admitted if its certificate has one of `roles`, one request
/// read within [`HEAD_TIMEOUT_MS`] and at most [`MAX_REQUEST_HEAD_BYTES`], answered within
/// [`ANSWER_TIMEOUT_MS`] with at most [`MAX_CONCURRENT_ANSWERS`] in progress. A caller
/// refused gets the refusal as text (401 or 403), whatever it asked.
pub async fn serve<H, F>(
    transport: Transport,
    listener: TcpListener,
    roles: &'static [Role],
    handler: H,
    mut closing: tokio::sync::watch::Receiver<bool>,
) where
    H: Fn(Call, Peer) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut incoming = transport.incoming_http(listener);
    let answering = Arc::new(Semaphore::new(MAX_CONCURRENT_ANSWERS));
    loop {
        let conn = tokio::select! {
            c = incoming.next() => match c {
                Some(Ok(c)) => c,
                Some(Err(_)) => continue,
                None => return,
            },
            _ = closing.wait_for(|c| *c) => return,
        };
        let admitted = admit(&transport, roles, tonic::transport::server::Connected::connect_info(&conn));
        let (handler, answering) = (handler.clone(), answering.clone());
        let service = hyper::service::service_fn(move |req| {
            let (admitted, handler, answering) = (admitted.clone(), handler.clone(), answering.clone());
            async move { Ok::<_, Infallible>(answer(req, admitted, handler, &answering).await) }
        });
        tokio::spawn(async move {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(Duration::from_millis(HEAD_TIMEOUT_MS))
                .max_buf_size(MAX_REQUEST_HEAD_BYTES)
                .keep_alive(false);
            let _ = b.serve_connection(TokioIo::new(conn), service).await;
        });
    }
}

async fn answer<H, F>(
    req: hyper::Request<Incoming>,
    admitted: Result<Peer, Status>,
    handler: H,
    answering: &Semaphore,
) -> Response<Body>
where
    H: Fn(Call, Peer) -> F,
    F: Future<Output = Response<Body>>,
{
    let peer = match admitted {
        Ok(peer) => peer,
        Err(s) => return text(status_of(s.code()), s.message()),
    };
    let Ok(_place) = answering.acquire().await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "this listener is closing");
    };
    let call = Call::of(&req);
    let within = Duration::from_millis(ANSWER_TIMEOUT_MS);
    match tokio::time::timeout(within, handler(call, peer)).await {
        Ok(r) => r,
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("no answer within {ANSWER_TIMEOUT_MS} ms; this replica may be busy or without a leader"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_components_are_percent_decoded() {
        assert_eq!(decode("Running%2CPending"), "Running,Pending");
        assert_eq!(decode("a+b"), "a b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%C3%A9"), "é");
    }

    #[test]
    fn a_request_line_gives_the_path_and_the_query_pairs_bounded() {
        let c = Call::new(Method::GET, "/api/jobs?after=7&limit=2&state=Running%2CPending");
        assert_eq!(c.path, "/api/jobs");
        assert_eq!((c.param("after"), c.param("limit"), c.param("x")), (Some("7"), Some("2"), None));
        assert_eq!(c.param("state"), Some("Running,Pending"));
        assert_eq!(Call::new(Method::GET, "/").query, vec![]);
        let many: Vec<String> = (0..100).map(|i| format!("k{i}=v")).collect();
        assert_eq!(Call::new(Method::GET, &format!("/?{}", many.join("&"))).query.len(), MAX_QUERY_PAIRS);
    }

    #[test]
    fn refusals_map_to_their_http_status() {
        assert_eq!(status_of(tonic::Code::Unauthenticated), StatusCode::UNAUTHORIZED);
        assert_eq!(status_of(tonic::Code::PermissionDenied), StatusCode::FORBIDDEN);
        assert_eq!(status_of(tonic::Code::InvalidArgument), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(tonic::Code::ResourceExhausted), StatusCode::SERVICE_UNAVAILABLE);
    }
}
