/* Vigil console: the page of the daemon's local web console. Plain ES2020,
 * no framework. Outside data (names, fields, error texts, manifests) reaches
 * the DOM only through textContent and createElement, never innerHTML. */
"use strict";

(() => {

// ===== Helpers: DOM building and formatting =====

const $ = (selector, root = document) => root.querySelector(selector);

/** An element: props class, text, dataset, on (listeners); other props are attributes. */
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(2)) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

/**
 * Bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE…) shown as such, in
 * texts that plugins, checks and files write: they cannot reverse on screen
 * what follows them ("Trojan Source").
 */
const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
const revealControls = (text) =>
  String(text).replace(BIDI_CONTROLS, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);

/** Writes only on change: refreshing 200 rows every 2 s stays cheap. */
function setText(node, text) { if (node.textContent !== text) node.textContent = text; }
function setTitle(node, title) { if (title) node.title = title; else node.removeAttribute("title"); }

const intFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const valueFormat = new Intl.NumberFormat(undefined, { maximumSignificantDigits: 4 });
const isNum = (n) => typeof n === "number" && isFinite(n);
const fmtInt = (n) => (isNum(n) ? intFormat.format(n) : "—");
const fmtValue = (v) => (!isNum(v) ? "—" : Math.abs(v) >= 10000 ? intFormat.format(v) : valueFormat.format(v));

function fmtBytes(bytes) {
  if (!isNum(bytes)) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(bytes) >= 1024 && i < units.length - 1) { bytes /= 1024; i++; }
  return (i ? bytes.toFixed(bytes < 10 ? 1 : 0) : bytes) + " " + units[i];
}

/** Seconds, short: 400 µs, 1.2 ms, 3.40 s, 3 min 4 s, 2 h 5 min, 3 d 4 h. */
function fmtDuration(s) {
  if (!isNum(s)) return "—";
  if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 1) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
  const m = Math.floor(s / 60), h = Math.floor(m / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  return h < 24 ? `${h} h ${m % 60} min` : `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** ms since the epoch from RFC 3339 (the daemon writes nanoseconds; Date wants ms). */
const parseTime = (iso) => (typeof iso === "string" ? Date.parse(iso.replace(/(\.\d{3})\d+/, "$1")) : NaN);

function fmtAge(iso) {
  const ms = parseTime(iso);
  if (!isNum(ms)) return "—";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 1) return "just now";
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return s < 172800 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
}

const pad = (n, w = 2) => String(n).padStart(w, "0");

/** Local time "14:03:07.123", with the date when not today. */
function fmtClock(ms, withMs = true) {
  if (!isNum(ms)) return "—";
  const d = new Date(ms);
  let text = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (withMs) text += "." + pad(d.getMilliseconds(), 3);
  if (d.toDateString() !== new Date().toDateString()) text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${text}`;
  return text;
}

/** A <time>: "3 s ago", the exact time as title. */
function timeNode(iso) {
  if (!iso) return el("span", { class: "muted", text: "—" });
  return el("time", { datetime: iso, title: iso, text: fmtAge(iso) });
}

const naturalCompare = (a, b) => a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });

const STATES = ["created", "starting", "running", "stopping", "stopped", "failed", "quarantined", "finished"];
const SEVERITIES = ["debug", "info", "notice", "warning", "error", "critical"];
const CONDITIONS = ["nominal", "warning", "critical", "stale"];

/** A badge with class "KIND-WORD"; an outside word outside `allowed` becomes "other". */
function badge(text, kind, allowed) {
  const word = allowed.includes(text) ? text : "other";
  return el("span", { class: `badge ${kind}-${word}`, text });
}

const monitorHref = (name) => "#/monitor/" + encodeURIComponent(name);
const monitorLink = (name) => el("a", { href: monitorHref(name), class: "name", title: name.length > 40 ? name : null, text: name });

/** A glob for the API that matches `name` (glob characters made `?`); the page then filters exactly. */
const exactGlob = (name) => encodeURIComponent(name.replace(/[*?[\]]/g, "?"));

/** A fill bar exposed as a meter. */
function bar(fraction, label) {
  const pct = Math.max(0, Math.min(100, Math.round((fraction || 0) * 100)));
  const fill = el("span", { class: "bar-fill" });
  fill.style.width = pct + "%";
  return el("span", {
    class: `bar bar-${pct >= 90 ? "high" : pct >= 60 ? "mid" : "low"}`, role: "meter",
    "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": pct, "aria-label": label,
  }, fill);
}

/** A table with caption and headings, in a wrapper that scrolls sideways on narrow screens. */
function tableIn(id, caption, headings, className) {
  const table = el("table", { id, class: className }, el("caption", { text: caption }),
    el("thead", null, el("tr", null, headings.map((h) => el("th", { scope: "col", text: h })))), el("tbody"));
  const wrap = el("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": caption }, table);
  return { wrap, tbody: table.tBodies[0] };
}

const emptyRow = (columns, text) => el("tr", { class: "empty" }, el("td", { colspan: columns, text }));

/** A <dl> of small cards: [term, value, extra class]. */
function fillFigures(dl, figures) {
  dl.replaceChildren(...figures.map(([term, value, cls]) =>
    el("div", { class: "figure" + (cls ? " " + cls : "") }, el("dt", { text: term }), el("dd", null, value))));
}

// ===== Talking to the daemon =====

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

const session = { csrf: null, active: false };
const errorText = (answer) => (answer.data && typeof answer.data.error === "string" ? answer.data.error : `HTTP ${answer.status}`);

/** One request: {status, ok, data, headers}; ApiError(0) when the daemon does not answer. */
async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET" && session.csrf) headers["X-Vigil-CSRF"] = session.csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, cache: "no-store", credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, "the daemon does not answer");
  }
  const data = await response.json().catch(() => null);
  return { status: response.status, ok: response.ok, data, headers: response.headers };
}

/**
 * A JSON call: the data or an ApiError. A 401 sends the page back to the
 * login form; an answer arriving after its view was left is dropped
 * (ApiError -1, which nobody reports).
 */
async function api(path, options = {}) {
  const owner = viewScope;
  const answer = await request(options.method || "GET", path, options.body);
  if (owner && !owner.alive) throw new ApiError(-1, "the view was left");
  if (answer.status === 401) { sessionLost(); throw new ApiError(401, "the session has ended"); }
  if (!answer.ok && !(options.allow || []).includes(answer.status)) throw new ApiError(answer.status, errorText(answer));
  return answer.data;
}

// ===== What the daemon keeps: a history sink or not =====

/**
 * Charts, sparklines and events come from a sink of type "history"; without
 * one their endpoints answer 404. The page asks /v1/status (every 2 s for the
 * health badge anyway) whether there is one before it asks them.
 */
const HISTORY_HINT = "Add one to the manifest (sinks: { history: { type: history } }) to have them.";
const daemon = { history: null, at: 0 }; // history: null (not known yet), true or false; at: when a status said

function noteStatus(status) {
  if (status && Array.isArray(status.sinks)) {
    daemon.history = status.sinks.some((s) => s && s.type === "history");
    daemon.at = Date.now();
  }
  return status;
}

/** GET /v1/status, noting whether there is a history sink. */
const getStatus = async () => noteStatus(await api("/v1/status"));

/** Whether the daemon has a history sink: from a status at most 5 s old, else asked now. */
async function hasHistory() {
  if (daemon.history === null || Date.now() - daemon.at > 5000) await getStatus();
  return daemon.history === true;
}

/** A view's lifetime: the timers, streams and graphs it opened, closed together. */
function newScope() {
  const cleanups = [];
  return {
    alive: true,
    onClose(fn) { cleanups.push(fn); },
    close() {
      this.alive = false;
      for (const fn of cleanups.splice(0).reverse()) try { fn(); } catch (err) { /* the others still run */ }
    },
  };
}

/** Runs task now and `ms` after each end, while the tab is visible and the scope alive. */
function every(scope, ms, task) {
  let timer = null;
  async function run() {
    timer = null;
    if (!scope.alive) return;
    if (document.visibilityState === "visible") await task().catch(() => {});
    if (scope.alive) timer = setTimeout(run, ms);
  }
  const onVisible = () => {
    if (document.visibilityState === "visible" && timer !== null) { clearTimeout(timer); run(); }
  };
  document.addEventListener("visibilitychange", onVisible);
  scope.onClose(() => { clearTimeout(timer); document.removeEventListener("visibilitychange", onVisible); });
  run();
}

/**
 * A Server-Sent Events stream that reconnects. EventSource hides why a
 * connection was refused, so when it gives up the page asks the same URL
 * with fetch to tell a 401 (log in again) from a 503 (too many streams).
 * handlers: onState(state, text), onEvent(event), onPoints(message).
 */
function liveStream(scope, url, handlers) {
  let source = null, retry = null, closed = false;
  const say = handlers.onState;
  const parse = (message) => { try { return JSON.parse(message.data); } catch (err) { return null; } };
  const on = (type, fn) => source.addEventListener(type, (m) => { const data = parse(m); if (data) fn(data); });

  function open() {
    if (!scope.alive || closed) return;
    say("connecting", "connecting…");
    source = new EventSource(url);
    source.addEventListener("open", () => say("live", "on"));
    if (handlers.onEvent) on("event", handlers.onEvent);
    if (handlers.onPoints) on("points", handlers.onPoints);
    on("dropped", (d) => { say("error", `dropped by the daemon (${d.reason || "too slow"}), reconnecting`); reopen(1000); });
    // The history sink was replaced by a reload: its series ids are new, so the view is drawn again.
    on("reset", () => { shut(); closed = true; if (scope.alive) route(false); });
    if (handlers.onGap) on("gap", handlers.onGap);
    source.addEventListener("error", () => {
      if (source && source.readyState === EventSource.CLOSED) diagnose();
      else say("connecting", "reconnecting…");
    });
  }

  function shut() {
    if (source) source.close();
    source = null;
    clearTimeout(retry);
  }

  function reopen(ms) {
    shut();
    retry = setTimeout(open, ms);
  }

  async function diagnose() {
    shut();
    const abort = new AbortController();
    let wait = 10000;
    try {
      const response = await fetch(url, { signal: abort.signal, cache: "no-store", credentials: "same-origin" });
      if (response.ok) { abort.abort(); wait = 1000; }
      else if (response.status === 401) { sessionLost(); return; }
      else {
        const why = response.status === 503 ? "the daemon has too many live streams open"
          : errorText({ status: response.status, data: await response.json().catch(() => null) });
        // A refusal of the request itself (no history sink, one that keeps no
        // events, a series gone) will not change by asking again.
        if (response.status >= 400 && response.status < 500 && response.status !== 429) {
          say("error", `unavailable: ${why}`);
          return;
        }
        say("error", `unavailable: ${why}; retrying in 10 s`);
      }
    } catch (err) {
      say("error", "unavailable: the daemon does not answer; retrying in 10 s");
    }
    reopen(wait);
  }

  const close = () => { closed = true; shut(); };
  scope.onClose(close);
  open();
  return { close };
}

// ===== Theme (light / dark) and chart colours =====

const THEME_KEY = "vigil-console-theme";
const graphs = new Map(); // each Dygraph shown -> "chart" | "spark", to recolour
const themeListeners = new Set(); // charts' legends, redrawn with the new colours

function storedTheme() {
  try { return localStorage.getItem(THEME_KEY); } catch (err) { return null; }
}

function currentTheme() {
  return document.documentElement.dataset.theme || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

function applyTheme(theme) {
  const root = document.documentElement;
  if (theme === "dark" || theme === "light") root.dataset.theme = theme; else delete root.dataset.theme;
  const dark = currentTheme() === "dark", button = $("#theme");
  button.textContent = "Dark theme";
  button.setAttribute("aria-pressed", String(dark));
  for (const [graph, kind] of graphs) graph.updateOptions(graphColours(kind));
  for (const fn of themeListeners) fn();
}

function toggleTheme() {
  const next = currentTheme() === "dark" ? "light" : "dark";
  try { localStorage.setItem(THEME_KEY, next); } catch (err) { /* private mode: not kept */ }
  applyTheme(next);
}

const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
const rootFontPx = () => parseFloat(getComputedStyle(document.documentElement).fontSize) || 16;

/** Dygraph colour options, from the theme's CSS variables. */
function graphColours(kind) {
  if (kind === "spark") return { colors: [cssVar("--spark")] };
  const colors = [];
  for (let i = 1; i <= 10; i++) colors.push(cssVar(`--series-${i}`));
  return { colors, gridLineColor: cssVar("--chart-grid"), axisLineColor: cssVar("--chart-axis") };
}

function addGraph(graph, kind, scope) {
  graphs.set(graph, kind);
  scope.onClose(() => dropGraph(graph));
  return graph;
}

function dropGraph(graph) {
  if (graph && graphs.delete(graph)) graph.destroy();
}

// ===== Session: login form, logout, health badge =====

let healthScope = null;

function showLogin(message) {
  session.active = false;
  $("#logout").hidden = true;
  $("#boot").hidden = true;
  $("#login-view").hidden = false;
  $("#login-error").textContent = message || "";
  setNavCurrent(null);
  document.title = "Log in · Vigil";
  $("#token").focus();
}

function enterConsole(data) {
  session.csrf = typeof data.csrf === "string" ? data.csrf : null;
  session.active = true;
  $("#login-view").hidden = true;
  $("#boot").hidden = true;
  $("#logout").hidden = (data.auth || "cookie") !== "cookie"; // nothing to log out of on the unix socket
  healthScope = newScope();
  every(healthScope, 2000, refreshHealth);
  route(false);
}

function leaveConsole(message) {
  closeView();
  if (healthScope) healthScope.close();
  showLogin(message);
}

function sessionLost() {
  if (session.active) leaveConsole("The session has ended (the daemon may have restarted with a new token): log in again.");
}

async function checkSession() {
  const retry = (why) => { $("#boot").textContent = `${why}; trying again in 5 s…`; setTimeout(checkSession, 5000); };
  let answer;
  try { answer = await request("GET", "/v1/session"); } catch (err) { retry("The daemon does not answer"); return; }
  if (answer.status === 200 && answer.data && answer.data.auth === "required") showLogin("");
  else if (answer.status === 200 && answer.data) enterConsole(answer.data);
  else if (answer.status === 401) showLogin("");
  else retry(`The session check failed: ${errorText(answer)}`);
}

async function submitLogin(event) {
  event.preventDefault();
  const input = $("#token"), message = $("#login-error"), button = $("#login button[type=submit]");
  message.textContent = "";
  button.disabled = true;
  try {
    const answer = await request("POST", "/v1/session", { token: input.value });
    if (answer.status === 200 && answer.data) {
      input.value = "";
      enterConsole({ csrf: answer.data.csrf, auth: "cookie" });
    } else if (answer.status === 429) {
      const after = answer.headers.get("Retry-After");
      message.textContent = `Too many attempts, wait${after ? ` ${after} s` : " a moment"} and try again.`;
    } else message.textContent = errorText(answer);
  } catch (err) {
    message.textContent = err.message;
  } finally {
    button.disabled = false;
  }
}

async function logout() {
  await request("DELETE", "/v1/session").catch(() => {}); // unreachable is logged out enough
  leaveConsole("");
}

async function refreshHealth() {
  const node = $("#health");
  try {
    // The status carries the health, always with 200: an unhealthy host is news, not a failed request.
    const health = ((await getStatus()) || {}).health || {};
    const ok = health.status === "ok";
    const reasons = Array.isArray(health.reasons) ? health.reasons.map(revealControls) : [];
    node.dataset.status = ok ? "ok" : "unhealthy";
    setText(node, ok ? "Healthy" : `Unhealthy: ${reasons.join("; ") || "no reason given"}`);
    setTitle(node, ok ? "" : reasons.join("\n"));
  } catch (err) {
    if (err.status === 401 || err.status === -1) return;
    node.dataset.status = "unknown";
    setText(node, "Daemon unreachable");
    setTitle(node, err.message);
  }
}

// ===== Router: hash routes, one <section> per view in main#view =====

const vigil = { charts: [] }; // charts: [{field, series: [ids], graph}] of the monitor view
window.vigilConsole = vigil;

let viewScope = null;

const routes = [
  [/^#?\/?$/, overviewView],
  [/^#\/events$/, eventsView],
  [/^#\/rules$/, rulesView],
  [/^#\/manifest$/, manifestView],
  [/^#\/monitor\/(.+)$/, monitorView],
];

function closeView() {
  if (viewScope) viewScope.close();
  viewScope = null;
  vigil.charts = [];
  for (const section of document.querySelectorAll("#view > section:not(#login-view)")) section.remove();
}

function route(moveFocus) {
  if (!session.active) return;
  const hash = location.hash || "#/";
  closeView();
  viewScope = newScope();
  let shown = false;
  for (const [pattern, view] of routes) {
    const match = hash.match(pattern);
    if (!match) continue;
    let params = null;
    try { params = match.slice(1).map(decodeURIComponent); } catch (err) { /* a malformed %-escape: not found */ }
    if (params) { view(viewScope, ...params); shown = true; }
    break;
  }
  if (!shown) {
    mountSection("not-found", "Not found").section.append(el("p", null, "No such view. ", el("a", { href: "#/", text: "Back to the overview" })));
  }
  setNavCurrent(hash === "#" ? "#/" : hash);
  if (moveFocus) $("#view > section:not(#login-view) h1").focus();
}

function setNavCurrent(hash) {
  for (const link of document.querySelectorAll(".nav-list a")) {
    if (link.getAttribute("href") === hash) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

/**
 * A fresh view section: its h1 (focused on navigation) and a notice line for
 * errors. Each part of a view has its own slot in the notice (`key`), so that
 * the status refreshed every 2 s does not wipe what the charts said.
 */
function mountSection(id, title) {
  const heading = el("h1", { id: id + "-title", tabindex: -1, text: title });
  const notice = el("p", { class: "notice", role: "alert", hidden: true });
  const section = el("section", { id, "aria-labelledby": id + "-title" }, heading, notice);
  const slots = new Map();
  $("#view").append(section);
  document.title = `${title} · Vigil`;
  return {
    section, heading,
    notice(text, key = "") {
      if (text) slots.set(key, text); else slots.delete(key);
      notice.hidden = !slots.size;
      setText(notice, [...slots.values()].join("\n"));
    },
  };
}

/** A catch handler showing an error in the view's notice, in slot `key` (not a 401: the login form says it). */
const reportTo = (view, what, key = what) => (err) => {
  if (err.status !== 401 && err.status !== -1) view.notice(`${what}: ${err.message}`, key);
};

// ===== View: overview (the daemon, sinks, monitors) =====

function overviewView(scope) {
  const view = mountSection("overview", "Overview");
  const host = el("dl", { id: "host", class: "figures", "aria-label": "The daemon" });
  const attention = el("div", { id: "attention", class: "attention", hidden: true });
  const sinks = tableIn("sinks", "Sinks", ["Sink", "Type", "Queue", "Accepted", "Delivered", "Lost", "Retries", "Disk buffer", "History"]);
  const monitors = tableIn("monitors", "Monitors",
    ["Monitor", "State", "Last poll", "Events", "Errors", "Isolation", "Restarts / crashes", "Last 5 min"]);
  const noHistory = el("p", { id: "no-history", class: "muted", hidden: true, text: `No history sink: no charts, sparklines or events are kept. ${HISTORY_HINT}` });
  view.section.append(host, attention, sinks.wrap, noHistory, monitors.wrap);

  const rows = new Map(), sparks = sparklines(scope);
  let previous = null, rates = { cpu: null, eventsPerSecond: null };

  async function refresh() {
    const status = await getStatus();
    view.notice("", "status");
    noHistory.hidden = daemon.history !== false;
    rates = hostRates(status, previous, rates);
    previous = { uptime: status.uptime_s, events: status.events, cpu: (status.process || {}).cpu_s };
    renderHost(host, status, rates);
    renderSinks(sinks.tbody, status.sinks || []);
    renderMonitorRows(monitors.tbody, rows, status.monitors || [], sparks);
    renderAttention(attention, status.monitors || []);
  }

  every(scope, 2000, () => refresh().catch(reportTo(view, "Could not read the status", "status")));
  every(scope, 10000, () => sparks.refresh().then(() => view.notice("", "sparklines"))
    .catch(reportTo(view, "Could not read the sparklines", "sparklines")));
}

/** CPU % and events/s from two successive status answers, over the daemon's own uptime. */
function hostRates(status, previous, rates) {
  if (!previous || !(status.uptime_s > previous.uptime)) return rates;
  const dt = status.uptime_s - previous.uptime, cpu = (status.process || {}).cpu_s;
  return {
    cpu: isNum(cpu) && isNum(previous.cpu) ? (cpu - previous.cpu) / dt * 100 : rates.cpu,
    eventsPerSecond: isNum(status.events) && isNum(previous.events) ? (status.events - previous.events) / dt : rates.eventsPerSecond,
  };
}

function renderHost(dl, status, rates) {
  const proc = status.process || {};
  fillFigures(dl, [
    ["CPU", rates.cpu === null ? "…" : `${rates.cpu.toFixed(1)} %`],
    ["Memory (RSS)", fmtBytes(proc.rss_bytes)],
    ["Threads", fmtInt(proc.threads)],
    ["Events/s", rates.eventsPerSecond === null ? "…" : fmtValue(rates.eventsPerSecond)],
    ["Events", fmtInt(status.events)],
    ["Uptime", fmtDuration(status.uptime_s)],
    ["Version", String(status.version || "—")],
    ["PID", fmtInt(status.pid)],
    ["Manifest", el("a", { href: "#/manifest", class: "path", text: String(status.manifest || "—") }), "wide-2"],
  ]);
}

/** Rows are made once per monitor and updated in place (their sparklines live on). */
function renderMonitorRows(tbody, rows, monitors, sparks) {
  const seen = new Set();
  monitors.forEach((monitor, index) => {
    const name = String(monitor.name);
    seen.add(name);
    let row = rows.get(name);
    if (!row) {
      row = monitorRow(name);
      rows.set(name, row);
      sparks.add(name, row.spark);
    }
    updateMonitorRow(row, monitor);
    if (tbody.children[index] !== row.tr) tbody.insertBefore(row.tr, tbody.children[index] || null);
  });
  for (const [name, row] of rows) {
    if (seen.has(name)) continue;
    sparks.remove(name);
    row.tr.remove();
    rows.delete(name);
  }
  const empty = tbody.querySelector("tr.empty");
  if (monitors.length && empty) empty.remove();
  if (!monitors.length && !empty) tbody.append(emptyRow(8, "No monitors in the manifest."));
}

function monitorRow(name) {
  const td = (cls) => el("td", { class: cls });
  const cells = { state: td(), poll: td(), events: td("num"), errors: td("num"), isolation: td(), restarts: td("num") };
  const spark = el("div", { class: "spark", role: "img", "aria-label": "no numeric series" });
  const tr = el("tr", { dataset: { monitor: name } }, el("th", { scope: "row" }, monitorLink(name)),
    Object.values(cells), el("td", { class: "spark-cell" }, spark));
  return { tr, cells, spark, key: null };
}

/** A monitor's figures as texts, for its overview row and its own view. */
function monitorFigures(m) {
  return {
    poll: m.last_poll_time ? `${fmtAge(m.last_poll_time)} · ${fmtDuration(m.last_poll_s)}` : "never",
    events: fmtInt(m.events) + (m.refused ? ` (${fmtInt(m.refused)} refused)` : ""),
    errors: fmtInt(m.poll_errors),
    error: m.last_error ? `${revealControls(m.last_error)}${m.last_error_time ? ` (${fmtAge(m.last_error_time)})` : ""}` : "",
    isolation: m.isolation ? String(m.isolation) : "—",
    restarts: `${fmtInt(m.restarts)} / ${fmtInt(m.crashes)}`,
  };
}

/** The state badge, with "unavailable" beside it when the plugin said so. */
function stateBadges(m) {
  const state = String(m.state || "unknown");
  return [badge(state, "state", STATES), m.available === false ? [" ", el("span", { class: "badge state-failed", text: "unavailable" })] : null];
}

function updateMonitorRow(row, m) {
  const f = monitorFigures(m), c = row.cells;
  const key = `${m.state}/${m.available}`;
  if (row.key !== key) {
    row.key = key;
    c.state.replaceChildren(...stateBadges(m).flat().filter(Boolean));
    row.tr.classList.toggle("row-alert", m.state === "failed" || m.state === "quarantined");
  }
  setTitle(c.state, m.available === false ? String(m.unavailable_reason || "unavailable") : "");
  setText(c.poll, f.poll);
  setTitle(c.poll, m.last_poll_time);
  setText(c.events, f.events);
  setText(c.errors, f.error ? `${f.errors} ⚠` : f.errors);
  setTitle(c.errors, f.error);
  c.errors.classList.toggle("has-error", Boolean(f.error));
  setText(c.isolation, f.isolation);
  setText(c.restarts, f.restarts);
}

/** Failed and quarantined monitors, listed above the tables with links. */
function renderAttention(box, monitors) {
  const bad = monitors.filter((m) => m.state === "failed" || m.state === "quarantined");
  box.hidden = !bad.length;
  const key = bad.map((m) => `${m.name}\n${m.state}\n${m.last_error}`).join("\n");
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren(el("strong", { text: `${bad.length} monitor${bad.length === 1 ? " needs" : "s need"} attention` }),
    el("ul", null, bad.map((m) => el("li", null, monitorLink(String(m.name)), " ", badge(m.state, "state", STATES),
      m.last_error ? el("span", { class: "muted", text: " " + revealControls(m.last_error) }) : null))));
}

function renderSinks(tbody, sinks) {
  tbody.replaceChildren(...(sinks.length ? sinks.map(sinkRow) : [emptyRow(9, "No sinks.")]));
}

const nonZero = (object) => Object.entries(object || {}).filter(([, v]) => isNum(v) && v !== 0);
const breakdown = (pairs) => pairs.map(([k, v]) => `${k} ${fmtInt(v)}`).join(" · ");
const small = (text, cls) => el("small", { class: "breakdown " + (cls || ""), text });

function sinkRow(s) {
  const name = String(s.name), lost = nonZero(s.lost), b = s.buffer, h = s.history, q = s.send_queue;
  const lostTotal = lost.reduce((sum, [, v]) => sum + v, 0);
  // A remote_write sink's shards: their samples queued, how many, how far behind.
  const shards = q ? small(`${fmtInt(q.pending_samples)} samples in ${fmtInt(q.shards)} ${q.shards === 1 ? "shard" : "shards"} (${fmtInt(q.min_shards)}–${fmtInt(q.max_shards)})` +
    (isNum(q.behind_s) && q.behind_s >= 1 ? ` · ${q.behind_s.toFixed(1)} s behind` : "")) : null;
  const queue = isNum(s.queue_capacity)
    ? el("td", { class: "queue", title: isNum(s.high_water) ? `high water ${fmtInt(s.high_water)}` : null },
      bar(s.queue_depth / s.queue_capacity, `queue of ${name}`), `${fmtInt(s.queue_depth)} / ${fmtInt(s.queue_capacity)}`, shards)
    : el("td", { text: "—" });
  const retries = q ? `${fmtInt(q.retries)} (${fmtInt(q.samples_retried)} samples)`
    : s.retries == null ? "—" : fmtInt(s.retries) + (s.retried_events == null ? "" : ` (${fmtInt(s.retried_events)} events)`);
  const samplesLost = q ? nonZero(q.samples_lost) : [];
  const buffer = b ? [bar(b.max_bytes ? b.bytes / b.max_bytes : 0, `disk buffer of ${name}`),
    `${fmtInt(b.buffered)} events · ${fmtBytes(b.bytes)} / ${fmtBytes(b.max_bytes)}`] : "—";
  const history = h ? [
    `${fmtInt(h.series)} series · ${fmtInt(h.points)} points · ${fmtInt(h.minutes)} min · ${fmtBytes(h.bytes)} / ${fmtBytes(h.max_memory)}`,
    nonZero(h.dropped).length ? small("dropped: " + breakdown(nonZero(h.dropped)), "bad-text") : null,
    h.problem ? small(String(h.problem), "bad-text") : null] : "—";
  return el("tr", { dataset: { sink: name } },
    el("th", { scope: "row" }, name, s.failure ? small(String(s.failure), "bad-text") : null,
      q ? small("→ " + String(q.url)) : null, q && q.last_error ? small(String(q.last_error), "bad-text") : null),
    el("td", { text: String(s.type || "—") }),
    queue,
    el("td", { class: "num", text: fmtInt(s.accepted) }),
    el("td", { class: "num", text: fmtInt(s.written) }),
    el("td", { class: "num" }, el("span", { class: lostTotal ? "bad-text" : null, text: fmtInt(lostTotal) }),
      lost.length ? small(breakdown(lost)) : null,
      samplesLost.length ? small("samples: " + breakdown(samplesLost), "bad-text") : null),
    el("td", { class: "num", text: retries }),
    el("td", null, buffer), el("td", null, history));
}

/** Sparklines: fetched for all monitors every 10 s, drawn only for the rows on screen. */
function sparklines(scope) {
  const entries = new Map(), byDiv = new Map(); // name -> entry, div -> entry
  let data = null;
  const observer = new IntersectionObserver((changes) => {
    for (const change of changes) {
      const entry = byDiv.get(change.target);
      if (!entry) continue;
      entry.visible = change.isIntersecting;
      if (entry.visible && entry.dirty) draw(entry);
    }
  }, { rootMargin: "200px 0px" });
  scope.onClose(() => observer.disconnect());

  function add(name, div) {
    const entry = { name, div, graph: null, visible: false, dirty: true };
    entries.set(name, entry);
    byDiv.set(div, entry);
    observer.observe(div);
    if (daemon.history === false) none(entry);
  }

  /** No history sink: a dash, and why. */
  function none(entry) {
    dropGraph(entry.graph);
    entry.graph = null;
    entry.dirty = false;
    entry.div.textContent = "—";
    entry.div.setAttribute("aria-label", "no history sink: no sparkline");
    entry.div.title = "no history sink";
  }

  function remove(name) {
    const entry = entries.get(name);
    if (!entry) return;
    observer.unobserve(entry.div);
    dropGraph(entry.graph);
    byDiv.delete(entry.div);
    entries.delete(name);
  }

  async function refresh() {
    if (!(await hasHistory())) {
      data = null;
      for (const entry of entries.values()) none(entry);
      return;
    }
    data = ((await api("/v1/sparklines?from=-5m&step=10s")) || {}).monitors || {};
    for (const entry of entries.values()) {
      entry.dirty = true;
      if (entry.visible) draw(entry);
    }
  }

  function draw(entry) {
    if (!data) return;
    entry.dirty = false;
    const line = data[entry.name], points = line && Array.isArray(line.points) ? line.points : [];
    if (!points.length) {
      dropGraph(entry.graph);
      entry.graph = null;
      entry.div.textContent = "—";
      entry.div.setAttribute("aria-label", "no numeric series");
      entry.div.removeAttribute("title");
      return;
    }
    const rows = points.map(([t, v]) => [new Date(t), v === null ? NaN : v]);
    const now = Date.now(), dateWindow = [now - 300000, now];
    if (entry.graph) entry.graph.updateOptions({ file: rows, dateWindow });
    else {
      entry.div.textContent = "";
      entry.graph = addGraph(new Dygraph(entry.div, rows, sparkOptions(dateWindow)), "spark", scope);
    }
    const what = `${line.field || "value"}${line.counter ? "/s" : ""}`, last = fmtValue(points[points.length - 1][1]);
    entry.div.setAttribute("aria-label", `${what} over 5 minutes, last ${last}`);
    entry.div.title = `${what}: ${last}`;
  }

  return { add, remove, refresh };
}

function sparkOptions(dateWindow) {
  return Object.assign({
    labels: ["time", "value"], legend: "never", dateWindow, interactionModel: {},
    axes: { x: { drawAxis: false }, y: { drawAxis: false } }, drawGrid: false,
    highlightCircleSize: 0, strokeWidth: 1.25, fillGraph: true, fillAlpha: 0.18, includeZero: true,
    rightGap: 0, xRangePad: 1, yRangePad: 2, animatedZooms: false,
  }, graphColours("spark"));
}

// ===== View: one monitor (status, actions, charts, events, manifest) =====

function monitorView(scope, name) {
  const view = mountSection("monitor", name);
  view.section.dataset.monitor = name;
  view.heading.replaceChildren(el("span", { class: "muted", text: "Monitor " }), name);
  if (name.length > 40) view.heading.title = name;
  const figures = el("dl", { id: "monitor-status", class: "figures", "aria-label": "Status" });
  const actionResult = el("p", { id: "action-result", role: "status" });
  const buttons = ["poll", "restart", "stop", "start"].map((action) =>
    el("button", { type: "button", class: "button", dataset: { action }, text: action[0].toUpperCase() + action.slice(1) }));
  const ranges = ["5m", "1h", "24h"].map((range) =>
    el("button", { type: "button", class: "button", dataset: { range }, "aria-pressed": String(range === "5m"), text: range }));
  const chartNote = el("p", { class: "muted", role: "status" });
  const chartBox = el("div", { class: "charts" });
  const events = tableIn(null, `Recent events of ${name}`, ["Time", "Severity", "Monitor", "Kind", "Fields"], "events");
  const manifestSource = el("p", { class: "muted" });
  const manifest = el("pre", { id: "monitor-manifest", class: "manifest-text", tabindex: 0 });
  view.section.append(
    el("p", { class: "breadcrumb" }, el("a", { href: "#/", text: "← Overview" })), figures,
    el("div", { class: "toolbar" }, el("div", { class: "buttons", role: "group", "aria-label": "Actions" }, buttons), actionResult),
    el("h2", { text: "Charts" }),
    el("div", { class: "toolbar" }, el("div", { class: "buttons", role: "group", "aria-label": "Time range" }, ranges), chartNote),
    chartBox, el("h2", { text: "Recent events" }), events.wrap, el("h2", { text: "Manifest" }), manifestSource, manifest);

  let busy = false, running = false;
  const pollButton = buttons[0];
  async function refreshStatus() {
    const monitor = (((await getStatus()) || {}).monitors || []).find((m) => m.name === name);
    if (!monitor) { view.notice(`No monitor named “${name}” runs in this daemon.`, "status"); return; }
    view.notice("", "status");
    running = monitor.state === "running";
    pollButton.disabled = busy || !running;
    renderMonitorStatus(figures, monitor);
  }

  async function act(action) {
    busy = true;
    for (const b of buttons) b.disabled = true;
    actionResult.className = "";
    setText(actionResult, `${action}…`);
    try {
      const answer = await api(`/v1/monitors/${encodeURIComponent(name)}/${action}`, { method: "POST" });
      setText(actionResult, `${action}: accepted${answer && answer.state ? `, state ${answer.state}` : ""}`);
    } catch (err) {
      if (err.status === -1) return;
      actionResult.className = "bad-text";
      setText(actionResult, `${action} refused: ${err.message}`);
    } finally {
      busy = false;
      for (const b of buttons) b.disabled = b === pollButton && !running;
    }
    await refreshStatus().catch(reportTo(view, "Could not read the status", "status"));
  }
  for (const b of buttons) b.addEventListener("click", () => act(b.dataset.action));

  const charts = monitorCharts(scope, view, name, chartBox, chartNote);
  for (const b of ranges) {
    b.addEventListener("click", () => {
      for (const other of ranges) other.setAttribute("aria-pressed", String(other === b));
      charts.load(b.dataset.range);
    });
  }

  every(scope, 2000, () => refreshStatus().catch(reportTo(view, "Could not read the status", "status")));
  // A 404 here is a history sink that keeps no events (events: 0): said once, not asked again.
  let eventsKept = true;
  every(scope, 5000, () => (!eventsKept ? Promise.resolve() : loadMonitorEvents(events.tbody, name).then(() => view.notice("", "events"))
    .catch((err) => {
      if (err.status !== 404) return reportTo(view, "Could not read the events", "events")(err);
      eventsKept = false;
      events.tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 5, text: err.message })));
    })));
  loadMonitorManifest(name, manifestSource, manifest).catch(reportTo(view, "Could not read the manifest"));
  charts.load("5m");
}

function renderMonitorStatus(dl, m) {
  const f = monitorFigures(m);
  const state = el("span", null, stateBadges(m));
  if (m.available === false) state.append(el("small", { class: "breakdown bad-text", text: String(m.unavailable_reason || "") }));
  fillFigures(dl, [
    ["State", state],
    ["Plugin", [String(m.plugin || "—"), m.file ? el("small", { class: "breakdown path", text: String(m.file) }) : null]],
    ["Interval", fmtDuration(m.interval_s)],
    ["Last poll", f.poll],
    ["Polls", fmtInt(m.polls)],
    ["Events", f.events],
    ["Poll errors", f.errors],
    ["Isolation", f.isolation],
    ["Restarts / crashes", f.restarts],
    f.error ? ["Last error", el("span", { class: "bad-text", text: f.error }), "wide"] : null,
  ].filter(Boolean));
}

async function loadMonitorEvents(tbody, name) {
  if (!(await hasHistory())) {
    if (!tbody.querySelector("tr.no-history")) {
      tbody.replaceChildren(el("tr", { class: "empty no-history" }, el("td", { colspan: 5, text: `No history sink: no events are kept. ${HISTORY_HINT}` })));
    }
    return;
  }
  const answer = await api(`/v1/events?monitor=${exactGlob(name)}&limit=50`);
  const list = ((answer && answer.events) || []).filter((e) => e.monitor === name).reverse();
  tbody.replaceChildren(...(list.length ? list.map(eventRow) : [emptyRow(5, "No recent events.")]));
}

async function loadMonitorManifest(name, source, pre) {
  const part = ((await api("/v1/manifest")) || {}).monitors?.[name];
  if (!part) { pre.textContent = "This monitor is not in the manifest."; return; }
  source.textContent = `${part.file || "?"}${part.line ? `:${part.line}` : ""}`;
  pre.textContent = revealControls(part.text || "");
}

// ===== Monitor charts: a dygraph per field, zoom and crosshair in step, live points =====

const RANGE_MS = { "5m": 300000, "1h": 3600000, "24h": 86400000 };
const MAX_LINES = 12, MAX_LIVE = 64;

function monitorCharts(pageScope, view, name, box, note) {
  let loadScope = null, generation = 0;
  pageScope.onClose(() => { generation++; if (loadScope) loadScope.close(); });

  /** (Re)loads every chart for a range; a later call cancels an earlier one still loading. */
  async function load(range) {
    const mine = ++generation;
    if (loadScope) loadScope.close();
    const scope = loadScope = newScope();
    vigil.charts = [];
    box.replaceChildren();
    view.notice("", "charts");
    view.section.dataset.charts = "loading";
    setText(note, "Loading…");
    try {
      if (!(await hasHistory())) {
        if (mine !== generation) return;
        view.section.dataset.charts = "none";
        setText(note, `No history sink: no charts. ${HISTORY_HINT}`);
        return;
      }
      if (mine !== generation) return;
      // Asked at each load: a reload that changes the history sink starts it
      // anew, and an id may then name another series.
      const answer = await api(`/v1/series?monitor=${exactGlob(name)}&limit=1000`);
      const seriesList = ((answer && answer.series) || []).filter((s) => s.monitor === name);
      if (mine !== generation) return;
      const charts = buildCharts(seriesList);
      vigil.charts = charts.map((c) => c.exposed);
      const shown = charts.flatMap((c) => c.series);
      await Promise.all(shown.map((s) => fetchSeries(s, range)));
      if (mine !== generation) return;
      for (const chart of charts) drawChart(chart, charts, scope);
      view.section.dataset.charts = "ready";
      const failed = shown.filter((s) => s.error);
      view.notice(failed.length ? `${failed.length} series could not be read: ${failed[0].error}` : "", "charts");
      if (!charts.length) setText(note, "No numeric series kept for this monitor.");
      else if (range === "24h") setText(note, "Means per minute; not live.");
      else startLive(scope, shown, charts, range);
    } catch (err) {
      if (mine !== generation) return;
      view.section.dataset.charts = "error";
      setText(note, "");
      reportTo(view, "Could not load the charts", "charts")(err);
    }
  }

  /** Series grouped by field: a card per field, at most MAX_LINES lines each. */
  function buildCharts(list) {
    const byField = new Map();
    for (const s of list) byField.set(s.field, [...(byField.get(s.field) || []), s]);
    return [...byField].map(([field, all]) => {
      const series = all.map((s) => ({ id: s.id, label: seriesLabel(s), counter: Boolean(s.counter), points: [] }))
        .sort((a, b) => naturalCompare(a.label, b.label)).slice(0, MAX_LINES);
      uniqueLabels(series);
      const counter = series.some((s) => s.counter);
      const div = el("div", { class: "chart", dataset: { field } }), legend = el("ul", { class: "chart-legend" });
      box.append(el("figure", { class: "chart-card" },
        el("figcaption", null, el("h3", { text: `${field}${counter ? " /s" : ""}` }),
          all.length > MAX_LINES ? el("span", { class: "muted", text: `${all.length - MAX_LINES} more series not shown` }) : null),
        div, legend));
      return { field, series, div, legend, graph: null, dirty: false, exposed: { field, series: series.map((s) => s.id), graph: null } };
    });
  }

  /** One series' points: every point for 5m and 1h; for 24h the minute tier's means. */
  async function fetchSeries(s, range) {
    try {
      const step = range === "24h" ? "&step=60s" : "";
      const answer = await api(`/v1/query?series=${encodeURIComponent(s.id)}&from=-${range}${step}`);
      s.points = ((answer && answer.points) || []).map((p) => [p[0], p.length > 2 ? p[3] : p[1]]); // [t, min, max, mean, last]
    } catch (err) {
      if (err.status === 401 || err.status === -1) throw err;
      s.points = [];
      s.error = err.message; // the other series are still drawn
    }
  }

  function drawChart(chart, charts, scope) {
    const px = rootFontPx();
    chart.graph = addGraph(new Dygraph(chart.div, mergeRows(chart.series), Object.assign({
      // Labels of our own: dygraphs keys options by label and refuses some
      // ("__proto__"), and the legend under the chart shows the real ones.
      labels: ["Time", ...chart.series.map((s, i) => `s${i + 1}`)],
      legend: "never", connectSeparatedPoints: true, drawGapEdgePoints: true,
      strokeWidth: 1.5, highlightCircleSize: 3, animatedZooms: false, includeZero: true, resizable: "passive",
      axisLabelFontSize: Math.round(px * 0.75),
      axes: {
        x: { pixelsPerLabel: Math.round(px * 6) },
        y: { pixelsPerLabel: Math.round(px * 2), axisLabelWidth: Math.round(px * 3.5), labelsKMB: true, valueFormatter: fmtValue },
      },
      highlightCallback: (event, x, points, row) => crosshair(chart, charts, x, row),
      unhighlightCallback: () => { for (const c of charts) { c.graph.clearSelection(); renderLegend(c, -1); } },
      zoomCallback: (minX, maxX) => {
        const dateWindow = chart.graph.isZoomed("x") ? [minX, maxX] : null; // null: a double click reset it
        for (const c of charts) if (c !== chart) c.graph.updateOptions({ dateWindow });
      },
    }, graphColours("chart"))), "chart", scope);
    chart.exposed.graph = chart.graph;
    const redraw = () => renderLegend(chart, -1);
    themeListeners.add(redraw);
    scope.onClose(() => themeListeners.delete(redraw));
    redraw();
  }

  /** The time under the pointer on one chart is selected on all of them. */
  function crosshair(source, charts, x, row) {
    renderLegend(source, row);
    for (const c of charts) {
      if (c === source) continue;
      const r = rowNear(c.graph, x);
      if (r === null) c.graph.clearSelection(); else c.graph.setSelection(r);
      renderLegend(c, r === null ? -1 : r);
    }
  }

  /** The legend under a chart: colour, label and value of each line, at the crosshair or the latest. */
  function renderLegend(chart, row) {
    const g = chart.graph, colors = g.getColors();
    chart.legend.replaceChildren(
      el("li", { class: "legend-time", text: row >= 0 ? fmtClock(g.getValue(row, 0)) : "latest" }),
      ...chart.series.map((s, i) => {
        const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
        swatch.style.background = colors[i];
        const value = row >= 0 ? g.getValue(row, i + 1) : lastValue(s.points);
        return el("li", null, swatch, el("span", { text: s.label }), el("span", { class: "num", text: fmtValue(value) }));
      }));
  }

  /** New points from the stream, drawn at most once a second, the window trimmed to the range. */
  function startLive(scope, shown, charts, range) {
    const byId = new Map();
    for (const c of charts) for (const s of c.series) byId.set(s.id, { chart: c, series: s });
    const ids = shown.slice(0, MAX_LIVE).map((s) => encodeURIComponent(s.id)).join(",");
    const extra = shown.length > MAX_LIVE ? ` (the first ${MAX_LIVE} of ${shown.length} series)` : "";
    let timer = null;
    scope.onClose(() => clearTimeout(timer));
    liveStream(scope, `/v1/stream?series=${ids}`, {
      onState: (state, text) => setText(note, `Live updates: ${text}${extra}`),
      onPoints: (message) => {
        const hit = byId.get(message.series);
        if (!hit || !Array.isArray(message.points)) return;
        const points = hit.series.points, lastT = points.length ? points[points.length - 1][0] : -Infinity;
        for (const p of message.points) if (p[0] > lastT) points.push([p[0], p[1]]);
        hit.chart.dirty = true;
        if (!timer) timer = setTimeout(flush, 1000);
      },
    });

    function flush() {
      timer = null;
      const oldest = Date.now() - RANGE_MS[range];
      for (const c of charts.filter((chart) => chart.dirty)) {
        c.dirty = false;
        for (const s of c.series) {
          const cut = s.points.findIndex((p) => p[0] >= oldest);
          s.points.splice(0, cut < 0 ? s.points.length : cut);
        }
        c.graph.updateOptions({ file: mergeRows(c.series) });
        if (c.graph.getSelection() < 0) renderLegend(c, -1);
      }
    }
  }

  return { load };
}

/** "0", "eth0 / rx": the identity's values; the field when it has none. */
function seriesLabel(s) {
  const values = Object.values(s.identity || {}).map(String);
  return revealControls(values.length ? values.join(" / ") : String(s.field));
}

/** Distinct labels for the legend: a second "x" becomes "x (2)" ("Time" is kept for the time). */
function uniqueLabels(series) {
  const used = new Set(["Time"]);
  for (const s of series) {
    let label = s.label, n = 1;
    while (used.has(label)) label = `${s.label} (${++n})`;
    used.add(s.label = label);
  }
}

function lastValue(points) {
  for (let i = points.length - 1; i >= 0; i--) if (points[i][1] !== null) return points[i][1];
  return null;
}

/**
 * Series merged on time, a column each. A time a series lacks is null
 * (dygraphs joins over it: connectSeparatedPoints); a gap the daemon sent
 * as null becomes NaN (dygraphs breaks the line there). With no point at
 * all, two empty rows a minute apart keep the axes drawn.
 */
function mergeRows(series) {
  const byTime = new Map();
  series.forEach((s, column) => {
    for (const [t, v] of s.points) {
      if (!byTime.has(t)) byTime.set(t, [t, ...series.map(() => null)]);
      byTime.get(t)[column + 1] = v === null ? NaN : v;
    }
  });
  const rows = [...byTime.values()].sort((a, b) => a[0] - b[0]);
  if (!rows.length) rows.push([Date.now() - 60000, ...series.map(() => NaN)], [Date.now(), ...series.map(() => NaN)]);
  for (const row of rows) row[0] = new Date(row[0]);
  return rows;
}

/** The row at time x, or else the nearest: charts need not share every time. */
function rowNear(graph, x) {
  const exact = graph.getRowForX(x);
  if (exact !== null) return exact;
  let low = 0, high = graph.numRows() - 1;
  if (high < 0) return null;
  while (high - low > 1) {
    const mid = (low + high) >> 1;
    if (graph.getValue(mid, 0) < x) low = mid; else high = mid;
  }
  return Math.abs(graph.getValue(low, 0) - x) <= Math.abs(graph.getValue(high, 0) - x) ? low : high;
}

// ===== Event rows (the events view and a monitor's recent events) =====

const ENVELOPE = new Set(["time", "host", "monitor", "plugin", "kind", "severity", "seq", "fields"]);

/** "k=v" pairs: the event's "fields", or its top-level keys beyond the envelope. */
function fieldsText(e) {
  const pairs = e.fields && typeof e.fields === "object" ? Object.entries(e.fields) : Object.entries(e).filter(([k]) => !ENVELOPE.has(k));
  return revealControls(pairs.map(([k, v]) => `${k}=${typeof v === "string" && !/[\s"=]|^$/.test(v) ? v : JSON.stringify(v)}`).join("  "));
}

function eventRow(e) {
  const time = typeof e.time === "string" ? e.time : "", monitor = String(e.monitor || "");
  return el("tr", { dataset: { seq: e.seq ?? "" } },
    el("td", null, el("time", { datetime: time, title: time, text: fmtClock(parseTime(time)) })),
    el("td", null, badge(String(e.severity || "info"), "severity", SEVERITIES)),
    el("td", null, monitor ? monitorLink(monitor) : "—"),
    el("td", { text: String(e.kind || "") }),
    el("td", { class: "fields", text: fieldsText(e) }));
}

// ===== View: events (the last 200, then live; filters; pause) =====

function eventsView(scope) {
  const MAX_ROWS = 1000;
  const view = mountSection("events", "Events");
  const input = (id, placeholder) => el("input", { id, type: "search", placeholder, autocomplete: "off" });
  const monitorInput = input("filter-monitor", "any"), kindInput = input("filter-kind", "any"), textInput = input("filter-text", "any text");
  const severitySelect = el("select", { id: "filter-severity" }, el("option", { value: "", text: "any" }),
    SEVERITIES.map((s) => el("option", { value: s, text: `${s} or worse` })));
  const pause = el("button", { id: "pause", type: "button", class: "button", "aria-pressed": "false", text: "Pause" });
  const streamState = el("span", { class: "stream-state", role: "status" });
  const count = el("span", { class: "muted" });
  const list = tableIn("event-list", "Events, newest first", ["Time", "Severity", "Monitor", "Kind", "Fields"], "events");
  const field = (label, control) => el("div", { class: "field" }, el("label", { for: control.id, text: label }), control);
  view.section.append(
    el("form", { class: "filters", role: "search", "aria-label": "Filter events", on: { submit: (e) => e.preventDefault() } },
      field("Monitor", monitorInput), field("Kind", kindInput), field("Severity", severitySelect), field("Text", textInput)),
    el("div", { class: "toolbar" }, pause, streamState, count), list.wrap);

  const tbody = list.tbody, eventOf = new WeakMap(), seen = new Set(), early = [];
  let incoming = [], held = [], paused = false, historyLoaded = false, frame = 0, stream = null;
  scope.onClose(() => cancelAnimationFrame(frame));

  function filters() {
    return {
      monitor: monitorInput.value.trim().toLowerCase(), kind: kindInput.value.trim().toLowerCase(),
      severity: SEVERITIES.indexOf(severitySelect.value), text: textInput.value.trim().toLowerCase(),
    };
  }

  function matches(tr, f) {
    const e = eventOf.get(tr);
    return !(f.monitor && !String(e.monitor || "").toLowerCase().includes(f.monitor))
      && !(f.kind && !String(e.kind || "").toLowerCase().includes(f.kind))
      && !(f.severity > 0 && SEVERITIES.indexOf(e.severity) < f.severity)
      && !(f.text && !tr.textContent.toLowerCase().includes(f.text));
  }

  function applyFilters() {
    const f = filters();
    for (const tr of tbody.rows) if (eventOf.has(tr)) tr.hidden = !matches(tr, f);
    updateCount();
  }

  function updateCount() {
    const total = tbody.querySelectorAll("tr[data-seq]").length, shown = tbody.querySelectorAll("tr[data-seq]:not([hidden])").length;
    setText(count, `${fmtInt(shown)} shown of ${fmtInt(total)} kept${held.length ? ` · ${fmtInt(held.length)} waiting` : ""}`);
  }

  /** Takes events (oldest first), skips those already shown, and inserts them at the next frame. */
  function receive(events) {
    for (const e of events) {
      if (e.seq !== undefined) { if (seen.has(e.seq)) continue; seen.add(e.seq); }
      (paused ? held : incoming).push(e);
    }
    if (held.length > MAX_ROWS) held.splice(0, held.length - MAX_ROWS);
    if (paused) updateCount();
    else if (!frame) frame = requestAnimationFrame(flush);
  }

  /** Newest on top, at most MAX_ROWS rows, each filtered as it arrives. */
  function flush() {
    frame = 0;
    const batch = incoming.splice(0).slice(-MAX_ROWS), f = filters(), fragment = document.createDocumentFragment();
    for (const e of batch.reverse()) {
      const tr = eventRow(e);
      eventOf.set(tr, e);
      tr.hidden = !matches(tr, f);
      fragment.append(tr);
    }
    tbody.querySelector("tr.empty")?.remove();
    tbody.prepend(fragment);
    while (tbody.rows.length > MAX_ROWS) {
      seen.delete(eventOf.get(tbody.lastElementChild)?.seq);
      tbody.lastElementChild.remove();
    }
    updateCount();
  }

  /** The stream, asking the daemon for the chosen severity and worse. */
  function connect() {
    if (stream) stream.close();
    const severity = severitySelect.value;
    stream = liveStream(scope, "/v1/stream?events=1" + (severity ? `&severity=${encodeURIComponent(severity)}` : ""), {
      onState: (state, text) => { setText(streamState, `Live updates: ${text}`); streamState.dataset.state = state; },
      onEvent: (e) => { if (historyLoaded) receive([e]); else early.push(e); },
      // Events came faster than the page read them and the daemon's ring let some go: said, not hidden.
      onGap: (g) => { setText(streamState, `Live updates: on (events ${g.after + 1}…${g.resumed_at - 1} came too fast and were not shown)`); },
    });
  }

  async function loadHistory() {
    try {
      const events = ((await api("/v1/events?limit=200")) || {}).events || [];
      receive(events);
      if (!events.length && !early.length) tbody.append(emptyRow(5, "No events yet."));
    } catch (err) {
      if (err.status === 404) { // the history sink keeps no events (events: 0): nothing will come
        if (stream) stream.close();
        stream = null;
        setText(streamState, err.message);
        streamState.dataset.state = "error";
        tbody.append(emptyRow(5, err.message));
        pause.disabled = true;
        return;
      }
      reportTo(view, "Could not read the events")(err);
    }
    historyLoaded = true;
    receive(early.splice(0));
  }

  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume" : "Pause";
    if (!paused) receive(held.splice(0).map((e) => (seen.delete(e.seq), e)));
    updateCount();
  });
  for (const control of [monitorInput, kindInput, textInput]) control.addEventListener("input", applyFilters);
  severitySelect.addEventListener("change", () => { applyFilters(); if (stream) connect(); });

  // Without a history sink no event is kept: nothing to ask, nothing to stream.
  hasHistory().then((yes) => {
    if (!scope.alive) return;
    if (!yes) {
      setText(streamState, "No history sink: events are not kept.");
      tbody.append(emptyRow(5, `No history sink: no events are kept. ${HISTORY_HINT}`));
      pause.disabled = true;
      updateCount();
      return;
    }
    connect(); // before the history: nothing falls between the two
    loadHistory();
  }).catch(reportTo(view, "Could not read the status"));
}

// ===== View: rules (thresholds and rules, refreshed every 2 s) =====

function rulesView(scope) {
  const view = mountSection("rules", "Rules");
  const thresholds = tableIn("thresholds", "Thresholds", ["Monitor", "Field", "Per", "State", "Value", "Warning", "Critical", "Since"]);
  const rules = tableIn("rule-list", "Rules", ["Rule", "Condition", "Severity", "Status", "Last fired", "Last change"]);
  view.section.append(thresholds.wrap, rules.wrap);

  async function refresh() {
    const answer = (await api("/v1/conditions")) || {}, ts = answer.thresholds || [], rs = answer.rules || [];
    view.notice("");
    thresholds.tbody.replaceChildren(...(ts.length ? ts.map(thresholdRow) : [emptyRow(8, "No thresholds in the manifest.")]));
    rules.tbody.replaceChildren(...(rs.length ? rs.map(ruleRow) : [emptyRow(6, "No rules in the manifest.")]));
  }
  every(scope, 2000, () => refresh().catch(reportTo(view, "Could not read the conditions")));
}

const limitText = (l) => (!l ? "—"
  : `${l.direction ? String(l.direction) + " " : ""}${fmtValue(l.value)}${l.clear == null || l.clear === l.value ? "" : ` (clears at ${fmtValue(l.clear)})`}`);

function thresholdRow(t) {
  return el("tr", null,
    el("td", null, monitorLink(String(t.monitor))),
    el("td", { text: `${t.kind ? t.kind + "." : ""}${t.field}` }),
    el("td", { text: Object.entries(t.per || {}).map(([k, v]) => `${k}=${v}`).join(" ") || "—" }),
    el("td", null, badge(String(t.state || "nominal"), "condition", CONDITIONS)),
    el("td", { class: "num", text: fmtValue(t.value) }),
    el("td", { text: limitText(t.warning) }),
    el("td", { text: limitText(t.critical) }),
    el("td", null, timeNode(t.since)));
}

function ruleRow(r) {
  const status = r.active ? "active" : r.pending ? "pending" : "idle";
  return el("tr", { dataset: { rule: String(r.name) } },
    el("th", { scope: "row", text: String(r.name) }),
    el("td", null, el("code", { text: String(r.condition || "") })),
    el("td", null, badge(String(r.severity || "warning"), "severity", SEVERITIES)),
    el("td", null, el("span", { class: `badge rule-${status}`, text: status })),
    el("td", null, timeNode(r.last_fired)),
    el("td", null, timeNode(r.last_change)));
}

// ===== View: manifest (the last reload, the files) =====

function manifestView(scope) {
  const view = mountSection("manifest", "Manifest");
  const lastReload = el("div", { id: "last-reload", class: "panel" }), files = el("div");
  view.section.append(el("h2", { text: "Last reload" }), lastReload, files);
  api("/v1/manifest").then((answer) => {
    renderLastReload(lastReload, (answer || {}).last_reload);
    for (const file of (answer || {}).files || []) {
      const path = String(file.path);
      files.append(el("h2", null, el("span", { class: "muted", text: path === answer.file ? "Main file " : "Included file " }), el("code", { text: path })),
        el("pre", { class: "manifest-file manifest-text", dataset: { path }, tabindex: 0, text: revealControls(file.text || "") }));
    }
  }).catch(reportTo(view, "Could not read the manifest"));
}

/** The last reload: /v1/manifest's last_reload is {at, reason, result}, result as POST /v1/reload answers. */
function renderLastReload(box, reload) {
  if (!reload) { box.append(el("p", { class: "muted", text: "No reload since the daemon started." })); return; }
  const result = reload.result && typeof reload.result === "object" ? reload.result : {};
  const list = (title, items, cls) => (Array.isArray(items) && items.length
    ? el("div", { class: cls }, el("h3", { text: title }), el("ul", null, items.map((x) => el("li", { text: revealControls(String(x)) })))) : null);
  const status = result.applied === true ? "applied" : "refused";
  box.append(el("p", null, el("span", { class: `badge result-${status}`, text: status }), " ",
    el("time", { datetime: String(reload.at), text: `${fmtClock(parseTime(reload.at), false)} (${fmtAge(reload.at)})` }),
    ` · ${reload.reason || ""}`, result.applied === true ? ` · ${fmtInt(result.thresholds)} thresholds, ${fmtInt(result.rules)} rules` : ""),
  ...[list("Errors", result.errors, "bad-text"), list("Warnings", result.warnings, "warn-text")].filter(Boolean));
  if (result.applied !== true) return; // nothing changed: no diff to show
  for (const part of ["monitors", "sinks"]) {
    const diff = result[part] || {};
    const kinds = ["added", "removed", "changed"].filter((k) => Array.isArray(diff[k]) && diff[k].length);
    box.append(el("div", { class: "diff" }, el("h3", { text: part[0].toUpperCase() + part.slice(1) }),
      kinds.length ? el("dl", null, kinds.map((k) => [el("dt", { text: k }), el("dd", { text: diff[k].map(String).join(", ") })]))
        : el("p", { class: "muted", text: "no change" }),
      el("p", { class: "muted", text: `${(Array.isArray(diff.unchanged) ? diff.unchanged : []).length} unchanged` })));
  }
}

// ===== Start =====

function start() {
  applyTheme(storedTheme());
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => applyTheme(storedTheme()));
  $("#theme").addEventListener("click", toggleTheme);
  $("#logout").addEventListener("click", logout);
  $("#login").addEventListener("submit", submitLogin);
  $(".skip-link").addEventListener("click", (event) => { event.preventDefault(); $("#view").focus(); });
  window.addEventListener("hashchange", () => route(true));
  checkSession();
}

if (typeof Dygraph === "undefined") $("#boot").textContent = "The chart library (/dygraph.min.js) did not load.";
else start();

})();
