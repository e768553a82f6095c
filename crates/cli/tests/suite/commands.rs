//! Client commands called in-process against fake servers: retries and failover, output
//! formats, logs, queue updates, watch.

use crate::fake;

use std::time::{Duration, Instant};

use baton_cli::client::ClientError;
use baton_proto::v1;
use baton_proto::words::Word;
use fake::{Fake, FakeAgent, dead_addr, job, node, parse_error, resources, run, serve_agent, serve_baton};

#[test]
fn fails_over_to_the_second_address_when_the_first_is_down() {
    let fake = Fake::with(|s| s.jobs.push(job(1, "train-1", "q", "Pending", &[])));
    let server = serve_baton(fake.clone());
    let list = format!("{},{}", dead_addr(), server.addr());
    let (r, out) = run(&["list", "--server", &list]);
    r.unwrap();
    assert!(out.contains("train-1"), "{out}");
    assert_eq!(fake.state().calls, vec!["ListJobs", "ListArrays"]);
}

#[test]
fn no_leader_is_retried_with_the_same_request_id_then_served() {
    let fake = Fake::with(|s| s.no_leader_for = 2);
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["submit", "--server", &server.addr(), "--name", "a", "--queue", "q", "--", "true"]);
    r.unwrap();
    assert_eq!(out, "submitted job a (id 1)\n");
    let s = fake.state();
    assert_eq!(s.calls, vec!["Submit", "Submit", "Submit"]);
    // The two refused attempts were not recorded as submits; every attempt carried the
    // fresh id the CLI made once, so a retry the server did apply is not applied twice.
    assert_eq!(s.submits.len(), 1);
    let ids = &s.submit_request_ids;
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[0].len(), 32, "{ids:?}");
    assert!(ids.iter().all(|id| *id == ids[0]), "one id for all attempts: {ids:?}");
    assert_eq!(s.submits[0].request_id, ids[0]);
}

#[test]
fn no_leader_until_the_deadline_is_reported_as_such() {
    let fake = Fake::with(|s| s.no_leader_for = u32::MAX);
    let server = serve_baton(fake.clone());
    let started = Instant::now();
    let (r, _) = run(&["cancel", "train-1", "--server", &server.addr(), "--timeout", "1s"]);
    let e = r.unwrap_err();
    assert!(matches!(e, ClientError::NoLeader), "{e:?}");
    assert_eq!(e.to_string(), "no leader yet (an election may be under way); retry in a moment");
    assert!(fake.state().calls.len() >= 3, "retried: {:?}", fake.state().calls);
    assert!(started.elapsed() < Duration::from_secs(3), "bounded by --timeout");
}

fn two_jobs() -> Fake {
    Fake::with(|s| {
        s.jobs.push(job(1, "train-1", "team-a", "Running", &[("n1", &[0, 1, 2, 3])]));
        let mut p = job(2, "eval-7", "team-b", "Pending", &[]);
        p.reason = "waiting for quota in team-b".into();
        s.jobs.push(p);
    })
}

#[test]
fn list_table_has_the_header_and_a_row_per_job() {
    let fake = two_jobs();
    let server = serve_baton(fake);
    let (r, out) = run(&["list", "--server", &server.addr()]);
    r.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["ID", "NAME", "QUEUE", "STATE", "PRIORITY", "GPUS", "AGE", "NODES", "REASON"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[..6], ["1", "train-1", "team-a", "Running", "100", "4"]);
    assert_eq!(row[7], "n1[0-3]");
    assert!(lines[2].ends_with("waiting for quota in team-b"), "{out}");
    // Columns line up: every row's NAME starts where the header's does.
    let col = lines[0].find("NAME").unwrap();
    assert!(lines[1..].iter().all(|l| l[col..].starts_with(|c: char| c.is_alphanumeric())), "{out}");
}

#[test]
fn json_and_yaml_carry_the_message_fields() {
    let server = serve_baton(two_jobs());
    let (r, out) = run(&["list", "--server", &server.addr(), "-o", "json", "--state", "running"]);
    r.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).expect("list -o json is JSON");
    assert_eq!(v["truncated"], false);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], 1);
    assert_eq!(jobs[0]["spec"]["name"], "train-1");
    assert_eq!(jobs[0]["spec"]["tasks"][0]["resources"]["amounts"]["gpu"], 4);
    assert_eq!(jobs[0]["placements"][0]["gpus"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(jobs[0]["exit_code"], serde_json::Value::Null);

    let (r, out) = run(&["describe", "eval-7", "--server", &server.addr(), "-o", "yaml"]);
    r.unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&out).expect("describe -o yaml is YAML");
    assert_eq!(docs[0]["spec"]["name"].as_str(), Some("eval-7"));
    assert_eq!(docs[0]["reason"].as_str(), Some("waiting for quota in team-b"));
}

#[test]
fn submit_from_a_file_sends_its_job_with_overrides() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(
        &path,
        "name: from-file\nqueue: team-a\npriority: inference\ntasks:\n  - {name: ps, resources: {cpu: 4}}\n  \
         - {name: worker, replicas: 3, resources: {gpu: 8}}\ncommand: [torchrun, train.py]\ngrace: 90\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (r, out) = run(&["submit", "--server", &server.addr(), "-f", p, "--name", "renamed", "-o", "json"]);
    r.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["name"].as_str(), v["duplicate"].as_bool()), (Some("renamed"), Some(false)));
    let s = fake.state();
    let spec = s.submits[0].spec.as_ref().unwrap();
    assert_eq!(
        (spec.name.as_str(), spec.queue.as_str(), spec.priority_class.as_str()),
        ("renamed", "team-a", "inference")
    );
    assert_eq!(
        spec.tasks.iter().map(|t| (t.name.as_str(), t.replicas)).collect::<Vec<_>>(),
        [("ps", 1), ("worker", 3)]
    );
    assert_eq!(spec.command, vec!["torchrun", "train.py"]);
    assert_eq!(spec.grace_ms, Some(90_000));
    drop(s);

    // A command in the file and after -- is ambiguous; none at all is an error too.
    let (r, _) = run(&["submit", "--server", &server.addr(), "-f", p, "--", "other"]);
    assert!(r.unwrap_err().to_string().contains("keep one"));
    std::fs::write(&path, "name: a\nqueue: q\nresources: {gpu: 1}\n").unwrap();
    let (r, _) = run(&["submit", "--server", &server.addr(), "-f", p]);
    assert!(r.unwrap_err().to_string().contains("has no command"));
    assert_eq!(fake.state().submits.len(), 1);
}

fn queue_team_a() -> v1::QueueUsage {
    v1::QueueUsage {
        queue: Some(v1::Queue {
            name: "team-a".into(),
            cohort: "org".into(),
            quotas: vec![v1::PoolQuota {
                pool: "default".into(),
                nominal: resources(&[("gpu", 8), ("cpu", 64)]),
                borrow_limit: [("gpu".to_string(), 4)].into(),
                lend_limit: Default::default(),
            }],
            weight: 2.0,
            ordering: v1::QueueOrdering::StrictFifo.into(),
            within_queue: v1::WithinQueue::Never.into(),
            reclaim_within_cohort: v1::ReclaimWithinCohort::LowerPriority.into(),
            borrow_within_cohort: true,
            max_priority_threshold: Some(50),
            visibility: v1::JobVisibility::Names.into(),
        }),
        pools: vec![v1::PoolUsage {
            pool: "default".into(),
            used: resources(&[("gpu", 12)]),
            capacity: resources(&[("gpu", 8)]),
        }],
        pending: 1,
        running: 3,
        max_per_user: resources(&[("gpu", 4)]),
        revision: 7,
    }
}

#[test]
fn queue_update_changes_only_the_fields_given() {
    let fake = Fake::with(|s| s.queues.push(queue_team_a()));
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["queue", "update", "team-a", "--gpus", "4", "--lend-limit", "2", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "queue team-a updated\n");
    let s = fake.state();
    assert_eq!(s.calls, vec!["ListQueues", "UpdateQueue"]);
    let before = queue_team_a().queue.unwrap();
    let mut expected = before.clone();
    expected.quotas[0].nominal = resources(&[("gpu", 4), ("cpu", 64)]);
    expected.quotas[0].lend_limit = [("gpu".to_string(), 2)].into();
    assert_eq!(s.updated_queues, vec![(expected, 7)], "sent with the revision it read");
    assert!(s.put_queues.is_empty());
    drop(s);

    // From a file: what it names changes, the rest stays.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.yaml");
    std::fs::write(&path, "name: team-a\nweight: 5\n").unwrap();
    let (r, _) = run(&["queue", "update", "-f", path.to_str().unwrap(), "--server", &server.addr()]);
    r.unwrap();
    let (put, revision) = fake.state().updated_queues[1].clone();
    assert_eq!((put.weight, revision), (5.0, 8));
    assert_eq!(
        (put.cohort.as_str(), put.ordering(), put.max_priority_threshold),
        ("org", v1::QueueOrdering::StrictFifo, Some(50))
    );
    assert_eq!(put.quotas[0].nominal, resources(&[("gpu", 4), ("cpu", 64)]));
    assert_eq!(put.visibility(), v1::JobVisibility::Names, "a file does not say, so it stays");

    let (r, _) = run(&["queue", "update", "ghost", "--weight", "1", "--server", &server.addr()]);
    assert_eq!(r.unwrap_err().to_string(), "unknown queue \"ghost\"; see baton queue list");
}

#[test]
fn a_queue_update_racing_another_write_redoes_its_change_on_what_that_write_left() {
    let other = v1::Queue { weight: 9.0, ..queue_team_a().queue.unwrap() };
    let fake = Fake::with(|s| {
        s.queues.push(queue_team_a());
        s.interfering_writes.push(other);
    });
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["queue", "update", "team-a", "--gpus", "4", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "queue team-a updated\n");
    let s = fake.state();
    assert_eq!(s.calls, vec!["ListQueues", "UpdateQueue", "ListQueues", "UpdateQueue"]);
    let now = s.queues[0].queue.clone().unwrap();
    assert_eq!(now.weight, 9.0, "the other client's change is kept");
    assert_eq!(now.quotas[0].nominal, resources(&[("gpu", 4), ("cpu", 64)]), "and so is this one's");
    assert_eq!(s.updated_queues.iter().map(|(_, r)| *r).collect::<Vec<_>>(), vec![8]);
}

#[test]
fn a_queue_update_that_meets_another_write_every_time_gives_up_and_says_so() {
    let fake = Fake::with(|s| {
        s.queues.push(queue_team_a());
        s.interfering_writes = vec![queue_team_a().queue.unwrap(); 10];
    });
    let server = serve_baton(fake.clone());
    let (r, _) = run(&["queue", "update", "team-a", "--weight", "3", "--server", &server.addr()]);
    let e = r.unwrap_err().to_string();
    assert!(e.starts_with("queue team-a changed under each of 5 tries to update it"), "{e}");
    assert!(e.contains("revision 11 then 12") && e.contains("baton queue get team-a"), "{e}");
    let s = fake.state();
    assert_eq!(s.calls.len(), 10, "five reads and five writes: {:?}", s.calls);
    assert!(s.updated_queues.is_empty());
}

#[test]
fn queue_create_refuses_an_existing_queue_and_leaves_defaults_to_the_server() {
    let fake = Fake::with(|s| s.queues.push(queue_team_a()));
    let server = serve_baton(fake.clone());
    let (r, _) = run(&["queue", "create", "team-a", "--gpus", "1", "--server", &server.addr()]);
    let e = r.unwrap_err().to_string();
    assert_eq!(e, "queue team-a already exists; change it with baton queue update");
    assert_eq!(fake.state().calls, vec!["CreateQueue"], "refused by the server, not by a list first");
    let (r, _) = run(&["queue", "create", "b", "--max-priority-threshold", "5", "--server", &server.addr()]);
    assert!(r.unwrap_err().to_string().contains("max_priority_threshold"));
    let (r, out) = run(&["queue", "create", "b", "--gpus", "2", "--cohort", "org", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "queue b created\n");
    let sent = fake.state().created_queues[0].clone();
    assert_eq!((sent.name.as_str(), sent.cohort.as_str()), ("b", "org"));
    assert_eq!(sent.quotas[0].nominal, resources(&[("gpu", 2)]));
    // What the flags did not say is left empty for the server to fill.
    let unspecified = (v1::QueueOrdering::Unspecified, v1::WithinQueue::Unspecified);
    assert_eq!((sent.weight, (sent.ordering(), sent.within_queue())), (0.0, unspecified));
}

#[test]
fn cohort_create_is_decided_by_the_server_not_by_a_list_first() {
    let fake = Fake::with(|s| s.cohorts.push(v1::Cohort { name: "org".into(), ..Default::default() }));
    let server = serve_baton(fake.clone());
    let (r, _) = run(&["cohort", "create", "org", "--fair-sharing", "--server", &server.addr()]);
    assert_eq!(r.unwrap_err().to_string(), "cohort org already exists");
    assert_eq!(fake.state().calls, vec!["CreateCohort"]);
    assert!(!fake.state().cohorts[0].fair_sharing, "the existing cohort is left as it was");
    let (r, out) = run(&["cohort", "create", "lab", "--parent", "org", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "cohort lab created\n");
    assert_eq!(fake.state().cohorts[1], v1::Cohort { name: "lab".into(), parent: "org".into(), fair_sharing: false });
}

#[test]
fn class_create_is_decided_by_the_server_not_by_a_list_first() {
    let urgent = v1::PriorityClass { name: "urgent".into(), value: 900, preemptible: false };
    let fake = Fake::with(|s| s.classes.push(urgent.clone()));
    let server = serve_baton(fake.clone());
    let (r, _) = run(&["class", "create", "urgent", "--value", "5", "--server", &server.addr()]);
    assert_eq!(r.unwrap_err().to_string(), "priority class urgent already exists");
    assert_eq!(fake.state().calls, vec!["CreateClass"]);
    assert_eq!(fake.state().classes, vec![urgent]);
    let (r, out) = run(&["class", "create", "batch", "--value", "-3", "--preemptible", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "priority class batch created\n");
    assert_eq!(fake.state().classes[1], v1::PriorityClass { name: "batch".into(), value: -3, preemptible: true });
}

#[test]
fn cluster_info_shows_use_against_nominal_with_borrowing() {
    let fake = Fake::with(|s| {
        s.info = v1::ClusterInfoReply {
            cluster_id: "c1".into(),
            replicas: vec![
                v1::Replica {
                    id: 1,
                    addr: "10.0.0.1:7070".into(),
                    role: v1::ReplicaRole::Leader.into(),
                    ..Default::default()
                },
                v1::Replica {
                    id: 2,
                    addr: "10.0.0.2:7070".into(),
                    role: v1::ReplicaRole::Follower.into(),
                    ..Default::default()
                },
            ],
            leader_id: 1,
            leader_addr: "10.0.0.1:7070".into(),
            term: 7,
            applied_index: 1234,
            answered_by: 2,
            pools: vec![v1::PoolUsage {
                pool: "default".into(),
                used: resources(&[("gpu", 12)]),
                capacity: resources(&[("gpu", 16)]),
            }],
            queues: vec![queue_team_a()],
            jobs_pending: 1,
            jobs_running: 3,
            scheduler: Some(v1::SchedulerSettings { reserve_after_ms: Some(300_000) }),
            reservations: vec![v1::PoolReservation {
                job: "gang".into(),
                pool: "default".into(),
                nodes: vec!["n1".into(), "n2".into()],
                waiting_for: 3,
            }],
            insecure: true,
            tenancy: Some(v1::TenancySettings {
                allow_root_jobs: Some(false),
                max_jobs_per_user: Some(1000),
                max_jobs_per_queue: Some(10000),
            }),
            usage: Some(v1::UsageSettings {
                half_life_ms: Some(7 * 86_400_000),
                weights_milli: [("gpu".to_string(), 1000), ("cpu".to_string(), 250)].into(),
            }),
            accounting: Some(v1::AccountingInfo {
                on: true,
                retention_ms: 400 * 86_400_000,
                records_made: 1234,
                oldest_here_ms: 1_793_491_200_000,
                newest_here: 1230,
            }),
            behaviour: 2,
            topology_levels: vec!["nvlink".into(), "rack".into(), "zone".into()],
        }
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["cluster", "info", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("topology levels: nvlink, rack, zone (lowest first, above the node)"), "{out}");
    let newest = baton_model::behaviour::BEHAVIOUR;
    assert!(out.contains(&format!("apply behaviour: 2 (this client's build applies up to {newest})")), "{out}");
    assert!(out.contains("usage over time: half-life 7d00h, weights cpu 0.25, gpu 1"), "{out}");
    assert!(
        out.contains(
            "accounting: on, records kept 400d00h; 1234 made; this replica holds those that ended from \
             2026-11-01T00:00:00.000Z (up to number 1230)"
        ),
        "{out}"
    );
    assert!(out.contains("reservations (reserve_after 5m00s):"), "{out}");
    assert!(out.contains("tenancy: root jobs refused, max_jobs_per_user 1000, max_jobs_per_queue 10000"), "{out}");
    let row = out.lines().find(|l| l.trim_start().starts_with("gang")).expect("a row for gang's reservation");
    assert!(row.contains("default") && row.contains("n1,n2") && row.contains("3 jobs"), "{out}");
    assert!(out.contains("leader: replica 1 at 10.0.0.1:7070, term 7"), "{out}");
    assert!(out.contains("applied index: 1234"), "{out}");
    assert!(out.contains("transport: INSECURE (plain TCP"), "{out}");
    assert!(out.contains("Follower"), "{out}");
    assert!(out.contains("gpu 12/16"), "{out}");
    let row = out.lines().find(|l| l.trim_start().starts_with("team-a")).expect("a row for team-a");
    assert!(row.contains("gpu 12/8  (borrowing 4)"), "{out}");
    assert!(row.contains("3 running, 1 pending"), "{out}");
}

#[test]
fn cluster_info_names_a_failing_replica_and_why() {
    let fake = Fake::with(|s| {
        s.info = v1::ClusterInfoReply {
            cluster_id: "c1".into(),
            replicas: vec![
                v1::Replica {
                    id: 2,
                    addr: "10.0.0.2:7070".into(),
                    peer_addr: "10.0.0.2:7071".into(),
                    role: v1::ReplicaRole::Follower.into(),
                    failure: "disk failing: /var/lib/baton/raft.sled: No space left on device".into(),
                    rack: "rack-b".into(),
                    version: "0.1.0".into(),
                    format: 4,
                },
                v1::Replica {
                    id: 3,
                    addr: "10.0.0.3:7070".into(),
                    role: v1::ReplicaRole::Follower.into(),
                    ..Default::default()
                },
            ],
            answered_by: 2,
            ..Default::default()
        }
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["cluster", "info", "--server", &server.addr()]);
    r.unwrap();
    let row = out.lines().find(|l| l.contains("10.0.0.2:7070")).expect("a row for replica 2");
    assert!(row.contains("FAILED: disk failing") && row.contains("No space left on device"), "{out}");
    assert!(row.contains("rack-b"), "{out}");
    assert!(out.contains("VERSION") && out.contains("FORMAT"), "{out}");
    assert!(row.contains(" 0.1.0 ") && row.contains(" 4 "), "each replica's build and data format: {out}");
    // Raft on a peer port of its own: both addresses are shown.
    assert!(row.contains("10.0.0.2:7070 (peer 10.0.0.2:7071)"), "{out}");
    let row = out.lines().find(|l| l.contains("10.0.0.3:7070")).expect("a row for replica 3");
    assert!(row.contains(" ? "), "a replica not heard from yet shows '?': {out}");
    assert!(out.contains("transport: mutual TLS"), "{out}");
    let (r, out) = run(&["cluster", "info", "--server", &server.addr(), "-o", "json"]);
    r.unwrap();
    assert!(out.contains("\"failure\": \"disk failing"), "{out}");
    assert!(out.contains("\"peer_addr\": \"10.0.0.2:7071\""), "{out}");
    assert!(out.contains("\"format\": 4") && out.contains("\"version\": \"0.1.0\""), "{out}");
    assert!(out.contains("\"insecure\": false"), "{out}");
}

#[test]
fn cluster_set_changes_reserve_after_and_never_turns_it_off() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["cluster", "set", "--reserve-after", "10m", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("reserve_after is now 10m00s"), "{out}");
    let (r, _) = run(&["cluster", "set", "--reserve-after", "never", "--server", &server.addr()]);
    r.unwrap();
    let sets = fake.state().scheduler_sets.clone();
    assert_eq!(sets.iter().map(|s| s.reserve_after_ms).collect::<Vec<_>>(), vec![Some(600_000), None]);
}

#[test]
fn cluster_set_changes_tenancy_settings_leaving_the_others() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["cluster", "set", "--max-jobs-per-user", "5", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("max_jobs_per_user is now 5"), "{out}");
    let (r, _) =
        run(&["cluster", "set", "--allow-root-jobs", "true", "--max-jobs-per-queue", "9", "--server", &server.addr()]);
    r.unwrap();
    let s = fake.state();
    assert!(s.scheduler_sets.is_empty(), "reserve_after was not given: {:?}", s.scheduler_sets);
    let sent: Vec<_> =
        s.tenancy_sets.iter().map(|t| (t.allow_root_jobs, t.max_jobs_per_user, t.max_jobs_per_queue)).collect();
    assert_eq!(sent, vec![(None, Some(5), None), (Some(true), None, Some(9))]);
    drop(s);
    let (r, _) = run(&["cluster", "set", "--server", &server.addr()]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("--reserve-after") && e.contains("--max-jobs-per-user"), "{e}");
}

#[test]
fn submit_run_as_names_the_unix_user() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let (r, _) =
        run(&["submit", "--server", &server.addr(), "--name", "j", "--queue", "q", "--run-as", "svc", "--", "true"]);
    r.unwrap();
    assert_eq!(fake.state().submits[0].run_as, "svc");
    let (r, _) =
        run(&["submit", "--server", &server.addr(), "--name", "k", "--queue", "q", "--run-as", "0", "--", "true"]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("--run-as") && e.contains("not a Unix user name"), "{e}");
    assert_eq!(fake.state().submits.len(), 1);
}

fn logs_cluster(agent_addr: &str, second: &str) -> Fake {
    let (a, b) = (agent_addr.to_string(), second.to_string());
    Fake::with(move |s| {
        s.jobs.push(job(1, "train-1", "q", "Running", &[("n1", &[0, 1, 2, 3]), ("n2", &[0, 1, 2, 3])]));
        s.jobs.push(job(2, "waiting", "q", "Pending", &[]));
        // Ended: no placements; its events say attempt 1 ran on n1 and attempt 2 on n2.
        let mut done = job(3, "done-1", "q", "Succeeded", &[]);
        done.attempt = 2;
        for (attempt, node) in [(1, "n1"), (2, "n2")] {
            done.events.push(v1::Event {
                kind: v1::EventKind::Started.into(),
                nodes: vec![node.into()],
                attempt,
                ..Default::default()
            });
        }
        s.jobs.push(done);
        s.nodes.push(node("n1", &a));
        s.nodes.push(node("n2", &b));
    })
}

#[test]
fn logs_follow_streams_from_the_agent_that_has_the_rank() {
    let first = FakeAgent::default();
    let second = FakeAgent::default();
    second.logs.lock().unwrap().insert(1, vec!["step 1\n", "step 2\n", "done\n"]);
    let (a1, a2) = (serve_agent(first.clone()), serve_agent(second.clone()));
    let server = serve_baton(logs_cluster(&a1.addr(), &a2.addr()));
    let (r, out) = run(&["logs", "train-1", "-f", "--rank", "1", "--stderr", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "step 1\nstep 2\ndone\n");
    // n1's agent does not have rank 1 and said so; n2's served it.
    let asked = second.requests.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    let req = &asked[0];
    assert_eq!(
        (req.job.as_str(), req.rank, req.stream.as_str(), req.follow, req.attempt),
        ("train-1", 1, "stderr", true, 0)
    );
    // Agents keep logs per job id (a name is reused): the name is resolved to it.
    assert_eq!(req.job_id, 1);
    assert_eq!(first.requests.lock().unwrap().len(), 1);
}

#[test]
fn logs_of_an_ended_job_come_from_where_its_started_event_says_it_ran() {
    let (first, second) = (FakeAgent::default(), FakeAgent::default());
    second.logs.lock().unwrap().insert(0, vec!["resumed from step 31\n"]);
    let (a1, a2) = (serve_agent(first.clone()), serve_agent(second.clone()));
    let server = serve_baton(logs_cluster(&a1.addr(), &a2.addr()));
    let (r, out) = run(&["logs", "done-1", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "resumed from step 31\n");
    assert!(first.requests.lock().unwrap().is_empty(), "attempt 2 ran on n2 only");
    // Attempt 1 ran on n1, whose agent does not have it.
    let (r, _) = run(&["logs", "done-1", "--attempt", "1", "--server", &server.addr()]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("agents without it: n1"), "{e}");
    assert_eq!(first.requests.lock().unwrap().len(), 1);
}

#[test]
fn logs_errors_say_what_is_wrong() {
    let agent = FakeAgent::default();
    let served = serve_agent(agent);
    let dead = dead_addr();
    let server = serve_baton(logs_cluster(&dead, ""));
    let addr = server.addr();
    let (r, _) = run(&["logs", "waiting", "--server", &addr]);
    assert!(r.unwrap_err().to_string().contains("job waiting never started"));
    let (r, _) = run(&["logs", "train-1", "--rank", "2", "--server", &addr]);
    assert!(r.unwrap_err().to_string().contains("ranks 0 to 1"));
    let (r, _) = run(&["logs", "train-1", "--node", "n2", "--server", &addr]);
    assert!(r.unwrap_err().to_string().contains("node n2 has no agent address"));
    let (r, _) = run(&["logs", "train-1", "--server", &addr, "--timeout", "2s"]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("agent unreachable") && e.contains(&dead), "{e}");
    drop(served);
}

#[test]
fn watch_prints_one_line_per_event_and_says_when_the_stream_ends() {
    let fake = Fake::with(|s| {
        s.jobs.push(job(1, "train-1", "q", "Running", &[("n1", &[0])]));
        s.events.push(v1::Event {
            at_ms: 1_795_341_601_234,
            job: "train-1".into(),
            node: String::new(),
            kind: v1::EventKind::Started.into(),
            message: "attempt 1 started on n1[0-3]".into(),
            ..Default::default()
        });
        s.events.push(v1::Event {
            at_ms: 1_795_341_602_000,
            job: String::new(),
            node: "n2".into(),
            kind: v1::EventKind::NodeLost.into(),
            message: "node n2 lost".into(),
            ..Default::default()
        });
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["watch", "--replay", "--server", &server.addr()]);
    assert!(matches!(r, Err(ClientError::Stream(_))), "{r:?}");
    assert_eq!(
        out,
        "2026-11-22T10:00:01.234Z  Started  train-1  attempt 1 started on n1[0-3]\n\
         2026-11-22T10:00:02.000Z  NodeLost  n2  node n2 lost\n"
    );
    let (r, out) = run(&["watch", "train-1", "-o", "json", "--server", &server.addr()]);
    assert!(r.is_err());
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!((v["kind"].as_str(), v["at_ms"].as_u64()), (Some("Started"), Some(1_795_341_601_234)));
    let (r, _) = run(&["watch", "ghost", "--server", &server.addr()]);
    assert_eq!(r.unwrap_err().to_string(), "unknown job \"ghost\"; see baton list");
}

#[test]
fn nodes_cordon_and_acks() {
    let fake = Fake::with(|s| {
        s.nodes.push(node("n1", "10.0.0.5:7071"));
        s.nodes.push(v1::Node { maintenance: "fw".into(), ..node("n2", "10.0.0.6:7071") });
    });
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["nodes", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.starts_with("NAME"), "{out}");
    assert!(out.lines().nth(1).unwrap().contains("0/8"), "{out}");
    assert!(out.lines().nth(2).unwrap().contains("Ready,Maintenance(fw)"), "{out}");
    let (r, out) = run(&["uncordon", "n1", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(out, "node n1 uncordoned\n");
    assert_eq!(fake.state().cordons, vec![v1::CordonRequest { node: "n1".into(), cordoned: false }]);
    let (r, _) = run(&["cordon", "n9", "--server", &server.addr()]);
    assert_eq!(r.unwrap_err().to_string(), "unknown node \"n9\"; see baton nodes");
}

#[test]
fn describe_shows_a_starving_jobs_reservation_and_a_time_limit() {
    let fake = Fake::with(|s| {
        let mut j = job(2, "gang", "team-a", "Pending", &[]);
        j.spec.as_mut().unwrap().time_limit_ms = Some(7_200_000);
        j.reservation = Some(v1::PoolReservation {
            job: "gang".into(),
            pool: "default".into(),
            nodes: vec!["n1".into(), "n2".into()],
            waiting_for: 2,
        });
        s.jobs.push(j);
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["describe", "gang", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Reservation:  n1, n2 (pool default); waiting for 2 running jobs"), "{out}");
    assert!(out.contains("Time limit:   2h00m"), "{out}");
}

#[test]
fn describe_shows_the_preemption_the_server_holds_and_no_default_of_its_own() {
    let fake = Fake::with(|s| {
        let mut said = job(1, "said", "team-a", "Running", &[]);
        let spec = said.spec.as_mut().unwrap();
        spec.set_preemption_mode(v1::PreemptionMode::Requeue);
        spec.set_topology(v1::Topology::Rack);
        spec.grace_ms = Some(10_000);
        s.jobs.push(said);
        // A server that said nothing: the CLI must not fill in checkpoint or 30s.
        s.jobs.push(job(2, "silent", "team-a", "Pending", &[]));
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["describe", "said", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Preemption:  requeue, grace 10s\n"), "{out}");
    assert!(out.contains("Topology:    one rack\n"), "{out}");
    assert!(out.contains("State:       Running\n"), "{out}");
    let (r, out) = run(&["describe", "silent", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Preemption:  -\n"), "{out}");
    assert!(!out.contains("Topology"), "{out}");
}

#[test]
fn queue_and_submit_flags_take_the_words_of_the_apis_enums() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let (r, _) = run(&[
        "queue",
        "create",
        "b",
        "--ordering",
        "strictfifo",
        "--reclaim-within-cohort",
        "Never",
        "--server",
        &addr,
    ]);
    r.unwrap();
    let sent = fake.state().created_queues[0].clone();
    assert_eq!(
        (sent.ordering(), sent.reclaim_within_cohort()),
        (v1::QueueOrdering::StrictFifo, v1::ReclaimWithinCohort::Never)
    );
    let e = parse_error(&["queue", "create", "c", "--ordering", "fifo", "--server", &addr]);
    assert!(e.contains("\"fifo\" is not one of BestEffortFIFO, StrictFIFO"), "{e}");
    let (r, _) = run(&["list", "--state", "RUNNING", "--state", "paused", "--server", &addr]);
    r.unwrap();
    let e = parse_error(&["list", "--state", "sleeping", "--server", &addr]);
    assert!(e.contains("\"sleeping\" is not one of Pending, Running, Preempting"), "{e}");
    let e = parse_error(&["submit", "--name", "j", "--queue", "q", "--preemption-mode", "pause", "--server", &addr]);
    assert!(e.contains("\"pause\" is not one of checkpoint, requeue, cancel, suspend"), "{e}");
    assert_eq!(fake.state().calls, vec!["CreateQueue", "ListJobs"], "bad words never reach the server");
}

#[test]
fn describe_shows_the_job_and_with_events_its_history() {
    let fake = Fake::with(|s| {
        let mut j = job(1, "train-1", "team-a", "Running", &[("n1", &[0, 1, 2, 3])]);
        j.spec.as_mut().unwrap().command = vec!["python".into(), "train.py".into(), "--note".into(), "a b".into()];
        j.events.push(v1::Event {
            at_ms: 1_795_341_601_234,
            job: "train-1".into(),
            node: "n1".into(),
            kind: v1::EventKind::Started.into(),
            message: "attempt 1 started".into(),
            ..Default::default()
        });
        s.jobs.push(j);
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["describe", "train-1", "--server", &server.addr()]);
    r.unwrap();
    for needle in [
        "Name:        train-1 (id 1)",
        "State:       Running (attempt 1)",
        "Priority:    100 (class train, preemptible)",
        "Task:        main: 1 x (gpu 4)",
        "Command:     python train.py --note 'a b'",
        "Placement:   n1[0-3]",
    ] {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
    assert!(!out.contains("Events:"), "{out}");
    let (r, out) = run(&["describe", "1", "--events", "--server", &server.addr()]);
    r.unwrap();
    let events = out.split("Events:\n").nth(1).expect("an events section");
    assert!(events.lines().nth(1).unwrap().contains("2026-11-22T10:00:01.234Z  Started  n1"), "{out}");
}

#[test]
fn cohorts_and_classes_are_created_after_checking_names() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let (r, out) = run(&["cohort", "create", "org", "--fair-sharing", "--server", &addr]);
    r.unwrap();
    assert_eq!(out, "cohort org created\n");
    let (r, _) = run(&["class", "create", "bad name", "--value", "5", "--server", &addr]);
    assert!(r.unwrap_err().to_string().contains("class.name"));
    let (r, out) = run(&["class", "list", "--server", &addr]);
    r.unwrap();
    assert_eq!(out, "no priority classes\n");
    assert_eq!(fake.state().calls, vec!["CreateCohort", "ListClasses"], "a bad name never reaches the server");
}

#[test]
fn cancel_resolves_the_name_once_and_acts_on_the_id() {
    let fake = two_jobs();
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["cancel", "eval-7", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("cancelled"), "{out}");
    let s = fake.state();
    assert_eq!(s.calls, vec!["GetJob", "CancelJob"]);
    // A retry of this request could not reach a newer job named eval-7: it names id 2.
    assert_eq!(s.acted_on, vec![v1::JobRef { name: "eval-7".into(), id: 2 }]);
}

#[test]
fn token_create_sends_only_the_hash_with_the_callers_token_and_prints_the_token_once() {
    let fake = Fake::with(|_| {});
    let server = serve_baton(fake.clone());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin.token");
    std::fs::write(&file, "admin-secret\n").unwrap();
    let file = file.display().to_string();
    let args =
        ["token", "create", "--user", "alice", "--queue", "a", "--server", &server.addr(), "--token-file", &file];
    let (r, out) = run(&args);
    r.unwrap();
    let token = out.lines().nth(1).unwrap();
    assert_eq!(token.len(), 64, "{out}");
    let s = fake.state();
    assert_eq!(s.authorizations, vec!["Bearer admin-secret"]);
    let sent = &s.token_requests[0];
    assert_eq!(sent.hash, baton_server::auth::hash_token(token).to_vec(), "only the SHA-256 travels");
    assert!(!format!("{sent:?}").contains(token));
    assert_eq!((sent.user.as_str(), sent.queues.clone()), ("alice", vec!["a".to_string()]));
}

#[test]
fn token_grant_admin_asks_for_a_queue_admin_grant() {
    let fake = Fake::with(|_| {});
    let server = serve_baton(fake.clone());
    let (r, out) = run(&["token", "grant", "0123", "--queue", "a", "--admin", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("administering queue a granted to token 0123"), "{out}");
    let (r, _) = run(&["token", "grant", "0123", "--queue", "b", "--server", &server.addr()]);
    r.unwrap();
    let sent: Vec<(String, bool, bool)> =
        fake.state().grant_requests.iter().map(|g| (g.queue.clone(), g.admin, g.revoke)).collect();
    assert_eq!(sent, [("a".to_string(), true, false), ("b".to_string(), false, false)]);
}

#[test]
fn whoami_prints_the_user_roles_and_queues() {
    let server = serve_baton(Fake::with(|_| {}));
    let (r, out) = run(&["whoami", "--server", &server.addr()]);
    r.unwrap();
    assert_eq!(
        out,
        "user alice (token 0123)\nroles: none\nqueues: a\njobs run as Unix user alice unless a submit names another (--run-as)\n"
    );
}

#[test]
fn an_unreadable_token_file_is_named_before_anything_is_sent() {
    let fake = Fake::with(|_| {});
    let server = serve_baton(fake.clone());
    let (r, _) = run(&["whoami", "--server", &server.addr(), "--token-file", "/nonexistent/token"]);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("/nonexistent/token"), "{e}");
    assert!(fake.state().calls.is_empty());
}

#[test]
fn describe_names_the_owner_and_says_when_the_environment_is_hidden() {
    let fake = Fake::with(|s| {
        let mut j = job(1, "train-1", "team-a", "Pending", &[]);
        j.owner = "alice".into();
        j.env_hidden = true;
        s.jobs.push(j);
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["describe", "train-1", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.lines().any(|l| l.starts_with("Owner") && l.ends_with("alice")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("Env") && l.contains("hidden")), "{out}");
}

#[test]
fn token_revoke_names_the_token_by_id_and_sends_the_callers_token() {
    let fake = Fake::with(|_| {});
    let server = serve_baton(fake.clone());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t");
    std::fs::write(&file, "admin-secret").unwrap();
    let file = file.display().to_string();
    let (r, out) = run(&["token", "revoke", "3f2a9c0e1b7d4a65", "--server", &server.addr(), "--token-file", &file]);
    r.unwrap();
    assert_eq!(out, "token 3f2a9c0e1b7d4a65 revoked\n");
    let s = fake.state();
    assert_eq!(
        (s.revoked.clone(), s.authorizations.clone()),
        (vec!["3f2a9c0e1b7d4a65".to_string()], vec!["Bearer admin-secret".to_string()])
    );
}

#[test]
fn queue_visibility_is_set_by_create_and_update_and_shown_by_get() {
    let fake = Fake::with(|s| s.queues.push(queue_team_a()));
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let (r, _) = run(&["queue", "create", "b", "--visibility", "own", "--server", &addr]);
    r.unwrap();
    assert_eq!(fake.state().created_queues[0].visibility(), v1::JobVisibility::Own);
    let (r, _) = run(&["queue", "create", "c", "--server", &addr]);
    r.unwrap();
    let sent = fake.state().created_queues[1].visibility();
    assert_eq!(sent, v1::JobVisibility::Unspecified, "left to the server (all)");
    let (r, _) = run(&["queue", "update", "team-a", "--visibility", "all", "--server", &addr]);
    r.unwrap();
    let (sent, revision) = fake.state().updated_queues[0].clone();
    assert_eq!((sent.visibility(), sent.weight, revision), (v1::JobVisibility::All, 2.0, 7));
    // With a file too: the file says nothing of it, the flag does.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.yaml");
    std::fs::write(&path, "name: team-a\nweight: 5\n").unwrap();
    let (r, _) = run(&["queue", "update", "-f", path.to_str().unwrap(), "--visibility", "own", "--server", &addr]);
    r.unwrap();
    assert_eq!(fake.state().updated_queues[1].0.visibility(), v1::JobVisibility::Own);
    let (r, out) = run(&["queue", "get", "team-a", "--server", &addr]);
    r.unwrap();
    assert!(out.contains("Visibility:  own (what its users see of others' jobs)"), "{out}");
    assert!(out.contains("Per user:    gpu 4 (max_per_user)"), "{out}");
    let e = parse_error(&["queue", "create", "d", "--visibility", "secret", "--server", &addr]);
    assert!(e.contains("\"secret\" is not one of all, names, own"), "{e}");
}

#[test]
fn submit_after_sends_the_dependencies_from_flags_and_file_and_refuses_bad_ones_before_sending() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let base = ["submit", "--server", addr.as_str(), "--name", "train", "--queue", "q"];
    let (r, _) = run(&[&base[..], &["--after", "ok:prep,any:17", "--after", "started:server", "--", "true"]].concat());
    r.unwrap();
    let deps: Vec<(String, &str)> = fake.state().submits[0]
        .after
        .iter()
        .map(|d| (d.job.clone(), v1::DependencyCondition::word_of(d.when)))
        .collect();
    assert_eq!(deps, [("prep".into(), "ok"), ("17".into(), "any"), ("server".into(), "started")]);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(
        &path,
        "name: eval\nqueue: q\nresources: {gpu: 1}\ncommand: [true]\nafter: [{job: train, when: notok}]\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (r, _) = run(&["submit", "--server", &addr, "-f", p, "--after", "ok:prep"]);
    r.unwrap();
    let deps: Vec<String> = fake.state().submits[1].after.iter().map(|d| d.job.clone()).collect();
    assert_eq!(deps, ["train", "prep"], "the file's, then the flag's");

    for (bad, says) in [("soon:prep", "ok, any, notok, started"), ("prep", "WHEN:JOB"), ("ok:bad name", "bad name")] {
        let (r, _) = run(&[&base[..], &["--after", bad, "--", "true"]].concat());
        let e = r.unwrap_err().to_string();
        assert!(e.contains("--after") && e.contains(says), "{bad}: {e}");
    }
    assert_eq!(fake.state().submits.len(), 2, "nothing sent for bad input");
}

#[test]
fn describe_shows_what_a_held_job_waits_for() {
    let fake = Fake::with(|s| {
        let mut j = job(3, "train", "team-a", "Pending", &[]);
        j.waiting_for = vec![v1::Dependency { job: "prep".into(), when: v1::DependencyCondition::Ok.into() }];
        s.jobs.push(j);
    });
    let server = serve_baton(fake);
    let (r, out) = run(&["describe", "train", "--server", &server.addr()]);
    r.unwrap();
    assert!(out.contains("Waits for:   ok:prep (held until they hold)"), "{out}");
}

#[test]
fn maintenance_create_expands_the_nodes_reads_the_times_and_list_and_delete_follow() {
    let fake = Fake::default();
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let create = ["maintenance", "create", "fw", "--server", addr.as_str(), "--nodes", "g[1-3],h7"];
    let (r, out) = run(&[&create[..], &["--start", "2026-12-01T02:00:00Z", "--end", "2026-12-01T06:30:00Z"]].concat());
    r.unwrap();
    assert!(
        out.contains("maintenance window fw created: 2026-12-01T02:00:00.000Z to 2026-12-01T06:30:00.000Z"),
        "{out}"
    );
    let w = fake.state().windows[0].clone();
    assert_eq!(w.nodes, ["g1", "g2", "g3", "h7"]);
    assert_eq!((w.start_ms, w.end_ms), (1_796_090_400_000, 1_796_106_600_000));

    let (r, out) = run(&["maintenance", "list", "--server", &addr]);
    r.unwrap();
    assert!(out.contains("fw") && out.contains("ahead") && out.contains("g1,g2,g3,h7"), "{out}");
    let (r, _) = run(&[&create[..], &["--start", "+1h", "--end", "+2h"]].concat());
    assert!(r.unwrap_err().to_string().contains("already exists"));

    for (start, end, says) in [
        ("tomorrow", "+2h", "--start"),
        ("+2h", "+1h", "is not after --start"),
        ("+1h", "2026-12-01T25:00:00Z", "--end"),
    ] {
        let (r, _) =
            run(&["maintenance", "create", "x", "--server", &addr, "--nodes", "g1", "--start", start, "--end", end]);
        let e = r.unwrap_err().to_string();
        assert!(e.contains(says), "{start} {end}: {e}");
    }
    let (r, _) =
        run(&["maintenance", "create", "x", "--server", &addr, "--nodes", "g[3-1]", "--start", "+1h", "--end", "+2h"]);
    assert!(r.unwrap_err().to_string().contains("--nodes"));
    assert_eq!(fake.state().windows.len(), 1, "nothing sent for bad input");

    let (r, out) = run(&["maintenance", "delete", "fw", "--server", &addr]);
    r.unwrap();
    assert!(out.contains("maintenance window fw deleted"), "{out}");
    assert!(fake.state().windows.is_empty());
}

#[test]
fn gpu_unhealthy_healthy_and_list_send_the_mark_and_show_it() {
    let fault = v1::GpuFault { gpu: 5, error: "XID 79".into(), since_ms: 1_796_090_400_000, by_check: false };
    let fake = Fake::with(|s| {
        s.nodes.push(v1::Node { unhealthy_gpus: vec![fault.clone()], ..node("g1", "10.0.0.5:7071") });
        s.nodes.push(node("g2", "10.0.0.6:7071"));
    });
    let server = serve_baton(fake.clone());
    let addr = server.addr();
    let (r, out) = run(&["gpu", "unhealthy", "g2", "3", "--error", "XID 48", "--server", &addr]);
    r.unwrap();
    assert!(out.contains("GPU 3 of node g2 marked unhealthy (XID 48)"), "{out}");
    let (r, out) = run(&["gpu", "healthy", "g1", "5", "--server", &addr]);
    r.unwrap();
    assert!(out.contains("GPU 5 of node g1 is healthy"), "{out}");
    let marks = fake.state().gpu_marks.clone();
    let want = |node: &str, gpu, healthy, error: &str| v1::SetGpuHealthRequest {
        node: node.into(),
        gpu,
        healthy,
        error: error.into(),
    };
    assert_eq!(marks, vec![want("g2", 3, false, "XID 48"), want("g1", 5, true, "")]);
    let (r, _) = run(&["gpu", "unhealthy", "g2", "3", "--error", " ", "--server", &addr]);
    assert!(r.unwrap_err().to_string().contains("--error"));
    assert_eq!(fake.state().gpu_marks.len(), 2, "nothing sent for bad input");

    let (r, out) = run(&["gpu", "list", "--server", &addr]);
    r.unwrap();
    let row = out.lines().nth(1).unwrap();
    assert!(
        row.contains("g1") && row.contains("5") && row.contains("2026-12-01T02:00:00.000Z") && row.contains("XID 79"),
        "{out}"
    );
    let (r, out) = run(&["nodes", "--server", &addr]);
    r.unwrap();
    assert!(out.lines().nth(1).unwrap().contains("Ready,GPU 5 unhealthy"), "{out}");
}
