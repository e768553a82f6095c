//! HTTP requests for tests of the HTTP listeners (`/metrics`, the dashboard): over mutual TLS
//! as a browser or Prometheus makes them (ALPN offering h2 and http/1.1), and over plain TCP.
//! One request per connection, as the listeners serve them.

use rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls;

fn der_of(pem: &str) -> Vec<u8> {
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).expect("a PEM certificate").to_vec()
}

/// `GET path` over TLS from `addr`, presenting the certificate in `client` (none: no
/// certificate): the status code and body, or why the exchange failed.
pub async fn https_get(
    ca_pem: &str,
    host: &str,
    addr: &str,
    client: Option<&std::path::Path>,
    path: &str,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(der_of(ca_pem))).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(dir) => {
            let pem = std::fs::read(dir.join("cert.pem")).unwrap();
            let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().unwrap();
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
    };
    // As a browser or Prometheus offers it.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    parse_response(&out)
}

/// `GET path` over plain TCP: the status code and body, or why there was none.
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read_to_end(&mut out)).await;
    parse_response(&out)
}

pub fn parse_response(out: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(out);
    let code = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {:?}", &text[..text.len().min(80)]))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}
