//! Mutual TLS for every baton service: the files one process reads (`--tls-dir`), the tonic
//! configurations made from them, and the identity a peer's certificate names.
//!
//! A certificate says who holds it in its subject: the organizational unit is the role
//! (`replica`, `agent` or `client`) and the common name is the replica id, the agent's node
//! name or the client's name. Replica certificates carry the DNS name [`REPLICA_HOST`] and
//! agent certificates [`AGENT_HOST`]; callers verify those names whatever address they dial,
//! so that a replica is recognised by its certificate, not by where it runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

mod reload;
mod serve;
mod shape;

pub use reload::{Loaded, Tls};
pub use shape::{MAX_SHAPE_ENTRIES, NodeShape, SHAPE_SCHEME, shape_of};
/// Requests and streams one connection may have open at once on a baton server.
pub const MAX_STREAMS_PER_CONNECTION: usize = 1_024;

pub use serve::{Conn, ConnInfo, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CALLER, MAX_PENDING_HANDSHAKES};

/// The cluster's CA certificate in a `--tls-dir`.
pub const CA_CERT_FILE: &str = "ca.pem";
/// This process's certificate (PEM) in a `--tls-dir`.
pub const CERT_FILE: &str = "cert.pem";
/// This process's private key (PEM) in a `--tls-dir`.
pub const KEY_FILE: &str = "key.pem";
/// The certificate revocation list in a `--tls-dir` (optional): certificates it lists are
/// refused by every service of the process.
pub const CRL_FILE: &str = "crl.pem";
/// A CRL larger than this is refused (about 40,000 revoked certificates).
pub const MAX_CRL_BYTES: u64 = 4 * 1024 * 1024;
/// The DNS name every replica certificate carries and every caller of a replica verifies.
pub const REPLICA_HOST: &str = "replica.baton";
/// The DNS name every agent certificate carries and every caller of an agent verifies.
pub const AGENT_HOST: &str = "agent.baton";
/// A PEM file larger than this is not a certificate or a key.
pub const MAX_PEM_BYTES: u64 = 256 * 1024;
/// How long a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;

/// What a certificate says its holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Replica,
    Agent,
    Client,
}

impl Role {
    /// The organizational unit that names this role in a certificate.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Replica => "replica",
            Role::Agent => "agent",
            Role::Client => "client",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        [Role::Replica, Role::Agent, Role::Client].into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The holder of a certificate: its role and its name within the role.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerId {
    pub role: Role,
    pub name: String,
}

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.role, self.name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {bytes} bytes; a PEM file holds at most {MAX_PEM_BYTES}")]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error("{path}: {detail}")]
    Certificate { path: PathBuf, detail: String },
    #[error("{path}: the certificate is for {found}, but this process is {own}")]
    Identity { path: PathBuf, found: PeerId, own: PeerId },
}

/// Reads the identity a DER certificate's subject names (OU = role, CN = name).
pub fn identity_of(der: &[u8]) -> Result<PeerId, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let subject = cert.subject();
    let ou = subject.iter_organizational_unit().next().and_then(|a| a.as_str().ok());
    let cn = subject.iter_common_name().next().and_then(|a| a.as_str().ok());
    let (Some(ou), Some(cn)) = (ou, cn) else {
        return Err("the subject has no OU (role) or no CN (name); make it with `baton tls cert create`".into());
    };
    let role = Role::parse(ou).ok_or_else(|| format!("OU {ou:?} is not a baton role (replica, agent or client)"))?;
    if cn.is_empty() {
        return Err("the subject's CN (name) is empty".into());
    }
    Ok(PeerId { role, name: cn.to_string() })
}

/// The first certificate in a PEM text, as DER.
pub fn first_cert_der(pem: &str) -> Result<Vec<u8>, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| format!("not PEM: {e}"))?;
    if block.label != "CERTIFICATE" {
        return Err(format!("the first PEM block is a {:?}, not a CERTIFICATE", block.label));
    }
    Ok(block.contents)
}

/// The CA, certificate and key one process uses, read from a `--tls-dir`. Its `Debug` leaves
/// the key out, so a logged configuration never carries it.
#[derive(Clone)]
pub struct TlsFiles {
    pub dir: PathBuf,
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    /// `crl.pem`, when the directory has one.
    crl_pem: Option<String>,
    /// Who this process's own certificate says it is.
    pub own: PeerId,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles").field("dir", &self.dir).field("own", &self.own).finish_non_exhaustive()
    }
}

fn read_pem(dir: &Path, file: &str) -> Result<String, TlsError> {
    read_bounded(dir, file, MAX_PEM_BYTES)
}

fn read_bounded(dir: &Path, file: &str, max_bytes: u64) -> Result<String, TlsError> {
    let path = dir.join(file);
    let read = |source| TlsError::Read { path: path.clone(), source };
    let bytes = std::fs::metadata(&path).map_err(read)?.len();
    if bytes > max_bytes {
        return Err(TlsError::TooLarge { path, bytes });
    }
    // Read through a bound too: the file may have grown since its size was taken.
    let mut text = String::new();
    use std::io::Read;
    std::fs::File::open(&path).map_err(read)?.take(max_bytes + 1).read_to_string(&mut text).map_err(read)?;
    if text.len() as u64 > max_bytes {
        return Err(TlsError::TooLarge { path, bytes: text.len() as u64 });
    }
    Ok(text)
}

impl TlsFiles {
    /// Reads `ca.pem`, `cert.pem`, `key.pem` and, when there is one, `crl.pem` from `dir`,
    /// and the identity `cert.pem` names.
    pub fn load(dir: &Path) -> Result<TlsFiles, TlsError> {
        let ca_pem = read_pem(dir, CA_CERT_FILE)?;
        let cert_pem = read_pem(dir, CERT_FILE)?;
        let key_pem = read_pem(dir, KEY_FILE)?;
        let crl_pem = match read_bounded(dir, CRL_FILE, MAX_CRL_BYTES) {
            Ok(text) => Some(text),
            Err(TlsError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let bad = |file: &str, detail: String| TlsError::Certificate { path: dir.join(file), detail };
        first_cert_der(&ca_pem).map_err(|d| bad(CA_CERT_FILE, d))?;
        let own = first_cert_der(&cert_pem).and_then(|der| identity_of(&der)).map_err(|d| bad(CERT_FILE, d))?;
        if !key_pem.contains("PRIVATE KEY-----") {
            return Err(bad(KEY_FILE, "no PEM private key in it".into()));
        }
        Ok(TlsFiles { dir: dir.to_path_buf(), ca_pem, cert_pem, key_pem, crl_pem, own })
    }

    fn identity(&self) -> Identity {
        Identity::from_pem(&self.cert_pem, &self.key_pem)
    }

    /// The client side: trust only the cluster's CA, verify the server under `host`
    /// ([`REPLICA_HOST`] or [`AGENT_HOST`]) and present this certificate.
    pub fn client(&self, host: &str) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(self.identity())
            .domain_name(host)
            .timeout(Duration::from_millis(HANDSHAKE_TIMEOUT_MS))
    }
}

/// How a process talks to the others: mutual TLS, or plain TCP when `--insecure` says so.
/// Clones share one [`Tls`], so a reload is seen by every holder.
#[derive(Debug, Clone)]
pub enum Transport {
    Insecure,
    Tls(Arc<Tls>),
}

/// When the certificates in force expire, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAfter {
    /// This process's own certificate.
    pub own_unix_s: i64,
    /// The first CA certificate of the bundle to expire.
    pub ca_unix_s: i64,
}

impl Transport {
    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }

    fn tls(&self) -> Option<&Arc<Tls>> {
        match self {
            Transport::Tls(tls) => Some(tls),
            Transport::Insecure => None,
        }
    }

    /// When the certificates in force now expire (after the latest reload); `None` under
    /// `--insecure`.
    pub fn not_after(&self) -> Option<NotAfter> {
        let Transport::Tls(tls) = self else { return None };
        let now = tls.current();
        Some(NotAfter { own_unix_s: now.not_after_unix_s, ca_unix_s: now.ca_not_after_unix_s })
    }

    /// Reads a `--tls-dir` into a TLS transport.
    pub fn load(dir: &Path) -> Result<Transport, TlsError> {
        Ok(Transport::Tls(Arc::new(Tls::load(dir)?)))
    }

    /// How many reloads have taken effect; a connection cached under another number was
    /// made with older files. Always 0 for plain TCP.
    pub fn generation(&self) -> u64 {
        match self {
            Transport::Insecure => 0,
            Transport::Tls(tls) => tls.generation(),
        }
    }

    /// Wakes on every reload that takes effect; `None` for plain TCP, which never reloads.
    pub fn reloads(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Transport::Insecure => None,
            Transport::Tls(tls) => Some(tls.subscribe()),
        }
    }

    /// An endpoint for `addr` (`host:port`, or a URI whose scheme is replaced), verified as
    /// `host` under TLS.
    pub fn endpoint(&self, addr: &str, host: &str) -> Result<Endpoint, String> {
        let addr = addr.trim();
        let bare = addr.split_once("://").map_or(addr, |(_, rest)| rest);
        if bare.is_empty() {
            return Err("empty address".into());
        }
        match self {
            Transport::Insecure => Endpoint::from_shared(format!("http://{bare}")).map_err(|e| e.to_string()),
            // The files in force now: a reload changes what the next endpoint presents.
            Transport::Tls(tls) => Endpoint::from_shared(format!("https://{bare}"))
                .and_then(|e| e.tls_config(tls.current().files.client(host)))
                .map_err(|e| e.to_string()),
        }
    }

    /// A server builder. TLS is not configured on it: serve [`Transport::incoming`], whose
    /// connections are accepted with the configuration in force when each arrives. Each
    /// connection has at most [`MAX_STREAMS_PER_CONNECTION`] requests and streams open (HTTP/2
    /// makes a client wait for a free one).
    pub fn server(&self) -> tonic::transport::Server {
        let streams = MAX_STREAMS_PER_CONNECTION as u32;
        tonic::transport::Server::builder()
            .max_concurrent_streams(streams)
            .concurrency_limit_per_connection(MAX_STREAMS_PER_CONNECTION)
    }
}

/// The caller's certificate (DER), if it presented one: from our own acceptor's
/// [`ConnInfo`], or from tonic's when a test serves with tonic's TLS.
fn peer_cert<T>(req: &Request<T>) -> Option<Vec<u8>> {
    let ours = req.extensions().get::<ConnInfo>().and_then(|i| i.certs.clone());
    let certs = ours.or_else(|| req.peer_certs())?;
    certs.first().map(|c| c.as_ref().to_vec())
}

/// The identity the caller's certificate names; UNAUTHENTICATED when it presented none.
pub fn caller<T>(req: &Request<T>) -> Result<PeerId, Status> {
    let der = peer_cert(req).ok_or_else(|| {
        Status::unauthenticated(
            "no client certificate: this cluster requires mutual TLS; give the caller a certificate \
             from the cluster's CA (`baton tls cert create`, then --tls-dir)",
        )
    })?;
    identity_of(&der).map_err(|e| Status::unauthenticated(format!("client certificate: {e}")))
}

/// The node shape the caller's certificate fixes, if it presented one that carries one. Read
/// by the one call that needs it (an agent's `Attach`), not by every call `require` lets in.
pub fn caller_shape<T>(req: &Request<T>) -> Result<Option<NodeShape>, Status> {
    let Some(der) = peer_cert(req) else { return Ok(None) };
    shape_of(&der).map_err(|e| Status::permission_denied(format!("the caller's certificate: {e}")))
}

/// Lets through only callers whose certificate has one of `roles`, under TLS; adds their
/// [`PeerId`] to the request's extensions for the handler. Plain TCP lets everything through
/// (the operator chose `--insecure`).
pub fn require<T>(transport: &Transport, roles: &[Role], mut req: Request<T>) -> Result<Request<T>, Status> {
    if !transport.is_tls() {
        return Ok(req);
    }
    let who = caller(&req)?;
    // Revocation is checked here, on every call, rather than in the handshake: the caller
    // learns why, and a connection opened before the reload that revoked it is refused too.
    // A stream is one call: it checks again with a [`CertGuard`].
    let guard = CertGuard { tls: transport.tls().cloned(), cert: peer_cert(&req).map(|der| (der, who.clone())) };
    if let Some(refusal) = guard.revoked() {
        tracing::warn!(caller = %who, "refused a call: the caller's certificate is revoked");
        return Err(refusal);
    }
    if !roles.contains(&who.role) {
        let wanted: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
        return Err(Status::permission_denied(format!(
            "the caller's certificate is for {who}; this service takes only {} certificates",
            wanted.join(" or ")
        )));
    }
    req.extensions_mut().insert(who);
    Ok(req)
}

/// The revocation check of [`require`], kept by a stream that outlives its call (an agent's
/// `Attach`, a client's `Watch` or `JobLogs`): without it a certificate revoked by a reload
/// would keep receiving until the stream ended on its own.
#[derive(Clone)]
pub struct CertGuard {
    tls: Option<Arc<Tls>>,
    /// The caller's certificate (DER) and the identity it names.
    cert: Option<(Vec<u8>, PeerId)>,
}

impl CertGuard {
    /// The guard of `req`'s caller; one that checks nothing under plain TCP or without a
    /// certificate (`require` refused those already where it matters).
    pub fn of<T>(transport: &Transport, req: &Request<T>) -> CertGuard {
        let cert = peer_cert(req).and_then(|der| identity_of(&der).ok().map(|who| (der, who)));
        CertGuard { tls: transport.tls().cloned(), cert }
    }

    /// UNAUTHENTICATED, naming the certificate, once the files in force revoke it.
    pub fn revoked(&self) -> Option<Status> {
        let (Some(tls), Some((der, who))) = (&self.tls, &self.cert) else { return None };
        let serial = tls.current().revoked_serial(der)?;
        Some(Status::unauthenticated(format!(
            "the caller's certificate ({who}, serial {serial}) is revoked by this cluster's {CRL_FILE}; \
             the holder needs a new certificate (`baton tls cert create`)"
        )))
    }

    /// For a stream: [`CertGuard::revoked`] as an error, logged as the stream's end.
    pub fn check(&self) -> Result<(), Status> {
        match self.revoked() {
            None => Ok(()),
            Some(refusal) => {
                let who = self.cert.as_ref().map(|(_, who)| who.to_string()).unwrap_or_default();
                tracing::warn!(caller = %who, "ended a stream: its certificate was revoked since it opened");
                Err(refusal)
            }
        }
    }
}

/// A tonic interceptor running [`require`].
pub fn guard(
    transport: Transport,
    roles: &'static [Role],
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    move |req| require(&transport, roles, req)
}

/// Every role: any certificate of the cluster's CA.
pub const ANY_ROLE: &[Role] = &[Role::Replica, Role::Agent, Role::Client];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_and_unknown_ones_are_refused() {
        for r in [Role::Replica, Role::Agent, Role::Client] {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("admin"), None);
    }

    #[test]
    fn garbage_is_not_an_identity() {
        assert!(identity_of(b"not a certificate").is_err());
        assert!(first_cert_der("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").is_err());
    }

    #[test]
    fn tls_without_a_peer_certificate_is_unauthenticated() {
        let files = TlsFiles {
            dir: PathBuf::from("d"),
            ca_pem: String::new(),
            cert_pem: String::new(),
            key_pem: "-----BEGIN PRIVATE KEY-----\nsecret\n".into(),
            crl_pem: None,
            own: PeerId { role: Role::Replica, name: "1".into() },
        };
        assert!(!format!("{files:?}").contains("secret"), "Debug shows the key");
        let e = caller(&Request::new(())).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn plain_tcp_lets_callers_through_without_identity() {
        let req = require(&Transport::Insecure, &[Role::Replica], Request::new(())).unwrap();
        assert!(req.extensions().get::<PeerId>().is_none());
    }
}
