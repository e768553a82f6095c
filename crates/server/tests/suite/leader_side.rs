//! The leader's side of "no job runs twice" (issue 9), with scripted agents: a new leader
//! directs only from its whole committed state, a deposed or cut-off leader stops
//! directing, and a stop's grace is a duration.

use crate::common;

use std::time::Duration;

use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::*;
use common::*;

/// Reads directives until the stream ends; panics if it still flows after `within`.
async fn stream_ends(agent: &mut FakeAgent, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, agent.directives.message()).await {
            Err(_) => panic!("the directive stream still flows after {within:?}; last: {:?}", agent.last),
            Ok(Ok(Some(d))) => agent.last = Some(d),
            Ok(Ok(None) | Err(_)) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_never_sends_a_directive_that_drops_a_running_job() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut c = cluster.client((leader + 1) % 3).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("j", "team-a", "train", 4))).await.unwrap();
    agent.until("j runs", |d| has(d, "j", Action::Run)).await;

    cluster.kill(leader).await;
    drop(agent);
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    // Every directive of the new leader, from the first, keeps j running (after the
    // first, each is asked for, as an agent waiting for a newer state does).
    for _ in 0..5 {
        let d = agent.until("any directive", |_| true).await;
        agent.report_awaiting(1).await.unwrap();
        assert!(has(&d, "j", Action::Run), "the new leader's directive drops j: {d:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_that_has_seen_a_higher_term_is_refused() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let term = agent.report(vec![]).await.unwrap().term;
    let mut g = AgentGatewayClient::connect(format!("http://{}", cluster.replicas[leader].addr)).await.unwrap();

    let err = g.attach(AttachRequest { node: Some(node("n1", 8)), term_seen: term + 1 }).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains(&format!("term_seen {}", term + 1)), "{}", err.message());

    let req = ReportRequest { node: "n1".into(), term_seen: term + 1, ..Default::default() };
    let err = g.report(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("deposed"), "{}", err.message());

    let req = ReportRequest { node: "n1".into(), term_seen: term, ..Default::default() };
    assert!(g.report(req).await.unwrap().into_inner().lease_ms > 0, "an equal term is this leader's own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_its_quorum_stops_directing() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    agent.until("a first directive", |_| true).await;
    for i in 0..3 {
        if i != leader {
            cluster.kill(i).await;
        }
    }
    // lease_ms is 600 in the test settings: the stream must end within a few of them.
    stream_ends(&mut agent, Duration::from_secs(5)).await;
    let reply = agent.report(vec![]).await;
    assert!(reply.map_or(true, |r| r.lease_ms == 0), "a leader without a quorum grants no lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_carries_the_whole_grace_as_a_duration_on_every_resend() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    c.put_queue(queue("research", 0)).await.unwrap();
    c.put_queue(queue("prod", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("low", "research", "train", 8))).await.unwrap();
    agent.until("low runs", |d| has(d, "low", Action::Run)).await;
    c.submit(submit_of(gpu_job("high", "prod", "inference", 8))).await.unwrap();
    agent.until("low is told to stop", |d| has(d, "low", Action::Stop)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    agent.report_awaiting(1).await.unwrap();
    let d = agent.until("a resent stop", |d| has(d, "low", Action::Stop)).await;
    let stop = d.assignments.iter().find(|a| a.job == "low").unwrap();
    // gpu_job grants 5 s; the agent counts it from when it first acts on the stop.
    assert_eq!(stop.grace_ms, 5_000, "grace is the granted duration, not what the leader's clock says is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_from_a_node_that_never_attached_is_refused_by_name() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut g = AgentGatewayClient::connect(format!("http://{}", cluster.replicas[leader].addr)).await.unwrap();
    let err = loop {
        match g.report(ReportRequest { node: "ghost".into(), ..Default::default() }).await {
            Err(s) if s.code() == tonic::Code::Unavailable => tokio::time::sleep(Duration::from_millis(50)).await,
            other => break other.expect_err("a report from an unknown node is refused"),
        }
    };
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().contains("\"ghost\"") && err.message().contains("attach"), "{}", err.message());
}

/// An agent whose lease was renewed after it ran out obeys only a directive built from a
/// state at least as new as the renewing reply's, and asks for one in its reports: it comes
/// also while nothing changes for the node (the leader sends an unchanged directive again
/// only when asked, or rarely), or the agent would wait for good. And each directive is no
/// newer than the state it was built from: a report answered later says as much or more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_directive_as_new_as_a_leases_state_follows_a_report_that_asks_for_it() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut c = cluster.client(leader).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("j", "team-a", "train", 4))).await.unwrap();
    let first = agent.until("j runs", |d| has(d, "j", Action::Run)).await;
    assert!(first.state_index > 0, "a directive without its state: {first:?}");
    for _ in 0..3 {
        // Something commits that this node's list does not show.
        c.put_queue(queue("team-b", 1)).await.unwrap();
        let reply = agent.report(vec![]).await.unwrap();
        assert!(reply.lease_ms > 0 && reply.state_index >= first.state_index, "{reply:?} after {first:?}");
        let want = (reply.term, reply.state_index);
        // Asked as the agent asks: in each report until it comes. One ask can be answered
        // with the list published before the leader's round caught up with the reply's
        // state (`Gateway::report`: "if still older, the agent asks again with its next report").
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let d = loop {
            agent.report_awaiting(reply.state_index).await.unwrap();
            if let Some(d) = agent.next_within(Duration::from_millis(300)).await
                && (d.term, d.state_index) >= want
            {
                break d;
            }
            assert!(tokio::time::Instant::now() < deadline, "no directive as new as the lease {want:?} within 10 s");
        };
        assert!(has(&d, "j", Action::Run), "{d:?}");
    }
}

/// Unchanged, a node's directive is not sent again unasked (every 2 s at 10,000 nodes was
/// 5,000 directives a second that changed nothing): after the first, nothing comes while
/// nothing changes for the node, though the cluster's state moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unchanged_directive_is_not_sent_again_unasked() {
    let cluster = Cluster::start(1).await;
    let leader = cluster.leader().await;
    let mut c = cluster.client(leader).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    c.submit(submit_of(gpu_job("j", "team-a", "train", 4))).await.unwrap();
    agent.until("j runs", |d| has(d, "j", Action::Run)).await;
    // Past the old resend interval (2 s), with commits and reports meanwhile.
    for i in 0..6 {
        c.put_queue(queue(&format!("other-{i}"), 1)).await.unwrap();
        agent.report(vec![]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let again = agent.next_within(Duration::from_millis(100)).await;
    assert!(again.is_none(), "an unchanged directive was sent again unasked: {again:?}");
}

/// A round's placements go to their agents as soon as its plan commits. Before, a round
/// published the desired state it had read (without its own plan) and the placements
/// waited for the next round: another state change or `cycle_interval_ms` later, and then
/// that round's whole cycle (at 1,000 nodes under load, about a second a hop; a preemption
/// makes two hops, its stops and its placement).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_placement_goes_to_its_agent_as_soon_as_its_plan_commits() {
    // No round comes by time, and nothing else changes the state after the submit.
    let slow = ::baton_server::ServerSettings { cycle_interval_ms: 60_000, heartbeat_timeout_ms: 60_000, ..settings() };
    let cluster = Cluster::start_with(1, slow).await;
    let leader = cluster.leader().await;
    let mut c = cluster.client(leader).await;
    c.put_queue(queue("team-a", 8)).await.unwrap();
    let mut agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    agent.report(vec![]).await.unwrap();
    c.submit(submit_of(gpu_job("j", "team-a", "train", 4))).await.unwrap();
    agent.until("j runs", |d| has(d, "j", Action::Run)).await;
}

/// A held attach is answered before the agent gives up on it.
const _: () = assert!(::baton_server::attach_hold::ATTACH_HOLD_MS < baton_agent::limits::ATTACH_TIMEOUT_MS);

/// Issue 37: a failover costs an agent about one attach, not a storm of them. An attach to a
/// follower whose leader went silent is held until a new leader is elected, then answered
/// with that leader's name, or with a stream once the follower leads and directs itself;
/// never with the dead leader's name (before, it was at once, and agents bounced between
/// the dead address and the followers until the election ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attach_in_a_failover_waits_for_the_new_leader_and_never_names_the_dead_one() {
    // An election takes 600 ms or more, so that the attach below lands well within it.
    let slow_election = |_: u64, rc: &mut baton_raft::ReplicaConfig| {
        rc.settings.election_timeout_min_ms = 600;
        rc.settings.election_timeout_max_ms = 700;
    };
    let mut cluster = Cluster::start_configured(3, settings(), slow_election).await;
    let leader = cluster.leader().await;
    let dead = cluster.replicas[leader].addr.clone();
    let live = [cluster.replicas[(leader + 1) % 3].addr.clone(), cluster.replicas[(leader + 2) % 3].addr.clone()];
    cluster.kill(leader).await;
    // Past two heartbeats without the leader, long before the followers may elect another.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let began = std::time::Instant::now();
    let (mut next, mut answers) = (live[0].clone(), Vec::new());
    loop {
        assert!(began.elapsed() < Duration::from_secs(10), "not attached within 10 s: {answers:?}");
        let mut c = AgentGatewayClient::connect(format!("http://{next}")).await.unwrap();
        let req = AttachRequest { node: Some(node("n1", 8)), term_seen: 0 };
        let status = match c.attach(req).await {
            Ok(_) => break,
            Err(s) => s,
        };
        let hint = status.metadata().get(baton_proto::LEADER_METADATA).and_then(|v| v.to_str().ok()).unwrap_or("");
        answers.push(format!("{:?} {hint:?} after {:?}", status.code(), began.elapsed()));
        assert_ne!(hint, dead, "an attach was sent to the dead leader: {answers:?}");
        next = if hint.is_empty() { live.iter().find(|a| **a != next).unwrap().clone() } else { hint.to_string() };
    }
    assert!(answers.len() <= 2, "attached after {} refusals: {answers:?}", answers.len());
}
