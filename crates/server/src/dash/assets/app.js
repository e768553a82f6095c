// The baton dashboard: reads the replica's /api/ endpoints with the token entered once
// (kept in this tab's sessionStorage, sent as `Authorization: Bearer`), and reloads what it
// shows when /api/events says something happened. Plain script, no build step, no
// external fetches; everything is built with textContent, never HTML strings.
"use strict";

const TOKEN_KEY = "baton-token";
// Rows of the jobs table; the API pages further on request.
const JOBS_SHOWN = 100;
// Live events kept in the list.
const EVENTS_SHOWN = 50;
// Wait this long after an event before reloading, so that a burst reloads once.
const RELOAD_DELAY_MS = 250;
// Reconnect the event stream after this long when it ends.
const RECONNECT_MS = 3000;
// Load again after this long when loading failed (no leader yet, say).
const RETRY_MS = 2000;

// The usage chart: GPU-hours per queue, user or pool, over the last days, one bar a day.
let usageBy = "queue";
let usageDays = 7;
const USAGE_COLORS = ["#4a78c2", "#e0913a", "#2e7d32", "#b00020", "#7b4bb3", "#00838f", "#8a6d00", "#c2185b",
  "#5d4037", "#455a64", "#9e9d24", "#9aa3ae"];

let selectedJob = null;
let jobsAfter = "";
let reloadTimer = null;

function $(id) { return document.getElementById(id); }

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    // Styles go through the CSSOM: the page's CSP refuses inline style attributes.
    else if (k === "style") Object.assign(el.style, v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// The token arrives once in the URL fragment (never sent to the server, never logged),
// is kept for this tab and removed from the address bar.
function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get("token")) sessionStorage.setItem(TOKEN_KEY, params.get("token"));
  if (params.get("job")) selectedJob = params.get("job");
  params.delete("token");
  const rest = params.toString();
  history.replaceState(null, "", location.pathname + (rest ? "#" + rest : ""));
}

class Refused extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path) {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Refused(r.status, body.error || r.statusText);
  return body;
}

function notice(text, error) {
  const n = $("notice");
  n.hidden = !text;
  n.className = error ? "error" : "";
  n.textContent = text || "";
}

function gpus(resources) { return (resources && resources.amounts && resources.amounts.gpu) || 0; }

function time(ms) { return ms ? new Date(ms).toLocaleTimeString() : ""; }

async function reload() {
  try {
    const [cluster, queues, usage, jobs, active, nodes, maintenance, arrays] = await Promise.all([
      api("/api/cluster"),
      api("/api/queues"),
      api("/api/usage?by=" + usageBy + "&days=" + usageDays),
      api("/api/jobs?limit=" + JOBS_SHOWN + (jobsAfter ? "&after=" + jobsAfter : "")),
      api("/api/jobs?limit=500&state=Running,Preempting"),
      api("/api/nodes"),
      api("/api/maintenance"),
      api("/api/arrays"),
    ]);
    $("login").hidden = true;
    $("app").hidden = false;
    $("logout").hidden = !token();
    showCluster(cluster);
    showQueues(queues.queues);
    showUsage(usage);
    showJobs(jobs);
    showArrays(arrays.arrays || []);
    showNodes(nodes.nodes, active.jobs, maintenance.windows || []);
    if (selectedJob) showJob(await api("/api/jobs/" + encodeURIComponent(selectedJob)));
    document.body.dataset.loaded = "1";
  } catch (e) {
    if (e instanceof Refused && (e.status === 401 || e.status === 403)) {
      $("app").hidden = true;
      $("login").hidden = false;
      notice(e.message, true);
    } else {
      notice("Could not load: " + e.message + " (retrying)", true);
      clearTimeout(reloadTimer);
      reloadTimer = setTimeout(reload, RETRY_MS);
    }
  }
}

function scheduleReload() {
  clearTimeout(reloadTimer);
  reloadTimer = setTimeout(reload, RELOAD_DELAY_MS);
}

function showCluster(c) {
  $("where").textContent = "cluster " + c.cluster_id + " · replica " + c.answered_by;
  if (!c.leader_id) {
    notice("No leader is known: the cluster cannot commit or answer fresh reads until one is elected.", true);
  } else if (c.leader_id !== c.answered_by) {
    notice("This replica (" + c.answered_by + ") follows; replica " + c.leader_id + " at " + c.leader_addr +
      " leads. What you see is read through the leader, so it is current.");
  } else {
    notice("");
  }
  const replicas = h("table", {}, h("tr", {}, h("th", {}, "replica"), h("th", {}, "address"), h("th", {}, "role"), h("th", {}, "failure")),
    c.replicas.map(r => h("tr", { "data-replica": r.id, "data-role": r.role },
      h("td", {}, r.id), h("td", {}, r.addr), h("td", {}, r.role), h("td", {}, r.failure))));
  const pools = c.pools.map(p => h("div", { "data-pool": p.pool },
    "pool " + p.pool + ": " + gpus(p.used) + " of " + gpus(p.capacity) + " GPUs in use"));
  const facts = h("p", {}, "leader ", h("b", { id: "leader" }, c.leader_id || "none"), " · term ", h("b", { id: "term" }, c.term),
    " · applied index " + c.applied_index + " · " + c.jobs_running + " running, " + c.jobs_pending + " pending" +
    (c.insecure ? " · INSECURE transport" : ""));
  $("cluster").querySelector(".body").replaceChildren(facts, ...pools, replicas);
}

// A bar per (queue, pool): used up to the nominal quota in blue, borrowed beyond it in
// orange, the nominal quota marked by a line.
function quotaBar(used, nominal, scale) {
  const pct = v => (scale ? (100 * v) / scale : 0) + "%";
  const own = Math.min(used, nominal);
  return h("span", { class: "bar", title: used + " used, " + nominal + " nominal" },
    h("span", { class: "used", style: { width: pct(own) } }),
    h("span", { class: "borrowed", style: { left: pct(own), width: pct(Math.max(0, used - nominal)) } }),
    h("span", { class: "nominal", style: { width: pct(nominal) } }));
}

function showQueues(queues) {
  let scale = 1;
  for (const q of queues) for (const p of q.pools) scale = Math.max(scale, gpus(p.used), gpus(p.capacity));
  const rows = [];
  for (const q of queues) {
    for (const p of q.pools) {
      const used = gpus(p.used), nominal = gpus(p.capacity);
      rows.push(h("tr", { "data-queue": q.queue.name, "data-pool": p.pool, "data-used": used, "data-borrowed": Math.max(0, used - nominal) },
        h("td", {}, q.queue.name), h("td", {}, p.pool), h("td", {}, quotaBar(used, nominal, scale)),
        h("td", {}, used + " used / " + nominal + " nominal" + (used > nominal ? " (borrowing " + (used - nominal) + ")" : "")),
        h("td", {}, q.running + " running, " + q.pending + " pending"), h("td", {}, q.queue.cohort || "")));
    }
  }
  const legend = h("p", { class: "legend muted" }, h("span", { class: "used" }), "used within quota",
    h("span", { class: "borrowed" }), "borrowed", h("span", { class: "nominal" }), "nominal quota");
  const table = h("table", {}, h("tr", {}, ["queue", "pool", "GPUs", "", "jobs", "cohort"].map(t => h("th", {}, t))), rows);
  $("queues").querySelector(".body").replaceChildren(legend, table);
}

function gpuHours(ms) { return (ms / 3600000).toFixed(ms && ms < 36000 ? 4 : 2); }

// Stacked bars, one per bucket (a day by default), a segment per queue, user or pool in GPU-hours,
// from accounting's records and what runs now; a legend with each one's total.
function showUsage(u) {
  const choose = (what, value, label, current) => h("button", {
    class: value === current ? "chosen" : "", "data-choose": what + "=" + value,
    onclick: () => { if (what === "by") usageBy = value; else usageDays = value; reload(); },
  }, label);
  const controls = h("p", { class: "controls" },
    ["queue", "user", "pool"].map(b => choose("by", b, "by " + b, usageBy)), " ",
    [7, 30].map(d => choose("days", d, d + " days", usageDays)));
  const buckets = u.rows.length ? u.rows[0].gpu_ms.length : 0;
  let top = 1;
  for (let i = 0; i < buckets; i++) top = Math.max(top, u.rows.reduce((s, r) => s + r.gpu_ms[i], 0));
  const color = i => ({ background: USAGE_COLORS[i % USAGE_COLORS.length] });
  const bars = Array.from({ length: buckets }, (_, i) => {
    const from = u.since_ms + i * u.bucket_ms;
    const segments = u.rows.map((r, k) => r.gpu_ms[i] ? h("span", {
      class: "segment", style: Object.assign({ height: (100 * r.gpu_ms[i]) / top + "%" }, color(k)),
      title: r.key + ": " + gpuHours(r.gpu_ms[i]) + " GPU-hours",
    }) : null);
    return h("div", { class: "column", "data-bucket": i, title: new Date(from).toLocaleDateString() }, segments);
  });
  const legend = u.rows.map((r, k) => {
    const total = r.gpu_ms.reduce((a, b) => a + b, 0);
    return h("span", { class: "key", "data-usage-key": r.key, "data-gpu-hours": gpuHours(total) },
      h("span", { class: "swatch", style: color(k) }), r.key + " " + gpuHours(total) + " GPU-hours");
  });
  const body = u.rows.length
    ? [h("div", { class: "chart", title: "peak " + gpuHours(top) + " GPU-hours a bar" }, bars), h("p", { class: "legend-usage" }, legend)]
    : [h("p", { class: "muted" }, "No GPU time in the last " + usageDays + " days that you may see.")];
  $("usage").querySelector(".body").replaceChildren(controls, ...body,
    h("p", { class: "muted" }, "GPU-hours by " + u.by + ", one bar per " + Math.round(u.bucket_ms / 3600000) +
      " h; `baton usage` and `baton history` give the numbers."));
}

function placements(j) {
  return j.placements.map(p => p.node + ":" + p.gpus.join(",")).join(" ");
}

// An elastic gang's size of its top (decisions.md section 13): "3/8", or "" for a rigid job.
function elastic(j) {
  const t = j.elastic_max_replicas ? j.spec.tasks.find(t => t.min_replicas) : null;
  return t ? t.replicas + "/" + j.elastic_max_replicas : "";
}

function showJobs(page) {
  // A rigid job's row has no data-elastic.
  const rowAttrs = j => Object.assign({ "data-job": j.spec.name, "data-state": j.state, onclick: () => select(j.spec.name) },
    elastic(j) ? { "data-elastic": elastic(j) } : {});
  const rows = page.jobs.map(j => h("tr", rowAttrs(j),
    h("td", {}, j.id), h("td", {}, j.spec.name + (elastic(j) ? " (elastic " + elastic(j) + ")" : "")), h("td", {}, j.spec.queue),
    h("td", { class: "state state-" + j.state }, j.state), h("td", {}, j.attempt), h("td", {}, placements(j)),
    h("td", { class: "reason" }, j.preempted_by ? "preempted by " + j.preempted_by : j.reason),
    h("td", {}, j.owner)));
  const table = h("table", {}, h("tr", {}, ["id", "name", "queue", "state", "attempt", "GPUs", "reason", "owner"].map(t => h("th", {}, t))), rows);
  const nav = h("p", {},
    jobsAfter ? h("button", { onclick: () => { jobsAfter = ""; reload(); } }, "first page") : null,
    page.truncated ? h("button", { onclick: () => { jobsAfter = page.next_page_token; reload(); } }, "next page") : null);
  $("jobs").querySelector(".body").replaceChildren(page.jobs.length ? table : h("p", { class: "muted" }, "No jobs."), nav);
}

// One line per array: its elements not created yet are pending without being jobs.
function showArrays(arrays) {
  $("arrays").hidden = arrays.length === 0;
  const rows = arrays.map(a => {
    const last = a.array.first + a.array.count - 1;
    const done = a.succeeded + a.failed + a.cancelled;
    const state = a.cancelled_whole ? "Cancelled" : a.finished_ms ? "Ended" : "Running";
    return h("tr", { "data-array": a.name, "data-state": state },
      h("td", {}, a.id), h("td", {}, a.name + "-[" + a.array.first + "-" + last + "]"), h("td", {}, a.queue),
      h("td", {}, a.array.max_running || "none"), h("td", {}, a.running), h("td", {}, a.pending), h("td", {}, done),
      h("td", {}, a.failed), h("td", { class: "reason" }, a.pending ? a.reason : ""));
  });
  const head = ["id", "array", "queue", "max running", "running", "pending", "done", "failed", "reason"];
  $("arrays").querySelector(".body").replaceChildren(h("table", {}, h("tr", {}, head.map(t => h("th", {}, t))), rows));
}

function select(name) {
  selectedJob = name;
  history.replaceState(null, "", location.pathname + "#job=" + encodeURIComponent(name));
  reload();
}

// Attempts from the job's events: each `Started` opens one, the next event that stops or
// ends the job closes it (a `Preempted` in between is noted on it).
const CLOSES = ["Stopped", "Suspended", "Requeued", "Succeeded", "Failed", "Cancelled", "TimedOut"];

function attempts(job) {
  const out = [];
  let open = null;
  for (const e of job.events) {
    if (e.kind === "Started") {
      open = { n: e.attempt, from: e.at_ms, to: null, note: "", nodes: e.nodes.join(",") };
      out.push(open);
    } else if (open && e.kind === "Preempted") {
      open.preempted = true;
      open.note = e.message;
    } else if (open && CLOSES.includes(e.kind)) {
      open.to = e.at_ms;
      open.end = e.kind;
      open = null;
    }
  }
  return out;
}

function showJob(j) {
  const s = $("job");
  s.hidden = false;
  s.dataset.job = j.spec.name;
  s.querySelector(".name").textContent = j.spec.name + " (" + j.state + ")";
  const now = Date.now();
  const from = j.submitted_ms, to = Math.max(j.finished_ms || now, from + 1);
  const pct = v => (100 * (v - from)) / (to - from) + "%";
  const bars = attempts(j).map(a => h("div", {
    class: "attempt" + (a.to ? "" : " open"), "data-attempt": a.n, "data-end": a.end || "running",
    style: { left: pct(a.from), width: pct(from + ((a.to || to) - a.from)) },
    title: "attempt " + a.n + " on " + a.nodes + ": " + time(a.from) + " to " + (a.to ? time(a.to) : "now") + " " + a.note,
  }, "#" + a.n + " " + (a.preempted ? "preempted" : a.end || "running")));
  const facts = h("p", {}, "queue " + j.spec.queue + " · priority " + j.priority + " · attempt " + j.attempt +
    " · " + (j.has_checkpoint ? "has a checkpoint" : "no checkpoint") + (j.reason ? " · " + j.reason : "") +
    (elastic(j) ? " · elastic: " + elastic(j) + " replicas, at least " + j.spec.tasks.find(t => t.min_replicas).min_replicas : "") +
    (j.waiting_for && j.waiting_for.length ? " · waits for " + j.waiting_for.map(d => d.when + ":" + d.job).join(", ") : "") +
    (j.env_hidden ? " · environment hidden (not yours)" : ""));
  const events = h("table", { class: "job-events" }, h("tr", {}, ["time", "event", "node", "what"].map(t => h("th", {}, t))),
    j.events.map(e => h("tr", { "data-kind": e.kind }, h("td", {}, time(e.at_ms)), h("td", {}, e.kind),
      h("td", {}, e.node), h("td", {}, e.message))));
  const close = h("button", { onclick: () => { selectedJob = null; s.hidden = true; history.replaceState(null, "", location.pathname); } }, "close");
  s.querySelector(".body").replaceChildren(facts, h("div", { class: "timeline" }, bars), events, close);
}

// Maintenance windows ahead and started, one line each (decisions.md section 14).
function windowLines(windows) {
  return windows.map(w => h("p", { class: "window", "data-window": w.name, "data-state": w.active ? "started" : "ahead" },
    "maintenance window " + w.name + " (" + w.nodes.join(", ") + "): " + new Date(w.start_ms).toLocaleString() +
    " to " + new Date(w.end_ms).toLocaleString() + (w.active ? ", started: its nodes take no work" : ", ahead")));
}

// A node's topology domains other than the rack (decisions.md section 10).
function domainsText(n) {
  const named = Object.entries(n.domains || {}).sort().map(([level, d]) => level + " " + d);
  return named.length ? " · " + named.join(" · ") : "";
}

// MIG slices in use and offered per profile (decisions.md section 11), one line per profile.
function sliceLines(n) {
  const offered = (n.resources && n.resources.amounts) || {}, used = (n.used && n.used.amounts) || {};
  return Object.keys(offered).filter(k => k.startsWith("mig-")).sort().map(p =>
    h("p", { class: "slices", "data-node": n.name, "data-profile": p }, "MIG " + p + ": " + (used[p] || 0) + " of " + offered[p] + " slices in use"));
}

// Thousandths of a GPU as a decimal: 500 -> "0.5".
function fraction(milli) { return String(milli / 1000); }

// A GPU that fractions share: each job with its share, and the share held in all.
function sharedCell(n, g, held) {
  const jobs = [...held.keys()].sort(), total = [...held.values()].reduce((a, b) => a + b, 0);
  return h("div", { class: "gpu shared", "data-node": n.name, "data-gpu": g.i, "data-job": jobs.join(","),
    "data-shared-milli": total, title: fraction(total) + " of the GPU held by fractions" },
    "GPU " + g.i + " · " + fraction(total), ...jobs.flatMap(j => [h("br"), j + " " + fraction(held.get(j))]));
}

function showNodes(nodes, active, windows) {
  const holder = new Map(), shares = new Map();
  for (const j of active) for (const p of j.placements) p.gpus.forEach((g, i) => {
    const key = p.node + "/" + g, milli = (p.gpu_milli || [])[i] || 0;
    if (!milli) { holder.set(key, j.spec.name); return; }
    // A shared GPU (decisions.md section 11): each job's share, its replicas' added up.
    const held = shares.get(key) || new Map();
    shares.set(key, held.set(j.spec.name, (held.get(j.spec.name) || 0) + milli));
  });
  const cards = nodes.map(n => {
    const faults = new Map((n.unhealthy_gpus || []).map(f => [f.gpu, f.error]));
    const indices = n.gpus.length ? n.gpus.map(g => ({ i: g.index, healthy: g.healthy, model: g.model }))
      : Array.from({ length: gpus(n.resources) }, (_, i) => ({ i, healthy: true, model: "" }));
    const cells = indices.map(g => {
      const held = shares.get(n.name + "/" + g.i);
      if (held) return sharedCell(n, g, held);
      const job = holder.get(n.name + "/" + g.i);
      const fault = faults.get(g.i);
      const healthy = g.healthy && fault === undefined;
      return h("div", { class: "gpu" + (job ? " held" : "") + (healthy ? "" : " unhealthy"), "data-node": n.name, "data-gpu": g.i, "data-job": job || "",
        title: fault ? "unhealthy: " + fault : g.model, "data-fault": fault || "" },
        "GPU " + g.i, h("br"), job || h("span", { class: "muted" }, fault ? "unhealthy" : "free"));
    });
    const status = n.status + (n.cordoned ? ", cordoned" : "") + (n.unhealthy ? ": " + n.unhealthy : "") +
      (n.maintenance ? ", in maintenance window " + n.maintenance : "");
    return h("div", { class: "node", "data-node": n.name, "data-status": n.status, "data-maintenance": n.maintenance || "" },
      h("div", {}, h("b", {}, n.name), " · pool " + n.pool + (n.rack ? " · rack " + n.rack : "") + domainsText(n) + " · " + status),
      h("div", { class: "grid" }, cells), ...sliceLines(n));
  });
  $("nodes").querySelector(".body").replaceChildren(...windowLines(windows),
    ...(cards.length ? cards : [h("p", { class: "muted" }, "No nodes.")]));
}

function showEvent(e) {
  const list = $("events").querySelector(".body");
  list.prepend(h("li", { "data-kind": e.kind }, time(e.at_ms) + " " + e.kind + " " + (e.job || e.node) + ": " + e.message));
  while (list.children.length > EVENTS_SHOWN) list.lastChild.remove();
}

// The event stream is read with fetch (EventSource cannot send an Authorization header).
async function follow() {
  const live = $("live");
  try {
    const headers = token() ? { Authorization: "Bearer " + token() } : {};
    const r = await fetch("/api/events", { headers, cache: "no-store" });
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error || r.statusText);
    live.textContent = "live";
    live.className = "live on";
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffered.indexOf("\n\n")) >= 0) {
        const message = buffered.slice(0, cut);
        buffered = buffered.slice(cut + 2);
        for (const line of message.split("\n")) {
          if (line.startsWith("data: {")) showEvent(JSON.parse(line.slice(6)));
        }
        if (!message.startsWith(":")) scheduleReload();
      }
    }
  } catch (e) {
    live.title = e.message;
  }
  live.textContent = "not live";
  live.className = "live off";
  setTimeout(follow, RECONNECT_MS);
}

function start() {
  readFragment();
  $("login").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    reload();
  });
  $("logout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
  reload();
  follow();
}

start();
