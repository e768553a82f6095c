//! How a replica reaches a peer's address: TCP by default, anything that yields a tonic
//! `Channel` for tests (turmoil's simulated network).

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

type DialFn = dyn Fn(&str) -> Result<Channel, String> + Send + Sync;
type EpochFn = dyn Fn() -> u64 + Send + Sync;

/// Makes lazily connecting channels to `host:port` addresses.
#[derive(Clone)]
pub struct Dialer {
    dial: Arc<DialFn>,
    /// Changes when channels dialed before would be dialed differently now (certificates
    /// reloaded): cached channels of another epoch are dropped.
    epoch: Arc<EpochFn>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dialer")
    }
}

/// The tonic endpoint for `addr` (`host:port`), with the settings every transport shares.
pub fn endpoint(addr: &str, connect_timeout: Duration) -> Result<Endpoint, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map(|e| e.connect_timeout(connect_timeout).tcp_nodelay(true).http2_adaptive_window(true))
        .map_err(|e| format!("invalid replica address {addr:?}: {e}"))
}

impl Dialer {
    /// Plain TCP (HTTP/2 without TLS).
    pub fn tcp(connect_timeout: Duration) -> Dialer {
        Dialer::custom(move |addr| Ok(endpoint(addr, connect_timeout)?.connect_lazy()))
    }

    /// Mutual TLS when `transport` has it (the peer must hold a replica certificate of the
    /// same CA, and this replica presents its own), plain TCP otherwise.
    /// A reload of the certificates changes its epoch, so that the next call to each peer
    /// dials with the new ones.
    pub fn secured(transport: baton_proto::tls::Transport, connect_timeout: Duration) -> Dialer {
        let generation = transport.clone();
        Dialer::custom(move |addr| {
            let e = transport
                .endpoint(addr, baton_proto::tls::REPLICA_HOST)
                .map_err(|e| format!("invalid replica address {addr:?}: {e}"))?;
            Ok(e.connect_timeout(connect_timeout).tcp_nodelay(true).http2_adaptive_window(true).connect_lazy())
        })
        .with_epoch(move || generation.generation())
    }

    /// Any way of making a channel; the function must not block.
    pub fn custom(f: impl Fn(&str) -> Result<Channel, String> + Send + Sync + 'static) -> Dialer {
        Dialer { dial: Arc::new(f), epoch: Arc::new(|| 0) }
    }

    /// The same dialer, whose channels are dropped from caches when `epoch` changes.
    pub fn with_epoch(self, epoch: impl Fn() -> u64 + Send + Sync + 'static) -> Dialer {
        Dialer { epoch: Arc::new(epoch), ..self }
    }

    /// Channels cached under another epoch must be dialed again.
    pub fn epoch(&self) -> u64 {
        (self.epoch)()
    }

    pub fn dial(&self, addr: &str) -> Result<Channel, String> {
        (self.dial)(addr)
    }
}
