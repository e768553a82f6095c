//! Tokens on the client side: the token a command sends (`BATON_TOKEN` or `--token-file`),
//! the interceptor that puts it in `authorization: Bearer` metadata, making new tokens, and
//! `baton token ...` / `baton whoami`.

use std::io::{Read, Write};
use std::path::Path;

use baton_proto::v1::{CreateTokenRequest, Empty, GrantQueueRequest, TokenInfo, TokenRef, TokenRole};
use baton_proto::words::Word;
use clap::{Args, Subcommand};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;

use super::error::{ClientError, Subject};
use super::human::parse_word;
use super::{Conn, ConnArgs, print_ack};

/// Longest token file read (a token is 64 hex digits; anything much longer is the wrong file).
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;
/// Random bytes in a token baton makes.
pub const TOKEN_BYTES: usize = 32;

/// Adds `authorization: Bearer TOKEN` to every call, when there is a token.
#[derive(Debug, Clone, Default)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl Bearer {
    /// Refuses a token that cannot travel as metadata, naming where it came from.
    pub fn new(token: Option<&str>, from: &str) -> Result<Bearer, ClientError> {
        let Some(t) = token else {
            return Ok(Bearer(None));
        };
        let t = t.trim();
        if t.is_empty() || t.len() > baton_server::auth::MAX_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClientError::Usage(format!(
                "{from}: a token is 1 to {} printable ASCII characters",
                baton_server::auth::MAX_TOKEN_LEN
            )));
        }
        let value = format!("{}{t}", baton_proto::BEARER_PREFIX)
            .parse()
            .map_err(|_| ClientError::Usage(format!("{from}: not a token")))?;
        Ok(Bearer(Some(value)))
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert(baton_proto::AUTHORIZATION_METADATA, v.clone());
        }
        Ok(req)
    }
}

/// The token a command sends: `--token-file` first, then `BATON_TOKEN`.
pub fn bearer(args: &ConnArgs) -> Result<Bearer, ClientError> {
    if let Some(path) = &args.token_file {
        let text = read_token_file(path)?;
        return Bearer::new(Some(&text), &format!("--token-file {}", path.display()));
    }
    let env = std::env::var("BATON_TOKEN").ok().filter(|t| !t.is_empty());
    Bearer::new(env.as_deref(), "BATON_TOKEN")
}

pub fn read_token_file(path: &Path) -> Result<String, ClientError> {
    let file = std::fs::File::open(path)
        .map_err(|e| ClientError::Usage(format!("cannot read token file {}: {e}", path.display())))?;
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| ClientError::Usage(format!("cannot read token file {}: {e}", path.display())))?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(ClientError::Usage(format!(
            "token file {} is over {MAX_TOKEN_FILE_BYTES} bytes; is it the right file?",
            path.display()
        )));
    }
    Ok(text.trim().to_string())
}

/// A new token: 32 bytes from the kernel's random source, as 64 hex digits.
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[derive(Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token for a user (admins). It is printed once; the cluster keeps only its hash.
    Create {
        #[arg(long)]
        user: String,
        /// admin or operator (repeat for both).
        #[arg(long = "role", value_parser = parse_word::<TokenRole>)]
        roles: Vec<TokenRole>,
        /// A queue the user may submit to and act on their own jobs in (repeatable).
        #[arg(long = "queue")]
        queues: Vec<String>,
    },
    /// Revoke a token by its id (from `baton token list`); every replica refuses it at once.
    Revoke { id: String },
    /// Grant a token's user a queue, or with --revoke take the grant back. With --admin the
    /// user administers the queue: sees every job's environment and logs there, and may
    /// cancel, pause and resume any job there.
    Grant {
        id: String,
        #[arg(long)]
        queue: String,
        #[arg(long)]
        admin: bool,
        #[arg(long)]
        revoke: bool,
    },
    /// List tokens (admins): id, user, roles, queues, whether revoked.
    List,
}

pub async fn run(conn: &Conn, a: &TokenArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.command {
        TokenCommand::Create { user, roles, queues } => create(conn, user, roles, queues, out).await,
        TokenCommand::Revoke { id } => {
            let ack = conn
                .call(Subject::Token, id, |mut c| {
                    let r = TokenRef { id: id.clone() };
                    async move { c.revoke_token(r).await }
                })
                .await?;
            print_ack(out, &ack, &format!("token {id} revoked"))
        }
        TokenCommand::Grant { id, queue, admin, revoke } => {
            let req = GrantQueueRequest { id: id.clone(), queue: queue.clone(), revoke: *revoke, admin: *admin };
            let ack = conn
                .call(Subject::Token, id, |mut c| {
                    let r = req.clone();
                    async move { c.grant_queue(r).await }
                })
                .await?;
            let what = if *admin { format!("administering queue {queue}") } else { format!("queue {queue}") };
            let done = if *revoke { "no longer granted" } else { "granted" };
            print_ack(out, &ack, &format!("{what} {done} to token {id}"))
        }
        TokenCommand::List => {
            let reply = conn.call(Subject::Token, "", |mut c| async move { c.list_tokens(Empty {}).await }).await?;
            let head = ("ID", "USER", "ROLES", "QUEUES", "ADMIN OF");
            writeln!(out, "{:<16}  {:<16}  {:<15}  {:<20}  {:<20}  STATUS", head.0, head.1, head.2, head.3, head.4)?;
            for t in &reply.tokens {
                writeln!(out, "{}", row(t))?;
            }
            Ok(())
        }
    }
}

/// A token's roles by their words.
fn role_words(raw: &[i32]) -> Vec<String> {
    raw.iter().map(|r| TokenRole::word_of(*r).to_string()).collect()
}

fn row(t: &TokenInfo) -> String {
    let list = |v: &[String]| if v.is_empty() { "-".to_string() } else { v.join(",") };
    let status = if t.revoked_ms.is_some() { "revoked" } else { "active" };
    format!(
        "{:<16}  {:<16}  {:<15}  {:<20}  {:<20}  {status}",
        t.id,
        t.user,
        list(&role_words(&t.roles)),
        list(&t.queues),
        list(&t.admin_of)
    )
}

async fn create(
    conn: &Conn,
    user: &str,
    roles: &[TokenRole],
    queues: &[String],
    out: &mut dyn Write,
) -> Result<(), ClientError> {
    let token = new_token().map_err(|e| ClientError::Usage(format!("cannot read /dev/urandom: {e}")))?;
    let req = CreateTokenRequest {
        hash: baton_server::auth::hash_token(&token).to_vec(),
        user: user.to_string(),
        roles: roles.iter().map(|r| i32::from(*r)).collect(),
        queues: queues.to_vec(),
    };
    let info = conn
        .call(Subject::Token, user, |mut c| {
            let r = req.clone();
            async move { c.create_token(r).await }
        })
        .await?;
    writeln!(out, "token {} for user {} (shown once; the cluster keeps only its hash):", info.id, info.user)?;
    writeln!(out, "{token}")?;
    Ok(())
}

#[derive(Args, Debug)]
pub struct WhoAmIArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub async fn whoami(conn: &Conn, out: &mut dyn Write) -> Result<(), ClientError> {
    let me = conn.call(Subject::Token, "", |mut c| async move { c.who_am_i(Empty {}).await }).await?;
    if !me.auth {
        writeln!(out, "this replica runs with --auth none: every caller acts as an admin")?;
        return Ok(());
    }
    let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    writeln!(out, "user {} (token {})", me.user, me.token_id)?;
    writeln!(out, "roles: {}", list(&role_words(&me.roles)))?;
    writeln!(out, "queues: {}", list(&me.queues))?;
    if !me.admin_of.is_empty() {
        writeln!(out, "administers queues: {}", me.admin_of.join(", "))?;
    }
    if me.run_as_refused.is_empty() {
        writeln!(out, "jobs run as Unix user {} unless a submit names another (--run-as)", me.run_as)?;
    } else {
        writeln!(out, "jobs run as: a submit without --run-as is refused: {}", me.run_as_refused)?;
    }
    Ok(())
}
