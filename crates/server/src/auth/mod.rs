//! Who is calling the client API: the `authorization: Bearer TOKEN` metadata, hashed and
//! looked up in the replicated token records (docs/security.md).
//!
//! This replica authenticates every call (a linearizable read, so a token revoked a moment
//! ago is refused here at once); writes then go to the log wrapped in `Op::As` with the
//! token's hash, and the state machine checks the token and its permissions again where the
//! command is applied. A forwarded or forged write therefore carries no more rights than
//! its token has at that point of the log, and a write without a token is refused by every
//! replica once the cluster has one.
//!
//! Streams (`Watch`, `JobLogs`) authenticate once like any call, then check their caller
//! again against this replica's applied state ([`Caller::refresh`]) before each batch they
//! send and every [`STREAM_RECHECK_MS`] while nothing flows: a revoked token's stream ends
//! with UNAUTHENTICATED, and one whose grants shrank sends only what the grants left show.
//!
//! - `tokens`: the gRPC methods for tokens and `WhoAmI`.

mod gate;
pub mod tokens;

pub use gate::membership_gate;

use baton_model::State;
use baton_model::access::{Role, Token, TokenHash};
use baton_model::command::Op;
use baton_proto::{AUTHORIZATION_METADATA, BEARER_PREFIX};
use sha2::{Digest, Sha256};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// How a replica treats client calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// Every call needs a live token (the default).
    #[default]
    Tokens,
    /// No authentication while the cluster has no token: every call acts as an admin. For
    /// development only; the server logs a warning. Once the cluster has a token, this
    /// replica asks for tokens like any other.
    None,
}

impl AuthMode {
    pub fn parse(s: &str) -> Option<AuthMode> {
        match s {
            "tokens" => Some(AuthMode::Tokens),
            "none" => Some(AuthMode::None),
            _ => None,
        }
    }
}

/// Longest token accepted in metadata (tokens baton makes are 64 hex digits).
pub const MAX_TOKEN_LEN: usize = 512;

/// The user a bootstrap token names.
pub const BOOTSTRAP_ADMIN: &str = "admin";

/// How often an open watch or log stream checks its caller again while nothing flows, so
/// that a stream whose token was revoked ends within this of this replica applying the
/// revocation even when no event or log line comes to wake it (a revocation makes no event).
/// Each check is a lookup in the applied state, no round to a quorum.
pub const STREAM_RECHECK_MS: u64 = 1_000;

/// SHA-256 of a token: what the cluster stores and compares.
pub fn hash_token(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// Who a call comes from.
#[derive(Debug, Clone)]
pub enum Caller {
    /// `--auth none`: anyone, with an admin's rights at the edge (the state machine still
    /// refuses bare writes to a cluster that has tokens).
    Open,
    Token {
        hash: TokenHash,
        token: Token,
    },
}

impl Caller {
    /// Wraps a client command with the caller's token.
    pub fn wrap(&self, op: Op) -> Op {
        match self {
            Caller::Open => op,
            Caller::Token { hash, .. } => Op::As { token: *hash, op: Box::new(op) },
        }
    }

    /// The hash of the caller's token, if it has one.
    pub fn hash(&self) -> Option<&TokenHash> {
        match self {
            Caller::Open => None,
            Caller::Token { hash, .. } => Some(hash),
        }
    }

    pub fn token(&self) -> Option<&Token> {
        match self {
            Caller::Open => None,
            Caller::Token { token, .. } => Some(token),
        }
    }

    /// The caller of a stream opened earlier, as `s` knows it now: its token with the roles
    /// and grants `s` gives it (a grant taken back counts from here on), or UNAUTHENTICATED
    /// once the token is revoked or forgotten, or, for a caller let in without a token, once
    /// the cluster has tokens. Checked against this replica's applied state, not
    /// linearizably: what a stream sends was judged against that same state, so nothing
    /// applied after the revocation is sent, and a lookup is cheap enough for every batch.
    pub fn refresh(&mut self, s: &State) -> Result<(), Status> {
        match self {
            Caller::Open if s.access().enforced() => Err(Status::unauthenticated(
                "this cluster has tokens now, and this stream was opened without one; open it again with a token",
            )),
            Caller::Open => Ok(()),
            Caller::Token { hash, token } => {
                let now = s.access().authenticate(hash).map_err(crate::status::from_apply)?;
                // Cloned only when its rights changed: most checks find them as they were.
                if *now != *token {
                    *token = now.clone();
                }
                Ok(())
            }
        }
    }

    /// PERMISSION_DENIED unless the caller has `role` (or runs unauthenticated).
    pub fn require(&self, role: Role, what: &str) -> Result<(), Status> {
        match self.token() {
            Some(t) if !t.has(role) && !t.has(Role::Admin) => Err(Status::permission_denied(format!(
                "{what} needs role {}; user {} does not have it",
                role.as_str(),
                t.spec.user
            ))),
            _ => Ok(()),
        }
    }
}

/// Tries to commit the bootstrap admin token this often, this many times (until a leader
/// is elected); then gives up with a warning.
const BOOTSTRAP_RETRY_MS: u64 = 200;
const BOOTSTRAP_TRIES: u32 = 150;

/// Makes `hash` the token of user `admin` if the cluster has no token yet. Committed
/// without a token, which the state machine allows only while the cluster has none: on a
/// cluster that already has tokens this is refused and changes nothing.
pub async fn bootstrap_admin(replica: baton_raft::Replica, hash: TokenHash) {
    let spec = baton_model::access::TokenSpec {
        user: baton_model::Name::lit(BOOTSTRAP_ADMIN),
        roles: [Role::Admin].into_iter().collect(),
        queues: Default::default(),
    };
    for _ in 0..BOOTSTRAP_TRIES {
        let op = Op::AddToken { hash, spec: spec.clone() };
        match replica.write(baton_model::Command { now_ms: crate::clock::now_ms(), op }).await {
            Ok(Ok(_)) => return tracing::info!("bootstrap admin token added (user admin)"),
            Ok(Err(e)) => return tracing::info!(reason = %e, "bootstrap admin token not added; the cluster has tokens"),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(BOOTSTRAP_RETRY_MS)).await,
        }
    }
    tracing::warn!("no leader to commit the bootstrap admin token to; restart this replica to try again");
}

/// The token in `authorization: Bearer TOKEN`, or why there is none.
pub fn bearer(meta: &MetadataMap) -> Result<&str, Status> {
    let value = meta.get(AUTHORIZATION_METADATA).ok_or_else(|| {
        Status::unauthenticated(
            "missing `authorization: Bearer TOKEN` metadata; set BATON_TOKEN or pass --token-file \
             (an admin makes tokens with `baton token create`)",
        )
    })?;
    let text = value.to_str().map_err(|_| Status::unauthenticated("the authorization metadata is not text"))?;
    let token = text
        .strip_prefix(BEARER_PREFIX)
        .ok_or_else(|| Status::unauthenticated("the authorization metadata must read `Bearer TOKEN`"))?
        .trim();
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(Status::unauthenticated(format!("a token is 1 to {MAX_TOKEN_LEN} characters")));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_sha256() {
        let h = hash_token("abc");
        assert_eq!(baton_model::access::token_id(&h), "ba7816bf8f01cfea");
    }

    /// Writes `op` as the cluster's admin (a cluster with tokens takes no bare command).
    fn as_admin(s: &mut State, now_ms: u64, op: Op) {
        let op = Op::As { token: hash_token("admin"), op: Box::new(op) };
        s.apply(baton_model::Command { now_ms, op }).unwrap_or_else(|e| panic!("{e}"));
    }

    /// A cluster with an admin, queues a and b, and alice, a user of both.
    fn state_with_alice(hash: TokenHash) -> State {
        let mut s = State::default();
        let admin = baton_model::access::TokenSpec {
            user: baton_model::Name::lit("admin"),
            roles: [Role::Admin].into_iter().collect(),
            queues: Default::default(),
        };
        let op = Op::AddToken { hash: hash_token("admin"), spec: admin };
        s.apply(baton_model::Command { now_ms: 1, op }).unwrap();
        for q in ["a", "b"] {
            as_admin(&mut s, 1, Op::PutQueue(baton_model::fixture::gpu_queue(q, 8)));
        }
        let spec = baton_model::access::TokenSpec {
            user: baton_model::Name::lit("alice"),
            roles: Default::default(),
            queues: [baton_model::Name::lit("a"), baton_model::Name::lit("b")].into_iter().collect(),
        };
        as_admin(&mut s, 1, Op::AddToken { hash, spec });
        s
    }

    fn alice(s: &State, hash: TokenHash) -> Caller {
        Caller::Token { hash, token: s.access().authenticate(&hash).unwrap().clone() }
    }

    #[test]
    fn a_refreshed_caller_has_the_grants_of_now_and_a_revoked_one_is_unauthenticated() {
        let hash = hash_token("alice-secret");
        let mut s = state_with_alice(hash);
        let mut who = alice(&s, hash);
        let id = baton_model::access::token_id(&hash);
        as_admin(&mut s, 2, Op::GrantQueue { id: id.clone(), queue: baton_model::Name::lit("b"), granted: false });
        who.refresh(&s).unwrap();
        let queues: Vec<&str> = who.token().unwrap().spec.queues.iter().map(|q| q.as_str()).collect();
        assert_eq!(queues, ["a"]);
        as_admin(&mut s, 3, Op::RevokeToken { id: id.clone() });
        let e = who.refresh(&s).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains(&format!("token {id} of user alice was revoked")), "{}", e.message());
    }

    #[test]
    fn a_caller_let_in_without_a_token_is_refused_once_the_cluster_has_tokens() {
        let mut open = Caller::Open;
        open.refresh(&State::default()).unwrap();
        let e = open.refresh(&state_with_alice(hash_token("t"))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("this cluster has tokens now"), "{}", e.message());
    }

    #[test]
    fn bearer_metadata_is_read_and_bad_forms_are_named() {
        let mut m = MetadataMap::new();
        assert!(bearer(&m).unwrap_err().message().contains("missing `authorization"));
        m.insert("authorization", "Basic x".parse().unwrap());
        assert!(bearer(&m).unwrap_err().message().contains("Bearer TOKEN"));
        m.insert("authorization", "Bearer t0k".parse().unwrap());
        assert_eq!(bearer(&m).unwrap(), "t0k");
    }
}
