//! `baton tls`: the cluster's certificate authority and the certificates of its replicas,
//! agents and clients (with rcgen).
//!
//! Layout. A CA directory holds `ca.pem` (the CA certificate, given to everyone) and
//! `ca.key` (its private key, kept by whoever issues certificates). Each certificate goes
//! to a directory of its own, which is what one process's `--tls-dir` names: `ca.pem`
//! (a copy of the CA certificate), `cert.pem` and `key.pem`. The identity is in the
//! certificate's subject (OU = role, CN = replica id, node or client name), read back by
//! `baton_proto::tls::identity_of`. Nothing is ever overwritten: rotation writes a new
//! directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use baton_model::name::Name;
use baton_proto::tls::{
    AGENT_HOST, CA_CERT_FILE, CERT_FILE, KEY_FILE, NodeShape, PeerId, REPLICA_HOST, Role, SHAPE_SCHEME,
};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The CA's private key, in the CA directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// How long a new CA is valid unless `--days` says otherwise.
pub const DEFAULT_CA_DAYS: u32 = 3_650;
/// How long a new certificate is valid unless `--days` says otherwise.
pub const DEFAULT_CERT_DAYS: u32 = 365;
/// The longest validity either may be given.
pub const MAX_DAYS: u32 = 36_500;
/// Extra host names or addresses one certificate may carry.
pub const MAX_HOSTS: usize = 32;
/// Backdating of `not_before`, so that a peer whose clock is a little behind accepts a
/// certificate made a moment ago.
const BACKDATE_SECS: i64 = 3_600;

#[derive(clap::Args, Debug)]
pub struct TlsArgs {
    #[command(subcommand)]
    pub command: TlsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum TlsCommand {
    /// The cluster's certificate authority.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Certificates signed by the cluster's CA.
    #[command(subcommand)]
    Cert(CertCommand),
    /// Make a CA (DIR/ca) and one certificate directory per replica (DIR/replica-ID), agent
    /// (DIR/agent-NODE) and client (DIR/client-NAME), keeping whatever already exists: for a
    /// container's init step or a test cluster. Run it where the CA key may live.
    Init(InitArgs),
    /// Revoke certificates: add them to the CA's revocation list, CA/crl.pem (made if
    /// missing; without --cert it is signed again as it is). Copy it as crl.pem into every
    /// replica's and agent's --tls-dir and send them SIGHUP: they refuse those certificates.
    Revoke(RevokeArgs),
}

#[derive(clap::Args, Debug)]
pub struct RevokeArgs {
    /// The CA directory (ca.pem and ca.key); crl.pem is written there.
    #[arg(long)]
    pub ca_dir: PathBuf,
    /// A certificate to revoke: its PEM file, or a --tls-dir holding it as cert.pem.
    #[arg(long = "cert")]
    pub certs: Vec<PathBuf>,
    /// Until when the list says it is current (peers do not refuse an older list).
    #[arg(long, default_value_t = DEFAULT_CERT_DAYS)]
    pub days: u32,
}

/// The revocation list a CA directory keeps, next to ca.pem.
pub const CA_CRL_FILE: &str = "crl.pem";
/// Certificates one revocation list may name (its size stays under what services read).
pub const MAX_REVOKED: usize = 10_000;

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    #[arg(long)]
    pub dir: PathBuf,
    /// Replica certificates for ids 1..=N.
    #[arg(long, default_value_t = 3)]
    pub replicas: u64,
    /// Agent certificates, one per node name (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub agents: Vec<String>,
    /// Client certificates, one per name (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "admin")]
    pub clients: Vec<String>,
}

/// More identities than this in one `baton tls init` is a typo, not a cluster.
pub const MAX_INIT_IDENTITIES: usize = 1_024;

#[derive(clap::Subcommand, Debug)]
pub enum CaCommand {
    /// Make a new CA: DIR/ca.pem and DIR/ca.key (refuses to overwrite either).
    Create(CaCreateArgs),
}

#[derive(clap::Subcommand, Debug)]
pub enum CertCommand {
    /// Make a certificate for one replica, agent or client: OUT/ca.pem, OUT/cert.pem,
    /// OUT/key.pem, ready for --tls-dir OUT (refuses to overwrite).
    Create(Box<CertCreateArgs>),
    /// Print who a --tls-dir's certificate says its holder is.
    Show(ShowArgs),
}

#[derive(clap::Args, Debug)]
pub struct CaCreateArgs {
    /// Directory for ca.pem and ca.key (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// The cluster's name, written into the CA's subject.
    #[arg(long, default_value = "baton")]
    pub name: String,
    #[arg(long, default_value_t = DEFAULT_CA_DAYS)]
    pub days: u32,
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("who").required(true).args(["server", "agent", "client"])))]
pub struct CertCreateArgs {
    /// A replica's certificate, for the replica with this id.
    #[arg(long)]
    pub server: Option<u64>,
    /// An agent's certificate, for the node with this name.
    #[arg(long)]
    pub agent: Option<String>,
    /// A client's certificate (the CLI, a person, a script), with this name.
    #[arg(long)]
    pub client: Option<String>,
    /// The CA directory (ca.pem and ca.key).
    #[arg(long)]
    pub ca_dir: PathBuf,
    /// Where to write ca.pem, cert.pem and key.pem (created if missing).
    #[arg(long)]
    pub out_dir: PathBuf,
    /// More DNS names or IP addresses the certificate is valid for (replicas and agents),
    /// for other tools that verify the address they dial; baton's own callers verify the
    /// role's fixed name.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    #[arg(long, default_value_t = DEFAULT_CERT_DAYS)]
    pub days: u32,
    /// With --agent: the pool its node attaches in. The gateway refuses the node in another
    /// pool: its shape is the operator's word, not its agent's (docs/security.md).
    #[arg(long)]
    pub pool: Option<String>,
    /// With --agent: the rack its node attaches in.
    #[arg(long)]
    pub rack: Option<String>,
    /// With --agent: the most of each resource its node may declare, e.g.
    /// `gpu=8,cpu=64,memory=512Gi`; resources not named are not bounded.
    #[arg(long, value_delimiter = ',')]
    pub max: Vec<String>,
    /// With --agent: the only labels its node may declare, e.g. `zone=a,nvlink=nvl72-1`
    /// (`--labels ''`: none at all); without it, the node's labels are its agent's word.
    #[arg(long, value_delimiter = ',')]
    pub labels: Option<Vec<String>>,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// A directory with ca.pem, cert.pem and key.pem.
    #[arg(long)]
    pub dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsCmdError {
    #[error("{0}")]
    Usage(String),
    #[error("{path} already exists; baton never overwrites keys or certificates (write to a new directory)")]
    Exists { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{what}: {source}")]
    Rcgen { what: &'static str, source: rcgen::Error },
    #[error(transparent)]
    Load(#[from] baton_proto::tls::TlsError),
}

pub fn run(args: TlsArgs) -> ExitCode {
    let done = match args.command {
        TlsCommand::Ca(CaCommand::Create(a)) => create_ca(&a).map(|()| {
            format!("wrote {} and {}", a.dir.join(CA_CERT_FILE).display(), a.dir.join(CA_KEY_FILE).display())
        }),
        TlsCommand::Cert(CertCommand::Create(a)) => create_cert(&a)
            .map(|who| format!("wrote the certificate of {who} to {} (use --tls-dir {0})", a.out_dir.display())),
        TlsCommand::Cert(CertCommand::Show(a)) => show(&a.dir),
        TlsCommand::Init(a) => init(&a),
        TlsCommand::Revoke(a) => revoke(&a),
    };
    match done {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: baton tls: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init(a: &InitArgs) -> Result<String, TlsCmdError> {
    let total = a.replicas as usize + a.agents.len() + a.clients.len();
    if total > MAX_INIT_IDENTITIES {
        return Err(TlsCmdError::Usage(format!("{total} identities; at most {MAX_INIT_IDENTITIES} at once")));
    }
    let ids: Vec<u64> = (1..=a.replicas).collect();
    dev_pki(&a.dir, &ids, &a.agents, &a.clients)?;
    Ok(format!("certificates are in {} (one directory per identity, for --tls-dir)", a.dir.display()))
}

/// Adds `args.certs` to `CA/crl.pem`, keeping what it listed, with the next CRL number.
pub fn revoke(args: &RevokeArgs) -> Result<String, TlsCmdError> {
    check_days(args.days)?;
    let ca_pem = read(&args.ca_dir.join(CA_CERT_FILE))?;
    let ca_key = KeyPair::from_pem(&read(&args.ca_dir.join(CA_KEY_FILE))?).map_err(rcgen_err("reading ca.key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(rcgen_err("reading ca.pem"))?;
    let ca_der = baton_proto::tls::first_cert_der(&ca_pem)
        .map_err(|d| TlsCmdError::Usage(format!("{}: {d}", args.ca_dir.join(CA_CERT_FILE).display())))?;
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der)
        .map_err(|e| TlsCmdError::Usage(format!("{}: {e}", args.ca_dir.join(CA_CERT_FILE).display())))?;
    let ca_subject = ca_cert.subject().as_raw().to_vec();
    let ca_key_id = key_id(&ca_cert, true);
    let crl_path = args.ca_dir.join(CA_CRL_FILE);
    let now = time::OffsetDateTime::now_utc();
    // What the list says now: (serial, when it was revoked), and its number.
    let (mut entries, number) = match std::fs::read_to_string(&crl_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0u64),
        Err(source) => return Err(TlsCmdError::Io { path: crl_path, source }),
        Ok(pem) => {
            let bad = |d: String| TlsCmdError::Usage(format!("{}: {d}", crl_path.display()));
            let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
            let (_, crl) = x509_parser::parse_x509_crl(&block.contents).map_err(|e| bad(e.to_string()))?;
            let number = crl.crl_number().and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
            let entries: Vec<(Vec<u8>, time::OffsetDateTime)> = crl
                .iter_revoked_certificates()
                .map(|r| {
                    let at = time::OffsetDateTime::from_unix_timestamp(r.revocation_date.timestamp()).unwrap_or(now);
                    (r.raw_serial().to_vec(), at)
                })
                .collect();
            (entries, number)
        }
    };
    let mut added = Vec::new();
    for given in &args.certs {
        let path = if given.is_dir() { given.join(CERT_FILE) } else { given.clone() };
        let bad = |d: String| TlsCmdError::Usage(format!("{}: {d}", path.display()));
        let der = baton_proto::tls::first_cert_der(&read(&path)?).map_err(bad)?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| bad(e.to_string()))?;
        // Two CAs may bear the same name (every `baton tls ca create` names itself alike):
        // the key identifiers tell them apart.
        let other_key = matches!((&ca_key_id, key_id(&cert, false)), (Some(a), Some(b)) if *a != b);
        if cert.issuer().as_raw() != ca_subject.as_slice() || other_key {
            return Err(bad(format!("issued by {}, not by this CA", cert.issuer())));
        }
        let who = baton_proto::tls::identity_of(&der).map(|p| p.to_string()).unwrap_or_else(|e| e);
        let serial = cert.raw_serial().to_vec();
        if !entries.iter().any(|(s, _)| *s == serial) {
            entries.push((serial, now));
        }
        added.push(format!("{who} (serial {})", cert.raw_serial_as_string()));
    }
    if entries.len() > MAX_REVOKED {
        return Err(TlsCmdError::Usage(format!(
            "{} revoked certificates; a list holds at most {MAX_REVOKED}",
            entries.len()
        )));
    }
    let params = rcgen::CertificateRevocationListParams {
        this_update: now - time::Duration::seconds(BACKDATE_SECS),
        next_update: now + time::Duration::days(i64::from(args.days)),
        crl_number: rcgen::SerialNumber::from(number + 1),
        issuing_distribution_point: None,
        revoked_certs: entries
            .iter()
            .map(|(serial, at)| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(serial),
                revocation_time: *at,
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(&issuer).map_err(rcgen_err("signing the revocation list"))?;
    let pem = crl.pem().map_err(rcgen_err("writing the revocation list"))?;
    // The list is public and replaced whole: written beside, then renamed over the old one.
    let tmp = args.ca_dir.join(format!(".{CA_CRL_FILE}.new"));
    let _ = std::fs::remove_file(&tmp);
    write_new(&tmp, &pem, false)?;
    std::fs::rename(&tmp, &crl_path).map_err(|source| TlsCmdError::Io { path: crl_path.clone(), source })?;
    let what =
        if added.is_empty() { "no certificate added".to_string() } else { format!("revoked {}", added.join(", ")) };
    Ok(format!(
        "{what}; {} lists {} certificates: copy it as crl.pem into every replica's and agent's --tls-dir, then send them SIGHUP",
        crl_path.display(),
        entries.len()
    ))
}

/// A certificate's own key identifier (`subject`), or that of the key that signed it.
fn key_id(cert: &x509_parser::certificate::X509Certificate<'_>, subject: bool) -> Option<Vec<u8>> {
    use x509_parser::extensions::ParsedExtension;
    cert.extensions().iter().find_map(|ext| match ext.parsed_extension() {
        ParsedExtension::SubjectKeyIdentifier(id) if subject => Some(id.0.to_vec()),
        ParsedExtension::AuthorityKeyIdentifier(aki) if !subject => aki.key_identifier.as_ref().map(|id| id.0.to_vec()),
        _ => None,
    })
}

fn show(dir: &Path) -> Result<String, TlsCmdError> {
    let files = baton_proto::tls::TlsFiles::load(dir)?;
    let mut line = format!("role={} name={}", files.own.role, files.own.name);
    let path = dir.join(CERT_FILE);
    let der = baton_proto::tls::first_cert_der(&read(&path)?)
        .map_err(|detail| TlsCmdError::Usage(format!("{}: {detail}", path.display())))?;
    match baton_proto::tls::shape_of(&der) {
        Ok(Some(shape)) => line.push_str(&format!(" shape={}", shape.to_uri().trim_start_matches(SHAPE_SCHEME))),
        Ok(None) => {}
        Err(e) => return Err(TlsCmdError::Usage(format!("{}: {e}", path.display()))),
    }
    Ok(line)
}

/// The node shape `--pool`, `--rack` and `--max` ask for; `None` when none is given.
fn shape_wanted(args: &CertCreateArgs) -> Result<Option<NodeShape>, TlsCmdError> {
    if args.pool.is_none() && args.rack.is_none() && args.max.is_empty() && args.labels.is_none() {
        return Ok(None);
    }
    if args.agent.is_none() {
        return Err(TlsCmdError::Usage(
            "--pool, --rack, --max and --labels fix a node's shape: only with --agent".into(),
        ));
    }
    let word = |flag: &str, w: &Option<String>| -> Result<Option<String>, TlsCmdError> {
        let Some(w) = w else { return Ok(None) };
        Name::new(w.clone()).map_err(|e| TlsCmdError::Usage(format!("{flag}: {e}")))?;
        Ok(Some(w.clone()))
    };
    let mut shape =
        NodeShape { pool: word("--pool", &args.pool)?, rack: word("--rack", &args.rack)?, ..NodeShape::default() };
    for entry in &args.max {
        let (resource, amount) = entry
            .split_once('=')
            .ok_or_else(|| TlsCmdError::Usage(format!("--max {entry:?}: write resource=amount, e.g. gpu=8")))?;
        let (resource, amount) = (resource.trim(), amount.trim());
        baton_model::resources::validate_resource_name(resource)
            .map_err(|e| TlsCmdError::Usage(format!("--max: {e}")))?;
        let units = baton_model::quantity::parse_quantity(resource, amount)
            .map_err(|e| TlsCmdError::Usage(format!("--max {entry:?}: {e}")))?;
        if shape.max.insert(resource.to_string(), units).is_some() {
            return Err(TlsCmdError::Usage(format!("--max names {resource} twice")));
        }
    }
    if let Some(entries) = &args.labels {
        let labels = shape.labels.get_or_insert_default();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| TlsCmdError::Usage(format!("--labels {entry:?}: write key=value, e.g. zone=a")))?;
            if labels.insert(k.trim().to_string(), v.trim().to_string()).is_some() {
                return Err(TlsCmdError::Usage(format!("--labels names {} twice", k.trim())));
            }
        }
    }
    // What the gateway will read back, checked here (its bounds and words).
    NodeShape::parse(shape.to_uri().trim_start_matches(SHAPE_SCHEME))
        .map_err(|e| TlsCmdError::Usage(format!("the node shape: {e}")))?;
    Ok(Some(shape))
}

fn check_days(days: u32) -> Result<(), TlsCmdError> {
    if days == 0 || days > MAX_DAYS {
        return Err(TlsCmdError::Usage(format!("--days {days}: must be between 1 and {MAX_DAYS}")));
    }
    Ok(())
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::seconds(BACKDATE_SECS);
    params.not_after = now + time::Duration::days(i64::from(days));
}

fn rcgen_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> TlsCmdError {
    move |source| TlsCmdError::Rcgen { what, source }
}

/// Writes `ca.pem` and `ca.key` into `args.dir`.
pub fn create_ca(args: &CaCreateArgs) -> Result<(), TlsCmdError> {
    check_days(args.days)?;
    let name = Name::new(args.name.clone()).map_err(|e| TlsCmdError::Usage(format!("--name: {e}")))?;
    let cert_path = args.dir.join(CA_CERT_FILE);
    let key_path = args.dir.join(CA_KEY_FILE);
    refuse_existing(&[&cert_path, &key_path])?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, name.as_str());
    dn.push(DnType::CommonName, format!("{} cluster CA", name.as_str()));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut params, args.days);
    let key = KeyPair::generate().map_err(rcgen_err("generating the CA key"))?;
    let cert = params.self_signed(&key).map_err(rcgen_err("signing the CA certificate"))?;
    make_dir(&args.dir)?;
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)
}

/// The identity `args` asks for, its name checked.
fn wanted(args: &CertCreateArgs) -> Result<PeerId, TlsCmdError> {
    let (role, name) = match (args.server, &args.agent, &args.client) {
        (Some(0), _, _) => return Err(TlsCmdError::Usage("--server 0: replica ids start at 1".into())),
        (Some(id), None, None) => (Role::Replica, id.to_string()),
        (None, Some(node), None) => (Role::Agent, node.clone()),
        (None, None, Some(client)) => (Role::Client, client.clone()),
        _ => return Err(TlsCmdError::Usage("give exactly one of --server ID, --agent NODE, --client NAME".into())),
    };
    let flag = format!("--{}", if role == Role::Replica { "server" } else { role.as_str() });
    Name::new(name.clone()).map_err(|e| TlsCmdError::Usage(format!("{flag}: {e}")))?;
    if name.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(TlsCmdError::Usage(format!("{flag} {name:?}: no '/' or spaces allowed")));
    }
    Ok(PeerId { role, name })
}

fn leaf_params(who: &PeerId, hosts: &[String], days: u32) -> Result<CertificateParams, TlsCmdError> {
    let mut sans = match who.role {
        Role::Replica => vec![REPLICA_HOST.to_string()],
        Role::Agent => vec![AGENT_HOST.to_string()],
        Role::Client if hosts.is_empty() => Vec::new(),
        Role::Client => {
            return Err(TlsCmdError::Usage("--host: only replica and agent certificates name hosts".into()));
        }
    };
    if hosts.len() > MAX_HOSTS {
        return Err(TlsCmdError::Usage(format!("--host given {} times; at most {MAX_HOSTS}", hosts.len())));
    }
    sans.extend(hosts.iter().cloned());
    let mut params = CertificateParams::new(sans).map_err(|e| TlsCmdError::Usage(format!("--host: {e}")))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "baton");
    dn.push(DnType::OrganizationalUnitName, who.role.as_str());
    dn.push(DnType::CommonName, who.name.as_str());
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Replicas and agents both serve and call; clients only call.
    params.extended_key_usages = match who.role {
        Role::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        _ => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
    };
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    Ok(params)
}

/// Writes `ca.pem`, `cert.pem` and `key.pem` into `args.out_dir`; returns who it is for.
pub fn create_cert(args: &CertCreateArgs) -> Result<PeerId, TlsCmdError> {
    check_days(args.days)?;
    let who = wanted(args)?;
    let mut params = leaf_params(&who, &args.hosts, args.days)?;
    if let Some(shape) = shape_wanted(args)? {
        let uri = rcgen::string::Ia5String::try_from(shape.to_uri())
            .map_err(|e| TlsCmdError::Usage(format!("the node shape: {e}")))?;
        params.subject_alt_names.push(rcgen::SanType::URI(uri));
    }
    let ca_pem = read(&args.ca_dir.join(CA_CERT_FILE))?;
    let ca_key = KeyPair::from_pem(&read(&args.ca_dir.join(CA_KEY_FILE))?).map_err(rcgen_err("reading ca.key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(rcgen_err("reading ca.pem"))?;
    let out_ca = args.out_dir.join(CA_CERT_FILE);
    let (cert_path, key_path) = (args.out_dir.join(CERT_FILE), args.out_dir.join(KEY_FILE));
    refuse_existing(&[&cert_path, &key_path])?;
    let same_ca = match std::fs::read_to_string(&out_ca) {
        Ok(existing) if existing == ca_pem => true,
        Ok(_) => return Err(TlsCmdError::Exists { path: out_ca }),
        Err(_) => false,
    };
    let key = KeyPair::generate().map_err(rcgen_err("generating the key"))?;
    let cert = params.signed_by(&key, &issuer).map_err(rcgen_err("signing the certificate"))?;
    make_dir(&args.out_dir)?;
    if !same_ca {
        write_new(&out_ca, &ca_pem, false)?;
    }
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)?;
    Ok(who)
}

fn refuse_existing(paths: &[&Path]) -> Result<(), TlsCmdError> {
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(TlsCmdError::Exists { path: p.to_path_buf() }),
        None => Ok(()),
    }
}

fn read(path: &Path) -> Result<String, TlsCmdError> {
    std::fs::read_to_string(path).map_err(|source| TlsCmdError::Io { path: path.to_path_buf(), source })
}

fn make_dir(dir: &Path) -> Result<(), TlsCmdError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsCmdError::Io { path: dir.to_path_buf(), source })
}

/// Creates `path`, failing if it exists; keys are readable by their owner only.
fn write_new(path: &Path, text: &str, secret: bool) -> Result<(), TlsCmdError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| TlsCmdError::Io { path: path.to_path_buf(), source };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => TlsCmdError::Exists { path: path.to_path_buf() },
            _ => io(e),
        })?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

/// Makes a CA in `dir/ca` and one certificate directory per identity under `dir`
/// (`replica-ID`, `agent-NODE`, `client-NAME`), for `baton dev` and tests. Existing
/// directories are kept, so a restarted dev cluster keeps its certificates.
pub fn dev_pki(dir: &Path, replicas: &[u64], agents: &[String], clients: &[String]) -> Result<(), TlsCmdError> {
    let ca_dir = dir.join("ca");
    if !ca_dir.join(CA_CERT_FILE).exists() {
        create_ca(&CaCreateArgs { dir: ca_dir.clone(), name: "baton-dev".into(), days: DEFAULT_CA_DAYS })?;
    }
    let wants = replicas
        .iter()
        .map(|id| (format!("replica-{id}"), Some(*id), None, None))
        .chain(agents.iter().map(|n| (format!("agent-{n}"), None, Some(n.clone()), None)))
        .chain(clients.iter().map(|n| (format!("client-{n}"), None, None, Some(n.clone()))));
    for (sub, server, agent, client) in wants {
        let out_dir = dir.join(sub);
        if out_dir.join(CERT_FILE).exists() {
            continue;
        }
        let hosts = if client.is_none() { vec!["localhost".into(), "127.0.0.1".into()] } else { Vec::new() };
        let args = CertCreateArgs {
            server,
            agent,
            client,
            ca_dir: ca_dir.clone(),
            out_dir,
            hosts,
            days: DEFAULT_CERT_DAYS,
            pool: None,
            rack: None,
            max: Vec::new(),
            labels: None,
        };
        create_cert(&args)?;
    }
    Ok(())
}

/// How a `baton` process secures its connections; every command that talks to the cluster
/// takes these. Neither given is refused: a cluster is never left open by omission.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TransportArgs {
    /// Mutual TLS with the files in this directory: ca.pem, cert.pem, key.pem (made by
    /// `baton tls cert create`).
    #[arg(long, global = true, env = "BATON_TLS_DIR", conflicts_with = "insecure")]
    pub tls_dir: Option<PathBuf>,
    /// Plain TCP without TLS: anyone who reaches a port is trusted. For tests and closed
    /// networks only; logged as a warning and shown by `baton cluster info`.
    #[arg(long, global = true, env = "BATON_INSECURE", value_parser = clap::builder::FalseyValueParser::new())]
    pub insecure: bool,
}

impl TransportArgs {
    /// The transport these flags ask for; an error names both flags when neither is given.
    pub fn transport(&self) -> Result<baton_proto::tls::Transport, String> {
        use baton_proto::tls::Transport;
        match (&self.tls_dir, self.insecure) {
            (Some(_), true) => Err("--tls-dir and --insecure: give one, not both".into()),
            (Some(dir), false) => Transport::load(dir).map_err(|e| format!("--tls-dir: {e}")),
            (None, true) => Ok(Transport::Insecure),
            (None, false) => Err("no transport security chosen: give --tls-dir DIR (or BATON_TLS_DIR) for mutual \
                 TLS, or --insecure (or BATON_INSECURE=1) for plain TCP"
                .into()),
        }
    }

    /// As [`TransportArgs::transport`], and logs a warning when it is plain TCP.
    pub fn transport_logged(&self, what: &str) -> Result<baton_proto::tls::Transport, String> {
        let t = self.transport()?;
        log_transport(&t, what);
        Ok(t)
    }
}

/// Says in the log how `what` talks to the others: a warning for plain TCP.
pub fn log_transport(t: &baton_proto::tls::Transport, what: &str) {
    match t {
        baton_proto::tls::Transport::Insecure => tracing::warn!(
            "{what} runs with --insecure: plain TCP, no certificates, anyone who reaches its ports is trusted"
        ),
        baton_proto::tls::Transport::Tls(f) => {
            tracing::info!(identity = %f.own, dir = %f.dir.display(), "{what} uses mutual TLS")
        }
    }
}

/// Reads the `--tls-dir` again on every SIGHUP and puts it in force for new connections,
/// or logs why not and keeps what is in force (`Tls::reload` checks the files). Installed
/// under `--insecure` too, so that a SIGHUP meant for a reload never kills the process.
pub fn reload_on_sighup(t: &baton_proto::tls::Transport, what: &'static str) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup()).map_err(|e| format!("cannot handle SIGHUP: {e}"))?;
    let t = t.clone();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let baton_proto::tls::Transport::Tls(tls) = &t else {
                tracing::info!("{what} got SIGHUP: nothing to reload (--insecure)");
                continue;
            };
            match tls.reload() {
                Ok(now) => tracing::info!(
                    dir = %tls.dir.display(),
                    identity = %tls.own,
                    serial = %now.serial,
                    not_after_unix_s = now.not_after_unix_s,
                    revoked = now.revoked_count(),
                    "{what} reloaded its certificates (SIGHUP): new connections use them"
                ),
                Err(e) => tracing::error!(
                    dir = %tls.dir.display(),
                    "{what} refused to reload its certificates (SIGHUP): {e}; the ones in force stay"
                ),
            }
        }
    });
    Ok(())
}

/// Refuses to run as a role or name other than the certificate says (a replica started
/// with another replica's certificate, an agent with another node's).
pub fn check_own(t: &baton_proto::tls::Transport, role: Role, name: &str, flag: &str) -> Result<(), String> {
    let baton_proto::tls::Transport::Tls(files) = t else { return Ok(()) };
    if files.own.role != role || files.own.name != name {
        return Err(format!(
            "{flag} {name}: the certificate in {} is for {}, not {role} {name:?}",
            files.dir.display(),
            files.own
        ));
    }
    Ok(())
}
