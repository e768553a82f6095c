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

/// One accepted connection: plain TCP (`--insecure`) or TLS.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            Conn::Plain(s) => ConnInfo { remote_addr: s.peer_addr().ok(), certs: None },
            Conn::Tls(s) => {
                let (tcp, session) = s.get_ref();
                let certs = session.peer_certificates().map(|c| Arc::new(c.to_vec()));
                ConnInfo { remote_addr: tcp.peer_addr().ok(), certs }
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
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
        let (tx, rx) = mpsc::channel(ACCEPTED_BUFFER);
        let transport = self.clone();
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
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
                let _ = tcp.set_nodelay(true);
                match &transport {
                    Transport::Insecure => {
                        if tx.send(Ok(Conn::Plain(tcp))).await.is_err() {
                            return;
                        }
                    }
                    Transport::Tls(tls) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(tls.current().server.clone());
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let _permit = permit;
                            let timeout = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
                            match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                                Ok(Ok(stream)) => {
                                    let _ = tx.send(Ok(Conn::Tls(Box::new(stream)))).await;
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
