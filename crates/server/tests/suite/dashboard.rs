//! The dashboard's HTTP endpoints on a replica's `--metrics-listen` (docs/dashboard.md):
//! the page and its script, the JSON endpoints with the API's access rules (no token: 401,
//! another user's environment hidden), paging bounds, and the event stream with its bound.

use crate::common;

use std::time::{Duration, Instant};

use ::baton_server::ServerSettings;
use ::baton_server::auth::{AuthMode, hash_token};
use baton_proto::v1::*;
use common::*;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const ADMIN: &str = "admin-secret";
const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";

/// Tokens on; queue `a` (8 GPUs) for alice and bob; a node with 8 GPUs.
async fn setup() -> (Cluster, FakeAgent, Client, Client) {
    let settings =
        ServerSettings { auth: AuthMode::Tokens, bootstrap_admin: Some(hash_token(ADMIN)), ..common::settings() };
    let cluster = Cluster::start_with(3, settings).await;
    let mut admin = client(&cluster.addrs()[0], ADMIN).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin.who_am_i(Empty {}).await.is_err() {
        assert!(Instant::now() < deadline, "the bootstrap admin token never committed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin.put_queue(queue("a", 8)).await.unwrap();
    for (token, user) in [(ALICE, "alice"), (BOB, "bob")] {
        let req = CreateTokenRequest {
            hash: hash_token(token).to_vec(),
            user: user.into(),
            roles: vec![],
            queues: vec!["a".into()],
        };
        admin.create_token(req).await.unwrap();
    }
    let agent = FakeAgent::attach(&cluster.addrs(), node("n1", 8)).await;
    let alice = client(&cluster.addrs()[0], ALICE).await;
    (cluster, agent, admin, alice)
}

/// `GET path` on `addr`: the status code, the content type and the body.
async fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n{auth}\r\n").as_bytes()).await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("no end of the response head");
    let code = head[9..12].parse().unwrap();
    // Header names are case-insensitive (hyper writes them in lower case).
    let kind = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map_or(String::new(), |(_, v)| v.trim().to_string());
    (code, kind, body.to_string())
}

async fn get_json(addr: &str, path: &str, token: &str) -> Value {
    let (code, kind, body) = get(addr, path, Some(token)).await;
    assert_eq!((code, kind.as_str()), (200, "application/json"), "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn submit(name: &str) -> SubmitRequest {
    let mut spec = gpu_job(name, "a", "train", 2);
    spec.env.insert("SECRET".into(), "s3".into());
    submit_of(spec)
}

fn names(page: &Value) -> Vec<String> {
    page["jobs"].as_array().unwrap().iter().map(|j| j["spec"]["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_page_and_the_json_endpoints_show_the_cluster_to_a_token_allowed_to_list() {
    let (cluster, mut agent, mut admin, mut alice) = setup().await;
    alice.submit(submit("j1")).await.unwrap();
    agent.until("j1 runs", |d| has(d, "j1", Action::Run)).await;
    // A follower answers as well as the leader: reads go through the leader.
    let http = &cluster.replicas[2].metrics;

    let (code, kind, page) = get(http, "/", None).await;
    assert_eq!((code, kind.as_str()), (200, "text/html; charset=utf-8"));
    assert!(page.contains("<script src=\"/app.js\"") && page.contains("/app.css"), "{page}");
    assert!(!page.contains("https://") && !page.contains("http://"), "the page loads nothing from elsewhere");
    let (code, kind, script) = get(http, "/app.js", None).await;
    assert_eq!((code, kind.as_str()), (200, "text/javascript; charset=utf-8"));
    assert!(
        script.contains("/api/events") && script.contains("Authorization"),
        "the script reads the API with the token"
    );

    let info = get_json(http, "/api/cluster", ALICE).await;
    assert_eq!(info["replicas"].as_array().unwrap().len(), 3, "{info}");
    assert!(info["leader_id"].as_u64().unwrap() >= 1 && info["term"].as_u64().unwrap() >= 1, "{info}");
    assert_eq!(info["answered_by"], 3, "{info}");

    let queues = get_json(http, "/api/queues", ALICE).await;
    let a = &queues["queues"][0];
    assert_eq!((a["queue"]["name"].as_str(), a["running"].as_u64()), (Some("a"), Some(1)), "{queues}");
    assert_eq!(a["pools"][0]["used"]["amounts"]["gpu"], 2, "{queues}");
    assert_eq!(a["pools"][0]["capacity"]["amounts"]["gpu"], 8, "the nominal quota: {queues}");

    let nodes = get_json(http, "/api/nodes", ALICE).await;
    let n1 = &nodes["nodes"][0];
    assert_eq!((n1["name"].as_str(), n1["status"].as_str()), (Some("n1"), Some("Ready")), "{nodes}");
    assert_eq!(n1["jobs"], serde_json::json!(["j1"]), "{nodes}");

    let jobs = get_json(http, "/api/jobs?state=Running", ALICE).await;
    let j1 = &jobs["jobs"][0];
    assert_eq!((j1["spec"]["name"].as_str(), j1["state"].as_str()), (Some("j1"), Some("Running")), "{jobs}");
    assert_eq!(j1["placements"][0]["node"], "n1", "{jobs}");
    assert_eq!(j1["placements"][0]["gpus"].as_array().unwrap().len(), 2, "{jobs}");

    // The owner sees the job's environment; another user with a list-only view does not.
    let mine = get_json(http, "/api/jobs/j1", ALICE).await;
    assert_eq!(mine["spec"]["env"]["SECRET"], "s3", "{mine}");
    assert!(mine["events"].as_array().unwrap().iter().any(|e| e["kind"] == "Started"), "{mine}");
    let theirs = get_json(http, "/api/jobs/j1", BOB).await;
    assert_eq!(
        (theirs["env_hidden"].as_bool(), theirs["spec"]["env"].as_object().map(|m| m.len())),
        (Some(true), Some(0))
    );
    let listed = get_json(http, "/api/jobs", BOB).await;
    assert!(!listed.to_string().contains("s3"), "a list shows no other user's environment: {listed}");

    // A held job's page says what it waits for, in the API's words.
    let dep = Dependency { job: "j1".into(), when: DependencyCondition::Ok.into() };
    alice.submit(SubmitRequest { after: vec![dep], ..submit("j2") }).await.unwrap();
    let held = get_json(http, "/api/jobs/j2", ALICE).await;
    assert_eq!(held["waiting_for"], serde_json::json!([{"job": "j1", "when": "ok"}]), "{held}");
    assert!(script.contains("waiting_for"), "the page shows it");

    // An array is one line, its elements not created yet counted as pending; another user
    // sees it as the queue shows jobs.
    let array = Some(ArraySpec { first: 0, count: 500, max_running: 1 });
    alice.submit(SubmitRequest { array, ..submit("sweep") }).await.unwrap();
    let arrays = get_json(http, "/api/arrays", ALICE).await;
    let a = &arrays["arrays"][0];
    let waiting = a["pending"].as_u64().unwrap() + a["running"].as_u64().unwrap();
    assert_eq!((a["name"].as_str(), waiting, a["created"].as_u64()), (Some("sweep"), 500, Some(1)), "{arrays}");
    assert_eq!(a["array"]["max_running"], 1, "{arrays}");
    assert!(script.contains("/api/arrays") && script.contains("data-array"), "the page lists arrays");

    // A node in a started maintenance window says which, and the page shows it.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let w = MaintenanceWindow {
        name: "fw".into(),
        nodes: vec!["n1".into()],
        start_ms: now_ms,
        end_ms: now_ms + 600_000,
        active: false,
    };
    admin.create_maintenance(w).await.unwrap();
    let windows = get_json(http, "/api/maintenance", ALICE).await;
    assert_eq!(windows["windows"][0]["name"], "fw", "{windows}");
    assert!(script.contains("/api/maintenance") && script.contains("data-window"), "the page lists windows");
    let nodes = get_json(http, "/api/nodes", ALICE).await;
    assert_eq!(nodes["nodes"][0]["maintenance"], "fw", "{nodes}");
    assert!(script.contains("in maintenance window"), "the page shows it");

    // An unhealthy GPU is listed with its error, and the page marks its cell.
    let mark = SetGpuHealthRequest { node: "n1".into(), gpu: 3, healthy: false, error: "XID 79".into() };
    admin.set_gpu_health(mark).await.unwrap();
    let nodes = get_json(http, "/api/nodes", ALICE).await;
    assert_eq!(nodes["nodes"][0]["unhealthy_gpus"][0]["gpu"], 3, "{nodes}");
    assert_eq!(nodes["nodes"][0]["unhealthy_gpus"][0]["error"], "XID 79", "{nodes}");
    assert!(script.contains("unhealthy_gpus") && script.contains("data-fault"), "the page shows it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_endpoints_refuse_without_a_live_token_with_a_clear_body() {
    let (cluster, _agent, mut admin, _alice) = setup().await;
    let http = &cluster.replicas[0].metrics;
    for path in ["/api/cluster", "/api/queues", "/api/jobs", "/api/jobs/j1", "/api/nodes", "/api/events"] {
        let (code, kind, body) = get(http, path, None).await;
        assert_eq!((code, kind.as_str()), (401, "application/json"), "{path}: {body}");
        let why: Value = serde_json::from_str(&body).unwrap();
        assert!(why["error"].as_str().unwrap().contains("Authorization: Bearer TOKEN"), "{path}: {body}");
        let (code, _, body) = get(http, path, Some("not-a-token")).await;
        assert_eq!(code, 401, "{path}: {body}");
        assert!(body.contains("unknown token"), "{path}: {body}");
    }
    // A revoked token is refused at once.
    let id = client(&cluster.addrs()[0], BOB).await.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.revoke_token(TokenRef { id }).await.unwrap();
    let (code, _, body) = get(http, "/api/jobs", Some(BOB)).await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("revoked"), "{body}");
    let (code, _, body) = get(http, "/api/nope", Some(ADMIN)).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("/api/jobs/NAME"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_pages_are_bounded_and_follow_on() {
    let (cluster, _agent, _admin, mut alice) = setup().await;
    for i in 1..=5 {
        alice.submit(submit(&format!("p{i}"))).await.unwrap();
    }
    let http = &cluster.replicas[1].metrics;
    let first = get_json(http, "/api/jobs?limit=2", ALICE).await;
    assert_eq!(names(&first), ["p1", "p2"]);
    assert_eq!(first["truncated"], true);
    let next = first["next_page_token"].as_str().unwrap();
    let second = get_json(http, &format!("/api/jobs?limit=2&after={next}"), ALICE).await;
    assert_eq!(names(&second), ["p3", "p4"]);
    let last = get_json(http, &format!("/api/jobs?after={}", second["next_page_token"].as_str().unwrap()), ALICE).await;
    assert_eq!((names(&last), last["truncated"].as_bool()), (vec!["p5".to_string()], Some(false)));
    for bad in ["limit=501", "limit=0", "after=x", "state=Sleeping"] {
        let (code, _, body) = get(http, &format!("/api/jobs?{bad}"), Some(ALICE)).await;
        assert_eq!(code, 400, "{bad}: {body}");
        let why: Value = serde_json::from_str(&body).unwrap();
        assert!(!why["error"].as_str().unwrap().is_empty(), "{bad}: {body}");
    }
}

/// Reads the event stream until a data line that contains `what`.
async fn until_event(lines: &mut tokio::io::Lines<BufReader<tokio::net::TcpStream>>, what: &str) -> String {
    let deadline = Duration::from_secs(10);
    tokio::time::timeout(deadline, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("data: ") && line.contains(what) {
                return line;
            }
        }
        panic!("the event stream ended before {what}");
    })
    .await
    .unwrap_or_else(|_| panic!("no event with {what} within 10 s"))
}

async fn open_events(addr: &str, token: &str) -> tokio::io::Lines<BufReader<tokio::net::TcpStream>> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /api/events HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes()).await.unwrap();
    BufReader::new(s).lines()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_event_stream_carries_applied_events_and_is_bounded_per_replica() {
    let (cluster, mut agent, _admin, mut alice) = setup().await;
    let http = &cluster.replicas[1].metrics;
    let mut lines = open_events(http, ALICE).await;
    let status = lines.next_line().await.unwrap().unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let head: Vec<String> = {
        let mut h = Vec::new();
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.is_empty() {
                break;
            }
            h.push(l);
        }
        h
    };
    assert!(head.iter().any(|l| l.eq_ignore_ascii_case("content-type: text/event-stream")), "{head:?}");
    alice.submit(submit("e1")).await.unwrap();
    let line = until_event(&mut lines, "\"kind\":\"Submitted\"").await;
    let event: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(event["job"], "e1", "{line}");
    agent.until("e1 runs", |d| has(d, "e1", Action::Run)).await;
    until_event(&mut lines, "\"kind\":\"Started\"").await;

    // This one is open; alice may hold three more, and her next is refused naming her bound
    // (issue 39: one user could hold every stream of a replica).
    use ::baton_server::dash::{MAX_EVENT_STREAMS, MAX_EVENT_STREAMS_PER_CLIENT};
    let mut open = Vec::new();
    for token in std::iter::repeat_n(ALICE, MAX_EVENT_STREAMS_PER_CLIENT - 1) {
        let mut l = open_events(http, token).await;
        assert_eq!(l.next_line().await.unwrap().unwrap(), "HTTP/1.1 200 OK");
        open.push(l);
    }
    let (code, _, body) = get(http, "/api/events", Some(ALICE)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("user alice has 4 dashboard event streams open"), "{body}");
    // Bob fills the replica's bound; the next caller is refused with why.
    for token in std::iter::repeat_n(BOB, MAX_EVENT_STREAMS - MAX_EVENT_STREAMS_PER_CLIENT) {
        let mut l = open_events(http, token).await;
        assert_eq!(l.next_line().await.unwrap().unwrap(), "HTTP/1.1 200 OK");
        open.push(l);
    }
    let (code, _, body) = get(http, "/api/events", Some(ADMIN)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("event streams are open on this replica"), "{body}");
    // Another replica has its own bound.
    let mut other = open_events(&cluster.replicas[0].metrics, ALICE).await;
    assert_eq!(other.next_line().await.unwrap().unwrap(), "HTTP/1.1 200 OK");
}

/// The lines of the event stream until `until` (bounded), its head included.
async fn lines_until(lines: &mut tokio::io::Lines<BufReader<tokio::net::TcpStream>>, until: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let wait = Duration::from_secs(10);
    let found = tokio::time::timeout(wait, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let done = line.contains(until);
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    assert!(found == Ok(true), "no line with {until} within {wait:?} (or the stream ended); saw {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_tokens_event_stream_is_refused_and_sends_nothing_applied_after() {
    let (cluster, _agent, mut admin, mut alice) = setup().await;
    let http = &cluster.replicas[1].metrics;
    let mut lines = open_events(http, ALICE).await;
    admin.submit(submit("before")).await.unwrap();
    until_event(&mut lines, "\"job\":\"before\"").await;
    let id = alice.who_am_i(Empty {}).await.unwrap().into_inner().token_id;
    admin.revoke_token(TokenRef { id: id.clone() }).await.unwrap();
    // Every event of this job is applied after the revocation, on every replica.
    admin.submit(submit("after")).await.unwrap();
    let seen = lines_until(&mut lines, "event: refused").await;
    assert!(seen.iter().all(|l| !l.contains("\"job\":\"after\"")), "sent after the revocation: {seen:?}");
    let why = lines.next_line().await.unwrap().unwrap_or_default();
    assert!(why.contains(&format!("token {id} of user alice was revoked")), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_event_stream_shows_others_events_only_as_their_queue_allows() {
    let (cluster, _agent, mut admin, _alice) = setup().await;
    let hidden = Queue { visibility: JobVisibility::Own.into(), ..queue("hidden", 8) };
    admin.create_queue(hidden).await.unwrap();
    let mut lines = open_events(&cluster.replicas[0].metrics, BOB).await;
    let mut secret = gpu_job("secret", "hidden", "train", 1);
    secret.env.insert("SECRET".into(), "s3".into());
    admin.submit(submit_of(secret)).await.unwrap();
    admin.submit(submit("marker")).await.unwrap();
    let seen = lines_until(&mut lines, "\"job\":\"marker\"").await;
    assert!(seen.iter().all(|l| !l.contains("\"job\":\"secret\"")), "a hidden job's event was sent: {seen:?}");
}

/// Issue 39: sixteen connections that sent nothing held every slot of the metrics listener for
/// 5 s each, so a slow or hostile client kept Prometheus and the dashboard waiting. A
/// connection now holds a slot to be answered only once its request is read, and must send it
/// within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_do_not_keep_a_scrape_waiting() {
    let cluster = Cluster::start(1).await;
    let addr = cluster.replicas[0].metrics.clone();
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let scraped = tokio::time::timeout(Duration::from_millis(3_000), scrape(&addr)).await;
    assert!(
        scraped.is_ok_and(|body| body.contains("baton_raft_applied_index")),
        "the scrape waited behind idle connections"
    );
    drop(idle);
}
