//! The format gate across restarts: a member that a leader has never heard (down since before
//! the leader's process started, as in a rolling upgrade that restarts each replica in turn)
//! is taken as reading the newest format the cluster has used, not this build's: commands of
//! a newer format wait for it, the others do not.

use crate::common;

use baton_model::command::Observed;
use baton_model::{Command, Name, Op};
use baton_raft::{Role, WriteError};
use common::*;
use std::time::Duration;

/// A command of format 5 (an agent's report of a rank it killed here).
fn killed_here() -> Command {
    let seen = Observed::KilledHere { job: 7, attempt: 1, rank: 0, rank_saved: false };
    Command { now_ms: 1, op: Op::Report { node: Name::lit("n1"), observations: vec![seen] } }
}

async fn restart(node: Node) -> Node {
    let id = node.id;
    let (dir, addr) = node.stop().await;
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("rebind");
    Node::start(id, CLUSTER, &dir, listener, settings()).await
}

/// Simulator seed 800 of one minute: replica 3, still on an older build, lost power just
/// after the leader was upgraded (restarted); the new leader had never heard it, left it
/// out as silent, raised what it commits to this build's format, and replica 3 came back
/// to entries its build cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_the_leader_never_heard_holds_newer_formats_back() {
    init_tracing();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = cluster(root.path(), 3, settings()).await;
    // Replica 3 runs an older build, reading formats up to 4; the leader hears it say so.
    let (dir, addr) = nodes.remove(2).stop().await;
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("rebind");
    let older = Node::start_reading(3, &dir, listener, settings(), 4).await;
    wait_for("a leader to hear that replica 3 reads format 4", || {
        nodes.iter().any(|n| n.replica.metrics().role == Role::Leader && n.replica.oldest_format() == 4).then_some(())
    })
    .await;

    // Replica 3 goes down; the other two restart (upgraded), so whichever leads next never
    // heard it, and asks it in vain.
    older.stop().await;
    let (a, b) = (nodes.remove(0), nodes.remove(0));
    let nodes = vec![restart(a).await, restart(b).await];
    let leader = leader_of(&nodes).await;
    let lead = nodes.iter().find(|n| n.id == leader).unwrap().replica.clone();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Taken as reading what the cluster used (only format-4 writes were committed), no more.
    assert_eq!(lead.format_used(), 4);
    assert_eq!(lead.oldest_format(), 4, "replica 3 was counted as reading this build's formats");
    // A write of a format the cluster used does not wait for it.
    lead.write(put("after")).await.unwrap().unwrap();
    match lead.write(killed_here()).await {
        Err(WriteError::FormatBehind(e)) => assert!(e.behind.iter().any(|(id, _)| *id == 3), "{e}"),
        other => panic!("a format-5 command committed while replica 3 may read only format 4: {other:?}"),
    }
    for n in nodes {
        n.stop().await;
    }
}
