//! `baton bench hostile`: the dev cluster (3 replicas, 2 agents, mutual TLS, tokens) under
//! random and maximal messages from callers that hold real credentials: agents with the
//! certificate of node `evil`, and users with `mallory`'s certificate and token (a user of
//! one queue), while honest jobs keep running on the two real agents. It reports the
//! leader's apply time over the window (`baton_apply_seconds` from its /metrics), the leases
//! the real agents lost (`baton_agent_lease_expiries_total`), the nodes declared lost, the
//! honest jobs that ran, what the hostile calls got back, and any process that died or
//! panicked (none may: the command then fails).
//!
//! Every message is made by `messages` from a seeded generator, so a run can be repeated.

mod messages;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::tls::{REPLICA_HOST, Transport};
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::{CreateTokenRequest, Empty, ListJobsRequest, SubmitRequest};
use baton_proto::words::Word;
use clap::Args;

use crate::client::auth::Bearer;
use crate::client::connect::{Api, api_client, dial};
use crate::dev::procs::Children;

#[derive(Args, Debug, Clone)]
pub struct HostileArgs {
    /// How long the hostile callers run, in seconds.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Seed of the messages (the same seed sends the same messages).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Hostile agent connections, each speaking for node `evil`.
    #[arg(long, default_value_t = 2)]
    pub agents: u32,
    /// Hostile user connections, each as `mallory`.
    #[arg(long, default_value_t = 4)]
    pub users: u32,
    /// First port of the local cluster.
    #[arg(long, default_value_t = 7570)]
    pub port: u16,
    /// Keep the cluster's directory (data, logs) and say where it is.
    #[arg(long)]
    pub keep_dir: bool,
}

const MAX_SECONDS: u64 = 3_600;
const MAX_CALLERS: u32 = 64;
/// GPUs of each real agent (development GPUs).
const GPUS: u32 = 8;
/// How often an honest job is submitted; each runs about a second.
const HONEST_EVERY_MS: u64 = 500;
/// The hostile user's queue, and the honest jobs'.
const HOSTILE_QUEUE: &str = "hostile";
const HONEST_QUEUE: &str = "honest";
/// mallory's token (a dev cluster's, made here).
const MALLORY_TOKEN: &str = "mallory-bench-token-0123456789";
/// Pages of honest jobs read at the end (500 each: an hour's jobs and more).
const MAX_PAGES: usize = 32;
/// Attaches a hostile agent tries on one connection before it reports anyway.
const ATTACH_TRIES: u32 = 8;
/// Characters of a refusal's message shown with its code.
const MESSAGE_SHOWN: usize = 160;

pub fn run(a: HostileArgs) -> std::process::ExitCode {
    if a.seconds == 0 || a.seconds > MAX_SECONDS {
        eprintln!("error: --seconds {}: must be 1 to {MAX_SECONDS}", a.seconds);
        return std::process::ExitCode::from(2);
    }
    if a.agents > MAX_CALLERS || a.users > MAX_CALLERS {
        eprintln!("error: --agents and --users: at most {MAX_CALLERS} each");
        return std::process::ExitCode::from(2);
    }
    match super::runtime().and_then(|rt| rt.block_on(bench(a))) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn bench(a: HostileArgs) -> Result<(), String> {
    let tmp = tempfile::Builder::new().prefix("baton-hostile-").tempdir().map_err(|e| e.to_string())?;
    let mut children = Children::start(tmp.path(), a.port, GPUS, None).await?;
    let result = window(&a, &mut children, tmp.path()).await;
    children.stop(Duration::from_secs(5)).await;
    if a.keep_dir {
        eprintln!("the cluster's data and logs kept in {}", tmp.keep().display());
    }
    result
}

/// What the hostile calls got back, by gRPC code.
#[derive(Default)]
pub struct Tally {
    /// Calls by code, with the first refusal's message of each.
    codes: Mutex<BTreeMap<String, (u64, String)>>,
}

impl Tally {
    fn count<T>(&self, r: &Result<T, tonic::Status>) {
        let (code, message) = match r {
            Ok(_) => ("OK".to_string(), String::new()),
            Err(s) => (format!("{:?}", s.code()), s.message().chars().take(MESSAGE_SHOWN).collect()),
        };
        let mut codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        let entry = codes.entry(code).or_insert((0, message));
        entry.0 += 1;
    }

    fn lines(&self) -> String {
        let codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        let total: u64 = codes.values().map(|(n, _)| n).sum();
        let mut out = format!("{total} calls");
        for (code, (n, first)) in codes.iter() {
            out.push_str(&format!("\n    {code} {n}"));
            if !first.is_empty() {
                out.push_str(&format!(" (first: {first})"));
            }
        }
        out
    }
}

async fn window(a: &HostileArgs, children: &mut Children, dir: &std::path::Path) -> Result<(), String> {
    let servers = children.servers();
    let tls = dir.join("tls");
    crate::tls::dev_pki(&tls, &[], &["evil".to_string()], &["mallory".to_string()])
        .map_err(|e| format!("certificates: {e}"))?;
    let evil = Transport::load(&tls.join("agent-evil")).map_err(|e| format!("certificates: {e}"))?;
    let mallory = Transport::load(&tls.join("client-mallory")).map_err(|e| format!("certificates: {e}"))?;
    let mut admin = children.client(0).await?;
    setup(&mut admin).await?;
    println!(
        "baton bench hostile: 3 replicas, 2 agents x {GPUS} GPUs (mutual TLS, tokens); {} hostile agent and {} hostile user connections for {} s, seed {}",
        a.agents, a.users, a.seconds, a.seed
    );
    let before = Scraped::take(children).await;
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let (agents, users) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let mut tasks = Vec::new();
    for i in 0..a.agents {
        let (servers, t, tally) = (servers.clone(), evil.clone(), agents.clone());
        tasks.push(tokio::spawn(hostile_agent(servers, t, a.seed ^ (u64::from(i) << 32), deadline, tally)));
    }
    for i in 0..a.users {
        let (servers, t, tally) = (servers.clone(), mallory.clone(), users.clone());
        let seed = a.seed ^ (u64::from(i) << 40) ^ 0x5555;
        tasks.push(tokio::spawn(hostile_user(servers, t, seed, deadline, tally)));
    }
    let honest = honest_jobs(&mut admin, deadline).await;
    for t in tasks {
        let _ = t.await;
    }
    let after = Scraped::take(children).await;
    report(children, &before, &after, &agents, &users, honest, &mut admin).await?;
    match panics(&dir.join("logs")) {
        0 => Ok(()),
        n => Err(format!("{n} panics in the processes' logs ({})", dir.join("logs").display())),
    }
}

/// Lines saying a thread panicked, in every log under `logs`: a panic in a request's task
/// does not end the process, so it is looked for here.
fn panics(logs: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(logs) else { return 0 };
    let texts = entries.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok());
    let n: usize = texts.map(|t| t.lines().filter(|l| l.contains("panicked at")).count()).sum();
    println!("panics in the logs: {n}");
    n
}

/// Queues `honest` and `hostile`, and mallory's token (a user of `hostile` only).
async fn setup(admin: &mut Api) -> Result<(), String> {
    for (q, gpus) in [(HONEST_QUEUE, u64::from(GPUS)), (HOSTILE_QUEUE, u64::from(GPUS))] {
        admin.put_queue(baton_proto::make::gpu_queue(q, gpus)).await.map_err(|e| format!("queue {q}: {e}"))?;
    }
    let hash = baton_server::auth::hash_token(MALLORY_TOKEN).to_vec();
    let req = CreateTokenRequest { hash, user: "mallory".into(), roles: vec![], queues: vec![HOSTILE_QUEUE.into()] };
    admin.create_token(req).await.map_err(|e| format!("mallory's token: {e}"))?;
    Ok(())
}

/// Submits a one-GPU `sleep 1` to the honest queue every [`HONEST_EVERY_MS`] until
/// `deadline`; how many were acknowledged.
async fn honest_jobs(admin: &mut Api, deadline: Instant) -> u64 {
    let mut n = 0;
    while Instant::now() < deadline {
        let cmd = vec!["sleep".to_string(), "1".to_string()];
        let spec = baton_proto::make::gpu_job(&format!("honest-{n}"), HONEST_QUEUE, "", 1, 1, cmd);
        if admin.submit(SubmitRequest { spec: Some(spec), ..Default::default() }).await.is_ok() {
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(HONEST_EVERY_MS)).await;
    }
    n
}

/// Node `evil`'s agent: attaches, then sends random and maximal reports to whichever
/// replica takes them, until `deadline`.
async fn hostile_agent(servers: Vec<String>, t: Transport, seed: u64, deadline: Instant, tally: Arc<Tally>) {
    let mut make = messages::Gen::new(seed);
    let mut at = 0;
    let mut hint: Option<String> = None;
    while Instant::now() < deadline {
        at = (at + 1) % servers.len();
        // The leader a refusal named, or the next replica.
        let addr = hint.take().unwrap_or_else(|| servers[at].clone());
        let Ok(ch) = dial(&addr, &t, REPLICA_HOST).await else { continue };
        let mut c = AgentGatewayClient::new(ch)
            .max_encoding_message_size(messages::MAX_MESSAGE_BYTES)
            .max_decoding_message_size(messages::MAX_MESSAGE_BYTES);
        // Random attaches until one is taken (most are), so that most reports reach the
        // state; directives are read and dropped, so the stream does not back up.
        for _ in 0..ATTACH_TRIES {
            let attached = c.attach(make.attach()).await;
            tally.count(&attached);
            if let Ok(stream) = attached {
                tokio::spawn(drain(stream.into_inner()));
                break;
            }
        }
        while Instant::now() < deadline {
            let r = c.report(make.report()).await;
            tally.count(&r);
            if let Err(s) = &r
                && (s.code() == tonic::Code::Unavailable || s.message().contains("not the leader"))
            {
                hint = leader_hint(s.message());
                break;
            }
        }
    }
}

/// The leader's address a "not the leader" refusal names (`the leader is at "HOST:PORT"`).
fn leader_hint(message: &str) -> Option<String> {
    let rest = message.split("the leader is at \"").nth(1)?;
    rest.split('"').next().filter(|a| !a.is_empty()).map(str::to_string)
}

async fn drain<T>(mut s: tonic::Streaming<T>) {
    while let Ok(Some(_)) = s.message().await {}
}

/// mallory: random and maximal client calls to every replica in turn, until `deadline`.
async fn hostile_user(servers: Vec<String>, t: Transport, seed: u64, deadline: Instant, tally: Arc<Tally>) {
    let mut make = messages::Gen::new(seed);
    let Ok(bearer) = Bearer::new(Some(MALLORY_TOKEN), "mallory") else { return };
    let mut at = 0;
    while Instant::now() < deadline {
        at = (at + 1) % servers.len();
        let Ok(ch) = dial(&servers[at], &t, REPLICA_HOST).await else { continue };
        let mut c = api_client(ch, bearer.clone());
        for _ in 0..messages::CALLS_PER_CONNECTION {
            if Instant::now() >= deadline {
                return;
            }
            make.client_call(&mut c, &tally).await;
        }
    }
}

/// What the processes' /metrics said at one moment.
struct Scraped {
    /// The leader's name ("replica N") and its apply histogram (bucket bound -> count).
    leader: Option<String>,
    apply: BTreeMap<u64, f64>,
    nodes_lost: f64,
    /// Each agent's lease expiries.
    expiries: BTreeMap<String, f64>,
}

impl Scraped {
    async fn take(children: &Children) -> Scraped {
        let leader = leader_name(children).await;
        let mut s =
            Scraped { leader: leader.clone(), apply: BTreeMap::new(), nodes_lost: 0.0, expiries: BTreeMap::new() };
        for (who, url) in children.metrics_urls() {
            let Some(text) = super::scrape_url(url).await else { continue };
            if Some(who) == leader.as_ref() {
                s.apply = messages::histogram(&text, "baton_apply_seconds");
                s.nodes_lost = super::float(&text, "baton_nodes_lost_total").unwrap_or(0.0);
            }
            if who.starts_with("agent") {
                let expiries = super::float(&text, "baton_agent_lease_expiries_total").unwrap_or(0.0);
                s.expiries.insert(who.clone(), expiries);
            }
        }
        s
    }
}

/// How many honest jobs are in each state, page by page (at most [`MAX_PAGES`]).
async fn honest_states(admin: &mut Api) -> BTreeMap<String, usize> {
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let page =
            ListJobsRequest { queue: HONEST_QUEUE.into(), page_size: 500, page_token: token, ..Default::default() };
        let Ok(reply) = admin.list_jobs(page).await.map(|r| r.into_inner()) else { break };
        for j in &reply.jobs {
            *states.entry(j.state().word().to_string()).or_default() += 1;
        }
        token = reply.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    states
}

async fn leader_name(children: &Children) -> Option<String> {
    let mut c = children.client(0).await.ok()?;
    let info = c.cluster_info(Empty {}).await.ok()?.into_inner();
    (info.leader_id != 0).then(|| format!("replica {}", info.leader_id))
}

async fn report(
    children: &mut Children,
    before: &Scraped,
    after: &Scraped,
    agents: &Tally,
    users: &Tally,
    honest: u64,
    admin: &mut Api,
) -> Result<(), String> {
    println!("hostile agents: {}", agents.lines());
    println!("hostile users: {}", users.lines());
    match (&before.leader, &after.leader) {
        (Some(b), Some(a)) if a == b => {
            let window = messages::difference(&after.apply, &before.apply);
            println!("leader {a} apply: {}", messages::quantiles_line(&window));
        }
        (b, a) => println!("the leader changed ({b:?} -> {a:?}): no apply window to compare"),
    }
    println!("nodes declared lost: {}", after.nodes_lost - before.nodes_lost);
    for (who, n) in &after.expiries {
        let lost = n - before.expiries.get(who).copied().unwrap_or(0.0);
        println!("{who}: {lost} leases ran out");
    }
    let states = honest_states(admin).await;
    let states: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!("honest jobs: {honest} submitted; at the end {}", states.join(", "));
    if let Some(dead) = children.exited() {
        return Err(format!("a process died under hostile input: {dead}"));
    }
    Ok(())
}
