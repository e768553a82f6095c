//! Day-2 operations with the real binary: racks in `cluster info`, adding and removing
//! replicas, moving leadership and replacing a dead replica's host while jobs run, rolling
//! restarts onto this build, data-format refusals, backups and restores.
//!
//! A test binary of its own, so that its clusters do not run beside the timing-sensitive
//! scenario replays of `tests/e2e`.

use std::process::Output;

use baton_chaos::cluster::{Cluster, NodeArgs, Timing};
use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::{Empty, JobState, ListJobsRequest, SubmitRequest};

/// The binary under test.
const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// `baton ARGS` as an operator runs it against `c` (its client certificate and the cluster's
/// admin token).
async fn baton(c: &Cluster, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let servers = c.servers.addrs.join(",");
    let tls = c.path("tls/client-chaos");
    let token_file = c.token_file();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(BATON)
            .args(&args)
            .args(["--timeout", "40s"])
            .env("BATON_SERVER", servers)
            .env("BATON_TLS_DIR", tls)
            .env("BATON_TOKEN_FILE", token_file)
            .env_remove("BATON_INSECURE")
            .env_remove("BATON_TOKEN")
            .output()
            .expect("baton runs")
    })
    .await
    .expect("the command's thread")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `args` and returns its stdout; panics with its stderr when it fails.
async fn ok(c: &Cluster, args: &[&str]) -> String {
    let out = baton(c, args).await;
    assert!(out.status.success(), "baton {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Runs `args`, which must fail, and returns its stderr.
async fn refused(c: &Cluster, args: &[&str]) -> String {
    let out = baton(c, args).await;
    assert!(!out.status.success(), "baton {args:?} should have been refused: {}", text(&out.stdout));
    text(&out.stderr)
}

async fn info_json(c: &Cluster) -> serde_json::Value {
    serde_json::from_str(&ok(c, &["cluster", "info", "-o", "json"]).await).expect("cluster info prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_info_shows_each_replicas_rack() {
    let c = Cluster::start_racked(BATON.as_ref(), &[], &Timing::default(), &["rack-a", "rack-b"]).await;
    // Each replica asks the others for their racks in the background: "?" until it heard.
    // The two calls may be answered by different replicas (the first one fails over while
    // the election runs), so both views are awaited, not only the first.
    let heard_all = |s: &str| !s.contains("\"rack\":\"?\"") && !s.lines().any(|l| l.contains("  ?  "));
    let (mut info, mut table) = (info_json(&c).await, ok(&c, &["cluster", "info"]).await);
    for _ in 0..100 {
        if heard_all(&info.to_string()) && heard_all(&table) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        (info, table) = (info_json(&c).await, ok(&c, &["cluster", "info"]).await);
    }
    let racks: Vec<(u64, String)> = info["replicas"]
        .as_array()
        .expect("a replicas list")
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), r["rack"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(racks, [(1, "rack-a".into()), (2, "rack-b".into()), (3, String::new())], "{info}");
    assert!(table.contains("RACK"), "{table}");
    let row = table.lines().find(|l| l.trim_start().starts_with("2 ")).expect("replica 2's row");
    assert!(row.contains("rack-b"), "{table}");
    let row = table.lines().find(|l| l.trim_start().starts_with("3 ")).expect("replica 3's row");
    assert!(row.contains(" - "), "a replica without --rack shows '-': {table}");
}

/// Mid-upgrade with the real binary: replica 3 restarted saying it reads only format 3 (as a
/// replica of the previous build would): `cluster info` shows it, commands of format 3 still
/// commit, a command of format 4 is refused naming replica 3, and once replica 3 is back on
/// this build's format the same command commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reading_an_older_format_holds_back_newer_commands_until_upgraded() {
    use baton_raft::identity::DATA_FORMAT;
    // The format before the one that brought CreateQueue (4).
    let older = 3;
    let mut c = Cluster::start(BATON.as_ref(), &[]).await;
    c.kill_replica(2);
    c.start_replica_from(2, BATON.as_ref(), &["--max-format", &older.to_string()]);
    // The leader is the one that must have heard it (each replica asks the others about once
    // a second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let leader = c.leader().await;
        let heard = c.answering(leader).await.map(|(_, info)| info.replicas.iter().map(|r| r.format).collect());
        if heard == Some(vec![DATA_FORMAT, DATA_FORMAT, older]) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the leader never heard replica 3's format: {heard:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let table = ok(&c, &["cluster", "info"]).await;
    assert!(table.contains("VERSION") && table.contains("FORMAT"), "{table}");

    let mut api = c.client().await;
    api.put_queue(gpu_queue("q", 8)).await.expect("a command of format 1 commits");
    let e = api.create_queue(gpu_queue("newer", 1)).await.expect_err("a command of format 4 waits");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    let behind = format!("replica 3 (reads formats up to {older})");
    assert!(e.message().contains("CreateQueue needs data format") && e.message().contains(&behind), "{e:?}");

    c.kill_replica(2);
    c.start_replica(2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut api = c.client().await;
        match api.create_queue(gpu_queue("newer", 1)).await {
            Ok(_) => break,
            Err(e) => assert!(std::time::Instant::now() < deadline, "still refused after the upgrade: {e:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Submits `name` (1 GPU, runs until killed) and returns once the cluster acknowledged it.
async fn submit_long(c: &Cluster, name: &str) {
    let mut api = c.client().await;
    let spec = gpu_job(name, "q", "", 1, 1, vec!["sleep".into(), "600".into()]);
    api.submit(SubmitRequest {
        spec: Some(spec),
        request_id: format!("req-{name}"),
        run_as: String::new(),
        after: Vec::new(),
        array: None,
    })
    .await
    .expect("submit acknowledged");
}

async fn job_names(c: &Cluster) -> Vec<String> {
    let mut api = c.client().await;
    let jobs = api.list_jobs(ListJobsRequest::default()).await.expect("list").into_inner().jobs;
    let mut names: Vec<String> = jobs.into_iter().filter_map(|j| j.spec.map(|s| s.name)).collect();
    names.sort();
    names
}

fn voters(info: &serde_json::Value) -> Vec<u64> {
    let mut v: Vec<u64> = info["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter(|r| r["role"] != "Learner")
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_join_leave_and_lead_in_turn_while_jobs_run() {
    let node = NodeArgs::gpus("n1", "", 8);
    // Leases long enough to outlast the writes' pause while leadership moves: the point is
    // that the job is never stopped.
    let t = Timing { heartbeat_timeout_ms: 6_000, lease_ms: 3_000, ..Timing::default() };
    let mut c = Cluster::start_with(BATON.as_ref(), std::slice::from_ref(&node), &t).await;
    let mut api = c.client().await;
    api.put_queue(gpu_queue("q", 8)).await.unwrap();
    submit_long(&c, "long").await;
    let long = c.wait_job("long", "running", |j| j.state() == JobState::Running).await;

    // Add replica 4: it joins as a learner, catches up, becomes a voter.
    let (_, addr4) = c.spawn_new_replica(4, Some("rack-d"));
    let said = ok(&c, &["cluster", "add-replica", "4", &addr4]).await;
    assert!(said.contains("replica 4") && said.contains("voter"), "{said}");
    assert_eq!(voters(&info_json(&c).await), [1, 2, 3, 4]);
    submit_long(&c, "after-add").await;

    // Duplicates are refused, naming what is taken.
    let e = refused(&c, &["cluster", "add-replica", "4", "127.0.0.1:1"]).await;
    assert!(e.contains("replica 4 is already a member"), "{e}");
    let e = refused(&c, &["cluster", "add-replica", "5", &addr4]).await;
    assert!(e.contains(&addr4) && e.contains("replica 4"), "{e}");

    // Leadership moves to replica 4, then replica 1 leaves.
    let said = ok(&c, &["cluster", "transfer-leader", "4"]).await;
    assert!(said.contains("replica 4 leads"), "{said}");
    assert_eq!(info_json(&c).await["leader_id"], 4);
    submit_long(&c, "after-transfer").await;
    ok(&c, &["cluster", "remove-replica", "1"]).await;
    c.kill_replica(0);
    assert_eq!(voters(&info_json(&c).await), [2, 3, 4]);

    // Below three voters, or an unknown id: refused.
    let e = refused(&c, &["cluster", "remove-replica", "2"]).await;
    assert!(e.contains("fewer than 3 voters"), "{e}");
    let e = refused(&c, &["cluster", "remove-replica", "9"]).await;
    assert!(e.contains("replica 9 is not a member"), "{e}");

    // Replica 2's host dies: a new host (replica 5, fresh data directory) replaces it.
    c.kill_replica(1);
    let (_, addr5) = c.spawn_new_replica(5, None);
    ok(&c, &["cluster", "add-replica", "5", &addr5]).await;
    ok(&c, &["cluster", "remove-replica", "2"]).await;
    assert_eq!(voters(&info_json(&c).await), [3, 4, 5]);
    submit_long(&c, "after-replace").await;

    // Nothing acknowledged is lost, and the first job ran through it all, never restarted.
    assert_eq!(job_names(&c).await, ["after-add", "after-replace", "after-transfer", "long"]);
    for j in ["after-add", "after-transfer", "after-replace"] {
        c.wait_job(j, "running", |j| j.state() == JobState::Running).await;
    }
    let now = c.wait_job("long", "still running", |j| j.state() == JobState::Running).await;
    assert_eq!(now.attempt, long.attempt, "the job was never restarted");
    let nodes = c.client().await.list_nodes(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(nodes.len(), 1);
}

/// Waits until something listens at `addr`.
async fn wait_listening(c: &Cluster, addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "nothing listens at {addr}; logs in {}", c.dir.path().display());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `cluster add-replica` asks the new replica which data format it reads before changing
/// anything: one that reads older than what the cluster already committed (here a format-4
/// command) is refused, naming both, and the membership stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reading_older_than_the_cluster_uses_is_not_added() {
    let mut c = Cluster::start(BATON.as_ref(), &[]).await;
    // Asked again while no replica leads: on a busy machine a second election can follow
    // the first at once (CI saw "no leader yet" here); what is checked comes after.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match c.client().await.create_queue(gpu_queue("q", 8)).await {
            Ok(_) => break,
            Err(e) if e.code() == tonic::Code::Unavailable && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => panic!("a command of format 4 commits: {e:?}"),
        }
    }
    let (i, addr4) = c.spawn_new_replica(4, None);
    c.kill_replica(i);
    c.start_replica_from(i, BATON.as_ref(), &["--max-format", "3"]);
    wait_listening(&c, &addr4).await;
    let e = refused(&c, &["cluster", "add-replica", "4", &addr4]).await;
    assert!(e.contains("replica 4") && e.contains("reads data formats up to 3, older than format"), "{e}");
    let info = info_json(&c).await;
    assert_eq!(info["replicas"].as_array().map(Vec::len), Some(3), "no learner was added: {info}");

    // The same replica on this build's format joins.
    c.kill_replica(i);
    c.start_replica(i);
    wait_listening(&c, &addr4).await;
    ok(&c, &["cluster", "add-replica", "4", &addr4]).await;
    assert_eq!(voters(&info_json(&c).await), [1, 2, 3, 4]);
}

/// Waits until replica `i` answers and has applied as far as the leader had when asked.
async fn wait_caught_up(c: &Cluster, i: usize) {
    let target = info_json(c).await["applied_index"].as_u64().unwrap_or(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(applied) = c.applied_index_of(i).await
            && applied >= target
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica {} did not catch up; logs in {}",
            i + 1,
            c.dir.path().display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Rewrites `dir`'s `cluster.id` as builds before the format field wrote it (format 1).
fn as_previous_build_left_it(dir: &std::path::Path) {
    use baton_raft::identity::{IDENTITY_FILE, Identity};
    let id = Identity::read(dir).unwrap().expect("an identity file");
    let body = format!("baton-raft identity v1\ncluster_id={}\nnode_id={}\n", id.cluster_id, id.node_id);
    let text = format!("{body}crc32={:08x}\n", crc32fast::hash(body.as_bytes()));
    std::fs::write(dir.join(IDENTITY_FILE), text).unwrap();
}

/// A rolling upgrade onto this build: each replica in turn is stopped (SIGKILL), its data
/// directory left as the previous build's format, and started on this build, while submits
/// go on; the leader goes last, after handing leadership over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_onto_this_build_loses_no_acknowledged_write() {
    let node = NodeArgs::gpus("n1", "", 8);
    let t = Timing { heartbeat_timeout_ms: 6_000, lease_ms: 3_000, ..Timing::default() };
    let mut c = Cluster::start_with(BATON.as_ref(), std::slice::from_ref(&node), &t).await;
    c.client().await.put_queue(gpu_queue("q", 8)).await.unwrap();
    submit_long(&c, "long").await;
    let long = c.wait_job("long", "running", |j| j.state() == JobState::Running).await;
    let mut acknowledged = vec!["long".to_string()];
    // Followers first, then the leader once leadership moved away from it.
    let leader = c.leader().await;
    let order: Vec<usize> = (0..3).filter(|i| *i != leader).chain([leader]).collect();
    for i in order {
        if i == leader {
            ok(&c, &["cluster", "transfer-leader"]).await;
        }
        c.kill_replica(i);
        let dir = c.path(&format!("replica-{}", i + 1));
        as_previous_build_left_it(&dir);
        let name = format!("while-{}-down", i + 1);
        submit_long(&c, &name).await;
        acknowledged.push(name);
        c.start_replica(i);
        wait_caught_up(&c, i).await;
        let format = baton_raft::identity::Identity::read(&dir).unwrap().unwrap().format;
        assert_eq!(format, baton_raft::identity::DATA_FORMAT, "this build marks the directory it read");
    }
    acknowledged.sort();
    assert_eq!(job_names(&c).await, acknowledged);
    let now = c.wait_job("long", "still running", |j| j.state() == JobState::Running).await;
    assert_eq!(now.attempt, long.attempt, "the job was never restarted");
}

/// Waits until the leader has heard each replica say the format it reads, as `formats`.
async fn wait_leader_heard(c: &Cluster, formats: &[u32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let leader = c.leader().await;
        let heard: Option<Vec<u32>> =
            c.answering(leader).await.map(|(_, info)| info.replicas.iter().map(|r| r.format).collect());
        if heard.as_deref() == Some(formats) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the leader heard {heard:?}, not {formats:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A rolling upgrade from the format before this build's: three replicas reading one format
/// less (`--max-format`, as the previous build), a job running and submits throughout, each
/// restarted in turn on this build's format (the leader last, after handing leadership
/// over). No acknowledged job is lost, the running one keeps its attempt, and the leader
/// then sees every member read the newest format, so nothing is held back any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_the_format_before_loses_no_job_and_opens_the_newest_format() {
    use baton_raft::identity::DATA_FORMAT;
    let older = DATA_FORMAT - 1;
    let node = NodeArgs::gpus("n1", "", 8);
    let t = Timing { heartbeat_timeout_ms: 6_000, lease_ms: 3_000, ..Timing::default() };
    let mut c = Cluster::start_with(BATON.as_ref(), std::slice::from_ref(&node), &t).await;
    for i in 0..3 {
        c.kill_replica(i);
        c.start_replica_from(i, BATON.as_ref(), &["--max-format", &older.to_string()]);
        wait_caught_up(&c, i).await;
    }
    wait_leader_heard(&c, &[older; 3]).await;
    c.client().await.put_queue(gpu_queue("q", 8)).await.unwrap();
    submit_long(&c, "long").await;
    let long = c.wait_job("long", "running", |j| j.state() == JobState::Running).await;
    let mut acknowledged = vec!["long".to_string()];

    let leader = c.leader().await;
    let order: Vec<usize> = (0..3).filter(|i| *i != leader).chain([leader]).collect();
    for i in order {
        if i == leader {
            ok(&c, &["cluster", "transfer-leader"]).await;
        }
        c.kill_replica(i);
        let name = format!("while-{}-down", i + 1);
        submit_long(&c, &name).await;
        acknowledged.push(name);
        c.start_replica(i);
        wait_caught_up(&c, i).await;
    }
    wait_leader_heard(&c, &[DATA_FORMAT; 3]).await;
    // The newest commands the API has go through (format 4's create-if-absent writes).
    c.client().await.create_queue(gpu_queue("after-upgrade", 1)).await.expect("the newest commands commit");
    acknowledged.sort();
    assert_eq!(job_names(&c).await, acknowledged);
    let now = c.wait_job("long", "still running", |j| j.state() == JobState::Running).await;
    assert_eq!(now.attempt, long.attempt, "the job was never restarted");
}

#[test]
fn a_replica_refuses_a_data_directory_of_a_future_format_naming_file_and_version() {
    use baton_raft::identity::{DATA_FORMAT, IDENTITY_FILE, Identity};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("replica-1");
    std::fs::create_dir_all(&data).unwrap();
    let future = DATA_FORMAT + 1;
    Identity { cluster_id: "baton".into(), node_id: 1, format: future }.write(&data).unwrap();
    let out = std::process::Command::new(BATON)
        .args(["server", "--id", "1", "--listen", "127.0.0.1:0", "--insecure", "--auth", "none", "--data-dir"])
        .arg(&data)
        .output()
        .expect("baton runs");
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let file = data.join(IDENTITY_FILE).display().to_string();
    assert!(err.contains(&file) && err.contains(&format!("format {future}")), "{err}");
}

/// `baton ARGS` with `token` instead of the admin token.
async fn with_token(c: &Cluster, token: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let servers = c.servers.addrs.join(",");
    let tls = c.path("tls/client-chaos");
    let token = token.to_string();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(BATON)
            .args(&args)
            .env("BATON_SERVER", servers)
            .env("BATON_TLS_DIR", tls)
            .env("BATON_TOKEN", token)
            .env_remove("BATON_INSECURE")
            .env_remove("BATON_TOKEN_FILE")
            .output()
            .expect("baton runs")
    })
    .await
    .expect("the command's thread")
}

async fn ok_with(c: &Cluster, token: &str, args: &[&str]) -> String {
    let out = with_token(c, token, args).await;
    assert!(out.status.success(), "baton {args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

/// A replica of the restored cluster, as a process; killed when dropped.
struct Restored(std::process::Child);

impl Drop for Restored {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_saved_from_a_live_cluster_restores_into_a_new_cluster() {
    let node = NodeArgs::gpus("n1", "", 8);
    let c = Cluster::start(BATON.as_ref(), std::slice::from_ref(&node)).await;
    c.client().await.put_queue(gpu_queue("q", 8)).await.unwrap();
    submit_long(&c, "long").await;
    c.wait_job("long", "running", |j| j.state() == JobState::Running).await;
    let said = ok(&c, &["token", "create", "--user", "ops", "--role", "admin"]).await;
    let token = said.lines().last().expect("the token line").trim().to_string();
    ok_with(&c, &token, &["token", "create", "--user", "alice", "--queue", "q"]).await;

    let file = c.path("backup.snap");
    let file_arg = file.display().to_string();
    let said = ok_with(&c, &token, &["snapshot", "save", &file_arg]).await;
    assert!(said.contains("index") && said.contains("format 2") && said.contains("data format"), "{said}");

    // Refusals: same cluster id, a corrupted file, a file of a future format.
    let data = c.path("restored-1");
    let data_arg = data.display().to_string();
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let restore = |file: &str, cluster: &str| {
        let args = ["snapshot", "restore", file, "--data-dir", &data_arg, "--id", "1", "--cluster-id", cluster];
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend(["--advertise".to_string(), addr.clone()]);
        v
    };
    let run = |args: Vec<String>| std::process::Command::new(BATON).args(args).output().expect("baton runs");
    let out = run(restore(&file_arg, "baton"));
    assert!(!out.status.success() && text(&out.stderr).contains("new cluster id"), "{}", text(&out.stderr));
    let mut bytes = std::fs::read(&file).unwrap();
    let bad = c.path("bad.snap");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&bad, &bytes).unwrap();
    let out = run(restore(&bad.display().to_string(), "restored"));
    let e = text(&out.stderr);
    assert!(!out.status.success() && e.contains("bad.snap") && e.contains("checksum"), "{e}");
    bytes[mid] ^= 0x40;
    bytes[8] = 9;
    std::fs::write(&bad, &bytes).unwrap();
    let out = run(restore(&bad.display().to_string(), "restored"));
    let e = text(&out.stderr);
    assert!(!out.status.success() && e.contains("bad.snap") && e.contains("format 9"), "{e}");
    // A file written by a newer build, whose state needs a data format this build lacks.
    {
        use baton_raft::backup::Backup;
        use baton_raft::identity::DATA_FORMAT;
        let saved = Backup::from_bytes(&std::fs::read(&file).unwrap(), &file).unwrap();
        let newer = c.path("newer.snap");
        let future = Backup { format: DATA_FORMAT + 1, ..saved };
        std::fs::write(&newer, future.to_bytes().unwrap()).unwrap();
        let out = run(restore(&newer.display().to_string(), "restored"));
        let e = text(&out.stderr);
        let both = (format!("needs data format {}", DATA_FORMAT + 1), format!("formats up to {DATA_FORMAT}"));
        assert!(!out.status.success() && e.contains("newer.snap") && e.contains(&both.0) && e.contains(&both.1), "{e}");
    }
    assert!(!data.exists(), "a refused restore leaves nothing behind");

    let out = run(restore(&file_arg, "restored"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let server = std::process::Command::new(BATON)
        .args(["server", "--id", "1", "--listen", &addr, "--cluster-id", "restored", "--data-dir", &data_arg])
        .arg("--tls-dir")
        .arg(c.path("tls/replica-1"))
        .stdout(std::fs::File::create(c.path("restored-1.log")).unwrap())
        .stderr(std::fs::File::create(c.path("restored-1.err")).unwrap())
        .spawn()
        .expect("baton server runs");
    let _restored = Restored(server);

    let at = |args: &[&str]| {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend(["--server".to_string(), addr.clone(), "--timeout".to_string(), "20s".to_string()]);
        v
    };
    let new_cluster = |args: Vec<String>| {
        let tls = c.path("tls/client-chaos");
        let token = token.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(BATON)
                .args(args)
                .env("BATON_TLS_DIR", tls)
                .env("BATON_TOKEN", token)
                .env_remove("BATON_SERVER")
                .env_remove("BATON_INSECURE")
                .env_remove("BATON_TOKEN_FILE")
                .output()
                .expect("baton runs")
        })
    };
    let info = new_cluster(at(&["cluster", "info", "-o", "json"])).await.unwrap();
    let info: serde_json::Value =
        serde_json::from_slice(&info.stdout).unwrap_or_else(|_| panic!("{}", text(&info.stderr)));
    assert_eq!(info["cluster_id"], "restored");
    let jobs = new_cluster(at(&["list"])).await.unwrap();
    assert!(text(&jobs.stdout).contains("long"), "jobs come back: {}", text(&jobs.stderr));
    let queues = new_cluster(at(&["queue", "list"])).await.unwrap();
    assert!(text(&queues.stdout).contains("q "), "queues come back: {}", text(&queues.stderr));
    let tokens = new_cluster(at(&["token", "list"])).await.unwrap();
    let t = text(&tokens.stdout);
    assert!(t.contains("ops") && t.contains("alice"), "tokens come back (and the old admin token works): {t}");
    let history = new_cluster(at(&["describe", "long", "--events"])).await.unwrap();
    let h = text(&history.stdout);
    assert!(h.contains("Submitted") || h.contains("submitted"), "history comes back: {h}");
    // The old cluster goes on by itself.
    let old = ok_with(&c, &token, &["cluster", "info", "-o", "json"]).await;
    assert!(old.contains("\"cluster_id\": \"baton\""), "{old}");
}
