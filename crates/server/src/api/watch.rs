//! `Watch`: events as this replica applies them. A watcher that falls more than the event
//! buffer behind gets a `Lagged` event saying how many batches it missed, then continues.

use std::sync::Arc;

use baton_model::event::Event as ModelEvent;
use baton_proto::convert::event_to_proto;
use baton_proto::v1::{Event, WatchRequest};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Response, Status};

use super::visible::{self, View};
use super::{Api, EventStream};
use crate::auth::Caller;

/// Events buffered per watcher between this replica and the client.
const WATCH_BUFFER: usize = 1_024;

pub async fn watch(api: &Api, who: Caller, identity: String, r: WatchRequest) -> Result<Response<EventStream>, Status> {
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
    let replay: Vec<Event> = if r.replay {
        api.read(|s| {
            let mut all: Vec<&ModelEvent> = s
                .jobs()
                .values()
                .filter(|j| job.is_empty() || j.spec.name.as_str() == job)
                .flat_map(|j| j.events.iter())
                .collect();
            all.sort_by_key(|e| e.at_ms);
            all.into_iter().filter_map(|e| shown(s, &who, e)).collect()
        })
        .await?
    } else {
        Vec::new()
    };
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let mut closing = api.ctx.closing.subscribe();
    let ctx = api.ctx.clone();
    tokio::spawn(async move {
        let _slots = (slot, client_slot);
        for e in replay {
            if tx.send(Ok(e)).await.is_err() {
                return;
            }
        }
        loop {
            let next = tokio::select! {
                next = events.recv() => next,
                _ = closing.wait_for(|c| *c) => return,
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
            // Judged against this replica's state, which has applied the batch: its jobs are
            // there (the token's rights are those of when the stream opened).
            let out: Vec<Event> = ctx.replica.read_local(|s| wanted.filter_map(|e| shown(s, &who, e)).collect());
            for e in out {
                if tx.send(Ok(e)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// The event as `who` may see it, or `None`.
fn shown(s: &baton_model::State, who: &Caller, e: &ModelEvent) -> Option<Event> {
    match visible::event_view(s, who, e) {
        View::Hidden => None,
        View::Names => Some(visible::event_names_only(event_to_proto(e))),
        View::Private | View::Public => Some(event_to_proto(e)),
    }
}
