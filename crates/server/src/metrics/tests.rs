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
    let text = m.render(&baton_model::State::new(), &raft_metrics(), &Default::default());
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

/// Every line of `want` is a line of the exposition `text`.
fn has_lines(text: &str, want: &[&str]) {
    for w in want {
        assert!(text.lines().any(|l| l == *w), "no line {w:?} in\n{text}");
    }
}

fn raft_metrics() -> baton_raft::ReplicaMetrics {
    baton_raft::ReplicaMetrics {
        node_id: 2,
        role: baton_raft::Role::Follower,
        term: 4,
        leader_id: Some(1),
        leader_addr: None,
        leader_peer_addr: None,
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
    let text = Metrics::new().render(&baton_model::State::new(), &raft_metrics(), &Default::default());
    has_lines(
        &text,
        &[
            "baton_raft_term 4",
            "baton_raft_is_leader 0",
            "baton_raft_leader_id 1",
            "baton_raft_applied_index 7",
            "baton_raft_apply_lag_entries 3",
        ],
    );
}

#[test]
fn write_counters_are_the_replicas_and_apply_times_go_by_kind() {
    let m = Metrics::new();
    m.observe_apply("Submit", 0.000_02);
    m.observe_apply("Submit", 0.000_03);
    m.observe_apply("ApplyPlan", 0.002);
    let writes = baton_raft::WriteCounts {
        writes_queued: 300,
        batches_proposed: 12,
        commands_proposed: 290,
        batches_in_flight: 2,
        batches_in_flight_max: 3,
        log_appends: 12,
        log_entries_appended: 13,
        log_flushes: 11,
        writes_forwarded: 5,
        forward_calls: 2,
        entries_delivered: 700,
        append_probes: 4,
    };
    let text = m.render(&baton_model::State::new(), &raft_metrics(), &writes);
    has_lines(
        &text,
        &[
            "baton_raft_writes_queued_total 300",
            "baton_raft_batches_proposed_total 12",
            "baton_raft_batch_commands_total 290",
            "baton_raft_batches_in_flight 2",
            "baton_raft_log_appends_total 12",
            "baton_raft_log_entries_appended_total 13",
            "baton_raft_log_flushes_total 11",
            "baton_raft_writes_forwarded_total 5",
            "baton_raft_forward_calls_total 2",
            "baton_raft_entries_delivered_total 700",
            "baton_raft_append_probes_total 4",
            "baton_apply_seconds_count{kind=\"Submit\"} 2",
            "baton_apply_seconds_count{kind=\"ApplyPlan\"} 1",
        ],
    );
    // A later scrape shows the counts as they are then, not added up.
    let text =
        m.render(&baton_model::State::new(), &raft_metrics(), &baton_raft::WriteCounts { log_flushes: 12, ..writes });
    assert!(text.lines().any(|l| l == "baton_raft_log_flushes_total 12"), "{text}");
}

mod state_gauges {

    use baton_model::command::{Command, Op};
    use baton_model::fixture;
    use baton_model::job::JobSpec;
    use baton_model::queue::{Cohort, QueueSpec};
    use baton_model::{Name, State};

    use super::super::state::{QueuePool, queue_pools};
    use super::*;

    fn apply(s: &mut State, op: Op) {
        s.apply(Command { now_ms: 1_000, op }).unwrap();
    }

    fn gpu_queue(name: &str, cohort: Option<&str>, gpus: u64) -> QueueSpec {
        QueueSpec { cohort: cohort.map(Name::lit), ..baton_model::fixture::gpu_queue(name, gpus) }
    }

    fn job(name: &str, queue: &str, gpus: u64) -> JobSpec {
        fixture::gpu_job(name, queue, gpus)
    }

    /// One 8-GPU node; `lender` owns all 8 in cohort `c`, `borrower` owns none and runs an
    /// 8-GPU job on them, so every GPU it uses is lent by `lender`.
    fn borrowing() -> State {
        let mut s = State::default();
        let node = fixture::gpu_node("n1", 8);
        apply(&mut s, Op::RegisterNodes(vec![node]));
        apply(&mut s, Op::PutCohort(Cohort { name: Name::lit("c"), parent: None, fair_sharing: false }));
        apply(&mut s, Op::PutQueue(gpu_queue("lender", Some("c"), 8)));
        apply(&mut s, Op::PutQueue(gpu_queue("borrower", Some("c"), 0)));
        apply(&mut s, Op::Submit { spec: job("j", "borrower", 8), request_id: None });
        apply(&mut s, Op::Submit { spec: job("waits", "borrower", 2), request_id: None });
        let after = vec![baton_model::after::After::parse("ok:j").unwrap()];
        apply(&mut s, Op::SubmitAfter { spec: job("next", "borrower", 1), request_id: None, run_as: None, after });
        let plan = baton_sched::cycle(&s, 1_000);
        apply(&mut s, Op::ApplyPlan(plan));
        s
    }

    #[test]
    fn a_borrower_and_its_lender_show_the_same_gpus() {
        let s = borrowing();
        let t = queue_pools(&s);
        let key = |q: &str| (q.to_string(), "default".to_string());
        assert_eq!(t[&key("borrower")], QueuePool { nominal: 0, used: 8, used_milli: 8000, borrowed: 8, lent: 0 });
        assert_eq!(t[&key("lender")], QueuePool { nominal: 8, used: 0, used_milli: 0, borrowed: 0, lent: 8 });

        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &[
                "baton_queue_gpus_lent{queue=\"lender\",pool=\"default\"} 8",
                "baton_queue_pending_jobs{queue=\"borrower\"} 2",
                "baton_queue_held_jobs{queue=\"borrower\"} 1",
                "baton_queue_held_jobs{queue=\"lender\"} 0",
                "baton_queue_pending_gpus{queue=\"borrower\"} 3",
                "baton_queue_running_jobs{queue=\"borrower\"} 1",
                "baton_pool_gpus_capacity{pool=\"default\"} 8",
            ],
        );
    }

    /// MIG slices per pool and profile (decisions.md section 11): offered by the ready
    /// nodes, and held by the jobs there.
    #[test]
    fn mig_slices_are_counted_per_pool_and_profile() {
        let mut s = State::default();
        let mut m1 = fixture::gpu_node("m1", 0);
        m1.resources = baton_model::resources::Resources::of(&[("mig-1g.10gb", 7)]);
        apply(&mut s, Op::RegisterNodes(vec![m1]));
        apply(&mut s, Op::PutQueue(gpu_queue("q", None, 0)));
        let mut spec = job("infer", "q", 0);
        spec.tasks[0].resources = baton_model::resources::Resources::of(&[("mig-1g.10gb", 3)]);
        apply(&mut s, Op::Submit { spec, request_id: None });
        let plan = baton_sched::cycle(&s, 1_000);
        apply(&mut s, Op::ApplyPlan(plan));
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &[
                "baton_pool_mig_slices{pool=\"default\",profile=\"mig-1g.10gb\",kind=\"offered\"} 7",
                "baton_pool_mig_slices{pool=\"default\",profile=\"mig-1g.10gb\",kind=\"held\"} 3",
            ],
        );
    }

    /// Shared GPUs (decisions.md section 11): the pool's GPUs fractions share and what they
    /// hold, and the queue's use in thousandths beside its whole GPUs.
    #[test]
    fn shared_gpus_are_counted_per_pool_and_queue() {
        let mut s = State::default();
        apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 8)]));
        apply(&mut s, Op::PutQueue(gpu_queue("q", None, 8)));
        for (name, milli) in [("a", 500), ("b", 250), ("c", 750)] {
            let mut spec = job(name, "q", 0);
            spec.tasks[0].resources.set_gpus_milli(milli);
            apply(&mut s, Op::Submit { spec, request_id: None });
        }
        let mut whole = job("w", "q", 0);
        whole.tasks[0].resources.set_gpus_milli(2000);
        apply(&mut s, Op::Submit { spec: whole, request_id: None });
        let plan = baton_sched::cycle(&s, 1_000);
        apply(&mut s, Op::ApplyPlan(plan));
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &[
                // 0.5 + 0.25 on one GPU, 0.75 on another: two shared, 1.5 GPUs held by fractions.
                "baton_pool_shared_gpus{pool=\"default\"} 2",
                "baton_pool_shared_gpu_milli_held{pool=\"default\"} 1500",
                "baton_queue_gpus_used{queue=\"q\",pool=\"default\"} 2",
                "baton_queue_gpu_milli_used{queue=\"q\",pool=\"default\"} 3500",
            ],
        );
    }

    #[test]
    fn maintenance_windows_are_counted_by_state() {
        let mut s = borrowing();
        let window = |name: &str, start_ms: u64| baton_model::maintenance::WindowSpec {
            name: Name::lit(name),
            nodes: vec![Name::lit("n1")],
            start_ms,
            end_ms: start_ms + 1_000,
        };
        apply(&mut s, Op::CreateMaintenance(window("now", 500)));
        apply(&mut s, Op::CreateMaintenance(window("later", 50_000)));
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &["baton_maintenance_windows{state=\"ahead\"} 1", "baton_maintenance_windows{state=\"started\"} 1"],
        );
    }

    #[test]
    fn unhealthy_gpus_are_counted() {
        let mut s = borrowing();
        assert!(
            Metrics::new()
                .render(&s, &raft_metrics(), &Default::default())
                .lines()
                .any(|l| l == "baton_gpus_unhealthy 0")
        );
        for gpu in [1, 3] {
            apply(&mut s, Op::SetGpuHealth { node: Name::lit("n1"), gpu, fault: Some("XID 79".into()) });
        }
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        assert!(text.lines().any(|l| l == "baton_gpus_unhealthy 2"), "{text}");
    }

    #[test]
    fn an_arrays_elements_not_created_yet_are_counted_per_queue() {
        let mut s = borrowing();
        let spec = baton_model::fixture::gpu_job("sweep", "lender", 1);
        let array = baton_model::array::ArraySpec { first: 0, count: 1000, max_running: Some(10) };
        apply(&mut s, Op::SubmitArray { spec, array, request_id: None, run_as: None, after: vec![] });
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &[
                "baton_queue_array_elements_waiting{queue=\"lender\"} 990",
                "baton_arrays{state=\"unfinished\"} 1",
                "baton_arrays{state=\"finished\"} 0",
            ],
        );
    }

    #[test]
    fn elastic_gangs_replicas_are_counted_per_queue_running_and_missing() {
        let mut s = State::default();
        apply(&mut s, Op::RegisterNodes(vec![fixture::gpu_node("n1", 8)]));
        apply(&mut s, Op::PutQueue(gpu_queue("lender", None, 8)));
        let mut spec = baton_model::fixture::gpu_job("train", "lender", 1);
        spec.tasks[0].replicas = 8;
        let elastic = baton_model::elastic::ElasticSpec { task: 0, min_replicas: 2 };
        apply(&mut s, Op::SubmitElastic { spec, elastic, request_id: None, run_as: None, after: vec![] });
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        let none = "baton_queue_elastic_replicas{queue=\"lender\",kind=\"running\"} 0";
        assert!(text.lines().any(|l| l == none), "a pending gang runs nothing: {text}");
        let id = s.job_by_name("train").unwrap().id;
        let replicas = (0..3)
            .map(|i| baton_model::alloc::ReplicaAlloc { task: 0, index: i, node: Name::lit("n1"), gpus: vec![i] })
            .collect();
        let plan = baton_model::plan::Plan {
            based_on: s.applied(),
            decisions: vec![baton_model::plan::Decision::Place { job: id, attempt: 1, replicas }],
        };
        apply(&mut s, Op::ApplyPlan(plan));
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &[
                "baton_queue_elastic_replicas{queue=\"lender\",kind=\"running\"} 3",
                "baton_queue_elastic_replicas{queue=\"lender\",kind=\"missing\"} 5",
            ],
        );
    }

    #[test]
    fn queue_and_pool_series_stop_at_the_bound_and_say_how_many_were_left_out() {
        let mut s = State::default();
        for i in 0..=MAX_QUEUE_POOL_SERIES {
            apply(&mut s, Op::PutQueue(gpu_queue(&format!("q{i:05}"), None, 1)));
        }
        let text = Metrics::new().render(&s, &raft_metrics(), &Default::default());
        let series = text.lines().filter(|l| l.starts_with("baton_queue_gpus_nominal{")).count();
        assert_eq!(series, MAX_QUEUE_POOL_SERIES);
        assert!(text.lines().any(|l| l == "baton_metrics_series_dropped 1"));
        // Name order: the last queue is the one left out.
        let last = format!("queue=\"q{MAX_QUEUE_POOL_SERIES:05}\"");
        assert!(!text.lines().any(|l| l.starts_with("baton_queue_gpus_nominal{") && l.contains(&last)));
    }

    #[test]
    fn a_preemption_is_counted_by_reason_and_mode_with_the_work_at_risk() {
        use baton_model::event::{Event, EventKind};
        let s = borrowing();
        let j = s.job_by_name("j").unwrap();
        let at_ms = j.progress_mark_ms + 1_500;
        let event =
            |kind| Event { at_ms, job: Some(Name::lit("j")), job_id: None, node: None, kind, message: String::new() };
        let m = Metrics::new();
        // "waits" is in the same queue as "j": a priority preemption.
        m.count(&s, &event(EventKind::Preempted { by: Name::lit("waits") }));
        m.count(&s, &event(EventKind::Suspended { by: Name::lit("waits") }));
        m.count(&s, &event(EventKind::Preempted { by: Name::lit("gone") }));
        let text = m.render(&s, &raft_metrics(), &Default::default());
        has_lines(
            &text,
            &[
                "baton_preemptions_total{reason=\"priority\",mode=\"checkpoint\"} 1",
                "baton_preemptions_total{reason=\"priority\",mode=\"suspend\"} 1",
                "baton_preemptions_total{reason=\"unknown\",mode=\"checkpoint\"} 1",
                // 8 GPUs, 1.5 s since its start, three times.
                "baton_preemption_uncheckpointed_gpu_seconds_total 36.0",
            ],
        );
    }
}

#[test]
fn the_certificates_expiry_is_shown_only_under_tls() {
    let m = Metrics::new();
    m.set_tls_not_after(None);
    let text = m.render(&baton_model::State::new(), &raft_metrics(), &Default::default());
    assert!(!text.contains("baton_tls_not_after_seconds{"), "a series under --insecure:\n{text}");
    m.set_tls_not_after(Some(baton_proto::tls::NotAfter { own_unix_s: 1_900_000_000, ca_unix_s: 2_000_000_000 }));
    let text = m.render(&baton_model::State::new(), &raft_metrics(), &Default::default());
    for want in
        ["baton_tls_not_after_seconds{cert=\"own\"} 1900000000", "baton_tls_not_after_seconds{cert=\"ca\"} 2000000000"]
    {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
}
