//! The leader loop: while this replica leads, whenever the applied index moves and at least
//! every `cycle_interval_ms` it
//! 1. publishes each node's desired assignments to the agent hub,
//! 2. runs a scheduling cycle on a snapshot of the applied state, off the state's lock and
//!    the async workers, and proposes the plan (which `apply` re-checks: the plan is
//!    optimistic); once some of it is applied, publishes the state with it instead of the
//!    one read, so that its placements and stops go out at once,
//! 3. declares nodes whose agents went silent lost,
//! 4. writes a `Tick` when reservations may have expired,
//! 5. brings the state up to this build (accounting on, the newest apply behaviour) once
//!    every member reads what that takes.
//!
//! It decides nothing itself: `sched` decides, and this loop only does the IO.

use std::sync::Arc;
use std::time::Duration;

use baton_model::State;
use baton_model::command::{Command, Op, Outcome};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::plan::Plan;
use baton_raft::types::RaftMetrics;
use baton_raft::{Replica, Role};
use tokio::sync::watch;
use tracing::Instrument;

use crate::Ctx;

/// What one look at the state yields.
struct Round {
    plan: Plan,
    nodes: Vec<Name>,
    ready: Vec<Name>,
    tick_due: bool,
    /// `State::applied` of the state the round read.
    state_index: u64,
    /// The time the round planned at, which its plan is stamped with.
    now_ms: u64,
}

pub async fn run(ctx: Arc<Ctx>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut metrics = ctx.replica.watch();
    loop {
        let m = ctx.replica.metrics();
        if m.role == Role::Leader {
            let watching = tokio::spawn(watch_quorum(ctx.clone(), m.term));
            lead(&ctx, m.term, &mut shutdown).await;
            watching.abort();
            ctx.hub.set_leading(None);
        }
        tokio::select! {
            r = metrics.changed() => if r.is_err() { return },
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// Leads until the term ends or the server shuts down. Agents are directed only from a
/// state that holds everything committed before this term, and only while a quorum has
/// confirmed this replica's leadership within the lease.
async fn lead(ctx: &Ctx, term: u64, shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    tracing::info!(term, "leading: waiting for the state to hold every earlier commit");
    let mut metrics = ctx.replica.watch();
    let interval = Duration::from_millis(ctx.settings.cycle_interval_ms);
    let mut idle_plan_at: Option<u64> = None;
    let mut upgrade_tried: Option<tokio::time::Instant> = None;
    // The first digest of a term one interval after it began.
    let mut digest_written = tokio::time::Instant::now();
    loop {
        let m = ctx.replica.metrics();
        if m.role != Role::Leader || m.term != term || *shutdown.borrow() {
            tracing::info!(term, "no longer leading");
            return;
        }
        let mut thought = Duration::ZERO;
        if directing(ctx, term).await {
            let applied = ctx.replica.read_local(|s| s.applied());
            // A plan that changed nothing is not retried until something else changes or time passes.
            if idle_plan_at != Some(applied) {
                (idle_plan_at, thought) = round(ctx, term).await;
            }
            upgrade(ctx, &mut upgrade_tried).await;
            state_digest(ctx, &mut digest_written).await;
        }
        // Client writes wait here, or at another replica that forwarded them here.
        let writes_wait = ctx.client_writes.any() || ctx.replica.forwarded_writes_wait();
        let rest = rest_after(thought, interval, writes_wait);
        // What the round saw; changes from here on, its own plan's commit aside, count.
        let since = trigger(&metrics.borrow_and_update());
        tokio::select! {
            () = async {
                tokio::time::sleep(rest).await;
                changed_since(&mut metrics, since).await;
            } => {}
            () = tokio::time::sleep(interval) => { idle_plan_at = None; }
            _ = shutdown.changed() => {}
        }
    }
}

/// How long a leader waits before it tries again to bring the state up to this build (turn
/// accounting on, raise the behaviour), while some member cannot read the format that carries
/// it (a rolling upgrade under way).
const UPGRADE_RETRY: Duration = Duration::from_secs(10);

/// Writes what brings the state up to what this build does (`baton_model::behaviour::
/// leader_upgrade`): accounting on in a cluster upgraded from a build without it, then the
/// newest apply behaviour. The format gate refuses each until every member reads its format,
/// so that no member gets a snapshot or a behaviour it cannot follow.
async fn upgrade(ctx: &Ctx, tried: &mut Option<tokio::time::Instant>) {
    let oldest = ctx.replica.oldest_format();
    let Some(op) = ctx.replica.read_local(|s| baton_model::behaviour::leader_upgrade(s, oldest)) else { return };
    if tried.is_some_and(|t| t.elapsed() < UPGRADE_RETRY) {
        return;
    }
    let first = tried.is_none();
    *tried = Some(tokio::time::Instant::now());
    let name = op.name();
    match ctx.replica.write(Command { now_ms: stamp_ms(ctx), op }).await {
        Ok(Ok(_)) => {
            // The next one, if any, at once.
            *tried = None;
            tracing::info!(op = name, "the state is brought up to this build");
        }
        Ok(Err(e)) => tracing::warn!(op = name, error = %e, "the leader's upgrade was refused"),
        // Said once a term at info; then at debug, every retry, so an upgrade's hours do not
        // fill the log.
        Err(e) if first => tracing::info!(
            op = name,
            error = %e,
            retry_s = UPGRADE_RETRY.as_secs(),
            "not yet (a member may not read its format yet)"
        ),
        Err(e) => tracing::debug!(op = name, error = %e, "not yet"),
    }
}

/// Writes a state digest (`baton_model::digest`) once `state_digest_interval_ms` has passed
/// since the last: a mark every replica hashes its state at, carrying this replica's hash of
/// the previous one for every replica to compare. Refused while a member does not read the
/// format that carries it (a rolling upgrade): tried again an interval later.
async fn state_digest(ctx: &Ctx, written: &mut tokio::time::Instant) {
    let every = Duration::from_millis(ctx.settings.state_digest_interval_ms);
    if every.is_zero() || written.elapsed() < every {
        return;
    }
    *written = tokio::time::Instant::now();
    write(ctx, ctx.replica.state_digest_op()).await;
}

/// Rest after a round, per unit of its duration, before a state change may start the next,
/// while client writes wait (`Ctx::client_writes`, or forwarded by the other replicas). A
/// long backlog makes a round long: with submits committing all the time, back-to-back
/// rounds took nearly all of the leader's CPU and held off the applies that acknowledge
/// submits (then under the state's lock; now the cycle runs on a snapshot, but it still
/// takes the CPU). Resting three times the round's length keeps rounds to at most a quarter
/// of the leader's time; a round places everything placeable at once, so placement keeps up
/// with fewer, larger plans.
const REST_PER_ROUND: u32 = 3;

/// The same while no client write waits. Then the next round is most often the next step of
/// work already decided (the placement of a preemptor whose victims have stopped, then its
/// start), and three rests of three rounds each were most of an urgent job's wait at 10,000
/// nodes (stop 60: 1.15 s p99 for 100 urgent jobs, with cycles of 91 ms). Resting one
/// round's length still leaves the agents' reports half of the leader's time.
const REST_PER_ROUND_QUIET: u32 = 1;

/// How long to rest after a round that took `round`: never past the cycle interval.
fn rest_after(round: Duration, interval: Duration, writes_wait: bool) -> Duration {
    let per_round = if writes_wait { REST_PER_ROUND } else { REST_PER_ROUND_QUIET };
    round.saturating_mul(per_round).min(interval)
}

/// What a round depends on: the applied state, and whether and in which term this replica
/// leads. openraft publishes metrics on nearly every pass of its core loop (heartbeat acks,
/// replication progress), so waking on any metrics change ran rounds far more often than the
/// state changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Trigger {
    applied: Option<u64>,
    term: u64,
    leading: bool,
}

fn trigger(m: &RaftMetrics) -> Trigger {
    Trigger { applied: m.last_applied.map(|id| id.index), term: m.current_term, leading: m.state.is_leader() }
}

/// Waits until the applied index moves or the leadership changes (not for any metrics
/// change); returns at once if the channel closed, so the caller sees the replica stopped.
/// A plan's refused decisions as logged: each decision's index and why, in words.
fn words(rejected: &[(u32, baton_model::rejection::Rejection)]) -> Vec<String> {
    rejected.iter().map(|(i, why)| format!("{i}: {why}")).collect()
}

#[cfg(test)]
async fn state_changed(metrics: &mut watch::Receiver<RaftMetrics>) {
    let since = trigger(&metrics.borrow_and_update());
    changed_since(metrics, since).await;
}

/// As `state_changed`, against what was seen at `since` (changes made while the leader
/// rested count).
async fn changed_since(metrics: &mut watch::Receiver<RaftMetrics>, since: Trigger) {
    let _ = metrics.wait_for(|m| trigger(m) != since).await;
}

/// Whether this replica may direct agents now. A linearizable read proves leadership to a
/// quorum and waits until the state holds every entry committed before it, this term's
/// first entry included, and every entry this replica's log held when it opened (a leader
/// restarted in its own term: `read_index_here` in the raft crate), so the first publish is
/// built from the whole committed state. It
/// is repeated once the last proof is half a lease old; a check that goes unanswered is
/// tried again for up to a lease (`Quorum::confirm`), and without a proof by then the hub
/// stops leading (the agents' streams end, their leases are not renewed) until one comes back.
async fn directing(ctx: &Ctx, term: u64) -> bool {
    let lease = Duration::from_millis(ctx.settings.lease_ms);
    let leading = *ctx.hub.leading().borrow() == Some(term);
    if leading && ctx.quorum.fresh(lease / 2) {
        return true;
    }
    if !ctx.quorum.confirm(&ctx.replica, lease).await {
        stop_directing(ctx, term);
        return false;
    }
    if !leading {
        tracing::info!(term, "leading: the state holds every earlier commit; directing agents");
        let nodes: Vec<Name> = ctx.replica.read_local(|s| s.nodes().keys().cloned().collect());
        ctx.liveness.reset(&nodes);
        // The first directives are published before any agent may attach, from the state
        // the proof caught up with: not after this term's first cycle, which with a large
        // backlog added its length to every failover.
        if !publish_applied(ctx, term).await {
            return false;
        }
        ctx.hub.set_leading(Some(term));
    }
    true
}

/// Stops directing agents once no quorum confirms this leader, also while the leader loop
/// waits on one of its writes: a leader cut off from its peers in the middle of a write
/// waits for it up to the request timeout (10 s by default), far past a lease, and the loop
/// asks `directing` only between writes (a CI run found the agents' stream still flowing
/// 5 s after the cut: `tests/suite/leader_side.rs`,
/// `a_leader_cut_off_from_its_quorum_stops_directing`). It only takes leading away; the
/// loop's `directing` gives it back with a proof.
async fn watch_quorum(ctx: Arc<Ctx>, term: u64) {
    let lease = Duration::from_millis(ctx.settings.lease_ms);
    loop {
        tokio::time::sleep(lease / 2).await;
        let leading = *ctx.hub.leading().borrow() == Some(term);
        if leading && !ctx.quorum.fresh(lease / 2) && !ctx.quorum.confirm(&ctx.replica, lease).await {
            stop_directing(&ctx, term);
        }
    }
}

/// No quorum confirmed this leader within a lease: the agents' streams end and their leases
/// are not renewed until a proof comes back (said once, by whichever check saw it first).
fn stop_directing(ctx: &Ctx, term: u64) {
    if *ctx.hub.leading().borrow() == Some(term) {
        tracing::warn!(
            term,
            lease_ms = ctx.settings.lease_ms,
            "no quorum confirms this leader; agents are no longer directed"
        );
    }
    ctx.hub.set_leading(None);
}

/// One pass; returns the applied count if its plan was refused whole (so the same plan is
/// not proposed again on the same state), and how long it took to think.
async fn round(ctx: &Ctx, term: u64) -> (Option<u64>, Duration) {
    let clock_ms = ctx.replica.now_ms();
    let began = std::time::Instant::now();
    let metrics = ctx.metrics.clone();
    let lists = ctx.lists.clone();
    let Some((r, wanted)) = on_applied_state(&ctx.replica, move |s| {
        // The time the plan is stamped with, and so the time `apply` checks it at, read off
        // the state the cycle reads: planned at this replica's clock alone (behind the
        // replicated clock by up to the skew bound, or more after a step back), the cycle
        // made decisions `apply` then refused.
        let now = s.stamp_ms(clock_ms);
        let began = std::time::Instant::now();
        let plan = baton_sched::cycle(s, now);
        metrics.observe_cycle(began.elapsed().as_secs_f64(), considered(s), &plan.decisions);
        let r = Round {
            plan,
            nodes: s.nodes().keys().cloned().collect(),
            ready: s.nodes().values().filter(|n| n.status == NodeStatus::Ready).map(|n| n.spec.name.clone()).collect(),
            tick_due: s.tick_due(now),
            state_index: s.applied(),
            now_ms: now,
        };
        // A plan's state goes out once applied (below); only a round that plans nothing
        // publishes what it read.
        let wanted = r.plan.decisions.is_empty().then(|| lists.update(term, s));
        (r, wanted)
    })
    .await
    else {
        return (None, began.elapsed());
    };
    let thought = began.elapsed();
    let cycle = crate::trace::cycle_span(term, &r.plan.decisions);
    let mut refused = None;
    // What the round read goes out if it planned nothing; else the state after its plan
    // (which holds all of it: each changed node is sent one directive, not two).
    if let Some((lists, whole)) = wanted {
        ctx.hub.publish(term, r.state_index, lists, whole);
    } else {
        let n = r.plan.decisions.len();
        let outcome = write_at(ctx, r.now_ms, Op::ApplyPlan(r.plan)).instrument(cycle).await;
        if let Some(Outcome::PlanApplied { accepted, .. }) = &outcome {
            ctx.metrics.observe_plan(*accepted as u64);
        }
        match outcome {
            Some(Outcome::PlanApplied { accepted: 0, rejected, stale_by }) => {
                let rejected = words(&rejected);
                tracing::debug!(decisions = n, stale_by, ?rejected, "plan refused whole");
                refused = Some(ctx.replica.read_local(|s| s.applied()));
            }
            Some(Outcome::PlanApplied { accepted, rejected, stale_by }) if !rejected.is_empty() => {
                let rejected = words(&rejected);
                tracing::debug!(accepted, stale_by, ?rejected, "plan partly refused");
            }
            _ => {}
        }
        // Also after a refused plan or a failed write: the state as applied now is at
        // least as new as the one read.
        publish_applied(ctx, term).await;
    }
    let timeout = Duration::from_millis(ctx.settings.heartbeat_timeout_ms);
    ctx.liveness.retain(&r.nodes);
    declare_lost(ctx, term, ctx.liveness.silent(&r.ready, timeout)).await;
    if r.tick_due {
        write(ctx, Op::Tick).await;
    }
    (refused, thought)
}

/// Declares the `silent` nodes lost while this replica still leads `term` and is not
/// shutting down (`liveness::declare_all`). A replica told to stop waits for its leader
/// loop, which waited for all of a deposed leader's writes: SIGTERM took minutes.
async fn declare_lost(ctx: &Ctx, term: u64, silent: Vec<Name>) {
    let leading = || {
        let m = ctx.replica.metrics();
        !*ctx.closing.borrow() && m.role == Role::Leader && m.term == term
    };
    let write_lost = |node: Name| async move {
        tracing::warn!(node = %node, timeout_ms = ctx.settings.heartbeat_timeout_ms, "agent silent; node lost");
        write(ctx, Op::SetNodeStatus { node, status: NodeStatus::Lost }).await.is_some()
    };
    let any = !silent.is_empty();
    let (ready, declared) = (|n: &Name| ctx.node_ready(n), |n: &Name| ctx.liveness.declared(n));
    crate::liveness::declare_all(silent, leading, write_lost, ready, declared).await;
    if any && !leading() {
        tracing::info!(term, "no longer leading, or shutting down; silent nodes are left to the next leader");
    }
}

/// Publishes the desired state of the state as applied now, with this round's plan: its
/// placements and stops go to the agents at once. The round published what it read
/// before its plan, and the next round comes only with another change or the cycle
/// interval, then after its own cycle: a second a hop at 1,000 nodes under load. Whether
/// it published (not when the runtime shuts down).
async fn publish_applied(ctx: &Ctx, term: u64) -> bool {
    let lists = ctx.lists.clone();
    let built = on_applied_state(&ctx.replica, move |s| (s.applied(), lists.update(term, s)));
    let Some((state_index, (lists, whole))) = built.await else { return false };
    ctx.hub.publish(term, state_index, lists, whole);
    true
}

/// How often a replica that does not lead brings its kept lists up to the applied state.
const WARM_EVERY: Duration = Duration::from_secs(1);

/// Keeps the desired lists warm while this replica does not lead (`TermLists::warm`), so
/// that its first publish as a new leader rebuilds a second's changes, not every job. A
/// warm-up that ends after this replica began to lead only costs its next publish being
/// whole again: the lists it leaves are marked as no term's.
pub(crate) async fn keep_lists_warm(ctx: Arc<Ctx>, mut shutdown: watch::Receiver<bool>) {
    let mut warmed_at = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(WARM_EVERY) => {}
            _ = shutdown.changed() => return,
        }
        let applied = ctx.replica.read_local(|s| s.applied());
        if ctx.replica.metrics().role == Role::Leader || warmed_at == Some(applied) {
            continue;
        }
        let lists = ctx.lists.clone();
        if on_applied_state(&ctx.replica, move |s| lists.warm(s)).await.is_none() {
            return;
        }
        warmed_at = Some(applied);
    }
}

/// Runs `think` on a snapshot of the applied state, on a blocking thread. The snapshot is
/// taken under the state machine's read lock, and costs milliseconds at 50,000 nodes (the
/// state's large collections are copy-on-write); the lock is released before `think`
/// starts, so applies never wait for a scheduling cycle, and a cycle never holds up the
/// async workers that answer heartbeats. A plan made on a snapshot is safe: `apply`
/// re-checks it against the state it lands on (`Plan::based_on`).
///
/// `None` when the runtime shuts down under it; a panic in `think` goes on in the caller.
pub(crate) async fn on_applied_state<T: Send + 'static>(
    replica: &Replica,
    think: impl FnOnce(&State) -> T + Send + 'static,
) -> Option<T> {
    let snapshot = replica.read_local(State::clone);
    match tokio::task::spawn_blocking(move || think(&snapshot)).await {
        Ok(t) => Some(t),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => None,
        },
    }
}

/// Jobs a cycle looks at: those waiting and those stopping for a preemptor.
fn considered(s: &baton_model::State) -> usize {
    use baton_model::job::JobState;
    s.jobs().values().filter(|j| matches!(j.state, JobState::Pending | JobState::Preempting)).count()
}

/// The time the leader stamps its own commands with (`State::stamp_ms`; the state refuses
/// a Tick from behind its clock).
fn stamp_ms(ctx: &Ctx) -> u64 {
    let clock_ms = ctx.replica.now_ms();
    ctx.replica.read_local(|s| s.stamp_ms(clock_ms))
}

async fn write(ctx: &Ctx, op: Op) -> Option<Outcome> {
    write_at(ctx, stamp_ms(ctx), op).await
}

/// `write`, stamped `now_ms`: a plan carries the time its cycle decided at, so that `apply`
/// checks each decision (time limits, a window's start) at the time it was made for.
async fn write_at(ctx: &Ctx, now_ms: u64, op: Op) -> Option<Outcome> {
    let name = op.name();
    let span = crate::trace::commit_span(name, ctx.replica.metrics().term);
    match ctx.replica.write(Command { now_ms, op }).instrument(span).await {
        Ok(Ok(applied)) => Some(applied.outcome),
        Ok(Err(e)) => {
            tracing::warn!(op = name, error = %e, "leader's command refused");
            None
        }
        Err(e) => {
            tracing::warn!(op = name, error = %e, "leader's command not committed");
            None
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn a_metrics_change_that_moves_nothing_starts_no_round() {
        let (tx, mut rx) = watch::channel(RaftMetrics::new_initial(1));
        // A heartbeat ack: openraft publishes it, the state is the same.
        tx.send_modify(|m| m.millis_since_quorum_ack = Some(3));
        assert!(state_changed(&mut rx).now_or_never().is_none(), "woke on a change of nothing a round uses");
    }

    #[test]
    fn a_new_applied_index_or_term_starts_a_round() {
        let (tx, mut rx) = watch::channel(RaftMetrics::new_initial(1));
        let mut pending = Box::pin(state_changed(&mut rx));
        assert!((&mut pending).now_or_never().is_none());
        tx.send_modify(|m| m.current_term = 2);
        assert!(pending.now_or_never().is_some());

        let mut pending = Box::pin(state_changed(&mut rx));
        assert!((&mut pending).now_or_never().is_none());
        let applied = openraft_log_id(2, 7);
        tx.send_modify(|m| m.last_applied = Some(applied));
        assert!(pending.now_or_never().is_some());
    }

    #[test]
    fn a_long_round_rests_three_times_its_length_and_never_past_the_interval() {
        let interval = Duration::from_millis(500);
        assert_eq!(rest_after(Duration::from_millis(100), interval, true), Duration::from_millis(300));
        assert_eq!(rest_after(Duration::from_millis(600), interval, true), interval);
        assert_eq!(rest_after(Duration::from_micros(50), interval, true), Duration::from_micros(150));
    }

    #[test]
    fn with_no_client_write_waiting_a_round_rests_its_own_length() {
        let interval = Duration::from_millis(500);
        assert_eq!(rest_after(Duration::from_millis(100), interval, false), Duration::from_millis(100));
        assert_eq!(rest_after(Duration::from_millis(600), interval, false), interval);
    }

    #[test]
    fn a_change_made_while_resting_starts_the_next_round() {
        let (tx, mut rx) = watch::channel(RaftMetrics::new_initial(1));
        let since = trigger(&rx.borrow_and_update());
        // Applied while the leader rested: seen by the receiver already, yet it counts.
        tx.send_modify(|m| m.last_applied = Some(openraft_log_id(1, 3)));
        rx.borrow_and_update();
        assert!(changed_since(&mut rx, since).now_or_never().is_some(), "a change made during the rest was missed");
    }

    /// A one-replica cluster in memory, leading; the sender stops it.
    pub(crate) async fn lone_leader() -> (Replica, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let mut config = baton_raft::ReplicaConfig::new(1, "leader-test", addr.clone(), "unused");
        config.storage = baton_raft::replica::Storage::Memory;
        let replica = Replica::open(config).await.expect("open");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = replica.clone();
        tokio::spawn(async move {
            let _ = serving.run(listener, async { drop(stopped.await) }).await;
        });
        replica.bootstrap([(1, addr)].into()).await.expect("bootstrap");
        while replica.metrics().role != Role::Leader {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (replica, stop)
    }

    fn put_class(now_ms: u64) -> Command {
        let class = baton_model::class::PriorityClass { name: Name::lit("c"), value: 1, preemptible: true };
        Command { now_ms, op: Op::PutClass(class) }
    }

    /// How long the cycle in the test below is held at most: far above what applying one
    /// command takes. Only a failing run waits this long.
    const HELD_MS: u64 = 10_000;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_apply_completes_while_a_cycle_runs() {
        let (replica, _stop) = lone_leader().await;
        replica.write(put_class(1)).await.expect("committed").expect("applied");
        let before = replica.read_local(|s| s.applied());
        let (entered, entered_rx) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let thinker = replica.clone();
        let cycle = tokio::spawn(async move {
            on_applied_state(&thinker, move |s| {
                entered.send(()).expect("the test waits");
                // Held here, as by a long cycle, until the test has applied a command; if
                // the apply is blocked by this cycle, it gives up after a while (the
                // runtime's timers may be stuck too, so the wait is not tokio's).
                let applied_meanwhile = released.recv_timeout(Duration::from_millis(HELD_MS)).is_ok();
                (s.applied(), applied_meanwhile)
            })
            .await
            .expect("the runtime runs")
        });
        tokio::task::spawn_blocking(move || entered_rx.recv()).await.expect("join").expect("the cycle started");
        replica.write(put_class(2)).await.expect("committed").expect("applied");
        let _ = release.send(());
        let (seen, applied_meanwhile) = cycle.await.expect("the cycle ends");
        assert!(applied_meanwhile, "the apply waited for the cycle to end");
        assert_eq!(seen, before, "the cycle saw the state as of its start");
        assert_eq!(replica.read_local(|s| s.applied()), before + 1);
    }

    /// A lone leader whose state has `nodes` registered, a server context on it, and its term.
    async fn leading_with(
        nodes: Vec<baton_model::node::NodeSpec>,
    ) -> (Replica, tokio::sync::oneshot::Sender<()>, Ctx, u64) {
        let (replica, stop) = lone_leader().await;
        let register = Command { now_ms: 1, op: Op::RegisterNodes(nodes) };
        replica.write(register).await.expect("committed").expect("applied");
        let term = replica.metrics().term;
        let ctx = Ctx::new(replica.clone(), crate::ServerSettings::default(), baton_proto::tls::Transport::Insecure);
        (replica, stop, ctx, term)
    }

    /// A new leader's first directives are built from the committed state as soon as a
    /// quorum has confirmed it, not after its first cycle: that cycle (hundreds of ms with a
    /// large backlog) was part of every failover, the agents reattached and waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_leader_directs_before_its_first_cycle() {
        let node = baton_model::fixture::gpu_node("n1", 8);
        let (replica, _stop, ctx, term) = leading_with(vec![node.clone()]).await;
        assert!(directing(&ctx, term).await, "a lone leader is confirmed by itself");
        let first = ctx.hub.current(&node.name, term).expect("a directive for n1 before any round");
        assert_eq!(first.state_index, replica.read_local(|s| s.applied()));
    }

    /// A leader declares silent nodes lost only while it leads the term its round began in:
    /// one deposed meanwhile leaves them to the new leader. It declares them together: their
    /// writes share raft entries, not one entry (and one commit's wait) each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_nodes_are_declared_lost_together_and_only_in_the_term_the_round_began() {
        let nodes: Vec<_> = (0..200).map(|i| baton_model::fixture::gpu_node(&format!("n{i}"), 8)).collect();
        let (replica, _stop, ctx, term) = leading_with(nodes.clone()).await;
        let names: Vec<Name> = nodes.iter().map(|n| n.name.clone()).collect();
        let status = |n: &Name| replica.read_local(|s| s.nodes()[n].status);
        declare_lost(&ctx, term - 1, names.clone()).await;
        assert!(
            names.iter().all(|n| status(n) == NodeStatus::Ready),
            "a round of an earlier term declared a node lost"
        );
        let before = replica.metrics().last_log_index.expect("a log");
        declare_lost(&ctx, term, names.clone()).await;
        assert!(names.iter().all(|n| status(n) == NodeStatus::Lost), "the leading term's round declares them");
        let entries = replica.metrics().last_log_index.expect("a log") - before;
        assert!(entries < 100, "200 nodes declared lost in {entries} raft entries: one at a time");
    }

    /// A replica shutting down declares nothing more: its leader loop ends with the round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_shutting_down_declares_no_node_lost() {
        let node = baton_model::fixture::gpu_node("n1", 8);
        let (replica, _stop, ctx, term) = leading_with(vec![node.clone()]).await;
        ctx.closing.send_replace(true);
        declare_lost(&ctx, term, vec![node.name.clone()]).await;
        assert_eq!(replica.read_local(|s| s.nodes()[&node.name].status), NodeStatus::Ready);
    }

    fn openraft_log_id(term: u64, index: u64) -> baton_raft::types::LogId {
        let mut id = baton_raft::types::LogId::default();
        id.leader_id.term = term;
        id.index = index;
        id
    }
}
