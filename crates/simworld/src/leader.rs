//! What a replica does while it leads, beyond the log: every `CYCLE_MS` it makes sure that a
//! quorum still follows it (a linearizable read once the last is half a lease old), plans
//! with the real scheduler and commits the plan, drops expired reservations, and declares
//! silent nodes lost (together, while it leads the round's term: the server's
//! `liveness::declare_all`). It answers an agent's beat as the server's gateway does: it commits
//! the beat's observations as one report (a report that does not commit gets no answer),
//! marks a lost node ready only after that, and grants a lease with the node's directive
//! (`baton_server::desired`, what the real leader sends) only once a quorum has confirmed
//! it leads by a check begun after the beat arrived, shared with the beats that arrived
//! with it (`baton_server::quorum`, the server's own rule).
//!
//! A new term starts every node's silence afresh, so a node is declared lost only after a
//! whole heartbeat timeout under this leader. Silences, confirmations' age and the cycle are
//! timed on the replica's own clock (`clocks::Rate`), which may drift from the agents'.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_model::command::{Applied, Command, Observed, Op, Outcome, Response};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::state::State;
use baton_proto::v1::{Assignment, Directive, Running};
use baton_raft::replica::WallClock;
use baton_raft::{Replica, Role};
use baton_server::desired::{TermLists, desired};
use baton_server::liveness::{Silences, declare_all};
use baton_server::strays::Strays;
use baton_server::vanished::Vanished;
use turmoil::net::UdpSocket;

use crate::clocks::Rate;
use crate::timing::{CYCLE_MS, HEARTBEAT_TIMEOUT_MS, LEASE_MS, REQUEST_TIMEOUT_MS, STATE_DIGEST_MS, STRAY_SETTLE_MS};
use crate::truth::{Sabotage, Shared};
use crate::wire::{self, Beat, Grant};

/// The leader's proofs of leadership, on the replica's clock.
type Quorum = baton_server::quorum::Quorum<Rate>;

#[derive(Default)]
struct Leading {
    /// The replica's clock: every time below is on it.
    clock: Rate,
    /// The term this replica leads and directs agents in.
    term: Option<u64>,
    /// The last term it directed in (kept when it stops: what a deposed leader remembers).
    last_term: Option<u64>,
    /// Beats and silences, decided as the server's leader decides them (`Silences`), on this
    /// replica's clock. A node found silent is fenced until the state says lost: a beat
    /// answered between the finding and the commit would hand out a lease on work the
    /// commit then requeues elsewhere.
    silences: Silences,
    /// Per (node, agent boot): the newest beat whose observations are committed.
    acked: BTreeMap<(String, u64), u64>,
    /// When this replica last wrote a state digest (or began to lead).
    digest_ms: u64,
    /// Each node's directive, kept between beats as the server's leader keeps it.
    lists: Arc<TermLists>,
    /// Replicas beats list that their directive does not place, and replicas it places
    /// that beats stopped listing: the server's own bookkeeping.
    strays: Strays,
    vanished: Vanished,
}

type Lead = Arc<Mutex<Leading>>;

fn lock(l: &Lead) -> std::sync::MutexGuard<'_, Leading> {
    l.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the leader's side of replica `replica`, whose host's clock runs at `rate`, until the
/// host stops.
pub async fn run(replica: Replica, clock: WallClock, rate: Rate, truth: Shared) -> std::io::Result<()> {
    let leading = Arc::new(Mutex::new(Leading { clock: rate, ..Leading::default() }));
    let quorum = Arc::new(Quorum::with_clock(rate));
    let sock = Arc::new(UdpSocket::bind(("0.0.0.0", wire::LEADER_PORT)).await?);
    let side =
        Side { replica: replica.clone(), clock: clock.clone(), leading: leading.clone(), quorum: quorum.clone() };
    tokio::spawn(gateway(side, sock, truth.clone()));
    loop {
        tokio::time::sleep(rate.wait(CYCLE_MS)).await;
        if directing(&replica, &leading, &quorum, &truth).await {
            round(&replica, &clock, &leading, &truth).await;
        }
    }
}

/// Writes `op` stamped as the server's leader stamps its own commands (`State::stamp_ms`:
/// never behind the replicated clock, which a leader whose clock trails or stepped back
/// would otherwise stamp it behind).
async fn write(replica: &Replica, clock: &WallClock, op: Op) -> bool {
    let now_ms = replica.read_local(|s| s.stamp_ms(clock.now_ms()));
    write_answer(replica, now_ms, op).await.is_some()
}

/// What applying `op`, stamped `now_ms`, answered once committed; `None` when the write
/// failed or timed out.
async fn write_answer(replica: &Replica, now_ms: u64, op: Op) -> Option<Response> {
    let cmd = Command { now_ms, op };
    let written = tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), replica.write_on_leader(cmd)).await;
    written.ok()?.ok()
}

/// The scheduler and `apply` must agree: a decision of a plan applied to the very state it
/// was made from (nothing committed between) is never refused. A refusal there is one the
/// next cycle, made from the same state, makes again: the job never starts (or grows, or its
/// preemption never happens), and only its stale reason says anything. The property tests
/// hold the two against each other on generated states; this holds them on every state a
/// seed reaches (lends, suspensions, elastic gangs, windows, faults). Each refusal is a
/// violation, and counted on the seed's line (`refused`).
fn check_plan(truth: &Shared, replica_id: u64, answer: &Response) {
    let Ok(Applied { outcome: Outcome::PlanApplied { rejected, stale_by: 0, .. }, .. }) = answer else { return };
    let mut t = truth.lock();
    t.refused += rejected.len() as u64;
    for (i, why) in rejected {
        let what = format!("r{replica_id}'s own plan, on the state it was made from, has decision {i} refused: {why}");
        t.violation(crate::now_ms(), what);
    }
}

/// Whether this replica leads, confirmed by a quorum within the last half lease (checked
/// again when older, for up to a lease), as the server's leader loop decides it.
async fn directing(replica: &Replica, leading: &Lead, quorum: &Quorum, truth: &Shared) -> bool {
    let m = replica.metrics();
    if m.role != Role::Leader {
        lock(leading).term = None;
        return false;
    }
    let rate = lock(leading).clock;
    let leads = lock(leading).term == Some(m.term);
    let half = rate.wait(LEASE_MS / 2);
    let confirmed = (leads && quorum.fresh(half)) || quorum.confirm(replica, rate.wait(LEASE_MS)).await;
    let mut l = lock(leading);
    if !confirmed || replica.term() != m.term {
        l.term = None;
        return false;
    }
    let began = l.clock.now_ms();
    if l.term != Some(m.term) {
        l.term = Some(m.term);
        l.last_term = Some(m.term);
        let nodes: Vec<Name> = replica.read_local(|s| s.nodes().keys().cloned().collect());
        // What an earlier term declared is committed or gone by now (the read above).
        l.silences.reset(&nodes, began);
        l.digest_ms = began;
        truth.record(format!("r{} directs in term {}", replica.id(), m.term));
    }
    true
}

async fn round(replica: &Replica, clock: &WallClock, leading: &Lead, truth: &Shared) {
    // As the server's leader: planned at the time the plan is stamped with (this replica's
    // clock held to the quorum's, never before the replicated clock), which `apply` checks
    // it at.
    let clock_ms = replica.now_ms();
    let (now, plan, tick_due, nodes, ready) = replica.read_local(|s| {
        let now = s.stamp_ms(clock_ms);
        let nodes: Vec<Name> = s.nodes().keys().cloned().collect();
        let ready: Vec<Name> =
            s.nodes().values().filter(|n| n.status == NodeStatus::Ready).map(|n| n.spec.name.clone()).collect();
        (now, baton_sched::cycle(s, now), s.tick_due(now), nodes, ready)
    });
    if !plan.decisions.is_empty()
        && let Some(answer) = write_answer(replica, now, Op::ApplyPlan(plan)).await
    {
        check_plan(truth, replica.id(), &answer);
    }
    if tick_due {
        write(replica, clock, Op::Tick).await;
    }
    // As the server's leader: the state brought up to this build (accounting on, the newest
    // behaviour; every member here reads them).
    let oldest = replica.oldest_format();
    if let Some(op) = replica.read_local(|s| baton_model::behaviour::leader_upgrade(s, oldest)) {
        write(replica, clock, op).await;
    }
    // As the server's leader: a state digest now and then, which every replica checks.
    let digest_due = {
        let mut l = lock(leading);
        let at = l.clock.now_ms();
        let due = at >= l.digest_ms + STATE_DIGEST_MS;
        if due {
            l.digest_ms = at;
        }
        due
    };
    if digest_due {
        write(replica, clock, replica.state_digest_op()).await;
    }
    let at = lock(leading).clock.now_ms();
    let timeout_ms =
        if truth.lock().sabotage == Some(Sabotage::EarlyLoss) { LEASE_MS / 2 } else { HEARTBEAT_TIMEOUT_MS };
    let silent = {
        let mut l = lock(leading);
        l.silences.retain(&nodes);
        l.silences.silent(&ready, at, timeout_ms)
    };
    // As the server's leader: together, and only while still leading the round's term.
    // Committed (or no longer ready): the state says lost, and grants may resume (after the
    // node's report, `answer`). Not known to commit: it stays fenced and is declared again.
    let Some(term) = lock(leading).term else { return };
    let still = || replica.metrics().role == Role::Leader && replica.term() == term;
    let write_lost = |node: Name| async move {
        truth.record(format!("r{} declares {node} lost", replica.id()));
        write(replica, clock, Op::SetNodeStatus { node, status: NodeStatus::Lost }).await
    };
    let ready = |n: &Name| replica.read_local(|s| s.nodes().get(n).is_some_and(|n| n.status == NodeStatus::Ready));
    let declared = |n: &Name| lock(leading).silences.declared(n);
    declare_all(silent, still, write_lost, ready, declared).await;
}

/// What the gateway's answers need of the leader's side.
#[derive(Clone)]
struct Side {
    replica: Replica,
    clock: WallClock,
    leading: Lead,
    quorum: Arc<Quorum>,
}

/// Answers beats while this replica directs.
async fn gateway(side: Side, sock: Arc<UdpSocket>, truth: Shared) {
    let mut buf = vec![0u8; wire::MAX_DATAGRAM_BYTES];
    while let Ok((n, from)) = sock.recv_from(&mut buf).await {
        let Some(beat) = wire::decode::<Beat>(&buf[..n]) else { continue };
        let (side, sock, truth) = (side.clone(), sock.clone(), truth.clone());
        tokio::spawn(async move {
            let node = beat.node.clone();
            if let Some(grant) = answer(&side, &truth, beat).await {
                let salt = wire::salt(&[grant.term, grant.leader, grant.boot, grant.seq], &node);
                let to = std::net::SocketAddr::new(from.ip(), wire::AGENT_PORT);
                let copies = truth.lock().copies.clone();
                copies.send(&sock, wire::encode(&grant), to, salt).await;
            }
        });
    }
}

/// Whether grants skip the proof of leadership (the `UnconfirmedGrants` sabotage: a
/// deposed leader keeps granting in the last term it directed in).
fn unconfirmed(truth: &Shared) -> bool {
    truth.lock().sabotage == Some(Sabotage::UnconfirmedGrants)
}

/// The term this replica directs in, as far as its grants go.
fn directs(l: &Leading, truth: &Shared) -> Option<u64> {
    if unconfirmed(truth) { l.last_term } else { l.term }
}

async fn answer(side: &Side, truth: &Shared, beat: Beat) -> Option<Grant> {
    let Side { replica, clock, leading, quorum } = side;
    // On the quorum's clock: the grant needs a proof begun after this moment.
    let arrived_ms = quorum.now_ms();
    let term = directs(&lock(leading), truth)?;
    let node = Name::lit(&beat.node);
    {
        let mut l = lock(leading);
        let at = l.clock.now_ms();
        l.silences.touch(&node, at);
    }
    let lost = replica.read_local(|s| s.nodes().get(&node).map(|n| n.status == NodeStatus::Lost));
    let key = (beat.node.clone(), beat.boot);
    let mut observations = beat.observations;
    if truth.lock().sabotage == Some(Sabotage::CompletingStopsDropped) {
        replica.read_local(|s| observations.retain(|o| !ends_completing(s, o)));
    }
    let found = found(side, term, &node, &beat.running);
    for o in &found {
        truth.record(format!("r{} finds on {node}: {o:?}", replica.id()));
    }
    observations.extend(found.iter().cloned());
    // As the server's gateway: what a member of an older build cannot read goes as what it
    // reads (a rank's refused start as one killed here), and a report whose observations do
    // not commit renews nothing.
    let behaviour = replica.read_local(|s| s.behaviour());
    let observations = baton_model::format::for_members(observations, replica.oldest_format(), behaviour);
    if !observations.is_empty() {
        if !write(replica, clock, Op::Report { node: node.clone(), observations }).await {
            return None;
        }
        let mut l = lock(leading);
        l.strays.committed(&node, &found);
        l.vanished.committed(&node, &found);
        let acked = l.acked.entry(key.clone()).or_default();
        *acked = (*acked).max(beat.seq);
    }
    // And a lost node is ready again only once what it reports (its lease stops'
    // checkpoints) is committed, so nothing is placed there before.
    if lost == Some(true) {
        truth.record(format!("r{} finds {} back", replica.id(), beat.node));
        if !write(replica, clock, Op::SetNodeStatus { node: node.clone(), status: NodeStatus::Ready }).await {
            return None;
        }
    }
    // Confirmed by a quorum since the beat arrived, still directing in its term after the
    // writes, and not being declared lost.
    let within = lock(leading).clock.wait(LEASE_MS);
    if !unconfirmed(truth) && !quorum.confirm_since(replica, arrived_ms, within).await {
        return None;
    }
    let l = lock(leading);
    if directs(&l, truth) != Some(term) || l.silences.fenced(&node) {
        return None;
    }
    let acked_seq = l.acked.get(&key).copied().unwrap_or(0);
    let lists = l.lists.clone();
    drop(l);
    let leader = replica.id();
    let directive = replica.read_local(|s| directive(s, &node, term, leader, lists.node_list(term, s, &node)));
    Some(Grant { term, leader, boot: beat.boot, seq: beat.seq, acked_seq, lease_ms: LEASE_MS, directive })
}

/// Whether `o` tells the end of a rank of an ended attempt (`Sabotage::CompletingStopsDropped`).
fn ends_completing(s: &State, o: &Observed) -> bool {
    let (Observed::Stopped { job, attempt, rank, .. }
    | Observed::Exited { job, attempt, rank, .. }
    | Observed::LeaseExpired { job, attempt, rank, .. }
    | Observed::KilledHere { job, attempt, rank, .. }) = o
    else {
        return false;
    };
    s.completing(*job).is_some_and(|c| c.attempt == *attempt && c.ranks.contains_key(rank))
}

/// The strays and vanished replicas a beat's list shows against the node's directive in
/// `term`, as the server's gateway finds them (it checks against the list it last
/// published; here every grant sends the list, so the current one).
fn found(side: &Side, term: u64, node: &Name, listed: &[wire::Listed]) -> Vec<Observed> {
    let running: Vec<Running> = listed
        .iter()
        .map(|l| Running { job_id: l.job, attempt: l.attempt, rank: l.rank, phase: l.phase, ..Running::default() })
        .collect();
    let lists = lock(&side.leading).lists.clone();
    let published = side.replica.read_local(|s| lists.node_list(term, s, node));
    let l = lock(&side.leading);
    let now = l.clock.now_ms();
    let mut found = l.strays.check(node, &published, &running, STRAY_SETTLE_MS, now);
    found.extend(l.vanished.check(node, &published, &running, HEARTBEAT_TIMEOUT_MS, now));
    found
}

/// `node`'s directive from its list as the real leader keeps it (`kept`), encoded as the
/// real leader sends it; in debug builds (CI's seeds) checked against the whole computation
/// at every beat, so that every seed's faults (failovers, snapshots, lost nodes) exercise the
/// kept lists.
fn directive(s: &State, node: &Name, term: u64, leader_id: u64, kept: Vec<Assignment>) -> Vec<u8> {
    if cfg!(debug_assertions) {
        let whole = desired(s).remove(node).unwrap_or_default();
        assert!(kept == whole, "{node}'s kept directive differs from the whole computation's");
    }
    let d = Directive {
        term,
        leader_id,
        assignments: kept,
        heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS,
        lease_ms: LEASE_MS,
        state_index: s.applied(),
    };
    prost::Message::encode_to_vec(&d)
}

#[cfg(test)]
mod tests {
    use baton_model::rejection::Rejection;

    use super::*;

    fn plan_applied(rejected: Vec<(u32, Rejection)>, stale_by: u64) -> Response {
        let outcome = Outcome::PlanApplied { accepted: 0, rejected, stale_by };
        Ok(Applied { outcome, events: Vec::new() })
    }

    /// A refusal of a plan's decision is a violation only where the plan met the very state
    /// it was made from: with commands between (`stale_by`), a refusal is the plan checker
    /// doing its work.
    #[test]
    fn a_decision_refused_on_the_plans_own_state_is_a_violation() {
        let truth = Shared::default();
        let refused = vec![(2, Rejection::UnknownJob)];
        check_plan(&truth, 3, &plan_applied(refused.clone(), 1));
        check_plan(&truth, 3, &plan_applied(Vec::new(), 0));
        let seen = |truth: &Shared| {
            let t = truth.lock();
            (t.refused, t.violations.len())
        };
        assert_eq!(seen(&truth), (0, 0));
        check_plan(&truth, 3, &plan_applied(refused, 0));
        let t = truth.lock();
        assert_eq!(t.refused, 1);
        let told = &t.violations[0];
        assert!(told.contains("r3's own plan") && told.contains("decision 2 refused: unknown job"), "{told}");
    }
}
