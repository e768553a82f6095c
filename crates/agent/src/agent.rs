//! Wiring: journal, inventory, logs server, supervisor, leader follower and reporter.

use std::net::SocketAddr;
use std::sync::Arc;

use baton_proto::tls::{Role, guard};
use baton_proto::v1::agent_logs_server::AgentLogsServer;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;

use crate::config::AgentConfig;
use crate::error::AgentError;
use crate::inventory::{self, Inventory};
use crate::journal::Journal;
use crate::leader::Follower;
use crate::limits::DIRECTIVE_BUFFER;
use crate::logs_server::LogsService;
use crate::metrics::{AgentMetrics, View};
use crate::node::node_info;
use crate::reporter::Reporter;
use crate::supervisor::{Settings, Supervisor};

/// A running agent. Dropping it without `shutdown` leaves its tasks to the runtime.
pub struct Agent {
    logs_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    metrics_plain_addr: Option<SocketAddr>,
    /// Held so that the metrics endpoint runs until the agent shuts down.
    _metrics_open: watch::Sender<bool>,
    advertised: String,
    inventory: Inventory,
    logs_stop: Option<oneshot::Sender<()>>,
    supervisor: JoinHandle<Result<(), crate::error::JournalError>>,
    /// Resolves with the supervisor's error if it stops by itself (the journal failed).
    failed: Option<oneshot::Receiver<String>>,
    tasks: Vec<JoinHandle<()>>,
    logs_server: JoinHandle<Result<(), tonic::transport::Error>>,
    /// Watches the GPUs' health until the agent shuts down (stopped when dropped).
    _gpu_watch: Option<crate::health::WatchThread>,
}

impl Agent {
    /// Where AgentLogs is served.
    pub fn logs_addr(&self) -> SocketAddr {
        self.logs_addr
    }

    /// Where `GET /metrics` is served over the agent's transport, if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where `GET /metrics` is served over plain HTTP, if it is.
    pub fn metrics_plain_addr(&self) -> Option<SocketAddr> {
        self.metrics_plain_addr
    }

    /// The address the leader was given for this agent's logs (NodeInfo.agent_addr).
    pub fn agent_addr(&self) -> &str {
        &self.advertised
    }

    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// Completes with the reason if the agent fails by itself (its journal cannot be
    /// written); never completes otherwise.
    pub async fn failure(&mut self) -> String {
        match self.failed.as_mut() {
            Some(rx) => match rx.await {
                Ok(why) => why,
                Err(_) => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// Stops following the leader and serving logs. The replicas keep running: a restarted
    /// agent on the same data directory re-adopts them.
    pub async fn shutdown(mut self) -> Result<(), AgentError> {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        // The follower held the directive sender: the supervisor now ends its loop.
        let sup = (&mut self.supervisor).await;
        if let Some(stop) = self.logs_stop.take() {
            let _ = stop.send(());
        }
        let served = (&mut self.logs_server).await;
        match sup {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => return Err(AgentError::Task(format!("supervisor: {e}"))),
        }
        if let Ok(Err(e)) = served {
            return Err(AgentError::LogsServer(e.to_string()));
        }
        Ok(())
    }
}

/// Who may call the agent's log service.
const LOG_READERS: &[Role] = &[Role::Replica];

/// Jobs running as other users write their exit files under `<data_dir>/run` and their
/// checkpoints under the checkpoint root: both must be reachable by them.
fn prepare_for_users(data_dir: &std::path::Path, checkpoint_root: &std::path::Path) -> Result<(), AgentError> {
    use std::os::unix::fs::PermissionsExt;
    // The journal holds what every job here runs (its commands): the agent's alone.
    let journal = data_dir.join("journal");
    std::fs::create_dir_all(&journal).map_err(|source| AgentError::CreateDir { path: journal.clone(), source })?;
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o700))
        .map_err(|source| AgentError::CreateDir { path: journal.clone(), source })?;
    let run = data_dir.join("run");
    std::fs::create_dir_all(&run).map_err(|source| AgentError::CreateDir { path: run.clone(), source })?;
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o711))
        .map_err(|source| AgentError::CreateDir { path: run.clone(), source })?;
    for dir in [&run, checkpoint_root] {
        crate::run_as::check_searchable(dir).map_err(AgentError::Config)?;
    }
    Ok(())
}

/// Starts an agent: opens the journal (re-adopting replicas), takes the inventory, serves
/// logs and starts following the leader.
pub async fn start(config: AgentConfig) -> Result<Agent, AgentError> {
    config.validate().map_err(AgentError::Config)?;
    let inventory = inventory::resolve(&config.name, &config.dev)?;
    start_with_inventory(config, inventory).await
}

/// As `start`, with an inventory taken elsewhere.
pub async fn start_with_inventory(config: AgentConfig, inventory: Inventory) -> Result<Agent, AgentError> {
    prepare_dirs(&config)?;
    let journal = Journal::open(&config.data_dir.join("journal"))?;
    start_with_journal(config, inventory, journal).await
}

fn prepare_dirs(config: &AgentConfig) -> Result<(), AgentError> {
    config.validate().map_err(AgentError::Config)?;
    let checkpoint_root = config.checkpoint_root();
    for dir in [&config.data_dir, &checkpoint_root] {
        std::fs::create_dir_all(dir).map_err(|source| AgentError::CreateDir { path: dir.clone(), source })?;
    }
    if let crate::run_as::RunAsPolicy::Users(_) = &config.run_as {
        prepare_for_users(&config.data_dir, &checkpoint_root)?;
    }
    Ok(())
}

/// As `start_with_inventory`, on a journal opened elsewhere (a simulated disk in tests).
pub async fn start_with_journal(
    config: AgentConfig,
    inventory: Inventory,
    journal: Journal,
) -> Result<Agent, AgentError> {
    let mut config = config;
    learn_nvlink_domain(&mut config, &inventory);
    prepare_dirs(&config)?;
    crate::tools::check(std::env::var_os("PATH").as_deref()).map_err(AgentError::Config)?;
    let checkpoint_root = config.checkpoint_root();
    let journal = Arc::new(journal);

    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| AgentError::Listen { addr: config.listen.clone(), source })?;
    let logs_addr =
        listener.local_addr().map_err(|source| AgentError::Listen { addr: config.listen.clone(), source })?;
    // A wildcard bind is no address for others to dial: advertise the host name instead.
    let advertised = config.advertise.clone().unwrap_or_else(|| {
        if logs_addr.ip().is_unspecified() {
            format!("{}:{}", crate::node::host_name(), logs_addr.port())
        } else {
            logs_addr.to_string()
        }
    });

    // A lease a previous run held in this boot still binds what it left running.
    let lease_file = crate::lease_file::path(&config.data_dir);
    let (lease_tx, lease_rx) = watch::channel(crate::lease_file::load(&lease_file));
    let metrics = Arc::new(AgentMetrics::new());
    let metrics_listener = bind_metrics(config.metrics_listen.as_deref()).await?;
    let metrics_plain_listener = bind_metrics(config.metrics_plain_listen.as_deref()).await?;
    let gpu_minors: std::collections::BTreeMap<u32, u32> =
        inventory.gpus.iter().filter_map(|g| Some((g.index, g.minor?))).collect();
    let cgroups =
        crate::cgroup::resolve(config.containment, config.cgroup_root.as_deref(), &config.name, &config.data_dir)?
            .map(|root| root.isolate_gpus(gpu_minors));
    metrics.process_group_only(cgroups.is_none());
    let containment = if cgroups.is_some() { "cgroup" } else { "process-group" };
    let settings = Settings {
        cgroups,
        node: config.name.clone(),
        data_dir: config.data_dir.clone(),
        checkpoint_root,
        kill_grace_ms: config.kill_grace_ms,
        unkillable_after_ms: config.unkillable_after_ms,
        log_cap_bytes: config.log_cap_bytes,
        lease: lease_rx.clone(),
        metrics: metrics.clone(),
        run_as: config.run_as.clone(),
        devices: crate::devices::Devices::of(&inventory),
    };
    let (supervisor, shared) = Supervisor::new(journal.clone(), settings)?;

    let (logs_stop, logs_stopped) = oneshot::channel::<()>();
    let service = LogsService { data_dir: config.data_dir.clone(), live: shared.live_logs.clone() };
    let incoming = config.transport.incoming(listener);
    let logs_service = AgentLogsServer::new(service)
        .max_decoding_message_size(crate::limits::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(crate::limits::MAX_MESSAGE_BYTES);
    // Under TLS only replicas may read logs: they check the reader's token first (logs are
    // the job's private data); clients read through them (`JobLogs`).
    let logs_service = InterceptedService::new(logs_service, guard(config.transport.clone(), LOG_READERS));
    let mut server = config.transport.server();
    let logs_server = tokio::spawn(server.add_service(logs_service).serve_with_incoming_shutdown(incoming, async {
        let _ = logs_stopped.await;
    }));

    let (dir_tx, dir_rx) = mpsc::channel(DIRECTIVE_BUFFER);
    let (fail_tx, failed) = oneshot::channel();
    let supervisor = tokio::spawn(async move {
        let result = supervisor.run(dir_rx).await;
        if let Err(e) = &result {
            tracing::error!("the supervisor stopped: {e}");
            let _ = fail_tx.send(e.to_string());
        }
        result
    });
    let (attached_tx, attached_rx) = watch::channel(None);
    let reattach = Arc::new(Notify::new());
    let servers: Vec<String> = config.servers.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    let follower = Follower {
        servers,
        transport: config.transport.clone(),
        node: node_info(&config, &inventory, &advertised, containment),
        journal: journal.clone(),
        directives: dir_tx,
        attached: attached_tx,
        reattach: reattach.clone(),
    };
    let reporter = Reporter {
        node: config.name.clone(),
        heartbeat_ms: config.heartbeat_ms,
        journal: journal.clone(),
        running: shared.running.clone(),
        awaiting: shared.awaiting,
        observed: shared.observed.clone(),
        attached: attached_rx,
        reattach,
        lease: lease_tx,
        lease_file,
        metrics: metrics.clone(),
        fence: crate::fence::Fence::default(),
        acked: Arc::default(),
        suspensions: shared.suspensions,
        unrecorded: shared.unrecorded,
        unjournaled: shared.unjournaled,
    };
    let view =
        View { running: shared.running.clone(), lease: lease_rx, nvml: None, transport: config.transport.clone() };
    let recorder = Arc::new(crate::health::Recorder::new(
        journal.clone(),
        shared.observed.clone(),
        metrics.clone(),
        inventory.gpus.len() as u32,
    ));
    let gpu_watch = watch_gpus(&config, &inventory, recorder.clone());
    let mut tasks = vec![tokio::spawn(follower.run()), tokio::spawn(reporter.run())];
    if let Some(check) = config.health_check.clone() {
        tracing::info!(command = check.command, interval_ms = check.interval_ms, "running the health check");
        tasks.push(tokio::spawn(check.run(recorder)));
    }
    let (metrics_open, metrics_closing) = watch::channel(false);
    let view = Arc::new(View { nvml: gpu_metrics_source(&inventory), ..view });
    let mut serve_metrics = |l: Option<tokio::net::TcpListener>, transport: baton_proto::tls::Transport| {
        let Some(l) = l else { return Ok(None) };
        let addr = l.local_addr().map_err(|source| AgentError::Listen { addr: config.listen.clone(), source })?;
        let serving = crate::metrics::serve(transport, l, metrics.clone(), view.clone(), metrics_closing.clone());
        tasks.push(tokio::spawn(serving));
        Ok::<_, AgentError>(Some(addr))
    };
    let metrics_addr = serve_metrics(metrics_listener, config.transport.clone())?;
    let metrics_plain_addr = serve_metrics(metrics_plain_listener, baton_proto::tls::Transport::Insecure)?;
    tracing::info!(node = config.name, agent_addr = %advertised, "agent started");
    Ok(Agent {
        logs_addr,
        metrics_addr,
        metrics_plain_addr,
        _metrics_open: metrics_open,
        advertised,
        inventory,
        logs_stop: Some(logs_stop),
        supervisor,
        failed: Some(failed),
        tasks,
        logs_server,
        _gpu_watch: gpu_watch,
    })
}

/// Watches the GPUs: NVML's events and conditions where the inventory came from NVML, or
/// the injection directory for development GPUs. A watch that cannot start is logged: the
/// agent still runs jobs, and the health check (if any) still runs.
/// On GPUs read through NVML, the NVLink domain from the fabric (`fabric`), unless
/// `--topology nvlink=...` names it. A fabric that cannot be read or is not set up names
/// none, said in the log: the node then counts in its pool's unnamed NVLink domain.
fn learn_nvlink_domain(config: &mut AgentConfig, inventory: &Inventory) {
    if inventory.source != inventory::Source::Nvml || config.domains.contains_key(crate::fabric::NVLINK_LEVEL) {
        return;
    }
    match crate::fabric::nvml_fabrics().and_then(|f| crate::fabric::domain_of(&f)) {
        Ok(Some(domain)) => {
            tracing::info!(domain, "NVLink domain from the GPUs' fabric information");
            config.domains.insert(crate::fabric::NVLINK_LEVEL.to_string(), domain);
        }
        Ok(None) => tracing::info!("the GPUs are on no multi-node NVLink fabric: no NVLink domain named"),
        Err(e) => tracing::warn!("no NVLink domain named: {e}; --topology nvlink=DOMAIN names one"),
    }
}

fn watch_gpus(
    config: &AgentConfig,
    inventory: &Inventory,
    recorder: Arc<crate::health::Recorder>,
) -> Option<crate::health::WatchThread> {
    let watch: Box<dyn crate::health::GpuWatch> = match inventory.source {
        inventory::Source::Nvml => match crate::health::nvml::NvmlWatch::open() {
            Ok(w) => Box::new(w),
            Err(e) => {
                tracing::error!("cannot watch the GPUs' health through NVML: {e}; faults are not reported");
                return None;
            }
        },
        inventory::Source::Development => match crate::health::injected::InjectedWatch::new(&config.data_dir) {
            Ok(w) => Box::new(w),
            Err(e) => {
                tracing::warn!("cannot make the GPU fault injection directory: {e}; none can be injected");
                return None;
            }
        },
    };
    // GPUs the driver could not query when the agent started are out of service from the start.
    for g in inventory.gpus.iter().filter(|g| !g.healthy) {
        recorder.fault(g.index, "the driver could not query it when the agent started", false);
    }
    match crate::health::WatchThread::spawn(watch, recorder) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::error!("cannot start the GPU health thread: {e}; faults are not reported");
            None
        }
    }
}

/// NVML for the GPU metrics, only when the inventory itself came from NVML (development
/// GPUs have nothing to measure).
fn gpu_metrics_source(inventory: &Inventory) -> Option<nvml_wrapper::Nvml> {
    if inventory.source != inventory::Source::Nvml {
        tracing::info!("no GPU metrics on /metrics: this node's GPUs are development GPUs, not NVML's");
        return None;
    }
    crate::metrics::open_nvml()
}

async fn bind_metrics(addr: Option<&str>) -> Result<Option<tokio::net::TcpListener>, AgentError> {
    let Some(addr) = addr else { return Ok(None) };
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AgentError::Listen { addr: addr.to_string(), source })?;
    Ok(Some(l))
}

/// Runs an agent until `shutdown` completes (or the supervisor fails).
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    let scheme = if config.transport.is_tls() { "https" } else { "http" };
    let mut agent = start(config).await?;
    eprintln!("agent_addr={}", agent.agent_addr());
    if let Some(addr) = agent.metrics_addr() {
        eprintln!("metrics_url={scheme}://{addr}/metrics");
    }
    if let Some(addr) = agent.metrics_plain_addr() {
        eprintln!("metrics_url=http://{addr}/metrics");
    }
    tokio::select! {
        _ = shutdown => agent.shutdown().await,
        why = agent.failure() => {
            let _ = agent.shutdown().await;
            Err(AgentError::Task(format!("supervisor: {why}")))
        }
    }
}
