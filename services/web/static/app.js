// FIX Lab page. Every value from the wire or a visitor goes into the page as text (textContent),
// never as HTML. Messages are appended one by one; nothing re-renders the whole wire.
"use strict";

const $ = (id) => document.getElementById(id);
const MAX_WIRE = 1500; // messages kept on the page; older ones are removed from the top

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

const S = {
  ws: null, hello: null, state: null, live: false, heartbeat: 0, expiresAt: null,
  lastClientSent: null, silentSince: null, lastSeqShown: 0, wireCount: 0, fills: 0,
  // Reconnecting: the session this page follows (lab_id, the token to resume it, the last wire
  // record shown) and how long to wait before the next attempt.
  resume: null, lastN: 0, retryMs: 0,
  // The trading day: each book's phase view (type "phase"), and when its countdown was received.
  phases: {},
};

// ---------------------------------------------------------------- connection
function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${proto}//${location.host}/ws`);
  S.ws = ws;
  ws.onopen = () => {
    setConn("connected", "on");
    if (S.retryMs) {  // back after the connection closed: follow our session again, if it was live
      S.retryMs = 0;
      $("banner").hidden = true;
      if (S.resume && S.live) send({ op: "resume", lab_id: S.resume.lab_id, token: S.resume.token, last_n: S.lastN });
      else notice("Reconnected to the lab.", "info");
    }
  };
  ws.onmessage = (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch (e) { return; }
    handle(msg);
  };
  ws.onclose = (ev) => {
    if (ev.code === 1008) {  // refused (a page limit): reconnecting would be refused again
      setConn("refused", "off");
      S.live = false;
      updateButtons();
      return;
    }
    // The web restarted, the network dropped, or this page fell behind: reconnect by ourselves,
    // then resume our session (see ws.onopen); the session itself lives on at the exchange.
    setConn("reconnecting", "off");
    S.retryMs = Math.min(8000, S.retryMs ? S.retryMs * 2 : 500);
    banner(`The connection to the lab closed (${ev.code}${ev.reason ? ": " + ev.reason : ""}). Reconnecting in ${(S.retryMs / 1000).toFixed(1)} s…`, "error");
    setTimeout(connect, S.retryMs);
  };
}

function send(obj) {
  if (!S.ws || S.ws.readyState !== WebSocket.OPEN) { notice("Not connected to the lab: reload the page.", "error"); return; }
  S.ws.send(JSON.stringify(obj));
}

function setConn(text, cls) { const c = $("conn"); c.textContent = text; c.className = `pill ${cls}`; }

function banner(text, level) {
  const b = $("banner"); b.textContent = text; b.className = `banner ${level || "info"}`; b.hidden = false;
}

function notice(text, level) {
  const box = $("notices");
  const n = el("div", `notice ${level || "info"}`, text);
  box.prepend(n);
  while (box.childElementCount > 6) box.lastElementChild.remove();
  setTimeout(() => n.classList.add("old"), 8000);
}

// ---------------------------------------------------------------- dispatch
function handle(m) {
  switch (m.type) {
    case "hello": onHello(m); break;
    case "wire": onWire(m); break;
    case "state": onState(m); break;
    case "notice": notice(m.text, m.level); break;
    case "error": onError(m); break;
    case "fill": onFill(m); break;
    case "depth": onDepth(m); break;
    case "md_book": onMdBook(m); break;
    case "trade": onTrade(m, true); break;
    case "phase": onPhase(m); break;
    case "tape": (m.trades || []).forEach((t) => onTrade(t, false)); break;
    case "logon_sent":
      S.resume = { lab_id: m.lab_id, token: m.resume_token }; S.lastN = 0;
      setStatus("connecting", "connecting…"); break;
    case "resumed": notice("Reconnected: following your FIX session again (what it did meanwhile is on the wire).", "info"); break;
    default: break;
  }
}

function onError(m) {
  if (m.code === "page_limit") banner(m.text, "error");
  notice(m.text, "error");
}

function onHello(m) {
  S.hello = m;
  const sel = $("o-symbol");
  sel.replaceChildren();
  for (const i of m.instruments) {
    const o = el("option", null, i.symbol); o.value = i.symbol; sel.append(o);
    ensureBook(i.symbol);
  }
  const L = m.limits;
  $("limits-text").textContent = `${L.order_burst} at once, then ${L.order_rate}/s`;
  $("foot-limits").textContent = `${L.pages_per_address} pages per address and ${L.pages_total} across the site; sessions end after ${L.session_minutes} minutes; up to ${L.order_burst} orders at once and ${L.order_rate} per second after that; ${L.open_orders} open orders per session.`;
  sel.onchange = () => { updateBand(); updateTicket(); };
  updateBand();
  updateTicket();
  const which = $("cancel-all-symbol");
  which.replaceChildren(el("option", null, "all instruments"));
  which.firstChild.value = "";
  for (const i of m.instruments) { const o = el("option", null, i.symbol); o.value = i.symbol; which.append(o); }
}

function instrument(symbol) { return (S.hello ? S.hello.instruments : []).find((i) => i.symbol === symbol); }

function updateBand() {
  const i = instrument($("o-symbol").value);
  if (!i) return;
  $("o-band").textContent = `${i.symbol}: reference ${i.reference}, tick ${i.tick}, accepted ${i.low} – ${i.high}, 1 to 1,000 units`;
  if (!$("o-price").value) $("o-price").placeholder = i.reference;
}

// ---------------------------------------------------------------- the wire
const SUMMARY_TAGS = {
  A: [108, 98, 141], 0: [112], 1: [112], 2: [7, 16], 3: [45, 373, 58], 4: [123, 36], 5: [58],
  D: [11, 55, 54, 38, 40, 44, 99, 59], F: [11, 41, 55], G: [11, 41, 38, 44], 8: [150, 11, 55, 54, 40, 99, 32, 31, 151, 58], 9: [11, 41, 102, 58],
  H: [11, 55, 790], q: [530, 55], r: [530, 531, 533, 58], V: [263, 264, 55], W: [55, 268], X: [268], Y: [262, 281, 58],
};

// The first value of a tag anywhere in the message (groups included).
function firstField(m, t) { return m.fields.find((x) => x[0] === t); }

function summary(m) {
  const want = SUMMARY_TAGS[m.msg_type] || [];
  const parts = [];
  for (const t of want) {
    const f = firstField(m, t);
    if (!f || (t === 40 && f[2] === "2")) continue;  // a limit order's OrdType goes without saying
    parts.push(f[3] ? `${f[1]} ${f[3]}` : `${f[1]} ${f[2]}`);
  }
  if (m.msg_type === "X" || m.msg_type === "W") {
    // What the entries say, e.g. "Bid New 99.50 x 10": the group is the message.
    const g = (m.tree || []).find((n) => !Array.isArray(n) && n.group && n.group[0] === 268);
    if (g) {
      const said = g.entries.slice(0, 4).map((e) => {
        const v = (t) => { const f = e.find((x) => Array.isArray(x) && x[0] === t); return f ? (f[3] || f[2]) : ""; };
        return [v(269), v(279), v(270), v(271) ? `x ${v(271)}` : ""].filter(Boolean).join(" ");
      });
      if (g.entries.length > 4) said.push(`+${g.entries.length - 4} more`);
      parts.push(said.join("; "));
    }
  }
  return parts.join(" · ");
}

// Wire messages are rendered in batches, one layout per batch: a busy wire (hundreds of messages
// a second) never reads layout once per message.
let pendingWire = [];
function onWire(m) {
  if (S.resume && m.n > S.lastN) S.lastN = m.n;
  if (m.source === "client" && !m.withheld) S.lastClientSent = Date.now();
  if (m.source === "exchange") S.lastExchangeSent = Date.now();
  pendingWire.push(m);
  if (pendingWire.length === 1) setTimeout(flushWire, 16);
}

function flushWire() {
  const batch = pendingWire;
  pendingWire = [];
  const empty = $("wire-empty");
  if (empty) empty.remove();
  const wire = $("wire");
  const atBottom = wire.scrollHeight - wire.scrollTop - wire.clientHeight < 40;
  const frag = document.createDocumentFragment();
  for (const m of batch) frag.append(wireRow(m));
  wire.append(frag);
  S.wireCount += batch.length;
  while (S.wireCount > MAX_WIRE) { wire.firstElementChild.remove(); S.wireCount--; }
  if (atBottom) wire.scrollTop = wire.scrollHeight;
}

function wireRow(m) {
  const hideHb = $("hide-hb").checked;
  const row = el("div", `msg ${m.source} ${m.category}${m.withheld ? " withheld" : ""}${m.problems.length ? " problem" : ""}`);
  row.dataset.type = m.msg_type;
  if (hideHb && m.msg_type === "0") row.hidden = true;
  const card = el("div", "card");
  card.tabIndex = 0;
  const head = el("div", "head");
  head.append(el("span", "arrow", m.source === "client" ? "→" : "←"));
  head.append(el("span", "name", m.msg_name));
  head.append(el("span", "mt mono", `35=${m.msg_type}`));
  if (m.seq !== null) head.append(el("span", "seq mono", `#${m.seq}`));
  const time = new Date(m.ts / 1e6);
  head.append(el("span", "time mono", time.toISOString().slice(11, 23)));
  card.append(head);
  const sum = summary(m);
  if (sum) card.append(el("div", "sum", sum));
  if (m.withheld) card.append(el("div", "tag-withheld", "withheld by the tap: the exchange never saw this"));
  if (m.problems.length) card.append(el("div", "tag-problem", m.problems.join("; ")));
  // Details are built on first open only: a busy wire stays cheap.
  card.addEventListener("click", (ev) => {
    if (ev.target.closest(".details")) return;
    toggleDetails(card, m);
  });
  card.addEventListener("keydown", (ev) => { if (ev.key === "Enter") toggleDetails(card, m); });
  row.append(card);
  return row;
}

function toggleDetails(card, m) {
  let d = card.querySelector(".details");
  if (d) { d.hidden = !d.hidden; return; }
  d = el("div", "details");
  const table = el("table", "fields");
  let section = null;
  const fieldRow = ([tag, name, value, meaning]) => {
    const tr = el("tr", name ? "" : "unknown");
    tr.append(el("td", "tag mono", tag === null ? "?" : tag));
    tr.append(el("td", "fname", name || `(not in FIX ${S.version || "4.4"})`));
    const v = el("td", "val mono", value);
    if (meaning) v.append(el("span", "meaning", ` ${meaning}`));
    tr.append(v);
    return tr;
  };
  // A repeating group: its count field, then each entry as a box of its own (nested groups inside).
  const groupRow = (g) => {
    const tr = fieldRow(g.group);
    tr.classList.add("group-count");
    const box = el("tr", "group-row");
    const td = el("td"); td.colSpan = 3;
    const entries = el("div", "group");
    entries.dataset.tag = g.group[0];
    g.entries.forEach((entry, i) => {
      const e = el("div", "entry");
      e.append(el("div", "entry-head", `${g.group[1] || g.group[0]} entry ${i + 1} of ${g.entries.length}`));
      const t = el("table", "fields");
      for (const n of entry) t.append(...(Array.isArray(n) ? [fieldRow(n)] : groupRow(n)));
      e.append(t);
      entries.append(e);
    });
    td.append(entries); box.append(td);
    return [tr, box];
  };
  for (const n of (m.tree || m.fields)) {
    const sec = Array.isArray(n) ? n[4] : n.group[4];
    if (sec !== section) {
      section = sec;
      const tr = el("tr", "section"); const th = el("th", null, sec); th.colSpan = 3; tr.append(th); table.append(tr);
    }
    if (Array.isArray(n)) table.append(fieldRow(n));
    else table.append(...groupRow(n));
  }
  d.append(table);
  const rawBtn = el("button", "link", "show raw");
  const raw = el("pre", "raw mono", m.raw);
  raw.hidden = true;
  rawBtn.type = "button";
  rawBtn.addEventListener("click", (ev) => { ev.stopPropagation(); raw.hidden = !raw.hidden; rawBtn.textContent = raw.hidden ? "show raw" : "hide raw"; });
  d.append(rawBtn, raw);
  card.append(d);
}


// ---------------------------------------------------------------- session state
function setStatus(kind, text) { const s = $("status"); s.textContent = text; s.className = `pill ${kind}`; }

function divider(text) {
  if (pendingWire.length) flushWire();
  const wire = $("wire");
  const empty = $("wire-empty");
  if (empty) empty.remove();
  wire.append(el("div", "divider", text));
  S.wireCount++;
  wire.scrollTop = wire.scrollHeight;
}

function onState(m) {
  const before = S.state && S.state.lab_id === m.lab_id ? S.state.status : null;
  if (!S.state || S.state.lab_id !== m.lab_id) resetSessionControls();
  S.state = m;
  S.live = !(m.status === "ended" || m.status === "logged_out");
  if (m.status !== before) {
    if (m.status === "logged_on") divider(`${m.comp_id} logged on · heartbeat every ${m.heartbeat_s} s`);
    else if (!S.live && before !== "ended" && before !== "logged_out") {
      divider(`session ${m.status.replace("_", " ")}${m.text ? ": " + m.text : ""}`);
      notice(`Your FIX session ${m.status.replace("_", " ")}${m.text ? ": " + m.text : ""}. Log on again to start a new one.`, "info");
    }
  }
  const labels = { connecting: "connecting…", logged_on: "logged on", logged_out: "logged out", ended: "ended" };
  setStatus(m.status === "logged_on" ? "on" : (S.live ? "connecting" : "off"), labels[m.status] || m.status);
  $("st-comp").textContent = m.comp_id || "–";
  $("st-gw").textContent = m.gateway_id || "–";
  $("client-id").textContent = m.comp_id || "";
  const n = (v) => (v === undefined || v === null || v === 0 ? "–" : v);
  $("st-cs").textContent = n(m.next_sender_seq); $("st-ct").textContent = n(m.next_target_seq);
  $("st-es").textContent = n(m.exchange_next_sender_seq); $("st-et").textContent = n(m.exchange_next_target_seq);
  S.heartbeat = m.heartbeat_s || 0;
  $("st-hb").textContent = S.heartbeat ? `every ${S.heartbeat} s; silence gives up after ~${(2.4 * S.heartbeat).toFixed(1)} s` : "–";
  S.expiresAt = (m.expires_in_s !== null && m.expires_in_s !== undefined && S.live) ? Date.now() + m.expires_in_s * 1000 : null;
  if (m.silent && !S.silentSince) S.silentSince = Date.now();
  if (!m.silent) S.silentSince = null;
  $("st-text").textContent = m.text || "";
  $("b-drop").textContent = m.drop_armed ? "Drop armed: next message" : "Drop next message";
  renderOrders(m.orders || []);
  updateButtons();
  tick();
}

// A new session starts with the sessions file's self-trade prevention and no market data.
function resetSessionControls() {
  $("stp-mode").value = "off";
  for (const symbol of Object.keys(books)) setSubscribed(symbol, false);
}

function updateButtons() {
  const st = S.state, live = S.live, on = live && st && st.status === "logged_on";
  $("b-logon").disabled = live;
  $("fix-version").disabled = live;
  $("b-logout").disabled = !live;
  $("b-drop").disabled = !on || (st && st.drop_armed);
  $("b-silent").disabled = !on || (st && st.silent);
  $("b-talk").disabled = !live || !(st && st.silent);
  $("b-send").disabled = !on || !tradable($("o-symbol").value);
  $("b-cancel-all").disabled = !on;
  $("stp-mode").disabled = !on;
  for (const b of document.querySelectorAll(".md-toggle")) b.disabled = !on;
}

function fmt(s) { s = Math.max(0, Math.round(s)); return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`; }

function tick() {
  const left = S.expiresAt ? (S.expiresAt - Date.now()) / 1000 : null;
  $("st-left").textContent = left === null ? "–" : `${fmt(left)}${left < 60 ? " — the exchange logs you out at 0:00" : ""}`;
  $("st-left").className = left !== null && left < 60 ? "mono warn" : "mono";
  const ago = (t) => (t ? `${((Date.now() - t) / 1000).toFixed(1)} s ago` : "–");
  $("st-heard").textContent = S.live ? `you → exchange ${ago(S.lastClientSent)} · exchange → you ${ago(S.lastExchangeSent)}` : "–";
  const box = $("silence");
  if (S.state && S.state.silent && S.live && S.heartbeat) {
    const base = S.lastClientSent || S.silentSince;
    const since = (Date.now() - base) / 1000;
    const hb = S.heartbeat, giveUp = 2.4 * hb;
    let phase;
    if (since < hb) phase = `the exchange expects your heartbeat in ${(hb - since).toFixed(1)} s`;
    else if (since < 1.2 * hb) phase = `heartbeat overdue: the exchange will send a TestRequest in ${(1.2 * hb - since).toFixed(1)} s`;
    else phase = "the exchange sent a TestRequest and waits for the answer";
    box.textContent = `Silent for ${since.toFixed(1)} s: ${phase}; it gives up in about ${Math.max(0, giveUp - since).toFixed(1)} s.`;
    box.hidden = false;
    box.style.setProperty("--p", `${Math.min(100, (since / giveUp) * 100)}%`);
  } else box.hidden = true;
  for (const symbol of Object.keys(S.phases)) showCountdown(symbol);
}
setInterval(tick, 200);

// ---------------------------------------------------------------- orders and fills
function renderOrders(orders) {
  const tb = $("orders");
  tb.replaceChildren();
  const open = orders.filter((o) => o.leaves_qty > 0);
  const max = S.state ? S.state.max_open_orders : 20;
  $("open-count").textContent = S.live ? `${open.length} open of ${max} allowed` : "session over: the exchange cancelled what was resting";
  $("open-count").className = S.live && open.length >= max ? "small warn" : "muted small";
  for (const o of orders) {
    const tr = el("tr", o.side);
    tr.append(el("td", "mono", o.clordid), el("td", null, o.symbol), el("td", o.side, o.side),
      el("td", "mono num", o.price || "–"), el("td", "mono num", o.qty), el("td", "mono num", o.cum_qty), el("td", null, o.status));
    const act = el("td", "act");
    if (S.live) {
      const st = el("button", "small-btn status-btn", "status");
      st.title = "OrderStatusRequest (35=H): the exchange answers with an ExecutionReport, ExecType I";
      st.addEventListener("click", () => send({ op: "status", clordid: o.clordid }));
      act.append(st);
    }
    if (o.leaves_qty > 0 && S.live) {
      const c = el("button", "small-btn", "cancel");
      c.addEventListener("click", () => send({ op: "cancel", clordid: o.clordid }));
      const r = el("button", "small-btn", "replace");
      r.addEventListener("click", () => replaceForm(tr, o));
      act.append(c, r);
    }
    tr.append(act);
    tb.append(tr);
  }
}

function replaceForm(tr, o) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains("replace-row")) { next.remove(); return; }
  const row = el("tr", "replace-row");
  const td = el("td"); td.colSpan = 8;
  const px = el("input"); px.value = o.price; px.setAttribute("aria-label", "new price");
  const qty = el("input"); qty.value = o.qty; qty.setAttribute("aria-label", "new quantity");
  const go = el("button", "small-btn primary", "send replace");
  go.addEventListener("click", () => { send({ op: "replace", clordid: o.clordid, price: px.value.trim(), qty: qty.value.trim() }); row.remove(); });
  td.append(el("span", "muted small", `replace ${o.clordid}: price `), px, el("span", "muted small", " qty "), qty, go);
  row.append(td);
  tr.after(row);
}

function onFill(f) {
  const ul = $("fills");
  if (!S.fills) ul.replaceChildren();
  S.fills++;
  const li = el("li", f.side);
  li.append(el("span", `side ${f.side}`, f.side === "buy" ? "bought" : "sold"), el("span", "mono", ` ${f.last_qty} ${f.symbol} @ ${f.last_px}`),
    el("span", "muted small", ` ${f.clordid} · ${f.leaves_qty} left`));
  ul.prepend(li);
  while (ul.childElementCount > 30) ul.lastElementChild.remove();
}

// ---------------------------------------------------------------- books and tape
const books = {};
function ladder() {
  const t = el("table", "ladder");
  const head = el("tr"); head.append(el("th", null, "orders"), el("th", null, "qty"), el("th", null, "price"));
  const thead = el("thead"); thead.append(head);
  const asks = el("tbody", "asks"), spread = el("tbody", "spread"), bids = el("tbody", "bids");
  t.append(thead, asks, spread, bids);
  return { table: t, asks, bids, spread };
}

// Per instrument, side by side: the matcher's book (the market feed's depth) and the book your own
// session's market data (W, then X) rebuilds. They agree when no update was lost or doubled.
function ensureBook(symbol) {
  if (books[symbol]) return books[symbol];
  const pair = el("div", "book-pair");
  pair.dataset.symbol = symbol;
  const head = el("div", "pair-head");
  head.append(el("h3", null, symbol));
  const phase = el("span", "pill phase", "Continuous");
  phase.title = "The instrument's trading phase (the matcher's; SecurityStatus 326 on FIX)";
  head.append(phase);
  const toggle = el("button", "small-btn md-toggle", "subscribe");
  toggle.type = "button";
  toggle.disabled = !(S.live && S.state && S.state.status === "logged_on");
  toggle.title = "MarketDataRequest (35=V): snapshot + updates, full depth, bids, offers and trades";
  toggle.addEventListener("click", () => {
    const b = books[symbol];
    send({ op: b.subscribed ? "md_unsubscribe" : "md_subscribe", symbol });
    if (b.subscribed) setSubscribed(symbol, false);
    else { b.subscribed = true; toggle.textContent = "unsubscribe"; b.mdNote.textContent = "waiting for the snapshot (W)…"; }
  });
  head.append(toggle);
  pair.append(head);
  const indicative = el("div", "indicative small");
  indicative.hidden = true;
  pair.append(indicative);
  const box = el("div", "book matcher");
  box.append(el("div", "book-label muted small", "the matcher's book"));
  const m = ladder();
  box.append(m.table);
  const mdBox = el("div", "mdbook");
  mdBox.append(el("div", "book-label muted small", "your market data (W + X)"));
  const md = ladder();
  const mdNote = el("div", "muted small md-note", "not subscribed");
  mdBox.append(md.table, mdNote);
  const agree = el("div", "agree small");
  pair.append(el("div", "pair", null));
  pair.lastChild.append(box, mdBox);
  pair.append(agree);
  $("books").append(pair);
  books[symbol] = { ...m, md, mdNote, toggle, agree, phase, indicative, subscribed: false, depth: null, mdLevels: null };
  return books[symbol];
}

function setSubscribed(symbol, on) {
  const b = books[symbol];
  if (!b) return;
  b.subscribed = on;
  b.toggle.textContent = on ? "unsubscribe" : "subscribe";
  if (!on) {
    b.mdLevels = null;
    b.md.asks.replaceChildren(); b.md.bids.replaceChildren(); b.md.spread.replaceChildren();
    b.mdNote.textContent = "not subscribed";
    b.agree.textContent = "";
  }
}

function ladderRow(level, side, maxQty, symbol) {
  const [price, qty, n] = level;
  const tr = el("tr", side);
  const bar = el("td", "bar mono num", qty);
  bar.style.setProperty("--w", `${Math.round((qty / maxQty) * 100)}%`);
  const p = el("td", "px mono num", price);
  p.title = "use this price";
  p.addEventListener("click", () => { $("o-symbol").value = symbol; updateBand(); $("o-price").value = price; });
  tr.append(el("td", "mono num muted", n), bar, p);
  return tr;
}

function renderLadder(lad, m) {
  const levels = 6;
  const asks = m.asks.slice(0, levels), bids = m.bids.slice(0, levels);
  const maxQty = Math.max(1, ...asks.map((l) => l[1]), ...bids.map((l) => l[1]));
  lad.asks.replaceChildren(...asks.slice().reverse().map((l) => ladderRow(l, "ask", maxQty, m.symbol)));
  lad.bids.replaceChildren(...bids.map((l) => ladderRow(l, "bid", maxQty, m.symbol)));
  const tr = el("tr");
  let text = "empty book";
  if (asks.length && bids.length) text = `spread ${(Number(asks[0][0]) - Number(bids[0][0])).toFixed(2)}`;
  else if (asks.length || bids.length) text = "one-sided";
  const td = el("td", "muted small", text); td.colSpan = 3; tr.append(td);
  lad.spread.replaceChildren(tr);
}

function onDepth(m) {
  const b = ensureBook(m.symbol);
  b.depth = m;
  renderLadder(b, m);
  compareBooks(b);
}

function onMdBook(m) {
  const b = ensureBook(m.symbol);
  if (!m.subscribed) { setSubscribed(m.symbol, false); return; }
  if (!b.subscribed) setSubscribed(m.symbol, true);
  b.mdLevels = m;
  renderLadder(b.md, m);
  const n = m.bids.length + m.asks.length;
  b.mdNote.textContent = `${n} price level${n === 1 ? "" : "s"} from your session's W and X`;
  compareBooks(b);
}

// Both books, every level the market feed carries (not only the 6 shown): the same, or not. The
// feed's depth holds the matcher's best FIXLAB_MATCHER_DEPTH_LEVELS (10) levels a side; your
// market data holds them all, so a full side of the feed is compared with as many of yours.
const FEED_LEVELS = 10;
function compareBooks(b) {
  if (!b.mdLevels || !b.depth) { b.agree.textContent = ""; return; }
  const cut = (mine, feed) => (feed.length >= FEED_LEVELS ? mine.slice(0, feed.length) : mine);
  const same = JSON.stringify([cut(b.mdLevels.bids, b.depth.bids), cut(b.mdLevels.asks, b.depth.asks)])
    === JSON.stringify([b.depth.bids, b.depth.asks]);
  b.agree.textContent = same ? "the two books agree" : "the books differ (an update is in flight)";
  b.agree.className = `agree small ${same ? "same" : "differ"}`;
}

function onTrade(t, live) {
  const ol = $("tape");
  const li = el("li", `${t.auction ? "auction" : t.aggressor}${live ? " fresh" : ""}`);
  const time = new Date(t.ts / 1e6).toISOString().slice(11, 19);
  li.append(el("span", "mono muted", time), el("span", null, ` ${t.symbol} `), el("span", "mono", `${t.qty} @ ${t.price}`));
  if (t.auction) li.append(el("span", "auction-tag small", " auction: the uncross, one price for all"));
  else li.append(el("span", "muted small", t.aggressor === "buy" ? " buyer took" : " seller hit"));
  ol.prepend(li);
  while (ol.childElementCount > 40) ol.lastElementChild.remove();
}

// ---------------------------------------------------------------- the trading day
// What each phase takes (docs/auction-engine.md): no orders while closed; in a call no IOC or FOK
// (nothing trades until the auction), At the Opening in the opening call only, At the Close in the
// closing call only; stops are Day or GTC. FIX 4.2 has no At the Close (59=7 came with FIX 4.3).
const PHASE_TIFS = {
  CLOSED: [], PRE_OPEN: ["day", "gtc", "opg"], CONTINUOUS: ["day", "gtc", "ioc", "fok"],
  PRE_CLOSE: ["day", "gtc", "atc"], HALTED: ["day", "gtc"],
};
const STOP_TIFS = ["day", "gtc"];

function phaseOf(symbol) { const p = S.phases[symbol]; return p ? p.phase : "CONTINUOUS"; }
function tradable(symbol) { return (PHASE_TIFS[phaseOf(symbol)] || []).length > 0; }
function sessionVersion() { return S.live && S.version ? S.version : $("fix-version").value; }

function allowedTifs(symbol, type) {
  let tifs = PHASE_TIFS[phaseOf(symbol)] || [];
  if (type === "stop" || type === "stop_limit") tifs = tifs.filter((t) => STOP_TIFS.includes(t));
  if (sessionVersion() === "4.2") tifs = tifs.filter((t) => t !== "atc");
  return tifs;
}

// Offer only the order types and TimeInForce values the instrument's phase and the session's FIX
// version allow; show the price and stop price fields the order type needs.
function updateTicket() {
  const symbol = $("o-symbol").value;
  const open = tradable(symbol);
  for (const o of $("o-type").options) { o.disabled = !open; }
  const type = $("o-type").value;
  const tifs = allowedTifs(symbol, type);
  const sel = $("o-tif");
  for (const o of sel.options) { o.disabled = !tifs.includes(o.value); o.hidden = o.disabled; }
  if (sel.selectedOptions.length && sel.selectedOptions[0].disabled && tifs.length) sel.value = tifs[0];
  $("o-price").hidden = !(type === "limit" || type === "stop_limit");
  $("o-stop").hidden = !(type === "stop" || type === "stop_limit");
  const p = S.phases[symbol];
  const note = $("o-phase");
  if (!open) { note.textContent = `${symbol} is closed: the exchange takes no new orders until its next opening call.`; note.className = "small refused"; }
  else if (p && p.call) { note.textContent = `${symbol} is in its ${p.label.toLowerCase()}: orders wait for the uncross (no IOC or FOK).`; note.className = "small"; }
  else { note.textContent = ""; note.className = "small"; }
  updateButtons();
}

function onPhase(m) {
  const b = ensureBook(m.symbol);
  m.receivedAt = Date.now();
  S.phases[m.symbol] = m;
  b.phase.textContent = m.label;
  b.phase.dataset.phase = m.phase;
  b.phase.className = `pill phase${m.call ? " call" : ""}${m.phase === "CLOSED" ? " closed" : ""}${m.phase === "HALTED" ? " halted" : ""}`;
  b.phase.title = m.reason ? `${m.label}: ${m.reason}` : m.label;
  const box = b.indicative;
  box.replaceChildren();
  if (m.call) {
    const ind = m.indicative;
    if (ind && ind.price !== null && ind.volume > 0) {
      box.append(el("span", null, "indicative uncross "), el("span", "mono ind-price", ind.price),
        el("span", null, " · volume "), el("span", "mono ind-volume", ind.volume),
        el("span", null, " · imbalance "), el("span", "mono ind-imbalance",
          ind.imbalance_qty ? `${ind.imbalance_qty} ${ind.imbalance_side}` : "none"));
    } else box.append(el("span", "muted", "no indicative price yet: nothing crosses"));
    box.append(el("span", "countdown"));
    box.hidden = false;
  } else box.hidden = true;
  showCountdown(m.symbol);
  if (m.symbol === $("o-symbol").value) updateTicket();
}

function showCountdown(symbol) {
  const m = S.phases[symbol], b = books[symbol];
  if (!m || !b) return;
  const c = b.indicative.querySelector(".countdown");
  if (!c) return;
  if (m.uncross_in_s === null || m.uncross_in_s === undefined) { c.textContent = ""; return; }
  const left = m.uncross_in_s - (Date.now() - m.receivedAt) / 1000;
  c.textContent = left > 0 ? ` · uncross in ${fmt(left)}` : " · uncross due now";
}

// ---------------------------------------------------------------- controls
function wire() {
  $("b-logon").addEventListener("click", () => {
    S.version = $("fix-version").value;  // the session's version: chosen at logon, fixed for its life
    send({ op: "logon", version: S.version });
  });
  $("b-logout").addEventListener("click", () => send({ op: "logout" }));
  $("b-drop").addEventListener("click", () => send({ op: "drop_next" }));
  $("b-silent").addEventListener("click", () => send({ op: "silent" }));
  $("b-talk").addEventListener("click", () => send({ op: "talk" }));
  $("order-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const side = document.querySelector("input[name=side]:checked").value;
    const type = $("o-type").value;
    const order = { op: "order", symbol: $("o-symbol").value, side, ord_type: type, qty: $("o-qty").value.trim(), tif: $("o-tif").value };
    if (type === "limit" || type === "stop_limit") order.price = $("o-price").value.trim() || $("o-price").placeholder;
    if (type === "stop" || type === "stop_limit") order.stop_px = $("o-stop").value.trim();
    send(order);
  });
  $("b-cancel-all").addEventListener("click", () => {
    const symbol = $("cancel-all-symbol").value;
    send(symbol ? { op: "mass_cancel", symbol } : { op: "mass_cancel" });
  });
  $("stp-mode").addEventListener("change", (ev) => send({ op: "stp", mode: ev.target.value }));
  $("o-type").addEventListener("change", updateTicket);
  $("fix-version").addEventListener("change", updateTicket);
  $("hide-hb").addEventListener("change", (ev) => {
    for (const r of document.querySelectorAll('#wire .msg[data-type="0"]')) r.hidden = ev.target.checked;
  });
  window.addEventListener("pagehide", () => { if (S.ws) S.ws.close(1000, "page closed"); });
  connect();
}

wire();
