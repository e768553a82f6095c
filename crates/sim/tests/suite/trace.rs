//! Trace mode on small hand-made traces whose figures can be worked out by hand: each test
//! says how the answer comes about.

use baton_sim::Outcome;
use baton_sim::output::Secs;
use baton_sim::stats::QueueStats;

const HEADER: &str = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval\n";

/// One 8-GPU node per `nodes`, queues `a` and `b` with `quota` GPUs each.
fn cluster(nodes: usize, quota: u64) -> String {
    format!(
        "nodes:\n  - {{name: \"n[1-{nodes}]\", resources: {{gpu: 8}}}}\nqueues:\n  - {{name: a, quota: {{gpu: {quota}}}}}\n  - {{name: b, quota: {{gpu: {quota}}}}}\n"
    )
}

fn run(cluster: &str, rows: &str) -> (Outcome, Vec<QueueStats>) {
    let o = baton_sim::run_trace("c.yaml", cluster, "t.csv", &format!("{HEADER}{rows}")).unwrap();
    let s = o.queue_stats();
    (o, s)
}

fn queue<'a>(s: &'a [QueueStats], name: &str) -> &'a QueueStats {
    s.iter().find(|q| q.queue.as_str() == name).unwrap()
}

#[test]
fn a_reclaim_costs_the_borrower_the_work_since_its_start() {
    // Two nodes, a and b guaranteed 8 GPUs each. a's two 8-GPU jobs take both nodes at t=0;
    // b's 4-GPU job at t=10 takes back b's guarantee: one of a's jobs is preempted after 10 s
    // without a checkpoint (80 GPU-s lost), starts again when b's job ends at t=60 and ends
    // at t=160. a used 8x100 + 8x10 + 8x100 GPU-s, b 4x50, of 16 GPUs x 160 s.
    let (o, s) = run(&cluster(2, 8), "0,a,train,8,1,100,,\n0,a,train,8,1,100,,\n10,b,train,4,1,50,,\n");
    assert_eq!(o.report.summary.end, Secs(160_000));
    assert_eq!((o.report.summary.preemptions, o.report.summary.finished), (1, 3));
    let (a, b) = (queue(&s, "a"), queue(&s, "b"));
    assert_eq!((a.preemptions, b.preemptions), (1, 0));
    assert_eq!(a.lost_gpu_hours, (80.0f64 / 3600.0 * 10_000.0).round() / 10_000.0);
    assert_eq!(b.lost_gpu_hours, 0.0);
    assert_eq!(a.gpu_utilization, 0.6563); // 1680 / 2560
    assert_eq!(b.gpu_utilization, 0.0781); // 200 / 2560
    assert_eq!(o.report.summary.gpu_utilization, 0.7344); // 1880 / 2560
    // a's preempted job waited from its requeue at t=10 to its new start at t=60.
    assert_eq!((a.longest_wait, b.longest_wait), (Secs(50_000), Secs(0)));
    assert!(o.report.steps.is_empty(), "trace mode keeps no per-instant snapshots");
}

#[test]
fn a_wait_after_a_requeue_counts_until_the_next_start() {
    // One node, a and b guaranteed 4 GPUs each. a's 8-GPU job (100 s) starts at once. b's
    // 4-GPU job at t=20 (30 s) takes its guarantee back: a's job is requeued at t=20 and
    // starts over when b's job ends at t=50, so it waits 0 s for its first start and 30 s
    // after the requeue: 30 s in all. b's second 4-GPU job at t=60 (10 s) preempts it again:
    // requeued at t=60, it starts over at t=70 (10 s more: 40 s in all) and ends at t=170.
    // b's jobs start the moment they arrive.
    let rows = "0,a,train,8,1,100,,\n20,b,train,4,1,30,,\n60,b,train,4,1,10,,\n";
    let (o, s) = run(&cluster(1, 4), rows);
    assert_eq!(o.report.summary.end, Secs(170_000));
    let (a, b) = (queue(&s, "a"), queue(&s, "b"));
    assert_eq!(a.preemptions, 2);
    let by = |q: &QueueStats| -> Vec<(String, u64, Secs, Secs, Secs)> {
        q.wait_by_gang.iter().map(|g| (g.gpus.clone(), g.jobs, g.p50, g.p99, g.max)).collect()
    };
    assert_eq!(by(a), [("5-8".to_string(), 1, Secs(40_000), Secs(40_000), Secs(40_000))]);
    assert_eq!(by(b), [("3-4".to_string(), 2, Secs(0), Secs(0), Secs(0))]);
    assert_eq!((a.longest_wait, a.never_started), (Secs(40_000), 0));
}

#[test]
fn waits_are_split_by_gang_size_with_nearest_rank_percentiles() {
    // One node. The 8-GPU job holds it from 0 to 100; the 1-GPU jobs submitted at 0, 5 and
    // 30 wait 100, 95 and 70 s; the 2-GPU job submitted at 40 waits 60 s. Nearest rank of
    // [70, 95, 100]: p50 is the 2nd value, p99 the 3rd.
    let rows =
        "0,a,train,8,1,100,,\n0,a,train,1,1,10,,\n5,a,train,1,1,10,,\n30,a,train,1,1,10,,\n40,a,train,2,1,10,,\n";
    let (_, s) = run(&cluster(1, 8), rows);
    let a = queue(&s, "a");
    let by: Vec<(&str, u64, Secs, Secs, Secs)> =
        a.wait_by_gang.iter().map(|g| (g.gpus.as_str(), g.jobs, g.p50, g.p99, g.max)).collect();
    assert_eq!(
        by,
        [
            ("1", 3, Secs(95_000), Secs(100_000), Secs(100_000)),
            ("2", 1, Secs(60_000), Secs(60_000), Secs(60_000)),
            ("5-8", 1, Secs(0), Secs(0), Secs(0)),
        ]
    );
    assert_eq!((a.jobs, a.never_started, a.longest_wait), (5, 0, Secs(100_000)));
    assert_eq!(queue(&s, "b").jobs, 0);
}

#[test]
fn a_checkpoint_interval_keeps_work_up_to_the_last_checkpoint() {
    // One node, a and b guaranteed 4 GPUs each. a's 8-GPU job (1000 s of work, a checkpoint
    // every 100 s) borrows b's half; b's job at t=250 takes it back. a keeps 200 s, loses
    // 50 s x 8 GPUs = 400 GPU-s, starts again at t=300 when b's job ends and needs 800 s more.
    let (o, s) = run(&cluster(1, 4), "0,a,train,8,1,1000,,100\n250,b,train,4,1,50,,\n");
    assert_eq!(o.report.summary.end, Secs(1_100_000));
    let a = queue(&s, "a");
    assert_eq!(a.preemptions, 1);
    assert_eq!(a.lost_gpu_hours, (400.0f64 / 3600.0 * 10_000.0).round() / 10_000.0);

    // Without checkpoints the whole 250 s is lost and the job starts over at t=300.
    let (o, s) = run(&cluster(1, 4), "0,a,train,8,1,1000,,\n250,b,train,4,1,50,,\n");
    assert_eq!(o.report.summary.end, Secs(1_300_000));
    assert_eq!(queue(&s, "a").lost_gpu_hours, (2000.0f64 / 3600.0 * 10_000.0).round() / 10_000.0);
}

#[test]
fn a_job_that_never_fits_in_time_waits_to_the_end() {
    // The 8-GPU job submitted at 1 waits behind a 1-GPU job running to t=500 (the node is
    // never whole before): its wait is 499 s. Its time limit (20 s) stops it at t=520 unfinished.
    let (o, s) = run(&cluster(1, 8), "0,b,train,1,1,500,,\n1,a,train,8,1,100,20,\n");
    assert_eq!(o.report.summary.end, Secs(520_000));
    let a = queue(&s, "a");
    assert_eq!(a.longest_wait, Secs(499_000));
    assert_eq!(a.gpu_hours, (8.0f64 * 20.0 / 3600.0 * 10_000.0).round() / 10_000.0);
}

#[test]
fn rows_that_do_not_fit_the_cluster_name_line_and_column() {
    let c = cluster(1, 8);
    let e = baton_sim::run_trace("c.yaml", &c, "t.csv", &format!("{HEADER}0,a,train,1,1,5,,\n0,nope,train,1,1,5,,\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.csv:3: column 2 (queue): queue nope is not defined"), "{e}");
    let e =
        baton_sim::run_trace("c.yaml", &c, "t.csv", &format!("{HEADER}0,a,gold,1,1,5,,\n")).unwrap_err().to_string();
    assert!(e.starts_with("t.csv:2: column 3 (class): priority class gold is not defined"), "{e}");
    let e =
        baton_sim::run_trace("c.yaml", &c, "t.csv", &format!("{HEADER}0,a,train,8,2,5,,\n")).unwrap_err().to_string();
    assert!(e.starts_with("t.csv:2: column 4 (gpus):"), "{e}");
    let with_timeline = format!("{c}timeline:\n  - {{at: 0, submit: {{name: x, queue: a, resources: {{gpu: 1}}}}}}\n");
    let e = baton_sim::run_trace("c.yaml", &with_timeline, "t.csv", HEADER).unwrap_err().to_string();
    assert!(e.contains("c.yaml:") && e.contains("no timeline"), "{e}");
}

#[test]
fn a_generated_trace_runs_the_same_twice() {
    let spec = baton_sim::synth::GenSpec {
        jobs: 300,
        seed: 5,
        queues: vec![baton_model::name::Name::lit("a"), baton_model::name::Name::lit("b")],
        classes: vec![baton_model::name::Name::lit("train")],
        cluster_gpus: 32,
        gpus_per_node: 8,
        load: 0.9,
        workflows: Default::default(),
    };
    let text = baton_sim::synth::generate(&spec).unwrap();
    let c = cluster(4, 16);
    let one = baton_sim::run_trace("c.yaml", &c, "t.csv", &text).unwrap();
    let two = baton_sim::run_trace("c.yaml", &c, "t.csv", &text).unwrap();
    assert_eq!(one.queue_stats(), two.queue_stats());
    assert_eq!(one.report.summary.finished, 300);
}

#[test]
fn an_instant_whose_jobs_all_wait_takes_one_cycle() {
    // One 8-GPU node; two 8-GPU jobs of 100 s at t=0 and t=10. t=0: a cycle places the
    // first, the next finds nothing to do (2). t=10: a cycle says why the second waits; a
    // plan of waits changes only reasons, so no second cycle runs (1). t=100: the first
    // ends; a cycle places the second, the next finds nothing (2). t=200: the second ends;
    // a cycle finds nothing (1).
    let (o, _) = run(&cluster(1, 8), "0,a,train,8,1,100,,\n10,a,train,8,1,100,,\n");
    assert_eq!(o.report.summary.end, Secs(200_000));
    assert_eq!(o.cycles, 6);
}

#[test]
fn a_row_waits_for_the_rows_its_after_column_names() {
    // One 8-GPU node; rows are jobs j2 to j5 (their lines). j2 (8 GPUs, 100 s) runs first.
    // j3 (8 GPUs, 10 s) waits for j2 to succeed: it starts at t=100, the moment the node
    // frees, and ends at t=110. j4 (1 GPU) waits for j3 to fail, which never happens: it is
    // cancelled at t=110 when j3 succeeds, never started. j5 (queue b) waits for j2 to start,
    // which holds at once, but the node is full: it starts when j3 ends, at t=110, and ends
    // at t=115.
    let header = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval,after\n";
    let rows =
        "0,a,train,8,1,100,,,\n1,a,train,8,1,10,,,ok:j2\n2,a,train,1,1,5,,,notok:j3\n3,b,train,8,1,5,,,started:j2\n";
    let o = baton_sim::run_trace("c.yaml", &cluster(1, 8), "t.csv", &format!("{header}{rows}")).unwrap();
    assert_eq!((o.report.summary.finished, o.report.summary.end), (3, Secs(115_000)), "{:?}", o.report.summary);
    let s = o.queue_stats();
    assert_eq!(queue(&s, "b").longest_wait, Secs(107_000), "j5 waited from t=3 to t=110");

    // Bad dependencies are refused before anything runs, naming the line and the column.
    for (rows, says) in [
        ("0,a,train,1,1,5,,,ok:j2\n", "cannot wait for itself"),
        ("0,a,train,1,1,5,,,ok:j3\n5,a,train,1,1,5,,,\n", "not submitted before this row"),
        ("0,a,train,1,1,5,,,ok:7\n", "not an id"),
        ("0,a,train,1,1,5,,,soon:j2\n", "ok, any, notok, started"),
    ] {
        let e = baton_sim::run_trace("c.yaml", &cluster(1, 8), "t.csv", &format!("{header}{rows}")).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("t.csv:2: column 9 (after): ") && e.contains(says), "{rows}: {e}");
    }
}

#[test]
fn a_row_with_an_array_column_runs_its_elements_and_a_later_row_may_wait_for_them() {
    // One 8-GPU node. j2 is an array of four 2-GPU elements, at most two at once, 10 s each:
    // j2-0 and j2-1 run from 0 to 10, j2-2 and j2-3 from 10 to 20. j3 waits for the whole
    // array to succeed: it runs from 20 to 25.
    let header = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval,after,array\n";
    let rows = "0,a,train,2,1,10,,,,0-3%2\n0,a,train,8,1,5,,,ok:j2,\n";
    let o = baton_sim::run_trace("c.yaml", &cluster(1, 8), "t.csv", &format!("{header}{rows}")).unwrap();
    assert_eq!((o.report.summary.finished, o.report.summary.end), (5, Secs(25_000)), "{:?}", o.report.summary);
    let s = o.queue_stats();
    assert_eq!(queue(&s, "a").jobs, 5, "four elements and j3");
    assert_eq!(queue(&s, "a").longest_wait, Secs(20_000), "j3 waited for the last element");

    let e = baton_sim::run_trace("c.yaml", &cluster(1, 8), "t.csv", &format!("{header}0,a,train,1,1,5,,,,9-5\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.csv:2: column 10 (array): ") && e.contains("reversed"), "{e}");
}

#[test]
fn a_generated_trace_with_workflows_keeps_the_same_rows_and_adds_dependencies_and_arrays() {
    let spec = |workflows| baton_sim::synth::GenSpec {
        jobs: 400,
        seed: 9,
        queues: vec![baton_model::name::Name::lit("a"), baton_model::name::Name::lit("b")],
        classes: vec![baton_model::name::Name::lit("train")],
        cluster_gpus: 32,
        gpus_per_node: 8,
        load: 0.9,
        workflows,
    };
    let plain = baton_sim::synth::generate(&spec(Default::default())).unwrap();
    let w = baton_sim::synth::Workflows { after_share: 0.3, array_share: 0.1, ..Default::default() };
    let with = baton_sim::synth::generate(&spec(w)).unwrap();
    assert!(with.starts_with(&format!("{}\n", baton_sim::trace::COLUMNS[..10].join(","))), "no elastic column");
    let jobs = baton_sim::trace::parse("t.csv", &with).unwrap();
    let base = baton_sim::trace::parse("t.csv", &plain).unwrap();
    assert_eq!(jobs.len(), base.len());
    let waits = jobs.iter().filter(|j| !j.after.is_empty()).count();
    let arrays = jobs.iter().filter(|j| j.array.is_some()).count();
    assert!((80..=160).contains(&waits) && (20..=70).contains(&arrays), "{waits} wait, {arrays} arrays");
    for (a, b) in jobs.iter().zip(&base) {
        assert_eq!((a.queue.clone(), a.gpus_milli(), a.duration_ms), (b.queue.clone(), b.gpus_milli(), b.duration_ms));
    }
    let o = baton_sim::run_trace("c.yaml", &cluster(4, 16), "t.csv", &with).unwrap();
    assert!(o.report.summary.finished > 0);
}

#[test]
fn a_row_with_min_replicas_runs_as_an_elastic_gang_and_bad_ones_are_refused() {
    // One 8-GPU node. j2 holds 4 GPUs for 10 s; j3 asks 8 one-GPU replicas, at least 2: it
    // starts with the 4 left and grows to 8 when j2 ends at 10. Trace jobs are in mode
    // requeue without a periodic checkpoint: growing starts it over, so its 100 s of work end
    // at 110.
    let header = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval,after,array,min_replicas\n";
    let rows = "0,a,train,4,1,10,,,,,\n0,a,train,1,8,100,,,,,2\n";
    let o = baton_sim::run_trace("c.yaml", &cluster(1, 8), "t.csv", &format!("{header}{rows}")).unwrap();
    assert_eq!((o.report.summary.finished, o.report.summary.end), (2, Secs(110_000)), "{:?}", o.report.summary);

    for (row, says) in [
        ("0,a,train,1,4,5,,,,,5\n", "column 11 (min_replicas): 5 is out of range 1..=4"),
        ("0,a,train,1,4,5,,,,0-3,2\n", "column 11 (min_replicas): an array's elements cannot be elastic gangs"),
    ] {
        let e =
            baton_sim::run_trace("c.yaml", &cluster(1, 8), "t.csv", &format!("{header}{row}")).unwrap_err().to_string();
        assert!(e.starts_with("t.csv:2: ") && e.contains(says), "{e}");
    }
}

/// 400 generated jobs of one queue on 32 GPUs, with `workflows` (none: the plain trace).
fn one_queue(workflows: Option<baton_sim::synth::Workflows>) -> baton_sim::synth::GenSpec {
    baton_sim::synth::GenSpec {
        jobs: 400,
        seed: 9,
        queues: vec![baton_model::name::Name::lit("a")],
        classes: vec![baton_model::name::Name::lit("train")],
        cluster_gpus: 32,
        gpus_per_node: 8,
        load: 0.9,
        workflows: workflows.unwrap_or_default(),
    }
}

#[test]
fn a_generated_trace_with_elastic_gangs_adds_the_column_and_keeps_the_rows() {
    let plain = baton_sim::trace::parse("t.csv", &baton_sim::synth::generate(&one_queue(None)).unwrap()).unwrap();
    let w = baton_sim::synth::Workflows { elastic_share: 0.5, ..Default::default() };
    let text = baton_sim::synth::generate(&one_queue(Some(w))).unwrap();
    let jobs = baton_sim::trace::parse("t.csv", &text).unwrap();
    let gangs = plain.iter().filter(|j| j.replicas > 1).count();
    let elastic: Vec<_> = jobs.iter().filter_map(|j| j.min_replicas.map(|m| (m, j.replicas))).collect();
    assert!(!elastic.is_empty() && elastic.len() < gangs, "{} of {gangs} gangs elastic", elastic.len());
    assert!(elastic.iter().all(|&(m, r)| (1..r).contains(&m)), "{elastic:?}");
    for (a, b) in jobs.iter().zip(&plain) {
        assert_eq!((a.gpus_milli(), a.duration_ms, a.submit_ms), (b.gpus_milli(), b.duration_ms, b.submit_ms));
    }
    let o = baton_sim::run_trace("c.yaml", &cluster(4, 8), "t.csv", &text).unwrap();
    assert!(o.report.summary.finished > 0);
}

/// Section 11 in trace mode: rows of a fraction of a GPU share one; they wait in a bucket of
/// their own, and the GPU time they are charged is their share of it.
#[test]
fn rows_of_a_fraction_of_a_gpu_share_one() {
    // One 1-GPU node: four quarters run side by side for 100 s; a whole-GPU row waits for them.
    let rows = "0,a,train,0.25,1,100,,\n0,a,train,0.25,1,100,,\n0,a,train,250m,2,100,,\n0,a,train,1,1,50,,\n";
    let header = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval\n";
    let one_gpu = "nodes:\n  - {name: n1, resources: {gpu: 1}}\nqueues:\n  - {name: a, quota: {gpu: 1}}\n";
    let o = baton_sim::run_trace("c.yaml", one_gpu, "t.csv", &format!("{header}{rows}")).unwrap();
    assert_eq!((o.report.summary.finished, o.report.summary.end), (4, Secs(150_000)), "{:?}", o.report.summary);
    let stats = o.queue_stats();
    let q = queue(&stats, "a");
    let bucket = |label: &str| q.wait_by_gang.iter().find(|g| g.gpus == label).map(|g| (g.jobs, g.max));
    assert_eq!(bucket("<1"), Some((3, Secs(0))), "the quarters and the two-quarter gang: {:?}", q.wait_by_gang);
    assert_eq!(bucket("1"), Some((1, Secs(100_000))), "the whole GPU waits for them: {:?}", q.wait_by_gang);
    // 1 GPU for 100 s, then 1 for 50 s: 150 GPU-seconds.
    assert!((q.gpu_hours - 150.0 / 3600.0).abs() < 1e-4, "{}", q.gpu_hours);
}

/// Section 11 in trace mode: rows of MIG slices run on the slices a node offers, wait in a
/// bucket of their own (they hold no GPU), and a profile no node offers is refused.
#[test]
fn rows_of_mig_slices_run_on_the_slices_a_node_offers() {
    let m1 = "nodes:\n  - {name: m1, resources: {mig-1g.10gb: 7}}\nqueues:\n  - {name: a, quota: {mig-1g.10gb: 7}}\n";
    let header = "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval\n";
    // 3 + 3 slices side by side for 100 s; 2 more wait for the first to end.
    let rows = "0,a,train,mig-1g.10gb=3,1,100,,\n0,a,train,mig-1g.10gb=1,3,100,,\n0,a,train,mig-1g.10gb=2,1,50,,\n";
    let o = baton_sim::run_trace("c.yaml", m1, "t.csv", &format!("{header}{rows}")).unwrap();
    assert_eq!((o.report.summary.finished, o.report.summary.end), (3, Secs(150_000)), "{:?}", o.report.summary);
    let stats = o.queue_stats();
    let waits = &queue(&stats, "a").wait_by_gang;
    assert_eq!(waits.iter().map(|g| (g.gpus.as_str(), g.jobs)).collect::<Vec<_>>(), [("0", 3)], "{waits:?}");
    let e = baton_sim::run_trace("c.yaml", m1, "t.csv", &format!("{header}0,a,train,mig-3g.40gb=1,1,5,,\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.csv:2: column 4 (gpus): ") && e.contains("mig-3g.40gb"), "{e}");
}

#[test]
fn a_generated_trace_with_fractions_keeps_its_columns_and_other_rows() {
    let plain = baton_sim::trace::parse("t.csv", &baton_sim::synth::generate(&one_queue(None)).unwrap()).unwrap();
    let w = baton_sim::synth::Workflows { fraction_share: 0.5, ..Default::default() };
    let text = baton_sim::synth::generate(&one_queue(Some(w))).unwrap();
    assert!(text.starts_with(&format!("{}\n", baton_sim::trace::COLUMNS[..8].join(","))), "no new column");
    let jobs = baton_sim::trace::parse("t.csv", &text).unwrap();
    let ones = plain.iter().filter(|j| j.gpus_milli() == 1000).count();
    let shares: Vec<u64> = jobs.iter().map(|j| j.gpu_milli_per_replica).filter(|&m| m < 1000).collect();
    assert!(shares.len() > ones / 4 && shares.len() < ones * 3 / 4, "{} of {ones} one-GPU rows", shares.len());
    assert!(shares.iter().all(|m| [250, 500, 750].contains(m)), "{shares:?}");
    for (a, b) in jobs.iter().zip(&plain) {
        assert_eq!((a.replicas, a.duration_ms, a.queue.clone()), (b.replicas, b.duration_ms, b.queue.clone()));
    }
    let o = baton_sim::run_trace("c.yaml", &cluster(4, 8), "t.csv", &text).unwrap();
    assert!(o.report.summary.finished > 0);
    assert!(queue(&o.queue_stats(), "a").wait_by_gang.iter().any(|g| g.gpus == "<1"));
}

#[test]
fn a_row_with_a_topology_column_keeps_its_gang_in_one_domain_and_bad_ones_are_refused() {
    // Three 8-GPU nodes: n1 and n2 in NVLink domain nvl-a, n3 in nvl-b. j2 holds n1 for
    // 100 s (its 8 GPUs). j3, two 8-GPU replicas in one NVLink domain, cannot take n2 and
    // n3 (two domains): it waits for n1 and starts at 100, ending at 150. Without the column
    // it would start at once on n2 and n3.
    let cluster = "topology_levels: [nvlink]\nnodes:\n  - {name: \"n[1-2]\", topology: {nvlink: nvl-a}, resources: {gpu: 8}}\n  - {name: n3, topology: {nvlink: nvl-b}, resources: {gpu: 8}}\nqueues:\n  - {name: a, quota: {gpu: 24}}\n";
    let header =
        "submit,queue,class,gpus,replicas,duration,time_limit,checkpoint_interval,after,array,min_replicas,topology\n";
    let run = |rows: &str| baton_sim::run_trace("c.yaml", cluster, "t.csv", &format!("{header}{rows}"));
    let o = run("0,a,train,8,1,100,,,,,,\n0,a,train,8,2,50,,,,,,required=nvlink;preferred=node\n");
    assert!(o.is_err(), "preferred: node is refused");
    let o = run("0,a,train,8,1,100,,,,,,\n0,a,train,8,2,50,,,,,,required=nvlink\n").unwrap();
    assert_eq!((o.report.summary.finished, o.report.summary.end), (2, Secs(150_000)), "{:?}", o.report.summary);
    let o = run("0,a,train,8,1,100,,,,,,\n0,a,train,8,2,50,,,,,,\n").unwrap();
    assert_eq!(o.report.summary.end, Secs(100_000), "without the column the gang spans the domains");

    for (row, says) in [
        (
            "0,a,train,8,2,5,,,,,,required=zone\n",
            "column 12 (topology): topology level zone is not one this cluster declares",
        ),
        ("0,a,train,8,2,5,,,,,,required=nvlink;preferred=node\n", "column 12 (topology): "),
        ("0,a,train,8,3,5,,,,,,required=nvlink\n", "fits in no single nvlink"),
    ] {
        let e = run(row).unwrap_err().to_string();
        assert!(e.starts_with("t.csv:2: ") && e.contains(says), "{e}");
    }
}
