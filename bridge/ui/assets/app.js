// hermes-bridge dashboard. Reads only, through NATS over WebSocket, with what the
// deploy/ dashboard role may do: ordered consumers on the output stream and nothing
// else. It never publishes an action, a decision or a cancel. Every value from the
// wire reaches the DOM through textContent, never as HTML.
import { wsconnect, jetstream, DeliverPolicy } from "./nats.js";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const MAX_EVENT_ROWS = 1000; // event rows kept in the DOM of the open action
const DURATION_HEADER = "Hermes-Bridge-Duration-Ms";

const MAX_DEAD_LETTERS = 200; // dead letters kept (the newest)
const CAP_HEADER = "ce-subject"; // an event's or result's capability id

const st = {
  cfg: null, nc: null, js: null,
  loading: true, // the results of the history window are still being replayed
  connectFailed: false,
  deadLetters: [], // {seq, at, subject, reason}, oldest first
  dlqError: "",
  actions: new Map(), // id -> record; insertion order = first seen, oldest evicted first
  endpoints: new Map(), // endpoint -> { mins: Map(minute -> {n, e, tin, tout, cost, costs}), lastError, lastErrorAt }
  caps: new Set(), eps: new Set(),
  dirty: true, selected: "", detail: null,
};

function capParts(cap) {
  const m = /^cap:hermes_agent:([^:]+):(.+)$/.exec(cap || "");
  return m ? { endpoint: m[1], op: m[2] } : { endpoint: "", op: "" };
}

function record(id, at) {
  let r = st.actions.get(id);
  if (!r) {
    r = { id, cap: "", endpoint: "", op: "", status: "running", code: "", first: at, last: at,
      firstOut: 0, durMs: null, durExact: false, events: 0, pending: null };
    st.actions.set(id, r);
    const max = st.cfg.maxActions;
    if (st.actions.size > max) {
      for (const k of st.actions.keys()) {
        if (st.actions.size <= max) break;
        if (k !== st.selected) st.actions.delete(k);
      }
    }
  }
  if (at > r.last) r.last = at;
  return r;
}

// usageOf is a result's usage (schemas/README.md, "Usage and cost in results") when it is
// to be counted: not for a replayed result, whose original already was.
function usageOf(res) {
  const u = res.usage;
  if (res.replay_of || !u || typeof u !== "object") return null;
  const n = (v) => (Number.isFinite(v) && v >= 0 ? v : 0);
  return { tin: n(u.input_tokens), tout: n(u.output_tokens), cost: Number.isFinite(u.cost_usd) ? u.cost_usd : null };
}

// unknownEndpoint reports a result that refuses an action for an endpoint the bridge
// does not serve (a mistyped subject): it is counted under no endpoint, so that a typo
// does not become a row of the endpoint table.
function unknownEndpoint(res) {
  const e = res.error;
  return !!e && e.code === "invalid_action" && !!e.details && e.details.field === "subject" &&
    /^unknown endpoint/.test(String(e.details.reason || ""));
}

// setCap records an action's capability (from a result, or an event's ce-subject) and
// offers it in the filters.
function setCap(r, cap, offer) {
  if (!cap || r.cap === cap) return;
  r.cap = cap;
  Object.assign(r, capParts(cap));
  if (!offer) return;
  if (!st.caps.has(cap)) { st.caps.add(cap); addOption("f-capability", cap); }
  if (r.endpoint && !st.eps.has(r.endpoint)) { st.eps.add(r.endpoint); addOption("f-endpoint", r.endpoint); }
}

function countResult(endpoint, at, failed, code, usage) {
  if (!endpoint) return;
  let e = st.endpoints.get(endpoint);
  if (!e) { e = { mins: new Map(), lastError: "", lastErrorAt: 0 }; st.endpoints.set(endpoint, e); }
  const min = Math.floor(at / 60000);
  const b = e.mins.get(min) || { n: 0, e: 0, tin: 0, tout: 0, cost: 0, costs: 0 };
  b.n++;
  if (usage) {
    b.tin += usage.tin; b.tout += usage.tout;
    if (usage.cost != null) { b.cost += usage.cost; b.costs++; }
  }
  if (failed) {
    b.e++;
    if (at >= e.lastErrorAt) { e.lastError = code || "failed"; e.lastErrorAt = at; }
  }
  e.mins.set(min, b);
}

function onResult(m) {
  const id = m.subject.slice(st.cfg.prefix.length + ".results.".length);
  let res;
  try { res = m.json(); } catch { return; }
  const at = m.time.getTime();
  const r = record(id, at);
  const stray = unknownEndpoint(res);
  setCap(r, res.capability_id, !stray);
  if (res.status === "pending_approval") {
    if (!TERMINAL.has(r.status)) {
      r.status = "pending_approval";
      const o = res.output || {};
      r.pending = { hash: o.input_sha256 || "", expires: o.expires_at || "" };
    }
    if (!r.firstOut) r.firstOut = at;
  } else {
    r.status = res.status || "unknown";
    r.code = (res.error && res.error.code) || "";
    r.pending = null;
    const h = m.headers && m.headers.get(DURATION_HEADER);
    if (h && /^\d+$/.test(h)) { r.durMs = Number(h); r.durExact = true; }
    else if (r.firstOut && at >= r.firstOut) { r.durMs = at - r.firstOut; r.durExact = false; }
    if (!stray) countResult(r.endpoint, at, r.status !== "completed", r.code, usageOf(res));
  }
  st.dirty = true;
}

function onEventHeader(m) {
  const id = m.subject.slice(st.cfg.prefix.length + ".events.".length);
  const at = m.time.getTime();
  const r = record(id, at);
  r.events++;
  if (!r.cap && m.headers) {
    // Events name their capability (ce-subject, percent-encoded as CloudEvents headers
    // are): a running action shows what it is before its result.
    const h = m.headers.get(CAP_HEADER);
    try { setCap(r, h ? decodeURIComponent(h) : "", true); } catch { /* not percent-encoding: ignore */ }
  }
  if (!r.firstOut || at < r.firstOut) r.firstOut = at;
  st.dirty = true;
}

const feeds = []; // the page's long-lived consumers, deleted when it goes away

// follow replays and follows stream's messages on filter into onMsg. caughtUp, when
// given, is called once the replay has reached the end of the stream (at once when there
// is nothing to replay).
async function follow(stream, filter, opts, onMsg, caughtUp) {
  // One filter, as a string: the client then creates the consumer on
  // $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>, which the dashboard role allows; an
  // array of filters takes the older $JS.API.CONSUMER.CREATE.<stream>, which it does not.
  const c = await st.js.consumers.get(stream, { filter_subjects: filter, ...opts });
  const it = await c.consume();
  feeds.push(c);
  let done = !caughtUp;
  const finish = () => { if (!done) { done = true; caughtUp(); } };
  if (!done) {
    // Nothing to replay: the consumer says so; otherwise the message with nothing
    // pending after it does. Without the consumer's info, stop waiting at once.
    c.info().then((ci) => { if (ci.num_pending === 0) finish(); }).catch(finish);
  }
  for await (const m of it) {
    onMsg(m);
    if (!done && m.info && m.info.pending === 0) finish();
  }
}

function onDeadLetter(m) {
  const h = (k) => (m.headers && m.headers.get(k)) || "";
  const t = Date.parse(h("Hermes-Dlq-Time"));
  st.deadLetters.push({ seq: m.seq, at: isNaN(t) ? m.time.getTime() : t,
    subject: h("Hermes-Dlq-Subject"), reason: h("Hermes-Dlq-Reason") });
  if (st.deadLetters.length > MAX_DEAD_LETTERS) st.deadLetters.shift();
  st.dirty = true;
}

function addOption(selectId, value) {
  const sel = $(selectId);
  const o = document.createElement("option");
  o.value = value; o.textContent = value;
  const opts = [...sel.options].slice(1);
  const before = opts.find((x) => x.value > value);
  sel.insertBefore(o, before || null);
}

// ---- rendering -------------------------------------------------------------------

function fmtDur(r) {
  if (r.durMs == null) return "—";
  const s = r.durMs < 1000 ? `${r.durMs} ms` : r.durMs < 60000 ? `${(r.durMs / 1000).toFixed(1)} s` : `${(r.durMs / 60000).toFixed(1)} min`;
  return r.durExact ? s : "≈" + s;
}

function fmtAge(at, now) {
  const s = Math.max(0, Math.round((now - at) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  return `${Math.floor(s / 3600)}h ago`;
}

function filtered() {
  const ep = $("f-endpoint").value, cap = $("f-capability").value, status = $("f-status").value;
  const q = $("f-id").value.trim();
  const out = [];
  for (const r of st.actions.values()) {
    if (ep && r.endpoint !== ep) continue;
    if (cap && r.cap !== cap) continue;
    if (status && r.status !== status) continue;
    if (q && !r.id.includes(q)) continue;
    out.push(r);
  }
  out.sort((a, b) => b.first - a.first || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  return out;
}

const rendered = new Map(); // id -> row element in the virtual list

function rowHeight() {
  return parseFloat(getComputedStyle(document.documentElement).getPropertyValue("--row")) || 30;
}

function setText(el, v) { if (el.textContent !== v) el.textContent = v; }

function renderList(now) {
  const list = $("actions"), spacer = list.firstElementChild;
  const rows = filtered();
  const h = rowHeight();
  spacer.style.height = `${rows.length * h}px`;
  const from = Math.max(0, Math.floor(list.scrollTop / h) - 5);
  const to = Math.min(rows.length, Math.ceil((list.scrollTop + list.clientHeight) / h) + 5);
  const keep = new Set();
  for (let i = from; i < to; i++) {
    const r = rows[i];
    keep.add(r.id);
    let el = rendered.get(r.id);
    if (!el) {
      el = document.createElement("div");
      el.className = "row";
      el.dataset.id = r.id;
      for (const c of ["c-id", "c-cap", "c-status status", "c-code", "c-dur", "c-time"]) {
        const s = document.createElement("span"); s.className = c; el.appendChild(s);
      }
      el.addEventListener("click", () => { location.hash = "#" + encodeURIComponent(r.id); });
      list.appendChild(el);
      rendered.set(r.id, el);
    }
    el.style.top = `${i * h}px`;
    el.classList.toggle("selected", r.id === st.selected);
    el.dataset.status = r.status;
    const [cid, ccap, cst, ccode, cdur, ctime] = el.children;
    setText(cid, r.id); cid.title = r.id;
    // From the first event (ce-subject) or result; "…" only until one arrives.
    setText(ccap, r.cap ? `${r.endpoint} · ${r.op}` : "…");
    ccap.title = r.cap || "not known yet: an event or the result names it";
    setText(cst, r.status); cst.dataset.status = r.status; cst.title = r.status;
    setText(ccode, r.code); ccode.title = r.code;
    setText(cdur, fmtDur(r));
    setText(ctime, fmtAge(r.last, now));
  }
  for (const [id, el] of rendered) {
    if (!keep.has(id)) { el.remove(); rendered.delete(id); }
  }
  const state = $("list-state");
  const mins = st.cfg.historyMinutes;
  const msg = !st.js ? (st.connectFailed ? "not connected (see above)" : "connecting…")
    : st.loading ? `loading the results of the last ${mins} min…`
    : rows.length ? "" : st.actions.size ? "no action matches the filters" : `no action in the last ${mins} min`;
  setText(state, msg);
  state.hidden = !msg;
  state.dataset.state = !st.js ? (st.connectFailed ? "failed" : "connecting") : st.loading ? "loading" : "idle";
  let running = 0;
  for (const r of st.actions.values()) if (r.status === "running") running++;
  setText($("counts"), `${st.actions.size} actions kept (at most ${st.cfg.maxActions}), ${rows.length} shown, ${running} running`);
}

function renderApprovals(now) {
  const ul = $("approvals");
  const waiting = [...st.actions.values()].filter((r) => r.status === "pending_approval" && r.pending)
    .sort((a, b) => (a.pending.expires < b.pending.expires ? -1 : 1));
  setText($("approvals-count"), String(waiting.length));
  const want = new Set(waiting.map((r) => r.id));
  for (const li of [...ul.children]) if (!want.has(li.dataset.id)) li.remove();
  const have = new Map([...ul.children].map((li) => [li.dataset.id, li]));
  waiting.forEach((r, i) => {
    let li = have.get(r.id);
    if (!li) {
      li = document.createElement("li");
      li.dataset.id = r.id;
      for (const c of ["id", "cap", "hash", "expires"]) {
        const s = document.createElement(c === "id" ? "a" : "span"); s.className = c; li.appendChild(s);
      }
      li.firstChild.href = "#" + encodeURIComponent(r.id);
    }
    if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null);
    const [id, cap, hash, exp] = li.children;
    setText(id, r.id);
    setText(cap, r.cap);
    setText(hash, "input_sha256 " + r.pending.hash);
    hash.dataset.hash = r.pending.hash;
    const t = Date.parse(r.pending.expires);
    const left = Math.round((t - now) / 1000);
    exp.dataset.expires = r.pending.expires;
    exp.classList.toggle("expired", left <= 0);
    setText(exp, isNaN(t) ? "expires ?" : left > 0 ? `expires ${r.pending.expires} (in ${left >= 120 ? Math.round(left / 60) + " min" : left + " s"})` : `expired ${r.pending.expires}`);
  });
}

function renderEndpoints(now) {
  const tb = $("endpoints").tBodies[0];
  const nowMin = Math.floor(now / 60000);
  const rows = [];
  for (const [name, e] of [...st.endpoints].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    let n5 = 0, e5 = 0, n60 = 0, e60 = 0, tin = 0, tout = 0, cost = 0, costs = 0;
    for (const [min, b] of e.mins) {
      if (min <= nowMin - 60) { e.mins.delete(min); continue; }
      n60 += b.n; e60 += b.e; tin += b.tin; tout += b.tout; cost += b.cost; costs += b.costs;
      if (min > nowMin - 5) { n5 += b.n; e5 += b.e; }
    }
    if (e.mins.size === 0) { st.endpoints.delete(name); continue; } // nothing in the last hour
    rows.push([name, (n5 / 5).toFixed(1), String(e5), String(n60), String(e60), String(tin), String(tout),
      costs ? cost.toFixed(4) : "—", e.lastError ? `${e.lastError} ${fmtAge(e.lastErrorAt, now)}` : ""]);
  }
  while (tb.rows.length > rows.length) tb.deleteRow(-1);
  rows.forEach((cells, i) => {
    const tr = tb.rows[i] || tb.insertRow();
    tr.dataset.endpoint = cells[0];
    cells.forEach((v, j) => {
      const td = tr.cells[j] || tr.insertCell();
      if (j > 0 && j < 8) td.className = "num";
      setText(td, v);
    });
  });
}

function renderDeadLetters(now) {
  const ul = $("dlq");
  const from = now - st.cfg.historyMinutes * 60000;
  const shown = st.deadLetters.filter((d) => d.at >= from).reverse().slice(0, 50);
  setText($("dlq-count"), String(shown.length));
  $("dlq-count").dataset.count = String(shown.length);
  const note = $("dlq-state");
  setText(note, st.dlqError || (shown.length ? "" : `none in the last ${st.cfg.historyMinutes} min`));
  note.hidden = !note.textContent;
  while (ul.children.length > shown.length) ul.lastElementChild.remove();
  shown.forEach((d, i) => {
    let li = ul.children[i];
    if (!li) {
      li = document.createElement("li");
      for (const c of ["time", "subject", "seq", "reason"]) {
        const s = document.createElement("span"); s.className = c; li.appendChild(s);
      }
      ul.appendChild(li);
    }
    li.dataset.seq = String(d.seq);
    const [time, subject, seq, reason] = li.children;
    setText(time, fmtAge(d.at, now)); time.title = new Date(d.at).toISOString();
    setText(subject, d.subject); subject.title = d.subject;
    setText(seq, `#${d.seq}`); seq.title = `nats stream get ${st.cfg.dlqStream} ${d.seq}`;
    setText(reason, d.reason);
  });
}

function render() {
  if (st.dirty && st.cfg) {
    st.dirty = false;
    const now = Date.now();
    renderList(now);
    renderApprovals(now);
    renderEndpoints(now);
    renderDeadLetters(now);
  }
  requestAnimationFrame(render);
}

// ---- one action: replay from its first event, then follow ------------------------

function closeDetail() {
  if (st.detail) { st.detail.closed = true; st.detail.stop(); st.detail = null; }
  st.selected = "";
  $("detail").hidden = true;
  st.dirty = true;
}

function describe(ev) {
  const e = ev.event || {};
  const d = e.data;
  if (ev.kind === "tool" && d && typeof d === "object") {
    return [e.event, d.tool || d.name || "", d.label || "", d.status || ""].filter(Boolean).join(" · ");
  }
  if (ev.text) return `${e.event || ""} “${ev.text}”`;
  let s = e.event || "";
  if (d != null && ev.kind !== "data") {
    const j = typeof d === "string" ? d : JSON.stringify(d);
    s += " " + (j.length > 160 ? j.slice(0, 160) + "…" : j);
  }
  return s;
}

async function openDetail(id) {
  closeDetail();
  if (!id || !st.js) return;
  st.selected = id;
  st.dirty = true;
  $("detail").hidden = false;
  setText($("detail-id"), id);
  const status = $("detail-status");
  setText(status, "replaying…"); status.dataset.status = "";
  setText($("detail-progress"), "");
  const text = $("detail-text"), list = $("detail-events"), result = $("detail-result");
  text.textContent = ""; list.replaceChildren(); result.textContent = "";
  setText($("detail-events-count"), "");
  // stop ends the iteration and deletes the consumer: the client's ordered consumers
  // would otherwise stay on the server for 5 minutes of inactivity, and the server caps
  // the consumers of a stream.
  const d = { closed: false, it: null, c: null, stop() {
    if (this.it) this.it.stop();
    if (this.c) { const c = this.c; this.c = null; c.delete().catch(() => {}); }
  } };
  st.detail = d;
  const p = st.cfg.prefix;
  let assembled = "", count = 0, pendingText = false;
  const flushText = () => { pendingText = false; if (!d.closed) text.textContent = assembled; };
  try {
    const c = await st.js.consumers.get(st.cfg.outputStream, {
      // <prefix>.*.<id>: its events and results (one filter: see follow).
      filter_subjects: `${p}.*.${id}`, deliver_policy: DeliverPolicy.All,
    });
    d.c = c;
    if (d.closed) { d.c = null; return; }
    d.it = await c.consume();
    if (d.closed) { d.stop(); return; }
    for await (const m of d.it) {
      if (d.closed) break;
      let v;
      try { v = m.json(); } catch { continue; }
      if (m.subject !== `${p}.events.${id}` && m.subject !== `${p}.results.${id}`) continue;
      if (m.subject.startsWith(`${p}.events.`)) {
        count++;
        if (v.text) {
          assembled += v.text;
          if (!pendingText) { pendingText = true; requestAnimationFrame(flushText); }
        }
        const li = document.createElement("li");
        li.dataset.seq = String(v.sequence);
        li.dataset.kind = v.kind || "";
        for (const [cls, val] of [["seq", String(v.sequence)], ["kind", v.kind || ""], ["what", describe(v)]]) {
          const s = document.createElement("span"); s.className = cls; s.textContent = val; li.appendChild(s);
        }
        list.appendChild(li);
        if (list.children.length > MAX_EVENT_ROWS) list.firstElementChild.remove();
        setText($("detail-events-count"), count > MAX_EVENT_ROWS ? `${count} (the last ${MAX_EVENT_ROWS} shown)` : String(count));
        if (status.dataset.status === "") { setText(status, "running"); status.dataset.status = "running"; }
        list.scrollTop = list.scrollHeight;
      } else {
        flushText();
        result.textContent = JSON.stringify(v, null, 2);
        setText(status, v.status); status.dataset.status = v.status;
        if (v.status === "pending_approval") {
          setText($("detail-progress"), `waiting for a decision until ${(v.output || {}).expires_at || "?"}`);
        } else {
          const h = m.headers && m.headers.get(DURATION_HEADER);
          setText($("detail-progress"), `${count} events` + (h ? `, ${h} ms from publish to result` : ""));
        }
        if (TERMINAL.has(v.status)) { d.stop(); break; }
      }
    }
  } catch (err) {
    if (!d.closed) { setText(status, "error: " + (err && err.message || err)); status.dataset.status = "error"; }
  }
}

function onHash() {
  const id = decodeURIComponent(location.hash.slice(1));
  if (id === st.selected) return;
  if (id) openDetail(id); else closeDetail();
}

// ---- start -----------------------------------------------------------------------

function setConn(state, msg) {
  const el = $("conn");
  el.dataset.state = state;
  setText(el, msg);
}

// explainConnectError asks the bridge why the page could not connect (/ui/check: a
// browser does not say why a WebSocket handshake failed) and shows its answer.
async function explainConnectError() {
  const el = $("problem");
  let text;
  try {
    const res = await fetch("check?origin=" + encodeURIComponent(location.origin), { cache: "no-store" });
    if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
    const checks = await res.json();
    const bad = checks.find((c) => c.result !== "accepted") || checks[0];
    text = bad ? bad.message : "no NATS WebSocket server is configured for this page (HERMES_BRIDGE_UI_NATS_URL)";
    el.dataset.result = bad ? bad.result : "";
  } catch (err) {
    text = "the bridge could not check why: " + (err.message || err) + "; see the NATS server's log";
    el.dataset.result = "unknown";
  }
  setText(el, text);
  el.hidden = false;
}

async function main() {
  requestAnimationFrame(render);
  setInterval(() => { st.dirty = true; }, 1000); // ages, rates and expiries move on
  for (const id of ["f-endpoint", "f-capability", "f-status", "f-id"]) $(id).addEventListener("input", () => { st.dirty = true; });
  $("actions").addEventListener("scroll", () => { st.dirty = true; }, { passive: true });
  $("detail-close").addEventListener("click", () => { history.replaceState(null, "", location.pathname); closeDetail(); });
  window.addEventListener("hashchange", onHash);
  // Best effort: delete the page's consumers when it is closed or reloaded.
  window.addEventListener("pagehide", () => {
    if (st.detail) st.detail.stop();
    for (const c of feeds) c.delete().catch(() => {});
  });
  let cfg;
  try {
    const res = await fetch("config.json", { cache: "no-store" });
    if (!res.ok) throw new Error(`config.json: ${res.status} ${await res.text()}`);
    cfg = await res.json();
  } catch (err) {
    setConn("error", String(err.message || err));
    return;
  }
  st.cfg = cfg;
  try {
    const opts = { servers: cfg.servers, inboxPrefix: cfg.inboxPrefix, name: "hermes-bridge-ui",
      maxReconnectAttempts: -1, reconnectTimeWait: 2000 };
    if (cfg.user) { opts.user = cfg.user; opts.pass = cfg.password; }
    st.nc = await wsconnect(opts);
  } catch (err) {
    setConn("error", `cannot connect to ${cfg.servers.join(", ")}: ${err.message || err}`);
    st.connectFailed = true;
    st.dirty = true;
    await explainConnectError();
    return;
  }
  st.js = jetstream(st.nc);
  setConn("connected", `connected to ${st.nc.getServer()}`);
  renderList(Date.now()); // "loading…" at once, before the replay's first message
  (async () => {
    for await (const s of st.nc.status()) {
      if (s.type === "disconnect") setConn("connecting", "disconnected; reconnecting…");
      if (s.type === "reconnect") setConn("connected", `connected to ${st.nc.getServer()}`);
    }
  })();
  st.nc.closed().then((err) => setConn("closed", "connection closed" + (err ? ": " + err.message : "")));
  const p = cfg.prefix, since = new Date(Date.now() - cfg.historyMinutes * 60000).toISOString();
  const loaded = () => { st.loading = false; st.dirty = true; };
  follow(cfg.outputStream, `${p}.results.>`, { deliver_policy: DeliverPolicy.StartTime, opt_start_time: since }, onResult, loaded)
    .catch((err) => { loaded(); setConn("error", "results: " + (err.message || err)); });
  // Events: headers only and from now on, to see which actions are running, what they
  // are (ce-subject) and when their first output came (a replay shows an action's
  // events in full).
  follow(cfg.outputStream, `${p}.events.>`, { deliver_policy: DeliverPolicy.New, headers_only: true }, onEventHeader)
    .catch((err) => setConn("error", "events: " + (err.message || err)));
  // Dead letters of the same window: headers only (the reason, the subject); the
  // original message stays in the stream.
  follow(cfg.dlqStream, `${p}.dlq`, { deliver_policy: DeliverPolicy.StartTime, opt_start_time: since, headers_only: true }, onDeadLetter)
    .catch((err) => { st.dlqError = `cannot read ${cfg.dlqStream}: ${err.message || err}`; st.dirty = true; });
  onHash();
}

main();
