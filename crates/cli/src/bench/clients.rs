//! Submitting clients in processes of their own (`baton bench scale --client-procs N`): the
//! load comes over the network from outside the benchmark's process, as a cluster's users'
//! would, and the client work is not on the simulated agents' runtime.
//!
//! Each process (`baton bench clients`, hidden) submits its share of the jobs and writes one
//! line per submit as it sends it, `sent NAME UNIX_US`, so that the benchmark can time each
//! job from submit to running; once done, a `lat MS` line per acknowledged submit, an
//! `error TEXT` line with its first error if any, and last `result OK ERRORS`. The benchmark
//! reads them as they come.

use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::load::{Caller, Outcome, drive_until_taken};
use super::runtime;
use super::simagents::Seen;
use super::submit::{Backlog, channel, client, submit_of_class};

/// Most client processes one benchmark starts.
pub const MAX_CLIENT_PROCS: u32 = 64;

#[derive(Args, Debug, Clone)]
pub struct ClientsArgs {
    /// The replicas' client addresses, comma-separated; client i uses the i-th in turn.
    #[arg(long, value_delimiter = ',', required = true)]
    pub servers: Vec<String>,
    /// Jobs to submit in all, shared by this process's clients.
    #[arg(long)]
    pub jobs: u64,
    /// Concurrent clients in this process.
    #[arg(long)]
    pub clients: u32,
    /// The first client's number: it names the jobs (`c<client>-<seq>`), so processes
    /// must be given ranges that do not overlap.
    #[arg(long, default_value_t = 0)]
    pub first_client: u32,
    /// Submit urgent jobs (class `interactive`) instead of the backlog's.
    #[arg(long)]
    pub urgent: bool,
}

pub fn run(a: ClientsArgs) -> ExitCode {
    if a.clients == 0 || a.servers.is_empty() {
        eprintln!("error: --clients must be above 0 and --servers must name a replica");
        return ExitCode::FAILURE;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(submit_all(a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Now, in µs since the Unix epoch: the clock a client process and the benchmark share.
pub fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Writes the `sent` lines of every client of this process, in order, to stdout.
type Out = Arc<Mutex<std::io::BufWriter<std::io::Stdout>>>;

struct Submitter {
    client: baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>,
    id: u32,
    kind: Backlog,
    out: Out,
}

impl Caller for Submitter {
    async fn call(&mut self, seq: u64) -> Result<(), String> {
        let req = submit_of_class(self.kind, self.id, seq);
        if let Some(spec) = &req.spec {
            // Sent before the submit, so the benchmark knows of the job before it can start.
            let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
            writeln!(out, "sent {} {}", spec.name, unix_us())
                .and_then(|()| out.flush())
                .map_err(|e| format!("stdout: {e}"))?;
        }
        self.client.submit(req).await.map(drop).map_err(|e| e.message().to_string())
    }
}

async fn submit_all(a: ClientsArgs) -> Result<(), String> {
    let kind = if a.urgent { Backlog::Urgent } else { Backlog::Train };
    let out: Out = Arc::new(Mutex::new(std::io::BufWriter::new(std::io::stdout())));
    let mut callers = Vec::new();
    for i in 0..a.clients {
        let id = a.first_client + i;
        let addr = &a.servers[id as usize % a.servers.len()];
        callers.push(Submitter { client: client(channel(addr).await?), id, kind, out: out.clone() });
    }
    let total = drive_until_taken(callers, Arc::new(AtomicU64::new(a.jobs))).await;
    let mut out = out.lock().unwrap_or_else(PoisonError::into_inner);
    let written = (|| -> std::io::Result<()> {
        for ms in &total.latencies_ms {
            writeln!(out, "lat {ms:.3}")?;
        }
        if let Some(e) = &total.first_error {
            writeln!(out, "error {}", e.replace('\n', " "))?;
        }
        writeln!(out, "result {} {}", total.ok, total.errors)?;
        out.flush()
    })();
    written.map_err(|e| format!("stdout: {e}"))
}

/// Starts `procs` client processes that submit `jobs` jobs of `kind` in all with `clients`
/// clients in all, and reads what they send until all have ended; the jobs are timed from
/// their `sent` lines in `seen`. The sum of what they did.
pub async fn submit_from_processes(
    servers: &[String],
    seen: &Arc<Seen>,
    kind: Backlog,
    jobs: u64,
    clients: u32,
    procs: u32,
) -> Result<Outcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let procs = procs.clamp(1, clients.max(1));
    let t = Instant::now();
    let mut readers = Vec::new();
    // Client p gets its share of the jobs and of the clients, numbered after the others'.
    let share = |n: u64, p: u32| n / u64::from(procs) + u64::from(u64::from(p) < n % u64::from(procs));
    let mut first_client = 0u32;
    for p in 0..procs {
        let mine_clients = share(u64::from(clients), p) as u32;
        let mut command = tokio::process::Command::new(&exe);
        command.args(["bench", "clients", "--servers", &servers.join(","), "--jobs", &share(jobs, p).to_string()]);
        command.args(["--clients", &mine_clients.to_string(), "--first-client", &first_client.to_string()]);
        if kind == Backlog::Urgent {
            command.arg("--urgent");
        }
        // SAFETY: between fork and exec the closure only calls prctl, which is async-signal-safe.
        unsafe {
            command.pre_exec(crate::dev::procs::die_with_parent);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start client process {p}: {e}"))?;
        first_client += mine_clients;
        let stdout = child.stdout.take().ok_or("a client process without stdout")?;
        let seen = seen.clone();
        readers.push(tokio::spawn(async move { read_client(child, stdout, &seen).await }));
    }
    let mut total = Outcome::default();
    for r in readers {
        total.add(r.await.map_err(|e| format!("reading a client process failed: {e}"))??);
    }
    total.elapsed = t.elapsed();
    Ok(total)
}

/// Reads one client process's lines until it ends; its result.
async fn read_client(
    mut child: tokio::process::Child,
    stdout: tokio::process::ChildStdout,
    seen: &Seen,
) -> Result<Outcome, String> {
    let mut lines = BufReader::new(stdout).lines();
    let mut done = Outcome::default();
    let mut ended = false;
    while let Some(line) = lines.next_line().await.map_err(|e| format!("a client process's output: {e}"))? {
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match word {
            "sent" => {
                if let Some((name, us)) = rest.split_once(' ')
                    && let Ok(us) = us.parse::<u64>()
                {
                    seen.submitted_at(name.to_string(), us);
                }
            }
            "lat" => done.latencies_ms.extend(rest.parse::<f64>().ok()),
            "error" => done.first_error = Some(rest.to_string()),
            "result" => {
                let mut n = rest.split(' ').map(|w| w.parse::<u64>().unwrap_or(0));
                (done.ok, done.errors) = (n.next().unwrap_or(0), n.next().unwrap_or(0));
                ended = true;
            }
            _ => {}
        }
    }
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if !(ended && status.success()) {
        return Err(format!("a client process ended ({status}) without its result"));
    }
    Ok(done)
}
