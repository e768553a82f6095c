//! Real gRPC over turmoil's simulated TCP, for deterministic simulations (the partition and
//! power-cut tests, `baton-chaos sim`): the stream type tonic's server accepts, the dialer
//! replicas connect with, and the host names replicas run on. Not used by a real replica.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::net::Dialer;
use crate::types::NodeId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// turmoil's TCP stream, made acceptable to tonic's server.
pub struct SimStream(pub turmoil::net::TcpStream);

impl Connected for SimStream {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for SimStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

pub fn sim_dialer() -> Dialer {
    Dialer::custom(|addr| {
        let target = addr.to_string();
        let endpoint = crate::net::dialer::endpoint(addr, Duration::from_secs(1))?;
        Ok(endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
            let target = target.clone();
            async move {
                let s = turmoil::net::TcpStream::connect(target).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        })))
    })
}

/// The turmoil host a replica runs on.
pub fn host_name(id: NodeId) -> String {
    format!("r{id}")
}
