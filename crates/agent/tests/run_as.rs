//! Jobs run as their users, not as the agent (issue 11): the replica's processes carry the
//! user's uid and groups, its logs and checkpoints are the user's alone, and a user this
//! agent does not allow (root included) fails the start with the reason in its log.
//!
//! Needs root: it creates the system user it runs jobs as (`useradd`, once; never removed,
//! other runs share it). A plain `cargo test` ignores these tests; `./test.sh` runs them as root.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use baton_agent::logfiles::log_path;
use baton_agent::run_as::{AllowList, RunAsPolicy, lookup_user};
use baton_proto::v1::Action;
use baton_proto::v1::observation::What;
use common::*;

const USER: &str = "baton-test-runas";

/// The test user, created if missing, once per test process: the tests run at once, and two
/// `useradd`s at once can each write the user database from what it read before the other
/// wrote (CI: a test read the user as 999:995, and its job ran as 995:994).
fn ensure_user() -> baton_agent::run_as::Identity {
    static USER_ONCE: std::sync::OnceLock<baton_agent::run_as::Identity> = std::sync::OnceLock::new();
    USER_ONCE.get_or_init(create_user).clone()
}

fn create_user() -> baton_agent::run_as::Identity {
    if let Some(who) = lookup_user(USER).unwrap() {
        return who;
    }
    let status = std::process::Command::new("useradd").args(["--system", "--no-create-home", USER]).status();
    // 9: the user exists (another test created it meanwhile).
    assert!(matches!(status.as_ref().map(|s| s.code()), Ok(Some(0 | 9))), "useradd {USER}: {status:?}");
    lookup_user(USER).unwrap().expect("the user exists after useradd")
}

/// A data directory other users can reach, as an agent running jobs as users needs.
fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn log(dir: &Path, job_id: u64, stream: &str) -> String {
    std::fs::read_to_string(log_path(dir, job_id, 1, 0, stream)).unwrap_or_default()
}

fn allowing(users: &[&str], allow_root: bool) -> RunAsPolicy {
    let users: Vec<String> = users.iter().map(|u| u.to_string()).collect();
    RunAsPolicy::Users(AllowList::parse(&users, allow_root).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: ./test.sh runs it as root"]
async fn a_replica_runs_with_its_users_uid_and_groups_and_owns_its_files() {
    let who = ensure_user();
    let dir = data_dir();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.run_as = allowing(&[USER], false);
    let agent = start_agent(c).await;
    let journal = dir.path().join("journal");
    let mut a = assignment(
        1,
        1,
        Action::Run,
        &format!(
            "id -u; id -g; echo \"home=$HOME user=$USER\"; touch \"$BATON_CHECKPOINT_DIR/step\"; \
             ls {} >/dev/null 2>&1 && echo journal-listed; true",
            journal.display()
        ),
    );
    a.run_as = USER.into();
    gw.set(1, vec![a]);
    let code = wait_for(10, "the exit reported", || exited_of(&gw.observations(), 1).first().copied()).await;
    assert_eq!(code, 0, "stderr: {}", log(dir.path(), 1, "stderr"));

    let out = log(dir.path(), 1, "stdout");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], [who.uid.to_string(), who.gid.to_string()], "{out}");
    assert!(lines[2].contains(&format!("user={USER}")), "{out}");
    // The journal holds every job's command: the agent's alone.
    assert!(!out.contains("journal-listed"), "the job listed the agent's journal: {out}");
    assert_eq!(std::fs::metadata(&journal).unwrap().mode() & 0o777, 0o700);
    let ckpt = dir.path().join("checkpoints").join("job-1");
    let meta = std::fs::metadata(&ckpt).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (who.uid, 0o700), "the checkpoint directory is the user's alone");
    assert_eq!(std::fs::metadata(ckpt.join("step")).unwrap().uid(), who.uid, "the job wrote its checkpoint");
    let meta = std::fs::metadata(log_path(dir.path(), 1, 1, 0, "stdout")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (who.uid, 0o600), "the log is the user's alone");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: ./test.sh runs it as root"]
async fn a_user_the_agent_does_not_allow_fails_its_start_with_the_reason() {
    ensure_user();
    let dir = data_dir();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.run_as = allowing(&[USER], false);
    let agent = start_agent(c).await;
    let cases = [
        (1, "nobody", "Unix user nobody is not allowed to run jobs on this node (agent flag --run-as-allow)"),
        (2, "root", "Unix user root has uid 0 (root) and this agent runs without --allow-root"),
        (3, "baton-no-such-user-x", "Unix user \"baton-no-such-user-x\" does not exist on this node"),
        (4, "", "the job names no Unix user"),
    ];
    let mut wanted = Vec::new();
    for (job_id, user, _) in cases {
        let mut a = assignment(job_id, 1, Action::Run, &format!("touch {}/ran-{job_id}", dir.path().display()));
        a.run_as = user.into();
        wanted.push(a);
    }
    gw.set(1, wanted);
    for (job_id, user, why) in cases {
        let code =
            wait_for(10, "the failed start reported", || exited_of(&gw.observations(), job_id).first().copied()).await;
        assert_eq!(code, 127, "{user:?}");
        let err = log(dir.path(), job_id, "stderr");
        assert!(err.contains("cannot run as the job's user") && err.contains(why), "{user:?}: {err}");
        assert!(!dir.path().join(format!("ran-{job_id}")).exists(), "{user:?}: nothing of the job ran");
        // The leader hears why, for the job's events.
        let reason = gw
            .observations()
            .into_iter()
            .find_map(|o| match o.what {
                Some(What::Exited(e)) if e.job_id == job_id => Some(e.reason),
                _ => None,
            })
            .unwrap();
        assert!(reason.contains(why), "{user:?}: {reason}");
    }
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: ./test.sh runs it as root"]
async fn root_runs_only_where_the_agent_allows_root() {
    let dir = data_dir();
    let gw = Gateway::start(None).await;
    let mut c = config(dir.path(), &[gw.addr]);
    c.run_as = allowing(&["root"], true);
    let agent = start_agent(c).await;
    let mut a = assignment(1, 1, Action::Run, "id -u");
    a.run_as = "root".into();
    gw.set(1, vec![a]);
    let code = wait_for(10, "the exit reported", || exited_of(&gw.observations(), 1).first().copied()).await;
    assert_eq!(code, 0, "stderr: {}", log(dir.path(), 1, "stderr"));
    assert_eq!(log(dir.path(), 1, "stdout").trim(), "0");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: ./test.sh runs it as root"]
async fn an_agent_for_users_refuses_a_data_directory_they_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let gw = Gateway::start(None).await;
    let mut c = config(&dir.path().join("data"), &[gw.addr]);
    c.run_as = allowing(&["root"], true);
    let inv = baton_agent::inventory::development_inventory(&c.name, 4);
    let e = baton_agent::start_with_inventory(c, inv).await.err().expect("the agent refuses to start").to_string();
    assert!(e.contains("is not searchable by other users") && e.contains(&dir.path().display().to_string()), "{e}");
}

/// Issue 31: the watchdog was a shell function in the job's own process group, running as the
/// job's user: a job that killed its siblings (its watchdog) ran on after its agent was gone
/// and its lease had run out, beside the attempt the leader placed elsewhere. A replica held
/// by a cgroup is watched by its guard, a process of the agent's user outside the job's group
/// and cgroup, which the job can neither kill nor leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: ./test.sh runs it as root"]
async fn a_job_that_kills_its_watchdog_still_stops_when_its_lease_runs_out() {
    ensure_user();
    let dir = data_dir();
    let gw = Gateway::start(None).await;
    gw.grant_lease_ms(800);
    let mut c = config(dir.path(), &[gw.addr]);
    c.run_as = allowing(&[USER], false);
    c.containment = baton_agent::cgroup::ContainmentMode::Cgroup;
    let agent = start_agent(c).await;
    // Where the job, as its user, may write.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (pid, tried) = (out.join("pid"), out.join("tried"));
    let _reaper = Reaper(vec![pid.clone()]);
    let rogue = format!(
        "for p in $(pgrep -P $PPID); do [ \"$p\" != \"$$\" ] && kill -9 \"$p\"; done; \
         pkill -9 -f 'baton-[g]uard'; echo done > {}; \
         echo $$ > {}; while :; do sleep 0.05; done",
        tried.display(),
        pid.display()
    );
    let mut a = assignment(1, 1, Action::Run, &rogue);
    a.run_as = USER.into();
    gw.set(1, vec![a]);
    let started = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            if let Some(p) = read_pid(&pid) {
                return p;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    let p = started.await.unwrap_or_else(|_| {
        panic!("the rogue job never started: {:?}; stderr: {}", gw.observations(), log(dir.path(), 1, "stderr"))
    });
    assert!(tried.exists(), "the job ran its kills first");
    // Renewed a few times, then the agent is gone: only what watches the replica is left.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    agent.shutdown().await.unwrap();
    wait_for(10, "the rogue replica stopped once its lease ran out", || (!alive(p)).then_some(())).await;
}
