//! `expect:` blocks: what must hold once everything at an instant has settled.

use std::collections::BTreeMap;

use baton_model::job::JobState;
use baton_model::name::Name;
use baton_model::quantity::parse_thousandths;

use crate::de::{Cx, R};
use crate::scenario::{At, Expect, JobExpect, NodesExpect, QueueExpect, UsageExpect};
use crate::yaml::{Node, Yaml};

pub fn parse_expect(cx: &Cx, node: &Node, path: &str) -> R<Expect> {
    let mut f = cx.map(node, path)?;
    let at_ms = cx.seconds(f.req("at")?, &f.field_path("at"))?;
    let mut e = Expect { at_ms, line: node.line, ..Default::default() };
    if let Some(n) = f.opt("jobs") {
        e.jobs = keyed(cx, n, &f.field_path("jobs"), job_expect)?;
    }
    if let Some(n) = f.opt("queues") {
        e.queues = keyed(cx, n, &f.field_path("queues"), queue_expect)?;
    }
    if let Some(n) = f.opt("victims_of") {
        e.victims_of = keyed(cx, n, &f.field_path("victims_of"), |cx, n, p| cx.names(n, p))?;
    }
    if let Some(n) = f.opt("victims_count") {
        e.victims_count = keyed(cx, n, &f.field_path("victims_count"), |cx, n, p| cx.count(n, p))?;
    }
    if let Some(n) = f.opt("placed_on") {
        e.placed_on = keyed(cx, n, &f.field_path("placed_on"), |cx, n, p| cx.names(n, p))?;
    }
    if let Some(n) = f.opt("users") {
        let p = f.field_path("users");
        let mut uf = cx.map(n, &p)?;
        for (user, line, v) in uf.take_all() {
            let up = format!("{p}.{user}");
            e.users.push(At { v: (user, user_usage(cx, v, &up)?), line, path: up });
        }
    }
    if let Some(n) = f.opt("counts") {
        let p = f.field_path("counts");
        let mut cf = cx.map(n, &p)?;
        for (k, line, v) in cf.take_all() {
            let kp = format!("{p}.{k}");
            let state = JobState::parse(&k).ok_or_else(|| cx.err(line, &kp, format!("{k:?} is not a job state")))?;
            e.counts.push(At { v: (state, cx.count(v, &kp)?), line, path: kp });
        }
    }
    f.finish()?;
    Ok(e)
}

/// `{usage: {gpu: 1800.0}}`: decayed resource-seconds per resource, in whole units.
fn user_usage(cx: &Cx, node: &Node, path: &str) -> R<BTreeMap<String, f64>> {
    let mut f = cx.map(node, path)?;
    let n = f.req("usage")?;
    let up = f.field_path("usage");
    let mut rf = cx.map(n, &up)?;
    let mut out = BTreeMap::new();
    for (r, _, v) in rf.take_all() {
        let value = cx.number(v, &format!("{up}.{r}"))?;
        out.insert(r, value);
    }
    f.finish()?;
    Ok(out)
}

/// A mapping from names to expectations about them.
fn keyed<T>(cx: &Cx, node: &Node, path: &str, each: impl Fn(&Cx, &Node, &str) -> R<T>) -> R<Vec<At<(Name, T)>>> {
    let mut f = cx.map(node, path)?;
    let mut out = Vec::new();
    for (k, line, v) in f.take_all() {
        let p = format!("{path}.{k}");
        let name = Name::new(k).map_err(|e| cx.err(line, &p, e.to_string()))?;
        out.push(At { v: (name, each(cx, v, &p)?), line, path: p });
    }
    Ok(out)
}

fn job_expect(cx: &Cx, node: &Node, path: &str) -> R<JobExpect> {
    let mut f = cx.map(node, path)?;
    let mut j = JobExpect::default();
    if let Some(n) = f.opt("state") {
        let t = cx.text(n, &f.field_path("state"))?;
        j.state = Some(
            JobState::parse(&t)
                .ok_or_else(|| cx.err(n.line, &f.field_path("state"), format!("{t:?} is not a job state")))?,
        );
    }
    if let Some(n) = f.opt("gpus") {
        // In thousandths: a job on shared GPUs holds fractions (decisions.md section 11).
        let p = f.field_path("gpus");
        let t = cx.text(n, &p)?;
        j.gpus = Some(parse_thousandths("gpu", &t).map_err(|e| cx.err(n.line, &p, e.to_string()))?);
    }
    if let Some(n) = f.opt("attempt") {
        j.attempt = Some(cx.count(n, &f.field_path("attempt"))?);
    }
    if f.has("preempted_by") {
        j.preempted_by = Some(f.opt("preempted_by").map(|n| cx.name(n, &f.field_path("preempted_by"))).transpose()?);
    }
    if let Some(n) = f.opt("pool") {
        j.pool = Some(cx.name(n, &f.field_path("pool"))?);
    }
    if let Some(n) = f.opt("nodes") {
        j.nodes = Some(nodes_expect(cx, n, &f.field_path("nodes"))?);
    }
    if let Some(n) = f.opt("queue") {
        j.queue = Some(cx.name(n, &f.field_path("queue"))?);
    }
    if let Some(n) = f.opt("reason") {
        j.reason = Some(cx.text(n, &f.field_path("reason"))?);
    }
    f.finish()?;
    Ok(j)
}

fn nodes_expect(cx: &Cx, node: &Node, path: &str) -> R<NodesExpect> {
    if let Yaml::Seq(_) = node.v {
        return Ok(NodesExpect::Names(cx.names(node, path)?));
    }
    let mut f = cx.map(node, path)?;
    let mut m = BTreeMap::new();
    for (k, line, v) in f.take_all() {
        let p = format!("{path}.{k}");
        let name = Name::new(k).map_err(|e| cx.err(line, &p, e.to_string()))?;
        let gpus = cx.seq(v, &p)?.iter().map(|g| cx.count(g, &p)).collect::<R<Vec<u32>>>()?;
        m.insert(name, gpus);
    }
    Ok(NodesExpect::Exact(m))
}

fn usage_expect(cx: &Cx, f: &mut crate::de::Fields) -> R<UsageExpect> {
    let usage = f.opt("usage").map(|n| cx.amounts(n, &f.field_path("usage"))).transpose()?;
    let nominal = f.opt("nominal").map(|n| cx.amounts(n, &f.field_path("nominal"))).transpose()?;
    Ok(UsageExpect { usage, nominal })
}

fn queue_expect(cx: &Cx, node: &Node, path: &str) -> R<QueueExpect> {
    let mut f = cx.map(node, path)?;
    let total = usage_expect(cx, &mut f)?;
    let mut pools = Vec::new();
    if let Some(n) = f.opt("pools") {
        let p = f.field_path("pools");
        let mut pf = cx.map(n, &p)?;
        for (k, line, v) in pf.take_all() {
            let kp = format!("{p}.{k}");
            let pool = Name::new(k).map_err(|e| cx.err(line, &kp, e.to_string()))?;
            let mut uf = cx.map(v, &kp)?;
            let u = usage_expect(cx, &mut uf)?;
            uf.finish()?;
            pools.push((pool, u));
        }
    }
    f.finish()?;
    Ok(QueueExpect { total, pools })
}
