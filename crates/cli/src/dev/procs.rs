//! The dev cluster's child processes: this same binary as `baton server` and `baton agent`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::client::auth::{Bearer, new_token};
use crate::client::connect::{Api, api_client, dial};
use baton_proto::tls::{REPLICA_HOST, Transport};
use baton_proto::v1::Empty;
use tokio::process::{Child, Command};

use super::{AGENTS, DEV_MIG, METRICS_PORT_OFFSET, REPLICAS};

/// The client identity `baton dev` makes for itself and the user.
pub const DEV_CLIENT: &str = "dev";
/// How long the cluster may take to elect a leader and register its agents.
const START_TIMEOUT_MS: u64 = 30_000;

struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

/// How much of a child's log an exit message quotes.
const LOG_TAIL_LINES: usize = 5;

/// The last lines of `log`, to say why a child exited (empty when unreadable).
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

pub struct Children {
    procs: Vec<Proc>,
    servers: Vec<String>,
    /// How this process and the user's shell reach the replicas.
    access: Access,
    /// (who, `http://HOST:PORT/metrics`) of every replica and agent.
    metrics: Vec<(String, String)>,
}

/// A new admin token, written to `dir/admin.token` readable by this user only. Written to
/// a new file (never an existing one, never through a link: `--dir` may name a directory
/// others can write, where `admin.token` could be a link to a file of this user's), then
/// renamed over the name, which replaces a link instead of following it.
fn admin_token(dir: &Path) -> Result<(String, PathBuf), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token = new_token().map_err(|e| format!("cannot make a token: {e}"))?;
    let path = dir.join("admin.token");
    let fresh = dir.join(format!(".admin.token.{}", std::process::id()));
    let _ = std::fs::remove_file(&fresh);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&fresh)
        .map_err(|e| format!("cannot create {}: {e}", fresh.display()))?;
    writeln!(f, "{token}").map_err(|e| format!("cannot write {}: {e}", fresh.display()))?;
    std::fs::rename(&fresh, &path)
        .map_err(|e| format!("cannot rename {} to {}: {e}", fresh.display(), path.display()))?;
    Ok((token, path))
}

fn spawn(exe: &Path, name: &str, args: &[String], log: PathBuf) -> Result<Proc, String> {
    let file = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = Command::new(exe);
    // SAFETY: between fork and exec the closure only calls prctl, which is async-signal-safe.
    unsafe {
        command.pre_exec(die_with_parent);
    }
    let child = command
        .args(args)
        // The flags given here choose the transport, not what the user's shell exports.
        .env_remove("BATON_INSECURE")
        .env_remove("BATON_TLS_DIR")
        .env_remove(crate::otel::ENDPOINT_VAR)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    Ok(Proc { name: name.to_string(), child, log })
}

/// Asks the kernel to send the child SIGTERM when the thread that started it ends: a
/// benchmark or `baton dev` killed outright (a timeout's SIGKILL, OOM) would otherwise leave
/// its replicas and agents running, holding their ports for the next run. The spawning
/// thread is the runtime's (main or worker), which lives as long as the process.
pub(crate) fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and touches no memory.
    let r = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// How a cluster started here is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// Mutual TLS with certificates made in the cluster's directory, and an admin token.
    Dev,
    /// Plain TCP and no tokens (`--insecure --auth none`): the benchmarks that drive the
    /// replicas with many plain clients and simulated agents.
    Insecure,
}

/// What the replicas are started with and what this process calls them with.
struct Access {
    security: Security,
    transport: Transport,
    tls_dir: PathBuf,
    token: String,
    token_file: PathBuf,
}

impl Access {
    fn make(dir: &Path, security: Security) -> Result<Access, String> {
        if security == Security::Insecure {
            let none = PathBuf::new();
            return Ok(Access {
                security,
                transport: Transport::Insecure,
                tls_dir: none.clone(),
                token: String::new(),
                token_file: none,
            });
        }
        let tls = dir.join("tls");
        let ids: Vec<u64> = (1..=u64::from(REPLICAS)).collect();
        let nodes: Vec<String> = (1..=AGENTS).map(|i| format!("node-{i}")).collect();
        crate::tls::dev_pki(&tls, &ids, &nodes, &[DEV_CLIENT.to_string()]).map_err(|e| format!("certificates: {e}"))?;
        let tls_dir = tls.join(format!("client-{DEV_CLIENT}"));
        let transport = Transport::load(&tls_dir).map_err(|e| format!("certificates: {e}"))?;
        let (token, token_file) = admin_token(dir)?;
        Ok(Access { security, transport, tls_dir, token, token_file })
    }

    fn replica_args(&self, dir: &Path, id: &str) -> Vec<String> {
        match self.security {
            Security::Insecure => vec!["--insecure".into(), "--auth".into(), "none".into()],
            Security::Dev => vec![
                "--tls-dir".into(),
                dir.join("tls").join(format!("replica-{id}")).display().to_string(),
                "--bootstrap-admin-token-file".into(),
                self.token_file.display().to_string(),
            ],
        }
    }
}

impl Children {
    /// The dev cluster: replicas and agents with mutual TLS and an admin token; each sends
    /// its spans to the OTLP collector at `otlp` when given.
    pub async fn start(dir: &Path, port: u16, gpus: u32, otlp: Option<&str>) -> Result<Children, String> {
        let otlp: Vec<String> =
            otlp.map(|url| vec!["--otlp-endpoint".to_string(), url.to_string()]).unwrap_or_default();
        let mut extra = vec!["--cycle-interval-ms".to_string(), "200".to_string()];
        extra.extend(otlp.iter().cloned());
        let mut children = Children::start_replicas(dir, port, &extra, Security::Dev).await?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let logs = dir.join("logs");
        let metrics_base = port + METRICS_PORT_OFFSET;
        let tls = dir.join("tls");
        for i in 1..=AGENTS {
            let name = format!("node-{i}");
            let mut args: Vec<String> = vec![
                "agent".into(),
                // A development machine need not delegate a cgroup tree: process groups
                // there, said in the agent's log.
                "--containment".into(),
                "auto".into(),
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
                "--metrics-plain-listen".into(),
                metrics_addr(metrics_base + REPLICAS + i - 1),
                "--tls-dir".into(),
                tls.join(format!("agent-{name}")).display().to_string(),
                // A development cluster runs as the invoking user: jobs run as it too.
                "--run-as-self".into(),
            ];
            if i == AGENTS {
                // The last node also offers development MIG slices (decisions.md section 11).
                args.extend(["--mig".to_string(), DEV_MIG.to_string()]);
            }
            args.extend(otlp.iter().cloned());
            children.metrics.push((format!("agent {name}"), metrics_url(metrics_base + REPLICAS + i - 1)));
            children.procs.push(spawn(&exe, &format!("agent {name}"), &args, logs.join(format!("{name}.log")))?);
        }
        children.wait_for_nodes(AGENTS as usize).await?;
        Ok(children)
    }

    /// Only the replicas (named `replica 1` ...), each also given `extra` arguments, once
    /// one of them leads.
    pub async fn start_replicas(
        dir: &Path,
        port: u16,
        extra: &[String],
        security: Security,
    ) -> Result<Children, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        let servers: Vec<String> = (0..REPLICAS).map(|i| format!("127.0.0.1:{}", port + i)).collect();
        // Raft on peer ports of their own, the next three, as a production cluster should run.
        let peers: Vec<String> = (0..REPLICAS).map(|i| format!("127.0.0.1:{}", port + REPLICAS + i)).collect();
        let members: Vec<String> =
            servers.iter().zip(&peers).enumerate().map(|(i, (a, p))| format!("{}={a}/{p}", i + 1)).collect();
        // Every metrics port, the last agent's included, must fit in a u16.
        let metrics_base =
            port.checked_add(METRICS_PORT_OFFSET + REPLICAS + AGENTS).map(|_| port + METRICS_PORT_OFFSET).ok_or_else(
                || format!("--port {port}: the metrics ports (from port + {METRICS_PORT_OFFSET}) would pass 65535"),
            )?;
        let access = Access::make(dir, security)?;
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
                "--peer-listen".into(),
                peers[i].clone(),
                "--data-dir".into(),
                data.display().to_string(),
                "--bootstrap".into(),
                members.join(","),
                "--metrics-plain-listen".into(),
                metrics_addr(metrics_base + i as u16),
            ];
            args.extend(access.replica_args(dir, &id));
            args.extend(extra.iter().cloned());
            metrics.push((format!("replica {id}"), metrics_url(metrics_base + i as u16)));
            procs.push(spawn(&exe, &format!("replica {id}"), &args, logs.join(format!("replica-{id}.log")))?);
        }
        let mut children = Children { procs, servers, access, metrics };
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

    /// The file holding the admin token (for `BATON_TOKEN_FILE`).
    pub fn token_file(&self) -> &Path {
        &self.access.token_file
    }

    pub fn metrics_urls(&self) -> &[(String, String)] {
        &self.metrics
    }

    /// The first replica's dashboard, with the admin token in the URL's fragment (which the
    /// browser never sends, and the page drops from the address bar once read).
    pub fn dashboard_url(&self) -> Option<String> {
        let (_, url) = self.metrics.iter().find(|(who, _)| who.starts_with("replica"))?;
        let base = url.strip_suffix("metrics")?;
        Some(match self.access.token.as_str() {
            "" => base.to_string(),
            token => format!("{base}#token={token}"),
        })
    }

    /// The `--tls-dir` of the `dev` client.
    pub fn client_tls_dir(&self) -> &Path {
        &self.access.tls_dir
    }

    /// A client of replica `i`, as the `dev` client with the admin token.
    pub async fn client(&self, i: usize) -> Result<Api, String> {
        let ch = dial(&self.servers[i], &self.access.transport, REPLICA_HOST).await?;
        let token = (!self.access.token.is_empty()).then_some(self.access.token.as_str());
        let bearer = Bearer::new(token, "the dev cluster's token").map_err(|e| e.to_string())?;
        Ok(api_client(ch, bearer))
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
            for i in 0..self.servers.len() {
                let Ok(mut c) = self.client(i).await else { continue };
                let Ok(info) = c.cluster_info(Empty {}).await else { continue };
                if !info_ok(info.get_ref()) {
                    continue;
                }
                let Ok(nodes) = c.list_nodes(Empty {}).await else { continue };
                let ready =
                    nodes.get_ref().nodes.iter().filter(|n| n.status() == baton_proto::v1::NodeStatus::Ready).count();
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
            Ok(Some(status)) => {
                Some(format!("{} exited ({status}); the end of {}:\n{}", p.name, p.log.display(), log_tail(&p.log)))
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_token_replaces_a_link_instead_of_writing_through_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("admin.token")).unwrap();
        let (token, path) = admin_token(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n", "written through the link");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "admin.token is still a link");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), token);
    }
}
