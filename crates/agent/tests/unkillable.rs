//! A process that SIGKILL cannot end, made for real: the kernel's cgroup v1 freezer holds it
//! stopped, as a hung driver or file system holds a process in uninterruptible sleep, and a
//! SIGKILL stays pending on it until it is thawed. (`cgroups.rs` fakes the same with files.)
//!
//! Needs root, a writable cgroup v2 hierarchy (the replicas' cgroups) and the cgroup v1
//! freezer (a host with hybrid cgroups), so it is ignored by a plain `cargo test`;
//! `./test.sh` runs it where they are and names it skipped where they are not.

mod common;

use std::path::PathBuf;

use baton_agent::workload::unkillable_cgroups::FREEZER_ROOT;
use baton_proto::v1::Action;
use common::*;

/// A freezer cgroup of this test's own, thawed, emptied and removed at the end.
struct Frozen(PathBuf);

impl Frozen {
    fn new() -> Frozen {
        let dir = PathBuf::from(FREEZER_ROOT).join(format!("baton-test-unkillable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a cgroup v1 freezer (root, a host with hybrid cgroups)");
        Frozen(dir)
    }

    fn state(&self) -> String {
        std::fs::read_to_string(self.0.join("freezer.state")).unwrap_or_default().trim().to_string()
    }

    fn thaw(&self) {
        std::fs::write(self.0.join("freezer.state"), "THAWED").expect("thawed");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill(2) of a pid this test's cgroup holds.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.thaw();
        for _ in 0..250 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Issue 31: a replica counted as ended when its wrapper ended, so a process of it in
/// uninterruptible sleep kept its GPUs while the next job started there. With a real
/// process that survives SIGKILL: the agent reports it `Unkillable` (the node takes no new
/// work), tells the replica's end only after that, and keeps its GPUs held until the
/// process is gone; thawed (the operator's fix), it dies of the SIGKILL the agent sent,
/// and the GPUs are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, a writable cgroup v2 hierarchy and the cgroup v1 freezer: ./test.sh runs it as root"]
async fn a_process_frozen_past_sigkill_holds_its_gpus_until_thawed_and_is_reported_unkillable() {
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("unkillable");
    let frozen = Frozen::new();
    let gw = Gateway::start(None).await;
    let mut c = cgroup_config(dir.path(), &gw, &root.0);
    c.unkillable_after_ms = 1_500;
    let agent = start_agent(c).await;
    let (child, next_ran) = (dir.path().join("child"), dir.path().join("next"));
    let _reaper = Reaper(vec![next_ran.clone()]);
    // The replica freezes a child of its own and exits: the child stays in its cgroup.
    let cmd = format!(
        "sleep 600 & echo $! > {child}; echo $! > {f}/cgroup.procs; echo FROZEN > {f}/freezer.state; exit 3",
        child = child.display(),
        f = frozen.0.display()
    );
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let pid = wait_for(5, "the frozen child's pid", || read_pid(&child)).await;
    wait_for(5, "the child frozen", || (frozen.state() == "FROZEN").then_some(())).await;

    // Another job on the same GPUs waits for them.
    reported_unkillable_with_its_gpus_held(&gw, &cmd, &next_ran).await;
    assert!(alive(pid), "the frozen child died: it was not frozen");

    // The operator's fix: thawed, the child dies of the SIGKILL pending on it.
    frozen.thaw();
    wait_for(5, "the thawed child dead of its pending SIGKILL", || (!alive(pid)).then_some(())).await;
    wait_for(10, "the next job started", || read_pid(&next_ran)).await;
    agent.shutdown().await.unwrap();
}
