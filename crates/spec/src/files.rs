//! Single-object files for the `baton` client, in the scenario's shapes (docs/scenario-format.md), read
//! with the same reader so errors name file, line and field exactly as the simulator does:
//! a job (`baton submit -f job.yaml`) is a timeline `submit`, a queue (`baton queue create -f`)
//! is an entry of `queues`.

use std::path::Path;

use baton_model::job::JobSpec;
use baton_model::queue::QueueSpec;

use crate::de::{Cx, InputError, R};
use crate::yaml::{self, Node, Yaml};

/// Fields a scenario's `submit` may carry that only mean something on the simulator's
/// virtual clock; a real job runs its command for as long as it runs.
const SIMULATOR_ONLY_JOB_FIELDS: [&str; 3] = ["duration", "checkpoint_time", "user"];

/// A file that could not be read, or that does not hold what it should.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{0}")]
    Input(#[from] InputError),
    #[error("{file} is over {max} bytes; scenario, job and queue files are smaller")]
    TooLarge { file: String, max: u64 },
}

/// A job in the `submit` shape, from text; `file` names it in errors.
pub fn parse_job(file: &str, text: &str) -> Result<JobFile, InputError> {
    let cx = Cx { file };
    let root = document(&cx, text)?;
    if let Yaml::Map(entries) = &root.v {
        for (k, _) in entries {
            if let Yaml::Scalar { text: key, .. } = &k.v
                && SIMULATOR_ONLY_JOB_FIELDS.contains(&key.as_str())
            {
                let msg = if key == "user" {
                    "only the simulator reads this (who submitted a simulated job); a real job counts for \
                     the user of the token that submits it and runs as --run-as, so remove it"
                } else {
                    "only the simulator reads this (how long a simulated job takes); \
                     a real job runs its command, so remove it"
                };
                return Err(cx.err(k.line, key, msg));
            }
        }
    }
    let submit = crate::job::parse_submit(&cx, &root, "")?;
    Ok(JobFile { spec: submit.spec, after: submit.after, array: submit.array, elastic: submit.elastic })
}

/// What a job file gives: the job, and the jobs it waits for.
#[derive(Debug, Clone)]
pub struct JobFile {
    pub spec: JobSpec,
    pub after: Vec<baton_model::after::After>,
    /// Submitted as an array (decisions.md section 13).
    pub array: Option<baton_model::array::ArraySpec>,
    /// An elastic gang (decisions.md section 13).
    pub elastic: Option<baton_model::elastic::ElasticSpec>,
}

/// A queue in the shape of an entry of a scenario's `queues`, from text.
pub fn parse_queue(file: &str, text: &str) -> Result<crate::queue::QueueEntry, InputError> {
    let cx = Cx { file };
    let root = document(&cx, text)?;
    crate::queue::parse_queue(&cx, &root, "")
}

/// A queue file applied onto the queue as it is now (`baton queue update -f`): fields the
/// file leaves out keep their current values. The file's `name` must be `current`'s.
pub fn parse_queue_update(file: &str, text: &str, current: QueueSpec) -> Result<crate::queue::QueueEntry, InputError> {
    let cx = Cx { file };
    let root = document(&cx, text)?;
    let mut f = cx.map(&root, "")?;
    let name_node = f.req("name")?;
    let name = cx.name(name_node, "name")?;
    if name != current.name {
        let msg = format!("the file updates queue {name}, not {}", current.name);
        return Err(cx.err(name_node.line, "name", msg));
    }
    let limit = crate::queue::max_per_user(&cx, &mut f)?;
    let q = crate::queue::queue_fields(&cx, &mut f, current)?;
    f.finish()?;
    Ok((q, limit))
}

/// [`parse_job`] on a file's contents.
pub fn parse_job_file(path: &Path) -> Result<JobFile, FileError> {
    let (file, text) = read(path)?;
    Ok(parse_job(&file, &text)?)
}

/// [`parse_queue`] on a file's contents.
pub fn parse_queue_file(path: &Path) -> Result<crate::queue::QueueEntry, FileError> {
    let (file, text) = read(path)?;
    Ok(parse_queue(&file, &text)?)
}

/// Largest scenario, job or queue file read: far above any real one (a scenario of thousands
/// of jobs is a few MiB), and it keeps a wrong path (a disk image, `/dev/zero`) from filling
/// memory.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// A file's name (for errors) and text, refused past `MAX_FILE_BYTES`.
pub fn read_text(path: &Path) -> Result<(String, String), FileError> {
    read(path)
}

fn read(path: &Path) -> Result<(String, String), FileError> {
    use std::io::Read;
    let file = path.display().to_string();
    let failed = |source| FileError::Read { file: file.clone(), source };
    let mut text = String::new();
    // Reading at most one byte past the bound tells an oversized file (or an endless one
    // such as a device) from one exactly at it, without trusting its reported length.
    std::fs::File::open(path).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)).map_err(failed)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge { file, max: MAX_FILE_BYTES });
    }
    Ok((file, text))
}

fn document(cx: &Cx, text: &str) -> R<Node> {
    let root = yaml::parse(text).map_err(|e| cx.err(e.line, "", format!("not valid YAML: {}", e.message)))?;
    root.ok_or_else(|| cx.err(1, "", "the file is empty"))
}

#[cfg(test)]
mod tests {
    use baton_model::job::PriorityRef;
    use baton_model::name::Name;

    use super::*;

    #[test]
    fn a_job_file_reads_like_a_scenario_submit() {
        let text = "name: train-1\nqueue: team-a\npriority: 7\nreplicas: 2\nresources: {gpu: 4, memory: 64Gi}\n\
                    command: [python, train.py]\nenv: {A: '1'}\ngrace: 45\n";
        let s = parse_job("job.yaml", text).unwrap().spec;
        assert_eq!(s.name, Name::lit("train-1"));
        assert_eq!(s.priority, PriorityRef::Value(7));
        assert_eq!(s.tasks[0].replicas, 2);
        assert_eq!(s.tasks[0].resources.get("memory"), 64 << 30);
        assert_eq!(s.command, vec!["python", "train.py"]);
        assert_eq!(s.grace_ms, 45_000);
    }

    #[test]
    fn bad_job_files_name_file_line_and_field() {
        let e = parse_job("job.yaml", "name: a\nqueue: q\nresources: {gpu: 4x}\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.line, e.field.as_str()), ("job.yaml", 3, "resources.gpu"));
        let e = parse_job("job.yaml", "name: a\nqueue: q\nresources: {gpu: 1}\nduration: 60\n").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "duration"));
        let e = parse_job("job.yaml", "name: a\nqueue: q\nuser: alice\nresources: {gpu: 1}\n").unwrap_err();
        assert!(e.field == "user" && e.message.contains("the user of the token that submits it"), "{e}");
        let e = parse_job("job.yaml", "name: a\nresources: {gpu: 1}\n").unwrap_err();
        assert_eq!(e.field, "queue");
        assert!(parse_job("job.yaml", "").unwrap_err().message.contains("empty"));
    }

    #[test]
    fn a_job_file_names_the_jobs_it_waits_for_and_bad_ones_are_refused_by_field() {
        use baton_model::after::{JobRef, When};
        let head = "name: train\nqueue: q\nresources: {gpu: 1}\n";
        let f = parse_job("job.yaml", &format!("{head}after: [{{job: prep, when: ok}}, \"any:17\"]\n")).unwrap();
        assert_eq!(f.after.len(), 2);
        assert_eq!((&f.after[0].job, f.after[0].when), (&JobRef::Name(Name::lit("prep")), When::Ok));
        assert_eq!((&f.after[1].job, f.after[1].when), (&JobRef::Id(17), When::Any));
        let e = parse_job("job.yaml", &format!("{head}after: [{{job: prep, when: soon}}]\n")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "after[0].when"));
        assert!(e.message.contains("ok, any, notok, started"), "{e}");
        let e = parse_job("job.yaml", &format!("{head}after: [{{job: prep}}]\n")).unwrap_err();
        assert_eq!(e.field, "after[0].when");
        let e = parse_job("job.yaml", &format!("{head}after: [\"prep\"]\n")).unwrap_err();
        assert_eq!(e.field, "after[0]");
        let e = parse_job("job.yaml", &format!("{head}after: [{{job: prep, when: ok, extra: 1}}]\n")).unwrap_err();
        assert!(e.field.starts_with("after[0]"), "{e}");
    }

    #[test]
    fn queue_update_keeps_what_the_file_leaves_out() {
        let (q, none) = parse_queue("q.yaml", "name: team-a\ncohort: org\nquota: {gpu: 8}\nweight: 2\n").unwrap();
        assert_eq!(none, None);
        let (u, limit) =
            parse_queue_update("q.yaml", "name: team-a\nquota: {gpu: 4}\nmax_per_user: {gpu: 2}\n", q.clone()).unwrap();
        assert_eq!(limit.map(|l| l.get("gpu")), Some(2), "max_per_user comes apart from the queue");
        assert_eq!(u.cohort, q.cohort);
        assert_eq!(u.weight, 2.0);
        assert_eq!(u.quotas[&Name::lit("default")].nominal.get("gpu"), 4);
        let e = parse_queue_update("q.yaml", "name: team-b\n", q).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "name"));
    }
}
