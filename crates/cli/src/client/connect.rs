//! Reaching a replica: the first address in `--server` that answers, failing over on
//! connection errors and UNAVAILABLE, retrying "no leader yet" while an election runs, all
//! within one deadline per call. Any replica answers reads and forwards writes, so no
//! leader search happens here.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use baton_proto::reason::Reason;
use baton_proto::tls::{REPLICA_HOST, Transport};
use baton_proto::v1::baton_client::BatonClient;
use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::client::auth::Bearer;
use crate::client::error::{ClientError, Subject};
use crate::client::mismatch;

/// Where a replica listens when neither `--server` nor `BATON_SERVER` says.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7070";
/// The bound on one whole call, retries included, unless `--timeout` says otherwise.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Each address is tried at most this many times per call (connection errors and plain
/// UNAVAILABLE), so a dead address costs at most two connect timeouts.
pub const MAX_TRIES_PER_ADDR: u32 = 2;
/// "no leader yet" answers retried per call; with the backoff below this spans about 7 s,
/// longer than an election takes, and the call deadline bounds it anyway.
pub const MAX_NO_LEADER_RETRIES: u32 = 10;
/// How long one connection attempt may take before the next address is tried.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Bound on one dial: name lookup, TCP connect and TLS handshake together.
pub const DIAL_TIMEOUT_MS: u64 = 3_000;
/// Backoff between retries: doubles from the first value up to the cap.
pub const FIRST_BACKOFF_MS: u64 = 100;
pub const MAX_BACKOFF_MS: u64 = 1_000;
/// More addresses than this in `--server` is a mistake, not a cluster.
pub const MAX_ADDRESSES: usize = 64;

/// A replica set to talk to. Keeps the channel that last worked, so a command making several
/// calls (logs, queue update) stays on one replica.
pub struct Conn {
    addrs: Vec<String>,
    timeout: Duration,
    transport: Transport,
    bearer: Bearer,
    current: Mutex<Option<(usize, Channel)>>,
}

/// What happened on the way to an answer, for the final error.
#[derive(Default)]
struct Trail {
    tried: Vec<String>,
    last: String,
    no_leader: bool,
}

impl Trail {
    fn trying(&mut self, addr: &str) {
        if !self.tried.iter().any(|a| a == addr) {
            self.tried.push(addr.to_string());
        }
    }

    fn failed(&mut self, addr: &str, why: String) {
        self.trying(addr);
        self.last = format!("{addr}: {why}");
    }

    fn tried(&self) -> String {
        if self.tried.is_empty() { "nothing yet".to_string() } else { self.tried.join(", ") }
    }

    fn give_up(&self) -> ClientError {
        if self.no_leader {
            ClientError::NoLeader
        } else {
            ClientError::Unreachable { tried: self.tried(), last: self.last.clone() }
        }
    }
}

/// Splits a `--server` value into addresses (`host:port`, an `http://` prefix allowed).
pub fn parse_addrs(list: &str) -> Result<Vec<String>, ClientError> {
    let addrs: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| a.strip_prefix("http://").unwrap_or(a).trim_end_matches('/').to_string())
        .collect();
    if addrs.is_empty() {
        return Err(ClientError::Usage(
            "--server (or BATON_SERVER) is empty; give replica addresses like host:7070,host2:7070".into(),
        ));
    }
    if addrs.len() > MAX_ADDRESSES {
        return Err(ClientError::Usage(format!(
            "--server lists {} addresses; at most {MAX_ADDRESSES} are used",
            addrs.len()
        )));
    }
    for a in &addrs {
        if !a.contains(':') || a.contains(char::is_whitespace) {
            return Err(ClientError::Usage(format!("--server: {a:?} is not host:port")));
        }
    }
    Ok(addrs)
}

/// A channel to `addr`, connected now (so a dead address fails here, not mid-call); under
/// TLS the server must prove it is `host` (a replica or an agent of this cluster's CA).
pub async fn dial(addr: &str, transport: &Transport, host: &str) -> Result<Channel, String> {
    let endpoint = transport
        .endpoint(addr, host)
        .map_err(|e| format!("bad address: {e}"))?
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
    // The whole dial, name lookup and TLS handshake included, is bounded: a replica cut off
    // from the network (its name no longer resolving, its packets dropped) must cost one
    // attempt, not the command's whole --timeout (seen: a rack cut left every call waiting
    // on the cut replica's name).
    match tokio::time::timeout(Duration::from_millis(DIAL_TIMEOUT_MS), endpoint.connect()).await {
        Ok(r) => r.map_err(|e| chain(&e)),
        Err(_) => Err(format!("no connection within {DIAL_TIMEOUT_MS} ms")),
    }
}

/// An error and its causes on one line ("transport error: Connection refused (os error 111)").
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Read from the status's typed reason, never from its wording.
fn is_no_leader(s: &Status) -> bool {
    Reason::of(s) == Some(Reason::NoLeader)
}

impl Conn {
    pub fn new(addrs: Vec<String>, timeout: Duration, transport: Transport) -> Conn {
        Conn { addrs, timeout, transport, bearer: Bearer::default(), current: Mutex::new(None) }
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Sends this token with every call.
    pub fn with_bearer(mut self, bearer: Bearer) -> Conn {
        self.bearer = bearer;
        self
    }

    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs one RPC with failover and retries. `subject` and `name` word a NOT_FOUND.
    pub async fn call<T, F, Fut>(&self, subject: Subject, name: &str, f: F) -> Result<T, ClientError>
    where
        F: FnMut(Api) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut trail = Trail::default();
        let deadline = Instant::now() + self.timeout;
        match tokio::time::timeout_at(deadline, self.attempts(&mut trail, subject, name, f)).await {
            Ok(result) => result,
            Err(_) if trail.no_leader => Err(ClientError::NoLeader),
            Err(_) => Err(ClientError::Timeout { secs: self.timeout.as_secs_f64(), tried: trail.tried() }),
        }
    }

    async fn attempts<T, F, Fut>(
        &self,
        trail: &mut Trail,
        subject: Subject,
        name: &str,
        mut f: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Api) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let n = self.addrs.len();
        let mut tries = vec![0u32; n];
        let mut no_leader_retries = 0u32;
        let mut backoff = Duration::from_millis(FIRST_BACKOFF_MS);
        let cached = self.current.lock().expect("not poisoned").clone();
        let mut i = cached.as_ref().map_or(0, |(i, _)| *i);
        let mut channel = cached.map(|(_, c)| c);
        loop {
            // The next address with tries left, from `i` on.
            let Some(next) = (0..n).map(|k| (i + k) % n).find(|&k| tries[k] < MAX_TRIES_PER_ADDR) else {
                return Err(trail.give_up());
            };
            i = next;
            let addr = &self.addrs[i];
            if tries[i] > 0 {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(MAX_BACKOFF_MS));
            }
            trail.trying(addr);
            let ch = match channel.take() {
                Some(c) => c,
                None => match dial(addr, &self.transport, REPLICA_HOST).await {
                    Ok(c) => c,
                    Err(why) if self.transport.is_tls() && mismatch::is_plain_answer(&why) => {
                        return Err(ClientError::TlsMismatch(mismatch::plain_server_hint(addr)));
                    }
                    Err(why) => {
                        tries[i] += 1;
                        trail.failed(addr, why);
                        i = (i + 1) % n;
                        continue;
                    }
                },
            };
            match f(api_client(ch.clone(), self.bearer.clone())).await {
                Ok(reply) => {
                    *self.current.lock().expect("not poisoned") = Some((i, ch));
                    return Ok(reply.into_inner());
                }
                Err(s) if self.is_tls_refusal(&s, addr).await => {
                    return Err(ClientError::TlsMismatch(mismatch::tls_server_hint(addr)));
                }
                Err(s) if is_no_leader(&s) => {
                    // The replica is up but cannot serve writes (or linearizable reads) until an
                    // election ends: wait and ask again, the next replica first.
                    trail.no_leader = true;
                    trail.failed(addr, s.message().to_string());
                    no_leader_retries += 1;
                    if no_leader_retries > MAX_NO_LEADER_RETRIES {
                        return Err(ClientError::NoLeader);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(MAX_BACKOFF_MS));
                    i = (i + 1) % n;
                }
                Err(s) if s.code() == Code::Unavailable => {
                    // A replica shutting down, or the connection broke: the next one may answer.
                    *self.current.lock().expect("not poisoned") = None;
                    tries[i] += 1;
                    trail.failed(addr, format!("unavailable: {}", s.message()));
                    i = (i + 1) % n;
                }
                Err(s) => return Err(ClientError::from_status(&s, subject, name)),
            }
        }
    }
}

impl Conn {
    /// Whether a failed call of this plain client met a replica that speaks TLS: it hangs up
    /// on the HTTP/2 preface, which the call sees as a transport error, so the address is
    /// asked once more, by a probe that reads the answer.
    async fn is_tls_refusal(&self, s: &Status, addr: &str) -> bool {
        let transport_failure = matches!(s.code(), Code::Unknown | Code::Unavailable | Code::Internal)
            && !is_no_leader(s)
            && (s.message().contains("transport error") || s.message().contains("h2 protocol error"));
        !self.transport.is_tls() && transport_failure && mismatch::speaks_tls(addr).await
    }
}

/// The API client the commands use: it sends the command's token with every call.
pub type Api = BatonClient<InterceptedService<Channel, Bearer>>;

/// The API client over `ch`, sending `bearer`'s token, with the message bound the server uses in both directions
/// (tonic's own default decodes only 4 MiB, less than a replica may send).
pub fn api_client(ch: Channel, bearer: Bearer) -> Api {
    BatonClient::with_interceptor(ch, bearer)
        .max_decoding_message_size(baton_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(baton_proto::MAX_MESSAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that takes the connection and never answers the TLS handshake (a replica
    /// wedged or cut off mid-connection) costs one bounded dial, named in the error.
    #[tokio::test]
    async fn a_dial_that_never_completes_is_cut_off_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        crate::tls::dev_pki(dir.path(), &[1], &[], &["c".to_string()]).unwrap();
        let transport = Transport::load(&dir.path().join("client-c")).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let silent = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        });
        let err = dial(&addr, &transport, REPLICA_HOST).await.unwrap_err();
        silent.abort();
        assert!(err.contains(&format!("no connection within {DIAL_TIMEOUT_MS} ms")), "{err}");
    }

    #[test]
    fn addresses_parse_and_bad_ones_are_named() {
        assert_eq!(parse_addrs(" a:1, http://b:2/ ,").unwrap(), vec!["a:1", "b:2"]);
        assert!(parse_addrs(" , ").unwrap_err().to_string().contains("BATON_SERVER"));
        assert!(parse_addrs("a:1,nohost").unwrap_err().to_string().contains("\"nohost\""));
    }
}
