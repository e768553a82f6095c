use std::collections::BTreeSet;

use super::*;

/// Names of the metric families in an exposition, from their TYPE lines.
fn typed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect()
}

#[test]
fn every_exposed_metric_has_help_and_type() {
    let m = Metrics::new();
    m.observe_cycle(0.01, 3, &[]);
    let text = m.render(&baton_model::State::new(), &raft_metrics());
    let types = typed(&text);
    let helps: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect();
    // Labelled families appear once they have a series; the unlabelled ones always do.
    assert!(types.contains("baton_raft_term") && types.contains("baton_cycle_seconds"), "families: {types:?}");
    assert_eq!(types, helps, "every family has both HELP and TYPE");
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let name = line.split(['{', ' ']).next().unwrap();
        let family =
            types.iter().any(|t| name == t || name.strip_prefix(t.as_str()).is_some_and(|s| s.starts_with('_')));
        assert!(family, "sample {line:?} belongs to no declared family");
    }
    assert!(text.ends_with("# EOF\n"));
}

fn raft_metrics() -> baton_raft::ReplicaMetrics {
    baton_raft::ReplicaMetrics {
        node_id: 2,
        role: baton_raft::Role::Follower,
        term: 4,
        leader_id: Some(1),
        leader_addr: None,
        members: Default::default(),
        voters: Default::default(),
        learners: Default::default(),
        last_log_index: Some(10),
        last_applied_index: Some(7),
        snapshot_index: None,
        purged_index: None,
    }
}

#[test]
fn raft_gauges_show_term_leader_and_apply_lag() {
    let text = Metrics::new().render(&baton_model::State::new(), &raft_metrics());
    for want in [
        "baton_raft_term 4",
        "baton_raft_is_leader 0",
        "baton_raft_leader_id 1",
        "baton_raft_applied_index 7",
        "baton_raft_apply_lag_entries 3",
    ] {
        assert!(text.lines().any(|l| l == want), "no line {want:?} in\n{text}");
    }
}
