//! The dashboard in a real headless Chromium against a live `baton dev`: the page shows a
//! running job and the node GPUs it holds, then a preemption (the victim's state, who
//! preempted it, its attempts and events, and the GPUs now held by the preemptor).
//!
//! Needs Debian's `chromium`, so it is ignored by a plain `cargo test`; `./test.sh` installs
//! chromium where it can and runs it (`-- --ignored`). Run without chromium, it fails saying so.
//! With `BATON_DASHBOARD_SCREENSHOTS=DIR` it also writes the screenshots docs/dashboard.md
//! shows into DIR.
//!
//! Live updates are checked in a page kept open: Chromium is driven over its DevTools
//! protocol (`--remote-debugging-port`, a websocket), the test reads `document.body.innerText`
//! and the DOM with `Runtime.evaluate` while it submits and preempts jobs, and the page must
//! show each change without being reloaded.

mod dev_output;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BATON: &str = env!("CARGO_BIN_EXE_baton");
const CHROMIUM: &str = "chromium";

/// Kills the dev cluster when the test ends, however it ends.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the child this test started; SIGTERM lets dev stop its children.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// Fails with how to get the browser when it is not here.
fn need_browser() {
    let found = Command::new(CHROMIUM).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{CHROMIUM}` is not installed, and the dashboard test needs it: install Debian's package \
         (`apt-get install chromium`), or run `./test.sh`, which does"
    );
}

struct Dev {
    _child: Kill,
    /// `http://HOST:PORT/` of the first replica's dashboard, and the admin token.
    base: String,
    token: String,
    env: Vec<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Dev {
    fn start() -> Dev {
        // Below Linux's ephemeral range (32768-60999) and apart from the ranges of the dev
        // test (10,000-20,000) and the e2e demo (20,000-29,700); six ports from the base
        // (three API, three peer), metrics from base + 100.
        let base = 30_200 + (std::process::id() % 330) as u16 * 6;
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(BATON)
            .args(["dev", "--port", &base.to_string(), "--dir"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let child = Kill(child);
        let text = dev_output::until_ready(out);
        let word = |prefix: &str| dev_output::word(&text, prefix);
        let url = word("dashboard: ");
        let (base, token) = url.split_once("#token=").unwrap_or_else(|| panic!("no token in {url}"));
        let env = ["BATON_SERVER", "BATON_TLS_DIR", "BATON_TOKEN_FILE"]
            .map(|v| (v.to_string(), word(&format!("export {v}="))))
            .to_vec();
        Dev { _child: child, base: base.to_string(), token: token.to_string(), env, _dir: dir }
    }

    fn baton(&self, args: &[&str]) {
        let mut c = Command::new(BATON);
        c.args(args).env_remove("BATON_INSECURE").env_remove("BATON_TOKEN");
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        let out = c.output().unwrap();
        assert!(out.status.success(), "baton {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A job as `/api/jobs/NAME` shows it (null while the endpoint cannot answer).
    fn job(&self, name: &str) -> serde_json::Value {
        let addr = self.base.trim_start_matches("http://").trim_end_matches('/');
        let Ok(mut s) = std::net::TcpStream::connect(addr) else { return serde_json::Value::Null };
        let req = format!("GET /api/jobs/{name} HTTP/1.1\r\nAuthorization: Bearer {}\r\n\r\n", self.token);
        s.write_all(req.as_bytes()).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        match reply.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => serde_json::from_str(body).unwrap(),
            _ => serde_json::Value::Null,
        }
    }

    fn until(&self, what: &str, holds: impl Fn(&Dev) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !holds(self) {
            assert!(Instant::now() < deadline, "{what}: not within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The page at `fragment` as the browser built it, once the page says it loaded and
    /// `ready` holds of its DOM (the cluster may still be electing); the last DOM otherwise.
    fn dom(&self, fragment: &str, ready: impl Fn(&str) -> bool) -> String {
        let url = format!("{}#token={}{fragment}", self.base, self.token);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = chromium().arg("--dump-dom").arg(&url).output().unwrap();
            let dom = String::from_utf8_lossy(&out.stdout).to_string();
            if (dom.contains("data-loaded=\"1\"") && ready(&dom)) || Instant::now() > deadline {
                return dom;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn screenshot(&self, fragment: &str, file: &str, height: u32) {
        let Some(dir) = std::env::var_os("BATON_DASHBOARD_SCREENSHOTS").map(PathBuf::from) else { return };
        let url = format!("{}#token={}{fragment}", self.base, self.token);
        let path = dir.join(file);
        let out = chromium()
            .arg(format!("--window-size=1280,{height}"))
            .arg("--hide-scrollbars")
            .arg(format!("--screenshot={}", path.display()))
            .arg(&url)
            .output()
            .unwrap();
        assert!(out.status.success() && Path::new(&path).exists(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A page kept open in headless Chromium, read over the DevTools protocol.
struct LivePage {
    _browser: Kill,
    socket: tungstenite::WebSocket<std::net::TcpStream>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl LivePage {
    /// Opens `url`; Chromium picks a free debugging port and writes it into the profile
    /// directory's `DevToolsActivePort`.
    fn open(url: &str) -> LivePage {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(CHROMIUM)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0", "--no-first-run"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let browser = Kill(child);
        let active = profile.path().join("DevToolsActivePort");
        let port = poll("Chromium's DevTools port", || {
            std::fs::read_to_string(&active).ok().and_then(|t| t.lines().next().and_then(|l| l.parse::<u16>().ok()))
        });
        let ws = poll("the page's DevTools target", || page_target(port));
        let path = ws.find("/devtools/").map(|i| ws[i..].to_string()).expect(&ws);
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (socket, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream).unwrap();
        LivePage { _browser: browser, socket, next_id: 0, _profile: profile }
    }

    /// The value of JavaScript `expression` in the page.
    fn eval(&mut self, expression: &str) -> serde_json::Value {
        self.next_id += 1;
        let id = self.next_id;
        let call = serde_json::json!({
            "id": id,
            "method": "Runtime.evaluate",
            "params": { "expression": expression, "returnByValue": true },
        });
        self.socket.send(tungstenite::Message::text(call.to_string())).unwrap();
        loop {
            let message = self.socket.read().unwrap();
            let Ok(text) = message.to_text() else { continue };
            let reply: serde_json::Value = serde_json::from_str(text).unwrap();
            if reply["id"] == id {
                assert!(reply["result"]["exceptionDetails"].is_null(), "{expression}: {reply}");
                return reply["result"]["result"]["value"].clone();
            }
        }
    }

    /// Waits until `expression` is true in the page; fails with the page's text otherwise.
    fn until(&mut self, what: &str, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.eval(expression) != serde_json::Value::Bool(true) {
            let text = self.eval(r#"document.body?.innerText ?? "(no page yet)""#);
            assert!(Instant::now() < deadline, "{what}: not shown within 60 s; the page shows:\n{text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The websocket URL of the first page target Chromium lists, once it lists one.
fn page_target(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /json/list HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    // Chromium keeps the connection open: the body is as long as Content-Length says.
    let mut reader = BufReader::new(s);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let targets: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let page = targets.as_array()?.iter().find(|t| t["type"] == "page")?;
    page["webSocketDebuggerUrl"].as_str().map(str::to_string)
}

/// Asks `get` every 100 ms for up to 30 s.
fn poll<T>(what: &str, mut get: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = get() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: none within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Headless, as root in a container (no sandbox), waiting up to 5 s of page time for the
/// page's requests and timers before it dumps or shoots.
fn chromium() -> Command {
    let mut c = Command::new(CHROMIUM);
    c.args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]);
    c.stderr(Stdio::null());
    c
}

fn count(dom: &str, needle: &str) -> usize {
    dom.matches(needle).count()
}

#[test]
#[ignore = "needs chromium: ./test.sh installs it and runs this test"]
fn the_dashboard_shows_a_running_job_its_gpus_and_a_preemption() {
    need_browser();
    let dev = Dev::start();
    // team-a is guaranteed 8 GPUs; `low` borrows the other 8 of the cluster's 16.
    dev.baton(&["queue", "create", "team-a", "--gpus", "8"]);
    // A page opened before any job exists, following the event stream; a mark in its
    // window tells that it is the same page at the end (a reload would drop the mark).
    let mut page = LivePage::open(&format!("{}#token={}", dev.base, dev.token));
    page.until(
        "the page loaded and follows the events",
        r#"document.body?.dataset.loaded === "1" && document.getElementById("live")?.textContent === "live""#,
    );
    page.eval("window.batonTestMark = 42");
    let work = [BATON, "workload", "--steps", "1000000", "--step-ms", "50"];
    let low =
        ["submit", "--name", "low", "--queue", "team-a", "--class", "train", "--gpus", "8", "--replicas", "2", "--"];
    dev.baton(&[&low[..], &work[..]].concat());
    dev.until("low runs", |d| d.job("low")["state"] == "Running");
    page.until(
        "low, submitted after the page loaded, running",
        r#"document.querySelector('tr[data-job="low"]')?.dataset.state === "Running""#,
    );

    let running = |dom: &str| dom.contains(r#"<tr data-job="low" data-state="Running">"#);
    let dom = dev.dom("", |dom| running(dom) && count(dom, r#"data-job="low" title"#) == 16);
    assert!(running(&dom), "the jobs table shows low running:\n{dom}");
    for node in ["node-1", "node-2"] {
        for gpu in 0..8 {
            let cell = format!(r#"class="gpu held" data-node="{node}" data-gpu="{gpu}" data-job="low""#);
            assert!(dom.contains(&cell), "GPU {gpu} of {node} is shown held by low:\n{dom}");
        }
    }
    assert!(dom.contains(r#"data-queue="team-a" data-pool="default" data-used="16" data-borrowed="8""#), "{dom}");
    assert!(dom.contains(r#"data-role="Leader""#), "the cluster section names the leader:\n{dom}");
    assert!(dom.contains(r#"<div data-pool="default">pool default: 16 of 16 GPUs in use</div>"#), "{dom}");
    assert!(!dom.contains("[object "), "no value rendered as an object's name:\n{dom}");
    dev.screenshot("", "running.png", 1150);

    // A higher-priority job of the same queue takes half the GPUs back: low is preempted
    // whole (a gang), checkpoints and waits.
    let high = ["submit", "--name", "high", "--queue", "team-a", "--class", "inference", "--gpus", "8", "--"];
    dev.baton(&[&high[..], &work[..]].concat());
    dev.until("high runs", |d| d.job("high")["state"] == "Running");
    page.until(
        "the preemption, in the page opened before it",
        r#"(document.body?.innerText ?? "").includes("preempted by high")"#,
    );
    page.until("high running", r#"document.querySelector('tr[data-job="high"]')?.dataset.state === "Running""#);
    assert_eq!(page.eval("window.batonTestMark"), 42, "the page was not reloaded: it updated from the event stream");

    let preempted = |dom: &str| dom.contains(r#"<tr data-kind="Preempted">"#) && dom.contains(r#"data-end="Stopped""#);
    let dom = dev.dom("&job=low", |dom| preempted(dom) && count(dom, r#"data-job="high" title"#) == 8);
    assert!(dom.contains(r#"<tr data-job="high" data-state="Running">"#), "{dom}");
    let row = dom.split(r#"<tr data-job="low""#).nth(1).and_then(|r| r.split("</tr>").next()).expect(&dom);
    assert!(row.contains("preempted by high"), "low's row says who preempted it: {row}");
    assert!(!row.contains(r#"data-state="Running""#), "{row}");
    assert!(preempted(&dom), "low's details show the Preempted event and its attempt ended:\n{dom}");
    assert!(dom.contains(" preempted</div>"), "the attempt it lost is marked preempted on the timeline:\n{dom}");
    assert_eq!(count(&dom, r#"data-job="high" title"#), 8, "high holds 8 GPUs:\n{dom}");
    assert_eq!(count(&dom, r#"data-job="low" title"#), 0, "low holds none:\n{dom}");
    dev.screenshot("&job=low", "preemption.png", 1500);

    // A maintenance window ahead is listed, and an unhealthy GPU is marked in its node's
    // grid, in the page already open (the GPU's event reloads it).
    dev.baton(&["maintenance", "create", "fw", "--nodes", "node-1", "--start", "+2h", "--end", "+3h"]);
    dev.baton(&["gpu", "unhealthy", "node-2", "7", "--error", "XID 79"]);
    page.until(
        "GPU 7 of node-2 marked unhealthy",
        r#"document.querySelector('.gpu.unhealthy[data-node="node-2"][data-gpu="7"][data-fault="XID 79"]') !== null"#,
    );
    page.until(
        "window fw listed ahead",
        r#"document.querySelector('p.window[data-window="fw"][data-state="ahead"]') !== null"#,
    );
    // The last dev node offers MIG slices (decisions.md section 11): a line per profile.
    page.until(
        "node-2's MIG slices listed",
        r#"document.querySelector('p.slices[data-node="node-2"][data-profile="mig-1g.10gb"]')?.textContent === "MIG mig-1g.10gb: 0 of 7 slices in use""#,
    );

    // A fraction of a GPU (section 11) shows in its GPU's cell with its share.
    let tiny = ["submit", "--name", "tiny", "--queue", "team-a", "--gpus", "0.25", "--"];
    dev.baton(&[&tiny[..], &work[..]].concat());
    dev.until("tiny runs", |d| d.job("tiny")["state"] == "Running");
    page.until(
        "tiny's quarter of a GPU in the grid",
        r#"[...document.querySelectorAll('.gpu.shared')].some(c => c.dataset.job === "tiny"
           && c.dataset.sharedMilli === "250" && c.textContent.endsWith("tiny 0.25"))"#,
    );

    // An array is one line of the arrays table, its elements not created yet counted
    // pending, in the page already open (its first element's event reloads it).
    dev.baton(&["submit", "--name", "sweep", "--queue", "team-a", "--array", "0-99%1", "--", "true"]);
    page.until(
        "array sweep listed",
        r#"(document.querySelector('tr[data-array="sweep"]')?.innerText ?? "").includes("sweep-[0-99]")"#,
    );

    // An elastic gang's details show the size it runs with of its top: as many of its 8
    // replicas as the GPUs left hold. (The sweep's elements fill the first page of jobs.)
    let el =
        ["submit", "--name", "el", "--queue", "team-a", "--gpus", "2", "--replicas", "8", "--min-replicas", "1", "--"];
    dev.baton(&[&el[..], &work[..]].concat());
    dev.until("el runs", |d| d.job("el")["state"] == "Running");
    let shown = |dom: &str| (1..=4).any(|n| dom.contains(&format!(" · elastic: {n}/8 replicas, at least 1")));
    let dom = dev.dom("&job=el", shown);
    assert!(shown(&dom), "el's details show its size:\n{dom}");

    // The usage page charts GPU time per queue from accounting's records (low's preempted
    // attempt) and what runs now, and per user on a click.
    page.until(
        "team-a's GPU time charted",
        r#"Number(document.querySelector('#usage [data-usage-key="team-a"]')?.dataset.gpuHours) > 0
           && document.querySelectorAll('#usage .chart .segment').length > 0"#,
    );
    page.eval(r#"document.querySelector('[data-choose="by=user"]').click()"#);
    page.until(
        "GPU time charted per user",
        r#"document.querySelector('[data-choose="by=user"]')?.className === "chosen"
           && document.querySelector('#usage [data-usage-key]') !== null
           && document.querySelector('#usage [data-usage-key="team-a"]') === null"#,
    );
}
