//! Every scenario the project ships passes its expectations, and simulating it twice gives
//! byte-identical output.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no scenarios in {}", dir.display());
    v
}

fn json(path: &Path) -> (String, baton_sim::Outcome) {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.display().to_string();
    let outcome = baton_sim::run(&name, &text).unwrap_or_else(|e| panic!("{e}"));
    (serde_json::to_string(&outcome.report).unwrap(), outcome)
}

fn check_dir(dir: &Path, need_expectations: bool) {
    for path in yaml_files(dir) {
        let (first, outcome) = json(&path);
        let failures: Vec<String> = outcome.failures.iter().map(|f| f.to_string()).collect();
        assert!(failures.is_empty(), "{}:\n{}", path.display(), failures.join("\n"));
        if need_expectations {
            assert!(outcome.checked > 0, "{} checks nothing", path.display());
        }
        let (second, _) = json(&path);
        assert_eq!(first, second, "{} is not deterministic", path.display());
    }
}

#[test]
fn seed_scenarios_pass() {
    check_dir(&root().join("tests/scenarios"), true);
}

#[test]
fn example_scenarios_pass() {
    check_dir(&root().join("examples/scenarios"), true);
}

#[test]
fn regressions_simulate_cleanly() {
    check_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions"), false);
}

/// The seed stories of the specification, by file name.
const SEED_STORIES: [&str; 8] = [
    "cac-private-public.yaml",
    "determined-priority.yaml",
    "kueue-cohort-preemption.yaml",
    "runai-preemption.yaml",
    "runai-priority-classes.yaml",
    "slurm-fewest-victims.yaml",
    "slurm-preempt-modes.yaml",
    "slurm-suspend-gang.yaml",
];

fn names(files: &[PathBuf]) -> Vec<String> {
    files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
}

/// The seed stories are copied into the repository so that a clone alone can check them
/// (`seed_scenarios_pass`): the copies are exactly the seed stories, whether or not the
/// shared originals sit beside the checkout.
#[test]
fn the_in_repo_copies_are_the_seed_stories() {
    assert_eq!(names(&yaml_files(&root().join("tests/scenarios"))), SEED_STORIES);
}

/// Where the shared originals sit beside the checkout, the copies must match them byte for
/// byte. Without them nothing can be compared: say so on stderr (shown with `--nocapture`),
/// and fail if `BATON_REQUIRE_SHARED` is set, as a check that must compare wants.
#[test]
fn seed_copies_match_the_shared_originals_when_present() {
    let shared = root().join("../shared/scenarios");
    if !shared.is_dir() {
        let note = format!("SKIPPED: {} is absent; the in-repo copies were not compared", shared.display());
        assert!(std::env::var_os("BATON_REQUIRE_SHARED").is_none(), "{note}");
        eprintln!("{note}");
        return;
    }
    let originals = yaml_files(&shared);
    assert_eq!(names(&originals), SEED_STORIES, "the shared seed stories changed: update the copies");
    for original in originals {
        let copy = root().join("tests/scenarios").join(original.file_name().unwrap());
        let (a, b) = (std::fs::read_to_string(&original).unwrap(), std::fs::read_to_string(&copy).unwrap_or_default());
        assert_eq!(a, b, "{} differs from {}", copy.display(), original.display());
    }
}

#[test]
fn json_output_has_the_documented_shape() {
    let (text, _) = json(&root().join("tests/scenarios/runai-preemption.yaml"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["name"], "runai-preemption");
    let step = v["steps"].as_array().unwrap().iter().find(|s| s["at"] == 10).expect("a step at 10");
    let preempted =
        step["events"].as_array().unwrap().iter().find(|e| e["type"] == "Preempted").expect("a Preempted event");
    assert_eq!(preempted["job"], "large-training-job");
    assert_eq!(preempted["by"], "jupyter-workspace");
    assert_eq!(preempted["message"], "reclaimed by project-b (within its quota of 4 gpu)");
    let started = step["events"].as_array().unwrap().iter().find(|e| e["type"] == "Started").expect("a Started event");
    assert_eq!(started["nodes"]["node-1"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(step["jobs"]["large-training-job"]["state"], "Pending");
    assert_eq!(step["jobs"]["large-training-job"]["preempted_by"], "jupyter-workspace");
    assert_eq!(step["jobs"]["large-training-job"]["attempt"], 1);
    assert_eq!(
        step["jobs"]["large-training-job"]["reason"],
        "insufficient unused quota for gpu in pool single-node-pool: 4 more needed; may not preempt: its request of 8 gpu in pool single-node-pool exceeds queue project-a's nominal of 4 gpu, and neither borrow_within_cohort nor fair sharing lets it borrow"
    );
    assert_eq!(step["jobs"]["jupyter-workspace"]["gpus"], 4);
    assert_eq!(step["queues"]["project-a"]["usage"]["gpu"], 0);
    assert_eq!(step["queues"]["project-a"]["nominal"]["gpu"], 4);
    assert_eq!(v["summary"]["preemptions"], 1);
    assert!(v["summary"]["gpu_utilization"].is_number());
}
