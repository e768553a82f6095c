//! The leader loop: while this replica leads, on every state change and at least every
//! `cycle_interval_ms` it
//! 1. publishes each node's desired assignments to the agent hub,
//! 2. runs a scheduling cycle on the applied state and proposes the plan (which `apply`
//!    re-checks: the plan is optimistic),
//! 3. declares nodes whose agents went silent lost,
//! 4. writes a `Tick` when reservations may have expired.
//!
//! It decides nothing itself: `sched` decides, and this loop only does the IO.

use std::sync::Arc;
use std::time::Duration;

use baton_model::command::{Command, Op, Outcome};
use baton_model::name::Name;
use baton_model::node::NodeStatus;
use baton_model::plan::Plan;
use baton_raft::Role;

use crate::Ctx;
use crate::clock::now_ms;
use crate::desired::desired;

/// What one look at the state yields.
struct Round {
    plan: Plan,
    nodes: Vec<Name>,
    ready: Vec<Name>,
    tick_due: bool,
}

pub async fn run(ctx: Arc<Ctx>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut metrics = ctx.replica.watch();
    loop {
        let m = ctx.replica.metrics();
        if m.role == Role::Leader {
            lead(&ctx, m.term, &mut shutdown).await;
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

/// Leads until the term ends or the server shuts down.
async fn lead(ctx: &Ctx, term: u64, shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    tracing::info!(term, "leading: scheduling cycles start");
    let nodes: Vec<Name> = ctx.replica.read_local(|s| s.nodes().keys().cloned().collect());
    ctx.liveness.reset(&nodes);
    ctx.hub.set_leading(Some(term));
    let mut metrics = ctx.replica.watch();
    let interval = Duration::from_millis(ctx.settings.cycle_interval_ms);
    let mut idle_plan_at: Option<u64> = None;
    loop {
        let m = ctx.replica.metrics();
        if m.role != Role::Leader || m.term != term || *shutdown.borrow() {
            tracing::info!(term, "no longer leading");
            return;
        }
        let applied = ctx.replica.read_local(|s| s.applied());
        // A plan that changed nothing is not retried until something else changes or time passes.
        if idle_plan_at != Some(applied) {
            idle_plan_at = round(ctx).await;
        }
        tokio::select! {
            _ = metrics.changed() => {}
            () = tokio::time::sleep(interval) => { idle_plan_at = None; }
            _ = shutdown.changed() => {}
        }
    }
}

/// One pass; returns the applied count if its plan was refused whole (so the same plan is
/// not proposed again on the same state).
async fn round(ctx: &Ctx) -> Option<u64> {
    let now = now_ms();
    let (r, wanted) = ctx.replica.read_local(|s| {
        let r = Round {
            plan: baton_sched::cycle(s, now),
            nodes: s.nodes().keys().cloned().collect(),
            ready: s.nodes().values().filter(|n| n.status == NodeStatus::Ready).map(|n| n.spec.name.clone()).collect(),
            tick_due: s.reservations().values().any(|res| res.deadline_ms < now),
        };
        (r, desired(s, now))
    });
    ctx.hub.publish(&r.nodes, wanted);
    let mut refused = None;
    if !r.plan.decisions.is_empty() {
        let n = r.plan.decisions.len();
        match write(ctx, Op::ApplyPlan(r.plan)).await {
            Some(Outcome::PlanApplied { accepted: 0, rejected }) => {
                tracing::debug!(decisions = n, ?rejected, "plan refused whole");
                refused = Some(ctx.replica.read_local(|s| s.applied()));
            }
            Some(Outcome::PlanApplied { accepted, rejected }) if !rejected.is_empty() => {
                tracing::debug!(accepted, ?rejected, "plan partly refused");
            }
            _ => {}
        }
    }
    let timeout = Duration::from_millis(ctx.settings.heartbeat_timeout_ms);
    for node in ctx.liveness.silent(&r.ready, timeout) {
        tracing::warn!(node = %node, timeout_ms = ctx.settings.heartbeat_timeout_ms, "agent silent; node lost");
        write(ctx, Op::SetNodeStatus { node, status: NodeStatus::Lost }).await;
    }
    if r.tick_due {
        write(ctx, Op::Tick).await;
    }
    refused
}

async fn write(ctx: &Ctx, op: Op) -> Option<Outcome> {
    let name = op.name();
    match ctx.replica.write(Command { now_ms: now_ms(), op }).await {
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
