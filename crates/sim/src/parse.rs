//! Reads a scenario file into a `Scenario`: the cluster sections here, the timeline in
//! `parse_timeline`, expectations in `parse_expect`. Cross-references are checked later,
//! in `validate`.

use baton_model::topology::{ClusterTopology, LevelName, RACK};
use std::collections::BTreeMap;

use baton_model::class::PriorityClass;
use baton_model::name::Name;
use baton_model::node::{DEFAULT_POOL, NodeSpec};
use baton_model::queue::Cohort;
use baton_model::scheduler::SchedulerSettings;
use baton_model::usage::{UsageSettings, parse_weight};
use baton_spec::queue::parse_queue;

use crate::de::{Cx, InputError, R};
use crate::hostlist;
use crate::parse_expect::parse_expect;
use crate::parse_timeline::parse_timeline;
use crate::scenario::{At, Scenario};
use crate::yaml::{self, Node};

pub fn parse(file: &str, text: &str) -> Result<Scenario, InputError> {
    let cx = Cx { file };
    let root = yaml::parse(text).map_err(|e| cx.err(e.line, "", format!("not valid YAML: {}", e.message)))?;
    let root = root.ok_or_else(|| cx.err(1, "", "the file is empty"))?;
    let mut f = cx.map(&root, "")?;
    let name = f.opt("name").map(|n| cx.text(n, "name")).transpose()?;
    let classes = list(&cx, f.opt("priority_classes"), "priority_classes", parse_class)?;
    let (scheduler, usage) = match f.opt("scheduler") {
        Some(n) => parse_scheduler(&cx, n)?,
        None => (None, None),
    };
    let topology_levels = f.opt("topology_levels").map(|n| parse_levels(&cx, n)).transpose()?;
    let declared = topology_levels.as_ref().map(|l| l.v.clone());
    let (nodes, node_domains) = match f.opt("nodes") {
        Some(n) => parse_nodes(&cx, n, declared.as_deref())?,
        None => (Vec::new(), Vec::new()),
    };
    let cohorts = list(&cx, f.opt("cohorts"), "cohorts", parse_cohort)?;
    let with_limits = list(&cx, f.opt("queues"), "queues", parse_queue)?;
    let mut user_limits = Vec::new();
    let mut queues = Vec::new();
    for At { v: (q, limit), line, path } in with_limits {
        if let Some(limit) = limit {
            user_limits.push(At { v: (q.name.clone(), limit), line, path: format!("{path}.max_per_user") });
        }
        queues.push(At { v: q, line, path });
    }
    let timeline = match f.opt("timeline") {
        Some(n) => parse_timeline(&cx, n)?,
        None => Vec::new(),
    };
    let expect = list(&cx, f.opt("expect"), "expect", parse_expect)?;
    f.finish()?;
    if nodes.is_empty() {
        return Err(cx.err(root.line, "nodes", "a scenario needs at least one node"));
    }
    let expect = expect.into_iter().map(|e| e.v).collect();
    Ok(Scenario {
        file: file.to_string(),
        name,
        scheduler,
        usage,
        user_limits,
        classes,
        nodes,
        topology_levels,
        node_domains,
        cohorts,
        queues,
        timeline,
        expect,
    })
}

type SchedulerBlock = (Option<At<SchedulerSettings>>, Option<At<UsageSettings>>);

/// The `scheduler:` block: `reserve_after` in seconds, or `never` (docs/policy.md section
/// 9); `usage_half_life` in seconds, or `off`, and `usage_weights` (decisions.md section 12).
fn parse_scheduler(cx: &Cx, node: &Node) -> R<SchedulerBlock> {
    let mut f = cx.map(node, "scheduler")?;
    let mut settings = SchedulerSettings::default();
    let at = |path: &str| At { v: (), line: node.line, path: path.into() };
    let reserve = f.opt("reserve_after");
    if let Some(n) = reserve {
        let path = "scheduler.reserve_after";
        settings.reserve_after_ms =
            if cx.text(n, path).is_ok_and(|t| t == "never") { None } else { Some(cx.seconds(n, path)?) };
    }
    let mut usage = UsageSettings::default();
    let (half, weights) = (f.opt("usage_half_life"), f.opt("usage_weights"));
    if let Some(n) = half {
        let path = "scheduler.usage_half_life";
        usage.half_life_ms = if cx.text(n, path).is_ok_and(|t| t == "off") { None } else { Some(cx.seconds(n, path)?) };
    }
    if let Some(n) = weights {
        let path = "scheduler.usage_weights";
        let mut wf = cx.map(n, path)?;
        for (k, line, v) in wf.take_all() {
            let p = format!("{path}.{k}");
            let w = parse_weight(&cx.text(v, &p)?).map_err(|e| cx.err(line, &p, e))?;
            usage.weights_milli.insert(k, w);
        }
    }
    f.finish()?;
    settings.validate().map_err(|e| cx.err(node.line, "scheduler.reserve_after", e))?;
    usage.validate().map_err(|e| cx.err(node.line, "scheduler.usage_half_life", e))?;
    let a = at("scheduler");
    let usage = (half.is_some() || weights.is_some()).then(|| At { v: usage, line: a.line, path: a.path.clone() });
    Ok((Some(At { v: settings, line: a.line, path: a.path }), usage))
}

fn list<T>(cx: &Cx, node: Option<&Node>, path: &str, each: impl Fn(&Cx, &Node, &str) -> R<T>) -> R<Vec<At<T>>> {
    let Some(node) = node else {
        return Ok(Vec::new());
    };
    let items = cx.seq(node, path)?;
    items
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let p = format!("{path}[{i}]");
            Ok(At { v: each(cx, n, &p)?, line: n.line, path: p })
        })
        .collect()
}

fn parse_class(cx: &Cx, node: &Node, path: &str) -> R<PriorityClass> {
    let mut f = cx.map(node, path)?;
    let name = cx.name(f.req("name")?, &f.field_path("name"))?;
    let vnode = f.req("value")?;
    let value = cx.int(vnode, &f.field_path("value"))?;
    let value = i32::try_from(value).map_err(|_| cx.err(vnode.line, &f.field_path("value"), "out of range"))?;
    let preemptible = match f.opt("preemptible") {
        Some(n) => cx.boolean(n, &f.field_path("preemptible"))?,
        None => true,
    };
    f.finish()?;
    Ok(PriorityClass { name, value, preemptible })
}

/// A node's domains (section 10), by level, as parsed: `(level, domain)` pairs.
type Domains = BTreeMap<LevelName, Name>;
/// The nodes, and the domains of those that name any.
type ParsedNodes = (Vec<At<NodeSpec>>, Vec<At<(Name, Domains)>>);

fn parse_nodes(cx: &Cx, node: &Node, declared: Option<&[LevelName]>) -> R<ParsedNodes> {
    let mut out = Vec::new();
    let mut domains_out = Vec::new();
    for (i, n) in cx.seq(node, "nodes")?.iter().enumerate() {
        let path = format!("nodes[{i}]");
        let mut f = cx.map(n, &path)?;
        let name_node = f.req("name")?;
        let pattern = cx.text(name_node, &f.field_path("name"))?;
        let names = hostlist::expand(&pattern).map_err(|e| cx.err(name_node.line, &f.field_path("name"), e))?;
        let pool = match f.opt("pool") {
            Some(p) => cx.name(p, &f.field_path("pool"))?,
            None => Name::lit(DEFAULT_POOL),
        };
        let mut rack = f.opt("rack").map(|r| cx.name(r, &f.field_path("rack"))).transpose()?;
        let mut domains = Domains::new();
        if let Some(t) = f.opt("topology") {
            let tpath = f.field_path("topology");
            let (r, d) = node_topology(cx, t, &tpath, declared)?;
            if r.is_some() && rack.is_some() {
                return Err(cx.err(
                    t.line,
                    &format!("{tpath}.rack"),
                    "the rack is given twice (rack and topology.rack)",
                ));
            }
            rack = rack.or(r);
            domains = d;
        }
        let labels = match f.opt("labels") {
            Some(l) => labels(cx, l, &f.field_path("labels"))?,
            None => BTreeMap::new(),
        };
        let resources = cx.resources(f.req("resources")?, &f.field_path("resources"))?;
        f.finish()?;
        for name in names {
            let name = Name::new(name).map_err(|e| cx.err(name_node.line, &format!("{path}.name"), e.to_string()))?;
            if !domains.is_empty() {
                domains_out.push(At {
                    v: (name.clone(), domains.clone()),
                    line: n.line,
                    path: format!("{path}.topology"),
                });
            }
            let spec = NodeSpec {
                name,
                pool: pool.clone(),
                rack: rack.clone(),
                labels: labels.clone(),
                resources: resources.clone(),
                gpus: Vec::new(),
                agent_addr: String::new(),
            };
            out.push(At { v: spec, line: n.line, path: path.clone() });
        }
    }
    Ok((out, domains_out))
}

/// `topology_levels: [nvlink, rack, zone]`.
fn parse_levels(cx: &Cx, node: &Node) -> R<At<Vec<LevelName>>> {
    let mut levels = Vec::new();
    for (i, n) in cx.seq(node, "topology_levels")?.iter().enumerate() {
        let path = format!("topology_levels[{i}]");
        let text = cx.text(n, &path)?;
        levels.push(LevelName::new(&text).map_err(|e| cx.err(n.line, &path, e.to_string()))?);
    }
    ClusterTopology::check_levels(&levels).map_err(|e| cx.err(node.line, "topology_levels", e.to_string()))?;
    Ok(At { v: levels, line: node.line, path: "topology_levels".into() })
}

/// A node's `topology: {nvlink: nvl72-1, rack: r1, zone: z1}`: its rack, and its other
/// domains. Each level must be one the scenario declares (`rack` alone when it declares none).
fn node_topology(cx: &Cx, node: &Node, path: &str, declared: Option<&[LevelName]>) -> R<(Option<Name>, Domains)> {
    let mut f = cx.map(node, path)?;
    let (mut rack, mut domains) = (None, Domains::new());
    let words =
        declared.map_or_else(|| RACK.to_string(), |d| d.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "));
    for (k, line, v) in f.take_all() {
        let p = format!("{path}.{k}");
        let level = LevelName::new(&k).map_err(|e| cx.err(line, &p, e.to_string()))?;
        let known = match declared {
            Some(d) => d.contains(&level),
            None => level.is_rack(),
        };
        if !known {
            return Err(cx.err(line, &p, format!("level {k} is not declared (topology_levels: {words})")));
        }
        let domain = cx.name(v, &p)?;
        if level.is_rack() {
            rack = Some(domain);
        } else {
            domains.insert(level, domain);
        }
    }
    Ok((rack, domains))
}

fn labels(cx: &Cx, node: &Node, path: &str) -> R<BTreeMap<String, String>> {
    let mut f = cx.map(node, path)?;
    let mut m = BTreeMap::new();
    for (k, _, v) in f.take_all() {
        m.insert(k.clone(), cx.text(v, &format!("{path}.{k}"))?);
    }
    Ok(m)
}

fn parse_cohort(cx: &Cx, node: &Node, path: &str) -> R<Cohort> {
    let mut f = cx.map(node, path)?;
    let name = cx.name(f.req("name")?, &f.field_path("name"))?;
    let parent = f.opt("parent").map(|p| cx.name(p, &f.field_path("parent"))).transpose()?;
    let fair_sharing = match f.opt("fair_sharing") {
        Some(n) => cx.boolean(n, &f.field_path("fair_sharing"))?,
        None => false,
    };
    f.finish()?;
    Ok(Cohort { name, parent, fair_sharing })
}
