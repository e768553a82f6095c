//! `Watch`: events as this replica applies them. A watcher that falls more than the event
//! buffer behind gets a `Lagged` event saying how many batches it missed, then continues.
//!
//! The caller is checked again before each batch is sent, against the state the batch is
//! judged by, and every `STREAM_RECHECK_MS` while no event flows ([`Caller::refresh`]): a
//! revoked token's stream ends with UNAUTHENTICATED and sends nothing applied after the
//! revocation; one whose grants shrank sends from then on only what they still show.

use std::sync::Arc;
use std::time::Duration;

use baton_model::event::Event as ModelEvent;
use baton_proto::v1::{Event, WatchRequest};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status};

use super::visible::{View, seen_as, shown, view};
use super::{Api, EventStream};
use crate::auth::{Caller, STREAM_RECHECK_MS};
use baton_proto::tls::CertGuard;

/// Events buffered per watcher between this replica and the client.
const WATCH_BUFFER: usize = 1_024;

pub async fn watch(
    api: &Api,
    mut who: Caller,
    identity: String,
    cert: CertGuard,
    r: WatchRequest,
) -> Result<Response<EventStream>, Status> {
    // Held by the stream's task: the slots free when the stream ends or its client goes.
    let client_slot = api.ctx.watchers.acquire(identity, api.ctx.settings.max_watch_streams_per_client)?;
    let slot = api.ctx.watch_slots.clone().try_acquire_owned().map_err(|_| {
        Status::resource_exhausted(format!(
            "{} watch streams are open on this replica (max_watch_streams); close one or watch through another replica",
            api.ctx.settings.max_watch_streams
        ))
    })?;
    let mut events = api.ctx.replica.subscribe_events();
    let job = r.job.clone();
    let replay: Vec<Event> =
        if r.replay { replay(api, &who, &job, api.ctx.settings.max_replay_events).await? } else { Vec::new() };
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let mut closing = api.ctx.closing.subscribe();
    let ctx = api.ctx.clone();
    tokio::spawn(async move {
        let _slots = (slot, client_slot);
        // Judged when the stream opened; the token is checked again before each part of
        // them is sent, so a long replay to a slow client ends soon after a revocation.
        let mut replay = replay.into_iter().peekable();
        while replay.peek().is_some() {
            if let Err(s) = cert.check().and_then(|()| ctx.replica.read_local(|s| who.refresh(s))) {
                let _ = tx.send(Err(s)).await;
                return;
            }
            for e in replay.by_ref().take(WATCH_BUFFER) {
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
        }
        let mut recheck = tokio::time::interval(Duration::from_millis(STREAM_RECHECK_MS));
        recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                next = events.recv() => next,
                // A revocation makes no event: a quiet stream must look for itself.
                _ = recheck.tick() => match cert.check().and_then(|()| ctx.replica.read_local(|s| who.refresh(s))) {
                    Ok(()) => continue,
                    Err(s) => {
                        let _ = tx.send(Err(s)).await;
                        return;
                    }
                },
                // Its output (a guard, not Send) must not live across the awaits above.
                () = async { let _ = closing.wait_for(|c| *c).await; } => return,
                // A client that went away is noticed even while no event flows.
                () = tx.closed() => return,
            };
            let batch: Arc<[ModelEvent]> = match next {
                Ok(b) => b,
                Err(RecvError::Lagged(n)) => {
                    let lag = Event {
                        kind: baton_proto::v1::EventKind::Lagged.into(),
                        message: format!("missed {n} batches of events"),
                        ..Default::default()
                    };
                    if tx.send(Ok(lag)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let wanted = batch.iter().filter(|e| job.is_empty() || e.job.as_ref().is_some_and(|n| n.as_str() == job));
            // Judged against this replica's state, which has applied the batch (its jobs are
            // there), with the caller's rights in that same state: a revocation applied
            // before any event of the batch is in it, so no event after it is sent.
            // The certificate first, outside the state's lock (it parses the certificate).
            let out: Result<Vec<Event>, Status> = cert.check().and_then(|()| {
                ctx.replica.read_local(|s| {
                    who.refresh(s)?;
                    Ok(wanted.filter_map(|e| shown(s, &who, e)).collect())
                })
            });
            let out = match out {
                Ok(out) => out,
                Err(s) => {
                    let _ = tx.send(Err(s)).await;
                    return;
                }
            };
            for e in out {
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// The events a replay sends, gathered from a snapshot of the state on a blocking thread
/// (`leader::on_applied_state`), after a linearizable read: gathering and sorting every
/// retained event under the state's read lock held up apply.
async fn replay(api: &Api, who: &Caller, job: &str, max: usize) -> Result<Vec<Event>, Status> {
    api.read(|_| ()).await?;
    let (who, job) = (who.clone(), job.to_string());
    crate::leader::on_applied_state(&api.ctx.replica, move |s| newest_events(s, &who, &job, max))
        .await
        .ok_or_else(|| Status::unavailable("this replica is shutting down"))
}

/// The newest `max` events `who` may see (of job `job`, or of every job if empty), oldest
/// first, after an event saying how many older ones were left out, if any.
fn newest_events(s: &baton_model::State, who: &Caller, job: &str, max: usize) -> Vec<Event> {
    // Each with its job's view and its place in job order, which breaks ties of time.
    let mut all: Vec<(u64, usize, View, &ModelEvent)> = s
        .jobs()
        .values()
        .filter(|j| job.is_empty() || j.spec.name.as_str() == job)
        .map(|j| (view(s, who, j), j))
        .filter(|(v, _)| *v != View::Hidden)
        .flat_map(|(v, j)| j.events.iter().map(move |e| (v, e)))
        .enumerate()
        .map(|(at, (v, e))| (e.at_ms, at, v, e))
        .collect();
    let total = all.len();
    if total > max {
        all.select_nth_unstable_by_key(total - max, |(t, at, ..)| (*t, *at));
        all.drain(..total - max);
    }
    all.sort_unstable_by_key(|(t, at, ..)| (*t, *at));
    let mut out = Vec::with_capacity(all.len() + 1);
    if total > max {
        out.push(Event {
            kind: baton_proto::v1::EventKind::Lagged.into(),
            message: format!("the replay holds the newest {max} of {total} events (max_replay_events)"),
            ..Default::default()
        });
    }
    out.extend(all.into_iter().filter_map(|(_, _, v, e)| seen_as(s, who, v, e)));
    out
}
