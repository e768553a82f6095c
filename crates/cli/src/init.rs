//! `baton init`: a minimal PID 1 for the agent's container. Without it the agent is PID 1,
//! and when it exits (a crash, an upgrade, a restart) the kernel kills every process of the
//! container, every job replica included. With it the agent is restarted in place and finds
//! its replicas still running (they run in sessions of their own) to re-adopt them.
//!
//! It runs one command and keeps it running: after the command exits it waits
//! `restart_delay_ms` (doubling while the command keeps failing quickly, up to
//! `MAX_RESTART_DELAY_MS`) and starts it again. It reaps every orphan that ends up with it
//! (a PID 1 that does not fills the process table with zombies; outside a container it
//! makes itself a subreaper so the same holds). SIGTERM, SIGINT, SIGHUP and SIGQUIT are
//! passed on to the command, and then it exits as the command did, without a restart.
//!
//! Synchronous and single-threaded on purpose: signals are blocked and taken with
//! `sigtimedwait`, so no handler runs at an arbitrary point.

use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The longest wait between two restarts of a command that keeps failing.
pub const MAX_RESTART_DELAY_MS: u64 = 30_000;
/// A run at least this long counts as healthy: the next restart waits the base delay again.
pub const HEALTHY_RUN_MS: u64 = 60_000;
/// Signals passed on to the command; any of them ends `baton init` after the command.
const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// How long to wait before restarting the command after it exits; doubles while it
    /// keeps exiting within a minute of its start, up to 30 s.
    #[arg(long, default_value_t = 1_000)]
    pub restart_delay_ms: u64,
    /// The command to run and keep running, e.g. `baton agent ...`.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Why `baton init` could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("cannot start {command:?}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("{what} failed: {source}")]
    Sys { what: &'static str, source: std::io::Error },
}

pub fn run(args: InitArgs) -> ExitCode {
    match supervise(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: baton init: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command until a stop signal arrives; returns the exit code to end with.
fn supervise(args: &InitArgs) -> Result<u8, InitError> {
    let signals = SignalSet::blocked()?;
    become_subreaper()?;
    let mut delay_ms = args.restart_delay_ms;
    loop {
        let started = Instant::now();
        let pid = spawn(&args.command, &signals)?;
        let (code, stop) = wait_for(pid, &signals)?;
        if stop.is_some() {
            return Ok(code);
        }
        if started.elapsed() >= Duration::from_millis(HEALTHY_RUN_MS) {
            delay_ms = args.restart_delay_ms;
        }
        eprintln!("baton init: {:?} exited with {code}; starting it again in {delay_ms} ms", args.command[0]);
        if signals.sleep_reaping(Duration::from_millis(delay_ms))?.is_some() {
            return Ok(code);
        }
        delay_ms = (delay_ms.max(1) * 2).min(MAX_RESTART_DELAY_MS);
    }
}

fn spawn(command: &[String], signals: &SignalSet) -> Result<libc::pid_t, InitError> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    let set = signals.0;
    // The command must not inherit the blocked mask: a SIGTERM passed on would stay pending.
    // SAFETY: pthread_sigmask is async-signal-safe and touches only the copied set.
    unsafe {
        cmd.pre_exec(move || match libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) {
            0 => Ok(()),
            rc => Err(std::io::Error::from_raw_os_error(rc)),
        });
    }
    let child = cmd.spawn().map_err(|source| InitError::Spawn { command: command.join(" "), source })?;
    // The child is reaped with waitpid below, not through `Child`, which would race the
    // reaping of orphans; dropping `Child` neither waits for nor kills it.
    Ok(child.id() as libc::pid_t)
}

/// Waits until `pid` exits, reaping orphans meanwhile and passing stop signals on to it.
/// Returns its exit code and the stop signal received, if any.
fn wait_for(pid: libc::pid_t, signals: &SignalSet) -> Result<(u8, Option<libc::c_int>), InitError> {
    let mut stop = None;
    loop {
        match signals.wait(None)? {
            Some(libc::SIGCHLD) => {
                if let Some(code) = reap_all(pid) {
                    return Ok((code, stop));
                }
            }
            Some(sig) => {
                stop = Some(sig);
                // SAFETY: kill has no memory effects; a pid that already exited is reaped
                // above only after this, so it cannot have been reused yet.
                unsafe { libc::kill(pid, sig) };
            }
            None => {}
        }
    }
}

/// Reaps every child that has exited; the exit code of `pid` if it was one of them.
fn reap_all(pid: libc::pid_t) -> Option<u8> {
    let mut ours = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if reaped <= 0 {
            return ours;
        }
        if reaped == pid {
            ours = Some(exit_code(status));
        }
    }
}

/// The shell's convention: the exit status, or 128 plus the signal that ended it.
fn exit_code(status: libc::c_int) -> u8 {
    if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) as u8 } else { (128 + libc::WTERMSIG(status)) as u8 }
}

/// Orphans are re-parented to this process even when it is not PID 1 (outside a container,
/// or under another init), so it reaps them the same way everywhere.
fn become_subreaper() -> Result<(), InitError> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(InitError::Sys { what: "prctl(PR_SET_CHILD_SUBREAPER)", source: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// SIGCHLD and the stop signals, blocked in this (single) thread and taken synchronously;
/// `spawn` unblocks them in the command.
struct SignalSet(libc::sigset_t);

impl SignalSet {
    fn blocked() -> Result<Self, InitError> {
        // SAFETY: the set is initialised by sigemptyset before any other use; the mask is
        // changed for this thread only, and `baton init` runs no other thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in STOP_SIGNALS.into_iter().chain([libc::SIGCHLD]) {
                libc::sigaddset(&mut set, sig);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(InitError::Sys { what: "pthread_sigmask", source: std::io::Error::from_raw_os_error(rc) });
            }
            Ok(SignalSet(set))
        }
    }

    /// The next signal of the set, or `None` when `timeout` passed (or a wait was
    /// interrupted by a signal outside the set).
    fn wait(&self, timeout: Option<Duration>) -> Result<Option<libc::c_int>, InitError> {
        // A day stands for "no timeout": the loops around this call wait again.
        let t = timeout.unwrap_or(Duration::from_secs(86_400));
        let ts = libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long };
        // SAFETY: the set was initialised in `blocked`; info may be null.
        let sig = unsafe { libc::sigtimedwait(&self.0, std::ptr::null_mut(), &ts) };
        if sig >= 0 {
            return Ok(Some(sig));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(InitError::Sys { what: "sigtimedwait", source: e }),
        }
    }

    /// Sleeps for `d`, reaping orphans; returns early with a stop signal if one arrives.
    fn sleep_reaping(&self, d: Duration) -> Result<Option<libc::c_int>, InitError> {
        let end = Instant::now() + d;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match self.wait(Some(left))? {
                Some(libc::SIGCHLD) => {
                    reap_all(0);
                }
                Some(sig) => return Ok(Some(sig)),
                None => {}
            }
        }
    }
}
