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
//! - `tokens`: the gRPC methods for tokens and `WhoAmI`.

pub mod tokens;

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

    pub fn token(&self) -> Option<&Token> {
        match self {
            Caller::Open => None,
            Caller::Token { token, .. } => Some(token),
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
