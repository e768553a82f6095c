//! Replicas held by the kernel (`--containment cgroup`): each replica runs in a cgroup of its
//! own from its first instruction, and a process that leaves the replica's process group
//! (`setsid`) is killed with the replica all the same.
//!
//! Needs root and a writable cgroup v2 hierarchy, so the tests that make cgroups are ignored by
//! a plain `cargo test`; `./test.sh` runs them as root. The refusal without one runs anywhere.

mod common;

use std::path::{Path, PathBuf};

use baton_agent::procfs;
use baton_proto::v1::Action;
use baton_proto::v1::observation::What;
use common::*;

fn cgroup_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
async fn a_process_that_left_its_group_is_killed_with_its_replica() {
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("escape");
    let gw = Gateway::start(None).await;
    let c = cgroup_config(dir.path(), &gw, &root.0);
    let _agent = start_agent(c).await;
    let (escaped, main) = (dir.path().join("escaped"), dir.path().join("main"));
    let _reaper = Reaper(vec![escaped.clone(), main.clone()]);
    // The child leaves the replica's session and process group, as a daemonizing tool does.
    let cmd = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 600' & echo $$ > {}; exec sleep 600",
        escaped.display(),
        main.display()
    );
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let escaped_pid = wait_for(5, "the escaped child's pid", || read_pid(&escaped)).await;
    let main_pid = wait_for(5, "the replica's pid", || read_pid(&main)).await;
    let replica_cgroup = "/1-1-0";
    assert!(cgroup_of(main_pid).contains(replica_cgroup), "{}", cgroup_of(main_pid));
    assert!(cgroup_of(escaped_pid).contains(replica_cgroup), "setsid left the cgroup: {}", cgroup_of(escaped_pid));
    assert_ne!(proc_pgid(escaped_pid), proc_pgid(main_pid), "the child did not leave the group");

    // Cancelled: absent from the next directive.
    gw.set(1, vec![]);
    wait_for(10, "the escaped child killed with its replica", || (!alive(escaped_pid)).then_some(())).await;
    assert!(!alive(main_pid));
    wait_for(10, "the replica's cgroup removed", || (!root.0.join("1-1-0").exists()).then_some(())).await;
}

/// Issue 31: a journal deleted while its replicas live (the obvious remedy for a damaged
/// one) made the agent start a second copy of a running replica, in the first one's cgroup.
/// Now the agent finds live replicas it does not know by their cgroups, kills them, starts
/// nothing until they are gone, and answers a RUN of one with its end (`KilledHere`, so
/// the leader places the job again from its checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
async fn a_journal_lost_beside_a_live_replica_starts_no_second_copy() {
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("orphan");
    let gw = Gateway::start(None).await;
    let agent_config = || cgroup_config(dir.path(), &gw, &root.0);
    let (starts, pid) = (dir.path().join("starts"), dir.path().join("pid"));
    let _reaper = Reaper(vec![pid.clone()]);
    let cmd = format!("echo $$ >> {}; echo $$ > {}; exec sleep 600", starts.display(), pid.display());
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let agent = start_agent(agent_config()).await;
    let first = wait_for(5, "the replica's pid", || read_pid(&pid)).await;
    agent.shutdown().await.unwrap();
    assert!(alive(first), "replicas outlive their agent");

    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
    let _agent = start_agent(agent_config()).await;
    wait_for(10, "the unknown live replica killed", || (!alive(first)).then_some(())).await;
    wait_for(10, "its RUN answered with its end", || {
        stop_causes_of(&gw.observations(), 1).contains(&baton_proto::v1::StopCause::KilledHere).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(started.lines().count(), 1, "a second copy started: {started}");
}

/// Where the kernel keeps `pid`'s limit `file` (`memory.max`, `cpu.max`, or their v1 names),
/// by the cgroup /proc says it is in: v2 first, then the v1 hierarchy of `controller`.
fn limit_of(pid: i32, controller: &str, v2_file: &str, v1_file: &str) -> Option<String> {
    let cgroups = cgroup_of(pid);
    let path_of = |want: &dyn Fn(&str) -> bool| {
        cgroups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            want(list).then(|| path.trim_start_matches('/').to_string())
        })
    };
    let v2 = path_of(&|list| list.is_empty())?;
    for mount in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
        if let Ok(text) = std::fs::read_to_string(Path::new(mount).join(&v2).join(v2_file)) {
            return Some(text.trim().to_string());
        }
    }
    let v1 = path_of(&|list| list.split(',').any(|c| c == controller))?;
    for mount in [format!("/sys/fs/cgroup/{controller}"), "/sys/fs/cgroup/cpu,cpuacct".to_string()] {
        if let Ok(text) = std::fs::read_to_string(Path::new(&mount).join(&v1).join(v1_file)) {
            return Some(text.trim().to_string());
        }
    }
    None
}

/// Issue 31: CPU and memory limits were advisory. A replica is held to what its task asked
/// for, through cgroup v2 where the controllers are there and through v1 on a hybrid host
/// (this machine's kind): 64 MiB and half a CPU show in its cgroup's files, and a replica of
/// 64 MiB that takes 256 MiB is stopped by the kernel (it ran to the end, exit 0, before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
async fn a_replica_is_held_to_the_memory_and_cpu_it_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("limits");
    let gw = Gateway::start(None).await;
    let c = cgroup_config(dir.path(), &gw, &root.0);
    let _agent = start_agent(c).await;
    let pid = dir.path().join("pid");
    let _reaper = Reaper(vec![pid.clone()]);
    let limited = |job: u64, cmd: &str| baton_proto::v1::Assignment {
        memory_bytes: 64 << 20,
        cpu_millis: 500,
        ..assignment(job, 1, Action::Run, cmd)
    };
    let sleeper = limited(1, &format!("echo $$ > {}; exec sleep 600", pid.display()));
    // `tail` keeps its last ten lines, and /dev/zero has no line end: it holds all 256 MiB.
    let hog = limited(2, "head -c 268435456 /dev/zero | tail > /dev/null");
    gw.set(1, vec![sleeper.clone(), hog.clone()]);
    let p = wait_for(5, "the replica's pid", || read_pid(&pid)).await;
    let memory = limit_of(p, "memory", "memory.max", "memory.limit_in_bytes");
    assert_eq!(memory.as_deref(), Some("67108864"), "memory limit; cgroups: {}", cgroup_of(p));
    let cpu = limit_of(p, "cpu", "cpu.max", "cpu.cfs_quota_us");
    assert!(matches!(cpu.as_deref(), Some("50000 100000" | "50000")), "cpu limit {cpu:?}; cgroups: {}", cgroup_of(p));
    let code = wait_for(30, "the hog's end", || exited_of(&gw.observations(), 2).first().copied()).await;
    assert_ne!(code, 0, "a replica of 64 MiB held 256 MiB to its end");
    gw.set(1, vec![]);
    wait_for(10, "the replicas' cgroups removed", || {
        (!root.0.join("1-1-0").exists() && !root.0.join("2-1-0").exists()).then_some(())
    })
    .await;
}

/// Device files `nvidia<minor>` of major 195 for minors below `count`, in a new directory under
/// `dir`, with no driver behind them: opening one fails with ENXIO when a cgroup lets it
/// through, with EPERM when it does not.
fn gpu_device_files(dir: &Path, count: u32) -> PathBuf {
    let devs = dir.join("dev");
    std::fs::create_dir(&devs).unwrap();
    for minor in 0..count {
        let path = std::ffi::CString::new(devs.join(format!("nvidia{minor}")).to_str().unwrap()).unwrap();
        let dev = libc::makedev(baton_agent::cgroup::NVIDIA_MAJOR, minor);
        // SAFETY: mknod(2) of a path this test owns, with a valid NUL-terminated string.
        assert_eq!(unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, dev) }, 0, "mknod");
    }
    devs
}

/// Issue 31: a replica could open every GPU of its node (only `CUDA_VISIBLE_DEVICES` kept it
/// to its own). Now its cgroup denies the device files of the GPUs it was not given, through
/// the v1 devices controller (this machine's kind; v2 needs eBPF). Device files of major 195
/// are made here with no driver behind them: opening one fails with ENXIO ("No such device
/// or address") when the cgroup lets it through, with EPERM when it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
async fn a_replica_cannot_open_the_gpus_it_was_not_given() {
    use baton_agent::inventory::{Gpu, Inventory, Source};
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("devices");
    let devs = gpu_device_files(dir.path(), 2);
    let gpu = |index: u32| Gpu {
        index,
        uuid: format!("GPU-{index}"),
        model: "test".into(),
        memory_bytes: 1,
        healthy: true,
        minor: Some(index),
        mig: false,
    };
    let inventory = Inventory { source: Source::Development, gpus: vec![gpu(0), gpu(1)], slices: Vec::new() };
    let gw = Gateway::start(None).await;
    let c = cgroup_config(dir.path(), &gw, &root.0);
    let _agent = baton_agent::start_with_inventory(c, inventory).await.unwrap();
    let cmd = format!("cat {0}/nvidia0; cat {0}/nvidia1; exit 0", devs.display());
    gw.set(1, vec![baton_proto::v1::Assignment { gpus: vec![0], ..assignment(1, 1, Action::Run, &cmd) }]);
    wait_for(10, "the replica's end", || exited_of(&gw.observations(), 1).first().copied()).await;
    let stderr = std::fs::read_to_string(dir.path().join("logs/job-1/1/rank-0.stderr")).unwrap();
    assert!(stderr.contains("nvidia0: No such device or address"), "its own GPU was denied: {stderr}");
    assert!(stderr.contains("nvidia1: Operation not permitted"), "it opened another's GPU: {stderr}");
}

/// Issue 31, hosts with cgroup v2 alone (no v1 devices controller): there the replica's
/// cgroup gets a device program (eBPF) that denies the GPUs it was not given; before, the
/// agent loaded none and said that replicas could open every GPU. Forced here, on a hybrid
/// host, through the root's API; the replica joins its cgroup as the agent's child does. The
/// same cgroup reused for a replica given other GPUs denies what the new one was not given,
/// and only that: the new program replaced the old.
#[test]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
fn on_cgroup_v2_alone_a_device_program_keeps_a_replica_from_the_gpus_it_was_not_given() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let test_root = TestRoot::new("devprogram");
    let devs = gpu_device_files(dir.path(), 3);
    let minors = (0..3).map(|i| (i, i)).collect();
    let root = baton_agent::cgroup::CgroupRoot::at(&test_root.0).unwrap().isolate_gpus_by_program(minors).unwrap();
    let replica = root.replica(1, 1, 0);
    for given in [vec![1], vec![0, 2]] {
        let limits = baton_agent::cgroup::Limits { gpus: given.clone(), ..Default::default() };
        let joins = replica.create(&limits).unwrap();
        let script = format!("for g in 0 1 2; do cat {}/nvidia$g; done; exit 0", devs.display());
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &script]);
        // SAFETY: the closure only writes the child's pid to a descriptor opened before the fork.
        unsafe {
            cmd.pre_exec(move || joins.iter().try_for_each(baton_agent::cgroup::join_in_child));
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        for g in 0..3u32 {
            let want = if given.contains(&g) { "No such device or address" } else { "Operation not permitted" };
            assert!(stderr.contains(&format!("nvidia{g}: {want}")), "given {given:?}, nvidia{g}: {stderr}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containment_cgroup_without_a_usable_hierarchy_refuses_to_start_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_cgroup = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    let c = cgroup_config(dir.path(), &gw, not_a_cgroup.path());
    let inv = baton_agent::inventory::development_inventory(&c.name, 4);
    let err = match baton_agent::start_with_inventory(c, inv).await {
        Ok(_) => panic!("an agent started without its containment"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("--containment") && err.contains("--containment process-group"), "{err}");
}

/// The process group of `pid`, from /proc.
fn proc_pgid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state, ppid, pgrp.
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

/// A cgroup root of plain files: `cgroup.procs` keeps the pid its replica wrote there after
/// the process is gone, as a real cgroup keeps a process that survives SIGKILL (a process in
/// uninterruptible sleep, which no test can make on demand), until the test empties it.
fn fake_root_with_replicas(dir: &Path, replicas: &[&str]) -> PathBuf {
    let root = dir.join("fake-cgroups");
    std::fs::create_dir_all(&root).unwrap();
    for file in ["cgroup.procs", "cgroup.kill"] {
        std::fs::write(root.join(file), "").unwrap();
    }
    for replica in replicas {
        std::fs::create_dir_all(root.join(replica)).unwrap();
        std::fs::write(root.join(replica).join("cgroup.procs"), "").unwrap();
    }
    root
}

/// Issue 31: a replica counted as ended when its wrapper ended, so a process of it that
/// survived SIGKILL kept its GPU while the next job started there, and the agent never
/// reported `Unkillable`. Now its end waits for its cgroup to empty; past the bound the agent
/// reports `Unkillable` (its node takes no new work) and then its end, and its GPUs stay held
/// here until its processes are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_processes_survive_sigkill_holds_its_gpus_and_is_reported_unkillable() {
    let dir = tempfile::tempdir().unwrap();
    let root = fake_root_with_replicas(dir.path(), &["1-1-0", "2-1-0"]);
    let gw = Gateway::start(None).await;
    let mut c = cgroup_config(dir.path(), &gw, &root);
    c.unkillable_after_ms = 1_500;
    let agent = start_agent(c).await;
    let next_ran = dir.path().join("next");
    let _reaper = Reaper(vec![next_ran.clone()]);
    gw.set(1, vec![assignment(1, 1, Action::Run, "exit 3")]);
    wait_for(5, "the replica joined its cgroup", || {
        let procs = std::fs::read_to_string(root.join("1-1-0/cgroup.procs")).unwrap_or_default();
        (!procs.trim().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert!(exited_of(&gw.observations(), 1).is_empty(), "its end told while its processes live on");

    // Another job on the same GPUs waits for them.
    reported_unkillable_with_its_gpus_held(&gw, "exit 3", &next_ran).await;

    // The processes are gone at last: the GPUs are free again.
    std::fs::remove_file(root.join("1-1-0/cgroup.procs")).unwrap();
    wait_for(10, "the next job started", || read_pid(&next_ran)).await;
    agent.shutdown().await.unwrap();
}

/// Issue 31, found by chaos seed 13100 (its second run, 66 violations): a replica whose
/// journal was wiped while its processes lived (and survived SIGKILL: a frozen process) was
/// killed and recorded as ended with nothing known of what it held; the agent started
/// nothing while it lived, but once that agent restarted, the record was known, and the
/// replica lingered holding no GPU: job after job started on GPUs its process still held.
/// What it held is unknown, so it holds every GPU of the node until its processes are gone,
/// and is reported `Unkillable` if they outlive the kill (it was not: the node refused every
/// start unseen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_the_journal_lost_holds_every_gpu_while_it_lives_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = fake_root_with_replicas(dir.path(), &["7-1-0", "2-1-0"]);
    // A process of it lives on (the file keeps it, as the kernel keeps a frozen one).
    std::fs::write(root.join("7-1-0/cgroup.procs"), format!("{}\n", i32::MAX)).unwrap();
    let gw = Gateway::start(None).await;
    let mut c = cgroup_config(dir.path(), &gw, &root);
    c.unkillable_after_ms = 1_000;
    let first = start_agent(c).await;
    // Its processes outlive the kill: reported, so that the node is taken out and fixed.
    wait_for(5, "Unkillable reported", || {
        gw.observations().iter().position(|o| matches!(&o.what, Some(What::Unkillable(u)) if u.job_id == 7))
    })
    .await;
    first.shutdown().await.unwrap();

    let agent = start_agent(cgroup_config(dir.path(), &gw, &root)).await;
    let next_ran = dir.path().join("next");
    let _reaper = Reaper(vec![next_ran.clone()]);
    let mut next = assignment(2, 1, Action::Run, &format!("echo $$ > {}; exec sleep 30", next_ran.display()));
    // GPUs this node has (the test's assignments give each job GPUs of its own, past them).
    next.gpus = vec![0, 1];
    gw.set(1, vec![next]);
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    assert!(!next_ran.exists(), "a job started on GPUs a process the journal lost may hold");

    std::fs::remove_file(root.join("7-1-0/cgroup.procs")).unwrap();
    wait_for(10, "the next job started once that process was gone", || read_pid(&next_ran)).await;
    agent.shutdown().await.unwrap();
}

/// Issue 31: suspend sent SIGSTOP to the replica's process group, so a process that had left
/// the group (`setsid`) kept running, and using what the replica had lent its preemptor,
/// while the replica was reported suspended. With cgroups the whole cgroup is frozen, and a
/// RUN thaws it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
async fn suspend_freezes_every_process_of_the_replica_also_one_that_left_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("freeze");
    let gw = Gateway::start(None).await;
    let c = cgroup_config(dir.path(), &gw, &root.0);
    let agent = start_agent(c).await;
    let (ticks, main) = (dir.path().join("ticks"), dir.path().join("main"));
    let _reaper = Reaper(vec![main.clone()]);
    let cmd = format!(
        "setsid sh -c 'while :; do echo x >> {}; sleep 0.02; done' & echo $$ > {}; while :; do sleep 0.05; done",
        ticks.display(),
        main.display()
    );
    let run = assignment(1, 1, Action::Run, &cmd);
    gw.set(1, vec![run.clone()]);
    let main_pid = wait_for(5, "the replica's pid", || read_pid(&main)).await;
    let size = || std::fs::metadata(&ticks).map_or(0, |m| m.len());
    wait_for(5, "the escaped child ticking", || (size() > 0).then_some(())).await;

    gw.set(1, vec![baton_proto::v1::Assignment { action: Action::Suspend as i32, ..run.clone() }]);
    wait_for(5, "suspended", || suspended(main_pid).then_some(())).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let held = size();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(size(), held, "a process of the suspended replica kept running");

    gw.set(1, vec![run]);
    wait_for(5, "the escaped child ticking again", || (size() > held).then_some(())).await;
    gw.set(1, vec![]);
    wait_for(10, "the replica's cgroup removed", || (!root.0.join("1-1-0").exists()).then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// `(start time in clock ticks since boot, pid)` of `pid`: the order in which two processes
/// were spawned, to the tick, and by pid within one (pids are handed out in order).
fn spawn_order(pid: u32) -> (u64, u32) {
    (procfs::start_time(pid).expect("the process runs"), pid)
}

/// The pid of the guard watching `cgroup` (its command line names it).
fn guard_of(cgroup: &Path) -> Option<u32> {
    let named = procfs::find_by_arg(cgroup.as_os_str().as_encoded_bytes());
    named.into_iter().find(|&pid| procfs::has_arg(pid, b"baton-guard"))
}

/// Issue 31: the agent spawned a replica's guard after its wrapper, and the wrapper waits
/// for the guard (up to `GUARD_WAIT_MS`) before it runs anything: an agent paused or slowed
/// between the two spawns cost the replica its start (a lease stop). The guard is now
/// spawned first, so the wrapper waits only for the guard's shell to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
async fn the_guard_watches_before_the_wrapper_is_spawned() {
    let dir = tempfile::tempdir().unwrap();
    let root = TestRoot::new("guard-first");
    let gw = Gateway::start(None).await;
    let c = cgroup_config(dir.path(), &gw, &root.0);
    let agent = start_agent(c).await;
    let main = dir.path().join("main");
    let _reaper = Reaper(vec![main.clone()]);
    let cmd = format!("echo $$ > {}; exec sleep 600", main.display());
    gw.set(1, vec![assignment(1, 1, Action::Run, &cmd)]);
    let main_pid = wait_for(5, "the replica's pid", || read_pid(&main)).await;
    // The wrapper leads the replica's process group (`setsid`).
    let wrapper = procfs::process_group(main_pid as u32).expect("the replica runs");
    let guard = guard_of(&root.0.join("1-1-0")).expect("the replica's guard runs");
    assert!(
        spawn_order(guard) < spawn_order(wrapper),
        "the guard {guard} {:?} was spawned after the wrapper {wrapper} {:?}",
        spawn_order(guard),
        spawn_order(wrapper)
    );
    gw.set(1, vec![]);
    wait_for(10, "the replica's cgroup removed", || (!root.0.join("1-1-0").exists()).then_some(())).await;
    wait_for(5, "the guard gone with its cgroup", || guard_of(&root.0.join("1-1-0")).is_none().then_some(())).await;
    agent.shutdown().await.unwrap();
}

/// Issue 31: in a container the agent's home cgroup is the namespace's root, which holds
/// `baton init` as well as the agent. v2 hands the memory and cpu controllers down only from
/// a cgroup without processes, and the agent moved only itself into its leaf: with init
/// left behind, replicas' limits went unenforced. Every process of the home now moves.
#[test]
#[ignore = "needs root and a writable cgroup v2 hierarchy: ./test.sh runs it as root"]
fn every_process_of_the_agents_home_moves_into_its_leaf() {
    let root = TestRoot::new("vacate");
    std::fs::create_dir_all(&root.0).unwrap();
    let mut kids: Vec<std::process::Child> =
        (0..3).map(|_| std::process::Command::new("sleep").arg("600").spawn().unwrap()).collect();
    for k in &kids {
        std::fs::write(root.0.join("cgroup.procs"), k.id().to_string()).unwrap();
    }
    let moved = baton_agent::cgroup::vacate(&root.0).unwrap();
    let left = std::fs::read_to_string(root.0.join("cgroup.procs")).unwrap();
    let leaf = std::fs::read_to_string(root.0.join(baton_agent::cgroup::AGENT_LEAF).join("cgroup.procs")).unwrap();
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
    assert_eq!(moved, 3);
    assert_eq!(left.trim(), "", "processes left in the home: {left}");
    for k in &kids {
        assert!(leaf.split_whitespace().any(|p| p == k.id().to_string()), "{} is not in the leaf: {leaf}", k.id());
    }
}
