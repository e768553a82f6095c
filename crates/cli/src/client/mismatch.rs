//! A client and a replica that disagree about TLS: named as such, with what to change, instead
//! of a bare "transport error". A TLS replica answers plain HTTP/2 with a TLS alert and hangs
//! up; a plain replica answers a TLS handshake with bytes that are no TLS record.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bound on the whole probe: connect, write the preface, read the answer.
const PROBE_MS: u64 = 1_000;
/// What an HTTP/2 client sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A TLS record's first bytes: content type alert (21), then protocol version major 3.
const TLS_ALERT: [u8; 2] = [0x15, 0x03];

/// What a plain client says when the replica at `addr` speaks TLS.
pub fn tls_server_hint(addr: &str) -> String {
    format!(
        "the replica at {addr} requires TLS, and this client connected without it (--insecure): drop \
         --insecure and give a client certificate directory with --tls-dir or BATON_TLS_DIR (`baton dev` \
         prints it; `baton tls cert create` makes one)"
    )
}

/// What a TLS client says when the replica at `addr` does not speak TLS.
pub fn plain_server_hint(addr: &str) -> String {
    format!(
        "the replica at {addr} does not speak TLS (it runs with --insecure): pass --insecure to talk to it \
         without TLS, or point --server at a cluster that runs with TLS"
    )
}

/// Whether a TLS dial failed because the server answered with something other than TLS
/// (rustls reads its first bytes as a record of an unknown content type).
pub fn is_plain_answer(dial_error: &str) -> bool {
    dial_error.contains("InvalidContentType") || dial_error.contains("corrupt message")
}

/// Whether the server at `addr` answers an HTTP/2 preface with a TLS alert: it speaks TLS.
pub async fn speaks_tls(addr: &str) -> bool {
    let probe = async {
        let mut socket = tokio::net::TcpStream::connect(addr).await.ok()?;
        socket.write_all(H2_PREFACE).await.ok()?;
        let mut first = [0u8; 2];
        socket.read_exact(&mut first).await.ok()?;
        Some(first == TLS_ALERT)
    };
    matches!(tokio::time::timeout(Duration::from_millis(PROBE_MS), probe).await, Ok(Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server_answering(answer: &'static [u8]) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(answer).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_server_answering_with_a_tls_alert_speaks_tls() {
        let addr = server_answering(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]).await;
        assert!(speaks_tls(&addr).await);
        let addr = server_answering(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00").await;
        assert!(!speaks_tls(&addr).await, "an HTTP/2 settings frame is no TLS");
    }

    #[test]
    fn a_plain_answer_to_a_tls_handshake_is_recognised() {
        assert!(is_plain_answer("transport error: received corrupt message of type InvalidContentType"));
        assert!(!is_plain_answer("transport error: Connection refused (os error 111)"));
    }
}
