//! Nodes: `baton nodes`, `baton cordon|uncordon|drain NODE`.

use std::io::Write;

use baton_proto::v1;
use baton_proto::words::Word;
use clap::Args;

use crate::client::error::{ClientError, Subject};
use crate::client::human::{amount, gpus_milli, span};
use crate::client::output::{Format, Table};
use crate::client::{Conn, ConnArgs, emit, print_ack};

#[derive(Args, Debug)]
pub struct NodesArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Only nodes in this pool.
    #[arg(long)]
    pub pool: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

#[derive(Args, Debug)]
pub struct NodeArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The node's name.
    pub node: String,
}

pub async fn list(conn: &Conn, a: &NodesArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let mut reply = conn.call(Subject::Other, "", |mut c| async move { c.list_nodes(v1::Empty {}).await }).await?;
    if let Some(p) = &a.pool {
        reply.nodes.retain(|n| &n.pool == p);
    }
    emit(out, a.output, reply.nodes.as_slice(), nodes_table)
}

/// `used/total` of one resource on a node; `-` when it has none.
fn of(n: &v1::Node, k: &str) -> String {
    let total = n.resources.as_ref().and_then(|r| r.amounts.get(k)).copied().unwrap_or(0);
    let used = n.used.as_ref().and_then(|r| r.amounts.get(k)).copied().unwrap_or(0);
    if total == 0 && used == 0 { "-".into() } else { format!("{}/{}", amount(k, used), amount(k, total)) }
}

/// `used/total` GPUs on a node, fractions of shared GPUs counted (`2.75/8`); `-` when it
/// has none.
fn gpus_of(n: &v1::Node) -> String {
    let milli = |r: &Option<v1::Resources>| r.as_ref().map_or(0, |r| gpus_milli(&r.amounts));
    let (used, total) = (milli(&n.used), milli(&n.resources));
    let show = baton_model::quantity::thousandths;
    if total == 0 && used == 0 { "-".into() } else { format!("{}/{}", show(used), show(total)) }
}

/// Its GPUs shared by fractions: `3:0.75(2)` is GPU 3, three quarters held by two replicas.
fn shared_of(n: &v1::Node) -> String {
    let shown: Vec<String> = n
        .shared_gpus
        .iter()
        .map(|s| format!("{}:{}({})", s.gpu, baton_model::quantity::thousandths(u64::from(s.milli)), s.replicas))
        .collect();
    if shown.is_empty() { "-".into() } else { shown.join(" ") }
}

/// The indices of the node's GPUs out of service: marked unhealthy in the state, or
/// reported unqueryable when the agent registered.
fn unhealthy_gpus(n: &v1::Node) -> Vec<u32> {
    let mut out: Vec<u32> = n.unhealthy_gpus.iter().map(|f| f.gpu).collect();
    out.extend(n.gpus.iter().filter(|g| !g.healthy).map(|g| g.index));
    out.sort_unstable();
    out.dedup();
    out
}

/// The MIG profiles a node offers, in name order.
fn slice_profiles(n: &v1::Node) -> Vec<&str> {
    let mut out: Vec<&str> = n
        .resources
        .iter()
        .flat_map(|r| r.amounts.keys())
        .map(String::as_str)
        .filter(|k| baton_model::resources::is_slice_profile(k))
        .collect();
    out.sort_unstable();
    out
}

pub fn nodes_table(nodes: &[v1::Node]) -> String {
    if nodes.is_empty() {
        return "no nodes registered\n".into();
    }
    // Topology domains other than the rack (decisions.md section 10), where any node names one.
    let domains = nodes.iter().any(|n| !n.domains.is_empty());
    // MIG slices by profile (decisions.md section 11), where any node offers some.
    let slices = nodes.iter().any(|n| !slice_profiles(n).is_empty());
    // GPUs shared by fractions (section 11), where any node has one.
    let shared = nodes.iter().any(|n| !n.shared_gpus.is_empty());
    let mut header = vec!["NAME", "POOL", "RACK", "STATUS", "GPU", "CPU", "MEMORY", "JOBS", "SEEN", "AGENT"];
    if slices {
        header.insert(5, "SLICES");
    }
    if shared {
        header.insert(5, "SHARED");
    }
    if domains {
        header.insert(3, "DOMAINS");
    }
    let mut t = Table::new(&header);
    for n in nodes {
        let mut status = n.status().word().to_string();
        if n.cordoned {
            status.push_str(",Cordoned");
        }
        if !n.maintenance.is_empty() {
            status.push_str(&format!(",Maintenance({})", n.maintenance));
        }
        // Its agent holds jobs by process groups only: a process that leaves its group escapes.
        if n.labels.get(baton_agent::node::CONTAINMENT_LABEL).is_some_and(|m| m == "process-group") {
            status.push_str(",ProcessGroupOnly");
        }
        let unhealthy = unhealthy_gpus(n);
        if !unhealthy.is_empty() {
            let list: Vec<String> = unhealthy.iter().map(u32::to_string).collect();
            let s = if unhealthy.len() == 1 { "" } else { "s" };
            status.push_str(&format!(",GPU{s} {} unhealthy", list.join(",")));
        }
        let jobs = match n.jobs.len() {
            0 => "-".to_string(),
            1..=3 => n.jobs.join(","),
            k => format!("{},... ({k})", n.jobs[..2].join(",")),
        };
        let mut row = vec![
            n.name.clone(),
            n.pool.clone(),
            if n.rack.is_empty() { "-".into() } else { n.rack.clone() },
            status,
            gpus_of(n),
            of(n, "cpu"),
            of(n, "memory"),
            jobs,
            n.last_seen_ms_ago.map_or("-".into(), |ms| format!("{} ago", span(ms))),
            if n.agent_addr.is_empty() { "-".into() } else { n.agent_addr.clone() },
        ];
        // Inserted in the header's order: SHARED ends up before SLICES.
        if slices {
            let shown: Vec<String> = slice_profiles(n).iter().map(|p| format!("{p} {}", of(n, p))).collect();
            row.insert(5, if shown.is_empty() { "-".into() } else { shown.join(" ") });
        }
        if shared {
            row.insert(5, shared_of(n));
        }
        if domains {
            let mut named: Vec<String> = n.domains.iter().map(|(l, d)| format!("{l}={d}")).collect();
            named.sort();
            row.insert(3, if named.is_empty() { "-".into() } else { named.join(" ") });
        }
        t.row(row);
    }
    t.render()
}

#[derive(Clone, Copy, Debug)]
pub enum Act {
    Cordon,
    Uncordon,
    Drain,
}

pub async fn act(conn: &Conn, act: Act, a: &NodeArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let node = a.node.clone();
    let ack = conn
        .call(Subject::Node, &a.node, |mut c| {
            let node = node.clone();
            async move {
                match act {
                    Act::Cordon => c.cordon(v1::CordonRequest { node, cordoned: true }).await,
                    Act::Uncordon => c.cordon(v1::CordonRequest { node, cordoned: false }).await,
                    Act::Drain => c.drain(v1::NameRef { name: node }).await,
                }
            }
        })
        .await?;
    let done = match act {
        Act::Cordon => "cordoned: no new work is placed there",
        Act::Uncordon => "uncordoned",
        Act::Drain => "draining: cordoned, and it lists as drained once what runs there finishes",
    };
    print_ack(out, &ack, &format!("node {} {done}", a.node))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31: an agent that holds jobs by process groups only (`--containment auto` on a
    /// host without a delegated cgroup tree, or `process-group`) says so in `baton nodes`.
    #[test]
    fn a_node_whose_agent_holds_jobs_by_process_groups_says_so() {
        let node = |mode: &str| v1::Node {
            name: "n1".into(),
            status: v1::NodeStatus::Ready as i32,
            labels: [(baton_agent::node::CONTAINMENT_LABEL.to_string(), mode.to_string())].into_iter().collect(),
            ..Default::default()
        };
        assert!(nodes_table(&[node("process-group")]).contains("Ready,ProcessGroupOnly"));
        assert!(!nodes_table(&[node("cgroup")]).contains("ProcessGroupOnly"));
    }

    /// Section 10: the domains each node's agent named show in their own column, only when
    /// some node names one.
    #[test]
    fn nodes_show_their_topology_domains_when_any_names_one() {
        let node = |name: &str, domains: &[(&str, &str)]| v1::Node {
            name: name.into(),
            rack: "r1".into(),
            status: v1::NodeStatus::Ready as i32,
            domains: domains.iter().map(|(l, d)| (l.to_string(), d.to_string())).collect(),
            ..Default::default()
        };
        let t = nodes_table(&[node("n1", &[("zone", "z1"), ("nvlink", "nvl-a")]), node("n2", &[])]);
        assert!(t.contains("DOMAINS"), "{t}");
        let row = t.lines().find(|l| l.starts_with("n1")).unwrap();
        assert!(row.contains("nvlink=nvl-a zone=z1"), "{t}");
        assert!(!nodes_table(&[node("n2", &[])]).contains("DOMAINS"));
    }

    #[test]
    fn nodes_show_their_mig_slices_in_use_when_any_offers_some() {
        let res = |pairs: &[(&str, u64)]| {
            Some(v1::Resources { amounts: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect() })
        };
        let node = |name: &str, total: &[(&str, u64)], used: &[(&str, u64)]| v1::Node {
            name: name.into(),
            status: v1::NodeStatus::Ready as i32,
            resources: res(total),
            used: res(used),
            ..Default::default()
        };
        let m1 = node("m1", &[("mig-1g.10gb", 7), ("mig-3g.40gb", 1)], &[("mig-1g.10gb", 2)]);
        let t = nodes_table(&[m1, node("n1", &[("gpu", 8)], &[])]);
        assert!(t.contains("SLICES"), "{t}");
        let row = t.lines().find(|l| l.starts_with("m1")).unwrap();
        assert!(row.contains("mig-1g.10gb 2/7 mig-3g.40gb 0/1"), "{t}");
        assert!(!nodes_table(&[node("n1", &[("gpu", 8)], &[])]).contains("SLICES"));
    }

    /// Section 11: a node's GPU use counts the fractions held, and its shared GPUs show in
    /// their own column (held, and by how many replicas), only when some node has one.
    #[test]
    fn nodes_show_their_shared_gpus_when_any_has_one() {
        let res = |pairs: &[(&str, u64)]| {
            Some(v1::Resources { amounts: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect() })
        };
        let shared =
            vec![v1::SharedGpu { gpu: 3, milli: 750, replicas: 2 }, v1::SharedGpu { gpu: 5, milli: 250, replicas: 1 }];
        let s1 = v1::Node {
            name: "s1".into(),
            status: v1::NodeStatus::Ready as i32,
            resources: res(&[("gpu", 8)]),
            used: res(&[("gpu", 2), ("gpu.milli", 1000)]),
            shared_gpus: shared,
            ..Default::default()
        };
        let n1 = v1::Node { name: "n1".into(), resources: res(&[("gpu", 8)]), ..Default::default() };
        let m1 = v1::Node { name: "m1".into(), resources: res(&[("mig-1g.10gb", 7)]), ..Default::default() };
        let t = nodes_table(&[s1, n1.clone(), m1]);
        let column = |row: &str, name: &str| {
            let at = t.lines().next().unwrap().find(name).unwrap();
            t.lines().find(|l| l.starts_with(row)).unwrap()[at..].split("  ").next().unwrap().to_string()
        };
        assert_eq!(column("s1", "SHARED"), "3:0.75(2) 5:0.25(1)", "{t}");
        assert_eq!(column("m1", "SLICES"), "mig-1g.10gb 0/7", "{t}");
        let row = t.lines().find(|l| l.starts_with("s1")).unwrap();
        assert!(row.contains("3/8"), "two whole GPUs and fractions adding to one: {t}");
        let used = v1::Node { used: res(&[("gpu.milli", 500)]), ..n1.clone() };
        assert!(nodes_table(&[used]).contains("0.5/8"));
        assert!(!nodes_table(&[n1]).contains("SHARED"));
    }
}
