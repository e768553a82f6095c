//! Accounting records copied into a real PostgreSQL server (issue 34): the leader of a
//! cluster started with `--accounting-postgres` inserts each ended attempt once, with the
//! numbers `History` shows, and the SQL of the Grafana accounting dashboard
//! (`deploy/monitoring/grafana-accounting.json`) runs on the table it fills.
//!
//! Needs PostgreSQL's server binaries (Debian's `postgresql`; `./test.sh` installs them):
//! the test starts its own server in a temporary directory, as user `postgres` when it runs
//! as root (PostgreSQL refuses root).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use baton_proto::v1::observation::What;
use baton_proto::v1::*;
use common::*;

/// A PostgreSQL server of the test's own, stopped when dropped.
struct Postgres {
    child: Child,
    url: String,
    bin: PathBuf,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // The server, not `runuser` in front of it, must stop before its directory goes.
        let data = self.data.to_str().unwrap_or_default().to_string();
        let _ = as_server_user(&self.bin.join("pg_ctl"), &["stop", "-D", &data, "-m", "immediate", "-w"]).output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The directory of PostgreSQL's server binaries (`initdb`, `postgres`), newest version first.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).filter(|p| p.join("postgres").exists()).collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.pop().expect("PostgreSQL's server binaries in /usr/lib/postgresql/VERSION/bin (Debian's postgresql)")
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `program` with `args`, as user `postgres` when this test runs as root.
fn as_server_user(program: &Path, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

impl Postgres {
    fn start() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let ok = Command::new("chown").args(["-R", "postgres"]).arg(dir.path()).status().unwrap().success();
            assert!(ok, "chown the server's directory to postgres");
        }
        let data = dir.path().join("data");
        let data_arg = data.to_str().unwrap();
        let out = as_server_user(&bin.join("initdb"), &["-D", data_arg, "-A", "trust", "-U", "baton", "--no-sync"])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let socket_dir = dir.path().to_str().unwrap().to_string();
        let args = ["-D", data_arg, "-h", "127.0.0.1", "-p", &port.to_string(), "-k", &socket_dir, "-c", "fsync=off"];
        let child = as_server_user(&bin.join("postgres"), &args).spawn().unwrap();
        let url = format!("host=127.0.0.1 port={port} user=baton dbname=postgres");
        Postgres { child, url, bin, data, _dir: dir }
    }

    async fn client(&self) -> tokio_postgres::Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    return client;
                }
                Err(e) => assert!(Instant::now() < deadline, "PostgreSQL did not start: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The Grafana dashboard's SQL with its macros written out as Grafana would for the last
/// 30 days in hourly steps.
fn grafana_sql(raw: &str) -> String {
    raw.replace("$__timeGroupAlias(end_at, $__interval)", "date_trunc('hour', end_at) AS time")
        .replace("$__timeFilter(end_at)", "end_at > now() - interval '30 days'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL's server (Debian's postgresql); ./test.sh runs it"]
async fn the_leader_copies_each_record_into_postgres_once() {
    let pg = Postgres::start();
    let db = pg.client().await;
    let settings = ::baton_server::ServerSettings { accounting_postgres: Some(pg.url.clone()), ..common::settings() };
    let cluster = Cluster::start_with(3, settings).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("lab", 8)).await.unwrap();
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    for (name, gpus) in [("a", 2), ("b", 4)] {
        c.submit(submit_of(gpu_job(name, "lab", "train", gpus))).await.unwrap();
    }
    let a = wait_state(&mut c, "a", JobState::Running).await;
    let b = wait_state(&mut c, "b", JobState::Running).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let exit =
        |job_id, exit_code| What::Exited(Exited { job_id, attempt: 1, rank: 0, exit_code, reason: String::new() });
    agent.report(vec![exit(a.id, 0), exit(b.id, 7)]).await.unwrap();
    wait_state(&mut c, "b", JobState::Failed).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = match db.query_one("SELECT count(*) FROM baton_attempts", &[]).await {
            Ok(row) => row.get(0),
            Err(_) => 0, // the table is made by the first copy
        };
        if n == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} of 2 rows in PostgreSQL after 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let history = c.history(HistoryRequest { since_ms: 1, ..Default::default() }).await.unwrap().into_inner();
    let rows = db
        .query(
            "SELECT seq, name, user_name, queue, gpus, ending, exit_code, gpu_seconds, nodes,
                    (extract(epoch FROM end_at) * 1000)::bigint
             FROM baton_attempts ORDER BY seq",
            &[],
        )
        .await
        .unwrap();
    for (row, r) in rows.iter().zip(&history.records) {
        assert_eq!(row.get::<_, i64>(0) as u64, r.seq);
        assert_eq!((row.get::<_, String>(1), row.get::<_, String>(2)), (r.name.clone(), r.user.clone()));
        assert_eq!((row.get::<_, String>(3), row.get::<_, i64>(4) as u64), (r.queue.clone(), r.gpus));
        assert_eq!((row.get::<_, String>(5), row.get::<_, Option<i32>>(6)), (r.ending.clone(), r.exit_code));
        assert!((row.get::<_, f64>(7) - r.gpu_ms as f64 / 1000.0).abs() < 1e-6, "GPU-seconds of {}", r.name);
        assert_eq!(row.get::<_, Vec<String>>(8), vec!["n1".to_string()]);
        assert_eq!(row.get::<_, i64>(9) as u64, r.end_ms, "the end time to the millisecond");
    }
    assert_eq!(rows.len(), 2);
    assert_eq!(history.records.iter().map(|r| r.ending.as_str()).collect::<Vec<_>>(), ["succeeded", "failed"]);

    // Another round of the copy (every 2 s) inserts nothing again.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let n: i64 = db.query_one("SELECT count(*) FROM baton_attempts", &[]).await.unwrap().get(0);
    assert_eq!(n, 2);

    // The Grafana accounting dashboard's queries run on this table and see the GPU time.
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("../../deploy/monitoring/grafana-accounting.json").unwrap())
            .unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let sql = grafana_sql(target["rawSql"].as_str().expect("a rawSql"));
            let rows = db.query(sql.as_str(), &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert!(!rows.is_empty(), "{} found nothing: {sql}", panel["title"]);
            queries += 1;
        }
    }
    assert!(queries >= 3, "{queries} queries");
}
