//! Scenario, job and queue files are read from disk and from `baton submit -f`: any text,
//! arbitrary or a valid file with characters changed, parses or is refused with an error,
//! and never panics.

use proptest::prelude::*;

const SCENARIO: &str = "nodes:
  - {name: \"n[1-2]\", pool: a100, rack: r1, resources: {gpu: 8, cpu: 64}}
cohorts:
  - {name: lab}
queues:
  - {name: q, cohort: lab, quotas: [{pool: a100, nominal: {gpu: 8}, borrow_limit: {gpu: 4}}]}
timeline:
  - {at: 0, submit: {name: a, queue: q, replicas: 2, resources: {gpu: 4}, duration: 10}}
  - {at: 5, node_down: n1}
expect:
  - {at: 6, jobs: {a: {state: Pending}}}
";

const JOB: &str = "name: a
queue: q
priority: train
replicas: 2
resources: {gpu: 4}
command: [python, train.py]
env: {A: \"1\"}
";

/// `base` with a few characters replaced by YAML's structural ones or arbitrary ones.
fn mutated(base: &'static str) -> impl Strategy<Value = String> {
    let chars: Vec<char> = base.chars().collect();
    let len = chars.len();
    let replacement = prop_oneof![
        prop::sample::select(vec![
            '{', '}', '[', ']', ':', ',', '-', ' ', '\n', '"', '\'', '&', '*', '!', '#', '|', '>'
        ]),
        any::<char>(),
    ];
    proptest::collection::vec((0..len, replacement), 1..6).prop_map(move |edits| {
        let mut c = chars.clone();
        for (i, ch) in edits {
            c[i] = ch;
        }
        c.into_iter().collect()
    })
}

fn parse_everything(text: &str) {
    let _ = baton_sim::parse::parse("fuzz.yaml", text);
    let _ = baton_sim::files::parse_job("fuzz.yaml", text);
    let _ = baton_sim::files::parse_queue("fuzz.yaml", text);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        parse_everything(&text);
    }

    #[test]
    fn yaml_shaped_text_never_panics(text in "[a-z0-9:{}\\[\\], \n\"'&*!|>#-]{0,300}") {
        parse_everything(&text);
    }

    #[test]
    fn a_changed_scenario_never_panics(text in mutated(SCENARIO)) {
        parse_everything(&text);
    }

    #[test]
    fn a_changed_job_file_never_panics(text in mutated(JOB)) {
        parse_everything(&text);
    }
}

#[test]
fn the_seeds_are_valid_so_the_mutations_reach_deep() {
    baton_sim::parse::parse("seed.yaml", SCENARIO).unwrap();
    baton_sim::files::parse_job("seed.yaml", JOB).unwrap();
}

#[test]
fn a_host_range_past_the_node_bound_is_refused_not_expanded() {
    let text = "nodes:\n  - {name: \"n[1-999999999]\", resources: {gpu: 8}}\n";
    let err = baton_sim::parse::parse("big.yaml", text).unwrap_err().to_string();
    assert!(err.contains("nodes[0].name"), "{err}");
}

/// Regression: 100,000 nested lists overflowed the stack (the YAML loader recursed once
/// per level) and aborted the process.
#[test]
fn deeply_nested_text_is_refused_not_a_stack_overflow() {
    for open in ["[", "{a: ", "- "] {
        let text = open.repeat(100_000);
        parse_everything(&text);
        let err = baton_sim::parse::parse("deep.yaml", &text).unwrap_err().to_string();
        assert!(err.contains("deep.yaml"), "{err}");
    }
    let err = baton_sim::parse::parse("deep.yaml", &"[".repeat(100)).unwrap_err().to_string();
    assert!(err.contains("deeper than 64 levels"), "{err}");
}

#[test]
fn a_file_over_the_size_bound_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.yaml");
    // Sparse: the length is what counts, not what is on disk.
    std::fs::File::create(&path).unwrap().set_len(baton_sim::files::MAX_FILE_BYTES + 1).unwrap();
    let err = baton_sim::files::parse_job_file(&path).unwrap_err().to_string();
    assert!(err.contains("huge.yaml") && err.contains(&baton_sim::files::MAX_FILE_BYTES.to_string()), "{err}");
    let err = baton_sim::files::read_text(&path).unwrap_err().to_string();
    assert!(err.contains("huge.yaml"), "{err}");
}
