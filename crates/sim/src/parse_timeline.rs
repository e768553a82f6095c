//! The timeline: steps in `at` order, each doing one thing.

use baton_model::maintenance::WindowSpec;
use baton_model::name::Name;

use crate::de::{Cx, R};
use crate::scenario::{Action, At, GpuMark, Step};
use crate::yaml::Node;

const VERBS: [&str; 14] = [
    "submit",
    "finish",
    "fail",
    "cancel",
    "pause",
    "resume",
    "node_down",
    "node_up",
    "cordon",
    "uncordon",
    "update_queue",
    "maintenance",
    "gpu_unhealthy",
    "gpu_healthy",
];

pub fn parse_timeline(cx: &Cx, node: &Node) -> R<Vec<Step>> {
    let mut out: Vec<Step> = Vec::new();
    for (i, n) in cx.seq(node, "timeline")?.iter().enumerate() {
        let path = format!("timeline[{i}]");
        let step = parse_step(cx, n, &path)?;
        if let Some(prev) = out.last()
            && step.at_ms < prev.at_ms
        {
            let msg = format!(
                "the timeline is ordered by `at`: this step at {}s comes after one at {}s",
                secs(step.at_ms),
                secs(prev.at_ms)
            );
            return Err(cx.err(n.line, &format!("{path}.at"), msg));
        }
        out.push(step);
    }
    Ok(out)
}

/// `{name, nodes: "g[1-4]", start, end}` (decisions.md section 14), times in seconds.
fn window(cx: &Cx, node: &Node, path: &str) -> R<WindowSpec> {
    let mut f = cx.map(node, path)?;
    let name = cx.name(f.req("name")?, &f.field_path("name"))?;
    let nnode = f.req("nodes")?;
    let npath = f.field_path("nodes");
    let pattern = cx.text(nnode, &npath)?;
    let nodes = crate::hostlist::expand_list(&pattern)
        .map_err(|e| cx.err(nnode.line, &npath, e))?
        .into_iter()
        .map(|n| Name::new(n.as_str()).map_err(|e| cx.err(nnode.line, &npath, e.to_string())))
        .collect::<R<Vec<Name>>>()?;
    let start_ms = cx.seconds(f.req("start")?, &f.field_path("start"))?;
    let enode = f.req("end")?;
    let end_ms = cx.seconds(enode, &f.field_path("end"))?;
    f.finish()?;
    if end_ms <= start_ms {
        return Err(cx.err(enode.line, &format!("{path}.end"), "a window ends after it starts"));
    }
    Ok(WindowSpec { name, nodes, start_ms, end_ms })
}

/// `{node: g3, gpu: 2, error: "XID 79"}` (decisions.md section 14); `gpu_healthy` has no
/// error.
fn gpu_mark(cx: &Cx, node: &Node, path: &str, unhealthy: bool) -> R<GpuMark> {
    let mut f = cx.map(node, path)?;
    let name = cx.name(f.req("node")?, &f.field_path("node"))?;
    let gpu = cx.count(f.req("gpu")?, &f.field_path("gpu"))?;
    let error = if unhealthy {
        let enode = f.req("error")?;
        let error = cx.text(enode, &f.field_path("error"))?;
        if error.trim().is_empty() {
            return Err(cx.err(enode.line, &f.field_path("error"), "say what is wrong with the GPU (e.g. \"XID 79\")"));
        }
        Some(error)
    } else {
        None
    };
    f.finish()?;
    Ok(GpuMark { node: name, gpu, error })
}

fn secs(ms: u64) -> String {
    if ms % 1000 == 0 { (ms / 1000).to_string() } else { format!("{}", ms as f64 / 1000.0) }
}

fn parse_step(cx: &Cx, node: &Node, path: &str) -> R<Step> {
    let mut f = cx.map(node, path)?;
    let at_ms = cx.seconds(f.req("at")?, &f.field_path("at"))?;
    let present: Vec<&str> = VERBS.iter().copied().filter(|v| f.has(v)).collect();
    if present.len() != 1 {
        let msg = format!(
            "a step does exactly one of: {} (found {})",
            VERBS.join(", "),
            if present.is_empty() { "none".into() } else { present.join(", ") }
        );
        return Err(cx.err(node.line, path, msg));
    }
    let verb = present[0];
    let vpath = f.field_path(verb);
    let target =
        |cx: &Cx, n: &Node| -> R<At<Name>> { Ok(At { v: cx.name(n, &vpath)?, line: n.line, path: vpath.clone() }) };
    let action = match verb {
        "submit" => Action::Submit(Box::new(baton_spec::job::parse_submit(cx, f.req("submit")?, &vpath)?)),
        "finish" => Action::Finish(target(cx, f.req("finish")?)?),
        "fail" => Action::Fail(target(cx, f.req("fail")?)?),
        "cancel" => Action::Cancel(target(cx, f.req("cancel")?)?),
        "pause" => Action::Pause(target(cx, f.req("pause")?)?),
        "resume" => Action::Resume(target(cx, f.req("resume")?)?),
        "node_down" => Action::NodeDown(target(cx, f.req("node_down")?)?),
        "node_up" => Action::NodeUp(target(cx, f.req("node_up")?)?),
        "cordon" => Action::Cordon(target(cx, f.req("cordon")?)?),
        "uncordon" => Action::Uncordon(target(cx, f.req("uncordon")?)?),
        "maintenance" => Action::Maintenance(At {
            v: window(cx, f.req("maintenance")?, &vpath)?,
            line: node.line,
            path: vpath.clone(),
        }),
        "gpu_unhealthy" | "gpu_healthy" => {
            let n = f.req(if verb == "gpu_unhealthy" { "gpu_unhealthy" } else { "gpu_healthy" })?;
            let v = gpu_mark(cx, n, &vpath, verb == "gpu_unhealthy")?;
            Action::Gpu(At { v, line: n.line, path: vpath.clone() })
        }
        _ => {
            let n = f.req("update_queue")?;
            let mut uf = cx.map(n, &vpath)?;
            let name_node = uf.req("name")?;
            let name = At {
                v: cx.name(name_node, &uf.field_path("name"))?,
                line: name_node.line,
                path: uf.field_path("name"),
            };
            // Check the fields now against a blank queue, so bad input stops the run before it starts.
            baton_spec::queue::queue_fields(cx, &mut uf, baton_model::queue::QueueSpec::named(name.v.as_str()))?;
            uf.finish()?;
            Action::UpdateQueue(name, n.clone())
        }
    };
    // Every verb was looked at above, so `finish` only reports unknown fields.
    for v in VERBS {
        let _ = f.opt(v);
    }
    f.finish()?;
    Ok(Step { at_ms, line: node.line, path: path.to_string(), action })
}
