// app.js - the bramble dashboard: nodes, jobs, events, and a job's page, kept up to
// date by the coordinator's event stream (/api/events, server-sent events). Plain
// JavaScript, no libraries; everything from the server goes in as text, never HTML.
"use strict";

const CSRF = document.querySelector('meta[name="csrf"]').content;
const HOUR_MS = 3600 * 1000;

// ---- small helpers ----------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v; // (the CSP refuses style attributes)
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined)
    e.append(k instanceof Node ? k : String(k));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function bytes(n) {
  if (n === null || n === undefined) return "?";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function when(s) {
  if (!s) return "";
  const d = new Date(s * 1000);
  return d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"});
}

function state(s) { return el("span", {class: "state s-" + s}, s); }

class Unauthorized extends Error {}

async function api(path) {
  const r = await fetch(path, {credentials: "same-origin", cache: "no-store"});
  if (r.status === 401) throw new Unauthorized("session ended");
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

async function post(path) {
  const r = await fetch(path, {method: "POST", credentials: "same-origin",
                               headers: {"X-CSRF-Token": CSRF}});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

function sessionEnded() {
  const main = document.getElementById("main");
  main.replaceChildren(el("p", {class: "error"}, "Your session has ended. Run ",
                          el("code", {}, "bramble dashboard"), " for a new link."));
  setLive(false, "logged out");
}

function setLive(on, text) {
  const l = document.getElementById("live");
  l.textContent = text || (on ? "live" : "reconnecting");
  l.className = "live" + (on ? "" : " off");
}

// Run fn at most once per `ms`, the last call winning.
function debounce(fn, ms) {
  let t = null;
  return () => { if (!t) t = setTimeout(() => { t = null; fn(); }, ms); };
}

// The event stream: news of a job (or 0: a node) and ticks; reconnects by itself.
function stream(query, onNews, onTick) {
  const es = new EventSource("/api/events" + query);
  es.addEventListener("hello", () => { setLive(true); onNews(0); });
  es.addEventListener("news", (e) => { setLive(true); onNews(JSON.parse(e.data).job); });
  es.addEventListener("tick", () => { setLive(true); onTick(); });
  es.onerror = () => {
    setLive(false);
    api("/api/whoami").catch((e) => { if (e instanceof Unauthorized) { es.close(); sessionEnded(); } });
  };
  return es;
}

// ---- nodes --------------------------------------------------------------------

const gpuHistory = {}; // "node/gpu" -> [{t, util, power}], the last hour seen by this page

function sample(node, g) {
  const k = node.name + "/" + g.index;
  const h = gpuHistory[k] || (gpuHistory[k] = []);
  const now = Date.now();
  if (!h.length || now - h[h.length - 1].t > 2000)
    h.push({t: now, util: g.util, power: g.power_w});
  while (h.length && now - h[0].t > HOUR_MS) h.shift();
  return h;
}

// A GPU's figures over the last hour: the coordinator's (one per 15 s, null where
// unknown), else what this page has seen.
function series(node, g, key) {
  if (g.history && Array.isArray(g.history[key])) return g.history[key];
  return sample(node, g).map((p) => p[key]);
}

function sparkline(vals, max, label, unit, digits) {
  const s = svg("svg", {viewBox: "0 0 100 24", preserveAspectRatio: "none",
                        role: "img", "aria-label": label});
  const pts = vals.map((v, i) => [i, v]).filter((p) => typeof p[1] === "number");
  if (pts.length === 1) pts.push([pts[0][0] + 1, pts[0][1]]); // one figure: a level line
  if (pts.length) {
    // the width holds what is known, up to the hour: a young history is not a dot
    const top = Math.max(max || 0, ...pts.map((p) => p[1])) || 1;
    const first = pts[0][0], span = Math.max(1, pts[pts.length - 1][0] - first);
    s.append(svg("polyline", {points: pts.map(([i, v]) =>
      ((i - first) / span * 100).toFixed(1) + "," + (23 - (v / top) * 22).toFixed(1)).join(" ")}));
  }
  const last = pts.length ? pts[pts.length - 1][1] : null;
  return el("span", {class: "spark"}, label, s,
            last === null ? "–" : last.toFixed(digits) + unit);
}

// The jobs holding a GPU (held_by: node.list), each linked to its page: "job 12
// (train): whole GPU", "job 13 (infer): 7.0 GiB", as bramble node show says it;
// null when none does.
function holdersView(holders) {
  if (!holders.length) return null;
  const items = holders.map((h, i) => el("span", {class: "holder", "data-job": h.job},
    i ? " · " : "", el("a", {href: "/job/" + h.job}, "job " + h.job),
    h.name ? " (" + h.name + ")" : "", ": " + (h.whole ? "whole GPU" : bytes(h.vram))));
  return el("div", {class: "kv holders"}, "held by ", ...items);
}

function gpuView(node, g) {
  // as the scheduler counts: vram_free is what NVML says is free plus what
  // bramble's jobs hold (they may not use it all yet); a new job gets the rest
  const total = g.vram_total || 0;
  const used = typeof g.vram_used === "number" ? g.vram_used : null;
  const holders = Array.isArray(g.held_by) ? g.held_by : [];
  const whole = holders.some((h) => h.whole);
  const held = whole ? total : typeof g.vram_held === "number" ? g.vram_held : 0;
  const heldText = whole ? "held by bramble: whole GPU"
    : held || holders.length ? "held by bramble " + bytes(held) : "held by bramble: none";
  const free = typeof g.vram_free === "number" ? Math.max(0, g.vram_free - held) : null;
  const pct = (v) => (total ? Math.max(0, Math.min(100, v / total * 100)) : 0).toFixed(1) + "%";
  const other = free === null ? 0 : Math.max(0, total - free - held); // used outside bramble
  const bar = el("div", {class: "bar", title: "VRAM"},
                 el("span", {class: "used", style: "width:" + pct(other)}),
                 el("span", {class: "held", style: "width:" + pct(held)}));
  return el("div", {class: "gpu", "data-gpu": g.index},
    el("div", {}, el("b", {}, "GPU " + g.index), " ", g.model || ""),
    bar,
    el("div", {class: "legend kv"},
       el("i", {style: "background:var(--info)"}), "used " + (used === null ? "?" : bytes(used)),
       el("i", {style: "background:var(--held)"}), heldText,
       el("i", {style: "background:#e7eaf0"}), "free " + bytes(free), " of " + bytes(total)),
    holdersView(holders),
    el("div", {class: "kv"}, sparkline(series(node, g, "util"), 100, "util ", "%", 0), " ",
       sparkline(series(node, g, "power"), 0, "power ", " W", 0)));
}

function nodeView(n, admin, refresh) {
  const actions = [];
  if (admin && (n.state === "ready" || n.state === "draining")) {
    const act = n.state === "ready" ? "drain" : "undrain";
    actions.push(el("button", {type: "button", "data-action": act, onclick: async (e) => {
      e.target.disabled = true;
      try { await post("/api/nodes/" + encodeURIComponent(n.name) + "/" + act); }
      catch (err) { alert(act + " " + n.name + ": " + err.message); }
      refresh();
    }}, act));
  }
  const gpus = n.gpus || [];
  // what it costs per hour now (fixed rate and electricity), and the draw behind it
  const cost = typeof n.cost_per_hour === "number" && n.cost_per_hour > 0
    ? "costs " + Number(n.cost_per_hour.toPrecision(4)) + "/h" +
      (typeof n.power_watts === "number" ? " at " + Math.round(n.power_watts) + " W" : "")
    : null;
  return el("div", {class: "card node", "data-node": n.name},
    el("h3", {}, n.name, state(n.state), ...actions),
    el("div", {class: "kv"},
       [n.arch, (n.cpus || "?") + " CPUs", bytes(n.memory) + " RAM",
        "load " + (typeof n.load === "number" ? n.load.toFixed(2) : "?"),
        (n.jobs || []).length + " job(s)"].concat(cost ? [cost] : []).join(" · ")),
    gpus.length ? null : el("div", {class: "kv"}, "no GPUs"),
    ...gpus.map((g) => gpuView(n, g)));
}

// ---- jobs -----------------------------------------------------------------------

const steps = {}; // job id -> newest checkpoint step (from its page's data)

function newestStep(job) {
  const cps = job.checkpoints || [];
  let best = null;
  for (const c of cps) if (typeof c.step === "number" && (best === null || c.step > best)) best = c.step;
  return best;
}

// What a job cost so far, as charged (docs/sharing.md), or "–": as bramble jobs shows it.
function costSoFar(j) {
  const c = j.usage && typeof j.usage.cost === "number" ? j.usage.cost : 0;
  return c > 0 ? c.toFixed(c >= 100 ? 0 : c >= 1 ? 2 : 4) : "–";
}

function jobsTable(jobs) {
  const head = ["ID", "Name", "State", "Owner", "Nodes", "Attempt", "Checkpoint", "Cost"];
  return el("div", {class: "table"}, el("table", {id: "jobs"},
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...jobs.map((j) => el("tr", {"data-job": j.id},
      el("td", {}, el("a", {href: "/job/" + j.id}, String(j.id))),
      el("td", {}, j.name), el("td", {}, state(j.state)), el("td", {}, j.owner || ""),
      el("td", {}, (j.nodes || []).join(", ")), el("td", {}, String(j.attempt)),
      el("td", {}, steps[j.id] === undefined || steps[j.id] === null ? "–" : "step " + steps[j.id]),
      el("td", {}, costSoFar(j)))))));
}

// The services behind the gateway, one row per model: its replicas (healthy of
// wanted, and those draining), its requests in flight and waiting, answers a
// second and their mean time, as the gateways reported them (service.list).
function modelsTable(services) {
  const head = ["Model", "Service", "Replicas", "In flight", "Waiting", "Rate (req/s)",
                "Latency (ms)", "Errors (/s)"];
  const fixed = (x, d) => (typeof x === "number" ? x.toFixed(d) : "–");
  return el("div", {class: "table"}, el("table", {id: "models"},
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...services.map((s) => {
      const reps = s.replicas || [];
      const healthy = reps.filter((r) => r.health === "healthy" && !r.draining).length;
      const draining = reps.filter((r) => r.draining).length;
      const as = s.autoscale ? ` (${s.autoscale.min}..${s.autoscale.max})` : "";
      const names = [s.model, ...(s.aliases || []), ...(s.adapters || [])].join(", ");
      const l = s.load || {};
      return el("tr", {"data-service": s.id},
        el("td", {}, names),
        el("td", {}, el("a", {href: "/job/" + s.id}, s.name)),
        el("td", {}, `${healthy} of ${s.replicas_wanted}${as}` +
                     (draining ? `, ${draining} draining` : "")),
        el("td", {}, String(l.inflight ?? 0)), el("td", {}, String(l.waiting ?? 0)),
        el("td", {}, fixed(l.rate, 1)),
        el("td", {}, l.rate > 0 ? fixed(l.latency_ms, 1) : "–"),
        el("td", {}, fixed(l.errors, 1)));
    }))));
}

function eventLine(e) {
  return el("li", {},
    el("time", {}, when(e.time)),
    e.job ? el("a", {href: "/job/" + e.job}, "job " + e.job) : "node " + (e.node || ""),
    " ", el("b", {}, e.state), e.node && e.job ? " on " + e.node : "",
    e.reason ? ": " + e.reason : "");
}

// ---- the overview ---------------------------------------------------------------

async function overview(me) {
  const main = document.getElementById("main");
  const nodesBox = el("div", {class: "grid", id: "nodes"});
  const jobsBox = el("div", {id: "jobs-box"});
  const feed = el("ol", {class: "feed", id: "events"});
  const modelsBox = el("div", {id: "models-box"});
  const modelsHead = el("h2", {}, "Models");
  main.replaceChildren(el("h2", {}, "Nodes"), nodesBox, modelsHead, modelsBox,
                       el("h2", {}, "Jobs"), jobsBox, el("h2", {}, "Events"), feed);
  let after = null; // the id of the newest event seen (null: find it first)
  const events = [];

  // The newest event's id, found by halving (ids only grow; a user's listing skips
  // what they may not see, but its "next" still moves past it), so that a
  // coordinator with a long history costs a few small requests, not all of it.
  const newestId = async () => {
    const past = async (id) => (await api("/api/event-list?limit=1&after=" + id)).next !== id;
    let lo = 0, hi = 256;
    while (await past(hi)) { lo = hi; hi *= 2; }
    while (hi - lo > 1) { const mid = Math.floor((lo + hi) / 2); if (await past(mid)) lo = mid; else hi = mid; }
    return (await past(lo)) ? hi : lo;
  };

  const refreshNodes = async () => {
    const r = await api("/api/nodes");
    nodesBox.replaceChildren(...r.nodes.map((n) => nodeView(n, me.admin, refreshNodes)));
    if (!r.nodes.length) nodesBox.append(el("p", {class: "muted"}, "No nodes have joined yet."));
  };
  const refreshJobs = async () => {
    // newest first (highest id): running and new jobs at the top; the list is the
    // coordinator's newest jobs, and the checkpoint steps are asked for the newest 25
    const jobs = (await api("/api/jobs")).jobs.slice().sort((a, b) => b.id - a.id);
    const active = jobs.filter((j) => steps[j.id] === undefined ||
                               ["pending", "starting", "running"].includes(j.state));
    await Promise.all(active.slice(0, 25).map(async (j) => {
      try { steps[j.id] = newestStep((await api("/api/jobs/" + j.id)).job); } catch (e) {}
    }));
    jobsBox.replaceChildren(jobs.length ? jobsTable(jobs)
                                        : el("p", {class: "muted"}, "No recent jobs."));
  };
  const refreshModels = async () => {
    const list = (await api("/api/services")).services.filter((s) => s.model);
    modelsHead.hidden = modelsBox.hidden = !list.length; // (no section without one)
    modelsBox.replaceChildren(...(list.length ? [modelsTable(list)] : []));
  };
  const refreshEvents = async () => {
    if (after === null) after = Math.max(0, (await newestId()) - 200);
    for (;;) {
      const r = await api("/api/event-list?after=" + after);
      events.push(...r.events);
      const more = r.next !== after && r.events.length >= 1000;
      after = r.next;
      if (!more) break;
    }
    events.splice(0, Math.max(0, events.length - 200));
    feed.replaceChildren(...events.slice().reverse().map(eventLine));
  };
  const guard = (fn) => () => fn().catch((e) => {
    if (e instanceof Unauthorized) sessionEnded(); else console.warn(e);
  });
  const jobsSoon = debounce(guard(refreshJobs), 150);
  const eventsSoon = debounce(guard(refreshEvents), 150);
  const nodesSoon = debounce(guard(refreshNodes), 150);
  const modelsSoon = debounce(guard(refreshModels), 150);
  // news: a job's events (a watcher of every job hears job 0: ask again for all);
  // ticks, every 5 s of quiet: the nodes' live figures and the jobs' checkpoints,
  // which come with no event
  stream("", () => { jobsSoon(); eventsSoon(); nodesSoon(); modelsSoon(); },
         () => { nodesSoon(); jobsSoon(); modelsSoon(); });
}

// ---- a job's page -----------------------------------------------------------------

// Its life as a timeline: attempts started, nodes lost, resumes from a step, the end.
function timelineItem(e) {
  const r = e.reason || "";
  let kind = e.state, what = e.state;
  const resumed = r.match(/resum\w* from (?:checkpoint )?step (\d+)|from step (\d+)|step (\d+)/i);
  if (/lost/i.test(r) || e.state === "lost") { kind = "lost"; what = "node lost"; }
  else if ((e.state === "starting" || e.state === "running") && resumed)
    { kind = "resumed"; what = "resumed from step " + (resumed[1] || resumed[2] || resumed[3]); }
  else if (e.state === "starting" || e.state === "running") what = e.state;
  const attempt = r.match(/^attempt (\d+)/);
  return el("li", {class: "t-" + kind},
    el("time", {}, when(e.time)), attempt ? el("span", {class: "attempt"}, "#" + attempt[1]) : null,
    el("span", {class: "what"}, what),
    e.node ? " on " + e.node : "", r ? el("div", {class: "kv"}, r) : null);
}

async function jobPage(me, id) {
  const main = document.getElementById("main");
  const head = el("div", {class: "card", id: "job-head"});
  const timeline = el("ol", {class: "timeline", id: "timeline"});
  const cps = el("div", {id: "checkpoints"});
  const log = el("pre", {class: "log", id: "log"});
  main.replaceChildren(el("p", {}, el("a", {href: "/"}, "← all jobs")), head,
                       el("h2", {}, "Timeline"), timeline, el("h2", {}, "Checkpoints"), cps,
                       el("h2", {}, "Log"), log);
  let cursor = 0, logText = "";

  const refreshJob = async () => {
    const j = (await api("/api/jobs/" + id)).job;
    const ended = ["completed", "failed", "cancelled"].includes(j.state);
    const cancel = ended ? null : el("button", {type: "button", class: "danger", id: "cancel",
      onclick: async (e) => {
        if (!confirm("Cancel job " + j.id + "?")) return;
        e.target.disabled = true;
        try { await post("/api/jobs/" + j.id + "/cancel"); } catch (err) { alert(err.message); }
        refreshJob();
      }}, "Cancel");
    document.title = "bramble: job " + j.id + " " + j.name;
    head.replaceChildren(
      el("h3", {}, "Job " + j.id + ": " + j.name, state(j.state), cancel),
      el("div", {class: "kv"}, ["owner " + (j.owner || "?"), "attempt " + j.attempt,
        "nodes " + ((j.nodes || []).join(", ") || "–"), j.kind,
        costSoFar(j) === "–" ? "" : "cost so far " + costSoFar(j),
        j.exit_code === null || j.exit_code === undefined ? "" : "exit " + j.exit_code]
        .filter(Boolean).join(" · ")));
    timeline.replaceChildren(...(j.events || []).map(timelineItem));
    const list = (j.checkpoints || []).slice().reverse();
    cps.replaceChildren(list.length ? el("div", {class: "table"}, el("table", {},
      el("thead", {}, el("tr", {}, ...["Step", "Attempt", "Node", "Size", "Time", "Path"]
        .map((h) => el("th", {}, h)))),
      el("tbody", {}, ...list.map((c) => el("tr", {},
        el("td", {}, String(c.step)), el("td", {}, String(c.attempt)), el("td", {}, c.node || ""),
        el("td", {}, bytes(c.size)), el("td", {}, when(c.time)), el("td", {}, c.path))))))
      : el("p", {class: "muted"}, "No checkpoints yet."));
  };
  const refreshLog = async () => {
    for (let page = 0; page < 50; page++) {
      const r = await api("/api/jobs/" + id + "/logs?after=" + cursor);
      if (r.text) logText += r.text;
      const moved = r.next !== cursor;
      cursor = r.next;
      if (!moved || !r.text) break;
    }
    if (logText.length > 200000) logText = logText.slice(-200000);
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.textContent = logText || "(no output yet)";
    if (atEnd) log.scrollTop = log.scrollHeight;
  };
  const guard = (fn) => () => fn().catch((e) => {
    if (e instanceof Unauthorized) sessionEnded();
    else head.replaceChildren(el("p", {class: "error"}, e.message));
  });
  const jobSoon = debounce(guard(refreshJob), 100);
  const logSoon = debounce(guard(refreshLog), 100);
  stream("?job=" + id + "&logs=1", () => { jobSoon(); logSoon(); }, jobSoon);
}

// ---- start ----------------------------------------------------------------------

async function start() {
  document.getElementById("logout").addEventListener("click", async () => {
    try { await post("/logout"); } catch (e) {}
    location.href = "/";
  });
  let me;
  try { me = await api("/api/whoami"); } catch (e) { sessionEnded(); return; }
  document.getElementById("who").textContent = me.name + (me.admin ? " (admin)" : "");
  const m = location.pathname.match(/^\/job\/(\d+)$/);
  if (m) jobPage(me, m[1]); else overview(me);
}

start();
