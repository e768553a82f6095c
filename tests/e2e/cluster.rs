//! A real cluster for end-to-end tests: `baton server` x3 and one `baton agent` per node, as
//! child processes of the test, on loopback ports, with data in a temporary directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::{Empty, Job, JobRef};
use tonic::transport::Channel;

pub const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// A node as the agent offers it.
#[derive(Clone, Debug)]
pub struct NodeArgs {
    pub name: String,
    pub pool: String,
    pub rack: String,
    pub gpus: u64,
    pub cpu: u64,
    pub memory: u64,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub servers: Vec<String>,
    replicas: Vec<Option<Child>>,
    agents: BTreeMap<String, (NodeArgs, Option<Child>)>,
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn spawn(args: &[String], log: &Path) -> Child {
    let f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    Command::new(BATON)
        .args(args)
        .env("RUST_LOG", "info,openraft=warn")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap()
}

impl Cluster {
    pub async fn start(nodes: &[NodeArgs]) -> Cluster {
        let dir = tempfile::Builder::new().prefix("baton-e2e-").tempdir().unwrap();
        let servers: Vec<String> = (0..3).map(|_| free_port()).collect();
        let members: Vec<String> = servers.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        let mut c = Cluster { dir, servers: servers.clone(), replicas: Vec::new(), agents: BTreeMap::new() };
        for (i, addr) in servers.iter().enumerate() {
            let id = i + 1;
            let args: Vec<String> = [
                "server",
                "--id",
                &id.to_string(),
                "--listen",
                addr,
                "--data-dir",
                &c.path(&format!("replica-{id}")).display().to_string(),
                "--bootstrap",
                &members.join(","),
                "--cycle-interval-ms",
                "50",
                "--heartbeat-timeout-ms",
                "3000",
                "--resend-ms",
                "500",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            c.replicas.push(Some(spawn(&args, &c.path(&format!("replica-{id}.log")))));
        }
        c.leader().await;
        for n in nodes {
            c.agents.insert(n.name.clone(), (n.clone(), None));
            c.start_agent(&n.name);
        }
        c.wait_nodes(nodes.len()).await;
        c
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn start_agent(&mut self, name: &str) {
        let servers = self.servers.join(",");
        let n = self.agents[name].0.clone();
        let args: Vec<String> = [
            "agent",
            "--server",
            &servers,
            "--name",
            &n.name,
            "--pool",
            &n.pool,
            "--rack",
            &n.rack,
            "--gpus",
            &n.gpus.to_string(),
            "--cpu",
            &n.cpu.to_string(),
            "--memory",
            &n.memory.to_string(),
            "--data-dir",
            &self.path(&format!("agent-{}", n.name)).display().to_string(),
            "--checkpoint-root",
            &self.path("checkpoints").display().to_string(),
            "--heartbeat-ms",
            "100",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let child = spawn(&args, &self.path(&format!("agent-{}.log", n.name)));
        self.agents.get_mut(name).unwrap().1 = Some(child);
    }

    /// SIGKILL, as a crash.
    pub fn kill_agent(&mut self, name: &str) {
        if let Some(mut c) = self.agents.get_mut(name).unwrap().1.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn client(&self) -> BatonClient<Channel> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for (i, a) in self.servers.iter().enumerate() {
                if self.replicas[i].is_none() {
                    continue;
                }
                if let Ok(mut c) = BatonClient::connect(format!("http://{a}")).await
                    && c.cluster_info(Empty {}).await.is_ok_and(|i| i.get_ref().leader_id != 0)
                {
                    return c;
                }
            }
            assert!(Instant::now() < deadline, "no replica answers");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Index of the leading replica.
    pub async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for (i, a) in self.servers.iter().enumerate() {
                if self.replicas[i].is_none() {
                    continue;
                }
                let Ok(mut c) = BatonClient::connect(format!("http://{a}")).await else { continue };
                if let Ok(info) = c.cluster_info(Empty {}).await {
                    let info = info.into_inner();
                    if info.leader_id != 0 && info.leader_id == info.answered_by {
                        return i;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no leader within 20 s; logs in {}", self.dir.path().display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL the leader; returns its index.
    pub async fn kill_leader(&mut self) -> usize {
        let i = self.leader().await;
        if let Some(mut c) = self.replicas[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        i
    }

    async fn wait_nodes(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut c = self.client().await;
        loop {
            if let Ok(r) = c.list_nodes(Empty {}).await
                && r.get_ref().nodes.iter().filter(|x| x.status == "Ready").count() >= n
            {
                return;
            }
            assert!(Instant::now() < deadline, "agents did not register; logs in {}", self.dir.path().display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn wait_job(&self, job: &str, what: &str, ok: impl Fn(&Job) -> bool) -> Job {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut c = self.client().await;
        loop {
            if let Ok(j) = c.get_job(JobRef { name: job.into() }).await {
                let j = j.into_inner();
                if ok(&j) {
                    return j;
                }
                assert!(Instant::now() < deadline, "{job}: {what} never held; it is {} ({})", j.state, j.reason);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in self.agents.values_mut() {
            if let Some(c) = child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for c in self.replicas.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Jobs run in their own sessions and outlive a killed agent: end them too.
        let _ = Command::new("pkill").arg("-KILL").arg("-f").arg(self.dir.path().display().to_string()).status();
    }
}
