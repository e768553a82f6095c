//! `CreateToken`, `RevokeToken`, `GrantQueue`, `ListTokens` and `WhoAmI`.

use baton_model::access::{Role, Token, TokenHash, TokenSpec, token_id};
use baton_model::command::Op;
use baton_proto::convert;
use baton_proto::v1::{Ack, CreateTokenRequest, GrantQueueRequest, ListTokensReply, TokenInfo, TokenRef, WhoAmIReply};
use tonic::{Response, Status};

use super::Caller;
use crate::api::Api;
use crate::status;

pub async fn create(api: &Api, who: &Caller, r: CreateTokenRequest) -> Result<Response<TokenInfo>, Status> {
    let hash: TokenHash =
        r.hash.as_slice().try_into().map_err(|_| {
            Status::invalid_argument(format!("hash: {} bytes; the SHA-256 of a token is 32", r.hash.len()))
        })?;
    let user = convert::name(&r.user, "user").map_err(status::from_convert)?;
    let roles = convert::roles_from_proto(&r.roles, "roles").map_err(status::from_convert)?;
    let mut queues = std::collections::BTreeSet::new();
    for (i, q) in r.queues.iter().enumerate() {
        queues.insert(convert::name(q, &format!("queues[{i}]")).map_err(status::from_convert)?);
    }
    let spec = TokenSpec { user, roles, queues };
    api.write(who, Op::AddToken { hash, spec: spec.clone() }).await?;
    let creator = who.token().map(|t| t.spec.user.clone());
    let token = Token {
        id: token_id(&hash),
        spec,
        created_ms: 0,
        created_by: creator,
        revoked_ms: None,
        admin_of: Default::default(),
    };
    Ok(Response::new(info(&token)))
}

pub async fn revoke(api: &Api, who: &Caller, r: TokenRef) -> Result<Response<Ack>, Status> {
    api.ack(who, Op::RevokeToken { id: r.id }).await
}

pub async fn grant(api: &Api, who: &Caller, r: GrantQueueRequest) -> Result<Response<Ack>, Status> {
    let queue = convert::name(&r.queue, "queue").map_err(status::from_convert)?;
    let op = if r.admin {
        Op::GrantQueueAdmin { id: r.id, queue, granted: !r.revoke }
    } else {
        Op::GrantQueue { id: r.id, queue, granted: !r.revoke }
    };
    api.ack(who, op).await
}

pub async fn list(api: &Api, who: &Caller) -> Result<Response<ListTokensReply>, Status> {
    who.require(Role::Admin, "ListTokens")?;
    let tokens = api.read(|s| s.access().tokens().map(info).collect()).await?;
    Ok(Response::new(ListTokensReply { tokens }))
}

pub async fn who_am_i(api: &Api, who: &Caller) -> Result<Response<WhoAmIReply>, Status> {
    let Some(t) = who.token() else {
        return Ok(Response::new(WhoAmIReply { auth: false, ..Default::default() }));
    };
    let user = t.spec.user.clone();
    let run_as = api.read(move |s| s.default_run_as(&user)).await?;
    let i = info(t);
    let (run_as, run_as_refused) = match run_as {
        Ok(u) => (u.to_string(), String::new()),
        // The words a submit would be refused with.
        Err(e) => (String::new(), crate::status::from_apply(e).message().to_string()),
    };
    let reply = WhoAmIReply {
        user: i.user,
        roles: i.roles,
        queues: i.queues,
        token_id: i.id,
        auth: true,
        run_as,
        run_as_refused,
        admin_of: i.admin_of,
    };
    Ok(Response::new(reply))
}

fn info(t: &Token) -> TokenInfo {
    TokenInfo {
        id: t.id.clone(),
        user: t.spec.user.to_string(),
        roles: t.spec.roles.iter().map(|r| i32::from(convert::role_to_proto(*r))).collect(),
        queues: t.spec.queues.iter().map(|q| q.to_string()).collect(),
        created_ms: t.created_ms,
        created_by: t.created_by.as_ref().map(|u| u.to_string()).unwrap_or_default(),
        revoked_ms: t.revoked_ms,
        admin_of: t.admin_of.iter().map(|q| q.to_string()).collect(),
    }
}
