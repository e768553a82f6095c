//! Accepting connections ourselves instead of through tonic's TLS, so that each one is
//! accepted with the TLS configuration in force when it arrives (a reload changes the next
//! handshake, not the listener).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::{HANDSHAKE_TIMEOUT_MS, Transport};

/// Handshakes in progress at once on one listener; past it, accepting waits. Each holds a
/// socket and a little memory, so a flood of slow handshakes cannot exhaust either.
pub const MAX_PENDING_HANDSHAKES: usize = 1_024;
/// Accepted connections waiting for the server to take them.
const ACCEPTED_BUFFER: usize = 64;
/// How long to wait after a failed accept (out of descriptors, usually) before the next.
const ACCEPT_RETRY_MS: u64 = 100;

/// What a request learns of its connection: the caller's address and, under TLS, the
/// certificate chain it presented.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote_addr: Option<SocketAddr>,
    pub certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// One accepted connection: plain TCP (`--insecure`) or TLS, holding its place among the
/// listener's connections (and its caller's, under TLS) until it closes.
pub struct Conn {
    io: Io,
    _places: Places,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// Connections open at once on one listener; past it, a new connection is closed at once.
pub const MAX_CONNECTIONS: usize = 8_192;
/// Connections one certificate may hold open at once on one listener (a replica, an agent
/// or a CLI needs a few); past it, its new connection is closed at once, so one caller
/// cannot take every place.
pub const MAX_CONNECTIONS_PER_CALLER: usize = 256;

/// Connections open per caller, by its certificate (DER).
type PerCaller = Arc<std::sync::Mutex<std::collections::HashMap<Vec<u8>, usize>>>;

/// A connection's places: one of the listener's, and one of its caller's.
struct Places {
    _listener: tokio::sync::OwnedSemaphorePermit,
    caller: Option<(PerCaller, Vec<u8>)>,
}

impl Places {
    /// Takes a place for `cert`'s caller, or `None` when it holds its bound already.
    fn for_caller(listener: tokio::sync::OwnedSemaphorePermit, per: &PerCaller, cert: Vec<u8>) -> Option<Places> {
        let mut open = per.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(cert.clone()).or_default();
        if *n >= MAX_CONNECTIONS_PER_CALLER {
            return None;
        }
        *n += 1;
        Some(Places { _listener: listener, caller: Some((per.clone(), cert)) })
    }
}

impl Drop for Places {
    fn drop(&mut self) {
        let Some((per, cert)) = self.caller.take() else { return };
        let mut open = per.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&cert) {
            *n -= 1;
            if *n == 0 {
                open.remove(&cert);
            }
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match &self.io {
            Io::Plain(s) => ConnInfo { remote_addr: s.peer_addr().ok(), certs: None },
            Io::Tls(s) => {
                let (tcp, session) = s.get_ref();
                let certs = session.peer_certificates().map(|c| Arc::new(c.to_vec()));
                ConnInfo { remote_addr: tcp.peer_addr().ok(), certs }
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// What a listener's connections speak, which TLS negotiates (ALPN).
#[derive(Clone, Copy)]
enum Speaks {
    Grpc,
    Http1,
}

/// Whether a failed handshake was about the caller's certificate (worth a warning: one of
/// another CA, or expired), rather than a scanner or a health check hanging up.
fn about_a_certificate(e: &std::io::Error) -> bool {
    matches!(
        e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

impl Transport {
    /// The connections `listener` accepts, for tonic's `serve_with_incoming*`: under TLS each
    /// is handshaken (at most [`MAX_PENDING_HANDSHAKES`] at once, each within
    /// [`HANDSHAKE_TIMEOUT_MS`]) with the configuration in force when it arrived. Stops
    /// accepting when the stream is dropped.
    pub fn incoming(&self, listener: TcpListener) -> ReceiverStream<Result<Conn, std::io::Error>> {
        self.accepting(listener, Speaks::Grpc)
    }

    /// As [`Transport::incoming`], for the HTTP/1.1 listener (`/metrics` and the dashboard).
    pub fn incoming_http(&self, listener: TcpListener) -> ReceiverStream<Result<Conn, std::io::Error>> {
        self.accepting(listener, Speaks::Http1)
    }

    fn accepting(&self, listener: TcpListener, speaks: Speaks) -> ReceiverStream<Result<Conn, std::io::Error>> {
        let (tx, rx) = mpsc::channel(ACCEPTED_BUFFER);
        let transport = self.clone();
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
            let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
            let per_caller = PerCaller::default();
            loop {
                let permit = tokio::select! {
                    p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
                    () = tx.closed() => return,
                };
                let (tcp, peer) = tokio::select! {
                    r = listener.accept() => match r {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            tracing::warn!("accepting a connection failed: {e}");
                            tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                            continue;
                        }
                    },
                    () = tx.closed() => return,
                };
                let Ok(place) = open.clone().try_acquire_owned() else {
                    tracing::debug!(%peer, "{MAX_CONNECTIONS} connections open on this listener: closed");
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                match &transport {
                    Transport::Insecure => {
                        let places = Places { _listener: place, caller: None };
                        if tx.send(Ok(Conn { io: Io::Plain(tcp), _places: places })).await.is_err() {
                            return;
                        }
                    }
                    Transport::Tls(tls) => {
                        let config = match speaks {
                            Speaks::Grpc => tls.current().server.clone(),
                            Speaks::Http1 => tls.current().web.clone(),
                        };
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        let (tx, per_caller) = (tx.clone(), per_caller.clone());
                        tokio::spawn(async move {
                            let _permit = permit;
                            let timeout = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
                            match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                                Ok(Ok(stream)) => {
                                    let cert = stream.get_ref().1.peer_certificates().and_then(|c| c.first());
                                    let places = match cert {
                                        Some(der) => Places::for_caller(place, &per_caller, der.as_ref().to_vec()),
                                        None => Some(Places { _listener: place, caller: None }),
                                    };
                                    let Some(places) = places else {
                                        tracing::warn!(%peer, "refused a connection: its certificate holds {MAX_CONNECTIONS_PER_CALLER} open here");
                                        return;
                                    };
                                    let _ = tx.send(Ok(Conn { io: Io::Tls(Box::new(stream)), _places: places })).await;
                                }
                                Ok(Err(e)) if about_a_certificate(&e) => {
                                    tracing::warn!(%peer, "refused a TLS connection: {e}")
                                }
                                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                            }
                        });
                    }
                }
            }
        });
        ReceiverStream::new(rx)
    }
}
