//! A baton scheduler replica (`baton server`): the client API, the agent gateway and the
//! leader loop, on top of the replicated state in `baton_raft`.
//!
//! Layout, one concept per module:
//! - [`run`], [`run_on`]: serve everything until shutdown: `Baton` and `AgentGateway` on the
//!   API listener, the raft transport on the peer listener when there is one (replica
//!   certificates only), else on the API listener too; tests drive a whole replica through it.
//! - `api`: the client API (`proto/baton.proto`); any replica answers.
//! - `gateway`: the agent protocol (`proto/agent.proto`); the leader answers.
//! - `leader`: while leading: cycle -> propose plan -> publish desired assignments;
//!   heartbeat timeouts; ticks.
//! - `desired`: what each node should run, a pure function of the state, and the leader's
//!   lists kept between rounds (rebuilt only where a change touched them).
//! - [`attach_hold`]: an agent's attach held while leadership settles.
//! - `registrar`: the registrations of agents that attach together, as one command.
//! - `hub`, `liveness`, `quorum`, `strays`, `vanished`, `checkpoints`: the leader's in-memory
//!   views (agent streams, heartbeats, when a quorum last confirmed this leader, replicas
//!   running unplaced, replicas no longer reported, ranks that saved their work since the
//!   job's last complete checkpoint). None of it is replicated: a new leader
//!   rebuilds it.
//! - `metrics`: what `GET /metrics` exposes (state gauges, applied-event counters, the
//!   leader loop's activity, raft).
//! - `dash`: the HTTP listener (`--metrics-listen`): `/metrics`, the web dashboard and its
//!   JSON and event-stream endpoints.
//! - `auth`: who calls the client API (bearer tokens), and the bootstrap admin.
//! - [`export`]: accounting records copied into PostgreSQL while this replica leads.
//! - `status`: errors as gRPC statuses, only at this edge.
//! - `tls`: who may call which service under mutual TLS (the raft transport only replicas,
//!   the gateway only agents, each as its own node).
//! - `trace`: the spans of a job's decision path (submit, commit, cycle, plan, directive).
//! - `clock`, `settings`.

pub mod api;
pub mod attach_hold;
pub mod auth;
mod checkpoints;
pub mod clock;
pub mod dash;
pub mod desired;
pub mod export;
mod gateway;
pub use gateway::MAX_ATTACH_STREAMS_PER_NODE;
mod hub;
mod leader;
pub mod liveness;
pub mod metrics;
mod panicked;
pub mod quorum;
mod registrar;
pub mod settings;
pub mod status;
pub mod strays;
pub mod tls;
mod trace;
pub mod vanished;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use baton_proto::tls::{Transport, guard};
use baton_proto::v1::agent_gateway_server::AgentGatewayServer;
use baton_proto::v1::baton_server::BatonServer;
use baton_raft::{Replica, ReplicaConfig, Role};
use tokio::net::TcpListener;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;

pub use settings::ServerSettings;

/// Largest client or agent message a replica accepts (a 10,000-job list is about 3 MiB).
pub const MAX_API_MESSAGE_BYTES: usize = baton_proto::MAX_MESSAGE_BYTES;

/// How long requests in flight may take to finish once shutdown begins.
pub const SHUTDOWN_GRACE_MS: u64 = 3_000;

/// How to start one replica.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub replica: ReplicaConfig,
    /// Replica id to `host:port` of the first membership; given to one replica of a new
    /// cluster (a cluster that already has a membership ignores it).
    pub bootstrap: Option<BTreeMap<u64, String>>,
    pub settings: ServerSettings,
    /// The scheduler settings a cluster this replica bootstraps starts with (`None`: the
    /// model's defaults). Later they change at run time, through the log (`cluster set`).
    pub scheduler: Option<baton_model::scheduler::SchedulerSettings>,
    /// Mutual TLS on every service and on the raft dialer, or plain TCP (`--insecure`).
    pub transport: Transport,
}

/// Tries to commit a new cluster's first scheduler settings this often, this many times
/// (until a leader is elected); then gives up with a warning.
const INITIAL_SETTINGS_RETRY_MS: u64 = 200;
const INITIAL_SETTINGS_TRIES: u32 = 150;

/// Commits the first scheduler settings of a cluster this replica has just bootstrapped.
async fn set_initial_scheduler(replica: Replica, settings: baton_model::scheduler::SchedulerSettings) {
    for _ in 0..INITIAL_SETTINGS_TRIES {
        let cmd = baton_model::Command { now_ms: clock::now_ms(), op: baton_model::Op::SetScheduler(settings) };
        match replica.write(cmd).await {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the scheduler settings were refused");
                return;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(INITIAL_SETTINGS_RETRY_MS)).await,
        }
    }
    tracing::warn!("no leader to commit the initial scheduler settings to; set them with `baton cluster set`");
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid setting: {0}")]
    Settings(String),
    #[error(transparent)]
    Open(#[from] baton_raft::OpenError),
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] baton_raft::MembershipError),
    #[error("serving gRPC failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// Raft stopped under the server (a log that could not be written or synced): the
    /// replica can serve nothing any more, so the server ends rather than limp.
    #[error("this replica's raft stopped ({0}); restart it once the cause is fixed")]
    ReplicaFailed(String),
    /// The leader loop panicked (a broken invariant in a scheduling cycle): the server ends
    /// rather than stay a leader that schedules nothing.
    #[error("this replica's leader loop panicked ({0}); the server stopped so that another replica leads")]
    LeaderPanicked(String),
}

/// What the services and the leader loop share.
pub(crate) struct Ctx {
    pub(crate) replica: Replica,
    pub(crate) settings: ServerSettings,
    pub(crate) hub: hub::Hub,
    /// What each node should run, kept across the leader's rounds (`desired::Desired`).
    pub(crate) lists: Arc<desired::TermLists>,
    /// The agent attaches held while leadership settles (`attach_hold`).
    pub(crate) holds: attach_hold::Holds,
    pub(crate) liveness: liveness::Liveness,
    pub(crate) quorum: quorum::Quorum,
    pub(crate) registrar: registrar::Registrar,
    pub(crate) strays: strays::Strays,
    pub(crate) checkpoints: checkpoints::Checkpoints,
    pub(crate) vanished: vanished::Vanished,
    pub(crate) metrics: Arc<metrics::Metrics>,
    /// One permit per open watch stream (`max_watch_streams`).
    pub(crate) watch_slots: Arc<tokio::sync::Semaphore>,
    /// One permit per log stream read through this replica (`max_log_streams`).
    pub(crate) log_slots: Arc<tokio::sync::Semaphore>,
    /// Open watch streams per client identity (`max_watch_streams_per_client`).
    pub(crate) watchers: Arc<api::watchers::Watchers>,
    /// Log streams read through this replica per client identity (`max_log_streams_per_client`).
    pub(crate) log_readers: Arc<api::watchers::Watchers>,
    /// The dashboard's event streams per client identity (`dash::MAX_EVENT_STREAMS_PER_CLIENT`).
    pub(crate) dash_streams: Arc<api::watchers::Watchers>,
    /// One permit per dashboard event stream, whichever listener serves it
    /// (`dash::MAX_EVENT_STREAMS`).
    pub(crate) dash_slots: Arc<tokio::sync::Semaphore>,
    /// Writes per queue user (`max_user_writes_per_s`).
    pub(crate) write_rates: api::rates::WriteRates,
    /// Client writes waiting for their answer: the leader rests for them.
    pub(crate) client_writes: baton_raft::in_flight::InFlight,
    /// Set when the server shuts down: every stream it serves ends, so that the graceful
    /// shutdown does not wait on agents and watchers forever.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
    pub(crate) transport: Transport,
}

impl Ctx {
    /// A context for `replica` with nothing shared yet: no agent, watcher or stream.
    pub(crate) fn new(replica: Replica, settings: ServerSettings, transport: Transport) -> Ctx {
        let (watch_streams, log_streams) = (settings.max_watch_streams, settings.max_log_streams);
        Ctx {
            registrar: registrar::Registrar::new(replica.clone()),
            replica,
            settings,
            hub: hub::Hub::default(),
            lists: Arc::default(),
            holds: attach_hold::Holds::default(),
            liveness: liveness::Liveness::default(),
            quorum: quorum::Quorum::default(),
            strays: strays::Strays::default(),
            checkpoints: checkpoints::Checkpoints::default(),
            vanished: vanished::Vanished::default(),
            metrics: Arc::new(metrics::Metrics::new()),
            watch_slots: Arc::new(tokio::sync::Semaphore::new(watch_streams)),
            log_slots: Arc::new(tokio::sync::Semaphore::new(log_streams)),
            watchers: Arc::new(api::watchers::Watchers::watch_streams()),
            log_readers: Arc::new(api::watchers::Watchers::log_streams()),
            dash_streams: Arc::new(api::watchers::Watchers::dashboard_streams()),
            dash_slots: Arc::new(tokio::sync::Semaphore::new(dash::MAX_EVENT_STREAMS)),
            write_rates: api::rates::WriteRates::default(),
            client_writes: baton_raft::in_flight::InFlight::default(),
            closing: tokio::sync::watch::channel(false).0,
            transport,
        }
    }

    /// This replica's term if it leads; otherwise the status that sends the caller to the leader.
    pub(crate) fn require_leader(&self) -> Result<u64, Status> {
        let m = self.replica.metrics();
        match (m.role, *self.hub.leading().borrow()) {
            (Role::Leader, Some(term)) if term == m.term => Ok(term),
            (Role::Leader, _) => Err(Status::unavailable(
                "this replica leads but no quorum has confirmed it with its state caught up yet; retry in a moment",
            )),
            _ => Err(status::not_leader(m.leader_addr.as_deref().unwrap_or(""))),
        }
    }

    /// Whether the applied state has `node` ready (not lost, not unknown).
    pub(crate) fn node_ready(&self, node: &baton_model::name::Name) -> bool {
        let status = self.replica.read_local(|s| s.nodes().get(node).map(|n| n.status));
        status == Some(baton_model::node::NodeStatus::Ready)
    }
}

/// Where a replica serves.
pub struct Listeners {
    /// The client API and the agent gateway, and the raft transport when `peer` is none.
    pub api: TcpListener,
    /// The raft transport on a port of its own (`--peer-listen`), which then serves nothing
    /// else, and `api` serves no raft.
    pub peer: Option<TcpListener>,
    /// `GET /metrics` and the dashboard (`--metrics-listen`), over the replica's transport.
    pub metrics: Option<TcpListener>,
    /// `GET /metrics` over plain HTTP, and the dashboard where it is a loopback address
    /// (`--metrics-plain-listen`).
    pub metrics_plain: Option<TcpListener>,
}

/// Opens the replica, serves raft, the client API and the agent gateway on `listener`, and
/// runs the leader loop, until `shutdown` completes.
pub async fn run(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    run_with_metrics(config, listener, None, shutdown).await
}

/// As [`run`], and serves `GET /metrics` and the dashboard on `metrics` when given.
pub async fn run_with_metrics(
    config: ServerConfig,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    run_on(config, Listeners { api: listener, peer: None, metrics, metrics_plain: None }, shutdown).await
}

/// Opens the replica, serves on `listeners` and runs the leader loop until `shutdown`
/// completes.
pub async fn run_on(
    config: ServerConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let Listeners { api: listener, peer, metrics, metrics_plain } = listeners;
    config.settings.validate().map_err(ServerError::Settings)?;
    let dialer = tls::raft_dialer(&config.transport, &config.replica);
    let replica = Replica::open_with(config.replica, dialer).await?;
    replica.gate_membership(auth::membership_gate(replica.clone()));
    let ctx = Arc::new(Ctx::new(replica.clone(), config.settings, config.transport.clone()));
    let timing = ctx.metrics.clone();
    replica.observe_applies(Arc::new(move |kind, took| timing.observe_apply(kind, took.as_secs_f64())));
    let (leader, mut leader_panic) = panicked::spawn_watched(leader::run(ctx.clone(), ctx.closing.subscribe()));
    tokio::spawn(attach_hold::judge(ctx.clone()));
    tokio::spawn(leader::keep_lists_warm(ctx.clone(), ctx.closing.subscribe()));
    let counting = tokio::spawn(metrics::count_events(ctx.metrics.clone(), replica.clone(), ctx.closing.subscribe()));
    let scrapes = metrics.map(|l| tokio::spawn(dash::serve(ctx.clone(), l, dash::Listener::Main)));
    let plain_scrapes = metrics_plain.map(|l| {
        let loopback = l.local_addr().is_ok_and(|a| a.ip().is_loopback());
        tokio::spawn(dash::serve(ctx.clone(), l, dash::Listener::Plain { loopback }))
    });
    if let Some(url) = ctx.settings.accounting_postgres.clone() {
        tokio::spawn(export::run(ctx.clone(), url, ctx.closing.subscribe()));
    }
    if let Some(members) = config.bootstrap {
        let outcome = replica.bootstrap(members).await?;
        tracing::info!(?outcome, "bootstrap");
        if let (baton_raft::Bootstrap::Initialized, Some(s)) = (&outcome, config.scheduler) {
            tokio::spawn(set_initial_scheduler(replica.clone(), s));
        }
    }
    if ctx.settings.auth == auth::AuthMode::None {
        tracing::warn!(
            "--auth none: client calls are not authenticated; anyone who reaches this port acts as an admin"
        );
    }
    if let Some(hash) = ctx.settings.bootstrap_admin {
        tokio::spawn(auth::bootstrap_admin(replica.clone(), hash));
    }
    let api = BatonServer::new(api::Api { ctx: ctx.clone() })
        .max_decoding_message_size(MAX_API_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_API_MESSAGE_BYTES);
    let gateway = AgentGatewayServer::new(gateway::Gateway { ctx: ctx.clone() })
        .max_decoding_message_size(MAX_API_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_API_MESSAGE_BYTES);
    let t = &config.transport;
    let raft = InterceptedService::new(replica.service(), guard(t.clone(), tls::RAFT_CALLERS));
    let api = InterceptedService::new(api, guard(t.clone(), tls::API_CALLERS));
    let gateway = InterceptedService::new(gateway, guard(t.clone(), tls::GATEWAY_CALLERS));
    let incoming = config.transport.incoming(listener);
    let closing = ctx.clone();
    let shutdown = async move {
        shutdown.await;
        closing.closing.send_replace(true);
        closing.hub.set_leading(None);
    };
    let mut closed = ctx.closing.subscribe();
    // With a peer port, raft is served there alone and the API port serves no raft: a
    // firewall can then keep the peer port to the replicas' hosts.
    let (raft_on_api, peer_serve) = match peer {
        None => (Some(raft), None),
        Some(peer) => {
            let mut closed = ctx.closing.subscribe();
            let serve = config.transport.server().add_service(raft).serve_with_incoming_shutdown(
                config.transport.incoming(peer),
                async move {
                    let _ = closed.wait_for(|c| *c).await;
                },
            );
            (None, Some(serve))
        }
    };
    let api_serve = config
        .transport
        .server()
        .add_optional_service(raft_on_api)
        .add_service(api)
        .add_service(gateway)
        .serve_with_incoming_shutdown(incoming, shutdown);
    let serve = async move {
        match peer_serve {
            None => api_serve.await,
            Some(peer_serve) => tokio::try_join!(api_serve, peer_serve).map(|_| ()),
        }
    };
    let mut failure = None;
    // Requests still in flight get a bounded time to finish once shutdown begins.
    let served = tokio::select! {
        r = serve => r,
        reason = replica.failed() => {
            tracing::error!(reason = %reason, "raft stopped; this replica can serve nothing more and stops");
            failure = Some(ServerError::ReplicaFailed(reason));
            Ok(())
        }
        // Closed without a message when the loop ends at shutdown: the branch is then off.
        Ok(why) = &mut leader_panic => {
            tracing::error!(panic = %why, "the leader loop panicked; this replica stops so that another leads");
            failure = Some(ServerError::LeaderPanicked(why));
            Ok(())
        }
        () = async {
            let _ = closed.wait_for(|c| *c).await;
            tokio::time::sleep(std::time::Duration::from_millis(SHUTDOWN_GRACE_MS)).await;
        } => {
            tracing::warn!(grace_ms = SHUTDOWN_GRACE_MS, "requests still in flight at shutdown were dropped");
            Ok(())
        }
    };
    ctx.closing.send_replace(true);
    let _ = leader.await;
    let _ = counting.await;
    for s in scrapes.into_iter().chain(plain_scrapes) {
        let _ = s.await;
    }
    replica.shutdown().await;
    served?;
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
