//! A queue as a scenario's `queues` entry, an `update_queue` step and `baton queue create|update
//! -f` write it (docs/scenario-format.md, "queues").

use std::collections::BTreeMap;

use baton_model::name::Name;
use baton_model::node::DEFAULT_POOL;
use baton_model::queue::{BorrowWithinCohort, PoolQuota, PreemptionPolicy, QueueSpec};
use baton_model::word::Word;

use crate::de::{Cx, Fields, R};
use crate::yaml::Node;

/// A value of a closed set, by its one spelling (`baton_model::word`).
pub fn word<T: Word>(cx: &Cx, node: &Node, path: &str) -> R<T> {
    let t = cx.text(node, path)?;
    T::from_word(&t).ok_or_else(|| cx.err(node.line, path, format!("{t:?} is not one of: {}", T::words())))
}

/// One of a fixed set of words that is no closed set of the model's (a field's own spelling).
fn choice<T: Copy>(cx: &Cx, node: &Node, path: &str, options: &[(&str, T)]) -> R<T> {
    let t = cx.text(node, path)?;
    options.iter().find(|(k, _)| k.eq_ignore_ascii_case(&t)).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<&str> = options.iter().map(|(k, _)| *k).collect();
        cx.err(node.line, path, format!("{t:?} is not one of: {}", names.join(", ")))
    })
}

/// A queue and its `max_per_user` (decisions.md section 12), which the queue's own spec
/// does not carry: it is written by a command of its own (`SetUserLimit`).
pub type QueueEntry = (QueueSpec, Option<baton_model::resources::Resources>);

pub fn parse_queue(cx: &Cx, node: &Node, path: &str) -> R<QueueEntry> {
    let mut f = cx.map(node, path)?;
    let limit = max_per_user(cx, &mut f)?;
    let name = cx.name(f.req("name")?, &f.field_path("name"))?;
    let q = queue_fields(cx, &mut f, QueueSpec::named(name.as_str()))?;
    f.finish()?;
    Ok((q, limit))
}

/// `max_per_user: {gpu: 8}`, if given.
pub fn max_per_user(cx: &Cx, f: &mut Fields) -> R<Option<baton_model::resources::Resources>> {
    let p = f.field_path("max_per_user");
    f.opt("max_per_user").map(|n| cx.resources(n, &p)).transpose()
}

/// Applies a queue's fields onto `base`: a new queue starts from defaults, an
/// `update_queue` from the queue as it is.
pub fn queue_fields(cx: &Cx, f: &mut Fields, mut q: QueueSpec) -> R<QueueSpec> {
    if let Some(c) = f.opt("cohort") {
        q.cohort = Some(cx.name(c, &f.field_path("cohort"))?);
    }
    let short = [f.has("quota"), f.has("borrow_limit"), f.has("lend_limit")].contains(&true);
    if short && f.has("quotas") {
        let line = f.line;
        return Err(cx.err(
            line,
            &f.field_path("quotas"),
            "use either quota/borrow_limit/lend_limit or quotas, not both",
        ));
    }
    if short {
        let default = Name::lit(DEFAULT_POOL);
        let mut pq = q.quotas.get(&default).cloned().unwrap_or_default();
        if let Some(n) = f.opt("quota") {
            pq.nominal = cx.resources(n, &f.field_path("quota"))?;
        }
        if let Some(n) = f.opt("borrow_limit") {
            pq.borrow_limit = cx.limits(n, &f.field_path("borrow_limit"))?;
        }
        if let Some(n) = f.opt("lend_limit") {
            pq.lend_limit = cx.limits(n, &f.field_path("lend_limit"))?;
        }
        q.quotas.insert(default, pq);
    }
    if let Some(n) = f.opt("quotas") {
        q.quotas = pool_quotas(cx, n, &f.field_path("quotas"))?;
    }
    if let Some(n) = f.opt("weight") {
        let w = cx.number(n, &f.field_path("weight"))?;
        if w < 0.0 {
            return Err(cx.err(n.line, &f.field_path("weight"), format!("{w} is negative; a weight is >= 0")));
        }
        q.weight = w;
    }
    if let Some(n) = f.opt("ordering") {
        q.ordering = word(cx, n, &f.field_path("ordering"))?;
    }
    if let Some(n) = f.opt("preemption") {
        q.preemption = preemption(cx, n, &f.field_path("preemption"), q.preemption)?;
    }
    Ok(q)
}

fn pool_quotas(cx: &Cx, node: &Node, path: &str) -> R<BTreeMap<Name, PoolQuota>> {
    let mut out = BTreeMap::new();
    for (i, n) in cx.seq(node, path)?.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let mut f = cx.map(n, &p)?;
        let pool = cx.name(f.req("pool")?, &f.field_path("pool"))?;
        let nominal = match f.opt("nominal") {
            Some(x) => cx.resources(x, &f.field_path("nominal"))?,
            None => Default::default(),
        };
        let borrow_limit =
            f.opt("borrow_limit").map(|x| cx.limits(x, &f.field_path("borrow_limit"))).transpose()?.unwrap_or_default();
        let lend_limit =
            f.opt("lend_limit").map(|x| cx.limits(x, &f.field_path("lend_limit"))).transpose()?.unwrap_or_default();
        f.finish()?;
        if out.insert(pool.clone(), PoolQuota { nominal, borrow_limit, lend_limit }).is_some() {
            return Err(cx.err(n.line, &format!("{p}.pool"), format!("pool {pool} appears twice")));
        }
    }
    Ok(out)
}

fn preemption(cx: &Cx, node: &Node, path: &str, mut p: PreemptionPolicy) -> R<PreemptionPolicy> {
    let mut f = cx.map(node, path)?;
    if let Some(n) = f.opt("within_queue") {
        p.within_queue = word(cx, n, &f.field_path("within_queue"))?;
    }
    if let Some(n) = f.opt("reclaim_within_cohort") {
        p.reclaim_within_cohort = word(cx, n, &f.field_path("reclaim_within_cohort"))?;
    }
    if let Some(n) = f.opt("borrow_within_cohort") {
        p.borrow_within_cohort = borrow_within_cohort(cx, n, &f.field_path("borrow_within_cohort"))?;
    }
    f.finish()?;
    Ok(p)
}

fn borrow_within_cohort(cx: &Cx, node: &Node, path: &str) -> R<Option<BorrowWithinCohort>> {
    if let Ok(t) = cx.text(node, path) {
        return match t.as_str() {
            "Never" => Ok(None),
            _ => Err(cx.err(
                node.line,
                path,
                format!("{t:?}: expected Never or {{policy: LowerPriority, max_priority_threshold: N}}"),
            )),
        };
    }
    let mut f = cx.map(node, path)?;
    let policy = choice(cx, f.req("policy")?, &f.field_path("policy"), &[("Never", false), ("LowerPriority", true)])?;
    let threshold = match f.opt("max_priority_threshold") {
        Some(n) => {
            let v = cx.int(n, &f.field_path("max_priority_threshold"))?;
            Some(
                i32::try_from(v)
                    .map_err(|_| cx.err(n.line, &f.field_path("max_priority_threshold"), "out of range"))?,
            )
        }
        None => None,
    };
    f.finish()?;
    Ok(policy.then_some(BorrowWithinCohort { max_priority_threshold: threshold }))
}
