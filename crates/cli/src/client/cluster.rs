//! `baton cluster info`: replicas with their roles and racks, the leader, term and applied
//! index, and capacity and usage per pool and per queue. `baton cluster set`: scheduler
//! and tenancy settings. `add-replica`, `remove-replica`, `transfer-leader`: membership (docs/ops.md).

use std::fmt::Write as _;
use std::io::Write;

use baton_proto::v1;
use baton_proto::words::Word;
use clap::{Args, Subcommand};

use crate::client::error::{ClientError, Subject};
use crate::client::human::{
    HalfLife, ReserveAfter, parse_half_life, parse_reserve_after, parse_retention_ms, parse_weights,
    reserve_after_text, span, timestamp, usage, usage_settings_text,
};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub cmd: ClusterCmd,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Replicas, leader, term, applied index; capacity and usage per pool and per queue.
    Info {
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Format,
    },
    /// Changes cluster-wide settings at run time; settings not given keep their value.
    Set(SetArgs),
    /// Add replica ID, already started at ADDR (`baton server --id ID` without --bootstrap,
    /// an empty data directory): it joins as a learner, catches up, then votes.
    AddReplica {
        id: u64,
        /// The new replica's HOST:PORT (its --advertise address).
        addr: String,
        /// Its peer HOST:PORT (its --peer-advertise address) when it serves raft on a port of
        /// its own (--peer-listen); without it, raft is reached at ADDR.
        #[arg(long)]
        peer_addr: Option<String>,
    },
    /// Remove replica ID (not the leader; at least 3 voters must remain). Stop its process
    /// afterwards.
    RemoveReplica { id: u64 },
    /// Hand leadership to voter ID, or without ID to the most up-to-date other voter. Writes
    /// wait for about two election timeouts.
    TransferLeader { id: Option<u64> },
}

#[derive(Args, Debug)]
pub struct SetArgs {
    /// How long a job that cannot be placed even by preemption waits before it reserves
    /// resources (e.g. 5m), or `never` (docs/policy.md section 9).
    #[arg(long, value_parser = parse_reserve_after)]
    pub reserve_after: Option<ReserveAfter>,
    /// Whether jobs may run as root (`--run-as root`); agents also need --allow-root.
    #[arg(long, value_name = "BOOL")]
    pub allow_root_jobs: Option<bool>,
    /// Unfinished jobs one user may hold; further submits are refused.
    #[arg(long, value_name = "N")]
    pub max_jobs_per_user: Option<u32>,
    /// Unfinished jobs one queue may hold; further submits are refused.
    #[arg(long, value_name = "N")]
    pub max_jobs_per_queue: Option<u32>,
    /// Usage over time (decisions.md section 12): how fast past use is forgotten (e.g. 7d),
    /// or `off`. While set, users and queues that used less go first among equals.
    #[arg(long, value_name = "DURATION|off", value_parser = parse_half_life)]
    pub usage_half_life: Option<HalfLife>,
    /// Weights of resources in usage, e.g. gpu=1,cpu=0.1 (resources not named weigh 0;
    /// the default is gpu=1).
    #[arg(long, value_name = "RESOURCE=WEIGHT,...", value_parser = parse_weights)]
    pub usage_weights: Option<std::collections::BTreeMap<String, u64>>,
    /// The cluster's topology levels above the node, lowest first, e.g. nvlink,rack,zone
    /// (decisions.md section 10): gangs may require or prefer one (`--topology
    /// required=nvlink`), agents name their domains (`--rack`, `--topology nvlink=...`).
    /// `rack` alone is the default.
    #[arg(long, value_name = "LEVEL,...", value_delimiter = ',')]
    pub topology_levels: Option<Vec<String>>,
    /// How long each replica keeps accounting records after their attempt ended (e.g.
    /// 400d, the default; from 1d to 20 years).
    #[arg(long, value_name = "DURATION", value_parser = parse_retention_ms)]
    pub accounting_retention: Option<u64>,
}

pub async fn run(conn: &Conn, a: &ClusterArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    match &a.cmd {
        ClusterCmd::Info { output } => {
            let reply =
                conn.call(Subject::Other, "", |mut c| async move { c.cluster_info(v1::Empty {}).await }).await?;
            emit(out, *output, &reply, info_text)
        }
        ClusterCmd::Set(set) => run_set(conn, set, out).await,
        ClusterCmd::AddReplica { id, addr, peer_addr } => {
            let r =
                v1::AddReplicaRequest { id: *id, addr: addr.clone(), peer_addr: peer_addr.clone().unwrap_or_default() };
            let reply = conn
                .call(Subject::Other, "", |mut c| {
                    let r = r.clone();
                    async move { c.add_replica(r).await }
                })
                .await?;
            writeln!(out, "replica {id} at {addr} is a voter; {}", membership_text(&reply))?;
            Ok(())
        }
        ClusterCmd::RemoveReplica { id } => {
            let r = v1::ReplicaRef { id: *id };
            let reply = conn.call(Subject::Other, "", |mut c| async move { c.remove_replica(r).await }).await?;
            writeln!(out, "replica {id} removed; stop its process; {}", membership_text(&reply))?;
            Ok(())
        }
        ClusterCmd::TransferLeader { id } => {
            let r = v1::ReplicaRef { id: id.unwrap_or(0) };
            let reply = conn.call(Subject::Other, "", |mut c| async move { c.transfer_leader(r).await }).await?;
            match id {
                Some(asked) if *asked != reply.leader_id => writeln!(
                    out,
                    "replica {} leads, not replica {asked} (another voter won the election); {}",
                    reply.leader_id,
                    membership_text(&reply)
                )?,
                _ => writeln!(out, "replica {} leads; {}", reply.leader_id, membership_text(&reply))?,
            }
            Ok(())
        }
    }
}

async fn run_set(conn: &Conn, a: &SetArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let tenancy = v1::TenancySettings {
        allow_root_jobs: a.allow_root_jobs,
        max_jobs_per_user: a.max_jobs_per_user,
        max_jobs_per_queue: a.max_jobs_per_queue,
    };
    let any_tenancy = tenancy != v1::TenancySettings::default();
    let any_usage = a.usage_half_life.is_some() || a.usage_weights.is_some();
    if a.reserve_after.is_none()
        && !any_tenancy
        && !any_usage
        && a.accounting_retention.is_none()
        && a.topology_levels.is_none()
    {
        return Err(ClientError::Usage(
            "nothing to set: give --reserve-after, --allow-root-jobs, --max-jobs-per-user, --max-jobs-per-queue, \
             --usage-half-life, --usage-weights, --accounting-retention or --topology-levels"
                .into(),
        ));
    }
    if let Some(levels) = &a.topology_levels {
        let levels: Vec<String> = levels.iter().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
        for l in &levels {
            baton_model::topology::LevelName::new(l)
                .map_err(|e| ClientError::Usage(format!("--topology-levels: {e}")))?;
        }
        let r = v1::TopologyRequest { levels: levels.clone() };
        conn.call(Subject::Other, "", |mut c| {
            let r = r.clone();
            async move { c.set_topology(r).await }
        })
        .await?;
        let shown = if levels.is_empty() { "rack (the default)".to_string() } else { levels.join(", ") };
        writeln!(out, "topology levels are now {shown}")?;
    }
    if let Some(retention_ms) = a.accounting_retention {
        let s = v1::AccountingSettings { retention_ms };
        conn.call(Subject::Other, "", |mut c| async move { c.set_accounting(s).await }).await?;
        writeln!(out, "accounting records are now kept for {}", span(retention_ms))?;
    }
    if any_usage {
        let u = v1::UsageSettings {
            half_life_ms: a.usage_half_life.map(|h| h.0.unwrap_or(0)),
            weights_milli: a.usage_weights.clone().unwrap_or_default().into_iter().collect(),
        };
        conn.call(Subject::Other, "", |mut c| {
            let u = u.clone();
            async move { c.set_usage(u).await }
        })
        .await?;
        let now = conn.call(Subject::Other, "", |mut c| async move { c.cluster_info(v1::Empty {}).await }).await?;
        writeln!(out, "usage over time is now {}", now.usage.as_ref().map_or("off".into(), usage_settings_text))?;
    }
    if let Some(reserve_after) = &a.reserve_after {
        let s = v1::SchedulerSettings { reserve_after_ms: reserve_after.0 };
        conn.call(Subject::Other, "", |mut c| async move { c.set_scheduler(s).await }).await?;
        writeln!(out, "reserve_after is now {}", reserve_after_text(reserve_after.0))?;
    }
    if any_tenancy {
        conn.call(Subject::Other, "", |mut c| async move { c.set_tenancy(tenancy).await }).await?;
        if let Some(v) = a.allow_root_jobs {
            writeln!(out, "allow_root_jobs is now {v}")?;
        }
        if let Some(v) = a.max_jobs_per_user {
            writeln!(out, "max_jobs_per_user is now {v}")?;
        }
        if let Some(v) = a.max_jobs_per_queue {
            writeln!(out, "max_jobs_per_queue is now {v}")?;
        }
    }
    Ok(())
}

/// `tenancy: root jobs refused, max_jobs_per_user 1000, max_jobs_per_queue 10000`.
fn tenancy_text(t: &v1::TenancySettings) -> String {
    let root = if t.allow_root_jobs == Some(true) { "root jobs allowed" } else { "root jobs refused" };
    let n = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    format!(
        "tenancy: {root}, max_jobs_per_user {}, max_jobs_per_queue {}",
        n(t.max_jobs_per_user),
        n(t.max_jobs_per_queue)
    )
}

/// `on, records kept 400d00h; 1234 made; this replica holds them from 2026-11-02T10:00:00.000Z`.
fn accounting_text(a: &v1::AccountingInfo) -> String {
    if !a.on {
        return "off (it turns on once every replica reads the format that carries it)".into();
    }
    let held = if a.oldest_here_ms == 0 {
        "this replica holds none".to_string()
    } else {
        format!(
            "this replica holds those that ended from {} (up to number {})",
            timestamp(a.oldest_here_ms),
            a.newest_here
        )
    };
    format!("on, records kept {}; {} made; {held}", span(a.retention_ms), a.records_made)
}

/// `voters 2,3,4, learners none`.
fn membership_text(r: &v1::MembershipReply) -> String {
    let list = |ids: &[u64]| {
        if ids.is_empty() { "none".to_string() } else { ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",") }
    };
    format!("voters {}, learners {}", list(&r.voters), list(&r.learners))
}

pub fn info_text(r: &v1::ClusterInfoReply) -> String {
    let mut s = String::new();
    let id = if r.cluster_id.is_empty() { "-" } else { &r.cluster_id };
    let _ = writeln!(s, "cluster {id} (answered by replica {})", r.answered_by);
    if r.leader_id == 0 {
        let _ = writeln!(s, "leader: none known (an election may be under way), term {}", r.term);
    } else {
        let _ = writeln!(s, "leader: replica {} at {}, term {}", r.leader_id, r.leader_addr, r.term);
    }
    let _ = writeln!(s, "applied index: {}", r.applied_index);
    if r.insecure {
        let _ = writeln!(s, "transport: INSECURE (plain TCP, no certificates; the replica runs with --insecure)");
    } else {
        let _ = writeln!(s, "transport: mutual TLS");
    }
    let _ = writeln!(s, "jobs: {} running, {} pending", r.jobs_running, r.jobs_pending);
    if r.behaviour != 0 {
        let newest = baton_model::behaviour::BEHAVIOUR;
        let _ = writeln!(s, "apply behaviour: {} (this client's build applies up to {newest})", r.behaviour);
    }
    if !r.topology_levels.is_empty() {
        let _ = writeln!(s, "topology levels: {} (lowest first, above the node)", r.topology_levels.join(", "));
    }
    if let Some(t) = &r.tenancy {
        let _ = writeln!(s, "{}", tenancy_text(t));
    }
    if let Some(u) = &r.usage {
        let _ = writeln!(s, "usage over time: {}", usage_settings_text(u));
    }
    if let Some(a) = &r.accounting {
        let _ = writeln!(s, "accounting: {}", accounting_text(a));
    }
    s.push_str("\nreplicas:\n");
    let mut t = Table::new(&["  ID", "ADDRESS", "RACK", "VERSION", "FORMAT", "ROLE"]);
    for rep in &r.replicas {
        // A failing replica says so in its role column, with why, so it cannot be missed.
        let role = match rep.failure.as_str() {
            "" => rep.role().word().to_string(),
            why => format!("{} FAILED: {why}", rep.role().word()),
        };
        let rack = if rep.rack.is_empty() { "-".to_string() } else { rep.rack.clone() };
        // The peer address only when raft has a port of its own: single-port clusters read as before.
        let addr = match rep.peer_addr.as_str() {
            "" => rep.addr.clone(),
            peer if peer == rep.addr => rep.addr.clone(),
            peer => format!("{} (peer {peer})", rep.addr),
        };
        // 0 and empty: not heard from that replica yet.
        let version = if rep.version.is_empty() { "?".to_string() } else { rep.version.clone() };
        let format = if rep.format == 0 { "?".to_string() } else { rep.format.to_string() };
        t.row(vec![format!("  {}", rep.id), addr, rack, version, format, role]);
    }
    s.push_str(&t.render());
    s.push_str("\npools (used/capacity):\n");
    let mut t = Table::new(&["  POOL", "USAGE"]);
    for p in &r.pools {
        t.row(vec![format!("  {}", p.pool), usage(p.used.as_ref(), p.capacity.as_ref())]);
    }
    s.push_str(&t.render());
    s.push_str("\nqueues (used/nominal):\n");
    s.push_str(&queue_usage_table(&r.queues, "  "));
    let reserve_after = r.scheduler.as_ref().and_then(|x| x.reserve_after_ms);
    let _ = writeln!(s, "\nreservations (reserve_after {}):", reserve_after_text(reserve_after));
    if r.reservations.is_empty() {
        s.push_str("  none\n");
    } else {
        let mut t = Table::new(&["  JOB", "POOL", "NODES", "WAITING FOR"]);
        for x in &r.reservations {
            t.row(vec![format!("  {}", x.job), x.pool.clone(), x.nodes.join(","), format!("{} jobs", x.waiting_for)]);
        }
        s.push_str(&t.render());
    }
    s
}

/// Per queue and pool: `project-a  default  gpu 8/4  (borrowing 4)  2 running, 1 pending`.
pub fn queue_usage_table(queues: &[v1::QueueUsage], indent: &str) -> String {
    let first = if indent.is_empty() { "QUEUE" } else { "  QUEUE" };
    let mut t = Table::new(&[first, "POOL", "USAGE", "JOBS"]);
    for q in queues {
        let name = q.queue.as_ref().map_or(String::new(), |q| q.name.clone());
        let jobs = format!("{} running, {} pending", q.running, q.pending);
        if q.pools.is_empty() {
            t.row(vec![format!("{indent}{name}"), "-".into(), "-".into(), jobs.clone()]);
        }
        for (i, p) in q.pools.iter().enumerate() {
            let shown = if i == 0 { name.clone() } else { String::new() };
            let jobs = if i == 0 { jobs.clone() } else { String::new() };
            // A queue's pool usage is against its nominal quota; the queue's own quota says
            // it when a server leaves `capacity` out.
            let nominal = p
                .capacity
                .as_ref()
                .or_else(|| q.queue.as_ref()?.quotas.iter().find(|pq| pq.pool == p.pool)?.nominal.as_ref());
            t.row(vec![format!("{indent}{shown}"), p.pool.clone(), usage(p.used.as_ref(), nominal), jobs]);
        }
    }
    t.render()
}
