//! The dev cluster's child processes: this same binary as `baton server` and `baton agent`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use baton_proto::v1::Empty;
use baton_proto::v1::baton_client::BatonClient;
use tokio::process::{Child, Command};

use super::{AGENTS, METRICS_PORT_OFFSET, REPLICAS};

/// How long the cluster may take to elect a leader and register its agents.
const START_TIMEOUT_MS: u64 = 30_000;

struct Proc {
    name: String,
    child: Child,
}

pub struct Children {
    procs: Vec<Proc>,
    servers: Vec<String>,
    /// (who, `http://HOST:PORT/metrics`) of every replica and agent.
    metrics: Vec<(String, String)>,
}

fn spawn(exe: &Path, name: &str, args: &[String], log: PathBuf) -> Result<Proc, String> {
    let file = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    Ok(Proc { name: name.to_string(), child })
}

impl Children {
    pub async fn start(dir: &Path, port: u16, gpus: u32) -> Result<Children, String> {
        let extra = ["--cycle-interval-ms".to_string(), "200".to_string()];
        let mut children = Children::start_replicas(dir, port, &extra).await?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let logs = dir.join("logs");
        let metrics_base = port + METRICS_PORT_OFFSET;
        for i in 1..=AGENTS {
            let name = format!("node-{i}");
            let args = vec![
                "agent".into(),
                "--server".into(),
                children.servers.join(","),
                "--name".into(),
                name.clone(),
                "--gpus".into(),
                gpus.to_string(),
                "--data-dir".into(),
                dir.join(&name).display().to_string(),
                "--checkpoint-root".into(),
                dir.join("checkpoints").display().to_string(),
                "--metrics-listen".into(),
                metrics_addr(metrics_base + REPLICAS + i - 1),
            ];
            children.metrics.push((format!("agent {name}"), metrics_url(metrics_base + REPLICAS + i - 1)));
            children.procs.push(spawn(&exe, &format!("agent {name}"), &args, logs.join(format!("{name}.log")))?);
        }
        children.wait_for_nodes(AGENTS as usize).await?;
        Ok(children)
    }

    /// Only the replicas (named `replica 1` ...), each also given `extra` arguments, once
    /// one of them leads.
    pub async fn start_replicas(dir: &Path, port: u16, extra: &[String]) -> Result<Children, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        let servers: Vec<String> = (0..REPLICAS).map(|i| format!("127.0.0.1:{}", port + i)).collect();
        let members: Vec<String> = servers.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        // Every metrics port, the last agent's included, must fit in a u16.
        let metrics_base =
            port.checked_add(METRICS_PORT_OFFSET + REPLICAS + AGENTS).map(|_| port + METRICS_PORT_OFFSET).ok_or_else(
                || format!("--port {port}: the metrics ports (from port + {METRICS_PORT_OFFSET}) would pass 65535"),
            )?;
        let mut metrics = Vec::new();
        let mut procs = Vec::new();
        for (i, addr) in servers.iter().enumerate() {
            let id = (i + 1).to_string();
            let data = dir.join(format!("replica-{id}"));
            let mut args = vec![
                "server".into(),
                "--id".into(),
                id.clone(),
                "--listen".into(),
                addr.clone(),
                "--data-dir".into(),
                data.display().to_string(),
                "--bootstrap".into(),
                members.join(","),
                "--metrics-listen".into(),
                metrics_addr(metrics_base + i as u16),
            ];
            args.extend(extra.iter().cloned());
            metrics.push((format!("replica {id}"), metrics_url(metrics_base + i as u16)));
            procs.push(spawn(&exe, &format!("replica {id}"), &args, logs.join(format!("replica-{id}.log")))?);
        }
        let mut children = Children { procs, servers, metrics };
        children.wait_for_leader().await?;
        Ok(children)
    }

    /// The process id of the child called `name` (e.g. `replica 2`), while it runs.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.procs.iter().find(|p| p.name == name).and_then(|p| p.child.id())
    }

    /// SIGKILL to the child called `name`, waiting until it is gone.
    pub async fn kill(&mut self, name: &str) -> Result<(), String> {
        let p = self.procs.iter_mut().find(|p| p.name == name).ok_or_else(|| format!("no child called {name}"))?;
        p.child.kill().await.map_err(|e| format!("cannot kill {name}: {e}"))
    }

    pub fn servers(&self) -> Vec<String> {
        self.servers.clone()
    }

    pub fn metrics_urls(&self) -> &[(String, String)] {
        &self.metrics
    }

    async fn wait_for_leader(&mut self) -> Result<(), String> {
        self.wait("a leader", |info| info.leader_id != 0, |_| true).await
    }

    async fn wait_for_nodes(&mut self, n: usize) -> Result<(), String> {
        self.wait("the agents' nodes", |_| true, |nodes| nodes >= n).await
    }

    async fn wait(
        &mut self,
        what: &str,
        info_ok: impl Fn(&baton_proto::v1::ClusterInfoReply) -> bool,
        nodes_ok: impl Fn(usize) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
        loop {
            if let Some(e) = self.exited() {
                return Err(e);
            }
            for addr in &self.servers {
                let Ok(c) = BatonClient::connect(format!("http://{addr}")).await else { continue };
                let mut c = c
                    .max_decoding_message_size(baton_proto::MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(baton_proto::MAX_MESSAGE_BYTES);
                let Ok(info) = c.cluster_info(Empty {}).await else { continue };
                if !info_ok(info.get_ref()) {
                    continue;
                }
                let Ok(nodes) = c.list_nodes(Empty {}).await else { continue };
                let ready = nodes.get_ref().nodes.iter().filter(|n| n.status == "Ready").count();
                if nodes_ok(ready) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no {what} within {} s", START_TIMEOUT_MS / 1000));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A child that has already exited, as an error.
    pub fn exited(&mut self) -> Option<String> {
        self.procs.iter_mut().find_map(|p| match p.child.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited ({status})", p.name)),
            _ => None,
        })
    }

    /// Completes when any child exits, saying which.
    pub async fn first_exit(&self) -> String {
        loop {
            // `try_wait` needs `&mut`; polling the pids' liveness is enough here.
            for p in &self.procs {
                if let Some(pid) = p.child.id()
                    && !alive(pid)
                {
                    return format!("{} exited", p.name);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// SIGTERM to every child (agents first), then SIGKILL to those still running after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        for p in self.procs.iter().rev() {
            if let Some(pid) = p.child.id() {
                // SAFETY: plain kill(2) on a child we started.
                unsafe { libc_kill(pid as i32, 15) };
            }
        }
        let deadline = tokio::time::Instant::now() + grace;
        for p in &mut self.procs {
            if tokio::time::timeout_at(deadline, p.child.wait()).await.is_err() {
                let _ = p.child.kill().await;
            }
        }
    }
}

fn metrics_addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn metrics_url(port: u16) -> String {
    format!("http://{}/metrics", metrics_addr(port))
}

/// Running, and not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
