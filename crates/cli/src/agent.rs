//! `baton agent` (the worker agent on each GPU node) and the hidden `baton workload` test job.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use baton_agent::AgentConfig;
use baton_agent::run_as::{AllowList, RunAsPolicy};
use clap::Args;

#[derive(Args)]
pub struct AgentArgs {
    /// Replica addresses (comma list); the agent finds the leader among them.
    #[arg(long, env = "BATON_SERVER", value_delimiter = ',', default_value = "127.0.0.1:7070")]
    server: Vec<String>,
    /// Node name (default: the host name).
    #[arg(long)]
    name: Option<String>,
    #[arg(long, default_value = "default")]
    pool: String,
    #[arg(long, default_value = "")]
    rack: String,
    /// This node's domain at a topology level above it other than the rack, LEVEL=DOMAIN
    /// (repeatable), e.g. `--topology nvlink=nvl72-3 --topology zone=z1`: the levels the
    /// cluster declares (`baton cluster set --topology-levels`, decisions.md section 10).
    #[arg(long = "topology", value_name = "LEVEL=DOMAIN")]
    topology: Vec<String>,
    /// A node label, k=v (repeatable).
    #[arg(long = "label", value_name = "K=V")]
    labels: Vec<String>,
    /// Development GPUs to offer when no NVIDIA driver is present.
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Development MIG slices to offer when no NVIDIA driver is present, PROFILE=N
    /// (repeatable), e.g. `--mig mig-1g.10gb=7`: each profile on a development GPU of its
    /// own in MIG mode (decisions.md section 11).
    #[arg(long = "mig", value_name = "PROFILE=N")]
    mig: Vec<String>,
    /// CPUs to offer (default: this machine's).
    #[arg(long, value_name = "N")]
    cpu: Option<u64>,
    /// Memory to offer, e.g. 64Gi (default: this machine's).
    #[arg(long, value_name = "QTY")]
    memory: Option<String>,
    /// Journal and job logs.
    #[arg(long, value_name = "DIR", required_unless_present = "inventory_only")]
    data_dir: Option<PathBuf>,
    /// Root of the jobs' checkpoint directories (default: <data-dir>/checkpoints); shared
    /// storage in a real cluster, so a job resumes on another node.
    #[arg(long, value_name = "DIR")]
    checkpoint_root: Option<PathBuf>,
    /// Address to serve job logs on; the bound address is reported as agent_addr.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// How long a replica's processes may survive SIGKILL (uninterruptible sleep: a driver
    /// or file system hang) before the agent reports them unkillable: the node then takes no
    /// new work, and the GPUs they hold stay held, until an operator fixes it and runs
    /// `baton uncordon`. 1000 to 3600000; Slurm's UnkillableStepTimeout is 60 s too.
    #[arg(long, value_name = "MS", default_value_t = baton_agent::limits::DEFAULT_UNKILLABLE_AFTER_MS)]
    unkillable_after_ms: u64,
    /// Serve Prometheus metrics on `GET /metrics` at this address (HOST:PORT; off unless
    /// given): mutual TLS with --tls-dir (the scraper presents a certificate of the cluster's
    /// CA), plain HTTP with --insecure. The URL is printed as metrics_url=. docs/metrics.md
    /// lists them.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Serve `GET /metrics` over plain HTTP at this address too (off unless given), for a
    /// scraper without a certificate; firewall it to the monitoring hosts.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_plain_listen: Option<String>,
    /// Who jobs may run as here (comma list of users and %groups): each job runs as the Unix
    /// user it names (its submitter's), dropped to before exec, if that user is on this list.
    /// Either this or --run-as-self is required.
    #[arg(
        long,
        env = "BATON_RUN_AS_ALLOW",
        value_delimiter = ',',
        value_name = "USERS",
        conflicts_with = "run_as_self"
    )]
    run_as_allow: Vec<String>,
    /// Let jobs run as uid 0 when the cluster allows root jobs and the list names the user.
    #[arg(long)]
    allow_root: bool,
    /// Run every job as this agent's own user, whatever it names (development, containers).
    #[arg(long)]
    run_as_self: bool,
    /// How replicas are held: `cgroup` (the default: a cgroup v2 each, killed whole; refuses
    /// to start without a writable v2 hierarchy), `process-group` (the weaker mode: a process
    /// that leaves its group escapes), or `auto` (cgroup where the host allows it, else process
    /// groups, said in the log and by baton_agent_process_group_only on /metrics). The weaker
    /// modes are taken only when named.
    #[arg(long, env = "BATON_CONTAINMENT", default_value = "cgroup", value_parser = baton_agent::cgroup::ContainmentMode::parse)]
    containment: baton_agent::cgroup::ContainmentMode,
    /// The cgroup v2 directory under which each replica's cgroup is made (default: beside the
    /// agent's own cgroup, `baton-NODE-HASH`). Systemd units give one with Delegate=yes.
    #[arg(long, env = "BATON_CGROUP_ROOT", value_name = "DIR")]
    cgroup_root: Option<std::path::PathBuf>,
    /// The operator's GPU health check (like Slurm's HealthCheckProgram), run by `sh -c`
    /// every --health-check-interval-ms. Exit 0 is healthy; otherwise each output line
    /// `gpu N: what is wrong` marks GPU N unhealthy (no such line: every GPU of the node).
    /// Unhealthy GPUs take no new work and their jobs are requeued.
    #[arg(long, env = "BATON_HEALTH_CHECK", value_name = "CMD")]
    health_check: Option<String>,
    #[arg(long, default_value_t = 60_000, value_name = "MS")]
    health_check_interval_ms: u64,
    /// Let a passing health check clear the GPUs it had marked (without it, `baton gpu
    /// healthy` does). NVML's findings are only ever cleared by a person.
    #[arg(long)]
    health_check_clears: bool,
    /// Send baton's tracing spans (each job's decision path) to an OpenTelemetry collector
    /// over OTLP/gRPC at this address, http://HOST:PORT (off unless given; docs/metrics.md).
    #[arg(long, env = crate::otel::ENDPOINT_VAR, value_name = "URL", value_parser = crate::otel::parse_endpoint)]
    otlp_endpoint: Option<String>,
    /// Print this node's GPU inventory as JSON and exit.
    #[arg(long, hide = true)]
    inventory_only: bool,
    #[command(flatten)]
    security: crate::tls::TransportArgs,
}

#[derive(Args)]
pub struct WorkloadArgs {
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// Steps of every rank but rank 0 (default: `--steps`): a gang whose ranks finish apart.
    #[arg(long)]
    other_ranks_steps: Option<u64>,
    #[arg(long, default_value_t = 100)]
    step_ms: u64,
    /// Check the cluster's promises with locks in this directory (the chaos harness).
    #[arg(long)]
    witness: Option<std::path::PathBuf>,
    /// Do not cooperate (chaos runs): `ignore-stop` ignores SIGTERM, `escape` leaves a
    /// process behind outside its session, `write-after-stop` goes on saving checkpoints
    /// after it was told to stop, `unkillable` leaves a process behind that the cgroup v1
    /// freezer holds, which SIGKILL cannot end until it is thawed (root, hybrid cgroups),
    /// `kill-watchdog` kills its watchdog and its replica's guard where it can.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(baton_agent::workload::Misbehave::NAMES))]
    misbehave: Option<String>,
}

pub fn workload(args: WorkloadArgs) -> ExitCode {
    let misbehave = args.misbehave.map(|m| m.parse().expect("clap checked the value"));
    let code = baton_agent::workload::run_misbehaving(
        args.steps,
        args.other_ranks_steps,
        args.step_ms,
        args.witness.as_deref(),
        misbehave,
    );
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// `--topology LEVEL=DOMAIN`, each checked as the leader will (a level name, a domain name).
fn topology_flags(flags: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut domains = BTreeMap::new();
    for t in flags {
        let (level, domain) = t.split_once('=').ok_or_else(|| format!("--topology {t:?}: expected LEVEL=DOMAIN"))?;
        let level =
            baton_model::topology::LevelName::new(level.trim()).map_err(|e| format!("--topology {t:?}: {e}"))?;
        if level.is_rack() || level.is_node() {
            return Err(format!("--topology {t:?}: give the rack with --rack; the node is itself"));
        }
        let domain = baton_model::name::Name::new(domain.trim()).map_err(|e| format!("--topology {t:?}: {e}"))?;
        if domains.insert(level.to_string(), domain.to_string()).is_some() {
            return Err(format!("--topology {t:?}: level {level} is given twice"));
        }
    }
    Ok(domains)
}

fn config(args: AgentArgs) -> Result<AgentConfig, String> {
    let name = args.name.unwrap_or_else(baton_agent::node::host_name);
    let data_dir = args.data_dir.ok_or("--data-dir is required")?;
    let mut labels = BTreeMap::new();
    for l in &args.labels {
        let (k, v) = l.split_once('=').ok_or_else(|| format!("--label {l:?}: expected k=v"))?;
        if k.trim().is_empty() {
            return Err(format!("--label {l:?}: the key is empty"));
        }
        labels.insert(k.trim().to_string(), v.trim().to_string());
    }
    let domains = topology_flags(&args.topology)?;
    let memory_bytes = match &args.memory {
        Some(m) => {
            Some(baton_model::quantity::parse_quantity("memory", m).map_err(|e| format!("--memory {m:?}: {e}"))?)
        }
        None => None,
    };
    let mut c = AgentConfig::new(name, data_dir);
    c.servers = args.server;
    c.pool = args.pool;
    c.rack = args.rack;
    c.labels = labels;
    c.domains = domains;
    c.dev = baton_agent::inventory::DevDevices { gpus: args.gpus, mig: mig_flags(&args.mig)? };
    c.cpu = args.cpu;
    c.memory_bytes = memory_bytes;
    c.checkpoint_root = args.checkpoint_root;
    c.containment = args.containment;
    c.cgroup_root = args.cgroup_root;
    c.health_check = args.health_check.map(|command| baton_agent::health::HealthCheck {
        command,
        interval_ms: args.health_check_interval_ms,
        // A check may take half its interval, at most five minutes.
        timeout_ms: (args.health_check_interval_ms / 2).clamp(500, 300_000),
        clears: args.health_check_clears,
    });
    if c.health_check.is_none() && args.health_check_clears {
        return Err("--health-check-clears: give --health-check too".into());
    }
    c.listen = args.listen;
    c.heartbeat_ms = args.heartbeat_ms;
    c.unkillable_after_ms = args.unkillable_after_ms;
    c.metrics_listen = args.metrics_listen;
    c.metrics_plain_listen = args.metrics_plain_listen;
    c.transport = args.security.transport()?;
    crate::tls::check_own(&c.transport, baton_proto::tls::Role::Agent, &c.name, "--name")?;
    c.validate()?;
    c.run_as = run_as(&args.run_as_allow, args.allow_root, args.run_as_self)?;
    Ok(c)
}

/// Who jobs run as: the operator says it; no default, since either choice surprises someone.
fn run_as(allow: &[String], allow_root: bool, run_as_self: bool) -> Result<RunAsPolicy, String> {
    if run_as_self {
        return Ok(RunAsPolicy::AgentUser);
    }
    if allow.is_empty() {
        return Err("say who jobs run as: --run-as-allow USERS,%GROUPS (each job runs as its submitter's Unix \
                    user, if listed) or --run-as-self (every job runs as this agent's user)"
            .into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "--run-as-allow needs the agent to run as root (to switch users); use --run-as-self otherwise".into()
        );
    }
    Ok(RunAsPolicy::Users(AllowList::parse(allow, allow_root)?))
}

/// Says in the log who jobs run as, loudly when it is the agent's own user.
fn log_run_as(p: &RunAsPolicy) {
    match p {
        RunAsPolicy::AgentUser => {
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            tracing::warn!(
                uid,
                "--run-as-self: every job runs as this agent's user (uid {uid}), whatever user it names"
            );
        }
        RunAsPolicy::Users(list) => {
            let users: Vec<&str> = list.users.iter().map(String::as_str).collect();
            let groups: Vec<String> = list.groups.iter().map(|g| format!("%{g}")).collect();
            tracing::info!(
                users = users.join(","),
                groups = groups.join(","),
                allow_root = list.allow_root,
                "jobs run as their users"
            );
        }
    }
}

/// What `--inventory-only` prints: the NVML inventory (GPUs, their MIG mode, the slices)
/// and the NVLink domain the fabric names, or why none.
#[derive(serde::Serialize)]
struct Found<'a> {
    #[serde(flatten)]
    inventory: &'a baton_agent::inventory::Inventory,
    nvlink_domain: Option<String>,
    nvlink_domain_error: Option<String>,
}

impl Found<'_> {
    fn of(inventory: &baton_agent::inventory::Inventory) -> Found<'_> {
        let fabric = baton_agent::fabric::nvml_fabrics().and_then(|f| baton_agent::fabric::domain_of(&f));
        let (nvlink_domain, nvlink_domain_error) = match fabric {
            Ok(d) => (d, None),
            Err(e) => (None, Some(e)),
        };
        Found { inventory, nvlink_domain, nvlink_domain_error }
    }
}

pub fn run(args: AgentArgs) -> ExitCode {
    if args.inventory_only {
        return match baton_agent::inventory::nvml_inventory() {
            Ok(inv) => match serde_json::to_string_pretty(&Found::of(&inv)) {
                Ok(j) => {
                    println!("{j}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: cannot write JSON: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let otlp_endpoint = args.otlp_endpoint.clone();
    let config = match config(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let export = otlp_endpoint.map(|endpoint| crate::otel::Export {
        endpoint,
        service: "baton-agent",
        instance: config.name.clone(),
    });
    // Kept to the end of `run`: dropping it sends the spans still queued.
    let _export = match crate::logging::init(export.as_ref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    crate::tls::log_transport(&config.transport, "this agent");
    log_run_as(&config.run_as);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let reloads = runtime.block_on(async { crate::tls::reload_on_sighup(&config.transport, "this agent") });
    if let Err(e) = reloads {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match runtime.block_on(baton_agent::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C or SIGTERM. The job replicas keep running; a restarted agent re-adopts them.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// `--mig PROFILE=N`: a MIG profile (`mig-...`, a resource name) and how many slices of it.
fn mig_flags(flags: &[String]) -> Result<Vec<(String, u32)>, String> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for f in flags {
        let (profile, count) = f.split_once('=').ok_or_else(|| format!("--mig {f:?}: expected PROFILE=N"))?;
        let profile = profile.trim();
        baton_model::resources::validate_resource_name(profile).map_err(|e| format!("--mig {f:?}: {e}"))?;
        if !baton_model::resources::is_slice_profile(profile) {
            return Err(format!("--mig {f:?}: a MIG profile starts with mig- (mig-1g.10gb)"));
        }
        let count: u32 = count.trim().parse().map_err(|_| format!("--mig {f:?}: N is a whole number of slices"))?;
        if !(1..=MAX_DEV_SLICES).contains(&count) {
            return Err(format!("--mig {f:?}: from 1 to {MAX_DEV_SLICES} slices"));
        }
        if out.iter().any(|(p, _)| p == profile) {
            return Err(format!("--mig {f:?}: profile {profile} is given twice"));
        }
        out.push((profile.to_string(), count));
    }
    Ok(out)
}

/// Slices of one profile on one development GPU: a real GPU has at most 7.
const MAX_DEV_SLICES: u32 = 7;

#[cfg(test)]
mod tests {
    use super::{mig_flags, topology_flags};

    #[test]
    fn mig_flags_name_a_profile_and_a_count() {
        let flags = |v: &[&str]| mig_flags(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            flags(&["mig-1g.10gb=7", "mig-3g.40gb = 2"]).unwrap(),
            [("mig-1g.10gb".into(), 7), ("mig-3g.40gb".into(), 2)]
        );
        assert!(flags(&["1g.10gb=7"]).unwrap_err().contains("starts with mig-"));
        assert!(flags(&["mig-1g.10gb"]).unwrap_err().contains("expected PROFILE=N"));
        assert!(flags(&["mig-1g.10gb=8"]).unwrap_err().contains("from 1 to 7"));
        assert!(flags(&["mig-1g.10gb=x"]).unwrap_err().contains("whole number"));
        assert!(flags(&["mig-1g.10gb=1", "mig-1g.10gb=2"]).unwrap_err().contains("given twice"));
        assert!(flags(&["mig-1g+me=1"]).unwrap_err().contains("bad resource name"));
    }

    #[test]
    fn topology_flags_name_levels_above_the_node_other_than_the_rack() {
        let flags = |v: &[&str]| topology_flags(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let d = flags(&["nvlink=nvl72-3", "zone = z1"]).unwrap();
        assert_eq!(d.get("nvlink").map(String::as_str), Some("nvl72-3"));
        assert_eq!(d.get("zone").map(String::as_str), Some("z1"));
        assert!(flags(&["rack=r1"]).unwrap_err().contains("--rack"));
        assert!(flags(&["nvlink"]).unwrap_err().contains("expected LEVEL=DOMAIN"));
        assert!(flags(&["NVLink=x"]).unwrap_err().contains("bad topology level"));
        assert!(flags(&["nvlink=a", "nvlink=b"]).unwrap_err().contains("given twice"));
    }
}
