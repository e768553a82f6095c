//! `baton submit`: a job from flags (`-- COMMAND ARGS...`) or from a file in the scenario's
//! `submit` shape (`-f job.yaml`). Every submit carries a request id (fresh unless given),
//! so a retry, by this CLI or by the user with `--request-id`, never makes a second job.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::PathBuf;

use baton_model::after::After;
use baton_model::array::ArraySpec;
use baton_model::limits::{MAX_DEPENDENCIES_PER_JOB, MAX_REQUEST_ID_LEN};
use baton_model::name::Name;
use baton_model::quantity::parse_quantity;
use baton_model::resources::Resources;
use baton_model::tenancy::UnixUser;
use baton_model::topology::LevelNeed;
use baton_proto::convert;
use baton_proto::v1;
use clap::Args;
use serde_json::json;

use crate::client::error::{ClientError, Subject};
use crate::client::human::{parse_duration_ms, parse_env, parse_time_limit_ms, parse_word};
use crate::client::output::{Format, data_text};
use crate::client::{Conn, ConnArgs};

/// The one task a job submitted by flags has.
pub const FLAG_TASK_NAME: &str = "main";

#[derive(Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The job in a file (the scenario `submit` shape); --name and --queue override its fields.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Job name (required unless -f).
    #[arg(long)]
    pub name: Option<String>,
    /// Queue to charge (required unless -f).
    #[arg(long)]
    pub queue: Option<String>,
    /// Priority class (default: the server's default class, train).
    #[arg(long, conflicts_with_all = ["priority", "file"])]
    pub class: Option<String>,
    /// A raw priority value instead of a class (the job is then preemptible).
    #[arg(long, allow_negative_numbers = true, conflicts_with = "file")]
    pub priority: Option<i32>,
    /// GPUs per replica [default: 1]: whole GPUs, or a fraction of one shared GPU (0.5 or
    /// 500m; decisions.md section 11).
    #[arg(long, conflicts_with = "file")]
    pub gpus: Option<String>,
    /// CPUs per replica (e.g. 2, 2.5 or 500m).
    #[arg(long, conflicts_with = "file")]
    pub cpu: Option<String>,
    /// Memory per replica (e.g. 64Gi).
    #[arg(long, conflicts_with = "file")]
    pub memory: Option<String>,
    /// Other resources per replica, NAME=QTY (repeatable, or comma-separated), e.g.
    /// `--resources mig-1g.10gb=1` for one MIG slice (decisions.md section 11); a job that
    /// asks for slices asks for no whole GPU unless --gpus says so.
    #[arg(long = "resources", value_name = "NAME=QTY", value_delimiter = ',', conflicts_with = "file")]
    pub resources: Vec<String>,
    /// Replicas in the gang, placed all at once or not at all [default: 1].
    #[arg(long, conflicts_with = "file")]
    pub replicas: Option<u32>,
    /// An elastic gang: start with as many of --replicas as fit, down to this many; shrunk
    /// and grown back between the two, each resize a new attempt from the checkpoint with
    /// BATON_WORLD_SIZE set [default: not elastic].
    #[arg(long, conflicts_with_all = ["file", "array"])]
    pub min_replicas: Option<u32>,
    /// A pool the job may use; repeat in order of preference.
    #[arg(long = "pool", conflicts_with = "file")]
    pub pools: Vec<String>,
    /// Keep the gang on one node or one rack (`node`, `rack`), or name the cluster's topology
    /// levels: `required=nvlink,preferred=rack` (every replica in one NVLink domain, the
    /// fewest racks within it).
    #[arg(long, conflicts_with = "file")]
    pub topology: Option<String>,
    /// What preemption does to this job (checkpoint, requeue, cancel, suspend) [default: the
    /// server's, checkpoint].
    #[arg(long, value_parser = parse_word::<v1::PreemptionMode>, conflicts_with = "file")]
    pub preemption_mode: Option<v1::PreemptionMode>,
    /// Time to checkpoint after the signal before a kill (e.g. 30s, 2m) [default: 30s].
    #[arg(long, value_parser = parse_duration_ms, conflicts_with = "file")]
    pub grace: Option<u64>,
    /// After each start the job is not preempted for this long.
    #[arg(long, value_parser = parse_duration_ms, conflicts_with = "file")]
    pub min_runtime: Option<u64>,
    /// Longest one attempt may run (e.g. 90s, 2h); then it is stopped and ends Failed with
    /// the reason "time limit" [default: none]; at most 365d.
    #[arg(long, value_parser = parse_time_limit_ms, conflicts_with = "file")]
    pub time_limit: Option<u64>,
    /// An environment variable for the job (KEY=VALUE); repeatable.
    #[arg(long = "env", conflicts_with = "file")]
    pub env: Vec<String>,
    /// The signal asking the job to checkpoint and exit [default: SIGTERM].
    #[arg(long, conflicts_with = "file")]
    pub checkpoint_signal: Option<String>,
    /// The Unix user the job runs as on its nodes [default: your token's user]; another
    /// user needs role operator, root also the cluster's allow_root_jobs.
    #[arg(long, value_name = "USER")]
    pub run_as: Option<String>,
    /// Jobs to wait for, as WHEN:JOB, comma-separated or repeated (e.g. ok:prep,any:clean):
    /// ok (succeeded), any (ended), notok (failed or cancelled), started; JOB is a name or
    /// an id. Adds to the file's `after:`.
    #[arg(long, value_delimiter = ',', value_name = "WHEN:JOB")]
    pub after: Vec<String>,
    /// Submit an array of jobs NAME-FIRST .. NAME-LAST, at most MAX running at once
    /// (FIRST-LAST[%MAX], or N for 0-(N-1)); each element finds its index in
    /// BATON_ARRAY_INDEX. Overrides the file's `array:`.
    #[arg(long, value_name = "FIRST-LAST[%MAX]", value_parser = parse_array)]
    pub array: Option<ArraySpec>,
    /// Makes the submit idempotent; reuse it to retry safely [default: a fresh random id].
    #[arg(long)]
    pub request_id: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
    /// The program and its arguments (after --); may come from the file's `command:` instead.
    #[arg(last = true)]
    pub command: Vec<String>,
}

fn usage(msg: impl Into<String>) -> ClientError {
    ClientError::Usage(msg.into())
}

fn flag_name(text: &str, flag: &str) -> Result<Name, ClientError> {
    Name::new(text).map_err(|e| usage(format!("{flag}: {e}")))
}

/// A quantity of `resource` given with `flag`, in the resource's smallest unit.
fn quantity(resource: &str, text: &str, flag: &str) -> Result<u64, ClientError> {
    parse_quantity(resource, text).map_err(|e| usage(format!("{flag}: {e}")))
}

/// The job the flags (or the file and the flags) describe, as sent; nothing is sent when
/// this fails. From flags, what the user did not choose is left empty for the server to fill
/// (class, grace, preemption mode, checkpoint signal); a file is read as the simulator reads
/// it (docs/scenario-format.md, "A job"), its defaults included.
pub fn build_spec(a: &SubmitArgs) -> Result<Built, ClientError> {
    let (mut spec, mut after, file_array) = match &a.file {
        Some(path) => {
            let file = from_file(a, path)?;
            let mut spec = convert::job_spec_to_proto(&file.spec);
            if let Some(e) = file.elastic {
                spec.tasks[e.task as usize].min_replicas = Some(e.min_replicas);
            }
            (spec, file.after, file.array)
        }
        None => (from_flags(a)?, Vec::new(), None),
    };
    let array = a.array.or(file_array).map(|x| convert::array_spec_to_proto(&x));
    for text in &a.after {
        after.push(After::parse(text).map_err(|e| usage(format!("--after: {e}")))?);
    }
    if spec.command.is_empty() {
        return Err(usage(match &a.file {
            Some(p) => format!("{} has no command: give it as `command:` in the file or after --", p.display()),
            None => "no command to run: give it after --, e.g. baton submit --name j --queue q -- python train.py"
                .to_string(),
        }));
    }
    if let Some(n) = &a.name {
        spec.name = flag_name(n, "--name")?.to_string();
    }
    if let Some(q) = &a.queue {
        spec.queue = flag_name(q, "--queue")?.to_string();
    }
    if after.len() > MAX_DEPENDENCIES_PER_JOB {
        return Err(usage(format!("--after: at most {MAX_DEPENDENCIES_PER_JOB} dependencies per job")));
    }
    Ok(Built { spec, after: after.iter().map(convert::after_to_proto).collect(), array })
}

/// What a submit sends: the job (an array's elements' spec), what it waits for, and the
/// array, if it is one.
pub struct Built {
    pub spec: v1::JobSpec,
    pub after: Vec<v1::Dependency>,
    pub array: Option<v1::ArraySpec>,
}

fn parse_array(text: &str) -> Result<ArraySpec, String> {
    ArraySpec::parse(text)
}

fn from_file(a: &SubmitArgs, path: &std::path::Path) -> Result<baton_spec::JobFile, ClientError> {
    let mut file = baton_spec::parse_job_file(path).map_err(|e| usage(e.to_string()))?;
    let spec = &mut file.spec;
    if !a.command.is_empty() {
        if !spec.command.is_empty() {
            return Err(usage(format!(
                "{} gives a command and so does the command line after --; keep one",
                path.display()
            )));
        }
        spec.command = a.command.clone();
    }
    Ok(file)
}

/// `--resources NAME=QTY`: resources other than those with flags of their own.
fn other_resources(flags: &[String]) -> Result<Resources, ClientError> {
    let mut r = Resources::new();
    for f in flags {
        let (name, qty) = f.split_once('=').ok_or_else(|| usage(format!("--resources {f:?}: expected NAME=QTY")))?;
        let name = name.trim();
        if matches!(name, "gpu" | "cpu" | "memory" | baton_model::resources::GPU_FRACTION) {
            return Err(usage(format!(
                "--resources {f:?}: give {name} with --{}",
                if name == "cpu" || name == "memory" { name } else { "gpus" }
            )));
        }
        baton_model::resources::validate_resource_name(name).map_err(|e| usage(format!("--resources {f:?}: {e}")))?;
        if r.get(name) > 0 {
            return Err(usage(format!("--resources {f:?}: {name} is given twice")));
        }
        r.set(name, quantity(name, qty.trim(), "--resources")?);
    }
    Ok(r)
}

/// One task of `--replicas` (default 1) replicas of `--gpus` (default 1), `--cpu`, `--memory`.
fn flag_task(a: &SubmitArgs) -> Result<v1::TaskSpec, ClientError> {
    let mut resources = other_resources(&a.resources)?;
    let slices = resources.slices().next().is_some();
    let milli = match &a.gpus {
        Some(g) => baton_model::quantity::parse_gpu_request(g).map_err(|e| usage(format!("--gpus: {e}")))?,
        None if slices => 0,
        None => 1000,
    };
    resources.set_gpus_milli(milli);
    if let Some(c) = &a.cpu {
        resources.set("cpu", quantity("cpu", c, "--cpu")?);
    }
    if let Some(m) = &a.memory {
        resources.set("memory", quantity("memory", m, "--memory")?);
    }
    let replicas = a.replicas.unwrap_or(1);
    if replicas == 0 {
        return Err(usage("--replicas: a job needs at least one replica"));
    }
    match a.min_replicas {
        Some(0) => return Err(usage("--min-replicas: must be at least 1")),
        Some(m) if m > replicas => {
            return Err(usage(format!("--min-replicas: {m} is above --replicas ({replicas})")));
        }
        _ => {}
    }
    Ok(v1::TaskSpec {
        name: FLAG_TASK_NAME.to_string(),
        replicas,
        resources: Some(convert::resources_to_proto(&resources)),
        pools: Vec::new(),
        min_replicas: a.min_replicas,
    })
}

fn from_flags(a: &SubmitArgs) -> Result<v1::JobSpec, ClientError> {
    let name = a.name.as_deref().ok_or_else(|| usage("--name is required (or give the job with -f job.yaml)"))?;
    let queue = a.queue.as_deref().ok_or_else(|| usage("--queue is required (or give the job with -f job.yaml)"))?;
    let priority_class = a.class.as_deref().map(|c| flag_name(c, "--class")).transpose()?;
    let pools = a.pools.iter().map(|p| flag_name(p, "--pool").map(|n| n.to_string())).collect::<Result<Vec<_>, _>>()?;
    let env: BTreeMap<String, String> = parse_env(&a.env).map_err(usage)?;
    let topology = flag_topology(a.topology.as_deref())?;
    Ok(v1::JobSpec {
        name: flag_name(name, "--name")?.to_string(),
        queue: flag_name(queue, "--queue")?.to_string(),
        priority_class: priority_class.map(|c| c.to_string()).unwrap_or_default(),
        priority_value: a.priority,
        tasks: vec![flag_task(a)?],
        pools,
        topology: topology.0.into(),
        topology_required: topology.1,
        topology_preferred: topology.2,
        preemption_mode: a.preemption_mode.unwrap_or_default().into(),
        grace_ms: a.grace,
        min_runtime_ms: a.min_runtime.unwrap_or(0),
        time_limit_ms: a.time_limit,
        command: a.command.clone(),
        env: env.into_iter().collect(),
        checkpoint_signal: a.checkpoint_signal.clone().unwrap_or_default(),
    })
}

/// `--topology`: the shorthand as the enum, levels as the two strings.
fn flag_topology(text: Option<&str>) -> Result<(v1::Topology, String, String), ClientError> {
    use baton_model::job::Topology;
    let parsed = text.map(LevelNeed::parse).transpose().map_err(|e| usage(format!("--topology: {e}")))?.flatten();
    Ok(match parsed {
        None => (v1::Topology::Unspecified, String::new(), String::new()),
        Some(Topology::Node) => (v1::Topology::Node, String::new(), String::new()),
        Some(Topology::Rack) => (v1::Topology::Rack, String::new(), String::new()),
        Some(t @ Topology::Levels(_)) => (
            v1::Topology::Unspecified,
            t.required().map(|l| l.to_string()).unwrap_or_default(),
            t.preferred().map(|l| l.to_string()).unwrap_or_default(),
        ),
    })
}

/// A fresh request id: 128 random bits as hex. std's `RandomState` is seeded from the OS's
/// randomness per instance, which is all an idempotency key needs.
pub fn fresh_request_id() -> String {
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.write_u32(std::process::id());
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

pub async fn run(conn: &Conn, a: &SubmitArgs, out: &mut dyn Write) -> Result<(), ClientError> {
    let Built { spec, after, array } = build_spec(a)?;
    let count = array.as_ref().map(|x| x.count);
    let run_as = match &a.run_as {
        Some(u) => UnixUser::new(u.as_str()).map_err(|e| usage(format!("--run-as: {e}")))?.to_string(),
        None => String::new(),
    };
    let request_id = match &a.request_id {
        Some(id) if id.is_empty() || id.len() > MAX_REQUEST_ID_LEN => {
            return Err(usage(format!("--request-id must be 1 to {MAX_REQUEST_ID_LEN} characters")));
        }
        Some(id) => id.clone(),
        None => fresh_request_id(),
    };
    // Said before sending, so a user whose submit was cut off can retry with the same id.
    eprintln!("request id: {request_id}");
    let name = spec.name.clone();
    let request = v1::SubmitRequest { spec: Some(spec), request_id: request_id.clone(), run_as, after, array };
    let reply = conn
        .call(Subject::Other, &name, |mut c| {
            let r = request.clone();
            async move { c.submit(r).await }
        })
        .await?;
    let data = json!({ "id": reply.id, "name": reply.name, "duplicate": reply.duplicate, "request_id": request_id });
    let text = match data_text(a.output, &data) {
        Some(t) => t,
        None if reply.duplicate => format!("job {} already submitted (same request id)\n", reply.name),
        None => match count {
            Some(n) => format!("submitted array {} of {n} jobs (id {})\n", reply.name, reply.id),
            None => format!("submitted job {} (id {})\n", reply.name, reply.id),
        },
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}
