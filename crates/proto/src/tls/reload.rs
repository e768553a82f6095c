//! The TLS state a process can swap while it runs: its CA bundle, certificate, key and CRL,
//! read again from its `--tls-dir` on a reload (SIGHUP). Every new connection is accepted,
//! and every new outgoing endpoint made, with what is in force at that moment; connections
//! already open keep what they were made with, except that every call on them is checked
//! against the current CRL (`require`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::ClientCertVerifier;

use super::{CA_CERT_FILE, CERT_FILE, CRL_FILE, KEY_FILE, PeerId, TlsError, TlsFiles};

/// The protocol HTTP/2 is negotiated under; tonic's clients insist on it.
const ALPN_H2: &[u8] = b"h2";
/// What the HTTP listener (`/metrics`, the dashboard) speaks: browsers and Prometheus offer
/// both, and a listener that said `h2` would get HTTP/2 it does not serve.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// One reading of a `--tls-dir`, checked and made into what the server side needs.
pub struct Loaded {
    pub files: TlsFiles,
    /// What each new incoming connection is accepted with.
    pub server: Arc<rustls::ServerConfig>,
    /// The same for the HTTP listener: the same certificate and verifier, HTTP/1.1.
    pub web: Arc<rustls::ServerConfig>,
    verifier: Arc<dyn ClientCertVerifier>,
    chain: Vec<CertificateDer<'static>>,
    /// (issuer name, serial) of every certificate the CRL lists, both as DER bytes.
    revoked: HashSet<(Vec<u8>, Vec<u8>)>,
    /// This process's certificate: its serial (hex) and when it expires (Unix seconds).
    pub serial: String,
    pub not_after_unix_s: i64,
    /// When the first CA certificate of the bundle to expire does (Unix seconds): past it,
    /// certificates it issued stop verifying.
    pub ca_not_after_unix_s: i64,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("files", &self.files)
            .field("serial", &self.serial)
            .field("revoked", &self.revoked.len())
            .finish_non_exhaustive()
    }
}

fn bad(dir: &Path, file: &str, detail: impl Into<String>) -> TlsError {
    TlsError::Certificate { path: dir.join(file), detail: detail.into() }
}

impl Loaded {
    /// Checks `files` and builds the server configuration: the CA bundle's certificates are
    /// the roots callers are verified against (with the CRL's entries refused), and
    /// `cert.pem` with `key.pem` is what this process presents; a key that does not go with
    /// the certificate is refused here.
    pub fn build(files: TlsFiles) -> Result<Loaded, TlsError> {
        let dir = files.dir.clone();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let mut ca_not_after_unix_s = i64::MAX;
        for der in CertificateDer::pem_slice_iter(files.ca_pem.as_bytes()) {
            let der = der.map_err(|e| bad(&dir, CA_CERT_FILE, format!("not PEM: {e}")))?;
            let (_, ca) = x509_parser::parse_x509_certificate(&der)
                .map_err(|e| bad(&dir, CA_CERT_FILE, format!("not an X.509 certificate: {e}")))?;
            ca_not_after_unix_s = ca_not_after_unix_s.min(ca.validity().not_after.timestamp());
            roots.add(der).map_err(|e| bad(&dir, CA_CERT_FILE, format!("not a usable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad(&dir, CA_CERT_FILE, "no CA certificate in it"));
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(files.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&dir, CERT_FILE, format!("not PEM: {e}")))?;
        let Some(leaf) = chain.first() else {
            return Err(bad(&dir, CERT_FILE, "no certificate in it"));
        };
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| bad(&dir, CERT_FILE, format!("not an X.509 certificate: {e}")))?;
        let serial = parsed.raw_serial_as_string();
        let not_after_unix_s = parsed.validity().not_after.timestamp();
        let key = PrivateKeyDer::from_pem_slice(files.key_pem.as_bytes())
            .map_err(|e| bad(&dir, KEY_FILE, format!("no private key in it: {e}")))?;
        let mut revoked = HashSet::new();
        let mut crls = Vec::new();
        if let Some(pem) = &files.crl_pem {
            for der in CertificateRevocationListDer::pem_slice_iter(pem.as_bytes()) {
                let der = der.map_err(|e| bad(&dir, CRL_FILE, format!("not PEM: {e}")))?;
                let (_, crl) = x509_parser::parse_x509_crl(&der)
                    .map_err(|e| bad(&dir, CRL_FILE, format!("not an X.509 CRL: {e}")))?;
                let issuer = crl.issuer().as_raw().to_vec();
                revoked.extend(crl.iter_revoked_certificates().map(|r| (issuer.clone(), r.raw_serial().to_vec())));
                crls.push(der);
            }
            if crls.is_empty() {
                return Err(bad(&dir, CRL_FILE, "no X509 CRL in it (make one with `baton tls revoke`)"));
            }
        }
        // A caller without a certificate still completes the handshake, so that each service
        // can refuse it with UNAUTHENTICATED and say what is missing; a certificate of another
        // CA fails the handshake. A revoked one completes it too and is refused by every
        // service (`require`) with an error saying so: refused in the handshake, a TLS 1.3
        // caller would learn only that the connection closed.
        let roots = Arc::new(roots);
        let serving = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad(&dir, CA_CERT_FILE, e.to_string()))?;
        // The CRL's signature is checked against the CA bundle here, with this process's
        // own certificate (`verify_own`): a list from another CA knows nothing of it.
        let checking = if crls.is_empty() {
            serving.clone()
        } else {
            WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                .with_crls(crls)
                .only_check_end_entity_revocation()
                .allow_unauthenticated()
                .build()
                .map_err(|e| bad(&dir, CRL_FILE, e.to_string()))?
        };
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&dir, CERT_FILE, e.to_string()))?
            .with_client_cert_verifier(serving)
            .with_single_cert(chain.clone(), key)
            .map_err(|e| bad(&dir, KEY_FILE, format!("does not go with {CERT_FILE}: {e}")))?;
        let mut web = server.clone();
        server.alpn_protocols = vec![ALPN_H2.to_vec()];
        web.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(Loaded {
            files,
            server: Arc::new(server),
            web: Arc::new(web),
            verifier: checking,
            chain,
            revoked,
            serial,
            not_after_unix_s,
            ca_not_after_unix_s,
        })
    }

    /// Whether this process's own certificate verifies against its own CA bundle and CRL the
    /// way its peers will verify it: issued by one of the CAs, valid now, not revoked.
    pub fn verify_own(&self) -> Result<(), TlsError> {
        let (leaf, rest) = self.chain.split_first().ok_or_else(|| bad(&self.files.dir, CERT_FILE, "empty"))?;
        self.verifier.verify_client_cert(leaf, rest, UnixTime::now()).map(|_| ()).map_err(|e| {
            let against = if self.files.crl_pem.is_some() { "ca.pem and crl.pem" } else { "ca.pem" };
            bad(&self.files.dir, CERT_FILE, format!("does not verify against {against}: {e}"))
        })
    }

    /// How many certificates the CRL lists.
    pub fn revoked_count(&self) -> usize {
        self.revoked.len()
    }

    /// The serial (hex) of `der` when the CRL lists it.
    pub fn revoked_serial(&self, der: &[u8]) -> Option<String> {
        if self.revoked.is_empty() {
            return None;
        }
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let key = (cert.issuer().as_raw().to_vec(), cert.raw_serial().to_vec());
        self.revoked.contains(&key).then(|| cert.raw_serial_as_string())
    }
}

/// A process's TLS state: the identity it started with, and the files in force, swapped
/// whole by [`Tls::reload`].
pub struct Tls {
    pub dir: PathBuf,
    /// Who this process is; a reload to a certificate naming anyone else is refused.
    pub own: PeerId,
    current: RwLock<Arc<Loaded>>,
    generation: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("dir", &self.dir).field("own", &self.own).finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads and checks `dir` (see [`TlsFiles::load`], [`Loaded::build`] and
    /// [`Loaded::verify_own`]).
    pub fn load(dir: &Path) -> Result<Tls, TlsError> {
        let loaded = Loaded::build(TlsFiles::load(dir)?)?;
        loaded.verify_own()?;
        Ok(Tls {
            dir: dir.to_path_buf(),
            own: loaded.files.own.clone(),
            current: RwLock::new(Arc::new(loaded)),
            generation: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The files in force.
    pub fn current(&self) -> Arc<Loaded> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Reads the directory again and puts it in force, unless anything is wrong with it:
    /// a file unreadable or not PEM, a key that does not go with the certificate, a
    /// certificate for another role or name than this process's, or one that does not
    /// verify against the new CA bundle and CRL. On an error the files in force stay.
    pub fn reload(&self) -> Result<Arc<Loaded>, TlsError> {
        let files = TlsFiles::load(&self.dir)?;
        if files.own != self.own {
            return Err(TlsError::Identity { path: self.dir.join(CERT_FILE), found: files.own, own: self.own.clone() });
        }
        let loaded = Arc::new(Loaded::build(files)?);
        loaded.verify_own()?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = loaded.clone();
        self.generation.send_modify(|g| *g += 1);
        Ok(loaded)
    }
}
