//! What the checks read from the live cluster once the load has drained: every job's events,
//! and the cluster at quiescence (the model's running set against the processes that hold
//! their witness locks, and every replica's state at its applied index).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use baton_agent::procfs::{FileId, file_id};
use baton_proto::v1::{Empty, Event, Job, JobRef, JobState, ListJobsReply, ListJobsRequest};

use crate::cluster::{Client, Cluster};

/// Tries at reading one job's events before it is left out (the checks then say so).
const EVENT_TRIES: u32 = 5;
/// Between two tries of a read, and between two looks at quiescence.
const RETRY_MS: u64 = 500;
/// Looks at the cluster before it is judged not quiescent: 20 s, for the last processes to
/// exit (a stop's grace is far longer only for a stop that hangs) and the replicas to apply
/// the last writes.
const QUIESCENCE_LOOKS: usize = 40;
/// Bound on one call of a look (a snapshot of a few megabytes on a loaded machine).
const CALL_MS: u64 = 5_000;

/// Pages read at most by `list_all`: 1,000 jobs a page, far more than a run submits.
const MAX_PAGES: usize = 1_000;

/// Every job `req` matches, page after page (a page holds 1,000 by default: a run longer
/// than about 1,100 s submits more, and the checks read only the first page, finding every
/// later job "lost"). Each page's call is bounded by `CALL_MS`.
pub async fn list_all(api: &Client, req: ListJobsRequest) -> Result<Vec<Job>, String> {
    pages(|page_token| {
        // A clone shares the connection; each page's call owns its own.
        let mut api = api.clone();
        let req = ListJobsRequest { page_token, ..req.clone() };
        async move {
            match tokio::time::timeout(Duration::from_millis(CALL_MS), api.list_jobs(req)).await {
                Ok(Ok(r)) => Ok(r.into_inner()),
                Ok(Err(status)) => Err(status.message().to_string()),
                Err(_) => Err(format!("no answer to a job list within {CALL_MS} ms")),
            }
        }
    })
    .await
}

/// The jobs of every page `fetch` gives, from the first (empty token) until one names no
/// next page.
async fn pages<F, Fut>(mut fetch: F) -> Result<Vec<Job>, String>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<ListJobsReply, String>>,
{
    let mut jobs = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let reply = fetch(page_token).await?;
        jobs.extend(reply.jobs);
        if reply.next_page_token.is_empty() {
            return Ok(jobs);
        }
        page_token = reply.next_page_token;
    }
    Err(format!("more than {MAX_PAGES} pages of jobs"))
}

/// Each listed job's events (`GetJob` holds them, `ListJobs` does not), by name; a job whose
/// events could not be read is left out.
pub async fn events_of(c: &Cluster, jobs: &[Job]) -> BTreeMap<String, Vec<Event>> {
    let mut out = BTreeMap::new();
    for name in jobs.iter().filter_map(|j| j.spec.as_ref()).map(|s| s.name.clone()) {
        for _ in 0..EVENT_TRIES {
            let mut api = c.client().await;
            let get = api.get_job(JobRef { name: name.clone(), ..Default::default() });
            if let Ok(Ok(job)) = tokio::time::timeout(Duration::from_millis(CALL_MS), get).await {
                out.insert(name.clone(), job.into_inner().events);
                break;
            }
            tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
        }
    }
    out
}

/// A replica's applied index and a hash of its whole state there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaState {
    pub index: u64,
    pub hash: u64,
}

/// One look at the cluster once the load drained.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quiescence {
    /// Looks made until this one.
    pub looks: usize,
    /// (job, rank) of every job the model has Running, Preempting or Suspended.
    pub model_running: BTreeSet<(String, String)>,
    /// (job, rank) whose witness lock a live process holds: what the agents run.
    pub processes_running: BTreeSet<(String, String)>,
    /// Replica `i`'s state (`SaveSnapshot`: a linearizable read of its own state machine),
    /// or why it gave none.
    pub replicas: Vec<Result<ReplicaState, String>>,
}

impl Quiescence {
    /// Promises broken at this look: a job the model runs and no process does (or the
    /// other way round), a replica that gave no state, replicas at different indexes or with
    /// different states at the same index.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let unlisted = |set: &BTreeSet<(String, String)>, other: &BTreeSet<(String, String)>| {
            set.difference(other).map(|(j, r)| format!("{j} rank {r}")).collect::<Vec<_>>().join(", ")
        };
        if self.model_running != self.processes_running {
            let only_model = unlisted(&self.model_running, &self.processes_running);
            let only_processes = unlisted(&self.processes_running, &self.model_running);
            v.push(format!(
                "at quiescence the model's running set differs from the processes': the model alone runs [{only_model}], processes alone run [{only_processes}]"
            ));
        }
        for (i, r) in self.replicas.iter().enumerate() {
            if let Err(why) = r {
                v.push(format!("at quiescence replica {} gave no state: {why}", i + 1));
            }
        }
        let states: BTreeSet<ReplicaState> = self.replicas.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
        if states.len() > 1 {
            let each: Vec<String> = (self.replicas.iter().enumerate())
                .filter_map(|(i, r)| r.as_ref().ok().map(|s| (i, s)))
                .map(|(i, s)| format!("replica {} at index {} state {:016x}", i + 1, s.index, s.hash))
                .collect();
            v.push(format!("at quiescence the replicas disagree: {}", each.join(", ")));
        }
        v
    }

    /// The index every replica is at, when they all agree.
    pub fn agreed_index(&self) -> Option<u64> {
        let states: BTreeSet<Option<ReplicaState>> = self.replicas.iter().map(|r| r.as_ref().ok().copied()).collect();
        match states.into_iter().collect::<Vec<_>>()[..] {
            [Some(s)] => Some(s.index),
            _ => None,
        }
    }
}

impl PartialOrd for ReplicaState {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ReplicaState {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.index, self.hash).cmp(&(other.index, other.hash))
    }
}

/// Looks at the cluster until it is quiescent (no violation at a look), `QUIESCENCE_LOOKS`
/// times at most; the last look.
pub async fn quiescence(c: &Cluster, witness: &Path, replicas: usize) -> Quiescence {
    let mut last = Quiescence::default();
    for looks in 1..=QUIESCENCE_LOOKS {
        last = look(c, witness, replicas).await;
        last.looks = looks;
        if last.violations().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
    }
    last
}

async fn look(c: &Cluster, witness: &Path, replicas: usize) -> Quiescence {
    let mut q = Quiescence { processes_running: processes_running(witness), ..Default::default() };
    let api = c.client().await;
    let states = [JobState::Running, JobState::Preempting, JobState::Suspended].map(i32::from).to_vec();
    match list_all(&api, ListJobsRequest { states, ..Default::default() }).await {
        Ok(jobs) => q.model_running = ranks_of(&jobs, &finished(witness)),
        // Unknown: a set no process matches, so the look is not taken as quiescent.
        _ => q.model_running = [("?".to_string(), "the job list could not be read".to_string())].into(),
    }
    for i in 0..replicas {
        q.replicas.push(replica_state(c, i).await);
    }
    q
}

/// (job, rank) of each rank of `jobs` (ranks are numbered across a job's tasks), less those
/// that already finished their steps in the job's current attempt (`finished`: job,
/// attempt, rank): a rank that exits 0 is done while the rest of its gang runs on.
pub fn ranks_of(jobs: &[Job], finished: &BTreeSet<(String, u32, String)>) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for job in jobs {
        let Some(spec) = &job.spec else { continue };
        let ranks: u32 = spec.tasks.iter().map(|t| t.replicas).sum();
        let done = |r: &String| finished.contains(&(spec.name.clone(), job.attempt, r.clone()));
        out.extend((0..ranks).map(|r| r.to_string()).filter(|r| !done(r)).map(|r| (spec.name.clone(), r)));
    }
    out
}

/// (job, attempt, rank) of the ranks the witness saw finish their steps (`DIR/ends`).
fn finished(witness: &Path) -> BTreeSet<(String, u32, String)> {
    let text = std::fs::read_to_string(witness.join("ends")).unwrap_or_default();
    text.lines()
        .filter_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
            [job, attempt, rank, _node, _step, "finished", _at_ms] => {
                Some((job.to_string(), attempt.parse().ok()?, rank.to_string()))
            }
            _ => None,
        })
        .collect()
}

async fn replica_state(c: &Cluster, i: usize) -> Result<ReplicaState, String> {
    let (mut client, _) = c.answering(i).await.ok_or("it does not answer")?;
    let read = async {
        let mut stream = client.save_snapshot(Empty {}).await?.into_inner();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await? {
            bytes.extend_from_slice(&chunk.data);
        }
        Ok::<_, tonic::Status>(bytes)
    };
    let bytes = match tokio::time::timeout(Duration::from_millis(CALL_MS), read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(status)) => return Err(format!("SaveSnapshot: {:?}: {}", status.code(), status.message())),
        Err(_) => return Err(format!("SaveSnapshot: no answer within {CALL_MS} ms")),
    };
    let index = backup_index(&bytes).ok_or("its snapshot is not a baton backup")?;
    let mut h = DefaultHasher::new();
    h.write(&bytes);
    Ok(ReplicaState { index, hash: h.finish() })
}

/// The applied index a backup file (`baton snapshot save`) was taken at: after the 8-byte
/// magic, the format (u32) and the record's crc32, the record is bincode (standard: varint
/// integers) of `{ cluster_id: String, index: u64, state: bytes, format: u32 }` (format 2 of the
/// file; format 1 had no `format`).
pub fn backup_index(bytes: &[u8]) -> Option<u64> {
    if bytes.get(..8)? != b"BATONBAK" {
        return None;
    }
    let mut at = 16;
    let id_len = varint(bytes, &mut at)?;
    at = at.checked_add(usize::try_from(id_len).ok()?)?;
    varint(bytes, &mut at)
}

/// bincode's varint: below 251 one byte; 251, 252, 253 announce a u16, u32, u64 (little-endian).
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let first = *bytes.get(*at)?;
    let width = match first {
        0..=250 => {
            *at += 1;
            return Some(u64::from(first));
        }
        251 => 2,
        252 => 4,
        253 => 8,
        _ => return None,
    };
    let raw = bytes.get(*at + 1..*at + 1 + width)?;
    *at += 1 + width;
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(raw);
    Some(u64::from_le_bytes(le))
}

/// (job, rank) of each `job-<job>-<rank>.lock` in the witness directory that a process holds
/// now, from `/proc/locks` (reading it takes no lock, so a workload starting meanwhile is not
/// disturbed).
fn processes_running(witness: &Path) -> BTreeSet<(String, String)> {
    let held = held_locks(&std::fs::read_to_string("/proc/locks").unwrap_or_default());
    let Ok(dir) = std::fs::read_dir(witness) else { return BTreeSet::new() };
    let mut out = BTreeSet::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(who) = job_lock(&name) else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if held.contains(&file_id(meta.dev(), meta.ino())) {
            out.insert(who);
        }
    }
    out
}

/// (job, rank) of a witness lock file's name `job-<job>-<rank>.lock`.
pub fn job_lock(name: &str) -> Option<(String, String)> {
    let (job, rank) = name.strip_prefix("job-")?.strip_suffix(".lock")?.rsplit_once('-')?;
    Some((job.to_string(), rank.to_string()))
}

/// The files locks are held on, from the text of `/proc/locks`.
pub fn held_locks(proc_locks: &str) -> BTreeSet<FileId> {
    baton_agent::procfs::lock_holders(proc_locks).into_iter().map(|(id, _)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(pairs: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        pairs.iter().map(|(j, r)| (j.to_string(), r.to_string())).collect()
    }

    fn at(index: u64, hash: u64) -> Result<ReplicaState, String> {
        Ok(ReplicaState { index, hash })
    }

    /// Chaos runs of 1,300 s submitted about 1,220 jobs each: the checks read only the first
    /// page of 1,000 jobs and found every later one lost (chaos/README.md, "Found so far").
    #[test]
    fn every_page_of_jobs_is_read() {
        let all: Vec<Job> = (1..=2_500).map(|id| Job { id, ..Default::default() }).collect();
        let fetch = |token: String| {
            let from: usize = token.parse().unwrap_or(0);
            let to = (from + 1_000).min(all.len());
            let next = if to < all.len() { to.to_string() } else { String::new() };
            let reply = ListJobsReply { jobs: all[from..to].to_vec(), next_page_token: next, ..Default::default() };
            async move { Ok::<_, String>(reply) }
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let read = rt.block_on(pages(fetch)).unwrap();
        assert_eq!(read.len(), 2_500);
        assert_eq!(read.last().map(|j| j.id), Some(2_500));
        let failing = |_: String| async { Err::<ListJobsReply, _>("down".to_string()) };
        assert_eq!(rt.block_on(pages(failing)), Err("down".to_string()));
    }

    #[test]
    fn a_quiescent_cluster_runs_what_the_model_says_and_its_replicas_agree() {
        let q = Quiescence {
            looks: 1,
            model_running: ranks(&[("train-4", "0"), ("train-4", "1")]),
            processes_running: ranks(&[("train-4", "0"), ("train-4", "1")]),
            replicas: vec![at(900, 7), at(900, 7), at(900, 7)],
        };
        assert_eq!(q.violations(), Vec::<String>::new());
        assert_eq!(q.agreed_index(), Some(900));
    }

    #[test]
    fn a_process_the_model_does_not_run_and_a_rank_no_process_runs_are_reported() {
        let q = Quiescence {
            looks: 40,
            model_running: ranks(&[("train-4", "0"), ("train-4", "1")]),
            processes_running: ranks(&[("train-4", "0"), ("urgent-9", "0")]),
            replicas: vec![at(900, 7), at(900, 7), at(900, 7)],
        };
        assert_eq!(
            q.violations(),
            [
                "at quiescence the model's running set differs from the processes': the model alone runs [train-4 rank 1], processes alone run [urgent-9 rank 0]"
            ]
        );
    }

    #[test]
    fn replicas_at_different_indexes_or_states_or_silent_are_reported() {
        let q = |replicas| Quiescence { replicas, ..Default::default() };
        let behind = q(vec![at(900, 7), at(899, 3), at(900, 7)]);
        assert_eq!(
            behind.violations(),
            [
                "at quiescence the replicas disagree: replica 1 at index 900 state 0000000000000007, replica 2 at index 899 state 0000000000000003, replica 3 at index 900 state 0000000000000007"
            ]
        );
        assert_eq!(behind.agreed_index(), None);
        let diverged = q(vec![at(900, 7), at(900, 8), at(900, 7)]);
        assert_eq!(diverged.violations().len(), 1, "same index, different state");
        let silent = q(vec![at(900, 7), Err("it does not answer".into()), at(900, 7)]);
        assert_eq!(silent.violations(), ["at quiescence replica 2 gave no state: it does not answer"]);
        assert_eq!(silent.agreed_index(), None);
    }

    #[test]
    fn a_rank_that_finished_its_steps_is_not_expected_to_run() {
        let gang = Job {
            spec: Some(baton_proto::make::gpu_job("train-4", "batch", "train", 2, 2, vec![])),
            attempt: 2,
            ..Default::default()
        };
        let none = BTreeSet::new();
        assert_eq!(ranks_of(std::slice::from_ref(&gang), &none), ranks(&[("train-4", "0"), ("train-4", "1")]));
        let rank_1_done: BTreeSet<_> = [("train-4".to_string(), 2, "1".to_string())].into();
        assert_eq!(ranks_of(std::slice::from_ref(&gang), &rank_1_done), ranks(&[("train-4", "0")]));
        let earlier_attempt: BTreeSet<_> = [("train-4".to_string(), 1, "1".to_string())].into();
        assert_eq!(ranks_of(&[gang], &earlier_attempt).len(), 2, "only the current attempt's finish counts");
    }

    #[test]
    fn held_locks_are_read_from_proc_locks_and_waiters_hold_none() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 00:2f:123456 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4243 00:2f:999 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 17 fd:01:77 0 EOF\n";
        assert_eq!(held_locks(text), [(0, 0x2f, 123_456), (0xfd, 1, 77)].into());
        assert_eq!(job_lock("job-train-12-1.lock"), Some(("train-12".into(), "1".into())));
        assert_eq!(job_lock("gpu-n1-0.lock"), None);
    }

    #[test]
    fn a_lock_this_process_holds_is_seen() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let held = std::fs::File::create(dir.path().join("job-train-3-1.lock")).unwrap();
        std::fs::File::create(dir.path().join("job-train-3-0.lock")).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        assert_eq!(processes_running(dir.path()), ranks(&[("train-3", "1")]));
        drop(held);
        assert_eq!(processes_running(dir.path()), BTreeSet::new());
    }

    #[test]
    fn a_backup_names_its_index() {
        let mut bytes = b"BATONBAK".to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.push(3);
        bytes.extend_from_slice(b"abc");
        bytes.push(251);
        bytes.extend_from_slice(&900u16.to_le_bytes());
        assert_eq!(backup_index(&bytes), Some(900));
        bytes[20] = 42;
        bytes.truncate(21);
        assert_eq!(backup_index(&bytes), Some(42));
        assert_eq!(backup_index(b"not a backup"), None);
    }
}
