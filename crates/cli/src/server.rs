//! `baton server`: one scheduler replica.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use baton_model::scheduler::SchedulerSettings;
use baton_raft::{RaftSettings, ReplicaConfig};

use crate::client::auth::{new_token, read_token_file};
use crate::client::human::{ReserveAfter, parse_reserve_after};
use baton_model::access::TokenHash;
use baton_server::auth::{AuthMode, hash_token};
use baton_server::{ServerConfig, ServerSettings};
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// This replica's id, unique in the cluster (1, 2, 3, ...), or `from-hostname`: the host
    /// name's trailing ordinal plus one (a StatefulSet's pod NAME-0 is replica 1).
    #[arg(long, value_parser = crate::replica_id::parse_replica_id)]
    pub id: u64,
    /// Address to listen on for clients, agents and other replicas.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// Address clients and agents reach this replica at (default: --listen); what a replica
    /// that does not lead redirects them to.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Serve the raft transport on this address of its own (HOST:PORT), where only replica
    /// certificates are taken; --listen then serves clients and agents only. Without it, raft
    /// shares --listen (as before the peer port existed). Every replica of a cluster may
    /// choose on its own: the membership records both addresses of each.
    #[arg(long, env = "BATON_PEER_LISTEN")]
    pub peer_listen: Option<String>,
    /// Address the other replicas reach this replica's raft transport at (default:
    /// --peer-listen). Only with --peer-listen.
    #[arg(long, env = "BATON_PEER_ADVERTISE", requires = "peer_listen")]
    pub peer_advertise: Option<String>,
    /// Where the log and snapshots live (created on first start).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Shared by every replica of one cluster; a replica of another cluster cannot join.
    #[arg(long, default_value = "baton")]
    pub cluster_id: String,
    /// The rack (or failure domain) this replica's host is in, shown by `baton cluster info`
    /// to check that losing one rack keeps a quorum (docs/ops.md). Letters, digits, `.`,
    /// `_` and `-`, at most 63.
    #[arg(long, value_parser = parse_rack)]
    pub rack: Option<String>,
    /// For tests and upgrade rehearsals: say this replica reads data formats only up to N
    /// (from 3 to this build's), as a replica of an older build would. The leader then holds
    /// back commands of newer formats, naming this replica (docs/ops.md). It does not change
    /// what this build decodes.
    #[arg(long, value_name = "N", default_value_t = baton_raft::identity::DATA_FORMAT)]
    pub max_format: u32,
    /// First membership of a new cluster, as ID=HOST:PORT,... (give it to one replica, or to
    /// all: a cluster that already has a membership ignores it). A replica with a peer port
    /// of its own is ID=API_HOST:PORT/PEER_HOST:PORT (its --advertise and --peer-advertise).
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// The leader runs a scheduling cycle at least this often, and at once on every change.
    #[arg(long, default_value_t = ServerSettings::default().cycle_interval_ms)]
    pub cycle_interval_ms: u64,
    /// How often the leader writes a state digest: every replica hashes its state there
    /// and compares the leader's hash of the previous one; a replica that differs stops,
    /// naming the log index (docs/ops.md, "State digests"). 0: never; else at least 1000.
    #[arg(long, value_name = "MS", default_value_t = ServerSettings::default().state_digest_interval_ms)]
    pub state_digest_interval_ms: u64,
    /// An agent silent this long has its node declared lost.
    #[arg(long, default_value_t = ServerSettings::default().heartbeat_timeout_ms)]
    pub heartbeat_timeout_ms: u64,
    /// How long an agent's report may lag the directive that changed what its node runs
    /// (a replica still reported this long after its directive dropped it is a stray).
    /// Directives are sent when they change or the agent asks, not on this timer.
    #[arg(long, default_value_t = ServerSettings::default().resend_ms)]
    pub resend_ms: u64,
    /// How long an acknowledged report keeps an agent's lease; an agent that has none
    /// checkpoints-then-stops its work. At most half of --heartbeat-timeout-ms, and the lease plus the agents' stop bound (1.5 s) plus 1 % must stay below it.
    #[arg(long, default_value_t = ServerSettings::default().lease_ms)]
    pub lease_ms: u64,
    /// The scheduler setting reserve_after a cluster this replica bootstraps starts with: how
    /// long a job that cannot be placed even by preemption waits before it reserves resources
    /// (e.g. 5m), or `never`. Later, `baton cluster set --reserve-after` changes it.
    #[arg(long, value_parser = parse_reserve_after)]
    pub reserve_after: Option<ReserveAfter>,
    /// Serve Prometheus metrics on `GET /metrics` and the web dashboard at this address
    /// (HOST:PORT; off unless given): mutual TLS with --tls-dir (browsers and scrapers present
    /// a certificate of the cluster's CA), plain HTTP with --insecure. docs/metrics.md lists
    /// the metrics, docs/dashboard.md the dashboard.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Serve `GET /metrics` over plain HTTP at this address too (off unless given), for a
    /// scraper without a certificate; on a loopback address it serves the dashboard as well
    /// (a browser on this host: tokens cross no network).
    #[arg(long)]
    pub metrics_plain_listen: Option<String>,
    /// `tokens`: every client call needs a token (docs/security.md). `none`: no
    /// authentication, every caller acts as an admin: for development only, logged as a
    /// warning (a cluster that has tokens still refuses writes without one).
    #[arg(long, default_value = "tokens", value_parser = parse_auth)]
    pub auth: AuthMode,
    /// A file holding a token that becomes the cluster's first admin (user `admin`) if the
    /// cluster has no token yet; ignored once it has one. When the file does not exist, a
    /// new token is written to it (readable by this user only).
    #[arg(long)]
    pub bootstrap_admin_token_file: Option<PathBuf>,
    /// Copy accounting records into PostgreSQL while this replica leads: a connection
    /// string (`host=db port=5432 user=baton dbname=baton password=...`, or a
    /// `postgresql://` URL). The environment variable keeps a password out of `ps`.
    #[arg(long, env = "BATON_ACCOUNTING_POSTGRES", hide_env_values = true)]
    pub accounting_postgres: Option<String>,
    /// Raft election timeout, lower bound, in ms (the upper bound is a quarter above it,
    /// at least 150 ms above it). A dead leader is replaced about 1.3-1.5 times this after
    /// its last heartbeat (its lease, the upper bound, then a follower prompts an election).
    #[arg(long, default_value_t = RaftSettings::default().election_timeout_min_ms)]
    pub election_timeout_ms: u64,
    /// Send baton's tracing spans (each job's decision path) to an OpenTelemetry collector
    /// over OTLP/gRPC at this address, http://HOST:PORT (off unless given; docs/metrics.md).
    #[arg(long, env = crate::otel::ENDPOINT_VAR, value_name = "URL", value_parser = crate::otel::parse_endpoint)]
    pub otlp_endpoint: Option<String>,
    #[command(flatten)]
    pub security: crate::tls::TransportArgs,
}

/// A `--rack` value: 1 to `MAX_RACK_BYTES` letters, digits, `.`, `_` or `-` (also checked on
/// the deployment files by the tests).
pub fn parse_rack(text: &str) -> Result<String, String> {
    let max = baton_raft::MAX_RACK_BYTES;
    if text.is_empty() || text.len() > max {
        return Err(format!("a rack name has 1 to {max} characters, {text:?} has {}", text.len()));
    }
    match text.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        Some(c) => Err(format!("{text:?} has {c:?}; a rack name has only letters, digits, '.', '_' and '-'")),
        None => Ok(text.to_string()),
    }
}

fn parse_auth(text: &str) -> Result<AuthMode, String> {
    AuthMode::parse(text).ok_or_else(|| format!("{text:?} is not tokens or none"))
}

fn bootstrap_admin(path: &Path) -> Result<TokenHash, String> {
    if !path.exists() {
        write_new_token(path)
            .map_err(|e| format!("--bootstrap-admin-token-file: cannot create {}: {e}", path.display()))?;
        tracing::warn!(file = %path.display(), "wrote a new admin token; keep the file private");
    }
    let token = read_token_file(path).map_err(|e| format!("--bootstrap-admin-token-file: {e}"))?;
    if token.is_empty() {
        return Err(format!("--bootstrap-admin-token-file: {} holds no token", path.display()));
    }
    Ok(hash_token(&token))
}

/// A new token in a new file only this user may read (never over an existing file).
fn write_new_token(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token = new_token()?;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    writeln!(f, "{token}")
}

/// This replica's addresses as the others reach it: the API address, and the peer address
/// (the API address when raft shares its port).
fn advertised(a: &ServerArgs) -> Result<baton_raft::Addrs, String> {
    let api = a.advertise.clone().unwrap_or_else(|| a.listen.clone());
    let peer = a.peer_advertise.clone().or_else(|| a.peer_listen.clone()).unwrap_or_else(|| api.clone());
    let addrs = baton_raft::Addrs { api, peer };
    baton_raft::Addrs::check_member(&addrs.to_member()).map_err(|e| format!("--advertise/--peer-advertise: {e}"))?;
    if a.peer_listen.is_some() && addrs.peer == addrs.api {
        return Err(format!(
            "--peer-listen: the peer address {} is the API address; give raft a port of its own or leave --peer-listen out",
            addrs.peer
        ));
    }
    Ok(addrs)
}

pub fn parse_members(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut members = BTreeMap::new();
    for m in text.split(',').filter(|m| !m.is_empty()) {
        let (id, addr) = m.split_once('=').ok_or_else(|| format!("--bootstrap: {m:?} is not ID=HOST:PORT"))?;
        let id = id.trim().parse::<u64>().map_err(|e| format!("--bootstrap: replica id {id:?}: {e}"))?;
        let addr = addr.trim();
        baton_raft::Addrs::check_member(addr).map_err(|e| format!("--bootstrap: replica {id}: {e}"))?;
        if members.insert(id, addr.to_string()).is_some() {
            return Err(format!("--bootstrap: replica {id} is listed twice"));
        }
    }
    if members.is_empty() {
        return Err("--bootstrap: no members given".into());
    }
    Ok(members)
}

/// The least spread of the election timeout, so that two replicas rarely campaign at once.
const MIN_ELECTION_SPREAD_MS: u64 = 150;

/// The election timeout's upper bound for lower bound `min_ms`. openraft 0.9 has a follower
/// campaign only once its leader lease (this upper bound) and then a random timeout between
/// the bounds have passed since it last heard its leader: with twice the lower bound, as
/// before, a dead leader was replaced after three to four election timeouts (3.3 s with
/// 1,000 ms at 1,000 nodes, most of the failover measured). A quarter above the lower bound
/// makes it 2.25-2.5 of them; the candidates still draw their timeouts apart, and only a
/// replica that a quorum finds leaderless campaigns (the pre-vote guard). A follower now
/// prompts an election itself once the lease has run out (`baton_raft`'s `campaign`), so a
/// dead leader is replaced after about 1.3-1.5 of them.
fn election_timeout_max_ms(min_ms: u64) -> u64 {
    min_ms + (min_ms / 4).max(MIN_ELECTION_SPREAD_MS)
}

fn config(a: &ServerArgs) -> Result<ServerConfig, String> {
    let mut replica = ReplicaConfig::new(a.id, a.cluster_id.clone(), advertised(a)?.to_member(), a.data_dir.clone());
    replica.settings.election_timeout_min_ms = a.election_timeout_ms;
    replica.settings.election_timeout_max_ms = election_timeout_max_ms(a.election_timeout_ms);
    replica.rack = a.rack.clone();
    replica.max_format = a.max_format;
    let bootstrap = a.bootstrap.as_deref().map(parse_members).transpose()?;
    let settings = ServerSettings {
        cycle_interval_ms: a.cycle_interval_ms,
        heartbeat_timeout_ms: a.heartbeat_timeout_ms,
        resend_ms: a.resend_ms,
        lease_ms: a.lease_ms,
        state_digest_interval_ms: a.state_digest_interval_ms,
        auth: a.auth,
        bootstrap_admin: a.bootstrap_admin_token_file.as_deref().map(bootstrap_admin).transpose()?,
        accounting_postgres: a.accounting_postgres.clone(),
        ..ServerSettings::default()
    };
    let scheduler = a.reserve_after.map(|r| SchedulerSettings { reserve_after_ms: r.0 });
    if let Some(s) = &scheduler {
        s.validate().map_err(|e| format!("--reserve-after: {e}"))?;
    }
    let transport = a.security.transport_logged("this replica")?;
    crate::tls::check_own(&transport, baton_proto::tls::Role::Replica, &a.id.to_string(), "--id")?;
    Ok(ServerConfig { replica, bootstrap, settings, scheduler, transport })
}

/// A listener on `addr` when one is given; on failure, the error is printed naming `flag`.
async fn bind_optional(addr: Option<&str>, flag: &str) -> Result<Option<tokio::net::TcpListener>, ExitCode> {
    let Some(addr) = addr else { return Ok(None) };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) => {
            eprintln!("error: cannot listen on {addr} ({flag}): {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

pub fn run(args: ServerArgs) -> ExitCode {
    let export = args.otlp_endpoint.as_ref().map(|endpoint| crate::otel::Export {
        endpoint: endpoint.clone(),
        service: "baton-server",
        instance: args.id.to_string(),
    });
    // Kept to the end of `run`: dropping it sends the spans still queued.
    let _export = match crate::logging::init(export.as_ref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(&args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {}: {e}", args.listen);
                return ExitCode::FAILURE;
            }
        };
        let peer = match &args.peer_listen {
            None => None,
            Some(addr) => match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => Some(l),
                Err(e) => {
                    eprintln!("error: cannot listen on {addr} (--peer-listen): {e}");
                    return ExitCode::FAILURE;
                }
            },
        };
        let metrics = match bind_optional(args.metrics_listen.as_deref(), "--metrics-listen").await {
            Ok(l) => l,
            Err(code) => return code,
        };
        let metrics_plain = match bind_optional(args.metrics_plain_listen.as_deref(), "--metrics-plain-listen").await {
            Ok(l) => l,
            Err(code) => return code,
        };
        tracing::info!(id = args.id, listen = %args.listen, peer_listen = ?args.peer_listen, metrics = ?args.metrics_listen, otlp = ?args.otlp_endpoint, "baton server starting");
        let listeners = baton_server::Listeners { api: listener, peer, metrics, metrics_plain };
        if let Err(e) = crate::tls::reload_on_sighup(&config.transport, "this replica") {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        match baton_server::run_on(config, listeners, crate::logging::shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_election_timeout_spreads_a_quarter_above_its_lower_bound_and_at_least_150_ms() {
        assert_eq!(election_timeout_max_ms(1_000), 1_250);
        assert_eq!(election_timeout_max_ms(4_000), 5_000);
        // The default (150 ms) keeps its old upper bound: the tests' timing is unchanged.
        assert_eq!(election_timeout_max_ms(150), 300);
        assert_eq!(election_timeout_max_ms(1), 151);
    }

    #[test]
    fn a_missing_bootstrap_token_file_gets_a_new_private_token_and_an_existing_one_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        let hash = bootstrap_admin(&path).unwrap();
        let token = std::fs::read_to_string(&path).unwrap();
        assert_eq!(token.trim().len(), 64);
        assert_eq!(hash, hash_token(token.trim()));
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Read again, not replaced.
        assert_eq!(bootstrap_admin(&path).unwrap(), hash);
        std::fs::write(&path, "\n").unwrap();
        assert!(bootstrap_admin(&path).unwrap_err().contains("holds no token"));
    }

    #[test]
    fn bootstrap_members_may_give_a_peer_address_and_a_malformed_one_is_refused_by_name() {
        let m = parse_members("1=h1:7070/h1:7170,2=h2:7070").unwrap();
        assert_eq!(baton_raft::Addrs::parse(&m[&1]).peer, "h1:7170");
        assert_eq!(baton_raft::Addrs::parse(&m[&2]).peer, "h2:7070");
        let e = parse_members("1=h1:7070/h1:7170/x").unwrap_err();
        assert!(e.contains("replica 1") && e.contains("more than one '/'"), "{e}");
    }

    #[test]
    fn a_peer_port_that_is_the_api_port_is_refused() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            server: ServerArgs,
        }
        let args = |extra: &[&str]| {
            let mut v = vec!["baton", "--id", "1", "--data-dir", "d", "--listen", "h:7070"];
            v.extend_from_slice(extra);
            Cli::try_parse_from(v).unwrap().server
        };
        let a = advertised(&args(&["--peer-listen", "0.0.0.0:7170", "--peer-advertise", "h:7170"])).unwrap();
        assert_eq!(a.to_member(), "h:7070/h:7170");
        assert_eq!(advertised(&args(&[])).unwrap().to_member(), "h:7070");
        let e = advertised(&args(&["--peer-listen", "h:7070"])).unwrap_err();
        assert!(e.contains("--peer-listen") && e.contains("is the API address"), "{e}");
    }

    #[test]
    fn a_rack_name_is_short_and_plain() {
        assert_eq!(parse_rack("rack-a.1_x").unwrap(), "rack-a.1_x");
        assert!(parse_rack("").unwrap_err().contains("1 to 63"));
        assert!(parse_rack(&"r".repeat(64)).unwrap_err().contains("has 64"));
        assert!(parse_rack("rack a").unwrap_err().contains("' '"));
        assert!(parse_rack("?").unwrap_err().contains("'?'"));
    }
}
