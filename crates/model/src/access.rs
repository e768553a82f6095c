//! Who may do what on the client API: tokens, the users they name, their roles and the
//! queues granted to them.
//!
//! Only a token's SHA-256 is replicated, never the token: whoever reads a replica's disk or
//! a snapshot learns no credential. The records live in the replicated state, so adding or
//! revoking a token takes effect on every replica at the same log index, and a write is
//! checked against them when it is applied (on the leader and every follower alike), not
//! only where the client connected: a forwarded or replayed write cannot carry more rights
//! than its token has at that point of the log.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::command::Op;
use crate::cow_tree::CowTree;
use crate::error::ApplyError;
use crate::job::{Job, JobId};
use crate::limits::{
    MAX_GRANTS_PER_TOKEN, MAX_REMEMBERED_REQUEST_IDS, MAX_REMEMBERED_REQUEST_IDS_PER_USER, MAX_TOKENS,
};
use crate::name::Name;

/// SHA-256 of a token's bytes.
pub type TokenHash = [u8; 32];

/// Hex digits of a token's hash that name it in lists and `token revoke` (64 bits: unique in
/// practice, and useless for forging the token).
pub const TOKEN_ID_LEN: usize = 16;

/// What a token may do beyond its queue grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Everything: cluster settings, queues, cohorts, classes, nodes, tokens, any job.
    Admin,
    /// Nodes (cordon, drain) and any job (submit to any queue, cancel, pause, resume).
    Operator,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Admin, Role::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// What a new token grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSpec {
    pub user: Name,
    pub roles: BTreeSet<Role>,
    /// Queues whose jobs the user may submit, see privately and cancel (their own).
    pub queues: BTreeSet<Name>,
}

/// A token as the state keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// The first hex digits of its hash ([`TOKEN_ID_LEN`]).
    pub id: String,
    pub spec: TokenSpec,
    pub created_ms: u64,
    /// Who added it (`None`: the cluster's bootstrap).
    pub created_by: Option<Name>,
    /// Set when revoked; a revoked token is kept (so it reads as revoked, not unknown)
    /// until room is needed for new ones.
    pub revoked_ms: Option<u64>,
    /// Queues this token's user administers: they may submit there, see every job's private
    /// data there and cancel, pause and resume any job there (Op::GrantQueueAdmin). Written
    /// in its own part of a snapshot ([`QueueAdmins`]), so snapshots from before it load.
    #[serde(skip)]
    pub admin_of: BTreeSet<Name>,
}

impl Token {
    pub fn has(&self, role: Role) -> bool {
        self.spec.roles.contains(&role)
    }

    /// May act on any job (admins and operators).
    pub fn any_job(&self) -> bool {
        self.has(Role::Admin) || self.has(Role::Operator)
    }

    pub fn granted(&self, queue: &Name) -> bool {
        self.spec.queues.contains(queue)
    }

    /// Administers `queue` (see [`Token::admin_of`]).
    pub fn administers(&self, queue: &Name) -> bool {
        self.admin_of.contains(queue)
    }

    /// May see the private data (environment, logs) of what `s` names: its owner, its
    /// queue's admins, operators, admins.
    pub fn may_see_private(&self, s: &Subject) -> bool {
        self.any_job() || self.administers(s.queue) || (s.owner == Some(&self.spec.user) && self.granted(s.queue))
    }

    fn roles_text(&self) -> String {
        let roles: Vec<&str> = self.spec.roles.iter().map(|r| r.as_str()).collect();
        if roles.is_empty() { "no roles".into() } else { format!("roles {}", roles.join(", ")) }
    }
}

/// The hex id of a token hash.
pub fn token_id(hash: &TokenHash) -> String {
    hash.iter().take(TOKEN_ID_LEN / 2).map(|b| format!("{b:02x}")).collect()
}

/// The identity part of the replicated state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Access {
    #[serde(with = "as_pairs")]
    pub(crate) tokens: BTreeMap<TokenHash, Token>,
    /// Who submitted each job (jobs submitted without a token have none).
    pub(crate) owners: CowTree<JobId, Name>,
    /// Request ids per user: one user's id never finds another user's job.
    #[serde(with = "as_pairs")]
    pub(crate) request_ids: BTreeMap<(Name, String), JobId>,
    pub(crate) request_order: VecDeque<(Name, String)>,
    /// How many of `request_ids` each user has: derived, rebuilt when a state is read back
    /// ([`Access::rebuild_request_counts`]).
    #[serde(skip)]
    request_counts: BTreeMap<Name, usize>,
}

impl Access {
    /// Once any token exists (revoked ones included), every client write must carry one: a
    /// cluster whose last admin token was revoked does not fall open.
    pub fn enforced(&self) -> bool {
        !self.tokens.is_empty()
    }

    pub fn tokens(&self) -> impl Iterator<Item = &Token> {
        self.tokens.values()
    }

    pub fn owner(&self, job: JobId) -> Option<&Name> {
        self.owners.get(&job)
    }

    /// The live token behind `hash`, or UNAUTHENTICATED's reason.
    pub fn authenticate(&self, hash: &TokenHash) -> Result<&Token, ApplyError> {
        let t = self.tokens.get(hash).ok_or_else(|| {
            ApplyError::Unauthenticated("unknown token; ask an admin for one (`baton token create`)".into())
        })?;
        match t.revoked_ms {
            Some(_) => Err(ApplyError::Unauthenticated(format!("token {} of user {} was revoked", t.id, t.spec.user))),
            None => Ok(t),
        }
    }

    pub(crate) fn add(
        &mut self,
        hash: TokenHash,
        spec: TokenSpec,
        now_ms: u64,
        by: Option<Name>,
    ) -> Result<(), ApplyError> {
        validate_spec(&spec)?;
        if self.tokens.contains_key(&hash) {
            return Err(ApplyError::Exists { kind: "token".into(), name: token_id(&hash) });
        }
        if self.tokens.len() >= MAX_TOKENS && !self.forget_oldest_revoked() {
            return Err(ApplyError::Limit(format!("at most {MAX_TOKENS} tokens; revoke unused ones first")));
        }
        let token = Token {
            id: token_id(&hash),
            spec,
            created_ms: now_ms,
            created_by: by,
            revoked_ms: None,
            admin_of: BTreeSet::new(),
        };
        self.tokens.insert(hash, token);
        Ok(())
    }

    fn forget_oldest_revoked(&mut self) -> bool {
        let oldest = self.tokens.iter().filter(|(_, t)| t.revoked_ms.is_some()).min_by_key(|(_, t)| t.revoked_ms);
        let Some((&hash, _)) = oldest else {
            return false;
        };
        self.tokens.remove(&hash);
        true
    }

    fn by_id_mut(&mut self, id: &str) -> Result<&mut Token, ApplyError> {
        let mut found = self.tokens.values_mut().filter(|t| t.id == id);
        let t = found.next().ok_or_else(|| ApplyError::unknown("token", id))?;
        if found.next().is_some() {
            return Err(ApplyError::invalid("id", format!("{id} names several tokens")));
        }
        Ok(t)
    }

    pub(crate) fn revoke(&mut self, id: &str, now_ms: u64) -> Result<(), ApplyError> {
        let t = self.by_id_mut(id)?;
        t.revoked_ms.get_or_insert(now_ms);
        Ok(())
    }

    pub(crate) fn grant(&mut self, id: &str, queue: Name, granted: bool) -> Result<(), ApplyError> {
        let t = self.by_id_mut(id)?;
        if granted && !t.spec.queues.contains(&queue) && t.spec.queues.len() >= MAX_GRANTS_PER_TOKEN {
            return Err(ApplyError::Limit(format!("at most {MAX_GRANTS_PER_TOKEN} queues per token")));
        }
        if granted {
            t.spec.queues.insert(queue);
        } else {
            t.spec.queues.remove(&queue);
        }
        Ok(())
    }

    /// Makes a token's user an admin of `queue`, or takes that back.
    pub(crate) fn grant_admin(&mut self, id: &str, queue: Name, granted: bool) -> Result<(), ApplyError> {
        let t = self.by_id_mut(id)?;
        if granted && !t.admin_of.contains(&queue) && t.admin_of.len() >= MAX_GRANTS_PER_TOKEN {
            return Err(ApplyError::Limit(format!("at most {MAX_GRANTS_PER_TOKEN} administered queues per token")));
        }
        if granted {
            t.admin_of.insert(queue);
        } else {
            t.admin_of.remove(&queue);
        }
        Ok(())
    }

    /// The queue admin grants, as a snapshot writes them.
    pub(crate) fn queue_admins(&self) -> QueueAdmins {
        let grants = self.tokens.iter().filter(|(_, t)| !t.admin_of.is_empty());
        QueueAdmins(grants.map(|(h, t)| (*h, t.admin_of.clone())).collect())
    }

    /// Puts back the grants a snapshot wrote beside the tokens; a grant for a token the
    /// snapshot does not hold is an inconsistency.
    pub(crate) fn restore_queue_admins(&mut self, admins: QueueAdmins) -> Result<(), String> {
        for (hash, queues) in admins.0 {
            let t = self
                .tokens
                .get_mut(&hash)
                .ok_or_else(|| format!("queue admin grant for unknown token {}", token_id(&hash)))?;
            t.admin_of = queues;
        }
        Ok(())
    }

    pub(crate) fn request(&self, user: &Name, rid: &str) -> Option<JobId> {
        self.request_ids.get(&(user.clone(), rid.to_string())).copied()
    }

    /// Remembers `user`'s request id `rid` for `job`: the oldest id is forgotten past
    /// [`MAX_REMEMBERED_REQUEST_IDS`], and with `per_user` (behaviour 2) the user's own
    /// oldest first past [`MAX_REMEMBERED_REQUEST_IDS_PER_USER`], so that one user's
    /// submissions cannot flush another's ids.
    pub(crate) fn remember_request(&mut self, user: Name, rid: String, job: JobId, per_user: bool) {
        let key = (user, rid);
        if self.request_ids.insert(key.clone(), job).is_none() {
            *self.request_counts.entry(key.0.clone()).or_default() += 1;
        }
        self.request_order.push_back(key.clone());
        if per_user && self.requests_of(&key.0) > MAX_REMEMBERED_REQUEST_IDS_PER_USER {
            // The user's oldest is the first of theirs in order: a scan of at most the whole
            // window (bounded), short when the user is the one submitting most.
            if let Some(at) = self.request_order.iter().position(|(u, _)| *u == key.0)
                && let Some(old) = self.request_order.remove(at)
            {
                self.forget_request(&old);
            }
        }
        while self.request_order.len() > MAX_REMEMBERED_REQUEST_IDS {
            if let Some(old) = self.request_order.pop_front() {
                self.forget_request(&old);
            }
        }
    }

    fn forget_request(&mut self, key: &(Name, String)) {
        if self.request_ids.remove(key).is_none() {
            return;
        }
        if let Some(n) = self.request_counts.get_mut(&key.0) {
            *n -= 1;
            if *n == 0 {
                self.request_counts.remove(&key.0);
            }
        }
    }

    /// Counts each user's request ids again, for a state read back from a snapshot.
    pub(crate) fn rebuild_request_counts(&mut self) {
        self.request_counts.clear();
        for (user, _) in self.request_ids.keys() {
            *self.request_counts.entry(user.clone()).or_default() += 1;
        }
    }

    /// How many request ids of `user` are remembered.
    fn requests_of(&self, user: &Name) -> usize {
        self.request_counts.get(user).copied().unwrap_or(0)
    }
}

/// The queue admin grants of every token that has any, by token hash: the part of a
/// snapshot after the tenancy part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueAdmins(Vec<(TokenHash, BTreeSet<Name>)>);

/// Maps whose keys are not strings, as a list of pairs: JSON (the simulator's and the
/// tests' format) takes only string keys, and binary formats encode both alike.
mod as_pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(m: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    pub fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

fn validate_spec(spec: &TokenSpec) -> Result<(), ApplyError> {
    if spec.queues.len() > MAX_GRANTS_PER_TOKEN {
        return Err(ApplyError::invalid("queues", format!("at most {MAX_GRANTS_PER_TOKEN} queues per token")));
    }
    if spec.roles.is_empty() && spec.queues.is_empty() {
        return Err(ApplyError::invalid("roles", "a token needs a role (admin, operator) or at least one queue"));
    }
    Ok(())
}

/// What a permission is judged on: a job, or an array as the jobs it makes (its name, its
/// queue, its owner).
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub name: &'a Name,
    pub queue: &'a Name,
    pub owner: Option<&'a Name>,
}

impl<'a> Subject<'a> {
    pub fn of_job(job: &'a Job, owner: Option<&'a Name>) -> Subject<'a> {
        Subject { name: &job.spec.name, queue: &job.spec.queue, owner }
    }
}

/// Why `token` may not apply `op`, if it may not. `subject` is the job (or array) an
/// operation on one names, looked up by the caller.
pub fn authorize(token: &Token, op: &Op, subject: Option<Subject>) -> Result<(), ApplyError> {
    if token.has(Role::Admin) {
        return Ok(());
    }
    let needs = |role: Role| {
        ApplyError::PermissionDenied(format!(
            "{} needs role {}; user {} has {}",
            op.name(),
            role.as_str(),
            token.spec.user,
            token.roles_text()
        ))
    };
    match op {
        Op::Cordon { .. } | Op::CreateMaintenance(_) | Op::DeleteMaintenance { .. } | Op::SetGpuHealth { .. }
            if token.has(Role::Operator) =>
        {
            Ok(())
        }
        Op::Cordon { .. } | Op::CreateMaintenance(_) | Op::DeleteMaintenance { .. } | Op::SetGpuHealth { .. } => {
            Err(needs(Role::Operator))
        }
        Op::Submit { spec, .. } => may_submit(token, spec),
        Op::SubmitRunAs { spec, run_as, .. }
        | Op::SubmitAfter { spec, run_as, .. }
        | Op::SubmitArray { spec, run_as, .. }
        | Op::SubmitElastic { spec, run_as, .. } => {
            may_submit(token, spec)?;
            match run_as {
                Some(u) if u.as_str() != token.spec.user.as_str() && !token.any_job() => {
                    Err(ApplyError::PermissionDenied(format!(
                        "running a job as Unix user {u} needs role operator; user {} may run jobs only as \
                         {} ({})",
                        token.spec.user,
                        token.spec.user,
                        token.roles_text()
                    )))
                }
                _ => Ok(()),
            }
        }
        Op::Cancel { .. } | Op::Pause { .. } | Op::Resume { .. } | Op::CancelArray { .. } => match subject {
            None => Ok(()), // unknown: the command itself says so
            Some(_) if token.any_job() => Ok(()),
            Some(s) if token.administers(s.queue) => Ok(()),
            Some(s) => own_job(token, op, s),
        },
        _ => Err(needs(Role::Admin)),
    }
}

fn may_submit(token: &Token, spec: &crate::job::JobSpec) -> Result<(), ApplyError> {
    if token.any_job() || token.granted(&spec.queue) || token.administers(&spec.queue) {
        Ok(())
    } else {
        Err(no_grant(token, &spec.queue))
    }
}

fn own_job(token: &Token, op: &Op, s: Subject) -> Result<(), ApplyError> {
    if s.owner != Some(&token.spec.user) {
        let whose = s.owner.map_or("no user (submitted without a token)".to_string(), |o| format!("user {o}"));
        return Err(ApplyError::PermissionDenied(format!(
            "job {} belongs to {whose}; {} needs its owner, an admin of queue {}, an operator or an admin (user {} has {})",
            s.name,
            op.name(),
            s.queue,
            token.spec.user,
            token.roles_text()
        )));
    }
    if !token.granted(s.queue) {
        return Err(no_grant(token, s.queue));
    }
    Ok(())
}

fn no_grant(token: &Token, queue: &Name) -> ApplyError {
    let granted: Vec<&str> = token.spec.queues.iter().map(|q| q.as_str()).collect();
    let granted = if granted.is_empty() { "none".to_string() } else { granted.join(", ") };
    ApplyError::PermissionDenied(format!(
        "user {} has no grant on queue {queue} (granted: {granted}) and is not an operator",
        token.spec.user
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 39: one window of request ids for every user let one user's submissions push
    /// another's out, so that user's retry made a second job. With behaviour 2 each user is
    /// bounded first: alice's flood forgets her own oldest ids, bob's stays.
    #[test]
    fn one_users_flood_of_request_ids_forgets_only_their_own() {
        let (alice, bob) = (Name::lit("alice"), Name::lit("bob"));
        for per_user in [false, true] {
            let mut a = Access::default();
            a.remember_request(bob.clone(), "b-1".into(), 1, per_user);
            for i in 0..MAX_REMEMBERED_REQUEST_IDS as u64 {
                a.remember_request(alice.clone(), format!("a-{i}"), 2 + i, per_user);
            }
            let kept = a.request(&bob, "b-1");
            if per_user {
                assert_eq!(kept, Some(1), "bob's id was pushed out by alice's");
                assert_eq!(a.requests_of(&alice), MAX_REMEMBERED_REQUEST_IDS_PER_USER);
                assert_eq!(a.request(&alice, "a-0"), None, "alice's oldest goes first");
                let last = MAX_REMEMBERED_REQUEST_IDS as u64 - 1;
                assert_eq!(a.request(&alice, &format!("a-{last}")), Some(2 + last));
                assert_eq!(a.request_order.len(), a.request_ids.len());
            } else {
                assert_eq!(kept, None, "behaviour 1 keeps one window for every user, as before");
            }
        }
    }
}
