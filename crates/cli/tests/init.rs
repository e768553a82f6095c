//! `baton init`, the container's PID 1: it restarts the agent when the agent exits, so a
//! restarted agent finds its replicas still running (they are in their own sessions), reaps
//! orphans, and passes SIGTERM on to the agent and then exits with it.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// `baton init` running `sh -c script`; killed when dropped, so a failed test leaves no
/// process behind.
struct Init(Child);

impl Drop for Init {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn init(dir: &Path, script: &str) -> Init {
    Init(
        Command::new(BATON)
            .args(["init", "--restart-delay-ms", "100", "--", "sh", "-c", script])
            .current_dir(dir)
            .spawn()
            .expect("baton runs"),
    )
}

fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); /proc tells a zombie from a running process.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z')
}

fn terminate(init: &mut Init) -> std::process::ExitStatus {
    let child = &mut init.0;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "init did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_agent_that_exits_is_restarted_and_the_job_it_started_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    // Each run records itself; the first starts a "job" in its own session, as the agent
    // does, and then the "agent" crashes.
    let script = "echo run >> runs; \
                  if [ ! -f job ]; then setsid sh -c 'echo $$ > job; exec sleep 30' & sleep 0.2; exit 3; fi; \
                  exec sleep 30";
    let mut child = init(dir.path(), script);
    wait_until("a second run of the agent", || (lines(&dir.path().join("runs")) >= 2).then_some(()));
    let job: i32 = std::fs::read_to_string(dir.path().join("job")).unwrap().trim().parse().unwrap();
    assert!(alive(job), "the job outlives the agent that started it");
    terminate(&mut child);
    unsafe { libc::kill(job, libc::SIGKILL) };
}

#[test]
fn sigterm_is_passed_on_and_init_exits_with_the_agent_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let script = "trap 'echo got-term >> term; exit 0' TERM; echo run >> runs; while :; do sleep 0.05; done";
    let mut child = init(dir.path(), script);
    wait_until("the agent's first run", || (lines(&dir.path().join("runs")) == 1).then_some(()));
    let status = terminate(&mut child);
    assert!(status.success(), "init exits as its agent did: {status:?}");
    assert_eq!(lines(&dir.path().join("term")), 1, "the agent got the SIGTERM");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(lines(&dir.path().join("runs")), 1, "no restart after SIGTERM");
}

#[test]
fn orphans_are_reaped() {
    let dir = tempfile::tempdir().unwrap();
    // The "agent" leaves a child that exits at once and is orphaned to init; a zombie left
    // behind would fill the process table of a long-lived container.
    let script = "(sh -c 'echo $$ > orphan; sleep 0.1; exit 0' &); exec sleep 30";
    let mut child = init(dir.path(), script);
    let orphan: i32 =
        wait_until("the orphan's pid", || std::fs::read_to_string(dir.path().join("orphan")).ok()?.trim().parse().ok());
    wait_until("the orphan reaped", || (!Path::new(&format!("/proc/{orphan}")).exists()).then_some(()));
    terminate(&mut child);
}
