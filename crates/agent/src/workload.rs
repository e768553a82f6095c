//! The test workload behind `baton workload --steps N --step-ms M`: a preemptible job in
//! miniature. It counts steps, printing `step i`. On SIGTERM or SIGUSR1 it writes the
//! number of finished steps to `rank-<BATON_RANK>.ckpt` in `$BATON_RANK_CHECKPOINT_DIR`
//! (`$BATON_CHECKPOINT_DIR/rank-<BATON_RANK>`, the rank's own directory; a temp file, then
//! a rename, so a reader never sees half a checkpoint), prints `checkpointed at step i` and
//! exits 0. After its last step it saves a checkpoint too: a
//! rank that exits 0 counts as stopped with its work saved. Exiting 0 after a checkpoint is safe: the agent
//! sent the signal, so it reports the replica as `Stopped` (not as `Exited` with success).
//! With `BATON_RESUME` set it starts from the step in its checkpoint and prints
//! `resumed from step i`. After N steps it exits 0.
//!
//! With `--witness DIR` (the chaos harness) it also checks, while it runs, promises the
//! cluster made about it, using locks the kernel drops when a process dies however it dies:
//! it holds an exclusive lock per GPU it was given (`DIR/gpu-<node>-<index>.lock`) and per
//! job rank (`DIR/job-<job>-<rank>.lock`). Finding one taken means two processes were given
//! the same GPU, or two attempts of the job run at once: it appends the violation to
//! `DIR/violations` and exits 3. It also records a resume without a readable checkpoint,
//! and a start from zero although every rank of the gang checkpointed in one attempt (a
//! checkpoint holds `step attempt`), and appends each start to
//! `DIR/starts` (`job attempt rank node first-step at-ms how launched-ms born-ms
//! state-index`, the times on the wall clock; see `chaos/src/check.rs`), and
//! the GPUs it was given to `DIR/gpus` (`job attempt rank node gpus`).
//!
//! With `--misbehave MODE` it is a job that does not cooperate (the chaos harness's
//! adversarial share, [`Misbehave`]): it ignores the stop signal, leaves a process behind
//! outside its session, goes on writing checkpoints after it was told to stop, or leaves a
//! process behind that the kernel holds frozen, which SIGKILL cannot end, or kills what
//! watches it (its watchdog, its guard). Witness files are writable by every user: jobs of
//! one run may run as different users. The cluster must still never run two attempts at
//! once nor give its GPUs to another job while
//! any of its processes lives: the witness locks, which an escaped process inherits, say so.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How a workload misbehaves (`--misbehave`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehave {
    /// Ignores SIGTERM and SIGUSR1: it saves nothing when stopped and runs on until SIGKILL.
    IgnoreStop,
    /// Leaves a process behind at its start (a double fork and `setsid`), which holds the
    /// witness locks and sleeps for `ESCAPED_LIFE_S` unless it is killed.
    Escape,
    /// On the stop signal saves a checkpoint, then goes on working and saving one after each
    /// step until SIGKILL.
    WriteAfterStop,
    /// Leaves a process behind at its start that holds the GPU locks (not the job's: the job
    /// may run again elsewhere) and that the kernel's cgroup v1 freezer holds stopped, so
    /// that SIGKILL stays pending on it as on a process in uninterruptible sleep, until it
    /// is thawed (`unkillable_cgroups`). Needs root and the v1 freezer.
    Unkillable,
    /// At its start kills what watches it, as a hostile job would: every other child of its
    /// parent (the wrapper's watchdog, with process groups only) and its replica's guard
    /// (`baton-guard`, a process of the agent's user where the job is held by a cgroup). A
    /// guard it did kill is a violation: a job must not reach what enforces its lease.
    KillWatchdog,
}

impl Misbehave {
    pub const NAMES: [&'static str; 5] = ["ignore-stop", "escape", "write-after-stop", "unkillable", "kill-watchdog"];

    pub fn name(self) -> &'static str {
        match self {
            Misbehave::IgnoreStop => Self::NAMES[0],
            Misbehave::Escape => Self::NAMES[1],
            Misbehave::WriteAfterStop => Self::NAMES[2],
            Misbehave::Unkillable => Self::NAMES[3],
            Misbehave::KillWatchdog => Self::NAMES[4],
        }
    }
}

impl std::str::FromStr for Misbehave {
    type Err = String;

    fn from_str(s: &str) -> Result<Misbehave, String> {
        match s {
            "ignore-stop" => Ok(Misbehave::IgnoreStop),
            "escape" => Ok(Misbehave::Escape),
            "write-after-stop" => Ok(Misbehave::WriteAfterStop),
            "unkillable" => Ok(Misbehave::Unkillable),
            "kill-watchdog" => Ok(Misbehave::KillWatchdog),
            _ => Err(format!("unknown way to misbehave {s:?}: expected one of {}", Self::NAMES.join(", "))),
        }
    }
}

/// How long a process that escaped its job lives unless it is killed: long past any chaos
/// run's next attempt, bounded so that a test machine is not left with it for good.
const ESCAPED_LIFE_S: u64 = 600;

/// The signal that arrived (0: none). Set by the handler, read by the loop.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// How often the loop looks at the signal flag while it sleeps through a step.
const SIGNAL_POLL_MS: u64 = 10;

/// Rank `rank`'s checkpoint file, in that rank's own directory of the job's checkpoint
/// directory: the agent counts only files there as the rank's save (a gang's ranks share the
/// job directory).
fn rank_checkpoint_path(rank: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("BATON_CHECKPOINT_DIR")?;
    Some(PathBuf::from(dir).join(format!("rank-{rank}")).join(format!("rank-{rank}.ckpt")))
}

/// This rank's checkpoint file: in `BATON_RANK_CHECKPOINT_DIR`, the directory the agent
/// gave it (the same as `rank_checkpoint_path` says; an agent older than it gives none).
fn checkpoint_path() -> Option<PathBuf> {
    let rank = std::env::var("BATON_RANK").unwrap_or_else(|_| "0".to_string());
    match std::env::var_os("BATON_RANK_CHECKPOINT_DIR") {
        Some(dir) => Some(PathBuf::from(dir).join(format!("rank-{rank}.ckpt"))),
        None => rank_checkpoint_path(&rank),
    }
}

/// Writes `step attempt`: the attempt tells a whole gang's checkpoint from ranks that
/// checkpointed in different attempts.
/// With a witness, the checkpoint is recorded once it is in place (after the rename).
fn save(step: u64, witness: Option<&Path>) -> Result<PathBuf, String> {
    let path = checkpoint_path().ok_or("BATON_CHECKPOINT_DIR is not set")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("ckpt.tmp");
    let attempt = env("BATON_ATTEMPT");
    // A save in its node's thaw's moment says so first: the kill that follows may come
    // before the record below.
    if let Some(dir) = witness
        && frozen::lived_through_a_thaw(dir, &env("BATON_NODE"))
    {
        append(&dir.join("thawed-saves"), &format!("{} {step} {}", who_fields(), wall_ms()));
    }
    std::fs::write(&tmp, format!("{step} {attempt}\n")).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("cannot rename to {}: {e}", path.display()))?;
    if let Some(dir) = witness {
        append(&dir.join("checkpoints"), &format!("{} {step} {}", who_fields(), wall_ms()));
    }
    Ok(path)
}

/// `job attempt rank node`, the first fields of every witness record.
fn who_fields() -> String {
    format!("{} {} {} {}", env("BATON_JOB"), env("BATON_ATTEMPT"), env("BATON_RANK"), env("BATON_NODE"))
}

/// The wall clock in milliseconds, shared with the chaos harness on the same machine.
fn wall_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// Records an exit 0 at `step` (`finished` or `stopped`).
fn record_end(witness: Option<&Path>, step: u64, how: &str) {
    if let Some(dir) = witness {
        append(&dir.join("ends"), &format!("{} {step} {how} {}", who_fields(), wall_ms()));
    }
}

/// The steps this rank runs: `other_ranks_steps` for every rank but 0, when given.
pub fn steps_of_rank(steps: u64, other_ranks_steps: Option<u64>, rank: &str) -> u64 {
    match other_ranks_steps {
        Some(other) if rank != "0" => other,
        _ => steps,
    }
}

fn load() -> Result<u64, String> {
    let path = checkpoint_path().ok_or("BATON_CHECKPOINT_DIR is not set")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let step = text.split_whitespace().next().unwrap_or_default();
    step.parse().map_err(|_| format!("{}: not a step number: {:?}", path.display(), text.trim()))
}

/// The attempt in which every rank of the gang wrote a checkpoint, if one did: the job has
/// a whole checkpoint to resume from.
fn gang_checkpoint_attempt() -> Option<String> {
    let world: u32 = env("BATON_WORLD_SIZE").parse().unwrap_or(1);
    let attempts: Vec<String> = (0..world)
        .map(|r| {
            let text = std::fs::read_to_string(rank_checkpoint_path(&r.to_string())?).ok()?;
            text.split_whitespace().nth(1).map(str::to_string)
        })
        .collect::<Option<_>>()?;
    let first = attempts.first()?.clone();
    attempts.iter().all(|a| *a == first).then_some(first)
}

/// How long the agent's look for a checkpoint to resume from may come before the process
/// it launches is born: the spawn between them (its guard, its cgroup, the wrapper), on a
/// loaded machine.
const SPAWN_BOUND_MS: u64 = 500;

/// How long before this process's birth a rank of `attempt` saved as its node thawed
/// (`thawed-saves`), if no more than `SPAWN_BOUND_MS`: a checkpoint completed after the
/// agent looked, which it could not resume from. An older attempt frozen with its node
/// near its end runs its last step and saves in the thaw's moment, before its guard's kill
/// (chaos seed 21001): the next attempt, launched elsewhere meanwhile, redoes the work.
fn saved_as_its_node_thawed(dir: &Path, attempt: &str) -> Option<u64> {
    let job = env("BATON_JOB");
    let born_ms = crate::procfs::born_wall_ms(std::process::id())?;
    let text = std::fs::read_to_string(dir.join("thawed-saves")).ok()?;
    let saved_ms = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&job.as_str()) && f.get(1) == Some(&attempt))
        .filter_map(|f| f.get(5)?.parse::<u64>().ok())
        .max()?;
    (saved_ms + SPAWN_BOUND_MS >= born_ms).then(|| born_ms.saturating_sub(saved_ms))
}

/// Exit code of a workload that witnessed a broken promise.
pub const EXIT_VIOLATION: i32 = 3;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// Appends `line` in one write: with O_APPEND, concurrent writers' lines do not interleave
/// (`writeln!` may split a line into several writes). The chaos harness writes its own
/// records to the witness's files through it too.
pub fn append(path: &Path, line: &str) {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path).inspect(shared);
    if let Err(e) = file.and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())) {
        eprintln!("workload: cannot append to {}: {e}", path.display());
    }
}

/// Lets every user write a witness file this process made: jobs of one run may run as
/// different users (the chaos harness runs most as `nobody`, `unkillable` ones as root), and
/// share the GPU locks and the records. Only the owner may change the mode, and the first
/// one to open the file made it.
fn shared(f: &File) {
    use std::os::unix::fs::PermissionsExt;
    let _ = f.set_permissions(std::fs::Permissions::from_mode(0o666));
}

/// Why a start took not all its witness locks.
enum Refused {
    /// A broken promise, named.
    Violation(String),
    /// This is an older attempt that ran again as its node thawed and found that a newer
    /// attempt holds or held its job's lock (`frozen::thawed_late`, `newer_ran`): recorded
    /// in `thawed-starts`.
    Thawed,
}

/// Takes the locks `--witness` holds while the process lives.
fn witness_locks(dir: &Path) -> Result<Vec<File>, Refused> {
    let (job, rank, node) = (env("BATON_JOB"), env("BATON_RANK"), env("BATON_NODE"));
    // A container image may have no `mkdir`: the first workload makes the directory.
    std::fs::create_dir_all(dir).map_err(|e| Refused::Violation(format!("cannot create {}: {e}", dir.display())))?;
    let mut names = vec![(format!("job-{job}-{rank}.lock"), format!("two attempts of {job} rank {rank} at once"))];
    for gpu in env("CUDA_VISIBLE_DEVICES").split(',').filter(|g| !g.is_empty()) {
        names.push((format!("gpu-{node}-{gpu}.lock"), format!("GPU {gpu} of {node} given to two processes")));
    }
    let mut held = Vec::new();
    for (i, (name, violation)) in names.into_iter().enumerate() {
        let path = dir.join(&name);
        let f = File::create(&path).map_err(|e| Refused::Violation(format!("cannot open {}: {e}", path.display())))?;
        shared(&f);
        let holder = path.with_extension("holder");
        // The job's lock (the first) may be held by an older attempt frozen with its whole
        // node: not running, so this start waits for it to die (`frozen::wait_for_lock`).
        // Or this start is an older attempt its node's thaw ran again.
        if !try_lock(&f) {
            let waited = if i == 0 { frozen::wait_for_lock(&f, &holder) } else { Err(None) };
            match waited {
                Ok(w) => append(&dir.join("waits"), &format!("{} {} {}", who_fields(), w.frozen_ms, w.after_thaw_ms)),
                Err(None)
                    if i == 0
                        && let Some(line) = frozen::thawed_late(dir, &holder, &node) =>
                {
                    append(&dir.join("thawed-starts"), &format!("{} {line}", who_fields()));
                    return Err(Refused::Thawed);
                }
                Err(None) => return Err(Refused::Violation(violation)),
                Err(Some(why)) => return Err(Refused::Violation(format!("{violation}: {why}"))),
            }
        }
        let first = i == 0;
        if first {
            newer_ran(dir, &holder, &node, &job, &rank)?;
            frozen::name_holder(&holder);
        }
        held.push(f);
        if first {
            held.push(attempt_lock(dir, &job, &node)?);
        }
    }
    Ok(held)
}

/// Refuses a start whose job's lock a newer attempt held before (it let it go when it
/// ended): attempts are placed one after another, so an older one that starts now started
/// late. Within `THAW_BOUND_MS` of its node's thaw that is the thaw's moment (`Thawed`, as
/// when the newer one still holds the lock: `frozen::thawed_late`); otherwise a stale
/// start. Chaos seed 20002: such an older attempt found the lock free (the newer one had
/// finished) and was reported as starting from zero beside the newer one's checkpoint.
fn newer_ran(dir: &Path, holder: &Path, node: &str, job: &str, rank: &str) -> Result<(), Refused> {
    let Some(theirs) = frozen::newer_holder(holder) else { return Ok(()) };
    if let Some(line) = frozen::thawed_late(dir, holder, node) {
        append(&dir.join("thawed-starts"), &format!("{} {line}", who_fields()));
        return Err(Refused::Thawed);
    }
    let mine = env("BATON_ATTEMPT");
    Err(Refused::Violation(format!("attempt {mine} of {job} rank {rank} started after attempt {theirs} had run")))
}

/// How the lock of a job's attempt is named: `attempts-<job>@<attempt>.lock` (`@` is in
/// no job's name, so one job's prefix is no other's).
const ATTEMPT_LOCK_PREFIX: &str = "attempts-";

/// How many of the locks `witness_locks` returns first are the job's (its rank's, its
/// attempt's): a process forked to hold a GPU alone lets go of them.
const JOB_LOCKS: usize = 2;

/// The lock of the job, not only of its rank (issue 31): every rank of an attempt holds
/// its attempt's file shared, so the ranks of one attempt run together, and a live holder
/// of another attempt's file is two attempts of the job at once, whatever ranks and nodes
/// they run on (a rank's own lock sees its rank only). Each start takes its own first and
/// then looks at the others, so of two attempts starting together the later look sees the
/// other. A holder frozen with its node is waited for, and an older attempt run again by its
/// node's thaw is the thaw's moment, as for a rank's lock (`frozen`).
fn attempt_lock(dir: &Path, job: &str, node: &str) -> Result<File, Refused> {
    let mine: u32 = env("BATON_ATTEMPT").parse().unwrap_or(0);
    let path = dir.join(format!("{ATTEMPT_LOCK_PREFIX}{job}@{mine}.lock"));
    let f = File::create(&path).map_err(|e| Refused::Violation(format!("cannot open {}: {e}", path.display())))?;
    shared(&f);
    // SAFETY: flock on a descriptor this function owns. Shared: only another attempt's look
    // would take it whole, and none does.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Refused::Violation(format!("cannot lock {}: {e}", path.display())));
    }
    for (theirs, id) in other_attempts(dir, job, mine) {
        match frozen::wait_for_holders(dir, id) {
            Ok(None) => {}
            Ok(Some(w)) => append(&dir.join("waits"), &format!("{} {} {}", who_fields(), w.frozen_ms, w.after_thaw_ms)),
            Err(None)
                if theirs > mine
                    && let Some(after_ms) = frozen::thawed_within_bound(dir, node) =>
            {
                append(&dir.join("thawed-starts"), &format!("{} {theirs} {after_ms}", who_fields()));
                return Err(Refused::Thawed);
            }
            Err(why) => {
                let why = why.map_or(String::new(), |w| format!(": {w}"));
                return Err(Refused::Violation(format!("two attempts of {job} at once, {mine} and {theirs}{why}")));
            }
        }
    }
    Ok(f)
}

/// The lock files of `job`'s attempts other than `mine`, by attempt, with their identity in
/// `/proc/locks`.
fn other_attempts(dir: &Path, job: &str, mine: u32) -> Vec<(u32, crate::procfs::FileId)> {
    use std::os::unix::fs::MetadataExt;
    let prefix = format!("{ATTEMPT_LOCK_PREFIX}{job}@");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(attempt) = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".lock")) else { continue };
        let (Ok(attempt), Ok(meta)) = (attempt.parse::<u32>(), entry.metadata()) else { continue };
        if attempt != mine {
            out.push((attempt, crate::procfs::file_id(meta.dev(), meta.ino())));
        }
    }
    out.sort_unstable();
    out
}

/// Takes an exclusive lock on `f` if nobody holds one.
fn try_lock(f: &File) -> bool {
    // SAFETY: flock on a descriptor the caller owns; no memory is shared.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// How long an older attempt thawed with its node may hold its job's lock: its guard's and
/// its agent's first look (the guard's sleep ran out while frozen) plus a kill, on a loaded
/// machine.
pub const THAW_BOUND_MS: u64 = 2_000;

/// An older attempt frozen with its whole node (a paused virtual machine, a host stalled
/// and thawed) holds its job's lock, but runs nothing: the next attempt, rightly placed
/// elsewhere once the node was declared lost, waits for it to die instead of reporting two
/// attempts at once. Frozen with its node means an ancestor of its cgroup has
/// `cgroup.freeze` 1 (its own 1 is a suspension, which is no excuse). Once the holder runs
/// again it must be gone within `THAW_BOUND_MS`: every process of the node thaws at the
/// same instant, and its guard and agent kill it at their first look.
mod frozen {
    use std::fs::File;
    use std::path::Path;
    use std::time::{Duration, Instant};

    pub use super::THAW_BOUND_MS;
    /// How long a start waits for a frozen older attempt at most.
    const MAX_WAIT_MS: u64 = 120_000;
    const POLL_MS: u64 = 20;

    /// How long a start waited: while the holder was frozen, and after it thawed.
    pub struct Waited {
        pub frozen_ms: u64,
        pub after_thaw_ms: u64,
    }

    /// Waits until `f`'s lock is free while its holder is frozen with its node: the one
    /// `holder` names, or every process `/proc/locks` names (a holder frozen after it took
    /// the lock and before it named itself left `holder` empty, and the next attempt
    /// reported two at once: chaos seed 21504); `Err(None)`: the holder runs (two attempts
    /// at once), `Err(Some(why))`: it was frozen but outlived its thaw or the wait's bound.
    ///
    /// A holder that runs at the first look, but in the tree of a node that thawed within
    /// `THAW_BOUND_MS`, is in its thaw's moment and is waited for as well, until the bound
    /// (chaos seed 22003: this start's first look came 50 ms after the older attempt's node
    /// thawed, while its guard was still on its way to kill it).
    pub fn wait_for_lock(f: &File, holder: &Path) -> Result<Waited, Option<String>> {
        use std::os::unix::fs::MetadataExt;
        let id = f.metadata().ok().map(|m| crate::procfs::file_id(m.dev(), m.ino()));
        let named = || {
            let text = std::fs::read_to_string(holder).unwrap_or_default();
            text.split_whitespace().next().map(std::path::PathBuf::from)
        };
        let holder_frozen = || {
            let named = named().is_some_and(|dir| node_frozen(&dir));
            named || id.is_some_and(|id| holders_frozen(&lock_holders(id)))
        };
        let thawed_ago = if holder_frozen() {
            None
        } else {
            let mut dirs: Vec<_> = id.map(|id| cgroups_of(&lock_holders(id))).unwrap_or_default();
            dirs.extend(named());
            let witness = holder.parent().unwrap_or(Path::new("."));
            Some(thawed_ago(witness, &dirs).ok_or(None)?)
        };
        let look = || match super::try_lock(f) {
            true => Look::Free,
            false => Look::Held { frozen: holder_frozen() },
        };
        wait_while_frozen(look, "older", thawed_ago).map_err(Some)
    }

    /// What a waiting start sees of the lock it waits for.
    enum Look {
        Free,
        Held { frozen: bool },
    }

    /// Polls `look` until the lock is free while its holders stay frozen with their node;
    /// `Err` once they ran on past `THAW_BOUND_MS` after the thaw, or stayed frozen past the
    /// wait's bound (`which`: how the message names them). `thawed_ago`: their node thawed
    /// that long before the first look.
    fn wait_while_frozen(
        mut look: impl FnMut() -> Look,
        which: &str,
        thawed_ago: Option<Duration>,
    ) -> Result<Waited, String> {
        let start = Instant::now();
        let mut thawed: Option<Instant> = thawed_ago.map(|ago| start.checked_sub(ago).unwrap_or(start));
        loop {
            let frozen = match look() {
                Look::Free => {
                    let after_thaw_ms = thawed.map_or(0, |t| t.elapsed().as_millis() as u64);
                    let frozen_ms = (start.elapsed().as_millis() as u64).saturating_sub(after_thaw_ms);
                    return Ok(Waited { frozen_ms, after_thaw_ms });
                }
                Look::Held { frozen } => frozen,
            };
            match (frozen, thawed) {
                (true, _) => thawed = None,
                (false, None) => thawed = Some(Instant::now()),
                (false, Some(t)) if t.elapsed() > Duration::from_millis(THAW_BOUND_MS) => {
                    let ms = t.elapsed().as_millis();
                    return Err(format!("the {which} one ran on {ms} ms after its node thawed"));
                }
                (false, Some(_)) => {}
            }
            if start.elapsed() > Duration::from_millis(MAX_WAIT_MS) {
                return Err(format!("the {which} one stayed frozen with its node for {MAX_WAIT_MS} ms"));
            }
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
    }

    /// Writes this process's cgroup directory and attempt to `holder` (`DIR ATTEMPT`), for
    /// the next attempt to look up.
    pub fn name_holder(holder: &Path) {
        let Some(dir) = crate::cgroup::own_v2_dir() else { return };
        match File::create(holder).inspect(super::shared) {
            Ok(mut f) => {
                let line = format!("{} {}\n", dir.display(), super::env("BATON_ATTEMPT"));
                let _ = std::io::Write::write_all(&mut f, line.as_bytes());
            }
            Err(e) => eprintln!("workload: cannot name the lock's holder in {}: {e}", holder.display()),
        }
    }

    /// Whether this start is an older attempt that ran again as its node thawed: the job's
    /// lock is held by a newer attempt (named in `holder`), and node `node` thawed at most
    /// `THAW_BOUND_MS` ago (the harness writes `DIR/thawed-<node>`, the wall clock's ms, just
    /// before it thaws a node). Such a start was on its way when the node froze (its wrapper's
    /// last look at the lease, then its command's first instructions) and runs only until its
    /// guard's first look; what it must not do, save a checkpoint, the checker sees. Returns
    /// `HOLDER-ATTEMPT MS-AFTER-THAW` for the record.
    pub fn thawed_late(dir: &Path, holder: &Path, node: &str) -> Option<String> {
        let theirs = newer_holder(holder)?;
        let after_ms = thawed_within_bound(dir, node)?;
        Some(format!("{theirs} {after_ms}"))
    }

    /// How long ago node `node` thawed, if no more than `THAW_BOUND_MS` (the harness writes
    /// `DIR/thawed-<node>`, the wall clock's ms, just before it thaws a node).
    pub fn thawed_within_bound(dir: &Path, node: &str) -> Option<u128> {
        let text = std::fs::read_to_string(dir.join(format!("thawed-{node}"))).ok()?;
        ago_within_bound(&text)
    }

    /// How long ago the thaw a `thawed-<node>` file's first line stamps was, if no more
    /// than `THAW_BOUND_MS`.
    fn ago_within_bound(text: &str) -> Option<u128> {
        let thawed_ms: u128 = text.lines().next()?.trim().parse().ok()?;
        let after_ms = super::wall_ms().checked_sub(thawed_ms)?;
        (after_ms <= u128::from(THAW_BOUND_MS)).then_some(after_ms)
    }

    /// Whether this process was frozen with its node, which thawed no more than
    /// `THAW_BOUND_MS` ago: it was born before the thaw, by more than the kernel's count
    /// can blur (a process started after it runs as any other).
    pub fn lived_through_a_thaw(dir: &Path, node: &str) -> bool {
        const BIRTH_BLUR_MS: u128 = 100;
        let Some(after_ms) = thawed_within_bound(dir, node) else { return false };
        let thawed_ms = super::wall_ms().saturating_sub(after_ms);
        crate::procfs::born_wall_ms(std::process::id()).is_some_and(|born| u128::from(born) + BIRTH_BLUR_MS < thawed_ms)
    }

    /// Waits while every process holding a lock on file `id` is frozen with its node (as
    /// `wait_for_lock`, for a lock this start shares rather than takes): `Ok(None)` when
    /// none held it, `Ok(Some)` once they let go after a wait, `Err(None)` when a holder runs
    /// (or is gone from /proc while its lock lives on in a child: it cannot be told frozen),
    /// `Err(Some(why))` when frozen ones outlived their thaw or the wait's bound.
    /// Holders running in the tree of a node thawed within `THAW_BOUND_MS` (the witness
    /// directory `dir` says) are waited for until the bound, as by `wait_for_lock` (chaos
    /// seed 22002).
    pub fn wait_for_holders(dir: &Path, id: crate::procfs::FileId) -> Result<Option<Waited>, Option<String>> {
        let first = lock_holders(id);
        if first.is_empty() {
            return Ok(None);
        }
        let thawed_ago = match holders_frozen(&first) {
            true => None,
            false => Some(thawed_ago(dir, &cgroups_of(&first)).ok_or(None)?),
        };
        let look = || match lock_holders(id) {
            now if now.is_empty() => Look::Free,
            now => Look::Held { frozen: holders_frozen(&now) },
        };
        wait_while_frozen(look, "other", thawed_ago).map(Some).map_err(Some)
    }

    /// The cgroup v2 directories of `pids` (those /proc still shows).
    fn cgroups_of(pids: &[u32]) -> Vec<std::path::PathBuf> {
        pids.iter().filter_map(|pid| crate::cgroup::v2_dir_of(*pid)).collect()
    }

    /// How long ago the earliest thaw of the nodes whose trees hold every one of `cgroups`
    /// was, if each thawed within `THAW_BOUND_MS`: the harness writes a thawed node's time
    /// and its replicas' cgroup tree to `DIR/thawed-<node>`, one a line.
    fn thawed_ago(dir: &Path, cgroups: &[std::path::PathBuf]) -> Option<Duration> {
        let thaws = recent_thaws(dir);
        let ago = |cg: &std::path::PathBuf| thaws.iter().find(|(tree, _)| cg.starts_with(tree)).map(|(_, ago)| *ago);
        let agos: Option<Vec<u128>> = cgroups.iter().map(ago).collect();
        let earliest = agos?.into_iter().max()?;
        Some(Duration::from_millis(u64::try_from(earliest).unwrap_or(u64::MAX)))
    }

    /// Each node thawed within `THAW_BOUND_MS` whose `thawed-<node>` names its tree: the
    /// tree, and how long ago.
    fn recent_thaws(dir: &Path) -> Vec<(std::path::PathBuf, u128)> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(node) = name.strip_prefix("thawed-") else { continue };
            // The records of thawed starts and saves share the prefix; they are no node's.
            if matches!(node, "starts" | "saves") {
                continue;
            }
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let (Some(tree), Some(ago)) = (text.lines().nth(1), ago_within_bound(&text)) else { continue };
            out.push((std::path::PathBuf::from(tree.trim()), ago));
        }
        out
    }

    /// The processes `/proc/locks` names as holding a lock on file `id`.
    fn lock_holders(id: crate::procfs::FileId) -> Vec<u32> {
        let text = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        crate::procfs::lock_holders(&text).into_iter().filter(|(f, _)| *f == id).map(|(_, pid)| pid).collect()
    }

    /// Whether there are holders and every one is frozen with its node.
    fn holders_frozen(pids: &[u32]) -> bool {
        !pids.is_empty() && pids.iter().all(|pid| crate::cgroup::v2_dir_of(*pid).is_some_and(|d| node_frozen(&d)))
    }

    /// The attempt `holder` names (the last to take the job's lock), when newer than this
    /// process's.
    pub fn newer_holder(holder: &Path) -> Option<u32> {
        let text = std::fs::read_to_string(holder).ok()?;
        let theirs: u32 = text.split_whitespace().nth(1)?.parse().ok()?;
        let mine: u32 = super::env("BATON_ATTEMPT").parse().ok()?;
        (theirs > mine).then_some(theirs)
    }

    /// Whether an ancestor of cgroup `dir` (not `dir` itself) is frozen.
    pub fn node_frozen(dir: &Path) -> bool {
        dir.ancestors()
            .skip(1)
            .take_while(|a| a.join("cgroup.freeze").exists())
            .any(|a| std::fs::read_to_string(a.join("cgroup.freeze")).is_ok_and(|v| v.trim() == "1"))
    }
}

/// Leaves a process behind that is no longer in this one's session or process group, and
/// holds every descriptor this one holds (the witness locks among them).
fn escape() {
    // SAFETY: the workload has no other thread, so fork is safe; the children call only
    // async-signal-safe functions (setsid, fork, sleep, _exit) before they end.
    unsafe {
        match libc::fork() {
            0 => {
                libc::setsid();
                if libc::fork() == 0 {
                    let mut left = ESCAPED_LIFE_S as libc::c_uint;
                    while left > 0 {
                        left = libc::sleep(left);
                    }
                }
                libc::_exit(0);
            }
            child if child > 0 => {
                let mut status = 0;
                libc::waitpid(child, &mut status, 0);
            }
            _ => eprintln!("workload: fork failed: {}", std::io::Error::last_os_error()),
        }
    }
}

/// `Misbehave::KillWatchdog`: SIGKILL to every other child of this process's parent and to
/// the guard of this replica (`$0` `baton-guard`, its exit file this replica's); returns how
/// many guards it killed. Only its own guard: other replicas' guards (of other tests on the
/// machine, too) are not its to reach for.
fn kill_what_watches_it() -> usize {
    let (me, parent) = (std::process::id(), std::os::unix::process::parent_id());
    let ours = own_exit_file_suffix();
    let mut guards = 0;
    for pid in crate::procfs::pids() {
        let sibling = pid != me && crate::procfs::parent_of(pid) == Some(parent);
        let guard = crate::procfs::argv(pid).is_some_and(|a| {
            a.get(3).is_some_and(|n| n == crate::launch::GUARD_NAME.as_bytes())
                && a.get(6).is_some_and(|exit| exit.ends_with(ours.as_bytes()))
        });
        if !(sibling || guard) {
            continue;
        }
        // SAFETY: kill(2) with a pid read from /proc; a pid reused meanwhile is the risk any
        // hostile job takes, and this one runs only in tests and chaos runs.
        let killed = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == 0;
        let what = if guard { "its guard" } else { "a sibling" };
        eprintln!("workload: SIGKILL to {pid} ({what}): {}", if killed { "sent" } else { "refused" });
        guards += usize::from(guard && killed);
    }
    guards
}

/// The end of this replica's exit file path (`/run/<job id>-<attempt>-<rank>/exit`), which
/// its guard's command line names.
fn own_exit_file_suffix() -> String {
    let num = |k: &str| env(k).parse::<u64>().unwrap_or(u64::MAX);
    let (id, attempt, rank) = (num("BATON_JOB_ID"), num("BATON_ATTEMPT"), num("BATON_RANK"));
    let path = crate::launch::exit_file(Path::new("/"), id, attempt as u32, rank as u32);
    path.display().to_string()
}

/// Where the cgroup v1 freezer is mounted, and the names of the cgroups an `unkillable`
/// workload freezes a process in (`<prefix><tag>-<node>-<job>-<attempt>-<rank>`, the tag
/// from the job's environment, `TAG_ENV`): the chaos harness thaws them by node, as an
/// operator fixes a hung node, and those of a harness that died (its pid is the tag).
pub mod unkillable_cgroups {
    pub const FREEZER_ROOT: &str = "/sys/fs/cgroup/freezer";
    pub const PREFIX: &str = "baton-unkillable-";
    /// Not `BATON_...`: that prefix is the agent's, refused in a job's environment.
    pub const TAG_ENV: &str = "UNKILLABLE_TAG";

    /// Whether this host has a cgroup v1 freezer this process may make cgroups in.
    pub fn available() -> bool {
        let root = std::path::Path::new(FREEZER_ROOT);
        root.join("cgroup.procs").exists() && !root.join("cgroup.controllers").exists() && writable(root)
    }

    fn writable(dir: &std::path::Path) -> bool {
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
        // SAFETY: access(2) reads the path only.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    }
}

/// `Misbehave::Unkillable`: forks a child that keeps the GPU locks of `held` (the witness
/// locks, the job's first) and sleeps, and freezes it in a cgroup v1 freezer of its own.
/// The child is killed again if it cannot be frozen.
fn freeze_a_child(held: &[File]) -> Result<(), String> {
    let tag = std::env::var(unkillable_cgroups::TAG_ENV).unwrap_or_else(|_| "0".into());
    let name = format!(
        "{}{tag}-{}-{}-{}-{}",
        unkillable_cgroups::PREFIX,
        env("BATON_NODE"),
        env("BATON_JOB"),
        env("BATON_ATTEMPT"),
        env("BATON_RANK")
    );
    let dir = Path::new(unkillable_cgroups::FREEZER_ROOT).join(name);
    let child = fork_without_the_jobs_lock(held)?;
    let frozen = (|| {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("cgroup.procs"), child.to_string())?;
        std::fs::write(dir.join("freezer.state"), "FROZEN")
    })();
    frozen.map_err(|e| {
        // SAFETY: kills the child this function forked.
        unsafe { libc::kill(child, libc::SIGKILL) };
        format!("cannot freeze a child in {}: {e}", dir.display())
    })
}

/// Forks a child that lets go of the job's locks (the first `JOB_LOCKS` of `held`), keeps the others,
/// and sleeps `ESCAPED_LIFE_S`; returns once it has let go. The child says so on a pipe:
/// frozen before that, it held the lock, and the job's next attempt found "two attempts at
/// once" (a chaos run of 1,500 s, twice).
fn fork_without_the_jobs_lock(held: &[File]) -> Result<libc::pid_t, String> {
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe(2) fills the two descriptors of this array.
    if unsafe { libc::pipe(pipe.as_mut_ptr()) } != 0 {
        return Err(format!("pipe failed: {}", std::io::Error::last_os_error()));
    }
    let [ready_r, ready_w] = pipe;
    // SAFETY: the workload has no other thread, so fork is safe; the child calls only
    // async-signal-safe functions (close, write, sleep, _exit).
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: closes this child's copies of descriptors it owns, says so in one byte,
        // sleeps, and ends without running the parent's exit handlers.
        unsafe {
            for job_lock in held.iter().take(JOB_LOCKS) {
                libc::close(job_lock.as_raw_fd());
            }
            libc::write(ready_w, [1u8].as_ptr().cast(), 1);
            libc::close(ready_w);
            libc::close(ready_r);
            let mut left = ESCAPED_LIFE_S as libc::c_uint;
            while left > 0 {
                left = libc::sleep(left);
            }
            libc::_exit(0);
        }
    }
    let mut byte = 0u8;
    // SAFETY: closes the parent's write end, reads one byte (none: the child died or was
    // never forked) from the read end it owns, closes that.
    let told = unsafe {
        libc::close(ready_w);
        let n = if child > 0 { libc::read(ready_r, (&mut byte as *mut u8).cast(), 1) } else { -1 };
        libc::close(ready_r);
        n == 1
    };
    if child < 0 {
        return Err(format!("fork failed: {}", std::io::Error::last_os_error()));
    }
    if !told {
        return Err("the child to freeze did not say it let go of the job's lock".into());
    }
    Ok(child)
}

/// Runs the workload; returns the process exit code.
pub fn run(steps: u64, other_ranks_steps: Option<u64>, step_ms: u64, witness: Option<&Path>) -> i32 {
    run_misbehaving(steps, other_ranks_steps, step_ms, witness, None)
}

/// As [`run`], misbehaving as `misbehave` says.
pub fn run_misbehaving(
    steps: u64,
    other_ranks_steps: Option<u64>,
    step_ms: u64,
    witness: Option<&Path>,
    misbehave: Option<Misbehave>,
) -> i32 {
    let steps = steps_of_rank(steps, other_ranks_steps, &env("BATON_RANK"));
    let who = format!("{} attempt {} rank {}", env("BATON_JOB"), env("BATON_ATTEMPT"), env("BATON_RANK"));
    let held = match witness.map(witness_locks).transpose() {
        Ok(held) => held,
        Err(Refused::Thawed) => return EXIT_VIOLATION,
        Err(Refused::Violation(violation)) => {
            append(&witness.expect("a witness dir").join("violations"), &format!("{violation} ({who})"));
            return EXIT_VIOLATION;
        }
    };
    let handler = match misbehave {
        Some(Misbehave::IgnoreStop) => libc::SIG_IGN,
        _ => on_signal as *const () as libc::sighandler_t,
    };
    for sig in [libc::SIGTERM, libc::SIGUSR1] {
        // SAFETY: installs a handler that only stores to an atomic, or ignores the signal.
        unsafe {
            libc::signal(sig, handler);
        }
    }
    if misbehave == Some(Misbehave::Escape) {
        escape();
    }
    if misbehave == Some(Misbehave::Unkillable)
        && let Err(e) = freeze_a_child(held.as_deref().unwrap_or_default())
    {
        eprintln!("workload: {e}; running as a job that behaves");
    }
    if misbehave == Some(Misbehave::KillWatchdog) {
        let guards = kill_what_watches_it();
        if guards > 0
            && let Some(dir) = witness
        {
            append(&dir.join("violations"), &format!("a job killed {guards} replica guards ({who})"));
        }
    }
    let mut out = std::io::stdout();
    let mut step = 0;
    let resume = std::env::var_os("BATON_RESUME").is_some();
    let mut resume_failed = false;
    if resume {
        match load() {
            Ok(s) => {
                step = s;
                let _ = writeln!(out, "resumed from step {step}");
            }
            Err(e) => {
                resume_failed = true;
                eprintln!("workload: cannot resume ({e}); starting from step 0");
            }
        }
    }
    if let Some(dir) = witness {
        if resume_failed {
            append(&dir.join("violations"), &format!("told to resume, but its checkpoint is unreadable ({who})"));
        }
        if !resume && let Some(theirs) = gang_checkpoint_attempt() {
            match saved_as_its_node_thawed(dir, &theirs) {
                Some(before_ms) => append(&dir.join("redone"), &format!("{} {theirs} {before_ms}", who_fields())),
                None => {
                    let v = format!("started from zero although every rank wrote a checkpoint in one attempt ({who})");
                    append(&dir.join("violations"), &v);
                }
            }
        }
        // The wall clock, shared with the chaos harness on the same machine: it orders a
        // start against the harness's client operations (a start after a cancel) and the
        // checkpoints written before it (the newest is the one to resume from).
        let how = if resume { "resume" } else { "fresh" };
        // Last, when the agent launched the process: the record itself may be written much
        // later (a process suspended right after its launch runs its first line only once
        // continued).
        let launched = env("BATON_LAUNCHED_AT_MS");
        let launched = if launched.is_empty() { "-".to_string() } else { launched };
        // And when the kernel says this process began: on the machine's clock, whatever
        // the agent's.
        let born = crate::procfs::born_wall_ms(std::process::id()).map_or("-".to_string(), |ms| ms.to_string());
        // And the replicated state that asked for it: a checker replays the commit to it.
        let state_index = env("BATON_STATE_INDEX");
        let state_index = if state_index.is_empty() { "-".to_string() } else { state_index };
        let fields = format!("{} {step} {} {how} {launched} {born} {state_index}", who_fields(), wall_ms());
        append(&dir.join("starts"), &fields);
        // The GPUs it was given: no start may be placed on a GPU while it is unhealthy.
        let gpus = env("CUDA_VISIBLE_DEVICES");
        append(&dir.join("gpus"), &format!("{} {}", who_fields(), if gpus.is_empty() { "-" } else { &gpus }));
    }
    // A `WriteAfterStop` workload told to stop: it saves after every step from then on.
    let mut told_to_stop = false;
    while step < steps {
        let until = Instant::now() + Duration::from_millis(step_ms);
        loop {
            if SIGNALLED.load(Ordering::SeqCst) != 0 && misbehave == Some(Misbehave::WriteAfterStop) {
                // Told to stop: it saves, and then works on, saving after each step below.
                SIGNALLED.store(0, Ordering::SeqCst);
                told_to_stop = true;
                let _ = save(step, witness);
            }
            if SIGNALLED.load(Ordering::SeqCst) != 0 {
                return match save(step, witness) {
                    Ok(_) => {
                        let _ = writeln!(out, "checkpointed at step {step}");
                        let _ = out.flush();
                        record_end(witness, step, "stopped");
                        0
                    }
                    Err(e) => {
                        eprintln!("workload: checkpoint failed: {e}");
                        1
                    }
                };
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(SIGNAL_POLL_MS)));
        }
        step += 1;
        let _ = writeln!(out, "step {step}");
        let _ = out.flush();
        if told_to_stop {
            let _ = save(step, witness);
        }
    }
    // A rank that exits 0 counts as stopped with its work saved: its gang may be resumed
    // later (another rank was cut off), and this rank must then find its work.
    if std::env::var_os("BATON_CHECKPOINT_DIR").is_some()
        && let Err(e) = save(step, witness)
    {
        eprintln!("workload: cannot save the finished work: {e}");
        return 1;
    }
    record_end(witness, step, "finished");
    0
}
