//! Registrations of nodes whose agents attach together, committed together.
//!
//! Registering a node rebuilds the whole ledger of the state (every node and every running
//! job), on every replica. One `RegisterNode` per attach made a fleet that attaches at once
//! (a cluster's first start, a rack powering up) cost a rebuild per node: quadratic in the
//! fleet, and 5,000 agents took minutes to be Ready while the replicas' CPU starved their
//! elections. Here one task commits the registrations: the ones waiting when it is free go
//! into one `RegisterNodes` (one rebuild), and the next batch gathers while it commits.
//!
//! A batch the model refuses whole (one node's facts are invalid, or conflict with the work
//! it holds) is retried one node at a time, so each agent gets its own answer. A batch whose
//! write failed (this replica no longer leads, no quorum, a timeout) fails for every node
//! alike: it is not retried node by node, which once cost a deposed leader a refused write
//! per waiting node.

use std::collections::BTreeSet;
use std::sync::Arc;

use baton_model::command::{Command, Op};
use baton_model::node::NodeSpec;
use baton_raft::Replica;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use crate::clock::now_ms;
use crate::status;

/// Most registrations in one command: a rebuild per this many nodes.
pub const MAX_REGISTRATIONS_PER_COMMIT: usize = 500;
/// Most encoded bytes of the node facts in one command, well under the default
/// `max_command_bytes` (4 MiB); a smaller setting makes the batch fail and go one by one.
const MAX_REGISTRATION_BYTES: usize = 1 << 20;
/// Registrations queued before an attach waits for room.
const MAX_WAITING: usize = baton_model::limits::MAX_NODES_PER_COMMAND;

/// Commits the node facts given as one command; what the agents are told.
pub type Commit = Arc<dyn Fn(Vec<NodeSpec>) -> BoxFuture<'static, Result<(), NotCommitted>> + Send + Sync>;

/// Why registrations were not committed.
#[derive(Debug, Clone)]
pub enum NotCommitted {
    /// The model refused the command: some node's facts are at fault.
    Refused(Status),
    /// The write failed, whatever the nodes: the same for each of them.
    Failed(Status),
}

impl NotCommitted {
    fn status(self) -> Status {
        match self {
            NotCommitted::Refused(s) | NotCommitted::Failed(s) => s,
        }
    }
}

struct Waiting {
    spec: NodeSpec,
    bytes: usize,
    answer: oneshot::Sender<Result<(), Status>>,
}

pub struct Registrar {
    queue: mpsc::Sender<Waiting>,
}

impl Registrar {
    /// Commits through `replica`; the task ends when the registrar is dropped.
    pub fn new(replica: Replica) -> Registrar {
        Registrar::with_commit(Arc::new(move |specs| {
            let replica = replica.clone();
            Box::pin(async move { commit(&replica, specs).await })
        }))
    }

    fn with_commit(commit: Commit) -> Registrar {
        let (queue, waiting) = mpsc::channel(MAX_WAITING);
        tokio::spawn(run(waiting, commit));
        Registrar { queue }
    }

    /// Registers `spec` with whatever else is waiting; returns once it is committed.
    pub async fn register(&self, spec: NodeSpec) -> Result<(), Status> {
        let bytes = baton_raft::codec::encoded_len(&spec).map_err(|e| Status::internal(e.to_string()))?;
        let (answer, answered) = oneshot::channel();
        let stopped = || Status::unavailable("this replica is shutting down; use another");
        self.queue.send(Waiting { spec, bytes, answer }).await.map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

async fn commit(replica: &Replica, specs: Vec<NodeSpec>) -> Result<(), NotCommitted> {
    let op = match <[NodeSpec; 1]>::try_from(specs) {
        Ok([one]) => Op::RegisterNode(one),
        Err(many) => Op::RegisterNodes(many),
    };
    let written = replica.write(Command { now_ms: now_ms(), op }).await;
    match written.map_err(|e| NotCommitted::Failed(status::from_write(e)))? {
        Ok(_) => Ok(()),
        Err(e) => Err(NotCommitted::Refused(status::from_apply(e))),
    }
}

async fn run(mut waiting: mpsc::Receiver<Waiting>, commit: Commit) {
    let mut carried: Vec<Waiting> = Vec::new();
    loop {
        if carried.is_empty() {
            match waiting.recv().await {
                Some(w) => carried.push(w),
                None => return,
            }
        }
        let batch = gather(&mut carried, &mut waiting);
        commit_batch(batch, &commit).await;
    }
}

/// The next batch: what was carried over, then whatever waits, within the bounds. A node
/// already in the batch (an agent that attached twice) is carried to the next one, as the
/// model refuses a registration naming a node twice.
fn gather(carried: &mut Vec<Waiting>, waiting: &mut mpsc::Receiver<Waiting>) -> Vec<Waiting> {
    let mut batch: Vec<Waiting> = Vec::new();
    let mut names = BTreeSet::new();
    let mut bytes = 0;
    let mut later = Vec::new();
    let mut next = std::mem::take(carried).into_iter();
    loop {
        let Some(w) = next.next().or_else(|| waiting.try_recv().ok()) else { break };
        let full = batch.len() >= MAX_REGISTRATIONS_PER_COMMIT
            || (!batch.is_empty() && bytes + w.bytes > MAX_REGISTRATION_BYTES);
        if full {
            later.push(w);
            later.extend(next);
            break;
        }
        if names.contains(&w.spec.name) {
            later.push(w);
            continue;
        }
        names.insert(w.spec.name.clone());
        bytes += w.bytes;
        batch.push(w);
    }
    *carried = later;
    batch
}

/// Commits `batch` as one command; if the model refuses it and it held more than one node,
/// each node alone, so that one bad node does not fail the others.
async fn commit_batch(batch: Vec<Waiting>, commit: &Commit) {
    let specs: Vec<NodeSpec> = batch.iter().map(|w| w.spec.clone()).collect();
    let whole = commit(specs).await;
    if !matches!(whole, Err(NotCommitted::Refused(_))) || batch.len() == 1 {
        let whole = whole.map_err(NotCommitted::status);
        for w in batch {
            let _ = w.answer.send(whole.clone());
        }
        return;
    }
    for w in batch {
        let alone = commit(vec![w.spec]).await.map_err(NotCommitted::status);
        let _ = w.answer.send(alone);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use baton_model::fixture::gpu_node;
    use tokio::sync::Semaphore;

    use super::*;

    type Commits = Arc<Mutex<Vec<Vec<String>>>>;

    /// Records the nodes of every commit; the first commit waits for `gate`. Refuses any
    /// batch that holds a node named "bad"; fails the write of any that holds "unlucky".
    fn recording(gate: Arc<Semaphore>) -> (Commit, Commits) {
        let commits: Commits = Arc::default();
        let seen = commits.clone();
        let commit: Commit = Arc::new(move |specs: Vec<NodeSpec>| {
            let (seen, gate) = (seen.clone(), gate.clone());
            Box::pin(async move {
                let first = {
                    let mut c = seen.lock().unwrap();
                    c.push(specs.iter().map(|s| s.name.to_string()).collect());
                    c.len() == 1
                };
                if first {
                    drop(gate.acquire().await.unwrap());
                }
                if specs.iter().any(|s| s.name.as_str() == "bad") {
                    return Err(NotCommitted::Refused(Status::invalid_argument("bad node")));
                }
                if specs.iter().any(|s| s.name.as_str() == "unlucky") {
                    return Err(NotCommitted::Failed(Status::failed_precondition("not the leader")));
                }
                Ok(())
            })
        });
        (commit, commits)
    }

    fn start(r: &Arc<Registrar>, names: &[&str]) -> Vec<tokio::task::JoinHandle<Result<(), Status>>> {
        names
            .iter()
            .map(|name| {
                let (r, spec) = (r.clone(), gpu_node(name, 8));
                tokio::spawn(async move { r.register(spec).await })
            })
            .collect()
    }

    async fn queued(r: &Registrar, n: usize) {
        while MAX_WAITING - r.queue.capacity() < n {
            tokio::task::yield_now().await;
        }
    }

    async fn answers(tasks: Vec<tokio::task::JoinHandle<Result<(), Status>>>) -> Vec<Result<(), Status>> {
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    /// Queues every registration of `names` before the committing task starts (as when a
    /// fleet attaches while the registrar is busy), then lets it run.
    async fn all_at_once(names: &[&str]) -> (Vec<Result<(), Status>>, Vec<Vec<String>>) {
        let (queue, waiting) = mpsc::channel(MAX_WAITING);
        let r = Arc::new(Registrar { queue });
        let tasks = start(&r, names);
        queued(&r, names.len()).await;
        let gate = Arc::new(Semaphore::new(1));
        let (commit, commits) = recording(gate);
        tokio::spawn(run(waiting, commit));
        let answers = answers(tasks).await;
        let commits = commits.lock().unwrap().clone();
        (answers, commits)
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:05}")).collect()
    }

    #[tokio::test]
    async fn registrations_waiting_together_share_one_commit() {
        let owned = names("n", 300);
        let names: Vec<&str> = owned.iter().map(String::as_str).collect();
        let (answers, commits) = all_at_once(&names).await;
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(commits.len(), 1, "300 nodes attaching at once, one command");
        assert_eq!(commits[0].len(), 300);
    }

    #[tokio::test]
    async fn registrations_arriving_during_a_commit_share_the_next() {
        let gate = Arc::new(Semaphore::new(0));
        let (commit, commits) = recording(gate.clone());
        let r = Arc::new(Registrar::with_commit(commit));
        let first = start(&r, &["first"]);
        while commits.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let owned = names("n", 299);
        let rest: Vec<&str> = owned.iter().map(String::as_str).collect();
        let rest = start(&r, &rest);
        queued(&r, 299).await;
        gate.add_permits(1);
        assert!(answers(first).await.iter().chain(&answers(rest).await).all(Result::is_ok));
        let sizes: Vec<usize> = commits.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 299], "the 299 that came while the first committed went in one command");
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_the_bound_and_the_rest_follow() {
        let owned = names("n", 1_201);
        let names: Vec<&str> = owned.iter().map(String::as_str).collect();
        let (answers, commits) = all_at_once(&names).await;
        assert!(answers.iter().all(Result::is_ok));
        let sizes: Vec<usize> = commits.iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_REGISTRATIONS_PER_COMMIT, MAX_REGISTRATIONS_PER_COMMIT, 201]);
    }

    #[tokio::test]
    async fn a_refused_batch_is_retried_node_by_node_and_only_the_bad_node_fails() {
        let names = ["n1", "n2", "bad", "n3"];
        let (answers, commits) = all_at_once(&names).await;
        for (name, a) in names.iter().zip(&answers) {
            assert_eq!(a.is_ok(), *name != "bad", "{name}: {a:?}");
        }
        assert_eq!(commits.len(), 1 + names.len(), "the whole batch, then each node alone");
    }

    #[tokio::test]
    async fn a_batch_whose_write_failed_fails_for_every_node_without_a_retry_each() {
        let names = ["n1", "unlucky", "n2"];
        let (answers, commits) = all_at_once(&names).await;
        for (name, a) in names.iter().zip(&answers) {
            let e = a.as_ref().expect_err(name);
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{name}: {e}");
        }
        assert_eq!(commits.len(), 1, "the write's failure is no node's fault: {commits:?}");
    }

    #[tokio::test]
    async fn a_node_attaching_twice_at_once_goes_in_two_commits() {
        let (answers, commits) = all_at_once(&["a", "b", "a", "c"]).await;
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(commits, [vec!["a", "b", "c"], vec!["a"]]);
    }
}
