//! Starting one replica: its environment, its log files, its own session and process group,
//! and a tiny `sh` wrapper that records the exit code in a file so that an agent restarted
//! while the job ran can still report how it ended.
//!
//! The wrapper sets handlers (not "ignore") for the usual termination signals: a signal
//! sent to the group reaches the job with its normal semantics (handlers reset to default
//! on exec), while the wrapper survives it, waits for the job and writes its status
//! (`128 + signal` for a signal death). Only SIGKILL takes the wrapper down with the job;
//! then the agent (if it runs) sees the wrapper killed, and an agent restarted later finds
//! no exit file and reports `EXIT_CODE_KILLED`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use baton_proto::v1::Assignment;

use crate::limits::{LEASE_STOP_GRACE_MS, MAX_COMMAND_ARGS, WATCHDOG_POLL_MS, WATCHDOG_SLACK_MS};
use crate::logfiles;
use crate::run_as::{Identity, RunAsPolicy};

/// Exit code reported for a replica whose wrapper was killed (SIGKILL: 128 + 9).
pub const EXIT_CODE_KILLED: i32 = 128 + libc::SIGKILL;
/// Exit code reported for a replica that could not be started (as a shell reports a
/// command not found).
pub const EXIT_CODE_NOT_STARTED: i32 = 127;
/// How long a replica held by a cgroup waits for its guard before it gives up unstarted:
/// the agent starts the guard just before the wrapper, so this bounds a shell's start on a
/// loaded host.
pub const GUARD_WAIT_MS: u64 = 5_000;
/// How often the wrapper looks for the guard's marker (the `sleep 0.01` in `WRAPPER`).
const GUARD_WAIT_POLL_MS: u64 = 10;

/// The shell functions the wrapper's watchdog and the guard share: `now_ms` (CLOCK_BOOTTIME,
/// as `/proc/uptime` shows it) and `ran_out`, which reads the lease file `$l` into `$e` (a
/// file gone after it was read counts as run out: 0) and is true once `$e` plus the slack
/// `$k` has passed.
macro_rules! lease_functions {
    () => {
        r#"now_ms() {
  read -r u i < /proc/uptime
  now=$(( ${u%.*} * 1000 + 1${u#*.} * 10 - 1000 ))
}
ran_out() {
  n=
  read -r n b < "$l" 2>/dev/null
  case $n in ''|*[!0-9]*) ;; *) e=$n ;; esac
  [ -n "$e" ] && [ ! -e "$l" ] && e=0
  [ -z "$e" ] && return 1
  now_ms
  [ "$now" -ge $(( e + k )) ]
}
"#
    };
}

/// Signals the wrapper outlives: HUP INT QUIT USR1 USR2 ALRM TERM (numbers, portable `trap`).
///
/// It first checks the lease once more: an agent stopped (or slowed) between deciding to
/// start the replica and spawning it may spawn it after its lease ran out, when the leader
/// may have declared the node lost and placed the job elsewhere (`tests/suite/lease.rs`,
/// `a_replica_spawned_after_the_lease_ran_out_does_not_run`).
/// Unless a lease file of this boot says a lease is held (none at all: the agent was never
/// granted one, or its file is from before a reboot; or it has run out), it leaves the
/// watchdog's marker (`.lease`, reported as a lease stop) and exits 127 without running the
/// command: the agent, the wrapper and the watchdog agree that nothing starts unleased.
/// A replica held by a cgroup (poll interval "0") then waits for its guard's marker
/// (`.guarded`, written as the guard starts) for up to [`GUARD_WAIT_MS`], and without it
/// does the same as without a lease: a guard that never ran (it could not be spawned, or an
/// agent killed between the two spawns when the guard came second) would leave a replica that
/// nothing stops when its lease runs out (a chaos run: the job ran on past its node's loss
/// beside its next attempt). The agent starts the guard first, so the wait is only for the
/// guard's shell to start. After the wait it checks the lease again: a whole node frozen
/// during the wait (chaos seeds 17000-17004 of stop 66) ran the command once thawed, seconds
/// after its lease ran out and beside the job's next attempt on another node.
/// Then it leaves a marker next to the exit file (`.started`): a replica whose pid the
/// agent did not journal before it went down is then known to have run.
///
/// Arguments: the exit file, the lease file, the stop signal (a number), the watchdog's
/// grace and its poll interval (seconds, "1.000"; "0": no watchdog, the replica's guard
/// watches it), the slack (ms), how many times to look for the guard's marker 10 ms apart,
/// then the command. The watchdog runs beside
/// the job in its process group: once the lease file's expiry (ms on CLOCK_BOOTTIME, which
/// `/proc/uptime` shows) plus the slack has passed, it leaves a marker next to the exit
/// file (`.lease`), continues the group (a suspended replica takes its stop signal as a
/// running one does), sends the stop signal to the group, waits the grace and kills the group.
/// It starts from the expiry the wrapper read: a lease file that disappears after that
/// (the agent's data directory was removed), even before the watchdog's first poll, counts
/// as a lease run out. The marker is written with `true`, not `:`: a failed redirection on a special
/// built-in ends a POSIX shell, and with the replica's directory gone that ended the
/// watchdog instead of the replica.
const WRAPPER: &str = concat!(
    r#"trap : 1 2 3 10 12 14 15
f=$1 l=$2 s=$3 g=$4 p=$5 k=$6 q=$7
shift 7
"#,
    lease_functions!(),
    r#"e= b= id=
read -r id 2>/dev/null < /proc/sys/kernel/random/boot_id
leased() {
  e= b=
  read -r e b 2>/dev/null < "$l"
  case $e in ''|*[!0-9]*) e= ;; esac
  [ -n "$e" ] && [ "$b" = "$id" ] || return 1
  now_ms
  [ "$now" -lt "$e" ]
}
unheld() {
  true > "$f.lease" 2>/dev/null
  printf '127\n' > "$f.tmp" && mv -f "$f.tmp" "$f"
  exit 127
}
leased || unheld
if [ "$p" = 0 ]; then
  t=0
  until [ -e "$f.guarded" ]; do
    t=$((t + 1))
    [ "$t" -gt "$q" ] && unheld
    sleep 0.01
  done
  leased || unheld
fi
: > "$f.started"
watchdog() {
  trap : 1 2 3 10 12 14 15
  while :; do
    sleep "$p"
    ran_out || continue
    true > "$f.lease" 2>/dev/null
    kill -CONT 0
    kill -"$s" 0
    sleep "$g"
    kill -9 0
  done
}
w=
if [ "$p" != 0 ]; then
  watchdog < /dev/null > /dev/null 2>&1 &
  w=$!
fi
"$@"
rc=$?
[ -n "$w" ] && kill -9 "$w" 2> /dev/null
printf '%s\n' "$rc" > "$f.tmp" && mv -f "$f.tmp" "$f"
exit "$rc"
"#
);

/// The guard of a replica held by a cgroup: the watchdog above, but a process of its own,
/// started by the agent beside the replica, outside its cgroup, in a session of its own and as
/// the agent's user. The job can neither kill it (another user's process), stop it (not in
/// its group), nor leave what it watches (the cgroup). Once the lease file's expiry plus the
/// slack has passed (a file gone counts as run out, as for the watchdog), it leaves the
/// `.lease` marker, thaws the cgroup (a suspended replica is frozen), continues every process
/// of the cgroup and sends each the stop signal,
/// waits the grace, and kills the cgroup whole (`cgroup.kill`). It ends when the cgroup is
/// gone (the replica ended and the agent removed it).
/// A guard that looks only after the stop's deadline (the expiry plus the slack and the
/// grace: it was stopped, or its whole node was frozen and thawed) kills the cgroup at once,
/// before it thaws it, and sends no stop signal: the leader may have placed the job
/// elsewhere, and a replica told to stop would save a checkpoint beside its next attempt;
/// one that looks late but before it waits only what is left of the grace
/// (`reconcile::lease_stop_grace_ms` is the agent's side of the same rule). A file gone
/// (expiry 0) says nothing of when the lease ran out: the whole grace.
///
/// Arguments: the lease file, the cgroup directory, the exit file, the stop signal (a
/// number), the grace and the poll interval (seconds, "1.000"), the slack (ms), the
/// expiry the agent read before the start (ms on CLOCK_BOOTTIME; empty: none), and the
/// grace again in ms.
const GUARD: &str = concat!(
    r#"trap : 1 2 3 10 12 14 15
l=$1 c=$2 f=$3 s=$4 g=$5 p=$6 k=$7 e=$8 d=$9
"#,
    lease_functions!(),
    r#"case $e in ''|*[!0-9]*) e= ;; esac
case $d in ''|*[!0-9]*) d=0 ;; esac
: > "$f.guarded"
while :; do
  sleep "$p"
  [ -d "$c" ] || exit 0
  ran_out || continue
  true > "$f.lease" 2>/dev/null
  if [ "$d" -gt 0 ] && [ "$e" -gt 0 ]; then
    r=$(( e + k + d - now ))
    if [ "$r" -le 0 ]; then
      echo 1 > "$c/cgroup.kill" 2>/dev/null
      echo 0 > "$c/cgroup.freeze" 2>/dev/null
      exit 0
    fi
    [ "$r" -lt "$d" ] && g=$(( r / 1000 )).$(( r % 1000 / 100 ))$(( r % 100 / 10 ))$(( r % 10 ))
  fi
  echo 0 > "$c/cgroup.freeze" 2>/dev/null
  for q in $(cat "$c/cgroup.procs" 2>/dev/null); do
    kill -CONT "$q" 2>/dev/null
    kill -"$s" "$q" 2>/dev/null
  done
  sleep "$g"
  echo 1 > "$c/cgroup.kill" 2>/dev/null
  exit 0
done
"#
);

/// Starts the guard of a replica whose processes `cgroup` holds (see [`GUARD`]); the lease
/// held when it started expires at `expires_at_ms` (CLOCK_BOOTTIME). Not waited for: it ends
/// by itself once the cgroup is gone, and outlives the agent as the replica does.
pub fn start_guard(
    cgroup: &crate::cgroup::ReplicaCgroup,
    lease_file: &Path,
    exit_file: &Path,
    stop_signal: i32,
    expires_at_ms: Option<u64>,
) -> std::io::Result<()> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(GUARD).arg(GUARD_NAME).arg(lease_file).arg(cgroup.dir()).arg(exit_file);
    cmd.arg(stop_signal.to_string()).arg(seconds(LEASE_STOP_GRACE_MS)).arg(seconds(WATCHDOG_POLL_MS));
    cmd.arg(WATCHDOG_SLACK_MS.to_string()).arg(expires_at_ms.map(|e| e.to_string()).unwrap_or_default());
    cmd.arg(LEASE_STOP_GRACE_MS.to_string());
    cmd.env_clear().envs(host_env());
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| if libc::setsid() < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
    }
    // Dropped, not killed: tokio reaps it when it ends.
    cmd.spawn().map(drop)
}

/// The wrapper's `$0`: it tells the wrapper from the guard, which also names the exit file.
const WRAPPER_NAME: &str = "baton-wrapper";
/// The guard's `$0` (what `ps` shows after `sh -c SCRIPT`).
pub const GUARD_NAME: &str = "baton-guard";

/// What a start needs besides the assignment.
pub struct LaunchDirs<'a> {
    pub data_dir: &'a Path,
    pub checkpoint_root: &'a Path,
    /// This node's name, for `BATON_NODE`.
    pub node: &'a str,
    /// Who replicas may run as here.
    pub run_as: &'a RunAsPolicy,
    /// The replica's own cgroup; `None`: its process group only.
    pub cgroup: Option<crate::cgroup::ReplicaCgroup>,
    /// Its GPUs by device index and its MIG slices.
    pub given: &'a crate::devices::Given,
    /// The state index of the directive that asked for this start (`BATON_STATE_INDEX`).
    pub state_index: u64,
}

/// A job's checkpoint directory, keyed by its id: a name is reused once its job ended, and a
/// new job must never resume from an old job's files.
pub fn checkpoint_dir(checkpoint_root: &Path, job_id: u64) -> PathBuf {
    checkpoint_root.join(format!("job-{job_id}"))
}

/// A rank's own checkpoint directory inside its job's (`job-<id>/rank-<r>`): only the
/// files there (and the job directory's own, outside every rank's) count as that rank's
/// checkpoint (`checkpoint::newest_rank_mtime_ms`).
pub fn rank_checkpoint_dir(checkpoint_root: &Path, job_id: u64, rank: u32) -> PathBuf {
    checkpoint_dir(checkpoint_root, job_id).join(crate::checkpoint::rank_dir_name(rank))
}

/// The exit file of one replica, in a directory of its own: the wrapper runs as the job's
/// user and writes its markers and exit file there, so that directory (and only it) is the
/// user's.
pub fn exit_file(data_dir: &Path, job_id: u64, attempt: u32, rank: u32) -> PathBuf {
    data_dir.join("run").join(format!("{job_id}-{attempt}-{rank}")).join(EXIT_FILE_NAME)
}

const EXIT_FILE_NAME: &str = "exit";

/// The marker a replica's watchdog leaves when it stopped the replica because the lease ran
/// out.
pub fn lease_marker(exit_file: &Path) -> PathBuf {
    marker(exit_file, ".lease")
}

/// The marker the agent leaves before it signals a replica to stop (or to die): the
/// journal says so too, but a journal lost after the signal would leave a replica that
/// saved its work and exited 0, as a workload does when told to stop, looking like one that
/// ended on its own (`reconcile::unrecorded_ending`).
pub fn stop_marker(exit_file: &Path) -> PathBuf {
    marker(exit_file, ".stop")
}

/// Writes `bytes` to `path` and puts the file and its name on stable storage (the file,
/// then its directory, synced), so that a power cut cannot take it back.
pub fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    let dir = path.parent().ok_or_else(|| std::io::Error::other(format!("{} has no directory", path.display())))?;
    std::fs::File::open(dir)?.sync_all()
}

/// The marker the wrapper leaves as it starts.
pub fn started_marker(exit_file: &Path) -> PathBuf {
    marker(exit_file, ".started")
}

/// The marker a replica's guard leaves as it starts: the wrapper runs nothing before it.
pub fn guarded_marker(exit_file: &Path) -> PathBuf {
    marker(exit_file, ".guarded")
}

/// `exit_file` with `suffix` appended: the markers the wrapper's shell names `$f.<suffix>`.
fn marker(exit_file: &Path, suffix: &str) -> PathBuf {
    let mut name = exit_file.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Removes the exit file and the markers next to it (the replica's end was recorded), and
/// the replica's own directory (exit files journaled before it had one share `run/`).
pub fn remove_markers(exit_file: &Path) {
    let markers =
        [lease_marker(exit_file), started_marker(exit_file), guarded_marker(exit_file), stop_marker(exit_file)];
    for p in std::iter::once(exit_file.to_path_buf()).chain(markers) {
        let _ = std::fs::remove_file(p);
    }
    if exit_file.file_name().is_some_and(|n| n == EXIT_FILE_NAME)
        && let Some(dir) = exit_file.parent()
    {
        let _ = std::fs::remove_dir(dir);
    }
}

/// What became of a replica journaled without a pid (the agent went down between the
/// journal write before the spawn and the one after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unjournaled {
    /// Its wrapper runs: found by its exit file path in its command line.
    Running { pid: u32, start_time: u64 },
    /// It ran and ended (its exit file or its start marker is there).
    Ended,
    /// No trace of it: never spawned.
    NeverStarted,
}

/// Whether the replica whose exit file is `exit_file` left a file behind: it ran here.
pub fn left_traces(exit_file: &Path) -> bool {
    exit_file.exists() || started_marker(exit_file).exists() || lease_marker(exit_file).exists()
}

/// Looks for the wrapper of the replica whose exit file is `exit_file` (a path no other
/// replica shares). /proc is read before the files: a wrapper still starting has not left
/// its marker yet, but it is in /proc.
pub fn find_unjournaled(exit_file: &Path) -> Unjournaled {
    // The watchdog, a fork of the wrapper, has the same command line: the wrapper is the
    // one that leads its process group (it called setsid). The guard leads its own too, and
    // names itself `baton-guard`.
    let found = crate::procfs::find_by_arg(exit_file.as_os_str().as_encoded_bytes());
    let wrapper = found.into_iter().find(|&pid| {
        crate::procfs::process_group(pid) == Some(pid) && crate::procfs::has_arg(pid, WRAPPER_NAME.as_bytes())
    });
    if let Some(pid) = wrapper
        && let Some(start_time) = crate::procfs::start_time(pid)
    {
        return Unjournaled::Running { pid, start_time };
    }
    if left_traces(exit_file) { Unjournaled::Ended } else { Unjournaled::NeverStarted }
}

/// Suspends the replica whose wrapper leads group `pgid`: SIGSTOP to every process of the
/// group but the wrapper (it only waits) and its watchdog (the wrapper's fork, with the same
/// command line, and the `sleep` it waits on). The watchdog must go on watching the lease:
/// a suspended replica whose agent dies is then stopped when the lease runs out, instead of
/// outliving its node and holding what it holds when the job is placed again
/// (`tests/suite/lease.rs`, `the_watchdog_stops_a_suspended_replica_whose_agent_is_gone`). Not
/// one SIGSTOP of the whole group and a SIGCONT of the watchdog after it: an agent that
/// died between the two left the watchdog stopped (a chaos run found both, chaos/README.md,
/// "Found so far").
/// A process forked by one not stopped yet is found by the next pass; a stopped one forks
/// nothing more, so the passes end (at most `MAX_SUSPEND_PASSES`).
pub fn suspend_replica(pgid: u32, exit_file: &Path) {
    // The wrapper has the same command line; the job is its child, and is not spared.
    let found = crate::procfs::find_by_arg(exit_file.as_os_str().as_encoded_bytes());
    let watchdogs: Vec<u32> = found.into_iter().filter(|&pid| pid != pgid).collect();
    let spared =
        |m: &crate::procfs::Member| m.pid == pgid || watchdogs.contains(&m.pid) || watchdogs.contains(&m.parent);
    let mut signalled: Vec<u32> = Vec::new();
    for _ in 0..MAX_SUSPEND_PASSES {
        let members = crate::procfs::group_members(pgid);
        let fresh: Vec<u32> =
            members.iter().filter(|m| !spared(m) && !signalled.contains(&m.pid)).map(|m| m.pid).collect();
        if fresh.is_empty() {
            return;
        }
        for pid in fresh {
            crate::signal::signal_process(pid, libc::SIGSTOP);
            signalled.push(pid);
        }
    }
    tracing::warn!(pgid, "the replica's processes kept forking while being suspended; some may still run");
}

/// Passes of `suspend_replica` over the group: each stops what the last one found forked.
const MAX_SUSPEND_PASSES: usize = 16;

/// Reads the exit code the wrapper wrote, if it did.
pub fn read_exit_file(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What a replica keeps of the agent's own environment: where tools and libraries are, and
/// locale and time zone. Everything else the agent holds (credentials, tokens, its own
/// configuration) is not the job's business; the job's own `env` comes on top.
pub const HOST_ENV: [&str; 7] = ["PATH", "LD_LIBRARY_PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// The host basics from `HOST_ENV` that the agent has.
fn host_env() -> impl Iterator<Item = (&'static str, std::ffi::OsString)> {
    HOST_ENV.into_iter().filter_map(|k| std::env::var_os(k).map(|v| (k, v)))
}

/// The environment a replica gets on top of `HOST_ENV`.
pub fn replica_env(
    a: &Assignment,
    resume: bool,
    dirs: &LaunchDirs<'_>,
    checkpoint_dir: &Path,
    rank_checkpoint_dir: &Path,
    signal_name: &str,
    visible_devices: &str,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = a.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    env.insert("CUDA_VISIBLE_DEVICES".into(), visible_devices.to_string());
    env.insert("BATON_JOB".into(), a.job.clone());
    env.insert("BATON_JOB_ID".into(), a.job_id.to_string());
    env.insert("BATON_ATTEMPT".into(), a.attempt.to_string());
    env.insert("BATON_RANK".into(), a.rank.to_string());
    env.insert("BATON_NODE".into(), dirs.node.to_string());
    env.insert("BATON_WORLD_SIZE".into(), a.world_size.to_string());
    env.insert("BATON_CHECKPOINT_DIR".into(), checkpoint_dir.display().to_string());
    env.insert("BATON_RANK_CHECKPOINT_DIR".into(), rank_checkpoint_dir.display().to_string());
    env.insert("BATON_CHECKPOINT_SIGNAL".into(), signal_name.to_string());
    // When the agent launched the process, by the node's clock: a process stopped right
    // after its launch (a suspension) runs its first line much later.
    let launched_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    env.insert("BATON_LAUNCHED_AT_MS".into(), launched_ms.to_string());
    // What asked for it: the replicated state, by its count of commands, that the directive
    // was computed from. The start is that state's to justify.
    env.insert("BATON_STATE_INDEX".into(), dirs.state_index.to_string());
    env.remove("BATON_RESUME");
    if resume {
        env.insert("BATON_RESUME".into(), "1".into());
    }
    env
}

/// Whether the replica resumes: the leader knows of a checkpoint, or it asked this agent to
/// look (a checkpoint may exist that no report brought) and every rank has one in the job's
/// directory (shared storage: the ranks saved on whatever node they ran).
pub fn resumes(a: &Assignment, checkpoint_dir: &Path) -> bool {
    if a.resume {
        return true;
    }
    let found = a.resume_if_checkpointed && crate::checkpoint::complete(checkpoint_dir, a.world_size);
    if found {
        tracing::info!(
            job = a.job,
            attempt = a.attempt,
            rank = a.rank,
            "resumes from a checkpoint the leader was not told of"
        );
    }
    found
}

/// A started replica.
pub struct Started {
    pub child: tokio::process::Child,
    pub pid: u32,
}

/// Why a replica did not start; the reason is also in its stderr log.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

/// Creates the directories and log files and spawns the replica. On failure the reason is
/// appended to the replica's stderr log (when that could be opened).
pub fn start(
    a: &Assignment,
    dirs: &LaunchDirs<'_>,
    signal_name: &str,
    stop_signal: i32,
) -> Result<Started, StartError> {
    let result = try_start(a, dirs, signal_name, stop_signal);
    if let Err(e) = &result {
        let path = logfiles::log_path(dirs.data_dir, a.job_id, a.attempt, a.rank, "stderr");
        if let Ok(mut f) = logfiles::open_append(&path) {
            use std::io::Write;
            let _ = writeln!(f, "baton: cannot start {:?}: {e}", a.command);
        }
    }
    result
}

fn try_start(
    a: &Assignment,
    dirs: &LaunchDirs<'_>,
    signal_name: &str,
    stop_signal: i32,
) -> Result<Started, StartError> {
    let fail = |what: &str, path: &Path, e: std::io::Error| StartError(format!("{what} {}: {e}", path.display()));
    let log_dir = logfiles::attempt_dir(dirs.data_dir, a.job_id, a.attempt);
    std::fs::create_dir_all(&log_dir).map_err(|e| fail("cannot create", &log_dir, e))?;
    let stdout_path = logfiles::log_path(dirs.data_dir, a.job_id, a.attempt, a.rank, "stdout");
    let stderr_path = logfiles::log_path(dirs.data_dir, a.job_id, a.attempt, a.rank, "stderr");
    let stdout = logfiles::open_append(&stdout_path).map_err(|e| fail("cannot open", &stdout_path, e))?;
    let stderr = logfiles::open_append(&stderr_path).map_err(|e| fail("cannot open", &stderr_path, e))?;
    if a.command.is_empty() {
        return Err(StartError("the assignment has an empty command".into()));
    }
    if a.command.len() > MAX_COMMAND_ARGS || a.env.len() > MAX_COMMAND_ARGS {
        return Err(StartError(format!("more than {MAX_COMMAND_ARGS} command arguments or environment entries")));
    }
    let who = dirs.run_as.resolve(&a.run_as).map_err(|e| StartError(format!("cannot run as the job's user: {e}")))?;
    // Private to the job's user: its logs (the agent holds them open and reads them as
    // itself) and its checkpoints. The log directory stays the agent's, so the job cannot
    // swap a log file for a link to a file it may not read.
    for (f, path) in [(&stdout, &stdout_path), (&stderr, &stderr_path)] {
        own(f, who.as_ref(), 0o600).map_err(|e| fail("cannot hand over", path, e))?;
    }
    let ckpt = checkpoint_dir(dirs.checkpoint_root, a.job_id);
    std::fs::create_dir_all(&ckpt).map_err(|e| fail("cannot create", &ckpt, e))?;
    own_path(&ckpt, who.as_ref(), 0o700).map_err(|e| fail("cannot hand over", &ckpt, e))?;
    let rank_ckpt = rank_checkpoint_dir(dirs.checkpoint_root, a.job_id, a.rank);
    std::fs::create_dir_all(&rank_ckpt).map_err(|e| fail("cannot create", &rank_ckpt, e))?;
    own_path(&rank_ckpt, who.as_ref(), 0o700).map_err(|e| fail("cannot hand over", &rank_ckpt, e))?;
    let exit = exit_file(dirs.data_dir, a.job_id, a.attempt, a.rank);
    remove_markers(&exit);
    if let Some(parent) = exit.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail("cannot create", parent, e))?;
        own_path(parent, who.as_ref(), 0o700).map_err(|e| fail("cannot hand over", parent, e))?;
    }

    // Opened here, joined by the child before it runs anything of the job: its processes are
    // in the cgroup from their first instruction, and none can leave it.
    let gpus = dirs.given.device_gpus();
    let limits = crate::cgroup::Limits { memory_bytes: a.memory_bytes, cpu_millis: a.cpu_millis, gpus };
    let cgroup_procs = match &dirs.cgroup {
        Some(c) => c.create(&limits).map_err(|e| StartError(format!("cannot make the replica's cgroup: {e}")))?,
        None => Vec::new(),
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(WRAPPER).arg(WRAPPER_NAME).arg(&exit).arg(crate::lease_file::path(dirs.data_dir));
    // A replica held by a cgroup is watched by its guard (`GUARD`), which the job cannot
    // reach; the wrapper's own watchdog is only for process groups.
    let guarded = !cgroup_procs.is_empty();
    let poll = if guarded { "0".to_string() } else { seconds(WATCHDOG_POLL_MS) };
    cmd.arg(stop_signal.to_string()).arg(seconds(LEASE_STOP_GRACE_MS)).arg(poll);
    cmd.arg(WATCHDOG_SLACK_MS.to_string()).arg((GUARD_WAIT_MS / GUARD_WAIT_POLL_MS).to_string()).args(&a.command);
    cmd.env_clear().envs(host_env());
    if let Some(w) = &who {
        // The user's own home and name, not the agent's; a directory the user can enter.
        cmd.env("HOME", &w.home).env("USER", &w.name).env("LOGNAME", &w.name);
        cmd.current_dir(if Path::new(&w.home).is_dir() { Path::new(&w.home) } else { Path::new("/") });
    }
    let visible = dirs.given.visible();
    cmd.envs(replica_env(a, resumes(a, &ckpt), dirs, &ckpt, &rank_ckpt, signal_name, &visible));
    cmd.envs(dirs.given.mps_env());
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let drop_to = who.map(|w| (w.uid, w.gid, w.groups));
    // Its own session: the replica outlives the agent (a restarted agent re-adopts it), no
    // terminal signals reach it, and the whole group is signalled at once by its pgid. Then
    // the job's user, before anything of the job runs.
    // SAFETY: the cgroup join (write(2)), setsid and the calls in `drop_to` are
    // async-signal-safe and touch only what the parent allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // First, while still root: the cgroups' files are the agent's.
            for procs in &cgroup_procs {
                crate::cgroup::join_in_child(procs)?;
            }
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            match &drop_to {
                Some((uid, gid, groups)) => crate::run_as::drop_to(*uid, *gid, groups),
                None => Ok(()),
            }
        });
    }
    // The guard first: the wrapper runs nothing until the guard is up, and what it waits for
    // then is the guard's shell starting, not this agent's next steps (an agent paused or
    // killed right after the spawn would otherwise cost the replica its start).
    if let Some(c) = dirs.cgroup.as_ref().filter(|_| guarded) {
        let lease_file = crate::lease_file::path(dirs.data_dir);
        // The guard starts from the expiry held now, so a file gone before its first look
        // counts as run out, not as never granted.
        let expires = crate::lease_file::load(&lease_file).expires_at_ms();
        // Without its guard a replica must not run: the lease would bind nothing. A guard
        // whose replica then fails to spawn ends when the cgroup is removed.
        start_guard(c, &lease_file, &exit, stop_signal, expires)
            .map_err(|e| StartError(format!("cannot start the replica's guard: {e}")))?;
    }
    let child = cmd.spawn().map_err(|e| StartError(format!("cannot run sh: {e}")))?;
    let pid = child.id().ok_or_else(|| StartError("the wrapper exited before its pid was read".into()))?;
    Ok(Started { child, pid })
}

/// Gives an open file to the job's user (`None`: the agent's own) with `mode`.
fn own(f: &std::fs::File, who: Option<&Identity>, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(w) = who {
        std::os::unix::fs::fchown(f, Some(w.uid), Some(w.gid))?;
    }
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Gives a directory to the job's user (`None`: the agent's own) with `mode`: never what a
/// link points to (a job's checkpoint root is shared storage, and the job may put a link
/// where its directory was). Opened without following a link, then changed through the
/// descriptor, so nothing swapped in after the open is touched.
fn own_path(path: &Path, who: Option<&Identity>, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY).open(path).map_err(
            |e| match e.raw_os_error() {
                // Linux answers a link opened with both flags ENOTDIR, or ELOOP.
                Some(libc::ELOOP | libc::ENOTDIR) if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) => {
                    std::io::Error::other("is a symbolic link")
                }
                _ => e,
            },
        )?;
    own(&dir, who, mode)
}

/// Milliseconds as `sleep` takes them: "1.000".
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1_000, ms % 1_000)
}

/// The exit code a shell would report for this status: the code, or 128 + signal.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(libc::SIGKILL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::fs::PermissionsExt;

    /// A rank directory the job replaced by a link to another file is refused, and what the
    /// link points to keeps its mode. The directory is opened without following links and
    /// changed through that descriptor, so a link swapped in after the open changes nothing
    /// either (before, the path was checked, then chmod-ed by name, which follows a link put
    /// there in between; that race is not reproduced here, its window being one syscall).
    #[test]
    fn a_link_in_place_of_a_directory_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let rank = dir.path().join("rank-0");
        std::os::unix::fs::symlink(&victim, &rank).unwrap();
        let e = own_path(&rank, None, 0o700).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777, 0o755);
        let real = dir.path().join("rank-1");
        std::fs::create_dir(&real).unwrap();
        own_path(&real, None, 0o700).unwrap();
        assert_eq!(std::fs::metadata(&real).unwrap().permissions().mode() & 0o777, 0o700);
    }

    /// A directory holding links to the programs of `tools::NEEDED` but `except`, and nothing
    /// else: the `PATH` of a minimal container image.
    fn only_the_tools(except: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let host = std::env::var_os("PATH").unwrap();
        for name in crate::tools::NEEDED.into_iter().filter(|n| *n != except) {
            let found = crate::tools::find(name, &host).unwrap_or_else(|| panic!("{name} on this host"));
            std::os::unix::fs::symlink(found, dir.path().join(name)).unwrap();
        }
        dir
    }

    /// Runs `script` (named `name`) with `args` under `path` alone; returns its exit code
    /// and what it wrote to stderr.
    fn run_script(script: &str, name: &str, args: &[&OsStr], path: &Path) -> (Option<i32>, String) {
        let sh = crate::tools::find("sh", &std::env::var_os("PATH").unwrap()).unwrap();
        let out = std::process::Command::new(sh)
            .arg("-c")
            .arg(script)
            .arg(name)
            .args(args)
            .env_clear()
            .env("PATH", path)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// The compose deployment's image held `sh` and no `mv` or `sleep`: every exit file
    /// stayed `exit.tmp`, and a replica whose end the agent noticed through `/proc` before
    /// its wait returned was reported killed (exit 137; CI's smoke test failed on it), while
    /// each replica's watchdog, its `sleep` not found, spun on a CPU. With what
    /// `tools::NEEDED` lists and nothing else, the wrapper (its watchdog polling every 10 ms)
    /// runs a command, records its code, and runs nothing that is not found.
    #[test]
    fn the_wrapper_needs_nothing_but_the_tools_the_agent_checks_for() {
        let dir = tempfile::tempdir().unwrap();
        let lease = dir.path().join("lease");
        crate::lease_file::write(&lease, &crate::lease::Lease::until(crate::lease_file::boot_ms() + 60_000)).unwrap();
        let exit = dir.path().join("exit");
        let tools = only_the_tools("");
        let args: Vec<&OsStr> = [exit.as_os_str(), lease.as_os_str()]
            .into_iter()
            .chain(["15", "1.000", "0.010", "0", "0", "sh", "-c", "sleep 0.1; exit 3"].map(OsStr::new))
            .collect();
        let (code, stderr) = run_script(WRAPPER, WRAPPER_NAME, &args, tools.path());
        assert_eq!(code, Some(3), "{stderr}");
        assert!(!stderr.contains("not found"), "{stderr}");
        assert_eq!(read_exit_file(&exit), Some(3), "the code is recorded");

        let without_mv = only_the_tools("mv");
        let (code, stderr) = run_script(WRAPPER, WRAPPER_NAME, &args, without_mv.path());
        assert_eq!(code, Some(3));
        assert!(stderr.contains("mv: not found"), "the test sees a missing tool: {stderr}");
    }

    /// The guard, as the wrapper above: with the tools alone it stops and kills a cgroup
    /// whose lease ran out (here a plain directory standing in for one) without a command
    /// not found.
    #[test]
    fn the_guard_needs_nothing_but_the_tools_the_agent_checks_for() {
        let dir = tempfile::tempdir().unwrap();
        let (lease, cgroup, exit) = (dir.path().join("lease"), dir.path().join("cg"), dir.path().join("exit"));
        crate::lease_file::write(&lease, &crate::lease::Lease::until(1)).unwrap();
        std::fs::create_dir(&cgroup).unwrap();
        std::fs::write(cgroup.join("cgroup.procs"), "").unwrap();
        let tools = only_the_tools("");
        let args: Vec<&OsStr> = [lease.as_os_str(), cgroup.as_os_str(), exit.as_os_str()]
            .into_iter()
            .chain(["15", "0.010", "0.010", "0", "1"].map(OsStr::new))
            .collect();
        let (code, stderr) = run_script(GUARD, GUARD_NAME, &args, tools.path());
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.contains("not found"), "{stderr}");
        assert_eq!(std::fs::read_to_string(cgroup.join("cgroup.kill")).unwrap().trim(), "1", "killed it whole");
        assert!(lease_marker(&exit).exists(), "told as a lease stop");
    }

    /// Runs the guard over a stand-in cgroup (a directory) listing a `sleep` of this test,
    /// with a lease that ended at `expiry` (CLOCK_BOOTTIME ms), no slack, a 1 s grace
    /// polled every 10 ms. Returns whether the `sleep` outlived the guard (a stand-in
    /// cannot be killed whole: only the stop signal reaches it) and what `cgroup.kill` says.
    fn guard_over_a_sleep(expiry: u64) -> (bool, String) {
        let dir = tempfile::tempdir().unwrap();
        let (lease, cgroup, exit) = (dir.path().join("lease"), dir.path().join("cg"), dir.path().join("exit"));
        crate::lease_file::write(&lease, &crate::lease::Lease::until(expiry)).unwrap();
        std::fs::create_dir(&cgroup).unwrap();
        let mut sleep = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::write(cgroup.join("cgroup.procs"), format!("{}\n", sleep.id())).unwrap();
        let expiry = expiry.to_string();
        let args: Vec<&OsStr> = [lease.as_os_str(), cgroup.as_os_str(), exit.as_os_str()]
            .into_iter()
            .chain(["15", "1.000", "0.010", "0", &expiry, "1000"].map(OsStr::new))
            .collect();
        let path = std::env::var_os("PATH").unwrap();
        let (code, stderr) = run_script(GUARD, GUARD_NAME, &args, Path::new(&path));
        assert_eq!(code, Some(0), "{stderr}");
        let outlived = sleep.try_wait().unwrap().is_none();
        let _ = sleep.kill();
        let _ = sleep.wait();
        (outlived, std::fs::read_to_string(cgroup.join("cgroup.kill")).unwrap_or_default().trim().to_string())
    }

    /// Issue 31, a whole node frozen: the guard, thawed with every other process of its
    /// node long after the lease ran out, sent the stop signal and waited a whole grace, and
    /// the job saved a checkpoint beside its next attempt on another node. Past the stop's
    /// deadline it now kills the cgroup at once and signals nothing; before it, it stops
    /// the replica as ever.
    #[test]
    fn a_guard_that_looks_past_the_stops_deadline_kills_without_the_stop_signal() {
        let (outlived, kill) = guard_over_a_sleep(crate::lease_file::boot_ms().saturating_sub(10_000));
        assert!(outlived, "the replica was sent its stop signal");
        assert_eq!(kill, "1", "killed whole");

        let (outlived, kill) = guard_over_a_sleep(crate::lease_file::boot_ms());
        assert!(!outlived, "a lease just run out: the replica is told to stop");
        assert_eq!(kill, "1", "and killed after the grace");
    }

    /// Runs the wrapper as `start` does for a replica held by a cgroup (no watchdog of its
    /// own: poll "0"), under a lease held for a minute, looking `polls` times for its guard's
    /// marker; its command leaves `ran` in `dir`. Returns the exit file's code.
    fn wrapper_under_a_held_lease(dir: &Path, polls: u32) -> String {
        let lease = dir.join("lease");
        crate::lease_file::write(&lease, &crate::lease::Lease::until(crate::lease_file::boot_ms() + 60_000)).unwrap();
        let (exit, ran) = (dir.join("exit"), dir.join("ran"));
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg(WRAPPER_NAME)
            .args([exit.as_os_str(), lease.as_os_str()])
            .args(["15", "1.000", "0", "0", &polls.to_string(), "touch"])
            .arg(&ran)
            .status()
            .unwrap();
        assert!(status.code().is_some(), "the wrapper ended by itself");
        std::fs::read_to_string(&exit).unwrap().trim().to_string()
    }

    /// Issue 31, a whole node frozen (chaos seeds 17000-17004 of stop 66): the wrapper
    /// checked the lease, then waited for its guard, and the node froze meanwhile; thawed
    /// seconds after the lease ran out, it ran the command beside the job's next attempt on
    /// another node. It checks the lease again after the wait: here the lease runs out
    /// during it, and the command does not run.
    #[test]
    fn a_replica_whose_lease_ran_out_while_it_waited_for_its_guard_does_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let (lease, exit, ran) = (dir.path().join("lease"), dir.path().join("exit"), dir.path().join("ran"));
        let until = crate::lease_file::boot_ms() + 300;
        crate::lease_file::write(&lease, &crate::lease::Lease::until(until)).unwrap();
        let guarded = guarded_marker(&exit);
        let late_guard = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(700));
            std::fs::write(guarded, "").unwrap();
        });
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg(WRAPPER_NAME)
            .args([exit.as_os_str(), lease.as_os_str()])
            .args(["15", "1.000", "0", "0", "300", "touch"])
            .arg(&ran)
            .status()
            .unwrap();
        late_guard.join().unwrap();
        assert!(crate::lease_file::boot_ms() > until, "the lease ran out before the guard came");
        assert_eq!(status.code(), Some(127));
        assert!(!ran.exists(), "the command ran after its lease ran out");
        assert!(lease_marker(&exit).exists(), "told as a lease stop");
        assert!(!started_marker(&exit).exists());
    }

    /// Issue 31: the agent starts a replica's guard right after its wrapper, and an agent
    /// killed between the two (a chaos run: killed right after a placement) left a replica
    /// that nothing stopped when its lease ran out: it ran on beside its next attempt on
    /// another node. The wrapper now runs nothing until the guard says it watches; without
    /// it, it ends as an unleased one does (a lease stop, the job placed again).
    #[test]
    fn a_replica_held_by_a_cgroup_runs_nothing_until_its_guard_watches() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(wrapper_under_a_held_lease(dir.path(), 20), "127", "no guard: not started");
        assert!(!dir.path().join("ran").exists(), "the command ran without a guard");
        assert!(lease_marker(&dir.path().join("exit")).exists(), "told as a lease stop");
        assert!(!started_marker(&dir.path().join("exit")).exists());

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(guarded_marker(&dir.path().join("exit")), "").unwrap();
        assert_eq!(wrapper_under_a_held_lease(dir.path(), 20), "0");
        assert!(dir.path().join("ran").exists(), "a guarded replica runs");
    }
}
