//! The web dashboard every replica serves on its HTTP listener (`--metrics-listen`), beside
//! `GET /metrics` (docs/dashboard.md):
//!
//! - `/`, `/app.js`, `/app.css`: one page and its script, embedded in the binary; they hold
//!   no data, so they are served to anyone.
//! - `/api/cluster`, `/api/queues`, `/api/jobs`, `/api/jobs/NAME`, `/api/nodes`: JSON, the
//!   same messages (and the same access rules: another user's environment stays hidden) as
//!   the gRPC API's ClusterInfo, ListQueues, ListJobs, GetJob and ListNodes.
//! - `/api/usage?by=queue|user|pool&days=7&buckets=7`: GPU time per queue, user or pool in
//!   each bucket of the last days, from accounting's records and the attempts running now
//!   (the rows `baton usage` would show the caller), for the usage page's charts.
//! - `/api/events`: a `text/event-stream` of the events this replica applies, as `Watch`
//!   streams them (each event as its job's queue shows it to the caller, the caller checked
//!   again before each batch and every `STREAM_RECHECK_MS`, as a watch is); the page
//!   refreshes what it shows when one arrives.
//!
//! Every `/api/` endpoint needs what listing needs in the API: a live token
//! (`Authorization: Bearer TOKEN`), unless the cluster has none and this replica runs with
//! `--auth none`. No token gives 401, a refused one 403, each with a JSON body saying why.
//!
//! Served by `baton_proto::http` (hyper): under TLS, `--metrics-listen` is mutual TLS as the
//! client API is (a certificate of the cluster's CA, then the token), so a token crosses no
//! network in the clear and is worth nothing without a certificate. A plain listener
//! (`--metrics-plain-listen`) serves `/metrics` to anyone, and the dashboard only on a
//! loopback address, where a token crosses no network either.

use std::sync::Arc;
use std::time::Duration;

use baton_model::event::Event as ModelEvent;
use baton_proto::http::{self as web, Body, Call, Peer};
use baton_proto::scrape;
use baton_proto::tls::Transport;
use baton_proto::v1::{Event, JobRef, JobState, ListJobsRequest, ListMaintenanceReply, ListQueuesReply};
use baton_proto::words::Word;
use bytes::Bytes;
use hyper::header::HeaderValue;
use hyper::{Method, Response, StatusCode};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::Ctx;
use crate::api::watchers::WatcherSlot;
use crate::api::{self, Api, visible};
use crate::auth::{Caller, STREAM_RECHECK_MS};

/// Jobs one `/api/jobs` page holds when the page asks for no `limit`.
pub const DEFAULT_JOBS_PER_PAGE: usize = 100;
/// Most jobs one `/api/jobs` page holds (`limit`); a page lists, it does not export.
pub const MAX_JOBS_PER_PAGE: usize = 500;
/// Event streams (`/api/events`) open at once on one replica; one more is refused (503).
pub const MAX_EVENT_STREAMS: usize = 8;
/// Event streams one client identity (a token's user) may hold on one replica, so that one
/// user cannot take every stream of it (a few dashboard tabs).
pub const MAX_EVENT_STREAMS_PER_CLIENT: usize = 4;
/// Longest event one stream message carries, JSON included; a longer event message is cut.
pub const MAX_EVENT_BYTES: usize = 4 * 1024;
/// An open event stream sends a comment this often, so that a client that went away is
/// noticed.
pub const KEEPALIVE_MS: u64 = 15_000;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The page may load only what this replica serves: no CDN, no inline script.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'";

/// Messages an event stream holds for a client that reads slowly; past it the stream's
/// events wait (and the replica's own channel reports the client lagged).
const EVENT_STREAM_BUFFER: usize = 64;

/// What one HTTP listener of a replica serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--metrics-listen`: the replica's transport (mutual TLS, or plain under `--insecure`);
    /// `/metrics` and the dashboard.
    Main,
    /// `--metrics-plain-listen`: plain HTTP; `/metrics`, and the dashboard on a loopback
    /// address only.
    Plain { loopback: bool },
}

/// Serves what `which` listener serves on `listener` until the server closes.
pub(crate) async fn serve(ctx: Arc<Ctx>, listener: TcpListener, which: Listener) {
    let transport = match which {
        Listener::Main => ctx.transport.clone(),
        Listener::Plain { .. } => Transport::Insecure,
    };
    let dashboard = match which {
        Listener::Main => true,
        // Under `--insecure` the operator chose plain HTTP everywhere.
        Listener::Plain { loopback } => loopback || !ctx.transport.is_tls(),
    };
    let closing = ctx.closing.subscribe();
    let handler = move |call: Call, peer: Peer| {
        let ctx = ctx.clone();
        async move {
            if !dashboard && call.path != "/metrics" {
                return web::text(
                    StatusCode::NOT_FOUND,
                    "this plain listener serves only /metrics; the dashboard is served over TLS on --metrics-listen \
                     (or on a loopback --metrics-plain-listen)",
                );
            }
            let mut r = answer(&ctx, &call, peer).await;
            r.headers_mut().insert("content-security-policy", HeaderValue::from_static(CSP));
            r
        }
    };
    web::serve(transport, listener, crate::tls::API_CALLERS, handler, closing).await;
}

async fn answer(ctx: &Arc<Ctx>, r: &Call, peer: Peer) -> Response<Body> {
    if r.method != Method::GET {
        return web::text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served here");
    }
    let api = Api { ctx: ctx.clone() };
    match r.path.as_str() {
        "/metrics" => scrape::answer(r, || render_metrics(ctx)),
        "/" | "/index.html" => web::reply(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML),
        "/app.js" => web::reply(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS),
        "/app.css" => web::reply(StatusCode::OK, "text/css; charset=utf-8", APP_CSS),
        "/api/events" => match caller(&api, r).await {
            Ok(who) => match stream_places(ctx, &who, &peer) {
                Ok(places) => events(ctx.clone(), who, peer, places),
                Err(s) => status_reply(&s),
            },
            Err(s) => status_reply(&s),
        },
        p if p.starts_with("/api/") => match json(&api, r).await {
            Ok(body) => web::reply(StatusCode::OK, "application/json", body),
            Err(s) => status_reply(&s),
        },
        _ => web::text(StatusCode::NOT_FOUND, "no such page; the dashboard is at /"),
    }
}

/// An event stream's places: one of its client's and one of the replica's (shared by its
/// listeners).
type StreamPlaces = (WatcherSlot, OwnedSemaphorePermit);

fn stream_places(ctx: &Ctx, who: &Caller, peer: &Peer) -> Result<StreamPlaces, Status> {
    let identity = api::watchers::identity(who, peer.id.as_ref());
    let mine = ctx.dash_streams.acquire(identity, MAX_EVENT_STREAMS_PER_CLIENT)?;
    let slot = ctx.dash_slots.clone().try_acquire_owned().map_err(|_| {
        Status::unavailable(format!(
            "{MAX_EVENT_STREAMS} event streams are open on this replica; close a dashboard tab or use another replica"
        ))
    })?;
    Ok((mine, slot))
}

fn render_metrics(ctx: &Ctx) -> String {
    let raft = ctx.replica.metrics();
    let writes = ctx.replica.write_counts();
    ctx.metrics.set_tls_not_after(ctx.transport.not_after());
    ctx.metrics.set_digest_counts(ctx.replica.digest_counts());
    // 47 ms at 10,000 nodes (`cargo bench -p baton-server --bench metrics`): off the lock.
    api::off_the_lock(&ctx.replica, |s| ctx.metrics.render(s, &raft, &writes))
}

/// Who calls: the request's bearer token checked as the API checks its metadata.
async fn caller(api: &Api, r: &Call) -> Result<Caller, Status> {
    let mut meta = MetadataMap::new();
    if let Some(value) = &r.authorization {
        let value: MetadataValue<_> =
            value.parse().map_err(|_| Status::unauthenticated("the Authorization header is not text"))?;
        meta.insert(baton_proto::AUTHORIZATION_METADATA, value);
    }
    api.caller(&meta).await.map_err(|s| match s.code() {
        Code::Unauthenticated => Status::unauthenticated(format!(
            "{} (the dashboard sends the token entered in its page as `Authorization: Bearer TOKEN`)",
            s.message()
        )),
        _ => s,
    })
}

/// The JSON of one `/api/` endpoint. A leadership check that misses its quorum by chance
/// is retried where every linearizable read is (`baton_raft`'s `READ_CHECK_ATTEMPTS`).
async fn json(api: &Api, r: &Call) -> Result<String, Status> {
    let who = caller(api, r).await?;
    match r.path.as_str() {
        "/api/cluster" => to_json(&api::cluster::info(api, Some(&who)).await?.into_inner()),
        "/api/queues" => to_json(&ListQueuesReply { queues: api.read_whole(api::usage::queues).await? }),
        "/api/nodes" => to_json(&api::nodes::list(api).await?.into_inner()),
        "/api/maintenance" => {
            let windows =
                api.read(|s| s.windows().values().map(baton_proto::convert::window_to_proto).collect()).await?;
            to_json(&ListMaintenanceReply { windows })
        }
        "/api/jobs" => to_json(&api::jobs::list(api, &who, jobs_page(r)?).await?.into_inner()),
        "/api/arrays" => to_json(&api::jobs::list_arrays(api, &who, Default::default()).await?.into_inner()),
        "/api/usage" => {
            let (by, days, buckets) = usage_params(r)?;
            let until_ms = crate::clock::now_ms();
            let since_ms = until_ms.saturating_sub(days * DAY_MS);
            to_json(&api::history::series(api, &who, by, since_ms, until_ms, buckets).await?)
        }
        p => match p.strip_prefix("/api/jobs/") {
            Some(name) if !name.is_empty() && !name.contains('/') => {
                let job = JobRef { id: 0, name: name.to_string() };
                to_json(&api::jobs::get(api, &who, job).await?.into_inner())
            }
            _ => Err(Status::not_found(format!(
                "no endpoint {p}; the endpoints are /api/cluster, /api/queues, /api/jobs, /api/jobs/NAME, /api/arrays, /api/nodes, /api/maintenance, /api/usage, /api/events"
            ))),
        },
    }
}

const DAY_MS: u64 = 86_400_000;
/// Longest window the usage page draws: accounting's default retention.
pub const MAX_USAGE_DAYS: u64 = 400;

/// `/api/usage?by=queue|user|pool&days=N&buckets=M`: GPU time per queue (the default),
/// user or pool over the last `days` (default 7), in `buckets` bars (default one a day).
fn usage_params(r: &Call) -> Result<(baton_accounting::By, u64, usize), Status> {
    let by = api::history::by_from(r.param("by").filter(|b| !b.is_empty()).unwrap_or("queue"))?;
    let days = match r.param("days").filter(|d| !d.is_empty()) {
        None => 7,
        Some(d) => d
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=MAX_USAGE_DAYS).contains(n))
            .ok_or_else(|| Status::invalid_argument(format!("days {d:?}: from 1 to {MAX_USAGE_DAYS}")))?,
    };
    let buckets =
        match r.param("buckets").filter(|b| !b.is_empty()) {
            None => days as usize,
            Some(b) => b.parse::<usize>().ok().filter(|n| (1..=baton_accounting::MAX_BUCKETS).contains(n)).ok_or_else(
                || Status::invalid_argument(format!("buckets {b:?}: from 1 to {}", baton_accounting::MAX_BUCKETS)),
            )?,
        };
    Ok((by, days, buckets))
}

/// `/api/jobs?after=ID&limit=N&state=S1,S2`: the jobs after id `after` (none: from the
/// first), at most `limit` of them, in the states named (none: any). A bad state is named
/// by the API's own check.
fn jobs_page(r: &Call) -> Result<ListJobsRequest, Status> {
    let limit = match r.param("limit") {
        None | Some("") => DEFAULT_JOBS_PER_PAGE,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=MAX_JOBS_PER_PAGE).contains(&n) => n,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "limit {l:?}: a page holds 1 to {MAX_JOBS_PER_PAGE} jobs; follow `next` for more"
                )));
            }
        },
    };
    let after = r.param("after").unwrap_or("").to_string();
    if !after.is_empty() && after.parse::<u64>().is_err() {
        return Err(Status::invalid_argument(format!("after {after:?}: a job id (the `next` of the last page)")));
    }
    let words = r.param("state").unwrap_or("").split(',').filter(|s| !s.is_empty());
    // More names than there are states can only repeat some.
    let mut states = Vec::new();
    for word in words.take(JobState::ALL.len() + 1) {
        let state = JobState::from_word(word)
            .ok_or_else(|| Status::invalid_argument(format!("state {word:?} is not one of {}", JobState::words())))?;
        states.push(state.into());
    }
    Ok(ListJobsRequest { page_size: limit as u32, page_token: after, states, ..Default::default() })
}

fn to_json(v: &impl Serialize) -> Result<String, Status> {
    serde_json::to_string(v).map_err(|e| Status::internal(format!("encoding JSON: {e}")))
}

fn json_error(code: Code, message: &str) -> Response<Body> {
    #[derive(Serialize)]
    struct Error<'a> {
        error: &'a str,
    }
    let body = serde_json::to_string(&Error { error: message }).unwrap_or_default();
    web::reply(web::status_of(code), "application/json", body)
}

fn status_reply(s: &Status) -> Response<Body> {
    json_error(s.code(), s.message())
}

/// `/api/events`: every event this replica applies from now on that the caller may see, as
/// `Watch` shows it, one `data:` line of JSON (a `Watch` event) each, until the client goes,
/// its token stops being live (`event: refused` saying why, checked as a watch checks it:
/// before each batch, against the state the batch is judged by, and every
/// [`STREAM_RECHECK_MS`]) or the server closes. A client that falls behind gets an
/// `event: lagged` saying how many batches it missed (the page then reloads everything).
fn events(ctx: Arc<Ctx>, who: Caller, peer: Peer, places: StreamPlaces) -> Response<Body> {
    let (tx, rx) = mpsc::channel(EVENT_STREAM_BUFFER);
    tokio::spawn(async move {
        // The stream ends when the client goes: its body, and so `rx`, is dropped.
        let _ = pump(&ctx, &tx, who, &peer).await;
        drop(places);
    });
    web::streaming("text/event-stream", rx)
}

/// The client went away.
struct Gone;

async fn send(tx: &mpsc::Sender<Bytes>, message: String) -> Result<(), Gone> {
    tx.send(Bytes::from(message)).await.map_err(|_| Gone)
}

async fn pump(ctx: &Arc<Ctx>, tx: &mpsc::Sender<Bytes>, mut who: Caller, peer: &Peer) -> Result<(), Gone> {
    let mut events = ctx.replica.subscribe_events();
    let mut closing = ctx.closing.subscribe();
    send(tx, ": events follow\n\n".into()).await?;
    let mut keepalive = tokio::time::interval(Duration::from_millis(KEEPALIVE_MS));
    let mut recheck = tokio::time::interval(Duration::from_millis(STREAM_RECHECK_MS));
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = tokio::select! {
            next = events.recv() => next,
            // A revocation makes no event: a quiet stream must look for itself.
            _ = recheck.tick() => match peer.cert.check().and_then(|()| ctx.replica.read_local(|s| who.refresh(s))) {
                Ok(()) => continue,
                Err(s) => return send(tx, refused(&s)).await,
            },
            _ = keepalive.tick() => {
                send(tx, ": keepalive\n\n".into()).await?;
                continue;
            }
            // The watch's guard must not live across the awaits above (it is not Send).
            () = async { let _ = closing.wait_for(|c| *c).await; } => return Ok(()),
        };
        let batch: Arc<[ModelEvent]> = match next {
            Ok(b) => b,
            Err(RecvError::Lagged(n)) => {
                send(tx, format!("event: lagged\ndata: {n}\n\n")).await?;
                continue;
            }
            Err(RecvError::Closed) => return Ok(()),
        };
        // As a watch judges its batches: the caller's rights in the state that applied them.
        let shown: Result<Vec<Event>, Status> = ctx.replica.read_local(|s| {
            who.refresh(s)?;
            Ok(batch.iter().filter_map(|e| visible::shown(s, &who, e)).collect())
        });
        match shown {
            Ok(shown) => {
                for e in shown {
                    send(tx, event_message(e)).await?;
                }
            }
            Err(s) => return send(tx, refused(&s)).await,
        }
    }
}

/// The stream's last message: the caller's token or certificate is no longer live, and why.
fn refused(why: &Status) -> String {
    let why = why.message().replace(['\r', '\n'], " ");
    format!("event: refused\ndata: {why}\n\n")
}

/// One event as a stream message, at most [`MAX_EVENT_BYTES`]: an event whose text makes
/// it longer has its text cut (at a character boundary) and marked with an ellipsis.
fn event_message(mut event: Event) -> String {
    loop {
        // Serializing a message of strings and numbers cannot fail.
        let data = serde_json::to_string(&event).unwrap_or_default();
        let message = format!("data: {data}\n\n");
        if message.len() <= MAX_EVENT_BYTES || event.message.is_empty() {
            return message;
        }
        let excess = message.len() - MAX_EVENT_BYTES + '…'.len_utf8();
        let mut keep = event.message.len().saturating_sub(excess);
        while !event.message.is_char_boundary(keep) {
            keep -= 1;
        }
        event.message.truncate(keep);
        event.message.push('…');
        if keep == 0 {
            event.message.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_model::event::EventKind;
    use baton_model::name::Name;
    use baton_proto::convert::event_to_proto;

    fn request(target: &str) -> Call {
        Call::new(Method::GET, target)
    }

    /// How long the render in the test below is held at most: far above what applying one
    /// command takes. Only a failing run waits this long.
    const HELD_MS: u64 = 10_000;

    /// A scrape renders every state gauge (47 ms at 10,000 nodes); an apply, and so a
    /// submit, does not wait for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_apply_completes_while_a_scrape_renders() {
        let (replica, _stop) = crate::leader::tests::lone_leader().await;
        let before = replica.read_local(|s| s.applied());
        let (entered, entered_rx) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let scraper = replica.clone();
        let scrape = tokio::task::spawn_blocking(move || {
            api::off_the_lock(&scraper, |s| {
                entered.send(()).expect("the test waits");
                // Held here, as by a long render, until the test has applied a command.
                let applied_meanwhile = released.recv_timeout(std::time::Duration::from_millis(HELD_MS)).is_ok();
                (s.applied(), applied_meanwhile)
            })
        });
        tokio::task::spawn_blocking(move || entered_rx.recv()).await.expect("join").expect("the scrape started");
        let class = baton_model::class::PriorityClass { name: Name::lit("c"), value: 1, preemptible: true };
        let put = baton_model::command::Command { now_ms: 1, op: baton_model::command::Op::PutClass(class) };
        replica.write(put).await.expect("committed").expect("applied");
        let _ = release.send(());
        let (seen, applied_meanwhile) = scrape.await.expect("the scrape ends");
        assert!(applied_meanwhile, "the apply waited for the scrape to end");
        assert_eq!(seen, before, "the scrape read the state as of its start");
    }

    #[test]
    fn a_jobs_page_is_bounded_and_bad_paging_is_named() {
        let page = jobs_page(&request("/api/jobs")).unwrap();
        assert_eq!((page.page_size as usize, page.page_token.as_str()), (DEFAULT_JOBS_PER_PAGE, ""));
        let page = jobs_page(&request("/api/jobs?after=41&limit=500&state=Running,Preempting")).unwrap();
        assert_eq!((page.page_size, page.page_token.as_str()), (500, "41"));
        assert_eq!(page.states().collect::<Vec<_>>(), [JobState::Running, JobState::Preempting]);
        let e = jobs_page(&request("/api/jobs?state=Running,Sleeping")).unwrap_err();
        assert_eq!(
            e.message(),
            "state \"Sleeping\" is not one of Pending, Running, Preempting, Suspended, Paused, Succeeded, Failed, Cancelled"
        );
        for bad in ["limit=501", "limit=0", "limit=x"] {
            let e = jobs_page(&request(&format!("/api/jobs?{bad}"))).unwrap_err();
            assert!(e.message().contains("1 to 500 jobs"), "{bad}: {}", e.message());
        }
        let e = jobs_page(&request("/api/jobs?after=abc")).unwrap_err();
        assert!(e.message().contains("after \"abc\""), "{}", e.message());
    }

    #[test]
    fn a_long_event_is_cut_to_the_message_bound() {
        let e = ModelEvent {
            at_ms: 1,
            job: Some(Name::lit("j")),
            job_id: None,
            node: None,
            kind: EventKind::Submitted,
            message: "é".repeat(10 * MAX_EVENT_BYTES),
        };
        let m = event_message(event_to_proto(&e));
        assert!(m.len() <= MAX_EVENT_BYTES, "{}", m.len());
        assert!(m.starts_with("data: {") && m.ends_with("}\n\n") && m.contains('…'));
        let short = ModelEvent { message: "short".into(), ..e };
        assert!(event_message(event_to_proto(&short)).contains("\"message\":\"short\""));
    }

    #[test]
    fn refusals_get_their_http_status_and_a_json_body() {
        let r = status_reply(&Status::unauthenticated("no token"));
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(status_reply(&Status::permission_denied("x")).status(), StatusCode::FORBIDDEN);
        assert_eq!(status_reply(&Status::invalid_argument("x")).status(), StatusCode::BAD_REQUEST);
    }
}
