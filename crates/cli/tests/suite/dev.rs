//! `baton dev` (the real binary): its start-up text gives each replica's and agent's
//! `/metrics` URL, and each answers a scrape; and the dashboard's address, which serves the page.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// Kills the dev cluster when the test ends, however it ends.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        // SIGTERM lets `baton dev` stop its children; a plain kill would orphan them.
        // SAFETY: kill(2) on the child this test started.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// `baton dev` on ports from `base` with its files in `dir`, its output piped.
fn spawn_dev(base: u16, dir: &std::path::Path) -> Kill {
    let child = Command::new(BATON)
        .args(["dev", "--port", &base.to_string(), "--dir"])
        .arg(dir)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Kill(child)
}

#[test]
fn dev_prints_a_metrics_url_for_every_replica_and_agent_and_each_answers() {
    // Below Linux's ephemeral range (32768-60999), where other tests' outgoing connections
    // take ports; apart from the e2e demo's range (20,000-29,700).
    // Six ports from the base: three API and three peer ports.
    let base = 10_000 + (std::process::id() % 1_500) as u16 * 6;
    let dir = tempfile::tempdir().unwrap();
    let mut dev = spawn_dev(base, dir.path());
    let out = dev.0.stdout.take().unwrap();
    let mut urls = Vec::new();
    let mut text = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        text.push_str(&line);
        text.push('\n');
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://") && w.ends_with("/metrics")) {
            urls.push(url.to_string());
        }
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    assert_eq!(urls.len(), 5, "3 replicas and 2 agents:\n{text}");
    assert!(text.contains("traces: not exported (--otlp-endpoint http://HOST:4317"), "the OTLP flag is named:\n{text}");
    for url in &urls {
        let body = get(url);
        assert!(body.contains("# TYPE baton_"), "{url} answered:\n{body}");
    }
    dashboard_is_printed_and_serves_its_page(&text);
    let replicas = urls.iter().filter(|u| get(u).contains("baton_raft_term")).count();
    let agents = urls.iter().filter(|u| get(u).contains("baton_agent_replicas_running")).count();
    assert_eq!((replicas, agents), (3, 2), "{text}");
    dev_cluster_speaks_only_mutual_tls(&text);
    client_commands_work_with_the_exported_admin_token(&text);
}

/// `dashboard: http://HOST:PORT/#token=TOKEN`: the page is served there, and the token in the
/// fragment is the admin token dev wrote.
fn dashboard_is_printed_and_serves_its_page(text: &str) {
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("dashboard: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no dashboard line:\n{text}"));
    let (addr, token) = url.strip_prefix("http://").and_then(|u| u.split_once("/#token=")).expect(url);
    let token_file = text.lines().find_map(|l| l.trim().strip_prefix("export BATON_TOKEN_FILE=")).expect(text);
    let written = std::fs::read_to_string(token_file.split_whitespace().next().unwrap()).unwrap();
    assert_eq!(token, written.trim(), "the dashboard link carries the admin token");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: dev\r\n\r\n").unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("/app.js"), "{page}");
}

/// The shell lines `baton dev` prints give a client that gets in over TLS; plain TCP, or
/// no certificate, does not.
fn dev_cluster_speaks_only_mutual_tls(text: &str) {
    let export = |var: &str| {
        let prefix = format!("export {var}=");
        text.lines().find_map(|l| l.trim().strip_prefix(&prefix).map(str::to_string)).expect(var)
    };
    let (servers, tls_dir) = (export("BATON_SERVER"), export("BATON_TLS_DIR"));
    let cli = |envs: &[(&str, &str)]| {
        let mut c = Command::new(BATON);
        c.args(["cluster", "info", "--timeout", "5s"]).env("BATON_SERVER", &servers);
        c.env_remove("BATON_INSECURE").env_remove("BATON_TLS_DIR");
        c.envs(envs.iter().copied()).output().unwrap()
    };
    let out = cli(&[("BATON_TLS_DIR", &tls_dir)]);
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(info.contains("transport: mutual TLS"), "{info}");
    // Raft runs on peer ports of its own, beside the API ports clients are given.
    assert_eq!(info.matches(" (peer 127.0.0.1:").count(), 3, "{info}");
    let out = cli(&[("BATON_INSECURE", "1")]);
    assert!(!out.status.success(), "plain TCP got an answer: {}", String::from_utf8_lossy(&out.stdout));
    // Refused with what to do, as an error of the command: not a death by SIGPIPE (status
    // 141, nothing printed) when the TLS replica hangs up on the plain client.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("requires TLS") && err.contains("BATON_TLS_DIR"), "{err}");
}

/// The commands dev prints work as printed: with its admin token file, as the admin; without
/// a token, refused as unauthenticated.
fn client_commands_work_with_the_exported_admin_token(text: &str) {
    let export = |var: &str| {
        let prefix = format!("export {var}=");
        let line = text.lines().map(str::trim).find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{text}"));
        line[prefix.len()..].split_whitespace().next().unwrap().to_string()
    };
    let (server, token_file) = (export("BATON_SERVER"), export("BATON_TOKEN_FILE"));
    let tls_dir = export("BATON_TLS_DIR");
    let baton = |args: &[&str], token: bool| {
        let mut c = Command::new(BATON);
        c.args(args).env("BATON_SERVER", &server).env("BATON_TLS_DIR", &tls_dir);
        c.env_remove("BATON_INSECURE").env_remove("BATON_TOKEN").env_remove("BATON_TOKEN_FILE");
        if token {
            c.env("BATON_TOKEN_FILE", &token_file);
        }
        c.output().unwrap()
    };
    let me = baton(&["whoami"], true);
    assert!(me.status.success(), "{}", String::from_utf8_lossy(&me.stderr));
    let me = String::from_utf8_lossy(&me.stdout).to_string();
    assert!(me.contains("user admin") && me.contains("roles: admin"), "{me}");
    let made = baton(&["queue", "create", "team-a", "--gpus", "8"], true);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let anon = baton(&["queue", "create", "team-b", "--gpus", "8"], false);
    assert!(!anon.status.success());
    let err = String::from_utf8_lossy(&anon.stderr).to_string();
    assert!(err.contains("BATON_TOKEN"), "{err}");
    mig_slices_reach_the_job(&|args| baton(args, true));
    shares_of_one_gpu_reach_the_jobs(&|args| baton(args, true));
}

/// Two jobs of half a GPU each (decisions.md section 11) share one GPU of a dev node, each
/// told its share (`BATON_GPU_FRACTION`) and its MPS thread limit, through the real leader,
/// agent and processes.
fn shares_of_one_gpu_reach_the_jobs(baton: &dyn Fn(&[&str]) -> std::process::Output) {
    let command = [
        "--",
        "sh",
        "-c",
        "echo share $BATON_GPU_FRACTION of $CUDA_VISIBLE_DEVICES at $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE%; sleep 300",
    ];
    for name in ["half-a", "half-b"] {
        let sub = baton(&[&["submit", "--name", name, "--queue", "team-a", "--gpus", "0.5"][..], &command].concat());
        assert!(sub.status.success(), "{}", String::from_utf8_lossy(&sub.stderr));
    }
    let mut logs = Vec::new();
    for _ in 0..150 {
        logs = ["half-a", "half-b"].map(|n| String::from_utf8_lossy(&baton(&["logs", n]).stdout).to_string()).to_vec();
        if logs.iter().all(|l| l.contains("share ")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let devices: Vec<&str> = logs.iter().filter_map(|l| l.split(" of ").nth(1)?.split(" at ").next()).collect();
    assert!(logs.iter().all(|l| l.contains("share 0.5 of ") && l.contains(" at 50%")), "{logs:?}");
    assert!(devices.len() == 2 && devices[0] == devices[1], "both halves on one GPU: {logs:?}");
    let described = String::from_utf8_lossy(&baton(&["describe", "half-a"]).stdout).to_string();
    assert!(described.contains("gpu 0.5"), "{described}");
    let gpu = devices[0];
    assert!(described.contains(&format!("[{gpu}:0.5]")), "its placement names its share: {described}");
    let table = String::from_utf8_lossy(&baton(&["nodes"]).stdout).to_string();
    assert!(table.contains("SHARED") && table.contains(&format!("{gpu}:1(2)")), "one GPU, two halves: {table}");
    for name in ["half-a", "half-b"] {
        baton(&["cancel", name]);
    }
}

/// The last dev node offers development MIG slices (decisions.md section 11): `baton nodes`
/// shows them, and a job that asks for two is given two distinct ones by UUID, through the
/// real leader, agent and process.
fn mig_slices_reach_the_job(baton: &dyn Fn(&[&str]) -> std::process::Output) {
    let nodes = baton(&["nodes"]);
    let table = String::from_utf8_lossy(&nodes.stdout).to_string();
    assert!(table.contains("SLICES") && table.contains("mig-1g.10gb 0/7"), "{table}");
    let job = ["--name", "infer", "--queue", "team-a", "--resources", "mig-1g.10gb=2"];
    let command = ["--", "sh", "-c", "echo slices $CUDA_VISIBLE_DEVICES"];
    let sub = baton(&[&["submit"][..], &job, &command].concat());
    assert!(sub.status.success(), "{}", String::from_utf8_lossy(&sub.stderr));
    let mut logs = String::new();
    for _ in 0..150 {
        logs = String::from_utf8_lossy(&baton(&["logs", "infer"]).stdout).to_string();
        if logs.contains("slices ") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(logs.contains("slices MIG-dev-node-2-8-0,MIG-dev-node-2-8-1"), "{logs}");
}

/// `GET` over plain HTTP; retried briefly while the endpoint comes up.
fn get(url: &str) -> String {
    let addr = url.trim_start_matches("http://").trim_end_matches("/metrics");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: dev\r\n\r\n").unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            return reply;
        }
        assert!(Instant::now() < deadline, "{url} not reachable within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child that exits while the cluster starts is named, with the end of its log saying why
/// (a replica whose metrics port is taken; dev used to say only "replica 1 exited").
#[test]
fn a_child_that_exits_at_start_is_named_with_the_end_of_its_log() {
    let base = 10_005 + (std::process::id() % 2_000) as u16 * 5;
    let taken = std::net::TcpListener::bind(("127.0.0.1", base + 100)).expect("the metrics port is free");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BATON).args(["dev", "--port", &base.to_string(), "--dir"]).arg(dir.path()).output().unwrap();
    drop(taken);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("replica 1 exited") && err.contains("--metrics-plain-listen"), "{err}");
}

/// `baton dev` killed outright (SIGKILL: a timeout, the OOM killer) cannot stop its
/// children itself; they stop because the kernel tells them their parent is gone, instead
/// of running on and holding the ports of the next run (a benchmark killed by `timeout`
/// once left a replica running).
#[test]
fn a_dev_cluster_killed_outright_takes_its_replicas_and_agents_with_it() {
    // Another base than the test above, which runs at the same time in this process.
    let base = 10_000 + ((std::process::id() + 750) % 1_500) as u16 * 6;
    let dir = tempfile::tempdir().unwrap();
    let mut dev = spawn_dev(base, dir.path());
    let out = dev.0.stdout.take().unwrap();
    for line in BufReader::new(out).lines() {
        if line.unwrap().starts_with("Press Ctrl-C") {
            break;
        }
    }
    let children = children_of(dev.0.id());
    assert_eq!(children.len(), 5, "3 replicas and 2 agents: {children:?}");
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(dev.0.id() as i32, libc::SIGKILL) };
    let _ = dev.0.wait();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left = children.clone();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left.retain(|&pid| alive(pid));
    }
    assert!(left.is_empty(), "still running after `baton dev` was killed: {left:?}");
}

/// Pids of the processes whose parent is `parent` (from /proc).
fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After the command name in parentheses: state, then the parent's pid.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        if rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Whether `pid` runs (a zombie waiting for its reaper counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().next() != Some("Z")))
        .unwrap_or(false)
}
