//! A job as a scenario's timeline `submit` and `baton submit -f job.yaml` write it
//! (docs/scenario-format.md, "A job").

use std::collections::BTreeMap;

use baton_model::after::{After, JobRef, When};
use baton_model::array::ArraySpec;
use baton_model::class::DEFAULT_CLASS;
use baton_model::elastic::ElasticSpec;
use baton_model::job::{JobSpec, PreemptionMode, PriorityRef, TaskSpec, Topology};
use baton_model::limits::DEFAULT_GRACE_MS;
use baton_model::name::Name;
use baton_model::topology::{LevelName, LevelNeed};

use crate::de::{Cx, R};
use crate::queue::word;
use crate::yaml::{Node, Yaml};

/// A job in the `submit` shape: the spec, and what only the simulator reads (a real job runs
/// its command for as long as it runs).
#[derive(Debug, Clone)]
pub struct Submit {
    pub spec: JobSpec,
    /// The jobs it waits for (decisions.md section 13); empty: none.
    pub after: Vec<After>,
    /// Submitted as an array of jobs `NAME-i` (decisions.md section 13).
    pub array: Option<ArraySpec>,
    /// An elastic gang: the task group that may run with fewer replicas (section 13).
    pub elastic: Option<ElasticSpec>,
    /// Seconds of work to finish; `None`: runs until told.
    pub duration_ms: Option<u64>,
    /// How long the job takes to checkpoint and exit after its signal.
    pub checkpoint_time_ms: u64,
    /// Trace jobs: how often the job writes a checkpoint on its own; a stop that is not a
    /// checkpoint keeps the work up to the last one. `None`: only checkpoints on a signal.
    pub checkpoint_interval_ms: Option<u64>,
    /// Who submitted it (`user:`, decisions.md section 12): the Unix user it runs as, which
    /// is the user its usage counts for when no token names one. `None`: the queue's name.
    pub user: Option<baton_model::tenancy::UnixUser>,
    /// Lines of fields that name other things, for precise errors.
    pub queue_line: usize,
    pub priority_line: usize,
}

/// A job as a scenario's `submit` (and `baton submit -f job.yaml`) writes it.
pub fn parse_submit(cx: &Cx, node: &Node, path: &str) -> R<Submit> {
    let mut f = cx.map(node, path)?;
    let name = cx.name(f.req("name")?, &f.field_path("name"))?;
    let qnode = f.req("queue")?;
    let queue = cx.name(qnode, &f.field_path("queue"))?;
    let (priority, priority_line) = match f.opt("priority") {
        Some(n) => (priority(cx, n, &f.field_path("priority"))?, n.line),
        None => (PriorityRef::Class(Name::lit(DEFAULT_CLASS)), f.line),
    };
    let (tasks, elastic) = tasks(cx, &mut f)?;
    let pools = f.opt("pools").map(|n| cx.names(n, &f.field_path("pools"))).transpose()?;
    let topology = f.opt("topology").map(|n| topology(cx, n, &f.field_path("topology"))).transpose()?.flatten();
    let preemption_mode = match f.opt("preemption_mode") {
        Some(n) => word(cx, n, &f.field_path("preemption_mode"))?,
        None => PreemptionMode::Checkpoint,
    };
    let ms = |f: &mut crate::de::Fields, key: &'static str| -> R<Option<u64>> {
        let p = f.field_path(key);
        f.opt(key).map(|n| cx.seconds(n, &p)).transpose()
    };
    let grace_ms = ms(&mut f, "grace")?.unwrap_or(DEFAULT_GRACE_MS);
    let checkpoint_time_ms = ms(&mut f, "checkpoint_time")?.unwrap_or(0);
    let min_runtime_ms = ms(&mut f, "min_runtime")?.unwrap_or(0);
    let duration_ms = ms(&mut f, "duration")?;
    let time_limit_ms = match f.opt("time_limit") {
        Some(n) => match cx.seconds(n, &f.field_path("time_limit"))? {
            0 => return Err(cx.err(n.line, &f.field_path("time_limit"), "must be above 0 seconds")),
            t => Some(t),
        },
        None => None,
    };
    let command = match f.opt("command") {
        Some(n) => cx
            .seq(n, &f.field_path("command"))?
            .iter()
            .map(|a| cx.text(a, &f.field_path("command")))
            .collect::<R<Vec<_>>>()?,
        None => Vec::new(),
    };
    let env = match f.opt("env") {
        Some(n) => {
            let p = f.field_path("env");
            let mut ef = cx.map(n, &p)?;
            ef.take_all()
                .into_iter()
                .map(|(k, _, v)| Ok((k.clone(), cx.text(v, &format!("{p}.{k}"))?)))
                .collect::<R<BTreeMap<_, _>>>()?
        }
        None => BTreeMap::new(),
    };
    let checkpoint_signal =
        f.opt("checkpoint_signal").map(|n| cx.text(n, &f.field_path("checkpoint_signal"))).transpose()?;
    let after = match f.opt("after") {
        Some(n) => dependencies(cx, n, &f.field_path("after"))?,
        None => Vec::new(),
    };
    let array = f.opt("array").map(|n| array(cx, n, &f.field_path("array"))).transpose()?;
    let user = match f.opt("user") {
        Some(n) => {
            let t = cx.text(n, &f.field_path("user"))?;
            Some(
                baton_model::tenancy::UnixUser::new(t)
                    .map_err(|e| cx.err(n.line, &f.field_path("user"), e.to_string()))?,
            )
        }
        None => None,
    };
    if let (Some(_), Some(_)) = (&array, &elastic) {
        let msg = "an array's elements cannot be elastic gangs (min_replicas); submit them one by one";
        return Err(cx.err(f.line, &f.field_path("array"), msg));
    }
    f.finish()?;
    let spec = JobSpec {
        name,
        queue,
        priority,
        tasks,
        pools,
        topology,
        preemption_mode,
        grace_ms,
        min_runtime_ms,
        time_limit_ms,
        command,
        env,
        checkpoint_signal,
    };
    Ok(Submit {
        spec,
        after,
        array,
        elastic,
        duration_ms,
        checkpoint_time_ms,
        checkpoint_interval_ms: None,
        user,
        queue_line: qnode.line,
        priority_line,
    })
}

/// `[{job: prep, when: ok}, "any:clean"]`: each a mapping, or the command line's `WHEN:JOB`.
/// A job that is all digits is taken as an id.
fn dependencies(cx: &Cx, node: &Node, path: &str) -> R<Vec<After>> {
    let mut out = Vec::new();
    for (i, item) in cx.seq(node, path)?.iter().enumerate() {
        let ip = format!("{path}[{i}]");
        if let Yaml::Scalar { text, .. } = &item.v {
            out.push(After::parse(text).map_err(|e| cx.err(item.line, &ip, e))?);
            continue;
        }
        let mut f = cx.map(item, &ip)?;
        let jnode = f.req("job")?;
        let jtext = cx.text(jnode, &f.field_path("job"))?;
        let job = JobRef::parse(&jtext).map_err(|e| cx.err(jnode.line, &f.field_path("job"), e.to_string()))?;
        let wnode = f.req("when")?;
        let wtext = cx.text(wnode, &f.field_path("when"))?;
        let when = When::parse(&wtext).ok_or_else(|| {
            cx.err(wnode.line, &f.field_path("when"), format!("{wtext:?} is not one of ok, any, notok, started"))
        })?;
        f.finish()?;
        out.push(After { job, when });
    }
    Ok(out)
}

/// `{count: N, max_running: M, first: F}` (`max_running` and `first`, 0, may be left out),
/// or the command line's `0-999%50`.
fn array(cx: &Cx, node: &Node, path: &str) -> R<ArraySpec> {
    if let Yaml::Scalar { text, .. } = &node.v {
        return ArraySpec::parse(text).map_err(|e| cx.err(node.line, path, e));
    }
    let mut f = cx.map(node, path)?;
    let count = cx.count(f.req("count")?, &f.field_path("count"))?;
    let first = f.opt("first").map(|n| cx.count(n, &f.field_path("first"))).transpose()?.unwrap_or(0);
    let max_running = f.opt("max_running").map(|n| cx.count(n, &f.field_path("max_running"))).transpose()?;
    f.finish()?;
    let a = ArraySpec { first, count, max_running };
    a.validate()
        .map_err(|(field, e)| cx.err(node.line, &format!("{path}.{}", field.trim_start_matches("array.")), e))?;
    Ok(a)
}

/// A class name, or an integer (then the job is preemptible).
fn priority(cx: &Cx, node: &Node, path: &str) -> R<PriorityRef> {
    if let Yaml::Scalar { text, plain: true } = &node.v
        && let Ok(v) = text.parse::<i64>()
    {
        let v = i32::try_from(v).map_err(|_| cx.err(node.line, path, format!("{v} is out of range")))?;
        return Ok(PriorityRef::Value(v));
    }
    Ok(PriorityRef::Class(cx.name(node, path)?))
}

/// `min_replicas` of a task of `replicas`: 1 to `replicas` (decisions.md section 13).
fn min_replicas(cx: &Cx, node: &Node, path: &str, replicas: u32) -> R<u32> {
    let min = cx.count(node, path)?;
    if min == 0 || min > replicas {
        let why =
            if min == 0 { "must be at least 1".to_string() } else { format!("{min} is above replicas ({replicas})") };
        return Err(cx.err(node.line, path, why));
    }
    Ok(min)
}

/// The job's tasks, and the one that is elastic (`min_replicas`), if any.
fn tasks(cx: &Cx, f: &mut crate::de::Fields) -> R<(Vec<TaskSpec>, Option<ElasticSpec>)> {
    let short = f.has("resources") || f.has("replicas");
    if short && f.has("tasks") {
        return Err(cx.err(f.line, &f.field_path("tasks"), "use either resources/replicas or tasks, not both"));
    }
    if let Some(n) = f.opt("tasks") {
        if let Some(m) = f.opt("min_replicas") {
            return Err(cx.err(m.line, &f.field_path("min_replicas"), "give min_replicas on the elastic task"));
        }
        let p = f.field_path("tasks");
        let mut elastic: Option<ElasticSpec> = None;
        let mut out = Vec::new();
        for (i, t) in cx.seq(n, &p)?.iter().enumerate() {
            let tp = format!("{p}[{i}]");
            let mut tf = cx.map(t, &tp)?;
            let name = cx.name(tf.req("name")?, &tf.field_path("name"))?;
            let replicas = match tf.opt("replicas") {
                Some(r) => cx.count(r, &tf.field_path("replicas"))?,
                None => 1,
            };
            let resources = cx.request(tf.req("resources")?, &tf.field_path("resources"))?;
            let pools = tf.opt("pools").map(|x| cx.names(x, &tf.field_path("pools"))).transpose()?;
            if replicas == 0 {
                return Err(cx.err(t.line, &format!("{tp}.replicas"), "a task needs at least one replica"));
            }
            if let Some(m) = tf.opt("min_replicas") {
                let mp = tf.field_path("min_replicas");
                if elastic.is_some() {
                    return Err(cx.err(m.line, &mp, "only one task group of a job may be elastic"));
                }
                let min_replicas = min_replicas(cx, m, &mp, replicas)?;
                elastic = Some(ElasticSpec { task: i as u32, min_replicas });
            }
            tf.finish()?;
            out.push(TaskSpec { name, replicas, resources, pools });
        }
        if out.is_empty() {
            return Err(cx.err(n.line, &p, "a job needs at least one task"));
        }
        return Ok((out, elastic));
    }
    let line = f.line;
    let rnode = f
        .opt("resources")
        .ok_or_else(|| cx.err(line, &f.field_path("resources"), "a job needs resources (or tasks)"))?;
    let resources = cx.request(rnode, &f.field_path("resources"))?;
    let replicas = match f.opt("replicas") {
        Some(r) => {
            let v = cx.count(r, &f.field_path("replicas"))?;
            if v == 0 {
                return Err(cx.err(r.line, &f.field_path("replicas"), "a job needs at least one replica"));
            }
            v
        }
        None => 1,
    };
    let elastic = match f.opt("min_replicas") {
        Some(m) => {
            Some(ElasticSpec { task: 0, min_replicas: min_replicas(cx, m, &f.field_path("min_replicas"), replicas)? })
        }
        None => None,
    };
    Ok((vec![TaskSpec { name: Name::lit("main"), replicas, resources, pools: None }], elastic))
}

/// `topology: node|rack|LEVEL` (the level required) or `{required: LEVEL, preferred: LEVEL}`
/// (decisions.md section 10). Whether the cluster declares the levels is the submit's check.
fn topology(cx: &Cx, node: &Node, path: &str) -> R<Option<Topology>> {
    let level = |n: &Node, p: &str| -> R<LevelName> {
        let t = cx.text(n, p)?;
        LevelName::new(&t).map_err(|e| cx.err(n.line, p, e.to_string()))
    };
    let (required, preferred) = match &node.v {
        crate::yaml::Yaml::Map(_) => {
            let mut f = cx.map(node, path)?;
            let r = f.opt("required").map(|n| level(n, &f.field_path("required"))).transpose()?;
            let p = f.opt("preferred").map(|n| level(n, &f.field_path("preferred"))).transpose()?;
            f.finish()?;
            (r, p)
        }
        _ => (Some(level(node, path)?), None),
    };
    LevelNeed::topology(required, preferred).map_err(|e| cx.err(node.line, path, e.to_string()))
}
